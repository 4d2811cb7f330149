/* Graph construction: values, nodes, attributes, initializers, graph inputs and outputs. */
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "core/size.h"
#include "ir/ir.h"
#include "ir/ir_internal.h"

struct qp_graph *qp_graph_create(struct qp_model *m, struct qp_graph *parent) {
    if (m->n_graphs == m->cap_graphs) {
        size_t cap = m->cap_graphs ? m->cap_graphs * 2 : 4;
        struct qp_graph **graphs = qp_realloc_n(m->graphs, cap, sizeof *graphs);
        if (!graphs) return NULL;
        m->graphs = graphs;
        m->cap_graphs = cap;
    }
    struct qp_graph *g = qp_arena_alloc(m->arena, sizeof *g);
    if (!g) return NULL;
    g->model = m;
    g->parent = parent;
    m->graphs[m->n_graphs++] = g;
    if (parent) parent->n_subgraphs++;
    return g;
}

void qp_graph_release(struct qp_graph *g) {
    if (!g) return;
    for (size_t i = 0; i < g->n_values; i++)
        free(g->values[i].uses);
    free(g->values);
    free(g->nodes);
    free(g->inits);
    free(g->inits_value);
    free(g->inputs);
    free(g->outputs);
    free(g->value_info);
    free(g->topo);
    free(g->hash);
    free(g->node_hash);
    memset(g, 0, sizeof *g);
}

/* ---- growable arrays ---------------------------------------------------------------------- */

int qp_ir_grow(void **arr, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 1;
    size_t c = *cap ? *cap : 8;
    while (c < need)
        if (!qp_size_mul(c, 2, &c)) return 0;
    void *p = qp_realloc_n(*arr, c, elem);
    if (!p) return 0;
    *arr = p;
    *cap = c;
    return 1;
}

/* ---- name hashes --------------------------------------------------------------------------- */

uint64_t qp_ir_hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int value_hash_rebuild(struct qp_graph *g, size_t cap) {
    int *h = qp_malloc_n(cap, sizeof *h);
    if (!h) return 0;
    memset(h, 0xff, cap * sizeof *h);
    for (size_t i = 0; i < g->n_values; i++) {
        size_t k = qp_ir_hash_str(g->values[i].name) & (cap - 1);
        while (h[k] >= 0)
            k = (k + 1) & (cap - 1);
        h[k] = (int)i;
    }
    free(g->hash);
    g->hash = h;
    g->hash_cap = cap;
    return 1;
}

int qp_graph_find_value(const struct qp_graph *g, const char *name) {
    if (!g->hash_cap || !name) return -1;
    size_t k = qp_ir_hash_str(name) & (g->hash_cap - 1);
    while (g->hash[k] >= 0) {
        if (!strcmp(g->values[g->hash[k]].name, name)) return g->hash[k];
        k = (k + 1) & (g->hash_cap - 1);
    }
    return -1;
}

int qp_graph_value(struct qp_graph *g, const char *name) {
    int v = qp_graph_find_value(g, name);
    if (v >= 0) return v;
    if (g->n_values >= (size_t)0x7fffffff) return -1;
    /* Keep the load factor under one half. */
    if ((g->n_values + 1) * 2 > g->hash_cap) {
        size_t cap = g->hash_cap ? g->hash_cap * 2 : 64;
        while ((g->n_values + 1) * 2 > cap)
            cap *= 2;
        if (!value_hash_rebuild(g, cap)) return -1;
    }
    if (!qp_ir_grow((void **)&g->values, &g->cap_values, g->n_values + 1, sizeof *g->values))
        return -1;
    const char *copy = qp_arena_strdup(g->model->arena, name);
    if (!copy) return -1;
    struct qp_value *val = &g->values[g->n_values];
    memset(val, 0, sizeof *val);
    val->name = copy;
    val->rank = -1;
    val->producer = -1;
    val->initializer = -1;
    v = (int)g->n_values++;
    size_t k = qp_ir_hash_str(copy) & (g->hash_cap - 1);
    while (g->hash[k] >= 0)
        k = (k + 1) & (g->hash_cap - 1);
    g->hash[k] = v;
    return v;
}

