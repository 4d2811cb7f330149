/* Sub-models for region-local timing (autotune/subgraph.h). */
#include "autotune/subgraph.h"

#include <stdlib.h>
#include <string.h>

#include "calib/provider.h"
#include "core/size.h"
#include "core/arena.h"
#include "quant/writer.h"
#include "runtime/bench.h"

static int is_constant_node(const struct qp_graph *g, int n) {
    return n >= 0 && !g->nodes[n].dead && qp_node_is(&g->nodes[n], "Constant");
}

/* Marks with `mark` the unmarked live neighbours (producers of what they read, consumers of
 * what they write) of the nodes marked `from`. */
static void mark_neighbours(const struct qp_graph *g, unsigned char *in, unsigned char from,
                            unsigned char mark) {
    for (size_t n = 0; n < g->n_nodes; n++) {
        if (in[n] != from) continue;
        const struct qp_node *nd = &g->nodes[n];
        for (int i = 0; i < nd->n_inputs; i++) {
            int v = nd->inputs[i];
            int p = v >= 0 ? g->values[v].producer : -1;
            if (p >= 0 && !g->nodes[p].dead && !in[p]) in[p] = mark;
        }
        for (int o = 0; o < nd->n_outputs; o++) {
            int v = nd->outputs[o];
            for (size_t u = 0; v >= 0 && u < g->values[v].n_uses; u++) {
                int c = g->values[v].uses[u].node;
                if (!g->nodes[c].dead && !in[c]) in[c] = mark;
            }
        }
    }
}

/* Ops the engine runs inside the convolution or matrix product before them (post-operations):
 * a neighbour's output that one of these alone reads is that step's intermediate, not what the
 * whole model writes. The one-input members of the float fuser's chain (rt_fuse_chain_op, which
 * also takes Add, Mul and Div: those read a second tensor, a border the sub-model would grow). */
static int fuses_after(const struct qp_node *nd) {
    static const char *const ops[] = {"Relu",        "Clip",      "LeakyRelu",         "Sigmoid",
                                      "HardSigmoid", "HardSwish", "BatchNormalization"};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (qp_node_is(nd, ops[i])) return 1;
    return 0;
}

/* The activations after the set's outer consumers (marked `mark`): where such a consumer's
 * single output has a single reader that fuses after it (and that reader's likewise), the
 * reader joins the set, so the sub-model writes what the whole model's fused step writes (an
 * int8 tensor after Conv + Relu + Q, not the Conv's float intermediate). */
static void mark_fused_after(const struct qp_graph *g, unsigned char *in, unsigned char mark) {
    for (size_t n = 0; n < g->n_nodes; n++) {
        if (in[n] != mark) continue;
        int at = (int)n;
        for (int hops = 0; hops < 4; hops++) {
            const struct qp_node *nd = &g->nodes[at];
            if (nd->n_outputs != 1 || nd->outputs[0] < 0) break;
            const struct qp_value *v = &g->values[nd->outputs[0]];
            if (v->n_uses != 1 || v->is_graph_output) break;
            int c = v->uses[0].node;
            if (g->nodes[c].dead || in[c] || !fuses_after(&g->nodes[c])) break;
            in[c] = mark;
            at = c;
        }
    }
}

size_t qp_subgraph_nodes(const struct qp_regions *rs, size_t pattern,
                         const unsigned char *instances, unsigned char *keep) {
    const struct qp_graph *g = rs->graph;
    size_t added = 0;
    /* 1: an instance's node; 2 + k: a neighbour k + 1 steps out */
    unsigned char *in = calloc(g->n_nodes ? g->n_nodes : 1, 1);
    if (!in) return 0;
    for (size_t r = 0; r < rs->n_regions; r++)
        if (rs->regions[r].pattern == (int)pattern && (!instances || instances[r]))
            for (size_t k = 0; k < rs->regions[r].n_nodes; k++)
                in[rs->regions[r].nodes[k]] = 1;
    for (int step = 0; step < QP_SUBGRAPH_STEPS; step++)
        mark_neighbours(g, in, (unsigned char)(step + 1), (unsigned char)(step + 2));
    mark_fused_after(g, in, (unsigned char)(QP_SUBGRAPH_STEPS + 1));
    for (size_t n = 0; n < g->n_nodes; n++) { /* the Constant nodes the set reads */
        if (!in[n] || is_constant_node(g, (int)n)) continue;
        const struct qp_node *nd = &g->nodes[n];
        for (int i = 0; i < nd->n_inputs; i++) {
            int p = nd->inputs[i] >= 0 ? g->values[nd->inputs[i]].producer : -1;
            if (is_constant_node(g, p)) in[p] = 2;
        }
    }
    for (size_t n = 0; n < g->n_nodes; n++)
        if (in[n] && !keep[n]) {
            keep[n] = 1;
            added++;
        }
    free(in);
    return added;
}

