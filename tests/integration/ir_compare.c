#include "ir_compare.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <protobuf-c/protobuf-c.h>

#include "ir/ir.h"
#include "onnx.pb-c.h"

/* Where we are in the model ("graph 'g' / node 3 'conv' / attr 'body'"), and the first
 * difference found. */
struct cmp {
    char where[1024];
    size_t where_len;
    char *msg;
    size_t size;
    int failed;
};

static size_t push(struct cmp *c, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static size_t push(struct cmp *c, const char *fmt, ...) {
    size_t saved = c->where_len;
    if (c->where_len + 4 >= sizeof c->where) return saved;
    if (c->where_len) {
        memcpy(c->where + c->where_len, " / ", 4);
        c->where_len += 3;
    }
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(c->where + c->where_len, sizeof c->where - c->where_len, fmt, ap);
    va_end(ap);
    if (n > 0) c->where_len += (size_t)n;
    if (c->where_len >= sizeof c->where) c->where_len = sizeof c->where - 1;
    return saved;
}

static void pop(struct cmp *c, size_t saved) {
    c->where_len = saved;
    c->where[saved] = 0;
}

static int differ(struct cmp *c, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static int differ(struct cmp *c, const char *fmt, ...) {
    if (c->failed) return 1;
    c->failed = 1;
    char what[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(c->msg, c->size, "%s: %s", c->where_len ? c->where : "model", what);
    return 1;
}

static const char *str_or_empty(const char *s) {
    return s ? s : "";
}

static int cmp_str(struct cmp *c, const char *field, const char *a, const char *b) {
    if (strcmp(str_or_empty(a), str_or_empty(b)) == 0) return 0;
    return differ(c, "%s '%.200s' vs '%.200s'", field, str_or_empty(a), str_or_empty(b));
}

static int cmp_i64(struct cmp *c, const char *field, int64_t a, int64_t b) {
    if (a == b) return 0;
    return differ(c, "%s %lld vs %lld", field, (long long)a, (long long)b);
}

static int cmp_mem(struct cmp *c, const char *field, const void *a, size_t na, const void *b,
                   size_t nb) {
    if (na != nb) return differ(c, "%s: %zu vs %zu bytes", field, na, nb);
    if (na == 0) return 0;
    if (!a || !b)
        return differ(c, "%s: data %s vs %s", field, a ? "present" : "missing",
                      b ? "present" : "missing");
    if (memcmp(a, b, na) == 0) return 0;
    size_t k = 0;
    while (((const uint8_t *)a)[k] == ((const uint8_t *)b)[k])
        k++;
    return differ(c, "%s: bytes differ at offset %zu (0x%02x vs 0x%02x)", field, k,
                  ((const uint8_t *)a)[k], ((const uint8_t *)b)[k]);
}

static int cmp_bytes(struct cmp *c, const char *field, const struct qp_bytes *a,
                     const struct qp_bytes *b) {
    return cmp_mem(c, field, a->data, a->len, b->data, b->len);
}

/* Serialized protobuf messages compare by their packed bytes (protobuf-c packs in field-number
 * order, so equal contents pack equally). */
static int cmp_proto(struct cmp *c, const char *field, const void *a, const void *b) {
    if (!a && !b) return 0;
    if (!a || !b)
        return differ(c, "%s: %s vs %s", field, a ? "present" : "absent", b ? "present" : "absent");
    const ProtobufCMessage *ma = a, *mb = b;
    if (ma->descriptor != mb->descriptor)
        return differ(c, "%s: message types %s vs %s", field, ma->descriptor->name,
                      mb->descriptor->name);
    size_t na = protobuf_c_message_get_packed_size(ma);
    size_t nb = protobuf_c_message_get_packed_size(mb);
    uint8_t *pa = malloc(na ? na : 1), *pb = malloc(nb ? nb : 1);
    int r;
    if (!pa || !pb) {
        r = differ(c, "%s: out of memory comparing", field);
    } else {
        protobuf_c_message_pack(ma, pa);
        protobuf_c_message_pack(mb, pb);
        r = cmp_mem(c, field, pa, na, pb, nb);
    }
    free(pa);
    free(pb);
    return r;
}

static int cmp_graph(struct cmp *c, const struct qp_graph *a, const struct qp_graph *b);

static int cmp_dims(struct cmp *c, int rank, const int64_t *a, const int64_t *b) {
    for (int k = 0; k < rank; k++)
        if (a[k] != b[k])
            return differ(c, "dim %d: %lld vs %lld", k, (long long)a[k], (long long)b[k]);
    return 0;
}

static int cmp_tensor(struct cmp *c, const struct qp_tensor *a, const struct qp_tensor *b) {
    if (!a || !b) {
        if (a == b) return 0;
        return differ(c, "tensor %s vs %s", a ? "present" : "absent", b ? "present" : "absent");
    }
    size_t saved = push(c, "tensor '%.200s'", str_or_empty(a->name));
    int r = cmp_str(c, "name", a->name, b->name) ||
            cmp_str(c, "doc_string", a->doc_string, b->doc_string) ||
            cmp_i64(c, "dtype", a->dtype, b->dtype) || cmp_i64(c, "rank", a->rank, b->rank) ||
            cmp_dims(c, a->rank, a->dims, b->dims) ||
            cmp_i64(c, "numel", (int64_t)a->numel, (int64_t)b->numel);
    if (!r && a->dtype == QP_DTYPE_STRING) {
        if (!a->strings != !b->strings) {
            r = differ(c, "string data %s vs %s", a->strings ? "present" : "absent",
                       b->strings ? "present" : "absent");
        } else if (a->strings) {
            for (uint64_t k = 0; !r && k < a->numel; k++) {
                char field[64];
                snprintf(field, sizeof field, "string %llu", (unsigned long long)k);
                r = cmp_bytes(c, field, &a->strings[k], &b->strings[k]);
            }
        }
    } else if (!r) {
        r = cmp_mem(c, "data", a->data, a->nbytes, b->data, b->nbytes);
    }
    pop(c, saved);
    return r;
}

static int cmp_attr_proto(struct cmp *c, enum qp_attr_type type, const void *a, const void *b) {
    if (!a || !b) return cmp_proto(c, "AttributeProto", a, b);
    const Onnx__AttributeProto *pa = a, *pb = b;
    int r = 0;
    switch (type) {
    case QP_ATTR_SPARSE_TENSOR:
        return cmp_proto(c, "sparse_tensor", pa->sparse_tensor, pb->sparse_tensor);
    case QP_ATTR_TYPE_PROTO:
        return cmp_proto(c, "tp", pa->tp, pb->tp);
    case QP_ATTR_SPARSE_TENSORS:
        r = cmp_i64(c, "n", (int64_t)pa->n_sparse_tensors, (int64_t)pb->n_sparse_tensors);
        for (size_t k = 0; !r && k < pa->n_sparse_tensors; k++)
            r = cmp_proto(c, "sparse_tensors", pa->sparse_tensors[k], pb->sparse_tensors[k]);
        return r;
    case QP_ATTR_TYPE_PROTOS:
        r = cmp_i64(c, "n", (int64_t)pa->n_type_protos, (int64_t)pb->n_type_protos);
        for (size_t k = 0; !r && k < pa->n_type_protos; k++)
            r = cmp_proto(c, "type_protos", pa->type_protos[k], pb->type_protos[k]);
        return r;
    default:
        /* An attribute type qplace does not know: the whole AttributeProto. */
        return cmp_proto(c, "AttributeProto", a, b);
    }
}

static int cmp_attr(struct cmp *c, const struct qp_attr *a, const struct qp_attr *b) {
    size_t saved = push(c, "attr '%.200s'", str_or_empty(a->name));
    int r = cmp_str(c, "name", a->name, b->name) || cmp_i64(c, "type", a->type, b->type) ||
            cmp_str(c, "ref_attr_name", a->ref_attr_name, b->ref_attr_name) ||
            cmp_str(c, "doc_string", a->doc_string, b->doc_string);
    if (r || (a->ref_attr_name && a->ref_attr_name[0])) goto out;
    switch (a->type) {
    case QP_ATTR_FLOAT:
        r = cmp_mem(c, "f", &a->f, sizeof a->f, &b->f, sizeof b->f);
        break;
    case QP_ATTR_INT:
        r = cmp_i64(c, "i", a->i, b->i);
        break;
    case QP_ATTR_STRING:
        r = cmp_bytes(c, "s", &a->s, &b->s);
        break;
    case QP_ATTR_TENSOR:
        r = cmp_tensor(c, a->t, b->t);
        break;
    case QP_ATTR_GRAPH:
        if (!a->g || !b->g)
            r = (a->g != b->g) && differ(c, "graph %s vs %s", a->g ? "present" : "absent",
                                         b->g ? "present" : "absent");
        else
            r = cmp_graph(c, a->g, b->g);
        break;
    case QP_ATTR_FLOATS:
        r = cmp_i64(c, "n", (int64_t)a->n, (int64_t)b->n) ||
            cmp_mem(c, "floats", a->floats, a->n * sizeof(float), b->floats, b->n * sizeof(float));
        break;
    case QP_ATTR_INTS:
        r = cmp_i64(c, "n", (int64_t)a->n, (int64_t)b->n) ||
            cmp_mem(c, "ints", a->ints, a->n * sizeof(int64_t), b->ints, b->n * sizeof(int64_t));
        break;
    case QP_ATTR_STRINGS:
        r = cmp_i64(c, "n", (int64_t)a->n, (int64_t)b->n);
        for (size_t k = 0; !r && k < a->n; k++)
            r = cmp_bytes(c, "strings", &a->strings[k], &b->strings[k]);
        break;
    case QP_ATTR_TENSORS:
        r = cmp_i64(c, "n", (int64_t)a->n, (int64_t)b->n);
        for (size_t k = 0; !r && k < a->n; k++)
            r = cmp_tensor(c, a->tensors[k], b->tensors[k]);
        break;
    case QP_ATTR_GRAPHS:
        r = cmp_i64(c, "n", (int64_t)a->n, (int64_t)b->n);
        for (size_t k = 0; !r && k < a->n; k++) {
            size_t s2 = push(c, "graph %zu", k);
            r = cmp_graph(c, a->graphs[k], b->graphs[k]);
            pop(c, s2);
        }
        break;
    default:
        /* Sparse tensors and type protos are kept only in the AttributeProto the loader read:
         * compare the field the attribute's type names (fields that disagree with the type are
         * not part of the attribute's value). */
        r = cmp_attr_proto(c, a->type, a->origin, b->origin);
        break;
    }
out:
    pop(c, saved);
    return r;
}

static int cmp_value(struct cmp *c, const struct qp_value *a, const struct qp_value *b) {
    size_t saved = push(c, "value '%.200s'", str_or_empty(a->name));
    int r = cmp_str(c, "name", a->name, b->name) ||
            cmp_str(c, "doc_string", a->doc_string, b->doc_string) ||
            cmp_i64(c, "kind", a->kind, b->kind) || cmp_i64(c, "dtype", a->dtype, b->dtype) ||
            cmp_i64(c, "rank", a->rank, b->rank) ||
            cmp_i64(c, "is_graph_input", a->is_graph_input, b->is_graph_input) ||
            cmp_i64(c, "is_graph_output", a->is_graph_output, b->is_graph_output) ||
            cmp_i64(c, "is_outer", a->is_outer, b->is_outer) ||
            cmp_i64(c, "in_value_info", a->in_value_info, b->in_value_info) ||
            cmp_i64(c, "has initializer", a->initializer >= 0, b->initializer >= 0) ||
            cmp_i64(c, "has producer", a->producer >= 0, b->producer >= 0);
    for (int k = 0; !r && k < a->rank; k++) {
        size_t s2 = push(c, "dim %d", k);
        r = cmp_i64(c, "dim_value", a->dims[k].value, b->dims[k].value) ||
            cmp_str(c, "dim_param", a->dims[k].param, b->dims[k].param);
        pop(c, s2);
    }
    /* A type the file left out may come back filled in (a graph input typed from its
     * initializer); the fields above already say whether it is the same type. */
    if (!r && a->origin_type && b->origin_type)
        r = cmp_proto(c, "TypeProto", a->origin_type, b->origin_type);
    pop(c, saved);
    return r;
}

static const char *value_name(const struct qp_graph *g, int v) {
    if (v < 0) return "";
    if ((size_t)v >= g->n_values) return "<bad value index>";
    return str_or_empty(g->values[v].name);
}

static int cmp_value_list(struct cmp *c, const char *what, const struct qp_graph *a, const int *va,
                          size_t na, const struct qp_graph *b, const int *vb, size_t nb) {
    if (na != nb) return differ(c, "%s count %zu vs %zu", what, na, nb);
    for (size_t k = 0; k < na; k++) {
        size_t saved = push(c, "%s %zu", what, k);
        int r = cmp_str(c, "name", value_name(a, va[k]), value_name(b, vb[k]));
        if (!r && va[k] >= 0 && vb[k] >= 0) r = cmp_value(c, &a->values[va[k]], &b->values[vb[k]]);
        pop(c, saved);
        if (r) return r;
    }
    return 0;
}

static int cmp_node(struct cmp *c, const struct qp_graph *ga, const struct qp_node *a,
                    const struct qp_graph *gb, const struct qp_node *b) {
    int r = cmp_str(c, "name", a->name, b->name) || cmp_str(c, "op_type", a->op_type, b->op_type) ||
            cmp_str(c, "domain", a->domain, b->domain) ||
            cmp_str(c, "doc_string", a->doc_string, b->doc_string) ||
            cmp_i64(c, "input count", a->n_inputs, b->n_inputs) ||
            cmp_i64(c, "output count", a->n_outputs, b->n_outputs) ||
            cmp_i64(c, "attribute count", a->n_attrs, b->n_attrs);
    for (int k = 0; !r && k < a->n_inputs; k++) {
        char field[32];
        snprintf(field, sizeof field, "input %d", k);
        r = cmp_str(c, field, value_name(ga, a->inputs[k]), value_name(gb, b->inputs[k]));
    }
    for (int k = 0; !r && k < a->n_outputs; k++) {
        char field[32];
        snprintf(field, sizeof field, "output %d", k);
        r = cmp_str(c, field, value_name(ga, a->outputs[k]), value_name(gb, b->outputs[k]));
    }
    for (int k = 0; !r && k < a->n_attrs; k++)
        r = cmp_attr(c, &a->attrs[k], &b->attrs[k]);
    return r;
}

static size_t count_live(const struct qp_graph *g) {
    size_t n = 0;
    for (size_t k = 0; k < g->n_nodes; k++)
        n += !g->nodes[k].dead;
    return n;
}

/* Index of the k-th live node in index order (k < count_live(g)). */
static size_t nth_live(const struct qp_graph *g, size_t k) {
    for (size_t j = 0; j < g->n_nodes; j++)
        if (!g->nodes[j].dead && k-- == 0) return j;
    return 0;
}

/* The graph's topological order when it covers every live node (sets *n to the live count);
 * NULL when the graph was not sorted, so callers walk index order. */
static const int *node_order(const struct qp_graph *g, size_t *n) {
    *n = count_live(g);
    if (!g->topo || g->n_topo != *n) return NULL;
    for (size_t k = 0; k < g->n_topo; k++)
        if (g->topo[k] < 0 || (size_t)g->topo[k] >= g->n_nodes) return NULL;
    return g->topo;
}

static int cmp_graph(struct cmp *c, const struct qp_graph *a, const struct qp_graph *b) {
    size_t saved = push(c, "graph '%.200s'", str_or_empty(a->name));
    int r = cmp_str(c, "name", a->name, b->name) ||
            cmp_str(c, "doc_string", a->doc_string, b->doc_string) ||
            cmp_value_list(c, "input", a, a->inputs, a->n_inputs, b, b->inputs, b->n_inputs) ||
            cmp_value_list(c, "output", a, a->outputs, a->n_outputs, b, b->outputs, b->n_outputs) ||
            cmp_value_list(c, "value_info", a, a->value_info, a->n_value_info, b, b->value_info,
                           b->n_value_info) ||
            cmp_i64(c, "initializer count", (int64_t)a->n_inits, (int64_t)b->n_inits) ||
            cmp_i64(c, "subgraph count", (int64_t)a->n_subgraphs, (int64_t)b->n_subgraphs);
    for (size_t k = 0; !r && k < a->n_inits; k++) {
        size_t s2 = push(c, "initializer %zu", k);
        r = cmp_tensor(c, &a->inits[k], &b->inits[k]) ||
            cmp_str(c, "value", value_name(a, a->inits_value[k]), value_name(b, b->inits_value[k]));
        pop(c, s2);
    }
    /* Live nodes in topological order: the saver writes nodes topologically sorted, so a file
     * whose nodes were out of order comes back reordered but otherwise the same. Graphs never
     * sorted are compared in index order. */
    size_t na = 0, nb = 0;
    const int *oa = node_order(a, &na), *ob = node_order(b, &nb);
    if (!r && na != nb) r = differ(c, "live node count %zu vs %zu", na, nb);
    for (size_t k = 0; !r && k < na; k++) {
        const struct qp_node *x = &a->nodes[oa ? (size_t)oa[k] : nth_live(a, k)];
        const struct qp_node *y = &b->nodes[ob ? (size_t)ob[k] : nth_live(b, k)];
        size_t s2 = push(c, "node %zu '%.200s' (%.100s)", k, str_or_empty(x->name),
                         str_or_empty(x->op_type));
        r = cmp_node(c, a, x, b, y);
        pop(c, s2);
    }
    /* Every value (intermediate tensors included) by name: same set, same types. */
    if (!r) r = cmp_i64(c, "value count", (int64_t)a->n_values, (int64_t)b->n_values);
    for (size_t k = 0; !r && k < a->n_values; k++) {
        int v = qp_graph_find_value(b, a->values[k].name);
        if (v < 0)
            r = differ(c, "value '%.200s' missing from the second model", a->values[k].name);
        else
            r = cmp_value(c, &a->values[k], &b->values[v]);
    }
    /* What the IR keeps only in the GraphProto. */
    if (!r && (a->origin || b->origin)) {
        if (!a->origin || !b->origin) {
            r = differ(c, "GraphProto %s vs %s", a->origin ? "present" : "absent",
                       b->origin ? "present" : "absent");
        } else {
            const Onnx__GraphProto *pa = a->origin, *pb = b->origin;
            r = cmp_i64(c, "sparse_initializer count", (int64_t)pa->n_sparse_initializer,
                        (int64_t)pb->n_sparse_initializer) ||
                cmp_i64(c, "quantization_annotation count", (int64_t)pa->n_quantization_annotation,
                        (int64_t)pb->n_quantization_annotation);
            for (size_t k = 0; !r && k < pa->n_sparse_initializer; k++)
                r = cmp_proto(c, "sparse_initializer", pa->sparse_initializer[k],
                              pb->sparse_initializer[k]);
            for (size_t k = 0; !r && k < pa->n_quantization_annotation; k++)
                r = cmp_proto(c, "quantization_annotation", pa->quantization_annotation[k],
                              pb->quantization_annotation[k]);
        }
    }
    pop(c, saved);
    return r;
}

int qp_test_model_compare(const struct qp_model *a, const struct qp_model *b, char *msg,
                          size_t size) {
    struct cmp c = {.msg = msg, .size = size};
    if (size) msg[0] = 0;
    int r = cmp_i64(&c, "ir_version", a->ir_version, b->ir_version) ||
            cmp_str(&c, "producer_name", a->producer_name, b->producer_name) ||
            cmp_str(&c, "producer_version", a->producer_version, b->producer_version) ||
            cmp_str(&c, "domain", a->domain, b->domain) ||
            cmp_str(&c, "doc_string", a->doc_string, b->doc_string) ||
            cmp_i64(&c, "model_version", a->model_version, b->model_version) ||
            cmp_i64(&c, "opset count", (int64_t)a->n_opsets, (int64_t)b->n_opsets) ||
            cmp_i64(&c, "metadata count", (int64_t)a->n_metadata, (int64_t)b->n_metadata) ||
            cmp_i64(&c, "function count", (int64_t)a->n_functions, (int64_t)b->n_functions);
    for (size_t k = 0; !r && k < a->n_opsets; k++) {
        size_t saved = push(&c, "opset %zu", k);
        r = cmp_str(&c, "domain", a->opsets[k].domain, b->opsets[k].domain) ||
            cmp_i64(&c, "version", a->opsets[k].version, b->opsets[k].version);
        pop(&c, saved);
    }
    for (size_t k = 0; !r && k < a->n_metadata; k++) {
        size_t saved = push(&c, "metadata %zu", k);
        r = cmp_str(&c, "key", a->metadata[k].key, b->metadata[k].key) ||
            cmp_str(&c, "value", a->metadata[k].value, b->metadata[k].value);
        pop(&c, saved);
    }
    for (size_t k = 0; !r && k < a->n_functions; k++) {
        size_t saved = push(&c, "function %zu", k);
        r = cmp_proto(&c, "FunctionProto", a->functions[k], b->functions[k]);
        pop(&c, saved);
    }
    if (!r) {
        if (!a->graph || !b->graph)
            r = (a->graph != b->graph) &&
                differ(&c, "graph %s vs %s", a->graph ? "present" : "absent",
                       b->graph ? "present" : "absent");
        else
            r = cmp_graph(&c, a->graph, b->graph);
    }
    return r ? 1 : 0;
}
