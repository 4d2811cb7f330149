/*
 * Loading: file -> wire check -> protobuf-c unpack -> IR.
 *
 * The unpacked ModelProto is kept alive by the model (m->proto) because the IR borrows from it:
 * strings, dims, raw_data, and the `origin` pointers the saver uses to write back untouched
 * parts as read. The file buffer itself is freed as soon as it has been unpacked, so a model's
 * tensor bytes exist once in memory after loading.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/arena.h"
#include "core/bigbuf.h"
#include "onnx/onnx_io.h"

static enum qp_status build_graph(struct qp_onnx_load *c, struct qp_graph *g,
                                  const Onnx__GraphProto *gp, struct qp_error *err);

static const char *label(const char *s) {
    return s && *s ? s : "(unnamed)";
}

static enum qp_status nomem(struct qp_error *err) {
    return qp_error_set(err, QP_ERR_NOMEM, "out of memory");
}

/* 1 when a TensorProto anywhere inside `msg` (found through the protobuf-c descriptors) uses
 * external data. For the parts the IR keeps opaque (functions, training info, sparse and
 * type-proto attributes): the saver writes those back as read, and their external references
 * would point at the input's data files from wherever the output lands. Recursion is bounded by
 * the wire check's depth limit. */
static int has_external_data(const ProtobufCMessage *msg) {
    const ProtobufCMessageDescriptor *d = msg->descriptor;
    if (d == &onnx__tensor_proto__descriptor) {
        const Onnx__TensorProto *t = (const Onnx__TensorProto *)msg;
        if (t->has_data_location && t->data_location != ONNX__TENSOR_PROTO__DATA_LOCATION__DEFAULT)
            return 1;
    }
    const char *base = (const char *)msg;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if (f->type != PROTOBUF_C_TYPE_MESSAGE) continue;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n;
            ProtobufCMessage *const *arr;
            memcpy(&n, base + f->quantifier_offset, sizeof n);
            memcpy(&arr, base + f->offset, sizeof arr);
            for (size_t k = 0; k < n; k++)
                if (arr[k] && has_external_data(arr[k])) return 1;
            continue;
        }
        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
            uint32_t which;
            memcpy(&which, base + f->quantifier_offset, sizeof which);
            if (which != f->id) continue;
        }
        const ProtobufCMessage *sub;
        memcpy(&sub, base + f->offset, sizeof sub);
        if (sub && has_external_data(sub)) return 1;
    }
    return 0;
}

/* ---- values ------------------------------------------------------------------------------ */

/* Types a value from a ValueInfoProto. The first ValueInfoProto with a type wins when a name is
 * listed more than once (input, output and value_info of the same tensor). */
static enum qp_status set_value_type(struct qp_onnx_load *c, struct qp_graph *g, int v,
                                     const Onnx__ValueInfoProto *vi, struct qp_error *err) {
    struct qp_value *val = &g->values[v];
    if (!val->doc_string) val->doc_string = vi->doc_string;
    if (val->origin_type || !vi->type) return QP_OK;
    const Onnx__TypeProto *tp = vi->type;
    val->origin_type = tp;
    val->kind = QP_VALUE_TENSOR;
    val->dtype = QP_DTYPE_UNDEFINED;
    val->rank = -1;
    val->dims = NULL;
    if (tp->value_case == ONNX__TYPE_PROTO__VALUE__NOT_SET) return QP_OK;
    const Onnx__TypeProto__Tensor *tt =
        tp->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE ? tp->tensor_type : NULL;
    int elem = tt && tt->has_elem_type ? tt->elem_type : 0;
    if (!tt || (elem != 0 && !qp_dtype_valid(elem))) {
        /* Sequences, maps, optionals, sparse tensors and element types qplace does not know
         * are carried through untouched in origin_type. */
        val->kind = QP_VALUE_OTHER;
        return QP_OK;
    }
    val->dtype = (enum qp_dtype)elem;
    if (!tt->shape) return QP_OK;
    const Onnx__TensorShapeProto *sh = tt->shape;
    if (sh->n_dim > (size_t)INT_MAX)
        return qp_error_set(err, QP_ERR_BAD_INPUT, "value '%s': %zu dims", val->name, sh->n_dim);
    struct qp_dim *dims = qp_arena_calloc(c->m->arena, sh->n_dim, sizeof *dims);
    if (!dims) return nomem(err);
    for (size_t i = 0; i < sh->n_dim; i++) {
        const Onnx__TensorShapeProto__Dimension *d = sh->dim[i];
        dims[i].value = -1;
        if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
            /* Some exporters write -1 for a dynamic dim: unknown, kept as read by the saver. */
            if (d->dim_value >= 0) dims[i].value = d->dim_value;
        } else if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM) {
            dims[i].param = d->dim_param;
        }
    }
    val = &g->values[v];
    val->dims = dims;
    val->rank = (int)sh->n_dim;
    return QP_OK;
}