/* Appends v to vals unless it is there. */
static enum qp_status append_value(int v, int **vals, size_t *n, size_t *cap,
                                   struct qp_error *err) {
    for (size_t j = 0; j < *n; j++)
        if ((*vals)[j] == v) return QP_OK;
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 16;
        int *nv = qp_realloc_n(*vals, nc, sizeof *nv);
        if (!nv) return qp_error_set(err, QP_ERR_NOMEM, "subgraph: out of memory");
        *vals = nv;
        *cap = nc;
    }
    (*vals)[(*n)++] = v;
    return QP_OK;
}

enum qp_status qp_subgraph_border(const struct qp_graph *g, const unsigned char *keep, int **vals,
                                  size_t *n, size_t *cap, struct qp_error *err) {
    for (size_t k = 0; k < g->n_nodes; k++) {
        const struct qp_node *nd = &g->nodes[k];
        if (!keep[k] || nd->dead) continue;
        for (int i = 0; i < nd->n_inputs; i++) {
            int v = nd->inputs[i];
            if (v < 0) continue;
            const struct qp_value *val = &g->values[v];
            if (val->producer < 0 || keep[val->producer]) continue;
            enum qp_status st = append_value(v, vals, n, cap, err);
            if (st != QP_OK) return st;
        }
    }
    return QP_OK;
}

/* Appends the tensors region r's nodes read that a live node outside the region writes. */
static enum qp_status region_inputs(const struct qp_regions *rs, size_t r, int **vals, size_t *n,
                                    size_t *cap, struct qp_error *err) {
    const struct qp_graph *g = rs->graph;
    const struct qp_region *reg = &rs->regions[r];
    for (size_t k = 0; k < reg->n_nodes; k++) {
        const struct qp_node *nd = &g->nodes[reg->nodes[k]];
        for (int i = 0; i < nd->n_inputs; i++) {
            int v = nd->inputs[i];
            int p = v >= 0 ? g->values[v].producer : -1;
            if (p < 0 || g->nodes[p].dead || rs->region_of[p] == (int)r || is_constant_node(g, p))
                continue;
            enum qp_status st = append_value(v, vals, n, cap, err);
            if (st != QP_OK) return st;
        }
    }
    return QP_OK;
}

enum qp_status qp_subgraph_instance_border(const struct qp_regions *rs, size_t pattern, int **vals,
                                           size_t *n, size_t *cap, struct qp_error *err) {
    const struct qp_graph *g = rs->graph;
    unsigned char *one = calloc(rs->n_regions ? rs->n_regions : 1, 1);
    unsigned char *keep = calloc(g->n_nodes ? g->n_nodes : 1, 1);
    enum qp_status st = QP_OK;
    if (!one || !keep) st = qp_error_set(err, QP_ERR_NOMEM, "subgraph: out of memory");
    for (size_t r = 0; r < rs->n_regions && st == QP_OK; r++) {
        if (rs->regions[r].pattern != (int)pattern) continue;
        one[r] = 1;
        memset(keep, 0, g->n_nodes);
        qp_subgraph_nodes(rs, pattern, one, keep);
        one[r] = 0;
        st = qp_subgraph_border(g, keep, vals, n, cap, err);
        if (st == QP_OK) st = region_inputs(rs, r, vals, n, cap, err);
    }
    free(one);
    free(keep);
    return st;
}

static const struct qp_subgraph_tensor *captured(const struct qp_subgraph_capture *c,
                                                 const char *name);

/* The shape of value v as region timing compares instances: the captured one, else an
 * initializer's or the declared static one; *rank -1 when none is known. */
