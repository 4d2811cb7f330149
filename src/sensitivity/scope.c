/* --op_types_scope as ModelOpt's sensitivity scan reads it (sensitivity.h): names checked, and
 * probe-only entries for scoped op types the placement does not quantize. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "core/edit.h"
#include "core/size.h"
#include "ir/optraits.h"
#include "placement/select.h"
#include "quant/policy_trt.h"
#include "sensitivity/sensitivity.h"

static enum qp_status nomem(struct qp_error *err) {
    return qp_error_set(err, QP_ERR_NOMEM, "sensitivity: out of memory");
}

static int graph_has_op(const struct qp_graph *g, const char *op) {
    for (size_t k = 0; k < g->n_topo; k++)
        if (strcmp(g->nodes[g->topo[k]].op_type, op) == 0) return 1;
    return 0;
}

static int is_onnx_op(const char *op) {
    size_t n = 0;
    const struct qp_op_row *rows = qp_op_rows(&n);
    for (size_t i = 0; i < n; i++)
        if (strcmp(rows[i].op, op) == 0) return 1;
    return 0;
}

/* Case-insensitive edit distance of a and b, capped: SIZE_MAX when either is longer than 63. */
static int chars_differ_nocase(size_t i, size_t j, const void *ctx) {
    const char *const *s = ctx; /* {a, b} */
    return tolower((unsigned char)s[0][i]) != tolower((unsigned char)s[1][j]);
}

static size_t distance(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b), row[64];
    if (na > 63 || nb > 63) return SIZE_MAX;
    return qp_edit_distance(na, nb, chars_differ_nocase, (const char *[]){a, b}, row);
}

/* Keeps `cand` in *best when it is closer to `name` than *best_d. */
static void consider(const char *name, const char *cand, const char **best, size_t *best_d) {
    size_t d = distance(name, cand);
    if (d < *best_d) {
        *best_d = d;
        *best = cand;
    }
}

/* The model op type or ONNX op closest to `name`, when close enough to be a misspelling (case
 * only, or at most a third of its letters and 2 edits); else NULL. The model's win ties. */
static const char *suggest(const struct qp_graph *g, const char *name) {
    const char *best = NULL;
    size_t best_d = SIZE_MAX;
    for (size_t k = 0; k < g->n_topo; k++)
        consider(name, g->nodes[g->topo[k]].op_type, &best, &best_d);
    size_t n = 0;
    const struct qp_op_row *rows = qp_op_rows(&n);
    for (size_t i = 0; i < n; i++)
        consider(name, rows[i].op, &best, &best_d);
    size_t len = strlen(name), limit = len / 3 < 2 ? len / 3 : 2;
    return best && best_d <= limit ? best : NULL;
}

enum qp_status qp_sens_scope_check(const struct qp_graph *g, const char *const *scope, size_t n,
                                   struct qp_error *err) {
    for (size_t i = 0; i < n; i++) {
        const char *op = scope[i];
        if (!*op) return qp_error_set(err, QP_ERR_USAGE, "--op_types_scope: an empty op type");
        if (graph_has_op(g, op) || is_onnx_op(op)) continue;
        const char *s = suggest(g, op);
        if (s)
            return qp_error_set(err, QP_ERR_USAGE,
                                "--op_types_scope: unknown op type '%s' (did you mean '%s'?)", op,
                                s);
        return qp_error_set(err, QP_ERR_USAGE,
                            "--op_types_scope: unknown op type '%s' (neither an op type of the "
                            "model nor an ONNX operator; op types are case-sensitive)",
                            op);
    }
    return QP_OK;
}

/* 1 when `pl` holds an entry on an input of a node of type `op`. */
static int placement_has_op(const struct qp_graph *g, const struct qp_placement *pl,
                            const char *op) {
    for (size_t e = 0; e < pl->n_edges; e++)
        if (strcmp(g->nodes[pl->edges[e].node_index].op_type, op) == 0) return 1;
    for (size_t w = 0; w < pl->n_weights; w++)
        if (strcmp(g->nodes[pl->weights[w].node_index].op_type, op) == 0) return 1;
    return 0;
}

enum qp_status qp_sens_scope_placement(struct qp_graph *g, const struct qp_placement *pl,
                                       const char *const *scope, size_t n,
                                       struct qp_placement **out, struct qp_error *err) {
    *out = NULL;
    struct qp_select *sel = qp_select_create();
    struct qp_placement *extra = qp_placement_create();
    enum qp_status st = sel && extra ? QP_OK : nomem(err);
    size_t n_types = 0;
    for (size_t i = 0; st == QP_OK && i < n; i++) {
        if (!graph_has_op(g, scope[i]) || placement_has_op(g, pl, scope[i])) continue;
        if (qp_select_has_op(sel, QP_SELECT_OP_TYPES_TO_QUANTIZE, scope[i])) continue;
        st = qp_select_add(sel, QP_SELECT_OP_TYPES_TO_QUANTIZE, scope[i], err);
        n_types++;
    }
    /* The policy's own entries for a quantizable op (its slots, constants as weights, float
     * activations only), with op_types_to_quantize = those types: every node of the type that
     * is not shape computation, bypassing the partitioner, as ModelOpt's probes do. */
    struct qp_policy_options po = {.mode = QP_QUANT_INT8, .select = sel};
    if (st == QP_OK && n_types && (st = qp_policy_trt(g, &po, extra, NULL, err)) == QP_OK &&
        extra->n_edges + extra->n_weights > 0) {
        *out = extra;
        extra = NULL;
    }
    qp_placement_free(extra);
    qp_select_free(sel);
    return st;
}

