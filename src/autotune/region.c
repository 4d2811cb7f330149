/*
 * Region discovery (autotune/region.h): divergence/convergence after ModelOpt's
 * region_search.py, insertion points after insertion_points.py and the trt policy's slots.
 */
#include "autotune/region.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "autotune/pattern.h"
#include "core/size.h"
#include "ir/optraits.h"
#include "placement/placement.h"
#include "placement/select.h"
#include "quant/policy_trt.h"

/* Ops ModelOpt's autotune filter skips besides copy and boolean-output ops. */
static const char *const SKIP_TYPES[] = {"Where",
                                         "IsNaN",
                                         "IsInf",
                                         "Sign",
                                         "Abs",
                                         "Not",
                                         "And",
                                         "Or",
                                         "Xor",
                                         "BitShift",
                                         "BitwiseAnd",
                                         "BitwiseOr",
                                         "BitwiseXor",
                                         "BitwiseNot",
                                         "ReduceMax",
                                         "ReduceMin",
                                         "ReduceMean",
                                         "ReduceProd",
                                         "ReduceSum",
                                         "TopK",
                                         "Unique",
                                         "NonZero",
                                         "All",
                                         "Any",
                                         "Compress",
                                         "Scatter",
                                         "ScatterND",
                                         "ScatterElements",
                                         "Unsqueeze",
                                         "Pad",
                                         "Cast",
                                         "CastLike",
                                         "Ceil",
                                         "Identity",
                                         "Range",
                                         "Shape",
                                         "Size",
                                         "Constant",
                                         "ConstantOfShape",
                                         NULL};

static int in_list(const char *op, const char *const *list) {
    for (; *list; list++)
        if (strcmp(op, *list) == 0) return 1;
    return 0;
}

int qp_region_op_quantizable(const struct qp_node *n) {
    if (!qp_domain_is_onnx(n->domain)) return 0;
    if (in_list(n->op_type, qp_policy_trt_op_types(QP_QUANT_INT8))) return 1;
    if (in_list(n->op_type, SKIP_TYPES)) return 0;
    unsigned f = qp_op_traits(n);
    if (f & (QP_OP_BIT(QP_OP_FLAG_COPY) | QP_OP_BIT(QP_OP_FLAG_OUT_BOOL) |
             QP_OP_BIT(QP_OP_FLAG_SHAPE_SOURCE) | QP_OP_BIT(QP_OP_FLAG_OUT_INT64)))
        return 0;
    return 1;
}

/* ---- graph facts --------------------------------------------------------------------------- */

struct rctx {
    struct qp_graph *g;
    size_t nn;
    int *pos;                 /* node -> topo position, -1 for dead and Constant nodes */
    int *cons_start, *cons;   /* CSR: distinct consumer nodes (region nodes only), topo order */
    unsigned char *shp;       /* value computed from shapes only */
    int *region_of;           /* node -> region, -1 unassigned */
    int *dist, *queue, *mark; /* scratch for the bounded searches */
    int stamp;
    struct qp_region *regs;
    size_t n_regs, cap_regs;
};

static int in_graph(const struct rctx *c, int n) {
    return n >= 0 && c->pos[n] >= 0;
}

static int n_cons(const struct rctx *c, int n) {
    return c->cons_start[n + 1] - c->cons_start[n];
}

static int cons(const struct rctx *c, int n, int k) {
    return c->cons[c->cons_start[n] + k];
}

static int is_linear(const struct rctx *c, int n) {
    return qp_op_is(&c->g->nodes[n], QP_OP_FLAG_LINEAR);
}

/* A node whose outputs reach more than one node, or a graph output and another node. */
static int divergent(const struct rctx *c, int n) {
    if (n_cons(c, n) > 1) return 1;
    const struct qp_node *nd = &c->g->nodes[n];
    for (int o = 0; o < nd->n_outputs; o++)
        if (nd->outputs[o] >= 0 && c->g->values[nd->outputs[o]].is_graph_output && n_cons(c, n) > 0)
            return 1;
    return 0;
}

