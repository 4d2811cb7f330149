/*
 * Saving: IR -> protobuf-c "shell" structs -> streamed to a temp file -> fsync -> rename.
 *
 * The shells are fresh ModelProto/GraphProto/NodeProto/... structs allocated on a scratch arena
 * that point at the IR's strings and arrays and, for everything the IR did not change, at the
 * structs unpacked at load time (unchanged TensorProtos, TypeProtos, FunctionProtos, training
 * info, unknown fields). Nothing is deep-copied, and protobuf_c_message_pack_to_buffer streams
 * the result through a small write buffer, so saving needs little memory beyond the model.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/size.h"
#include "core/arena.h"
#include "onnx/onnx_io.h"

static uint64_t proto_limit = QP_ONNX_PROTO_LIMIT;

void qp_onnx_set_proto_limit_for_testing(uint64_t limit) {
    proto_limit = limit ? limit : QP_ONNX_PROTO_LIMIT;
}

struct saver {
    struct qp_arena *a;
    const struct qp_model *m;
    int externalize; /* initializers of >= min_bytes go to the data file */
    size_t min_bytes;
    char *location; /* data file name as written into the model */
    struct qp_onnx_chunk *chunks;
    size_t n_chunks, cap_chunks;
    uint64_t data_size; /* bytes the data file will hold */
};

static enum qp_status nomem(struct qp_error *err) {
    return qp_error_set(err, QP_ERR_NOMEM, "out of memory");
}

/* The string to write for an IR string whose origin field held `orig`: the origin's own pointer
 * when the text is unchanged (so an absent field stays absent and "" stays ""), else the IR's. */
static char *keep_str(const char *ir, const char *orig) {
    if (!strcmp(ir ? ir : "", orig ? orig : "")) return (char *)orig;
    return (char *)ir;
}

static void copy_unknown(ProtobufCMessage *dst, const void *origin) {
    if (!origin) return;
    const ProtobufCMessage *o = origin;
    dst->n_unknown_fields = o->n_unknown_fields;
    dst->unknown_fields = o->unknown_fields;
}

static void *shell_alloc(struct saver *s, const void *init, size_t size) {
    void *p = qp_arena_alloc(s->a, size);
    if (p) memcpy(p, init, size);
    return p;
}

/* A new message struct on the scratch arena, initialized with its protobuf-c INIT value. */
#define NEW(s, type, init) ((type *)shell_alloc((s), &(type)init, sizeof(type)))

/* ---- tensors ------------------------------------------------------------------------------ */

static enum qp_status add_chunk(struct saver *s, const void *data, size_t n, uint64_t *offset,
                                struct qp_error *err) {
    /* Large tensors start on a page boundary so readers can map them; small ones on 64 bytes. */
    uint64_t align = n >= ((size_t)1 << 20) ? 4096 : 64;
    uint64_t off = (s->data_size + align - 1) / align * align;
    if (off < s->data_size || off > UINT64_MAX - n) return nomem(err);
    if (s->n_chunks == s->cap_chunks) {
        size_t cap = s->cap_chunks ? s->cap_chunks * 2 : 64;
        struct qp_onnx_chunk *c = qp_realloc_n(s->chunks, cap, sizeof *c);
        if (!c) return nomem(err);
        s->chunks = c;
        s->cap_chunks = cap;
    }
    s->chunks[s->n_chunks++] = (struct qp_onnx_chunk){data, n, off};
    s->data_size = off + n;
    *offset = off;
    return QP_OK;
}

static Onnx__StringStringEntryProto *kv_shell(struct saver *s, const char *k, const char *v) {
    Onnx__StringStringEntryProto *e =
        NEW(s, Onnx__StringStringEntryProto, ONNX__STRING_STRING_ENTRY_PROTO__INIT);
    if (!e) return NULL;
    e->key = (char *)k;
    e->value = (char *)v;
    return e;
}

/* 1 when `t` still holds exactly what its origin TensorProto holds inline. */
static int origin_unchanged(const struct qp_tensor *t, const Onnx__TensorProto *o) {
    if (o->has_data_location && o->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL)
        return 0;
    if (!o->has_data_type || o->data_type != (int32_t)t->dtype) return 0;
    if (strcmp(t->name ? t->name : "", o->name ? o->name : "")) return 0;
    if ((size_t)t->rank != o->n_dims) return 0;
    if (t->dims != o->dims)
        for (int i = 0; i < t->rank; i++)
            if (t->dims[i] != o->dims[i]) return 0;
    if (o->has_raw_data && (t->data != o->raw_data.data || t->nbytes != o->raw_data.len)) return 0;
    return 1;
}