int qp_ir_node_hash_rebuild(struct qp_graph *g) {
    size_t cap = 64;
    while (g->n_nodes * 2 >= cap)
        cap *= 2;
    int *h = qp_malloc_n(cap, sizeof *h);
    if (!h) return 0;
    memset(h, 0xff, cap * sizeof *h);
    g->node_hash_n = 0;
    for (size_t i = 0; i < g->n_nodes; i++) {
        const struct qp_node *n = &g->nodes[i];
        if (n->dead || !n->name || !*n->name) continue;
        size_t k = qp_ir_hash_str(n->name) & (cap - 1);
        int dup = 0;
        while (h[k] >= 0) {
            if (!strcmp(g->nodes[h[k]].name, n->name)) {
                dup = 1; /* the first of repeated names wins */
                break;
            }
            k = (k + 1) & (cap - 1);
        }
        if (!dup) {
            h[k] = (int)i;
            g->node_hash_n++;
        }
    }
    free(g->node_hash);
    g->node_hash = h;
    g->node_hash_cap = cap;
    return 1;
}

/* Adds node `i` to the node-name hash (no-op for unnamed nodes or names already present). */
static int node_hash_add(struct qp_graph *g, int i) {
    const char *name = g->nodes[i].name;
    if (!name || !*name) return 1;
    if ((g->node_hash_n + 1) * 2 > g->node_hash_cap) return qp_ir_node_hash_rebuild(g);
    size_t k = qp_ir_hash_str(name) & (g->node_hash_cap - 1);
    while (g->node_hash[k] >= 0) {
        if (!strcmp(g->nodes[g->node_hash[k]].name, name)) return 1;
        k = (k + 1) & (g->node_hash_cap - 1);
    }
    g->node_hash[k] = i;
    g->node_hash_n++;
    return 1;
}

size_t qp_graph_mark_downstream(const struct qp_graph *g, unsigned char *mark, int *stack,
                                size_t n) {
    size_t visited = 0;
    while (n) {
        const struct qp_node *nd = &g->nodes[stack[--n]];
        visited++;
        for (int o = 0; o < nd->n_outputs; o++) {
            if (nd->outputs[o] < 0) continue;
            const struct qp_value *v = &g->values[nd->outputs[o]];
            for (size_t u = 0; u < v->n_uses; u++)
                if (!mark[v->uses[u].node]) {
                    mark[v->uses[u].node] = 1;
                    stack[n++] = v->uses[u].node;
                }
        }
    }
    return visited;
}

int qp_graph_find_node(const struct qp_graph *g, const char *name) {
    if (!name || !*name) return -1;
    if (!g->node_hash_cap) return -1;
    size_t k = qp_ir_hash_str(name) & (g->node_hash_cap - 1);
    for (;;) {
        if (g->node_hash[k] < 0) return -1;
        const struct qp_node *n = &g->nodes[g->node_hash[k]];
        if (!strcmp(n->name, name)) {
            if (!n->dead) return g->node_hash[k];
            break;
        }
        k = (k + 1) & (g->node_hash_cap - 1);
    }
    /* The hashed node is dead; a later node of the same name may be live. */
    for (size_t i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && g->nodes[i].name && !strcmp(g->nodes[i].name, name)) return (int)i;
    return -1;
}

/* ---- uses ---------------------------------------------------------------------------------- */

int qp_ir_use_add(struct qp_value *val, int node, int input) {
    if (!qp_ir_grow((void **)&val->uses, &val->cap_uses, val->n_uses + 1, sizeof *val->uses))
        return 0;
    val->uses[val->n_uses].node = node;
    val->uses[val->n_uses].input = input;
    val->n_uses++;
    return 1;
}

void qp_ir_use_remove(struct qp_value *val, int node, int input) {
    for (size_t i = 0; i < val->n_uses; i++) {
        if (val->uses[i].node == node && val->uses[i].input == input) {
            val->uses[i] = val->uses[val->n_uses - 1];
            val->n_uses--;
            return;
        }
    }
}

/* ---- nodes --------------------------------------------------------------------------------- */

static const char *node_label(const char *name) {
    return name && *name ? name : "(unnamed)";
}