/* Appends the distinct in-graph consumers of node n to c->cons (topo order); `k` is the fill. */
static size_t add_consumers(struct rctx *c, int n, size_t k) {
    const struct qp_node *nd = &c->g->nodes[n];
    size_t start = k;
    for (int o = 0; o < nd->n_outputs; o++) {
        int v = nd->outputs[o];
        if (v < 0) continue;
        const struct qp_value *val = &c->g->values[v];
        for (size_t u = 0; u < val->n_uses; u++) {
            int m = val->uses[u].node;
            if (!in_graph(c, m)) continue;
            size_t j = start;
            while (j < k && c->cons[j] != m)
                j++;
            if (j < k) continue;
            /* insertion by topo position keeps the walk independent of use-list order */
            for (j = k; j > start && c->pos[c->cons[j - 1]] > c->pos[m]; j--)
                c->cons[j] = c->cons[j - 1];
            c->cons[j] = m;
            k++;
        }
    }
    return k;
}

static enum qp_status build_consumers(struct rctx *c, struct qp_error *err) {
    size_t total = 0;
    for (size_t n = 0; n < c->nn; n++) {
        if (c->pos[n] < 0) continue;
        const struct qp_node *nd = &c->g->nodes[n];
        for (int o = 0; o < nd->n_outputs; o++)
            if (nd->outputs[o] >= 0) total += c->g->values[nd->outputs[o]].n_uses;
    }
    c->cons_start = qp_malloc_n(c->nn + 1, sizeof *c->cons_start);
    c->cons = qp_malloc_n(total + 1, sizeof *c->cons);
    if (!c->cons_start || !c->cons)
        return qp_error_set(err, QP_ERR_NOMEM, "autotune regions: out of memory");
    size_t k = 0;
    for (size_t n = 0; n < c->nn; n++) {
        c->cons_start[n] = (int)k;
        if (c->pos[n] >= 0) k = add_consumers(c, (int)n, k);
    }
    c->cons_start[c->nn] = (int)k;
    return QP_OK;
}

/* Shape-computation values (Shape/Size and what only they and constants feed), as the trt
 * policy marks them: never activation points. */
static void mark_shapes(struct rctx *c) {
    struct qp_graph *g = c->g;
    for (size_t t = 0; t < g->n_topo; t++) {
        const struct qp_node *nd = &g->nodes[g->topo[t]];
        int shape = qp_op_is(nd, QP_OP_FLAG_SHAPE_SOURCE), any = 0, all_ok = 1;
        for (int i = 0; i < nd->n_inputs; i++) {
            int v = nd->inputs[i];
            if (v < 0) continue;
            if (c->shp[v])
                any = 1;
            else if (!qp_placement_weight_tensor(g, v))
                all_ok = 0;
        }
        if (!(shape || (any && all_ok))) continue;
        for (int o = 0; o < nd->n_outputs; o++)
            if (nd->outputs[o] >= 0) c->shp[nd->outputs[o]] = 1;
    }
}

static enum qp_status ctx_init(struct rctx *c, struct qp_graph *g, struct qp_error *err) {
    memset(c, 0, sizeof *c);
    c->g = g;
    c->nn = g->n_nodes;
    enum qp_status st = qp_graph_toposort(g, err);
    if (st != QP_OK) return st;
    c->pos = qp_malloc_n(c->nn + 1, sizeof *c->pos);
    c->region_of = qp_malloc_n(c->nn + 1, sizeof *c->region_of);
    c->dist = qp_malloc_n(c->nn + 1, sizeof *c->dist);
    c->queue = qp_malloc_n(c->nn + 1, sizeof *c->queue);
    c->mark = calloc(c->nn + 1, sizeof *c->mark);
    c->shp = calloc(g->n_values + 1, 1);
    if (!c->pos || !c->region_of || !c->dist || !c->queue || !c->mark || !c->shp)
        return qp_error_set(err, QP_ERR_NOMEM, "autotune regions: out of memory");
    for (size_t n = 0; n < c->nn; n++)
        c->pos[n] = c->region_of[n] = -1;
    for (size_t t = 0; t < g->n_topo; t++)
        if (!qp_node_is(&g->nodes[g->topo[t]], "Constant")) c->pos[g->topo[t]] = (int)t;
    mark_shapes(c);
    return build_consumers(c, err);
}

static void ctx_free(struct rctx *c) {
    free(c->pos);
    free(c->cons_start);
    free(c->cons);
    free(c->shp);
    free(c->region_of);
    free(c->dist);
    free(c->queue);
    free(c->mark);
}

/* ---- convergence --------------------------------------------------------------------------- */