static enum qp_status tensor_shell(struct saver *s, const struct qp_tensor *t, int may_externalize,
                                   Onnx__TensorProto **out, struct qp_error *err) {
    const Onnx__TensorProto *o = t->origin;
    const char *name = t->name && *t->name ? t->name : "(unnamed)";
    int go_external = may_externalize && s->externalize && t->dtype != QP_DTYPE_STRING &&
                      t->nbytes > 0 && t->nbytes >= s->min_bytes;
    if (o && !go_external && origin_unchanged(t, o)) {
        *out = (Onnx__TensorProto *)o;
        return QP_OK;
    }
    Onnx__TensorProto *tp = NEW(s, Onnx__TensorProto, ONNX__TENSOR_PROTO__INIT);
    if (!tp) return nomem(err);
    copy_unknown(&tp->base, o);
    tp->name = keep_str(t->name, o ? o->name : NULL);
    tp->doc_string = keep_str(t->doc_string, o ? o->doc_string : NULL);
    tp->n_dims = (size_t)(t->rank > 0 ? t->rank : 0);
    tp->dims = (int64_t *)t->dims;
    tp->has_data_type = 1;
    tp->data_type = (int32_t)t->dtype;
    if (t->dtype == QP_DTYPE_STRING) {
        ProtobufCBinaryData *sd = qp_arena_calloc(s->a, (size_t)t->numel, sizeof *sd);
        if (!sd && t->numel) return nomem(err);
        for (uint64_t i = 0; i < t->numel; i++) {
            sd[i].len = t->strings[i].len;
            sd[i].data = (uint8_t *)t->strings[i].data;
        }
        tp->n_string_data = (size_t)t->numel;
        tp->string_data = sd;
        *out = tp;
        return QP_OK;
    }
    if (!t->data && t->nbytes)
        return qp_error_set(err, QP_ERR_USAGE,
                            "tensor '%s': its external data was not loaded "
                            "(skip_external_data), so it cannot be saved",
                            name);
    if (go_external) {
        uint64_t off = 0;
        enum qp_status st = add_chunk(s, t->data, t->nbytes, &off, err);
        if (st != QP_OK) return st;
        char *offs = qp_arena_alloc(s->a, 24), *lens = qp_arena_alloc(s->a, 24);
        Onnx__StringStringEntryProto **kv = qp_arena_calloc(s->a, 3, sizeof *kv);
        if (!offs || !lens || !kv) return nomem(err);
        snprintf(offs, 24, "%llu", (unsigned long long)off);
        snprintf(lens, 24, "%zu", t->nbytes);
        kv[0] = kv_shell(s, "location", s->location);
        kv[1] = kv_shell(s, "offset", offs);
        kv[2] = kv_shell(s, "length", lens);
        if (!kv[0] || !kv[1] || !kv[2]) return nomem(err);
        tp->n_external_data = 3;
        tp->external_data = kv;
        tp->has_data_location = 1;
        tp->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    } else {
        tp->has_raw_data = 1;
        tp->raw_data.len = t->nbytes;
        tp->raw_data.data = (uint8_t *)t->data;
    }
    *out = tp;
    return QP_OK;
}

/* ---- value types --------------------------------------------------------------------------- */

static int dim_matches(const Onnx__TensorShapeProto__Dimension *d, const struct qp_dim *q) {
    switch (d->value_case) {
    case ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE:
        if (d->dim_value >= 0) return q->value == d->dim_value && !q->param;
        return q->value < 0 && !q->param;
    case ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM:
        return q->value < 0 && q->param && !strcmp(q->param, d->dim_param ? d->dim_param : "");
    default:
        return q->value < 0 && !q->param;
    }
}

/* 1 when the TypeProto `o` says exactly what the IR value says. */
static int type_matches(const Onnx__TypeProto *o, const struct qp_value *v) {
    if (o->value_case == ONNX__TYPE_PROTO__VALUE__NOT_SET)
        return v->dtype == QP_DTYPE_UNDEFINED && v->rank < 0;
    if (o->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !o->tensor_type) return 0;
    const Onnx__TypeProto__Tensor *tt = o->tensor_type;
    int elem = tt->has_elem_type ? tt->elem_type : 0;
    if (elem != (int)v->dtype) return 0;
    if (!tt->shape) return v->rank < 0;
    if (v->rank < 0 || (size_t)v->rank != tt->shape->n_dim) return 0;
    for (int i = 0; i < v->rank; i++)
        if (!dim_matches(tt->shape->dim[i], &v->dims[i])) return 0;
    return 1;
}