enum vi_list { VI_INPUT, VI_OUTPUT, VI_VALUE_INFO };

static enum qp_status add_value_infos(struct qp_onnx_load *c, struct qp_graph *g,
                                      Onnx__ValueInfoProto *const *list, size_t n,
                                      enum vi_list which, struct qp_error *err) {
    static const char *const what[] = {"graph input", "graph output", "value_info entry"};
    for (size_t i = 0; i < n; i++) {
        const Onnx__ValueInfoProto *vi = list[i];
        if (!vi->name || !*vi->name)
            return qp_error_set(err, QP_ERR_BAD_INPUT, "%s %zu has no name", what[which], i);
        int v = qp_graph_value(g, vi->name);
        if (v < 0) return nomem(err);
        enum qp_status st = set_value_type(c, g, v, vi, err);
        if (st == QP_OK) {
            if (which == VI_INPUT)
                st = qp_graph_add_input(g, v, err);
            else if (which == VI_OUTPUT)
                st = qp_graph_add_output(g, v, err);
            else
                st = qp_graph_add_value_info(g, v, err);
        }
        if (st != QP_OK) return qp_error_prefix(err, "%s '%s'", what[which], vi->name);
    }
    return QP_OK;
}

/* ---- attributes -------------------------------------------------------------------------- */

/* Attribute type of old files that did not write `type`, from the field that is set. */
static int infer_attr_type(const Onnx__AttributeProto *ap) {
    if (ap->has_f) return QP_ATTR_FLOAT;
    if (ap->has_i) return QP_ATTR_INT;
    if (ap->has_s) return QP_ATTR_STRING;
    if (ap->t) return QP_ATTR_TENSOR;
    if (ap->g) return QP_ATTR_GRAPH;
    if (ap->sparse_tensor) return QP_ATTR_SPARSE_TENSOR;
    if (ap->tp) return QP_ATTR_TYPE_PROTO;
    if (ap->n_floats) return QP_ATTR_FLOATS;
    if (ap->n_ints) return QP_ATTR_INTS;
    if (ap->n_strings) return QP_ATTR_STRINGS;
    if (ap->n_tensors) return QP_ATTR_TENSORS;
    if (ap->n_graphs) return QP_ATTR_GRAPHS;
    if (ap->n_sparse_tensors) return QP_ATTR_SPARSE_TENSORS;
    if (ap->n_type_protos) return QP_ATTR_TYPE_PROTOS;
    return QP_ATTR_UNDEFINED;
}

static enum qp_status subgraph(struct qp_onnx_load *c, struct qp_graph *g,
                               const Onnx__GraphProto *gp, struct qp_graph **out,
                               struct qp_error *err) {
    struct qp_graph *sub = qp_graph_create(c->m, g);
    if (!sub) return nomem(err);
    enum qp_status st = build_graph(c, sub, gp, err);
    if (st != QP_OK) return qp_error_prefix(err, "graph '%s'", label(gp->name));
    *out = sub;
    return QP_OK;
}