/* Bounded forward BFS from `from`: c->mark[m] == stamp and c->dist[m] for nodes within
 * QP_REGION_MAX_STEPS steps. */
static void bfs(struct rctx *c, int from) {
    c->stamp++;
    size_t head = 0, tail = 0;
    c->queue[tail++] = from;
    c->mark[from] = c->stamp;
    c->dist[from] = 0;
    while (head < tail) {
        int n = c->queue[head++];
        if (c->dist[n] >= QP_REGION_MAX_STEPS) continue;
        for (int k = 0; k < n_cons(c, n); k++) {
            int m = cons(c, n, k);
            if (c->mark[m] == c->stamp) continue;
            c->mark[m] = c->stamp;
            c->dist[m] = c->dist[n] + 1;
            c->queue[tail++] = m;
        }
    }
}

/* Max over D's branches of the distance branch -> candidate: best[m] (-1: not reached by every
 * branch so far). `best` has nn entries. */
static void branch_distances(struct rctx *c, int d, int *best) {
    for (size_t n = 0; n < c->nn; n++)
        best[n] = 0;
    for (int b = 0; b < n_cons(c, d); b++) {
        bfs(c, cons(c, d, b));
        for (size_t n = 0; n < c->nn; n++) {
            if (best[n] < 0) continue;
            if (c->mark[n] != c->stamp)
                best[n] = -1;
            else if (c->dist[n] > best[n])
                best[n] = c->dist[n];
        }
    }
}

/* The set strictly between d and cand: nodes reached from d that reach cand, into in_set (1),
 * when it is closed: each of its nodes, and d, feeds only the set or cand, none is a graph output
 * and none is already in a region. Returns the set's size, or -1 when it is not closed. */
static int closed_set(struct rctx *c, int d, int cand, unsigned char *in_set) {
    int pd = c->pos[d], pc = c->pos[cand], size = 0;
    const struct qp_graph *g = c->g;
    memset(in_set, 0, c->nn);
    c->stamp++;
    c->mark[d] = c->stamp;
    for (int t = pd; t < pc; t++) {
        int n = g->topo[t];
        if (c->pos[n] < 0 || c->mark[n] != c->stamp) continue;
        for (int k = 0; k < n_cons(c, n); k++)
            c->mark[cons(c, n, k)] = c->stamp;
    }
    for (int t = pc - 1; t > pd; t--) {
        int n = g->topo[t];
        if (c->pos[n] < 0 || c->mark[n] != c->stamp) continue;
        int feeds = 0;
        for (int k = 0; k < n_cons(c, n) && !feeds; k++)
            feeds = cons(c, n, k) == cand || in_set[cons(c, n, k)];
        in_set[n] = (unsigned char)feeds;
    }
    for (int t = pd + 1; t < pc; t++) {
        int n = g->topo[t];
        if (c->pos[n] < 0 || !in_set[n]) continue;
        if (c->region_of[n] >= 0) return -1;
        for (int k = 0; k < n_cons(c, n); k++)
            if (cons(c, n, k) != cand && !in_set[cons(c, n, k)]) return -1;
        const struct qp_node *nd = &g->nodes[n];
        for (int o = 0; o < nd->n_outputs; o++)
            if (nd->outputs[o] >= 0 && g->values[nd->outputs[o]].is_graph_output) return -1;
        size++;
    }
    for (int k = 0; k < n_cons(c, d); k++)
        if (cons(c, d, k) != cand && !in_set[cons(c, d, k)]) return -1;
    return size;
}

/* The convergence node of divergent d (closest by the farthest branch, then by topo position),
 * with the set between them in in_set; -1 when none within QP_REGION_MAX_STEPS. */
static int convergence(struct rctx *c, int d, int *best, unsigned char *in_set) {
    branch_distances(c, d, best);
    for (int limit = 0; limit <= QP_REGION_MAX_STEPS; limit++) {
        for (size_t t = (size_t)c->pos[d] + 1; t < c->g->n_topo; t++) {
            int n = c->g->topo[t];
            if (c->pos[n] < 0 || best[n] != limit || c->region_of[n] >= 0) continue;
            if (closed_set(c, d, n, in_set) >= 0) return n;
        }
    }
    return -1;
}

/* ---- regions ------------------------------------------------------------------------------- */