static enum qp_status type_shell(struct saver *s, const struct qp_value *v, Onnx__TypeProto **out,
                                 struct qp_error *err) {
    const Onnx__TypeProto *o = v->origin_type;
    *out = NULL;
    if (v->kind == QP_VALUE_OTHER || (o && type_matches(o, v))) {
        *out = (Onnx__TypeProto *)o;
        return QP_OK;
    }
    if (v->dtype == QP_DTYPE_UNDEFINED && v->rank < 0 && !o) return QP_OK;
    Onnx__TypeProto *tp = NEW(s, Onnx__TypeProto, ONNX__TYPE_PROTO__INIT);
    Onnx__TypeProto__Tensor *tt = NEW(s, Onnx__TypeProto__Tensor, ONNX__TYPE_PROTO__TENSOR__INIT);
    if (!tp || !tt) return nomem(err);
    copy_unknown(&tp->base, o);
    tp->denotation = o ? o->denotation : NULL;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    const Onnx__TypeProto__Tensor *ot =
        o && o->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE ? o->tensor_type : NULL;
    copy_unknown(&tt->base, ot);
    if (v->dtype != QP_DTYPE_UNDEFINED) {
        tt->has_elem_type = 1;
        tt->elem_type = (int32_t)v->dtype;
    }
    if (v->rank >= 0) {
        const Onnx__TensorShapeProto *os = ot ? ot->shape : NULL;
        /* Dimension denotations survive when the rank did not change. */
        if (os && os->n_dim != (size_t)v->rank) os = NULL;
        Onnx__TensorShapeProto *sh = NEW(s, Onnx__TensorShapeProto, ONNX__TENSOR_SHAPE_PROTO__INIT);
        Onnx__TensorShapeProto__Dimension **dims =
            qp_arena_calloc(s->a, (size_t)v->rank, sizeof *dims);
        if (!sh || (!dims && v->rank)) return nomem(err);
        copy_unknown(&sh->base, os);
        for (int i = 0; i < v->rank; i++) {
            Onnx__TensorShapeProto__Dimension *d = NEW(s, Onnx__TensorShapeProto__Dimension,
                                                       ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT);
            if (!d) return nomem(err);
            if (os) {
                d->denotation = os->dim[i]->denotation;
                copy_unknown(&d->base, os->dim[i]);
            }
            if (v->dims[i].value >= 0) {
                d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
                d->dim_value = v->dims[i].value;
            } else if (v->dims[i].param) {
                d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
                d->dim_param = (char *)v->dims[i].param;
            }
            dims[i] = d;
        }
        sh->n_dim = (size_t)v->rank;
        sh->dim = dims;
        tt->shape = sh;
    }
    *out = tp;
    return QP_OK;
}

/* ValueInfoProtos for the value indices `idx`. `orig` is the matching list of the origin graph:
 * an entry at the same position with the same name lends its unknown fields and doc string. */
static enum qp_status value_infos(struct saver *s, const struct qp_graph *g, const int *idx,
                                  size_t n, Onnx__ValueInfoProto *const *orig, size_t n_orig,
                                  Onnx__ValueInfoProto ***out, struct qp_error *err) {
    Onnx__ValueInfoProto **list = qp_arena_calloc(s->a, n, sizeof *list);
    if (!list && n) return nomem(err);
    for (size_t i = 0; i < n; i++) {
        const struct qp_value *v = &g->values[idx[i]];
        const Onnx__ValueInfoProto *ov = i < n_orig ? orig[i] : NULL;
        if (ov && strcmp(ov->name ? ov->name : "", v->name)) ov = NULL;
        Onnx__ValueInfoProto *vi = NEW(s, Onnx__ValueInfoProto, ONNX__VALUE_INFO_PROTO__INIT);
        if (!vi) return nomem(err);
        copy_unknown(&vi->base, ov);
        vi->name = keep_str(v->name, ov ? ov->name : NULL);
        vi->doc_string = keep_str(v->doc_string, ov ? ov->doc_string : NULL);
        enum qp_status st = type_shell(s, v, &vi->type, err);
        if (st != QP_OK) return st;
        list[i] = vi;
    }
    *out = list;
    return QP_OK;
}

/* ---- nodes and graphs ---------------------------------------------------------------------- */

static enum qp_status graph_shell(struct saver *s, const struct qp_graph *g, Onnx__GraphProto **out,
                                  struct qp_error *err);

static enum qp_status attr_shell(struct saver *s, const struct qp_attr *at,
                                 Onnx__AttributeProto **out, struct qp_error *err) {
    const Onnx__AttributeProto *o = at->origin;
    enum qp_status st = QP_OK;
    if (at->type == QP_ATTR_UNDEFINED && o) {
        *out = (Onnx__AttributeProto *)o;
        return QP_OK;
    }
    Onnx__AttributeProto *ap = NEW(s, Onnx__AttributeProto, ONNX__ATTRIBUTE_PROTO__INIT);
    if (!ap) return nomem(err);
    copy_unknown(&ap->base, o);
    ap->name = keep_str(at->name, o ? o->name : NULL);
    ap->ref_attr_name = keep_str(at->ref_attr_name, o ? o->ref_attr_name : NULL);
    ap->doc_string = keep_str(at->doc_string, o ? o->doc_string : NULL);
    if (at->type != QP_ATTR_UNDEFINED) {
        ap->has_type = 1;
        ap->type = (Onnx__AttributeProto__AttributeType)at->type;
    }
    switch (at->type) {
    case QP_ATTR_FLOAT:
        ap->has_f = 1;
        ap->f = at->f;
        break;
    case QP_ATTR_INT:
        ap->has_i = 1;
        ap->i = at->i;
        break;
    case QP_ATTR_STRING:
        ap->has_s = 1;
        ap->s.len = at->s.len;
        ap->s.data = (uint8_t *)at->s.data;
        break;
    case QP_ATTR_TENSOR:
        if (at->t) st = tensor_shell(s, at->t, 0, &ap->t, err);
        break;
    case QP_ATTR_GRAPH:
        if (at->g) st = graph_shell(s, at->g, &ap->g, err);
        break;
    case QP_ATTR_FLOATS:
        ap->n_floats = at->n;
        ap->floats = (float *)at->floats;
        break;
    case QP_ATTR_INTS:
        ap->n_ints = at->n;
        ap->ints = (int64_t *)at->ints;
        break;
    case QP_ATTR_STRINGS: {
        ProtobufCBinaryData *b = qp_arena_calloc(s->a, at->n, sizeof *b);
        if (!b && at->n) return nomem(err);
        for (size_t i = 0; i < at->n; i++) {
            b[i].len = at->strings[i].len;
            b[i].data = (uint8_t *)at->strings[i].data;
        }
        ap->n_strings = at->n;
        ap->strings = b;
        break;
    }
    case QP_ATTR_TENSORS: {
        Onnx__TensorProto **ts = qp_arena_calloc(s->a, at->n, sizeof *ts);
        if (!ts && at->n) return nomem(err);
        for (size_t i = 0; i < at->n && st == QP_OK; i++)
            st = tensor_shell(s, at->tensors[i], 0, &ts[i], err);
        ap->n_tensors = at->n;
        ap->tensors = ts;
        break;
    }
    case QP_ATTR_GRAPHS: {
        Onnx__GraphProto **gs = qp_arena_calloc(s->a, at->n, sizeof *gs);
        if (!gs && at->n) return nomem(err);
        for (size_t i = 0; i < at->n && st == QP_OK; i++)
            st = graph_shell(s, at->graphs[i], &gs[i], err);
        ap->n_graphs = at->n;
        ap->graphs = gs;
        break;
    }
    /* Kinds the IR does not model are written back from the AttributeProto they came from. */
    case QP_ATTR_SPARSE_TENSOR:
        ap->sparse_tensor = o ? o->sparse_tensor : NULL;
        break;
    case QP_ATTR_SPARSE_TENSORS:
        if (o) {
            ap->n_sparse_tensors = o->n_sparse_tensors;
            ap->sparse_tensors = o->sparse_tensors;
        }
        break;
    case QP_ATTR_TYPE_PROTO:
        ap->tp = o ? o->tp : NULL;
        break;
    case QP_ATTR_TYPE_PROTOS:
        if (o) {
            ap->n_type_protos = o->n_type_protos;
            ap->type_protos = o->type_protos;
        }
        break;
    case QP_ATTR_UNDEFINED:
    case QP_ATTR_TYPE_COUNT:
        break;
    }
    if (st != QP_OK) return qp_error_prefix(err, "attribute '%s'", at->name);
    *out = ap;
    return QP_OK;
}