static void value_shape(const struct qp_graph *g, const struct qp_subgraph_capture *cap, int v,
                        int *rank, const int64_t **dims, int64_t *buf) {
    const struct qp_value *val = &g->values[v];
    const struct qp_subgraph_tensor *t = captured(cap, val->name);
    *rank = -1;
    *dims = buf;
    if (t) {
        *rank = t->value.rank;
        *dims = t->value.dims;
    } else if (val->initializer >= 0) {
        const struct qp_tensor *ts = &g->inits[val->initializer];
        *rank = ts->rank;
        *dims = ts->dims;
    } else if (val->kind == QP_VALUE_TENSOR && val->rank >= 0 && val->rank <= QP_MAX_RANK) {
        int known = 1;
        for (int i = 0; i < val->rank; i++) {
            known &= val->dims[i].value >= 0 && !val->dims[i].param;
            buf[i] = val->dims[i].value;
        }
        if (known) *rank = val->rank;
    }
}

/* 1 when regions a and b (instances of one pattern) read tensors of the same shapes from
 * outside themselves (and initializers of the same shapes), slot by slot in the pattern's
 * canonical node order. */
static int same_shapes(const struct qp_regions *rs, const struct qp_subgraph_capture *cap, size_t a,
                       size_t b) {
    const struct qp_graph *g = rs->graph;
    const struct qp_region *ra = &rs->regions[a], *rb = &rs->regions[b];
    if (ra->n_nodes != rb->n_nodes) return 0;
    for (size_t k = 0; k < ra->n_nodes; k++) {
        const struct qp_node *na = &g->nodes[ra->nodes[k]], *nb = &g->nodes[rb->nodes[k]];
        if (na->n_inputs != nb->n_inputs) return 0;
        for (int i = 0; i < na->n_inputs; i++) {
            int va = na->inputs[i], vb = nb->inputs[i];
            if ((va < 0) != (vb < 0)) return 0;
            if (va < 0) continue;
            /* a tensor the instance computes itself follows from what enters it */
            int pa = g->values[va].producer, pb = g->values[vb].producer;
            int inside_a = pa >= 0 && rs->region_of[pa] == (int)a;
            int inside_b = pb >= 0 && rs->region_of[pb] == (int)b;
            if (inside_a != inside_b) return 0;
            if (inside_a) continue;
            int rka, rkb;
            const int64_t *da, *db;
            int64_t ba[QP_MAX_RANK], bb[QP_MAX_RANK];
            value_shape(g, cap, va, &rka, &da, ba);
            value_shape(g, cap, vb, &rkb, &db, bb);
            if (rka != rkb || (rka > 0 && memcmp(da, db, (size_t)rka * sizeof *da) != 0)) return 0;
        }
    }
    return 1;
}

size_t qp_subgraph_representatives(const struct qp_regions *rs, size_t pattern,
                                   const unsigned char *searched,
                                   const struct qp_subgraph_capture *cap, unsigned char *chosen) {
    size_t n = 0;
    for (size_t r = 0; r < rs->n_regions; r++) {
        chosen[r] = 0;
        if (rs->regions[r].pattern != (int)pattern || (searched && !searched[r])) continue;
        int alike = 0;
        for (size_t q = 0; q < r && !alike; q++)
            alike = chosen[q] && same_shapes(rs, cap, q, r);
        if (!alike) {
            chosen[r] = 1;
            n++;
        }
    }
    return n;
}

void qp_subgraph_capture_free(struct qp_subgraph_capture *c) {
    if (!c) return;
    for (size_t i = 0; i < c->n; i++)
        qp_array_release(&c->tensors[i].value);
    free(c->tensors);
    free(c->inputs);
    free(c);
}

struct capture_run {
    struct qp_subgraph_capture *c;
    const struct qp_session *s;
    enum qp_status st;
    struct qp_error *err;
};

