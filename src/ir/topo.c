/* Topological order, definedness checks and node naming. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/size.h"
#include "core/arena.h"
#include "ir/ir.h"
#include "ir/ir_internal.h"

static const char *label(const char *name) {
    return name && *name ? name : "(unnamed)";
}

static int value_defined_here(const struct qp_value *v) {
    return v->producer >= 0 || v->initializer >= 0 || v->is_graph_input;
}

/* 1 when `name` is defined (produced, initializer or input) in `h` or a graph enclosing it. */
static int defined_in_scope(const struct qp_graph *h, const char *name) {
    for (; h; h = h->parent) {
        int v = qp_graph_find_value(h, name);
        if (v >= 0 && value_defined_here(&h->values[v])) return 1;
    }
    return 0;
}

/* ---- collecting the outer names a subgraph reads ------------------------------------------- */

struct name_list {
    const char **names;
    size_t n, cap;
};

static int name_list_add(struct name_list *l, const char *name) {
    if (!qp_ir_grow((void **)&l->names, &l->cap, l->n + 1, sizeof *l->names)) return 0;
    l->names[l->n++] = name;
    return 1;
}

/* Appends to `out` every name that `sg` (or a subgraph nested in it) reads from outside `sg`. */
static int collect_outer(const struct qp_graph *sg, struct name_list *out) {
    for (size_t i = 0; i < sg->n_values; i++)
        if (sg->values[i].is_outer && !name_list_add(out, sg->values[i].name)) return 0;
    for (size_t i = 0; i < sg->n_nodes; i++) {
        const struct qp_node *n = &sg->nodes[i];
        if (n->dead) continue;
        for (int a = 0; a < n->n_attrs; a++) {
            const struct qp_attr *at = &n->attrs[a];
            size_t ng = at->type == QP_ATTR_GRAPH    ? (at->g ? 1 : 0)
                        : at->type == QP_ATTR_GRAPHS ? at->n
                                                     : 0;
            for (size_t k = 0; k < ng; k++) {
                const struct qp_graph *inner = at->type == QP_ATTR_GRAPH ? at->g : at->graphs[k];
                if (!inner) continue;
                struct name_list sub = {0};
                if (!collect_outer(inner, &sub)) {
                    free(sub.names);
                    return 0;
                }
                for (size_t j = 0; j < sub.n; j++) {
                    int v = qp_graph_find_value(sg, sub.names[j]);
                    if (v >= 0 && value_defined_here(&sg->values[v])) continue;
                    if (!name_list_add(out, sub.names[j])) {
                        free(sub.names);
                        return 0;
                    }
                }
                free(sub.names);
            }
        }
    }
    return 1;
}

/* ---- a small binary min-heap of node indices ---------------------------------------------- */

static void heap_push(int *heap, size_t *n, int x) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (heap[p] <= x) break;
        heap[i] = heap[p];
        i = p;
    }
    heap[i] = x;
}

static int heap_pop(int *heap, size_t *n) {
    int top = heap[0];
    int x = heap[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && heap[c + 1] < heap[c]) c++;
        if (heap[c] >= x) break;
        heap[i] = heap[c];
        i = c;
    }
    if (*n) heap[i] = x;
    return top;
}

struct edge {
    int from, to;
};

enum qp_status qp_graph_toposort(struct qp_graph *g, struct qp_error *err) {
    enum qp_status st = QP_OK;
    struct edge *edges = NULL;
    size_t n_edges = 0, cap_edges = 0;
    int *indeg = NULL, *start = NULL, *adj = NULL, *heap = NULL, *topo = NULL;
    struct name_list outer = {0};
    const char *gname = label(g->name);

    /* Subgraphs first: their outer references decide dependencies here. */
    for (size_t i = 0; i < g->n_nodes; i++) {
        const struct qp_node *n = &g->nodes[i];
        if (n->dead) continue;
        for (int a = 0; a < n->n_attrs; a++) {
            const struct qp_attr *at = &n->attrs[a];
            if (at->type == QP_ATTR_GRAPH && at->g) {
                if ((st = qp_graph_toposort(at->g, err)) != QP_OK) goto fail;
            } else if (at->type == QP_ATTR_GRAPHS) {
                for (size_t k = 0; k < at->n; k++)
                    if (at->graphs[k] && (st = qp_graph_toposort(at->graphs[k], err)) != QP_OK)
                        goto fail;
            }
        }
    }

    for (size_t i = 0; i < g->n_values; i++) {
        struct qp_value *v = &g->values[i];
        v->is_outer = !value_defined_here(v) && g->parent && defined_in_scope(g->parent, v->name);
    }