static enum qp_status node_shell(struct saver *s, const struct qp_graph *g, const struct qp_node *n,
                                 Onnx__NodeProto **out, struct qp_error *err) {
    const Onnx__NodeProto *o = n->origin;
    Onnx__NodeProto *np = NEW(s, Onnx__NodeProto, ONNX__NODE_PROTO__INIT);
    char **in = qp_arena_calloc(s->a, (size_t)n->n_inputs, sizeof *in);
    char **outs = qp_arena_calloc(s->a, (size_t)n->n_outputs, sizeof *outs);
    Onnx__AttributeProto **attrs = qp_arena_calloc(s->a, (size_t)n->n_attrs, sizeof *attrs);
    if (!np || !in || !outs || !attrs) return nomem(err);
    copy_unknown(&np->base, o);
    for (int i = 0; i < n->n_inputs; i++)
        in[i] = n->inputs[i] >= 0 ? (char *)g->values[n->inputs[i]].name : "";
    for (int i = 0; i < n->n_outputs; i++)
        outs[i] = n->outputs[i] >= 0 ? (char *)g->values[n->outputs[i]].name : "";
    np->n_input = (size_t)n->n_inputs;
    np->input = in;
    np->n_output = (size_t)n->n_outputs;
    np->output = outs;
    np->name = keep_str(n->name, o ? o->name : NULL);
    np->op_type = keep_str(n->op_type, o ? o->op_type : NULL);
    np->domain = keep_str(n->domain, o ? o->domain : NULL);
    np->doc_string = keep_str(n->doc_string, o ? o->doc_string : NULL);
    for (int i = 0; i < n->n_attrs; i++) {
        enum qp_status st = attr_shell(s, &n->attrs[i], &attrs[i], err);
        if (st != QP_OK)
            return qp_error_prefix(err, "node '%s' (%s)", n->name ? n->name : "", n->op_type);
    }
    np->n_attribute = (size_t)n->n_attrs;
    np->attribute = attrs;
    *out = np;
    return QP_OK;
}