/* Fills `out` (zeroed) from `ap`. Strings and arrays are borrowed from the proto. */
static enum qp_status build_attr(struct qp_onnx_load *c, struct qp_graph *g,
                                 const Onnx__AttributeProto *ap, struct qp_attr *out,
                                 struct qp_error *err) {
    struct qp_arena *a = c->m->arena;
    struct qp_attr tmp = {0};
    enum qp_status st = QP_OK;
    int type = ap->has_type ? (int)ap->type : infer_attr_type(ap);
    if (type < 0 || type >= QP_ATTR_TYPE_COUNT)
        return qp_error_set(err, QP_ERR_BAD_INPUT, "unknown attribute type %d", type);

    switch ((enum qp_attr_type)type) {
    case QP_ATTR_FLOAT:
        tmp.f = ap->f;
        break;
    case QP_ATTR_INT:
        tmp.i = ap->i;
        break;
    case QP_ATTR_STRING:
        tmp.s.data = ap->s.data;
        tmp.s.len = ap->s.len;
        break;
    case QP_ATTR_TENSOR:
        if (!ap->t)
            return qp_error_set(err, QP_ERR_BAD_INPUT, "type is TENSOR but no tensor is set");
        if (!(tmp.t = qp_arena_alloc(a, sizeof *tmp.t))) return nomem(err);
        if ((st = qp_onnx_tensor_from_proto(c, ap->t, "tensor", tmp.t, err)) != QP_OK) return st;
        break;
    case QP_ATTR_GRAPH:
        if (!ap->g) return qp_error_set(err, QP_ERR_BAD_INPUT, "type is GRAPH but no graph is set");
        if ((st = subgraph(c, g, ap->g, &tmp.g, err)) != QP_OK) return st;
        break;
    case QP_ATTR_FLOATS:
        tmp.n = ap->n_floats;
        tmp.floats = ap->floats;
        break;
    case QP_ATTR_INTS:
        tmp.n = ap->n_ints;
        tmp.ints = ap->ints;
        break;
    case QP_ATTR_STRINGS: {
        struct qp_bytes *s = qp_arena_calloc(a, ap->n_strings, sizeof *s);
        if (!s) return nomem(err);
        for (size_t i = 0; i < ap->n_strings; i++) {
            s[i].data = ap->strings[i].data;
            s[i].len = ap->strings[i].len;
        }
        tmp.n = ap->n_strings;
        tmp.strings = s;
        break;
    }
    case QP_ATTR_TENSORS: {
        struct qp_tensor **ts = qp_arena_calloc(a, ap->n_tensors, sizeof *ts);
        struct qp_tensor *store = qp_arena_calloc(a, ap->n_tensors, sizeof *store);
        if (!ts || !store) return nomem(err);
        for (size_t i = 0; i < ap->n_tensors; i++) {
            ts[i] = &store[i];
            if ((st = qp_onnx_tensor_from_proto(c, ap->tensors[i], "tensor", ts[i], err)) != QP_OK)
                return qp_error_prefix(err, "tensor %zu", i);
        }
        tmp.n = ap->n_tensors;
        tmp.tensors = ts;
        break;
    }
    case QP_ATTR_GRAPHS: {
        struct qp_graph **gs = qp_arena_calloc(a, ap->n_graphs, sizeof *gs);
        if (!gs) return nomem(err);
        for (size_t i = 0; i < ap->n_graphs; i++)
            if ((st = subgraph(c, g, ap->graphs[i], &gs[i], err)) != QP_OK)
                return qp_error_prefix(err, "graph %zu", i);
        tmp.n = ap->n_graphs;
        tmp.graphs = gs;
        break;
    }
    case QP_ATTR_SPARSE_TENSORS:
        tmp.n = ap->n_sparse_tensors;
        break;
    case QP_ATTR_TYPE_PROTOS:
        tmp.n = ap->n_type_protos;
        break;
    case QP_ATTR_UNDEFINED:
    case QP_ATTR_SPARSE_TENSOR:
    case QP_ATTR_TYPE_PROTO:
    case QP_ATTR_TYPE_COUNT:
        break; /* kept in `origin` only */
    }
    if ((type == QP_ATTR_SPARSE_TENSOR || type == QP_ATTR_SPARSE_TENSORS ||
         type == QP_ATTR_UNDEFINED) &&
        has_external_data(&ap->base))
        return qp_error_set(err, QP_ERR_UNSUPPORTED,
                            "external data in a sparse tensor attribute is not supported");
    tmp.name = ap->name;
    tmp.type = (enum qp_attr_type)type;
    tmp.ref_attr_name = ap->ref_attr_name;
    tmp.doc_string = ap->doc_string;
    tmp.origin = ap;
    *out = tmp;
    return QP_OK;
}

