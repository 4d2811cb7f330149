/* qplace/graph.h: read-only access to a model's top-level graph, by name and topological
 * position, over the IR (ir.h). */
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "qplace/graph.h"

static const struct qp_graph *graph_of(const struct qp_model *m) {
    return m ? qp_model_graph(m) : NULL;
}

/* The node at topological position i, or NULL. */
static const struct qp_node *node_at(const struct qp_model *m, size_t i) {
    const struct qp_graph *g = graph_of(m);
    return g && i < g->n_topo ? &g->nodes[g->topo[i]] : NULL;
}

/* The topological position of node index `node`, or g->n_topo when it is not live. */
static size_t position_of(const struct qp_graph *g, int node) {
    for (size_t k = 0; k < g->n_topo; k++)
        if (g->topo[k] == node) return k;
    return g->n_topo;
}

size_t qp_model_n_nodes(const struct qp_model *m) {
    const struct qp_graph *g = graph_of(m);
    return g ? g->n_topo : 0;
}

enum qp_status qp_model_node(const struct qp_model *m, size_t i, struct qp_node_info *out,
                             struct qp_error *err) {
    const struct qp_node *n = node_at(m, i);
    if (!n || !out)
        return qp_error_set(err, QP_ERR_USAGE, "graph: node %zu is out of range (%zu nodes)", i,
                            qp_model_n_nodes(m));
    *out = (struct qp_node_info){.name = n->name ? n->name : "",
                                 .op_type = n->op_type,
                                 .domain = n->domain ? n->domain : "",
                                 .n_inputs = (size_t)n->n_inputs,
                                 .n_outputs = (size_t)n->n_outputs,
                                 .n_attrs = (size_t)n->n_attrs};
    return QP_OK;
}

static const char *slot_name(const struct qp_model *m, const int *slots, int n, size_t k) {
    if (k >= (size_t)n) return NULL;
    return slots[k] >= 0 ? qp_model_graph(m)->values[slots[k]].name : "";
}

const char *qp_model_node_input(const struct qp_model *m, size_t i, size_t k) {
    const struct qp_node *n = node_at(m, i);
    return n ? slot_name(m, n->inputs, n->n_inputs, k) : NULL;
}

const char *qp_model_node_output(const struct qp_model *m, size_t i, size_t k) {
    const struct qp_node *n = node_at(m, i);
    return n ? slot_name(m, n->outputs, n->n_outputs, k) : NULL;
}

int qp_model_find_node(const struct qp_model *m, const char *name, size_t *index_out) {
    const struct qp_graph *g = graph_of(m);
    if (!g || !name) return 0;
    int idx = qp_graph_find_node(g, name);
    if (idx < 0 || g->nodes[idx].dead) return 0;
    size_t pos = position_of(g, idx);
    if (pos == g->n_topo) return 0;
    if (index_out) *index_out = pos;
    return 1;
}

int qp_model_node_is(const struct qp_model *m, size_t i, const char *op_type) {
    const struct qp_node *n = node_at(m, i);
    return n && op_type && qp_node_is(n, op_type);
}

/* ---- attributes ----------------------------------------------------------------------------- */

_Static_assert((int)QP_ATTRIBUTE_TYPE_COUNT == (int)QP_ATTR_TYPE_COUNT,
               "public attribute types are the IR's (ONNX's numbers)");

/* A read-only array view of constant `t` (data NULL when it has none to show). */
static void tensor_view(const struct qp_tensor *t, struct qp_array *a) {
    memset(a, 0, sizeof *a);
    a->dtype = t->dtype;
    a->rank = t->rank > QP_MAX_RANK ? QP_MAX_RANK : t->rank;
    for (int k = 0; k < a->rank; k++)
        a->dims[k] = t->dims[k];
    if (t->dtype != QP_DTYPE_STRING && t->data) {
        a->data = (void *)t->data; /* read-only by contract (graph.h) */
        a->nbytes = t->nbytes;
    }
}