static enum qp_status graph_shell(struct saver *s, const struct qp_graph *g, Onnx__GraphProto **out,
                                  struct qp_error *err) {
    const Onnx__GraphProto *o = g->origin;
    enum qp_status st;
    Onnx__GraphProto *gp = NEW(s, Onnx__GraphProto, ONNX__GRAPH_PROTO__INIT);
    Onnx__NodeProto **nodes = qp_arena_calloc(s->a, g->n_topo, sizeof *nodes);
    Onnx__TensorProto **inits = qp_arena_calloc(s->a, g->n_inits, sizeof *inits);
    if (!gp || (!nodes && g->n_topo) || (!inits && g->n_inits)) return nomem(err);
    copy_unknown(&gp->base, o);
    gp->name = keep_str(g->name, o ? o->name : NULL);
    gp->doc_string = keep_str(g->doc_string, o ? o->doc_string : NULL);
    for (size_t i = 0; i < g->n_topo; i++)
        if ((st = node_shell(s, g, &g->nodes[g->topo[i]], &nodes[i], err)) != QP_OK) return st;
    gp->n_node = g->n_topo;
    gp->node = nodes;
    for (size_t i = 0; i < g->n_inits; i++)
        if ((st = tensor_shell(s, &g->inits[i], 1, &inits[i], err)) != QP_OK)
            return qp_error_prefix(err, "graph '%s'", g->name ? g->name : "");
    gp->n_initializer = g->n_inits;
    gp->initializer = inits;
    st = value_infos(s, g, g->inputs, g->n_inputs, o ? o->input : NULL, o ? o->n_input : 0,
                     &gp->input, err);
    if (st == QP_OK)
        st = value_infos(s, g, g->outputs, g->n_outputs, o ? o->output : NULL, o ? o->n_output : 0,
                         &gp->output, err);
    if (st == QP_OK)
        st = value_infos(s, g, g->value_info, g->n_value_info, o ? o->value_info : NULL,
                         o ? o->n_value_info : 0, &gp->value_info, err);
    if (st != QP_OK) return st;
    gp->n_input = g->n_inputs;
    gp->n_output = g->n_outputs;
    gp->n_value_info = g->n_value_info;
    if (o) {
        gp->n_quantization_annotation = o->n_quantization_annotation;
        gp->quantization_annotation = o->quantization_annotation;
    }
    *out = gp;
    return QP_OK;
}

static enum qp_status model_shell(struct saver *s, Onnx__ModelProto **out, struct qp_error *err) {
    const struct qp_model *m = s->m;
    const Onnx__ModelProto *o = m->proto;
    Onnx__ModelProto *mp = NEW(s, Onnx__ModelProto, ONNX__MODEL_PROTO__INIT);
    Onnx__OperatorSetIdProto **ops = qp_arena_calloc(s->a, m->n_opsets, sizeof *ops);
    Onnx__StringStringEntryProto **md = qp_arena_calloc(s->a, m->n_metadata, sizeof *md);
    if (!mp || (!ops && m->n_opsets) || (!md && m->n_metadata)) return nomem(err);
    copy_unknown(&mp->base, o);
    mp->has_ir_version = 1;
    mp->ir_version = m->ir_version;
    for (size_t i = 0; i < m->n_opsets; i++) {
        const struct qp_opset *q = &m->opsets[i];
        const Onnx__OperatorSetIdProto *oo = o && i < o->n_opset_import ? o->opset_import[i] : NULL;
        if (oo && oo->version == q->version &&
            !strcmp(oo->domain ? oo->domain : "", q->domain ? q->domain : "")) {
            ops[i] = (Onnx__OperatorSetIdProto *)oo;
            continue;
        }
        ops[i] = NEW(s, Onnx__OperatorSetIdProto, ONNX__OPERATOR_SET_ID_PROTO__INIT);
        if (!ops[i]) return nomem(err);
        ops[i]->domain = keep_str(q->domain, NULL);
        ops[i]->has_version = 1;
        ops[i]->version = q->version;
    }
    mp->n_opset_import = m->n_opsets;
    mp->opset_import = ops;
    mp->producer_name = keep_str(m->producer_name, o ? o->producer_name : NULL);
    mp->producer_version = keep_str(m->producer_version, o ? o->producer_version : NULL);
    mp->domain = keep_str(m->domain, o ? o->domain : NULL);
    mp->doc_string = keep_str(m->doc_string, o ? o->doc_string : NULL);
    mp->has_model_version =
        o ? o->has_model_version || o->model_version != m->model_version : m->model_version != 0;
    mp->model_version = m->model_version;
    for (size_t i = 0; i < m->n_metadata; i++) {
        const struct qp_kv *kv = &m->metadata[i];
        const Onnx__StringStringEntryProto *oe =
            o && i < o->n_metadata_props ? o->metadata_props[i] : NULL;
        if (oe && !strcmp(oe->key ? oe->key : "", kv->key ? kv->key : "") &&
            !strcmp(oe->value ? oe->value : "", kv->value ? kv->value : "")) {
            md[i] = (Onnx__StringStringEntryProto *)oe;
            continue;
        }
        if (!(md[i] = kv_shell(s, kv->key, kv->value))) return nomem(err);
    }
    mp->n_metadata_props = m->n_metadata;
    mp->metadata_props = md;
    enum qp_status st = graph_shell(s, m->graph, &mp->graph, err);
    if (st != QP_OK) return st;
    if (o) {
        mp->n_training_info = o->n_training_info;
        mp->training_info = o->training_info;
    }
    mp->n_functions = m->n_functions;
    mp->functions = (Onnx__FunctionProto **)m->functions;
    *out = mp;
    return QP_OK;
}

/* ---- writing ------------------------------------------------------------------------------ */

static int write_all(int fd, const uint8_t *p, size_t n) {
    while (n > 0) {
        size_t chunk = n > ((size_t)1 << 30) ? (size_t)1 << 30 : n;
        ssize_t w = write(fd, p, chunk);
        if (w < 0) {
            if (errno == EINTR) continue;
            return 0;
        }
        if (w == 0) {
            errno = EIO;
            return 0;
        }
        p += w;
        n -= (size_t)w;
    }
    return 1;
}

/* A ProtobufCBuffer that streams to a file descriptor through a fixed buffer. protobuf-c's
 * append cannot fail, so the first error is latched and later appends are dropped. */