/* ---- nodes and graphs ---------------------------------------------------------------------- */

static enum qp_status build_node(struct qp_onnx_load *c, struct qp_graph *g, size_t index,
                                 const Onnx__NodeProto *np, struct qp_error *err) {
    enum qp_status st;
    if (!np->op_type || !*np->op_type)
        return qp_error_set(err, QP_ERR_BAD_INPUT, "node %zu ('%s') has no op_type", index,
                            label(np->name));
    if (np->n_input > (size_t)INT_MAX || np->n_output > (size_t)INT_MAX ||
        np->n_attribute > (size_t)INT_MAX)
        return qp_error_set(err, QP_ERR_BAD_INPUT, "node %zu ('%s'): too many inputs or outputs",
                            index, label(np->name));
    int idx;
    st = qp_graph_add_node(g, np->name, np->op_type, np->domain, (int)np->n_input,
                           (const char *const *)np->input, (int)np->n_output,
                           (const char *const *)np->output, &idx, err);
    if (st != QP_OK) goto fail;
    g->nodes[idx].origin = np;
    g->nodes[idx].doc_string = np->doc_string;
    /* The attribute array is filled here in one allocation rather than through
     * qp_node_add_attr, which copies the array on every call (quadratic in the count). */
    struct qp_attr *attrs = qp_arena_calloc(c->m->arena, np->n_attribute, sizeof *attrs);
    if (!attrs) {
        st = nomem(err);
        goto fail;
    }
    for (size_t i = 0; i < np->n_attribute; i++) {
        const Onnx__AttributeProto *ap = np->attribute[i];
        if (!ap->name || !*ap->name) {
            st = qp_error_set(err, QP_ERR_BAD_INPUT, "attribute %zu has no name", i);
            goto fail;
        }
        if ((st = build_attr(c, g, ap, &attrs[i], err)) != QP_OK) {
            qp_error_prefix(err, "attribute '%s'", ap->name);
            goto fail;
        }
    }
    g->nodes[idx].attrs = attrs;
    g->nodes[idx].n_attrs = (int)np->n_attribute;
    return QP_OK;
fail:
    if (np->name && *np->name) return qp_error_prefix(err, "node '%s' (%s)", np->name, np->op_type);
    return qp_error_prefix(err, "node %zu (%s)", index, label(np->op_type));
}

static enum qp_status build_graph(struct qp_onnx_load *c, struct qp_graph *g,
                                  const Onnx__GraphProto *gp, struct qp_error *err) {
    enum qp_status st;
    g->origin = gp;
    g->name = gp->name;
    g->doc_string = gp->doc_string;
    if (gp->n_sparse_initializer) {
        const Onnx__SparseTensorProto *sp = gp->sparse_initializer[0];
        const char *name = sp->values && sp->values->name ? sp->values->name : "";
        return qp_error_set(err, QP_ERR_UNSUPPORTED,
                            "sparse initializer '%s' is not supported (%zu sparse initializer%s "
                            "in graph '%s')",
                            label(name), gp->n_sparse_initializer,
                            gp->n_sparse_initializer == 1 ? "" : "s", label(gp->name));
    }
    /* Initializers and graph inputs before nodes, so that a node writing one is caught. */
    for (size_t i = 0; i < gp->n_initializer; i++) {
        struct qp_tensor t;
        st = qp_onnx_tensor_from_proto(c, gp->initializer[i], "initializer", &t, err);
        if (st == QP_OK) st = qp_graph_add_initializer(g, &t, NULL, err);
        if (st != QP_OK) return st;
    }
    st = add_value_infos(c, g, gp->input, gp->n_input, VI_INPUT, err);
    if (st != QP_OK) return st;
    for (size_t i = 0; i < gp->n_node; i++)
        if ((st = build_node(c, g, i, gp->node[i], err)) != QP_OK) return st;
    st = add_value_infos(c, g, gp->output, gp->n_output, VI_OUTPUT, err);
    if (st != QP_OK) return st;
    return add_value_infos(c, g, gp->value_info, gp->n_value_info, VI_VALUE_INFO, err);
}