static void attribute_info(const struct qp_attr *at, struct qp_attribute_info *out) {
    memset(out, 0, sizeof *out);
    out->name = at->name;
    out->type = (enum qp_attribute_type)at->type;
    switch (at->type) {
    case QP_ATTR_INT:
        out->i = at->i;
        break;
    case QP_ATTR_FLOAT:
        out->f = at->f;
        break;
    case QP_ATTR_STRING:
        out->s = (const char *)at->s.data;
        out->s_len = at->s.len;
        break;
    case QP_ATTR_TENSOR:
        if (at->t) tensor_view(at->t, &out->t);
        break;
    case QP_ATTR_INTS:
        out->n = at->n;
        out->ints = at->ints;
        break;
    case QP_ATTR_FLOATS:
        out->n = at->n;
        out->floats = at->floats;
        break;
    default:
        out->n = at->n;
        break;
    }
}

enum qp_status qp_model_node_attribute(const struct qp_model *m, size_t i, size_t k,
                                       struct qp_attribute_info *out, struct qp_error *err) {
    const struct qp_node *n = node_at(m, i);
    if (!n || !out || k >= (size_t)n->n_attrs)
        return qp_error_set(err, QP_ERR_USAGE, "graph: node %zu has no attribute %zu", i, k);
    attribute_info(&n->attrs[k], out);
    return QP_OK;
}

int qp_model_node_find_attribute(const struct qp_model *m, size_t i, const char *name,
                                 struct qp_attribute_info *out) {
    const struct qp_node *n = node_at(m, i);
    if (!n || !name) return 0;
    for (int k = 0; k < n->n_attrs; k++) {
        if (strcmp(n->attrs[k].name, name) != 0) continue;
        if (out) attribute_info(&n->attrs[k], out);
        return 1;
    }
    return 0;
}

/* ---- tensors -------------------------------------------------------------------------------- */

static const struct qp_value *value_named(const struct qp_graph *g, const char *name) {
    int v = g && name ? qp_graph_find_value(g, name) : -1;
    return v >= 0 ? &g->values[v] : NULL;
}

enum qp_status qp_model_value(const struct qp_model *m, const char *name, struct qp_value_info *out,
                              struct qp_error *err) {
    const struct qp_graph *g = graph_of(m);
    const struct qp_value *v = value_named(g, name);
    if (!v || !out)
        return qp_error_set(err, QP_ERR_BAD_INPUT, "graph: the model has no tensor '%s'",
                            name ? name : "(null)");
    memset(out, 0, sizeof *out);
    out->name = v->name;
    out->is_tensor = v->kind == QP_VALUE_TENSOR;
    out->dtype = v->dtype;
    out->rank = v->rank;
    for (int k = 0; k < v->rank && k < QP_MAX_RANK; k++) {
        out->dims[k] = v->dims[k].value >= 0 ? v->dims[k].value : -1;
        out->dim_params[k] = v->dims[k].param;
    }
    out->is_initializer = v->initializer >= 0;
    out->is_input = v->is_graph_input && !out->is_initializer;
    out->is_output = v->is_graph_output;
    out->producer = v->producer >= 0 ? g->nodes[v->producer].name : NULL;
    for (size_t u = 0; u < v->n_uses; u++)
        out->n_consumers += !g->nodes[v->uses[u].node].dead;
    return QP_OK;
}

/* Graph inputs fed by the caller: the k-th one, or -1. */
static int fed_input(const struct qp_graph *g, size_t k) {
    for (size_t i = 0; g && i < g->n_inputs; i++)
        if (g->values[g->inputs[i]].initializer < 0 && k-- == 0) return g->inputs[i];
    return -1;
}

size_t qp_model_n_inputs(const struct qp_model *m) {
    const struct qp_graph *g = graph_of(m);
    size_t n = 0;
    for (size_t i = 0; g && i < g->n_inputs; i++)
        n += g->values[g->inputs[i]].initializer < 0;
    return n;
}