static int on_tensor(const char *tensor, const char *node, const struct qp_array *value,
                     void *user) {
    (void)node;
    struct capture_run *cr = user;
    for (size_t i = 0; i < cr->c->n; i++) {
        struct qp_subgraph_tensor *t = &cr->c->tensors[i];
        if (strcmp(t->name, tensor) != 0) continue;
        enum qp_dtype dt = QP_DTYPE_UNDEFINED;
        int computed = 1;
        struct qp_error e = {0};
        if (qp_session_value_info(cr->s, tensor, &dt, &computed, &e) != QP_OK) computed = 0;
        qp_array_release(&t->value);
        t->frozen = value->dtype != QP_DTYPE_FLOAT || !computed;
        if (t->frozen) {
            cr->st = qp_array_alloc(&t->value, value->dtype, value->rank, value->dims, cr->err);
            if (cr->st != QP_OK) return 1;
            memcpy(t->value.data, value->data,
                   value->nbytes < t->value.nbytes ? value->nbytes : t->value.nbytes);
        } else {
            t->value.dtype = value->dtype;
            t->value.rank = value->rank;
            memcpy(t->value.dims, value->dims, sizeof t->value.dims);
        }
        t->value.nbytes = t->frozen ? t->value.nbytes : 0;
        return 0;
    }
    return 0;
}

/* The whole model's graph inputs at their concrete shapes (names borrowed from the model). */
static enum qp_status input_shapes(const struct qp_model *m, const char *shapes,
                                   struct qp_shape **out, size_t *n_out, struct qp_error *err) {
    struct qp_calib_shapes cs = {0};
    struct qp_shape *given = NULL;
    enum qp_status st = QP_OK;
    if (shapes && *shapes && (st = qp_calib_shapes_parse(shapes, &cs, err)) != QP_OK) return st;
    if (!(given = qp_malloc_n(cs.n ? cs.n : 1, sizeof *given))) {
        qp_calib_shapes_release(&cs);
        return qp_error_set(err, QP_ERR_NOMEM, "subgraph: out of memory");
    }
    for (size_t i = 0; i < cs.n; i++) {
        memset(&given[i], 0, sizeof given[i]);
        given[i].name = cs.items[i].name;
        given[i].rank = cs.items[i].rank;
        memcpy(given[i].dims, cs.items[i].dims, sizeof given[i].dims);
    }
    st = qp_bench_input_shapes(m, cs.n, given, out, n_out, err);
    for (size_t i = 0; st == QP_OK && i < *n_out; i++) { /* names: the model's, not cs's */
        int v = qp_graph_find_value(m->graph, (*out)[i].name);
        (*out)[i].name = v >= 0 ? m->graph->values[v].name : NULL;
    }
    free(given);
    qp_calib_shapes_release(&cs);
    return st;
}

enum qp_status qp_subgraph_capture(const struct qp_model *m, const char *shapes, const int *vals,
                                   size_t n, int n_threads, struct qp_subgraph_capture **out,
                                   struct qp_error *err) {
    struct qp_subgraph_capture *c = calloc(1, sizeof *c);
    const char **names = qp_malloc_n(n ? n : 1, sizeof *names);
    struct qp_session *s = NULL;
    struct qp_array *inputs = NULL;
    enum qp_status st = QP_OK;
    if (!c || !names || !(c->tensors = calloc(n ? n : 1, sizeof *c->tensors))) {
        st = qp_error_set(err, QP_ERR_NOMEM, "subgraph: out of memory");
        goto done;
    }
    c->n = n;
    for (size_t i = 0; i < n; i++) {
        c->tensors[i].name = names[i] = m->graph->values[vals[i]].name;
        c->tensors[i].value.rank = -1; /* not seen yet */
    }
    if ((st = input_shapes(m, shapes, &c->inputs, &c->n_inputs, err)) != QP_OK) goto done;
    struct qp_session_options so = {.n_threads = n_threads, .lazy_plan = 1};
    if ((st = qp_session_create(m, &so, c->n_inputs, c->inputs, &s, err)) != QP_OK) goto done;
    struct capture_run cr = {.c = c, .s = s, .st = QP_OK, .err = err};
    if (n && (st = qp_session_set_observed(s, n, names, err)) != QP_OK) goto done;
    qp_session_set_observer(s, on_tensor, &cr);
    if ((st = qp_bench_inputs_create(s, c->n_inputs, c->inputs, &inputs, err)) != QP_OK) goto done;
    st = qp_session_run(s, qp_session_n_inputs(s), inputs, err);
    if (st == QP_ERR_USAGE && cr.st != QP_OK) st = cr.st; /* the observer's own failure */
    if (st != QP_OK) goto done;
    for (size_t i = 0; i < n; i++)
        if (c->tensors[i].value.rank < 0) {
            st = qp_error_set(err, QP_ERR_BAD_INPUT,
                              "subgraph: tensor '%s' was not computed by a run of the model",
                              names[i]);
            goto done;
        }
done:
    qp_bench_inputs_free(inputs, s ? qp_session_n_inputs(s) : 0);
    qp_session_free(s);
    free(names);
    if (st == QP_OK)
        *out = c;
    else
        qp_subgraph_capture_free(c);
    return st;
}