/* Target order: op types by name, nodes by topological position. */
static int target_before(const struct qp_graph *g, const size_t *pos, enum qp_sens_granularity gr,
                         const struct qp_sens_target *a, const struct qp_sens_target *b) {
    if (gr == QP_SENS_OP_TYPE) return strcmp(a->name, b->name) < 0;
    int na = qp_graph_find_node(g, a->name), nb = qp_graph_find_node(g, b->name);
    return na >= 0 && nb >= 0 && pos[na] < pos[nb];
}

enum qp_status qp_sens_scope_merge(struct qp_sens_result *r, struct qp_sens_result *extra,
                                   const struct qp_graph *g, enum qp_sens_granularity gr,
                                   struct qp_error *err) {
    size_t n = r->n_targets + extra->n_targets, k = 0;
    struct qp_sens_target *all = calloc(n + 1, sizeof *all);
    size_t *pos = qp_malloc_n(g->n_nodes + 1, sizeof *pos);
    if (!all || !pos) {
        free(all);
        free(pos);
        return nomem(err);
    }
    for (size_t i = 0; i < g->n_topo; i++)
        pos[g->topo[i]] = i;
    /* The extra probes' targets that quantize something, as scope-only targets. */
    for (size_t j = 0; j < extra->n_targets; j++) {
        struct qp_sens_target *t = &extra->targets[j];
        if (t->n_edges + t->n_weights == 0) continue;
        t->n_scope_edges = t->n_edges;
        t->n_scope_weights = t->n_weights;
        t->n_edges = t->n_weights = 0;
        free(t->entries);
        t->entries = NULL;
        all[k++] = *t;
        memset(t, 0, sizeof *t);
    }
    size_t n_extra = k, a = 0, b = 0, m = 0;
    struct qp_sens_target *merged = calloc(n + 1, sizeof *merged);
    if (!merged) {
        free(all);
        free(pos);
        return nomem(err);
    }
    while (a < r->n_targets || b < n_extra) {
        struct qp_sens_target *ta = a < r->n_targets ? &r->targets[a] : NULL;
        int dup = 0; /* an unprobed op type the extra probe scored */
        for (size_t q = 0; ta && q < n_extra && !dup; q++)
            dup = ta->state == QP_SENS_UNPROBED && strcmp(ta->name, all[q].name) == 0;
        if (dup) {
            qp_sens_target_release(ta);
            a++;
        } else if (ta && (b == n_extra || !target_before(g, pos, gr, &all[b], ta))) {
            merged[m++] = *ta;
            a++;
        } else {
            merged[m++] = all[b++];
        }
    }
    free(r->targets);
    r->targets = merged;
    r->n_targets = m;
    r->reference_seconds += extra->reference_seconds;
    r->probe_seconds += extra->probe_seconds;
    r->reference_cpu_seconds += extra->reference_cpu_seconds;
    r->probe_cpu_seconds += extra->probe_cpu_seconds;
    r->nodes_executed += extra->nodes_executed;
    free(all);
    free(pos);
    return QP_OK;
}

/* The caller's progress across the two scorings: the second one's probes after the first's. */
struct two_pass {
    qp_sens_progress_fn fn;
    void *user;
    uint64_t offset, last_total;
};

static void two_pass_progress(uint64_t done, uint64_t total, void *user) {
    struct two_pass *p = user;
    p->last_total = total;
    p->fn(p->offset + done, p->offset + total, p->user);
}

enum qp_status qp_sens_score_scoped(const struct qp_model *model, const struct qp_placement *pl,
                                    const struct qp_placement *extra, struct qp_provider *prov,
                                    const struct qp_ranges *ranges, const struct qp_sens_options *o,
                                    struct qp_sens_result **out, struct qp_error *err) {
    if (!extra) return qp_sens_score(model, pl, prov, ranges, o, out, err);
    struct qp_sens_options so = *o;
    struct two_pass tp = {o->progress, o->progress_user, 0, 0};
    if (o->progress) {
        so.progress = two_pass_progress;
        so.progress_user = &tp;
    }
    struct qp_sens_result *r = NULL, *x = NULL;
    enum qp_status st = qp_sens_score(model, pl, prov, ranges, &so, &r, err);
    tp.offset = tp.last_total;
    tp.last_total = 0;
    if (st == QP_OK) st = qp_sens_score(model, extra, prov, ranges, &so, &x, err);
    if (st == QP_OK) st = qp_sens_scope_merge(r, x, model->graph, o->granularity, err);
    qp_sens_result_free(x);
    if (st != QP_OK) {
        qp_sens_result_free(r);
        return st;
    }
    *out = r;
    return QP_OK;
}

enum qp_status qp_sens_ranges_add(struct qp_ranges *dst, const struct qp_ranges *src,
                                  struct qp_error *err) {
    for (size_t i = 0; i < qp_ranges_count(src); i++) {
        const struct qp_range *rg = qp_ranges_at(src, i);
        if (qp_ranges_find(dst, rg->tensor)) continue;
        enum qp_status st = qp_ranges_set(dst, rg, err);
        if (st != QP_OK) return st;
    }
    return QP_OK;
}