/* ---- model --------------------------------------------------------------------------------- */

/* protobuf-c allocates every bytes field (raw_data) separately and copies it; large ones come
 * from qp_bigbuf so filling them costs few page faults (docs/architecture.md, bench/README.md). */
static void *pb_alloc(void *data, size_t size) {
    (void)data;
    return qp_bigbuf_alloc(size);
}

static void pb_free(void *data, void *p) {
    (void)data;
    qp_bigbuf_free(p);
}

static ProtobufCAllocator pb_allocator = {pb_alloc, pb_free, NULL};

static void free_model_proto(void *p) {
    protobuf_c_message_free_unpacked(p, &pb_allocator);
}

/* The bytes of a model file: mapped when possible (no copy into the heap), else read. */
struct file_buf {
    uint8_t *data;
    size_t size;
    int mapped;
};

static void file_buf_release(struct file_buf *b) {
    if (!b || !b->data) return;
    if (b->mapped)
        munmap(b->data, b->size);
    else
        free(b->data);
    b->data = NULL;
}

static enum qp_status build_model(struct qp_onnx_load *c, const Onnx__ModelProto *mp,
                                  struct qp_error *err) {
    struct qp_model *m = c->m;
    struct qp_arena *a = m->arena;
    enum qp_status st;

    if (!mp->has_ir_version)
        return qp_error_set(err, QP_ERR_BAD_INPUT, "the model has no ir_version");
    if (!mp->graph) return qp_error_set(err, QP_ERR_BAD_INPUT, "the model has no graph");
    if (mp->ir_version >= 3 && !mp->n_opset_import)
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "the model (IR version %lld) imports no operator set",
                            (long long)mp->ir_version);
    for (size_t i = 0; i < mp->n_functions; i++)
        if (has_external_data(&mp->functions[i]->base))
            return qp_error_set(err, QP_ERR_UNSUPPORTED,
                                "function '%s': tensors with external data inside model-local "
                                "functions are not supported",
                                label(mp->functions[i]->name));
    for (size_t i = 0; i < mp->n_training_info; i++)
        if (has_external_data(&mp->training_info[i]->base))
            return qp_error_set(err, QP_ERR_UNSUPPORTED,
                                "training_info %zu: tensors with external data inside training "
                                "info are not supported",
                                i);
    m->ir_version = mp->ir_version;
    m->producer_name = mp->producer_name;
    m->producer_version = mp->producer_version;
    m->domain = mp->domain;
    m->doc_string = mp->doc_string;
    m->model_version = mp->model_version;

    m->opsets = qp_arena_calloc(a, mp->n_opset_import, sizeof *m->opsets);
    m->metadata = qp_arena_calloc(a, mp->n_metadata_props, sizeof *m->metadata);
    const void **fns = qp_arena_calloc(a, mp->n_functions, sizeof *fns);
    if (!m->opsets || !m->metadata || !fns) return nomem(err);
    for (size_t i = 0; i < mp->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *op = mp->opset_import[i];
        m->opsets[i].domain = op->domain ? op->domain : "";
        m->opsets[i].version = op->version;
    }
    m->n_opsets = mp->n_opset_import;
    for (size_t i = 0; i < mp->n_metadata_props; i++) {
        const Onnx__StringStringEntryProto *kv = mp->metadata_props[i];
        m->metadata[i].key = kv->key ? kv->key : "";
        m->metadata[i].value = kv->value ? kv->value : "";
    }
    m->n_metadata = mp->n_metadata_props;
    for (size_t i = 0; i < mp->n_functions; i++)
        fns[i] = mp->functions[i];
    m->functions = fns;
    m->n_functions = mp->n_functions;

    if ((st = build_graph(c, m->graph, mp->graph, err)) != QP_OK) return st;
    if ((st = qp_graph_name_nodes(m->graph, err)) != QP_OK) return st;
    if ((st = qp_graph_toposort(m->graph, err)) != QP_OK) return st;

    const char **files = qp_arena_calloc(a, c->n_locations, sizeof *files);
    if (!files) return nomem(err);
    for (size_t i = 0; i < c->n_locations; i++)
        files[i] = c->locations[i];
    m->external_files = files;
    m->n_external_files = c->n_locations;
    return QP_OK;
}