    for (size_t i = 0; i < g->n_nodes; i++) {
        const struct qp_node *n = &g->nodes[i];
        if (n->dead) continue;
        for (int k = 0; k < n->n_inputs; k++) {
            int v = n->inputs[k];
            if (v < 0) continue;
            const struct qp_value *val = &g->values[v];
            if (!value_defined_here(val) && !val->is_outer) {
                st = qp_error_set(err, QP_ERR_BAD_INPUT,
                                  "graph '%s': node '%s' (%s): input %d '%s' is not produced by "
                                  "any node, initializer or graph input",
                                  gname, label(n->name), n->op_type, k, val->name);
                goto fail;
            }
            if (val->producer >= 0) {
                if (!qp_ir_grow((void **)&edges, &cap_edges, n_edges + 1, sizeof *edges))
                    goto nomem;
                edges[n_edges++] = (struct edge){val->producer, (int)i};
            }
        }
        outer.n = 0;
        for (int a = 0; a < n->n_attrs; a++) {
            const struct qp_attr *at = &n->attrs[a];
            if (at->type == QP_ATTR_GRAPH && at->g) {
                if (!collect_outer(at->g, &outer)) goto nomem;
            } else if (at->type == QP_ATTR_GRAPHS) {
                for (size_t k = 0; k < at->n; k++)
                    if (at->graphs[k] && !collect_outer(at->graphs[k], &outer)) goto nomem;
            }
        }
        for (size_t k = 0; k < outer.n; k++) {
            int v = qp_graph_find_value(g, outer.names[k]);
            if (v < 0 || g->values[v].producer < 0) continue;
            if (!qp_ir_grow((void **)&edges, &cap_edges, n_edges + 1, sizeof *edges)) goto nomem;
            edges[n_edges++] = (struct edge){g->values[v].producer, (int)i};
        }
    }
    for (size_t i = 0; i < g->n_outputs; i++) {
        const struct qp_value *val = &g->values[g->outputs[i]];
        if (!value_defined_here(val) && !val->is_outer) {
            st = qp_error_set(err, QP_ERR_BAD_INPUT,
                              "graph '%s': output '%s' is not produced by any node, initializer "
                              "or graph input",
                              gname, val->name);
            goto fail;
        }
    }

    size_t nn = g->n_nodes;
    indeg = calloc(nn + 1, sizeof *indeg);
    start = calloc(nn + 2, sizeof *start);
    adj = qp_malloc_n(n_edges + 1, sizeof *adj);
    heap = qp_malloc_n(nn + 1, sizeof *heap);
    topo = qp_malloc_n(nn + 1, sizeof *topo);
    if (!indeg || !start || !adj || !heap || !topo) goto nomem;
    for (size_t e = 0; e < n_edges; e++) {
        start[edges[e].from + 1]++;
        indeg[edges[e].to]++;
    }
    for (size_t i = 0; i < nn; i++)
        start[i + 1] += start[i];
    /* Adjacency in edge order (CSR, a cursor per node). */
    {
        int *cursor = calloc(nn + 1, sizeof *cursor);
        if (!cursor) goto nomem;
        for (size_t e = 0; e < n_edges; e++) {
            int f = edges[e].from;
            adj[start[f] + cursor[f]++] = edges[e].to;
        }
        free(cursor);
    }
    size_t n_heap = 0, n_topo = 0, n_live = 0;
    for (size_t i = 0; i < nn; i++) {
        if (g->nodes[i].dead) continue;
        n_live++;
        if (indeg[i] == 0) heap_push(heap, &n_heap, (int)i);
    }
    while (n_heap) {
        int x = heap_pop(heap, &n_heap);
        topo[n_topo++] = x;
        for (int e = start[x]; e < start[x + 1]; e++)
            if (--indeg[adj[e]] == 0) heap_push(heap, &n_heap, adj[e]);
    }
    if (n_topo != n_live) {
        for (size_t i = 0; i < nn; i++) {
            if (g->nodes[i].dead || indeg[i] == 0) continue;
            st = qp_error_set(err, QP_ERR_BAD_INPUT,
                              "graph '%s': the nodes form a cycle through node '%s' (%s)", gname,
                              label(g->nodes[i].name), g->nodes[i].op_type);
            goto fail;
        }
    }
    free(g->topo);
    g->topo = topo;
    g->n_topo = n_topo;
    topo = NULL;
    goto done;
nomem:
    st = qp_error_set(err, QP_ERR_NOMEM, "graph '%s': out of memory ordering nodes", gname);
fail:
done:
    free(edges);
    free(indeg);
    free(start);
    free(adj);
    free(heap);
    free(topo);
    free(outer.names);
    return st;
}

/* ---- naming ---------------------------------------------------------------------------------- */

struct str_set {
    const char **slots;
    size_t cap, n;
};