struct file_sink {
    ProtobufCBuffer base;
    int fd;
    uint8_t *buf;
    size_t len, cap;
    int err_no; /* 0 while all writes succeeded */
    uint64_t written;
};

static void sink_flush(struct file_sink *k) {
    if (!k->err_no && k->len && !write_all(k->fd, k->buf, k->len)) k->err_no = errno ? errno : EIO;
    k->len = 0;
}

static void sink_append(ProtobufCBuffer *b, size_t len, const uint8_t *data) {
    struct file_sink *k = (struct file_sink *)b;
    if (k->err_no || !len) return; /* protobuf-c appends empty bytes fields as (0, NULL) */
    k->written += len;
    if (len > k->cap - k->len) sink_flush(k);
    if (len >= k->cap) {
        if (!k->err_no && !write_all(k->fd, data, len)) k->err_no = errno ? errno : EIO;
        return;
    }
    memcpy(k->buf + k->len, data, len);
    k->len += len;
}

static void sink_zeros(struct file_sink *k, uint64_t n) {
    static const uint8_t zeros[256];
    while (n > 0) {
        size_t c = n > sizeof zeros ? sizeof zeros : (size_t)n;
        sink_append(&k->base, c, zeros);
        n -= c;
    }
}

/* Creates a temp file in `dir`; returns its fd and malloc'd path in *path_out, or -1. */
static int make_temp(const char *dir, mode_t mode, char **path_out) {
    char *t = qp_onnx_path_join(dir, ".qplace-tmp-XXXXXX");
    if (!t) {
        errno = ENOMEM;
        return -1;
    }
    int fd = mkstemp(t);
    if (fd < 0) {
        int e = errno;
        free(t);
        errno = e;
        return -1;
    }
    (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
    (void)fchmod(fd, mode);
    *path_out = t;
    return fd;
}

/* Finishes a temp file: flush, fsync, close. Returns 0 with errno set on failure. */
static int finish_file(struct file_sink *k) {
    sink_flush(k);
    if (k->err_no) {
        errno = k->err_no;
        return 0;
    }
    if (fsync(k->fd) != 0) return 0;
    int fd = k->fd;
    k->fd = -1;
    if (close(fd) != 0) return 0;
    return 1;
}

static void sync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    (void)fsync(fd);
    close(fd);
}

/* 1 when `path` names the same file as `other` (same device and inode, or same real path).
 * `canon` is the real path of `path`'s folder joined with its base name. */
static int same_file(const char *canon, const struct stat *st, const char *other) {
    struct stat so;
    if (st && stat(other, &so) == 0 && so.st_dev == st->st_dev && so.st_ino == st->st_ino) return 1;
    char *r = realpath(other, NULL);
    int same = r && !strcmp(r, canon);
    free(r);
    return same;
}

/* QP_ERR_USAGE when `canon` (the target, described by `what`) is the input model or one of its
 * external data files. */
static enum qp_status refuse_inputs(const struct qp_model *m, const char *canon, const char *what,
                                    const char *shown, struct qp_error *err) {
    struct stat st;
    int exists = stat(canon, &st) == 0;
    if (m->path && (!strcmp(canon, m->path) || same_file(canon, exists ? &st : NULL, m->path)))
        return qp_error_set(err, QP_ERR_USAGE,
                            "%s '%s' is the file the model was loaded from; refusing to overwrite "
                            "the input",
                            what, shown);
    for (size_t i = 0; m->dir && i < m->n_external_files; i++) {
        char *p = qp_onnx_path_join(m->dir, m->external_files[i]);
        if (!p) return nomem(err);
        int same = same_file(canon, exists ? &st : NULL, p) || !strcmp(p, canon);
        free(p);
        if (same)
            return qp_error_set(err, QP_ERR_USAGE,
                                "%s '%s' is the input model's external data file '%s'; refusing "
                                "to overwrite it",
                                what, shown, m->external_files[i]);
    }
    return QP_OK;
}

static void saver_reset(struct saver *s) {
    qp_arena_free(s->a);
    s->a = NULL;
    s->n_chunks = 0;
    s->data_size = 0;
}

static enum qp_status build(struct saver *s, int externalize, Onnx__ModelProto **mp, size_t *size,
                            struct qp_error *err) {
    saver_reset(s);
    s->externalize = externalize;
    if (!(s->a = qp_arena_create())) return nomem(err);
    enum qp_status st = model_shell(s, mp, err);
    if (st != QP_OK) return st;
    *size = protobuf_c_message_get_packed_size(&(*mp)->base);
    return QP_OK;
}