/* Unpacks `size` bytes at `data` into a new model. `owned` (may be NULL) holds the caller's
 * buffer of those bytes, released here as soon as it is no longer needed. `where` prefixes
 * every error message. */
static enum qp_status load_bytes(struct file_buf *owned, const uint8_t *data, size_t size,
                                 const char *where, const char *real_path, const char *dir,
                                 const struct qp_load_options *opts,
                                 const struct qp_onnx_shared *shared, struct qp_model **model_out,
                                 struct qp_error *err) {
    struct qp_onnx_load c = {.shared = shared};
    struct qp_model *m = NULL;
    Onnx__ModelProto *mp = NULL;
    enum qp_status st;

    if (opts && opts->max_file_bytes && (uint64_t)size > opts->max_file_bytes) {
        st = qp_error_set(err, QP_ERR_BAD_INPUT, "the model is %zu bytes, over the limit of %llu",
                          size, (unsigned long long)opts->max_file_bytes);
        goto fail;
    }
    st = qp_onnx_check_wire(data, size, &onnx__model_proto__descriptor, QP_ONNX_MAX_DEPTH, err);
    if (st != QP_OK) goto fail;
    mp = onnx__model_proto__unpack(&pb_allocator, size, data);
    file_buf_release(owned);
    owned = NULL;
    if (!mp) {
        st = qp_error_set(err, QP_ERR_BAD_INPUT,
                          "not a valid ONNX protobuf (or out of memory while unpacking it)");
        goto fail;
    }
    m = qp_model_create();
    if (!m) {
        protobuf_c_message_free_unpacked(&mp->base, &pb_allocator);
        st = nomem(err);
        goto fail;
    }
    m->proto = mp;
    m->proto_free = free_model_proto;
    if (real_path && !(m->path = qp_arena_strdup(m->arena, real_path))) goto nomem;
    if (dir && !(m->dir = qp_arena_strdup(m->arena, dir))) goto nomem;
    c.m = m;
    c.dir = m->dir;
    c.skip_external = opts ? opts->skip_external_data : 0;
    if ((st = build_model(&c, mp, err)) != QP_OK) goto fail;
    free(c.locations);
    free(c.loc_hash);
    *model_out = m;
    return QP_OK;
nomem:
    st = nomem(err);
fail:
    file_buf_release(owned);
    free(c.locations);
    free(c.loc_hash);
    qp_model_free(m);
    qp_error_prefix(err, "%s", where);
    return st;
}

enum qp_status qp_model_load_buffer(const void *data, size_t size, const char *base_dir,
                                    const struct qp_load_options *opts, struct qp_model **model_out,
                                    struct qp_error *err) {
    struct qp_error local = {0}; /* messages are built by prefixing, which needs a record */
    if (!err) err = &local;
    if (!model_out || (!data && size))
        return qp_error_set(err, QP_ERR_USAGE, "load: no buffer or no output pointer");
    char *dir = NULL;
    if (base_dir) {
        dir = realpath(base_dir, NULL);
        if (!dir)
            return qp_error_set(err, QP_ERR_IO, "load: base folder '%s': %s", base_dir,
                                strerror(errno));
    }
    static const uint8_t empty[1];
    enum qp_status st = load_bytes(NULL, data ? data : empty, size, "(buffer)", NULL, dir, opts,
                                   NULL, model_out, err);
    free(dir);
    return st;
}