const char *qp_model_input_name(const struct qp_model *m, size_t i) {
    const struct qp_graph *g = graph_of(m);
    int v = fed_input(g, i);
    return v >= 0 ? g->values[v].name : NULL;
}

size_t qp_model_n_outputs(const struct qp_model *m) {
    const struct qp_graph *g = graph_of(m);
    return g ? g->n_outputs : 0;
}

const char *qp_model_output_name(const struct qp_model *m, size_t i) {
    const struct qp_graph *g = graph_of(m);
    return g && i < g->n_outputs ? g->values[g->outputs[i]].name : NULL;
}

static int cmp_consumer(const void *a, const void *b) {
    const struct qp_consumer *x = a, *y = b;
    if (x->node != y->node) return x->node < y->node ? -1 : 1;
    return x->input < y->input ? -1 : x->input > y->input;
}

enum qp_status qp_model_consumers(const struct qp_model *m, const char *name,
                                  struct qp_consumer *out, size_t cap, size_t *n_out,
                                  struct qp_error *err) {
    if (!n_out || (cap && !out))
        return qp_error_set(err, QP_ERR_USAGE, "graph: consumers: NULL output");
    const struct qp_graph *g = graph_of(m);
    const struct qp_value *v = value_named(g, name);
    if (!v)
        return qp_error_set(err, QP_ERR_BAD_INPUT, "graph: the model has no tensor '%s'",
                            name ? name : "(null)");
    /* Every live use, sorted; the uses are few, so insertion into `out` beats a heap copy. */
    size_t n = 0;
    for (size_t u = 0; u < v->n_uses; u++) {
        const struct qp_use *use = &v->uses[u];
        size_t pos = position_of(g, use->node);
        if (pos == g->n_topo) continue;
        struct qp_consumer c = {pos, (size_t)use->input, g->nodes[use->node].name};
        /* Keep the `cap` smallest: insert c in order, dropping the largest past cap. */
        size_t k = n < cap ? n : cap;
        while (k > 0 && cmp_consumer(&out[k - 1], &c) > 0) {
            if (k < cap) out[k] = out[k - 1];
            k--;
        }
        if (k < cap) out[k] = c;
        n++;
    }
    *n_out = n;
    return QP_OK;
}

/* ---- initializers --------------------------------------------------------------------------- */

size_t qp_model_n_initializers(const struct qp_model *m) {
    const struct qp_graph *g = graph_of(m);
    return g ? g->n_inits : 0;
}

const char *qp_model_initializer_name(const struct qp_model *m, size_t i) {
    const struct qp_graph *g = graph_of(m);
    return g && i < g->n_inits ? g->inits[i].name : NULL;
}

enum qp_status qp_model_initializer(const struct qp_model *m, const char *name,
                                    struct qp_array *view_out, struct qp_error *err) {
    const struct qp_graph *g = graph_of(m);
    const struct qp_value *v = value_named(g, name);
    if (!view_out) return qp_error_set(err, QP_ERR_USAGE, "graph: initializer: NULL output");
    if (!v || v->initializer < 0)
        return qp_error_set(err, QP_ERR_BAD_INPUT, "graph: the model has no initializer '%s'",
                            name ? name : "(null)");
    const struct qp_tensor *t = &g->inits[v->initializer];
    if (t->dtype == QP_DTYPE_STRING || !t->data || t->rank > QP_MAX_RANK)
        return qp_error_set(err, QP_ERR_UNSUPPORTED,
                            "graph: initializer '%s' has no data to view (%s)", name,
                            t->dtype == QP_DTYPE_STRING ? "string elements"
                            : t->rank > QP_MAX_RANK     ? "rank above 8"
                                                        : "external data not read");
    tensor_view(t, view_out);
    return QP_OK;
}