static const struct qp_subgraph_tensor *captured(const struct qp_subgraph_capture *c,
                                                 const char *name) {
    for (size_t i = 0; i < c->n; i++)
        if (strcmp(c->tensors[i].name, name) == 0) return &c->tensors[i];
    return NULL;
}

/* An entering tensor `v` of the sub-model graph g becomes a graph input or an initializer. */
static enum qp_status make_border(struct qp_model *sub, int v, const struct qp_subgraph_tensor *t,
                                  struct qp_error *err) {
    struct qp_graph *g = sub->graph;
    struct qp_value *val = &g->values[v];
    int rank = t->value.rank;
    int64_t *dims = qp_arena_calloc(sub->arena, rank ? (size_t)rank : 1, sizeof *dims);
    if (!dims) return qp_error_set(err, QP_ERR_NOMEM, "subgraph: out of memory");
    memcpy(dims, t->value.dims, (size_t)rank * sizeof *dims);
    if (t->frozen) {
        void *bytes = malloc(t->value.nbytes ? t->value.nbytes : 1);
        if (!bytes) return qp_error_set(err, QP_ERR_NOMEM, "subgraph: out of memory");
        memcpy(bytes, t->value.data, t->value.nbytes);
        enum qp_status st = qp_model_own(sub, bytes, err);
        if (st != QP_OK) return st;
        int ok = 1;
        struct qp_tensor ts = {.name = val->name,
                               .dtype = t->value.dtype,
                               .rank = rank,
                               .dims = dims,
                               .numel = qp_array_numel(&t->value, &ok),
                               .data = bytes,
                               .nbytes = t->value.nbytes};
        return qp_graph_add_initializer(g, &ts, NULL, err);
    }
    struct qp_dim *d = qp_arena_calloc(sub->arena, rank ? (size_t)rank : 1, sizeof *d);
    if (!d) return qp_error_set(err, QP_ERR_NOMEM, "subgraph: out of memory");
    for (int i = 0; i < rank; i++)
        d[i].value = dims[i];
    val = &g->values[v];
    val->kind = QP_VALUE_TENSOR;
    val->dtype = t->value.dtype;
    val->rank = rank;
    val->dims = d;
    val->origin_type = NULL;
    return qp_graph_add_input(g, v, err);
}

/* Drops the initializers no live node reads (and that are no graph input). */
static void prune_initializers(struct qp_graph *g) {
    size_t j = 0;
    for (size_t i = 0; i < g->n_inits; i++) {
        int v = g->inits_value[i];
        if (g->values[v].n_uses == 0 && !g->values[v].is_graph_input) {
            g->values[v].initializer = -1;
            continue;
        }
        g->inits[j] = g->inits[i];
        g->inits_value[j] = v;
        g->values[v].initializer = (int)j++;
    }
    g->n_inits = j;
}

/* The sub-model's outputs: tensors its nodes write that the whole model reads elsewhere or
 * returns (whole: the original graph; sub's node indices by name). */
static enum qp_status set_outputs(const struct qp_graph *whole, const unsigned char *keep,
                                  struct qp_graph *g, struct qp_error *err) {
    for (size_t i = 0; i < g->n_outputs; i++)
        g->values[g->outputs[i]].is_graph_output = 0;
    g->n_outputs = 0;
    for (size_t k = 0; k < whole->n_nodes; k++) {
        const struct qp_node *nd = &whole->nodes[k];
        if (!keep[k] || nd->dead) continue;
        for (int o = 0; o < nd->n_outputs; o++) {
            int v = nd->outputs[o];
            if (v < 0) continue;
            const struct qp_value *val = &whole->values[v];
            int leaves = val->is_graph_output;
            for (size_t u = 0; u < val->n_uses && !leaves; u++)
                leaves = !keep[val->uses[u].node];
            if (!leaves) continue;
            int sv = qp_graph_find_value(g, val->name);
            enum qp_status st = sv >= 0 ? qp_graph_add_output(g, sv, err) : QP_OK;
            if (st != QP_OK) return st;
        }
    }
    if (g->n_outputs == 0)
        return qp_error_set(err, QP_ERR_BAD_INPUT, "subgraph: no tensor leaves the node set");
    return QP_OK;
}