enum qp_status qp_model_load_file(const char *path, const struct qp_load_options *opts,
                                  struct qp_model **model_out, struct qp_error *err) {
    struct qp_error local = {0}; /* messages are built by prefixing, which needs a record */
    if (!err) err = &local;
    if (!path || !*path || !model_out)
        return qp_error_set(err, QP_ERR_USAGE, "load: no path or no output pointer");
    enum qp_status st = QP_OK;
    struct file_buf buf = {0};
    char *real = NULL, *dir = NULL;
    /* O_NONBLOCK: opening a FIFO must not hang; it is then rejected as not a regular file. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return qp_error_set(err, QP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        st = qp_error_set(err, QP_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
        goto fail;
    }
    if (S_ISDIR(sb.st_mode)) {
        st = qp_error_set(err, QP_ERR_IO, "%s: is a directory, not an ONNX file", path);
        goto fail;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = qp_error_set(err, QP_ERR_IO, "%s: not a regular file", path);
        goto fail;
    }
    uint64_t fsize = (uint64_t)sb.st_size;
    if (opts && opts->max_file_bytes && fsize > opts->max_file_bytes) {
        st = qp_error_set(err, QP_ERR_BAD_INPUT,
                          "%s: the file is %llu bytes, over the limit of %llu", path,
                          (unsigned long long)fsize, (unsigned long long)opts->max_file_bytes);
        goto fail;
    }
    if (fsize > (uint64_t)SIZE_MAX - 1) {
        st = qp_error_set(err, QP_ERR_NOMEM, "%s: the file is too large (%llu bytes)", path,
                          (unsigned long long)fsize);
        goto fail;
    }
    size_t size = (size_t)fsize;
    buf.size = size;
    /* Map the file: its pages come from the page cache without a copy into the heap, and
     * MAP_POPULATE maps them in one go rather than one fault at a time. A file that cannot be
     * mapped (or is empty) is read instead. */
    if (size > 0) {
        void *p = mmap(NULL, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
        if (p != MAP_FAILED) {
            buf.data = p;
            buf.mapped = 1;
        }
    }
    if (!buf.data) {
        buf.data = malloc(size ? size : 1);
        if (!buf.data) {
            st = qp_error_set(err, QP_ERR_NOMEM, "%s: out of memory reading %zu bytes", path, size);
            goto fail;
        }
        for (size_t got = 0; got < size;) {
            size_t chunk = size - got > ((size_t)1 << 30) ? (size_t)1 << 30 : size - got;
            ssize_t r = read(fd, buf.data + got, chunk);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) {
                st =
                    qp_error_set(err, QP_ERR_IO, "%s: read failed after %zu of %zu bytes: %s", path,
                                 got, size, r < 0 ? strerror(errno) : "unexpected end of file");
                goto fail;
            }
            got += (size_t)r;
        }
    }
    close(fd);
    fd = -1;
    real = realpath(path, NULL);
    if (!real) {
        st = qp_error_set(err, QP_ERR_IO, "%s: cannot resolve path: %s", path, strerror(errno));
        goto fail;
    }
    dir = qp_onnx_path_dirname(real);
    if (!dir) {
        st = qp_error_set(err, QP_ERR_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    st = load_bytes(&buf, buf.data, size, path, real, dir, opts, NULL, model_out, err);
    buf.data = NULL; /* load_bytes releases it */
fail:
    if (fd >= 0) close(fd);
    file_buf_release(&buf);
    free(real);
    free(dir);
    return st;
}

enum qp_status qp_onnx_load_shared(const void *data, size_t size,
                                   const struct qp_onnx_shared *shared, struct qp_model **model_out,
                                   struct qp_error *err) {
    return load_bytes(NULL, data, size, "clone", NULL, NULL, NULL, shared, model_out, err);
}