static int set_has(const struct str_set *s, const char *x) {
    if (!s->cap) return 0;
    size_t k = qp_ir_hash_str(x) & (s->cap - 1);
    while (s->slots[k]) {
        if (!strcmp(s->slots[k], x)) return 1;
        k = (k + 1) & (s->cap - 1);
    }
    return 0;
}

/* Adds `x` (borrowed for the set's lifetime); 1 if added or present, 0 on OOM. */
static int set_add(struct str_set *s, const char *x) {
    if (set_has(s, x)) return 1;
    if ((s->n + 1) * 2 > s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 256;
        const char **slots = calloc(cap, sizeof *slots);
        if (!slots) return 0;
        for (size_t i = 0; i < s->cap; i++) {
            if (!s->slots[i]) continue;
            size_t k = qp_ir_hash_str(s->slots[i]) & (cap - 1);
            while (slots[k])
                k = (k + 1) & (cap - 1);
            slots[k] = s->slots[i];
        }
        free(s->slots);
        s->slots = slots;
        s->cap = cap;
    }
    size_t k = qp_ir_hash_str(x) & (s->cap - 1);
    while (s->slots[k])
        k = (k + 1) & (s->cap - 1);
    s->slots[k] = x;
    s->n++;
    return 1;
}

struct node_ref {
    struct qp_graph *g;
    int node;
};

struct node_refs {
    struct node_ref *refs;
    size_t n, cap;
};

/* Nodes of `g` in file order, each followed by the nodes of its subgraphs. */
static int collect_nodes(struct qp_graph *g, struct node_refs *out) {
    for (size_t i = 0; i < g->n_nodes; i++) {
        struct qp_node *n = &g->nodes[i];
        if (n->dead) continue;
        if (!qp_ir_grow((void **)&out->refs, &out->cap, out->n + 1, sizeof *out->refs)) return 0;
        out->refs[out->n++] = (struct node_ref){g, (int)i};
        for (int a = 0; a < n->n_attrs; a++) {
            const struct qp_attr *at = &n->attrs[a];
            if (at->type == QP_ATTR_GRAPH && at->g && !collect_nodes(at->g, out)) return 0;
            if (at->type == QP_ATTR_GRAPHS)
                for (size_t k = 0; k < at->n; k++)
                    if (at->graphs[k] && !collect_nodes(at->graphs[k], out)) return 0;
        }
    }
    return 1;
}

enum qp_status qp_graph_name_nodes(struct qp_graph *g, struct qp_error *err) {
    struct qp_arena *arena = g->model->arena;
    struct node_refs refs = {0};
    struct str_set all = {0}, seen = {0};
    char buf[512];
    enum qp_status st = QP_OK;

    if (!collect_nodes(g, &refs)) goto nomem;
    for (size_t i = 0; i < refs.n; i++) {
        const char *name = refs.refs[i].g->nodes[refs.refs[i].node].name;
        if (name && *name && !set_add(&all, name)) goto nomem;
    }
    /* k starts at the number of distinct names, as ModelOpt's naming pass does. */
    size_t k = all.n;

    for (size_t i = 0; i < refs.n; i++) {
        struct qp_node *n = &refs.refs[i].g->nodes[refs.refs[i].node];
        if (!n->name || !*n->name) continue;
        if (!set_has(&seen, n->name)) {
            if (!set_add(&seen, n->name)) goto nomem;
            continue;
        }
        for (size_t d = 1;; d++) {
            snprintf(buf, sizeof buf, "%.400s_%zu", n->name, d);
            if (!set_has(&all, buf)) break;
        }
        const char *fresh = qp_arena_strdup(arena, buf);
        if (!fresh || !set_add(&all, fresh) || !set_add(&seen, fresh)) goto nomem;
        n->name = fresh;
    }
    for (size_t i = 0; i < refs.n; i++) {
        struct qp_node *n = &refs.refs[i].g->nodes[refs.refs[i].node];
        if (n->name && *n->name) continue;
        for (;; k++) {
            snprintf(buf, sizeof buf, "%.400s_%zu", n->op_type, k);
            if (!set_has(&all, buf)) break;
        }
        k++;
        const char *fresh = qp_arena_strdup(arena, buf);
        if (!fresh || !set_add(&all, fresh)) goto nomem;
        n->name = fresh;
    }
    for (size_t i = 0; i < g->model->n_graphs; i++)
        if (!qp_ir_node_hash_rebuild(g->model->graphs[i])) goto nomem;
    goto done;
nomem:
    st = qp_error_set(err, QP_ERR_NOMEM, "graph: out of memory naming nodes");
done:
    free(refs.refs);
    free(all.slots);
    free(seen.slots);
    return st;
}
