/* Graph edits: unique names, rewiring, inserting nodes on edges, removing nodes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/size.h"
#include "core/arena.h"
#include "ir/ir.h"
#include "ir/ir_internal.h"

static int value_name_taken(const struct qp_model *m, const char *name) {
    for (size_t i = 0; i < m->n_graphs; i++)
        if (qp_graph_find_value(m->graphs[i], name) >= 0) return 1;
    return 0;
}

static int node_name_taken(const struct qp_model *m, const char *name) {
    for (size_t i = 0; i < m->n_graphs; i++)
        if (qp_graph_find_node(m->graphs[i], name) >= 0) return 1;
    return 0;
}

static const char *unique_name(struct qp_graph *g, const char *base,
                               int (*taken)(const struct qp_model *, const char *)) {
    if (!base || !*base) base = "qp";
    if (!taken(g->model, base)) return qp_arena_strdup(g->model->arena, base);
    size_t len = strlen(base) + 24;
    char *buf = malloc(len);
    if (!buf) return NULL;
    const char *out = NULL;
    for (unsigned long long k = 1;; k++) {
        snprintf(buf, len, "%s_%llu", base, k);
        if (!taken(g->model, buf)) {
            out = qp_arena_strdup(g->model->arena, buf);
            break;
        }
    }
    free(buf);
    return out;
}

const char *qp_graph_unique_value_name(struct qp_graph *g, const char *base) {
    return unique_name(g, base, value_name_taken);
}

const char *qp_graph_unique_node_name(struct qp_graph *g, const char *base) {
    return unique_name(g, base, node_name_taken);
}

static enum qp_status check_node(const struct qp_graph *g, int node, const char *what,
                                 struct qp_error *err) {
    if (node < 0 || (size_t)node >= g->n_nodes || g->nodes[node].dead)
        return qp_error_set(err, QP_ERR_USAGE, "graph: %s: no live node %d", what, node);
    return QP_OK;
}

enum qp_status qp_graph_set_input(struct qp_graph *g, int node, int input, int v,
                                  struct qp_error *err) {
    enum qp_status st = check_node(g, node, "set_input", err);
    if (st != QP_OK) return st;
    struct qp_node *n = &g->nodes[node];
    if (input < 0 || input >= n->n_inputs)
        return qp_error_set(err, QP_ERR_USAGE, "graph: node '%s' (%s) has no input %d", n->name,
                            n->op_type, input);
    if (v >= 0 && (size_t)v >= g->n_values)
        return qp_error_set(err, QP_ERR_USAGE, "graph: set_input: no value %d", v);
    if (v >= 0 && !qp_ir_use_add(&g->values[v], node, input))
        return qp_error_set(err, QP_ERR_NOMEM, "graph: out of memory");
    if (n->inputs[input] >= 0) qp_ir_use_remove(&g->values[n->inputs[input]], node, input);
    n->inputs[input] = v;
    return QP_OK;
}

/* Adds a node `op_type` reading `src` (then the extra inputs) and writing a new tensor shaped
 * like `src`. */
static enum qp_status add_inserted(struct qp_graph *g, int src, const char *op_type,
                                   const char *name_base, int n_extra, const char *const *extra,
                                   int *node_out, int *value_out, struct qp_error *err) {
    if (n_extra < 0 || n_extra > 64)
        return qp_error_set(err, QP_ERR_USAGE, "graph: insert: bad extra input count %d", n_extra);
    char out_base[512];
    snprintf(out_base, sizeof out_base, "%.480s_output", name_base ? name_base : op_type);
    const char *node_name = qp_graph_unique_node_name(g, name_base ? name_base : op_type);
    const char *out_name = qp_graph_unique_value_name(g, out_base);
    if (!node_name || !out_name) return qp_error_set(err, QP_ERR_NOMEM, "graph: out of memory");
    const char *inputs[65];
    inputs[0] = g->values[src].name;
    for (int i = 0; i < n_extra; i++)
        inputs[i + 1] = extra ? extra[i] : NULL;
    int node;
    enum qp_status st =
        qp_graph_add_node(g, node_name, op_type, "", n_extra + 1, inputs, 1, &out_name, &node, err);
    if (st != QP_OK) return st;
    int v = g->nodes[node].outputs[0];
    const struct qp_value *s = &g->values[src];
    struct qp_value *d = &g->values[v];
    d->kind = s->kind;
    d->dtype = s->dtype;
    d->rank = s->rank;
    d->dims = s->dims; /* arena-owned and never mutated in place */
    *node_out = node;
    *value_out = v;
    return QP_OK;
}

enum qp_status qp_graph_insert_on_edge(struct qp_graph *g, int consumer, int input,
                                       const char *op_type, const char *name_base,
                                       int n_extra_inputs, const char *const *extra_inputs,
                                       int *node_out, struct qp_error *err) {
    enum qp_status st = check_node(g, consumer, "insert_on_edge", err);
    if (st != QP_OK) return st;
    const struct qp_node *c = &g->nodes[consumer];
    if (input < 0 || input >= c->n_inputs || c->inputs[input] < 0)
        return qp_error_set(err, QP_ERR_USAGE, "graph: node '%s' (%s) has no input %d to insert on",
                            c->name, c->op_type, input);
    int src = c->inputs[input], node, v;
    st = add_inserted(g, src, op_type, name_base, n_extra_inputs, extra_inputs, &node, &v, err);
    if (st != QP_OK) return st;
    st = qp_graph_set_input(g, consumer, input, v, err);
    if (st != QP_OK) return st;
    if (node_out) *node_out = node;
    return QP_OK;
}

enum qp_status qp_graph_insert_on_value(struct qp_graph *g, int v, const char *op_type,
                                        const char *name_base, int n_extra_inputs,
                                        const char *const *extra_inputs, int *node_out,
                                        struct qp_error *err) {
    if (v < 0 || (size_t)v >= g->n_values)
        return qp_error_set(err, QP_ERR_USAGE, "graph: insert_on_value: no value %d", v);
    int node, nv;
    enum qp_status st =
        add_inserted(g, v, op_type, name_base, n_extra_inputs, extra_inputs, &node, &nv, err);
    if (st != QP_OK) return st;
    /* Move every use except the new node's own read; iterate over a copy since set_input edits
     * the list. */
    size_t n = g->values[v].n_uses;
    struct qp_use *uses = qp_malloc_n(n + 1, sizeof *uses);
    if (!uses) return qp_error_set(err, QP_ERR_NOMEM, "graph: out of memory");
    memcpy(uses, g->values[v].uses, n * sizeof *uses);
    for (size_t i = 0; i < n && st == QP_OK; i++) {
        if (uses[i].node == node) continue;
        st = qp_graph_set_input(g, uses[i].node, uses[i].input, nv, err);
    }
    free(uses);
    if (st != QP_OK) return st;
    if (node_out) *node_out = node;
    return QP_OK;
}

enum qp_status qp_graph_remove_node(struct qp_graph *g, int node, struct qp_error *err) {
    enum qp_status st = check_node(g, node, "remove_node", err);
    if (st != QP_OK) return st;
    struct qp_node *n = &g->nodes[node];
    for (int i = 0; i < n->n_inputs; i++)
        if (n->inputs[i] >= 0) qp_ir_use_remove(&g->values[n->inputs[i]], node, i);
    for (int i = 0; i < n->n_outputs; i++) {
        if (n->outputs[i] < 0) continue;
        struct qp_value *val = &g->values[n->outputs[i]];
        if (val->producer == node) val->producer = -1;
    }
    n->dead = 1;
    return QP_OK;
}