enum qp_status qp_model_save_file(const struct qp_model *model, const char *path,
                                  const struct qp_save_options *opts, struct qp_error *err) {
    struct qp_error local = {0};
    if (!err) err = &local;
    if (!model || !model->graph || !path || !*path)
        return qp_error_set(err, QP_ERR_USAGE, "save: no model or no path");
    enum qp_external_mode mode = opts ? opts->external : QP_EXTERNAL_AUTO;
    if (mode != QP_EXTERNAL_AUTO && mode != QP_EXTERNAL_ALWAYS && mode != QP_EXTERNAL_NEVER)
        return qp_error_set(err, QP_ERR_USAGE, "save: unknown external data mode %d", (int)mode);

    struct saver s = {.m = model};
    enum qp_status st = QP_OK;
    char *out_dir = NULL, *real_dir = NULL, *canon = NULL, *data_path = NULL;
    char *tmp_model = NULL, *tmp_data = NULL, *data_dir = NULL;
    struct file_sink ks = {.base = {sink_append}, .fd = -1};
    int data_renamed = 0;
    const char *base = qp_onnx_path_basename(path);
    s.min_bytes = opts && opts->external_min_bytes ? opts->external_min_bytes : 1024;

    if (!*base || !strcmp(base, ".") || !strcmp(base, "..")) {
        st = qp_error_set(err, QP_ERR_USAGE, "'%s' does not name a file", path);
        goto fail;
    }
    if (!(out_dir = qp_onnx_path_dirname(path))) goto nomem;
    if (!(real_dir = realpath(out_dir, NULL))) {
        st = qp_error_set(err, QP_ERR_IO, "output folder '%s': %s", out_dir, strerror(errno));
        goto fail;
    }
    if (!(canon = qp_onnx_path_join(real_dir, base))) goto nomem;
    struct stat tst;
    mode_t fmode = 0644;
    if (stat(canon, &tst) == 0) {
        if (S_ISDIR(tst.st_mode)) {
            st = qp_error_set(err, QP_ERR_USAGE, "'%s' is a directory", path);
            goto fail;
        }
        fmode = tst.st_mode & 0777;
    }
    if ((st = refuse_inputs(model, canon, "output", path, err)) != QP_OK) goto fail;

    /* Data file name (used only when some tensor goes external). */
    {
        const char *loc = opts && opts->external_location ? opts->external_location : NULL;
        if (loc) {
            if (!*loc || loc[0] == '/' || qp_onnx_path_has_dotdot(loc) ||
                loc[strlen(loc) - 1] == '/') {
                st = qp_error_set(err, QP_ERR_USAGE,
                                  "external data location '%s' must be a relative file path "
                                  "without '..'",
                                  loc);
                goto fail;
            }
            s.location = strdup(loc);
        } else {
            size_t n = strlen(base);
            s.location = malloc(n + 6);
            if (s.location) {
                memcpy(s.location, base, n);
                memcpy(s.location + n, ".data", 6);
            }
        }
        if (!s.location) goto nomem;
    }

    /* Subgraphs are ordered by the recursion inside qp_graph_toposort. */
    if ((st = qp_graph_toposort(model->graph, err)) != QP_OK) goto fail;
    Onnx__ModelProto *mp = NULL;
    size_t size = 0;
    if ((st = build(&s, mode == QP_EXTERNAL_ALWAYS, &mp, &size, err)) != QP_OK) goto fail;
    if ((uint64_t)size > proto_limit) {
        if (mode == QP_EXTERNAL_NEVER) {
            st = qp_error_set(err, QP_ERR_BAD_INPUT,
                              "the model serializes to %zu bytes, over protobuf's limit of %llu; "
                              "save it with external data",
                              size, (unsigned long long)proto_limit);
            goto fail;
        }
        if (mode == QP_EXTERNAL_AUTO && (st = build(&s, 1, &mp, &size, err)) != QP_OK) goto fail;
        if ((uint64_t)size > proto_limit) {
            st = qp_error_set(err, QP_ERR_BAD_INPUT,
                              "the model serializes to %zu bytes even with its tensors of %zu "
                              "bytes or more in external data, over protobuf's limit of %llu",
                              size, s.min_bytes, (unsigned long long)proto_limit);
            goto fail;
        }
    }

    if (s.n_chunks) {
        if (!(data_path = qp_onnx_path_join(real_dir, s.location))) goto nomem;
        if (!strcmp(data_path, canon)) {
            st = qp_error_set(err, QP_ERR_USAGE,
                              "external data file '%s' would be the output model itself",
                              s.location);
            goto fail;
        }
        if ((st = refuse_inputs(model, data_path, "external data file", s.location, err)) != QP_OK)
            goto fail;
        if (!(data_dir = qp_onnx_path_dirname(data_path))) goto nomem;
        if (!(ks.buf = malloc(ks.cap = (size_t)1 << 20))) goto nomem;
        if ((ks.fd = make_temp(data_dir, fmode, &tmp_data)) < 0) {
            st = qp_error_set(err, QP_ERR_IO, "cannot create a temporary file in '%s': %s",
                              data_dir, strerror(errno));
            goto fail;
        }
        for (size_t i = 0; i < s.n_chunks && !ks.err_no; i++) {
            sink_zeros(&ks, s.chunks[i].offset - ks.written);
            sink_append(&ks.base, s.chunks[i].n, s.chunks[i].data);
        }
        if (!finish_file(&ks)) {
            st = qp_error_set(err, QP_ERR_IO, "writing external data '%s': %s", data_path,
                              strerror(errno));
            goto fail;
        }
        ks.len = 0;
        ks.written = 0;
    }

    if (!ks.buf && !(ks.buf = malloc(ks.cap = (size_t)1 << 20))) goto nomem;
    if ((ks.fd = make_temp(real_dir, fmode, &tmp_model)) < 0) {
        st = qp_error_set(err, QP_ERR_IO, "cannot create a temporary file in '%s': %s", real_dir,
                          strerror(errno));
        goto fail;
    }
    protobuf_c_message_pack_to_buffer(&mp->base, &ks.base);
    if (!ks.err_no && ks.written != size) ks.err_no = EIO; /* cannot happen; checked anyway */
    if (!finish_file(&ks)) {
        st = qp_error_set(err, QP_ERR_IO, "writing '%s': %s", path, strerror(errno));
        goto fail;
    }
    if (tmp_data) {
        if (rename(tmp_data, data_path) != 0) {
            st = qp_error_set(err, QP_ERR_IO, "renaming the temporary file to '%s': %s", data_path,
                              strerror(errno));
            goto fail;
        }
        free(tmp_data);
        tmp_data = NULL;
        data_renamed = 1;
    }
    if (rename(tmp_model, canon) != 0) {
        st = qp_error_set(err, QP_ERR_IO, "renaming the temporary file to '%s': %s", path,
                          strerror(errno));
        goto fail;
    }
    free(tmp_model);
    tmp_model = NULL;
    sync_dir(real_dir);
    if (data_dir && strcmp(data_dir, real_dir)) sync_dir(data_dir);
    goto done;
nomem:
    st = nomem(err);
fail:
    if (data_renamed && data_path) unlink(data_path);
    qp_error_prefix(err, "save '%s'", path);
done:
    if (ks.fd >= 0) close(ks.fd);
    if (tmp_data) unlink(tmp_data);
    if (tmp_model) unlink(tmp_model);
    free(ks.buf);
    free(tmp_data);
    free(tmp_model);
    free(data_dir);
    free(data_path);
    free(canon);
    free(real_dir);
    free(out_dir);
    free(s.location);
    free(s.chunks);
    qp_arena_free(s.a);
    return st;
}