enum qp_status qp_graph_add_node(struct qp_graph *g, const char *name, const char *op_type,
                                 const char *domain, int n_inputs, const char *const *inputs,
                                 int n_outputs, const char *const *outputs, int *node_out,
                                 struct qp_error *err) {
    struct qp_arena *a = g->model->arena;
    if (n_inputs < 0 || n_outputs < 0 || !op_type)
        return qp_error_set(err, QP_ERR_USAGE, "graph: add_node: bad arguments");
    if (g->n_nodes >= (size_t)0x7fffffff)
        return qp_error_set(err, QP_ERR_BAD_INPUT, "graph: too many nodes");
    if (!qp_ir_grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof *g->nodes))
        goto nomem;
    struct qp_node n = {0};
    n.name = qp_arena_strdup(a, name ? name : "");
    n.op_type = qp_arena_strdup(a, op_type);
    n.domain = qp_arena_strdup(a, domain ? domain : "");
    n.n_inputs = n_inputs;
    n.n_outputs = n_outputs;
    n.inputs = qp_arena_calloc(a, (size_t)n_inputs, sizeof *n.inputs);
    n.outputs = qp_arena_calloc(a, (size_t)n_outputs, sizeof *n.outputs);
    if (!n.name || !n.op_type || !n.domain || !n.inputs || !n.outputs) goto nomem;
    int idx = (int)g->n_nodes;
    /* Resolve outputs first: a producer conflict must leave the graph unchanged. */
    for (int i = 0; i < n_outputs; i++) {
        n.outputs[i] = -1;
        if (!outputs[i] || !*outputs[i]) continue;
        int v = qp_graph_value(g, outputs[i]);
        if (v < 0) goto nomem;
        const struct qp_value *val = &g->values[v];
        if (val->producer >= 0)
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "graph: tensor '%s' is produced by both node '%s' and node '%s'",
                                val->name, node_label(g->nodes[val->producer].name),
                                node_label(name));
        if (val->initializer >= 0 || val->is_graph_input)
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "graph: node '%s' (%s) writes tensor '%s', which is also a graph "
                                "%s",
                                node_label(name), op_type, val->name,
                                val->initializer >= 0 ? "initializer" : "input");
        for (int j = 0; j < i; j++)
            if (n.outputs[j] == v)
                return qp_error_set(err, QP_ERR_BAD_INPUT,
                                    "graph: node '%s' (%s) writes tensor '%s' twice",
                                    node_label(name), op_type, val->name);
        n.outputs[i] = v;
    }
    for (int i = 0; i < n_inputs; i++) {
        n.inputs[i] = -1;
        if (!inputs[i] || !*inputs[i]) continue;
        int v = qp_graph_value(g, inputs[i]);
        if (v < 0) goto nomem;
        if (!qp_ir_use_add(&g->values[v], idx, i)) goto nomem;
        n.inputs[i] = v;
    }
    for (int i = 0; i < n_outputs; i++) {
        if (n.outputs[i] < 0) continue;
        g->values[n.outputs[i]].producer = idx;
        g->values[n.outputs[i]].producer_output = i;
    }
    g->nodes[g->n_nodes++] = n;
    if (!node_hash_add(g, idx)) goto nomem;
    if (node_out) *node_out = idx;
    return QP_OK;
nomem:
    return qp_error_set(err, QP_ERR_NOMEM, "graph: out of memory adding node '%s'",
                        node_label(name));
}

struct qp_attr *qp_node_add_attr(struct qp_graph *g, int node, const char *name,
                                 enum qp_attr_type type) {
    struct qp_node *n = &g->nodes[node];
    const char *copy = qp_arena_strdup(g->model->arena, name ? name : "");
    if (!copy || n->n_attrs >= 0x3fffffff) return NULL;
    /* Callers that fill attrs themselves may leave cap_attrs at 0: treat it as full. */
    if (n->n_attrs >= n->cap_attrs) {
        int cap = n->n_attrs < 4 ? 4 : n->n_attrs * 2;
        struct qp_attr *attrs = qp_arena_calloc(g->model->arena, (size_t)cap, sizeof *attrs);
        if (!attrs) return NULL;
        if (n->n_attrs) memcpy(attrs, n->attrs, (size_t)n->n_attrs * sizeof *attrs);
        n->attrs = attrs;
        n->cap_attrs = cap;
    }
    struct qp_attr *at = &n->attrs[n->n_attrs++];
    memset(at, 0, sizeof *at);
    at->name = copy;
    at->type = type;
    return at;
}

int qp_domain_is_onnx(const char *domain) {
    return !domain || !domain[0] || strcmp(domain, "ai.onnx") == 0;
}

int qp_node_is(const struct qp_node *n, const char *op) {
    return qp_domain_is_onnx(n->domain) && strcmp(n->op_type, op) == 0;
}