enum qp_status qp_subgraph_extract(const struct qp_model *m, const unsigned char *keep,
                                   const struct qp_subgraph_capture *cap, struct qp_model **out,
                                   struct qp_error *err) {
    struct qp_model *sub = NULL;
    enum qp_status st = qp_model_clone_shared(m, &sub, err);
    if (st != QP_OK) return st;
    struct qp_graph *g = sub->graph;
    const struct qp_graph *whole = m->graph;
    for (size_t k = 0; k < g->n_nodes && st == QP_OK; k++) {
        if (g->nodes[k].dead) continue;
        int w = qp_graph_find_node(whole, g->nodes[k].name);
        if (w < 0 || !keep[w]) st = qp_graph_remove_node(g, (int)k, err);
    }
    for (size_t i = 0; i < g->n_value_info; i++)
        g->values[g->value_info[i]].in_value_info = 0;
    g->n_value_info = 0;
    for (size_t v = 0; v < g->n_values && st == QP_OK; v++) {
        const struct qp_value *val = &g->values[v];
        if (!val->n_uses || val->producer >= 0 || val->initializer >= 0 || val->is_graph_input)
            continue;
        const struct qp_subgraph_tensor *t = captured(cap, val->name);
        if (!t)
            st = qp_error_set(err, QP_ERR_BAD_INPUT,
                              "subgraph: tensor '%s' enters the sub-model but was not captured",
                              val->name);
        else
            st = make_border(sub, (int)v, t, err);
    }
    if (st == QP_OK) {
        prune_initializers(g);
        st = set_outputs(whole, keep, g, err);
    }
    if (st == QP_OK) st = qp_graph_toposort(g, err);
    if (st == QP_OK)
        *out = sub;
    else
        qp_model_free(sub);
    return st;
}

enum qp_status qp_subgraph_placement(const struct qp_placement *p, const struct qp_model *sub,
                                     struct qp_placement **out, struct qp_error *err) {
    struct qp_placement *r = qp_placement_create();
    if (!r) return qp_error_set(err, QP_ERR_NOMEM, "subgraph: out of memory");
    enum qp_status st = QP_OK;
    for (size_t i = 0; i < p->n_edges && st == QP_OK; i++) {
        const struct qp_qedge *e = &p->edges[i];
        if (qp_graph_find_node(sub->graph, e->node) >= 0)
            st = qp_placement_add_edge(r, e->tensor, e->node, e->input, e->reason, err);
    }
    for (size_t i = 0; i < p->n_weights && st == QP_OK; i++) {
        const struct qp_qweight *w = &p->weights[i];
        if (qp_graph_find_node(sub->graph, w->node) >= 0)
            st = qp_placement_add_weight(r, w->tensor, w->node, w->input, w->axis, w->reason, err);
    }
    if (st == QP_OK)
        *out = r;
    else
        qp_placement_free(r);
    return st;
}

/* 1 when use u of a value of `whole` reads it through an activation edge of p. */
static int quantized_use(const struct qp_graph *whole, const struct qp_placement *p,
                         const struct qp_use *u) {
    int is_weight = 0;
    return qp_placement_find(p, whole->nodes[u->node].name, u->input, &is_weight, NULL) &&
           !is_weight;
}

/* How the whole model reads tensor `name` outside the sub-model: *quant when a consumer outside
 * reads it through an edge of `p`, *flt when one reads it unquantized or the model returns it. */
static void outside_reads(const struct qp_graph *whole, const struct qp_graph *sub,
                          const struct qp_placement *p, const char *name, int *quant, int *flt) {
    int v = qp_graph_find_value(whole, name);
    *quant = *flt = 0;
    if (v < 0) return;
    const struct qp_value *val = &whole->values[v];
    *flt = val->is_graph_output;
    for (size_t u = 0; u < val->n_uses; u++) {
        const struct qp_node *c = &whole->nodes[val->uses[u].node];
        if (c->dead || qp_graph_find_node(sub, c->name) >= 0) continue;
        if (quantized_use(whole, p, &val->uses[u]))
            *quant = 1;
        else
            *flt = 1;
    }
}