static struct qp_region *new_region(struct rctx *c, enum qp_region_kind kind) {
    if (c->n_regs == c->cap_regs) {
        size_t cap = c->cap_regs ? 2 * c->cap_regs : 16;
        struct qp_region *r = qp_realloc_n(c->regs, cap, sizeof *r);
        if (!r) return NULL;
        c->regs = r;
        c->cap_regs = cap;
    }
    struct qp_region *r = &c->regs[c->n_regs];
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->pattern = -1;
    r->nodes = qp_malloc_n(c->nn + 1, sizeof *r->nodes);
    if (!r->nodes) return NULL;
    c->n_regs++;
    return r;
}

static void take(struct rctx *c, struct qp_region *r, int n) {
    r->nodes[r->n_nodes++] = n;
    c->region_of[n] = (int)(r - c->regs);
}

/* Extends r from its last node over single consumers: at most max_nodes more, never a second
 * linear op (`has_linear` says whether r holds one), stopping after a divergent node. */
static void extend(struct rctx *c, struct qp_region *r, int has_linear, size_t max_nodes) {
    int tail = r->nodes[r->n_nodes - 1];
    for (size_t k = 0; k < max_nodes && !divergent(c, tail) && n_cons(c, tail) == 1; k++) {
        int m = cons(c, tail, 0);
        if (c->region_of[m] >= 0 || (is_linear(c, m) && has_linear)) return;
        take(c, r, m);
        has_linear |= is_linear(c, m);
        tail = m;
    }
}

static enum qp_status converged_region(struct rctx *c, int d, int conv, const unsigned char *in_set,
                                       struct qp_error *err) {
    struct qp_region *r = new_region(c, QP_REGION_CONVERGED);
    if (!r) return qp_error_set(err, QP_ERR_NOMEM, "autotune regions: out of memory");
    if (c->region_of[d] < 0) take(c, r, d);
    for (int t = c->pos[d] + 1; t < c->pos[conv]; t++) {
        int n = c->g->topo[t];
        if (c->pos[n] >= 0 && in_set[n]) take(c, r, n);
    }
    take(c, r, conv);
    /* the tail takes no linear op: the next Conv/MatMul block starts its own region */
    extend(c, r, 1, QP_REGION_TAIL_NODES);
    return QP_OK;
}

static enum qp_status sequence_region(struct rctx *c, int n, struct qp_error *err) {
    struct qp_region *r = new_region(c, QP_REGION_SEQUENCE);
    if (!r) return qp_error_set(err, QP_ERR_NOMEM, "autotune regions: out of memory");
    take(c, r, n);
    extend(c, r, is_linear(c, n), c->nn);
    return QP_OK;
}

static enum qp_status walk(struct rctx *c, struct qp_error *err) {
    int *best = qp_malloc_n(c->nn + 1, sizeof *best);
    unsigned char *in_set = malloc(c->nn + 1);
    enum qp_status st = QP_OK;
    if (!best || !in_set) st = qp_error_set(err, QP_ERR_NOMEM, "autotune regions: out of memory");
    for (size_t t = 0; st == QP_OK && t < c->g->n_topo; t++) {
        int n = c->g->topo[t];
        if (c->pos[n] < 0) continue;
        if (divergent(c, n)) {
            int conv = convergence(c, n, best, in_set);
            if (conv >= 0) {
                st = converged_region(c, n, conv, in_set, err);
                continue;
            }
        }
        if (c->region_of[n] < 0) st = sequence_region(c, n, err);
    }
    free(best);
    free(in_set);
    return st;
}

/* ---- insertion points ---------------------------------------------------------------------- */

/* Input slots the op's Q/DQ handler takes (the trt policy's), and input 0 of LayerNormalization
 * (which the policy places by its own rule): bit i for input i. */
static uint64_t op_slots(const struct qp_node *nd) {
    return qp_node_is(nd, "LayerNormalization") ? 1 : qp_policy_trt_op_slots(nd);
}

static int float_dtype(enum qp_dtype t) {
    return t == QP_DTYPE_FLOAT || t == QP_DTYPE_FLOAT16 || t == QP_DTYPE_BFLOAT16 ||
           t == QP_DTYPE_DOUBLE;
}