const struct qp_attr *qp_node_attr(const struct qp_node *n, const char *name) {
    for (int i = 0; i < n->n_attrs; i++)
        if (!strcmp(n->attrs[i].name, name)) return &n->attrs[i];
    return NULL;
}

/* ---- initializers, inputs, outputs ------------------------------------------------------- */

enum qp_status qp_graph_add_initializer(struct qp_graph *g, const struct qp_tensor *t,
                                        int *value_out, struct qp_error *err) {
    if (!t->name || !*t->name)
        return qp_error_set(err, QP_ERR_BAD_INPUT, "graph: an initializer has no name");
    int v = qp_graph_value(g, t->name);
    if (v < 0) goto nomem;
    struct qp_value *val = &g->values[v];
    if (val->initializer >= 0)
        return qp_error_set(err, QP_ERR_BAD_INPUT, "graph: initializer '%s' is defined twice",
                            t->name);
    if (val->producer >= 0)
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "graph: initializer '%s' is also produced by node '%s'", t->name,
                            node_label(g->nodes[val->producer].name));
    if (!qp_ir_grow((void **)&g->inits, &g->cap_inits, g->n_inits + 1, sizeof *g->inits))
        goto nomem;
    /* inits_value always has the capacity of inits. */
    int *iv = qp_realloc_n(g->inits_value, g->cap_inits, sizeof *iv);
    if (!iv) goto nomem;
    g->inits_value = iv;
    g->inits[g->n_inits] = *t;
    g->inits[g->n_inits].name = val->name;
    g->inits_value[g->n_inits] = v;
    val->initializer = (int)g->n_inits++;
    val->kind = QP_VALUE_TENSOR;
    if (val->dtype == QP_DTYPE_UNDEFINED) val->dtype = t->dtype;
    if (val->rank < 0) {
        val->dims = qp_arena_calloc(g->model->arena, (size_t)t->rank, sizeof *val->dims);
        if (!val->dims && t->rank) goto nomem;
        for (int i = 0; i < t->rank; i++)
            val->dims[i].value = t->dims[i];
        val->rank = t->rank;
    }
    if (value_out) *value_out = v;
    return QP_OK;
nomem:
    return qp_error_set(err, QP_ERR_NOMEM, "graph: out of memory adding initializer '%s'", t->name);
}

/* Graph inputs must be distinct; outputs and value_info entries are kept as listed (exporters
 * repeat them, and saving writes back what was read). */
static enum qp_status list_add(struct qp_graph *g, int **arr, size_t *n, size_t *cap, int v,
                               int distinct, const char *what, struct qp_error *err) {
    if (v < 0 || (size_t)v >= g->n_values)
        return qp_error_set(err, QP_ERR_USAGE, "graph: %s: no value %d", what, v);
    /* Only graph inputs must be distinct; the value's flag says whether it is listed. */
    if (distinct && g->values[v].is_graph_input)
        return qp_error_set(err, QP_ERR_BAD_INPUT, "graph: '%s' is listed twice as a %s",
                            g->values[v].name, what);
    if (!qp_ir_grow((void **)arr, cap, *n + 1, sizeof **arr))
        return qp_error_set(err, QP_ERR_NOMEM, "graph: out of memory");
    (*arr)[(*n)++] = v;
    return QP_OK;
}

enum qp_status qp_graph_add_input(struct qp_graph *g, int v, struct qp_error *err) {
    enum qp_status st =
        list_add(g, &g->inputs, &g->n_inputs, &g->cap_inputs, v, 1, "graph input", err);
    if (st == QP_OK) g->values[v].is_graph_input = 1;
    return st;
}

enum qp_status qp_graph_add_output(struct qp_graph *g, int v, struct qp_error *err) {
    enum qp_status st =
        list_add(g, &g->outputs, &g->n_outputs, &g->cap_outputs, v, 0, "graph output", err);
    if (st == QP_OK) g->values[v].is_graph_output = 1;
    return st;
}

enum qp_status qp_graph_add_value_info(struct qp_graph *g, int v, struct qp_error *err) {
    enum qp_status st = list_add(g, &g->value_info, &g->n_value_info, &g->cap_value_info, v, 0,
                                 "value_info entry", err);
    if (st == QP_OK) g->values[v].in_value_info = 1;
    return st;
}