/* Adds to the clone c an Identity reading graph output `tensor` that stands in for its quantized
 * readers outside, with an edge of ps on it; *node_name gets its name. */
static enum qp_status add_stand_in(struct qp_model *c, const char *tensor, struct qp_placement *ps,
                                   const char **node_name, struct qp_error *err) {
    struct qp_graph *g = c->graph;
    const char *name = qp_graph_unique_node_name(g, "qp_border");
    const char *out = qp_graph_unique_value_name(g, "qp_border_out");
    if (!name || !out) return qp_error_set(err, QP_ERR_NOMEM, "subgraph: out of memory");
    enum qp_status st =
        qp_graph_add_node(g, name, "Identity", NULL, 1, &tensor, 1, &out, NULL, err);
    if (st == QP_OK) st = qp_placement_add_edge(ps, tensor, name, 0, "autotune.border", err);
    *node_name = name;
    return st;
}

/* After the writer: the stand-in `name` reads a DequantizeLinear of a QuantizeLinear's output;
 * that int8 output becomes a graph output and the stand-in goes. */
static enum qp_status finish_stand_in(struct qp_graph *g, const char *name, struct qp_error *err) {
    int n = qp_graph_find_node(g, name);
    int d = n >= 0 ? g->nodes[n].inputs[0] : -1;
    int dq = d >= 0 ? g->values[d].producer : -1;
    if (dq < 0 || !qp_node_is(&g->nodes[dq], "DequantizeLinear") || g->nodes[dq].inputs[0] < 0)
        return qp_error_set(err, QP_ERR_INTERNAL,
                            "subgraph: border stand-in '%s' is not fed by a DequantizeLinear",
                            name);
    int q = g->nodes[dq].inputs[0];
    enum qp_status st = qp_graph_remove_node(g, n, err);
    if (st == QP_OK && g->values[d].n_uses == 0) st = qp_graph_remove_node(g, dq, err);
    if (st == QP_OK && !g->values[q].is_graph_output) st = qp_graph_add_output(g, q, err);
    return st;
}

/* Drops graph outputs flagged in drop[0..n) (indices into g->outputs as they were), then the
 * nodes left computing nothing anyone reads. */
static enum qp_status drop_outputs(struct qp_graph *g, const unsigned char *drop, size_t n,
                                   struct qp_error *err) {
    size_t j = 0;
    for (size_t i = 0; i < g->n_outputs; i++) {
        if (i < n && drop[i]) {
            g->values[g->outputs[i]].is_graph_output = 0;
            continue;
        }
        g->outputs[j++] = g->outputs[i];
    }
    g->n_outputs = j;
    for (int changed = 1; changed;) {
        changed = 0;
        for (size_t k = 0; k < g->n_nodes; k++) {
            const struct qp_node *nd = &g->nodes[k];
            int used = nd->dead || nd->n_outputs == 0;
            for (int o = 0; o < nd->n_outputs && !used; o++) {
                int v = nd->outputs[o];
                used = v >= 0 && (g->values[v].n_uses || g->values[v].is_graph_output);
            }
            if (used) continue;
            enum qp_status st = qp_graph_remove_node(g, (int)k, err);
            if (st != QP_OK) return st;
            changed = 1;
        }
    }
    return QP_OK;
}

/* 1 when the whole model reads its tensor `name` only through edges of p (no float reader,
 * not a graph input or output): its producer then writes int8 there. */
static int read_quantized_only(const struct qp_graph *whole, const struct qp_placement *p,
                               const char *name) {
    int v = qp_graph_find_value(whole, name);
    if (v < 0) return 0;
    const struct qp_value *val = &whole->values[v];
    if (val->is_graph_input || val->is_graph_output || val->producer < 0 || !val->n_uses) return 0;
    for (size_t u = 0; u < val->n_uses; u++)
        if (!whole->nodes[val->uses[u].node].dead && !quantized_use(whole, p, &val->uses[u]))
            return 0;
    return 1;
}

/* The QuantizeLinear reading graph input v of g, directly or through the Cast the fp16 writer
 * puts on it (*cast: that Cast, or -1); -1 when there is none or v has other readers. */