/* A scalar: rank 0, or every dim known and 1 (the trt policy's test). */
static int scalar_value(const struct qp_value *v) {
    if (v->rank == 0) return 1;
    if (v->rank < 0) return 0;
    for (int d = 0; d < v->rank; d++)
        if (v->dims[d].value != 1) return 0;
    return 1;
}

/* Fills *pt when slot (n, i) is an insertion point; returns 1 then, else 0. */
static int point_of(const struct rctx *c, int n, int i, struct qp_region_point *pt) {
    const struct qp_node *nd = &c->g->nodes[n];
    int v = nd->inputs[i];
    if (v < 0 || i >= 64 || !(op_slots(nd) >> i & 1)) return 0;
    const struct qp_value *val = &c->g->values[v];
    const struct qp_tensor *wt = qp_placement_weight_tensor(c->g, v);
    memset(pt, 0, sizeof *pt);
    pt->node = n;
    pt->input = i;
    pt->value = v;
    pt->axis = -1;
    pt->pos = pt->slot = -1;
    if (wt) {
        if (!float_dtype(wt->dtype) || wt->rank == 0 || wt->numel == 1) return 0;
        pt->is_weight = 1;
        if (qp_op_is(nd, QP_OP_FLAG_LINEAR)) pt->axis = qp_weight_axis(nd, i, wt->rank);
        return 1;
    }
    if (val->kind != QP_VALUE_TENSOR) return 0;
    if (val->dtype != QP_DTYPE_UNDEFINED && !float_dtype(val->dtype)) return 0;
    return !c->shp[v] && !scalar_value(val);
}

static enum qp_status region_points(const struct rctx *c, struct qp_region *r,
                                    struct qp_error *err) {
    size_t n_slots = 0;
    for (size_t k = 0; k < r->n_nodes; k++)
        n_slots += (size_t)c->g->nodes[r->nodes[k]].n_inputs;
    r->points = qp_malloc_n(n_slots + 1, sizeof *r->points);
    if (!r->points) return qp_error_set(err, QP_ERR_NOMEM, "autotune regions: out of memory");
    for (size_t k = 0; k < r->n_nodes; k++) {
        const struct qp_node *nd = &c->g->nodes[r->nodes[k]];
        if (!qp_region_op_quantizable(nd)) continue;
        for (int i = 0; i < nd->n_inputs; i++)
            r->n_points += (size_t)point_of(c, r->nodes[k], i, &r->points[r->n_points]);
    }
    return QP_OK;
}

/* ---- the public entry ---------------------------------------------------------------------- */

void qp_regions_free(struct qp_regions *rs) {
    if (!rs) return;
    for (size_t r = 0; r < rs->n_regions; r++) {
        free(rs->regions[r].nodes);
        free(rs->regions[r].points);
    }
    free(rs->regions);
    qp_patterns_release(rs);
    free(rs->region_of);
    free(rs);
}

enum qp_status qp_regions_build(struct qp_graph *g, struct qp_regions **out, struct qp_error *err) {
    struct rctx c;
    struct qp_regions *rs = NULL;
    enum qp_status st = ctx_init(&c, g, err);
    if (st == QP_OK) st = walk(&c, err);
    for (size_t r = 0; st == QP_OK && r < c.n_regs; r++) {
        /* new_region sized each for the whole graph */
        int *nodes = qp_realloc_n(c.regs[r].nodes, c.regs[r].n_nodes, sizeof *nodes);
        if (nodes) c.regs[r].nodes = nodes;
    }
    for (size_t r = 0; st == QP_OK && r < c.n_regs; r++)
        st = region_points(&c, &c.regs[r], err);
    if (st == QP_OK && !(rs = calloc(1, sizeof *rs)))
        st = qp_error_set(err, QP_ERR_NOMEM, "autotune regions: out of memory");
    if (rs) {
        rs->graph = g;
        rs->regions = c.regs;
        rs->n_regions = c.n_regs;
        rs->region_of = c.region_of;
        c.regs = NULL;
        c.region_of = NULL;
    } else {
        for (size_t r = 0; r < c.n_regs; r++) {
            free(c.regs[r].nodes);
            free(c.regs[r].points);
        }
        free(c.regs);
    }
    ctx_free(&c);
    if (st == QP_OK) st = qp_patterns_compute(rs, err);
    if (st != QP_OK) {
        qp_regions_free(rs);
        return st;
    }
    *out = rs;
    return QP_OK;
}