enum qp_status qp_model_save_buffer(const struct qp_model *model, void **data_out, size_t *size_out,
                                    struct qp_error *err) {
    if (!model || !model->graph || !data_out || !size_out)
        return qp_error_set(err, QP_ERR_USAGE, "save: no model or no output");
    struct saver s = {.m = model};
    s.min_bytes = 1024;
    uint8_t *buf = NULL;
    Onnx__ModelProto *mp = NULL;
    size_t size = 0;
    enum qp_status st = qp_graph_toposort(model->graph, err);
    if (st == QP_OK) st = build(&s, 0, &mp, &size, err);
    if (st == QP_OK && (uint64_t)size > proto_limit)
        st = qp_error_set(err, QP_ERR_BAD_INPUT,
                          "save: the model serializes to %zu bytes, over protobuf's limit of "
                          "%llu; save it to a file with external data",
                          size, (unsigned long long)proto_limit);
    if (st == QP_OK && !(buf = malloc(size ? size : 1))) st = nomem(err);
    if (st == QP_OK && protobuf_c_message_pack(&mp->base, buf) != size) {
        st = qp_error_set(err, QP_ERR_BAD_INPUT, "save: the model did not serialize");
        free(buf);
    }
    free(s.chunks);
    qp_arena_free(s.a);
    if (st != QP_OK) return st;
    *data_out = buf;
    *size_out = size;
    return QP_OK;
}

enum qp_status qp_model_clone(const struct qp_model *model, struct qp_model **out,
                              struct qp_error *err) {
    if (!out) return qp_error_set(err, QP_ERR_USAGE, "clone: no output");
    void *buf = NULL;
    size_t size = 0;
    enum qp_status st = qp_model_save_buffer(model, &buf, &size, err);
    if (st != QP_OK) return st;
    st = qp_model_load_buffer(buf, size, model->dir, NULL, out, err);
    free(buf);
    if (st != QP_OK) qp_error_prefix(err, "clone");
    return st;
}

/* The location shared tensors get: no file of this name is ever read or written. */
#define SHARED_LOCATION "qplace-shared-initializer-bytes"

enum qp_status qp_model_clone_shared(const struct qp_model *model, struct qp_model **out,
                                     struct qp_error *err) {
    if (!model || !model->graph || !out) return qp_error_set(err, QP_ERR_USAGE, "clone: NULL");
    struct saver s = {.m = model, .min_bytes = 256, .location = SHARED_LOCATION};
    Onnx__ModelProto *mp = NULL;
    uint8_t *buf = NULL;
    size_t size = 0;
    enum qp_status st = qp_graph_toposort(model->graph, err);
    /* Initializers become "external" chunks that point at the source's bytes. */
    if (st == QP_OK) st = build(&s, 1, &mp, &size, err);
    if (st == QP_OK && !(buf = malloc(size ? size : 1))) st = nomem(err);
    if (st == QP_OK && protobuf_c_message_pack(&mp->base, buf) != size)
        st = qp_error_set(err, QP_ERR_INTERNAL, "clone: the model did not serialize");
    if (st == QP_OK) {
        struct qp_onnx_shared sh = {SHARED_LOCATION, s.chunks, s.n_chunks};
        st = qp_onnx_load_shared(buf, size, &sh, out, err);
    }
    free(buf);
    free(s.chunks);
    qp_arena_free(s.a);
    return st;
}