static int input_quantizer(const struct qp_graph *g, int v, int *cast) {
    *cast = -1;
    if (g->values[v].n_uses != 1) return -1;
    int n = g->values[v].uses[0].node;
    if (qp_node_is(&g->nodes[n], "Cast")) {
        int o = g->nodes[n].outputs[0];
        if (o < 0 || g->values[o].n_uses != 1 || g->values[o].is_graph_output) return -1;
        *cast = n;
        n = g->values[o].uses[0].node;
    }
    return qp_node_is(&g->nodes[n], "QuantizeLinear") && g->values[v].uses[0].input == 0 ? n : -1;
}

/* Graph input `name` of the written sub-model, read only through its QuantizeLinear, becomes
 * that quantizer's int8 output: the Q (and the fp16 Cast before it) go, as in the whole model
 * the producer outside writes the int8 tensor itself. Left as it is when not so read. */
static enum qp_status quantize_input(struct qp_graph *g, const char *name, struct qp_error *err) {
    int v = qp_graph_find_value(g, name), cast = -1;
    int q = v >= 0 && g->values[v].is_graph_input ? input_quantizer(g, v, &cast) : -1;
    if (q < 0) return QP_OK;
    int out = g->nodes[q].outputs[0];
    if (out < 0 || g->values[out].is_graph_output) return QP_OK;
    struct qp_value *in = &g->values[v], *qv = &g->values[out];
    qv->kind = QP_VALUE_TENSOR;
    qv->rank = in->rank;
    qv->dims = in->dims; /* the arena's, shared: the shape is the same */
    enum qp_status st = qp_graph_remove_node(g, q, err);
    if (st == QP_OK && cast >= 0) st = qp_graph_remove_node(g, cast, err);
    if (st != QP_OK) return st;
    size_t j = 0; /* v leaves the inputs, the int8 tensor takes its place at the end */
    for (size_t i = 0; i < g->n_inputs; i++)
        if (g->inputs[i] != v) g->inputs[j++] = g->inputs[i];
    g->n_inputs = j;
    g->values[v].is_graph_input = 0;
    return qp_graph_add_input(g, out, err);
}

enum qp_status qp_subgraph_write(const struct qp_model *sub, const struct qp_graph *whole,
                                 const struct qp_placement *p, const struct qp_writer_options *wo,
                                 struct qp_model **out, struct qp_error *err) {
    struct qp_model *c = NULL;
    struct qp_placement *ps = NULL;
    size_t n_out = sub->graph->n_outputs;
    const char **stand_in = calloc(n_out ? n_out : 1, sizeof *stand_in);
    unsigned char *drop = calloc(n_out ? n_out : 1, 1);
    enum qp_status st =
        stand_in && drop ? QP_OK : qp_error_set(err, QP_ERR_NOMEM, "subgraph: out of memory");
    if (st == QP_OK) st = qp_model_clone_shared(sub, &c, err);
    if (st == QP_OK) st = qp_subgraph_placement(p, sub, &ps, err);
    for (size_t i = 0; i < n_out && st == QP_OK; i++) {
        const char *name = c->graph->values[c->graph->outputs[i]].name;
        int quant = 0, flt = 0;
        outside_reads(whole, sub->graph, p, name, &quant, &flt);
        drop[i] = quant && !flt;
        if (quant) st = add_stand_in(c, name, ps, &stand_in[i], err);
    }
    if (st == QP_OK) st = qp_qdq_write(c, ps, wo, NULL, err);
    for (size_t i = 0; i < n_out && st == QP_OK; i++)
        if (stand_in[i]) st = finish_stand_in(c->graph, stand_in[i], err);
    if (st == QP_OK) st = drop_outputs(c->graph, drop, n_out, err);
    for (size_t i = 0; i < sub->graph->n_inputs && st == QP_OK; i++) {
        const char *name = sub->graph->values[sub->graph->inputs[i]].name;
        if (read_quantized_only(whole, p, name)) st = quantize_input(c->graph, name, err);
    }
    if (st == QP_OK) st = qp_graph_toposort(c->graph, err);
    qp_placement_free(ps);
    free(stand_in);
    free(drop);
    if (st == QP_OK)
        *out = c;
    else
        qp_model_free(c);
    return st;
}
