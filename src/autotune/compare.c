/* Latency comparison and the alternating race (autotune/compare.h). */
#include "autotune/compare.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/size.h"

static const char *const verdict_names[] = {
    [QP_LATENCY_UNRESOLVED] = "unresolved",
    [QP_LATENCY_FASTER] = "faster",
    [QP_LATENCY_SLOWER] = "slower",
};
_Static_assert(sizeof verdict_names / sizeof verdict_names[0] == QP_LATENCY_VERDICT_COUNT,
               "one name per verdict");

const char *qp_latency_verdict_name(enum qp_latency_verdict_kind v) {
    return (unsigned)v < QP_LATENCY_VERDICT_COUNT ? verdict_names[v] : "?";
}

/* A sample and which side it came from, for the joint ranking. */
struct tagged {
    double v;
    int from_a;
};

static int cmp_tagged(const void *x, const void *y) {
    double a = ((const struct tagged *)x)->v, b = ((const struct tagged *)y)->v;
    return a < b ? -1 : a > b;
}

/* Median of the n (>= 1) samples of one side in the sorted joint sample t. */
static double sorted_median(const struct tagged *t, size_t n, int from_a) {
    /* Walk the joint order picking one side: the side's own order is the joint order. */
    size_t k = 0, lo = (n - 1) / 2, hi = n / 2;
    double vlo = 0, vhi = 0;
    for (const struct tagged *p = t;; p++) {
        if (p->from_a != from_a) continue;
        if (k == lo) vlo = p->v;
        if (k == hi) {
            vhi = p->v;
            break;
        }
        k++;
    }
    return 0.5 * (vlo + vhi);
}

/* Mann-Whitney z of side a (tie- and continuity-corrected) over the sorted joint sample. */
static double mann_whitney_z(const struct tagged *t, size_t na, size_t nb) {
    size_t n = na + nb;
    double rank_sum_a = 0, ties = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && t[j].v == t[i].v)
            j++;
        double avg_rank = 0.5 * (double)(i + 1 + j); /* ranks i+1 .. j */
        double cnt = (double)(j - i);
        ties += cnt * cnt * cnt - cnt;
        for (size_t k = i; k < j; k++)
            if (t[k].from_a) rank_sum_a += avg_rank;
        i = j;
    }
    double dna = (double)na, dnb = (double)nb, dn = (double)n;
    double u = rank_sum_a - dna * (dna + 1) / 2;
    double mean = dna * dnb / 2;
    double var = dna * dnb / 12 * ((dn + 1) - ties / (dn * (dn - 1)));
    if (var <= 0) return 0;
    double d = u - mean;
    d = d > 0.5 ? d - 0.5 : d < -0.5 ? d + 0.5 : 0;
    return d / sqrt(var);
}

enum qp_status qp_latency_compare_effect(const double *a, size_t na, const double *b, size_t nb,
                                         double confidence, double min_effect,
                                         struct qp_latency_verdict *out) {
    if (!out || (na && !a) || (nb && !b) || !(confidence > 0 && confidence < 1) ||
        !(min_effect >= 0) || na == 0 || nb == 0)
        return QP_ERR_USAGE;
    size_t n = 0;
    if (!qp_size_add(na, nb, &n)) return QP_ERR_NOMEM;
    struct tagged *t = qp_malloc_n(n, sizeof *t);
    if (!t) return QP_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        t[i].from_a = i < na;
        t[i].v = i < na ? a[i] : b[i - na];
        if (isnan(t[i].v)) {
            free(t);
            return QP_ERR_USAGE;
        }
    }
    qsort(t, n, sizeof *t, cmp_tagged);
    struct qp_latency_verdict v = {.na = na, .nb = nb};
    v.median_a_ms = sorted_median(t, na, 1);
    v.median_b_ms = sorted_median(t, nb, 0);
    v.rel_diff = v.median_b_ms != 0 ? (v.median_a_ms - v.median_b_ms) / v.median_b_ms : 0;
    v.z = mann_whitney_z(t, na, nb);
    v.p_value = erfc(fabs(v.z) / sqrt(2.0));
    free(t);
    int enough = na >= 4 && nb >= 4 && v.p_value < 1 - confidence;
    if (enough && v.z < 0 && v.rel_diff <= -min_effect) v.verdict = QP_LATENCY_FASTER;
    if (enough && v.z > 0 && v.rel_diff >= min_effect) v.verdict = QP_LATENCY_SLOWER;
    *out = v;
    return QP_OK;
}

enum qp_status qp_latency_compare(const double *a, size_t na, const double *b, size_t nb,
                                  double confidence, struct qp_latency_verdict *out) {
    return qp_latency_compare_effect(a, na, b, nb, confidence, QP_LATENCY_MIN_EFFECT, out);
}

/* ---- the race --------------------------------------------------------------------------- */

const char *qp_latency_stop_name(enum qp_latency_race_stop s) {
    static const char *const names[] = {"resolved", "max_rounds", "budget", "no_gain",
                                        "not_replicated"};
    return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "?";
}

/* 1 when a[0..na) cannot be min_effect faster than b[0..nb): a / (1 - min_effect) tests slower
 * than b at `confidence`; 0 otherwise or without memory (the race then goes on). */
static int without_gain(const double *a, size_t na, const double *b, size_t nb, double confidence,
                        double min_effect) {
    /* A gain of min_effect >= 1 (a sub-model race's effect scaled by whole / sub-model: a
     * pattern under a hundredth of the model) would take the candidate to no time at all:
     * never, so no look can show it, and the race has nothing to wait for. */
    if (!(min_effect < 1)) return 1;
    double *s = qp_malloc_n(na, sizeof *s);
    if (!s) return 0;
    for (size_t i = 0; i < na; i++)
        s[i] = a[i] / (1 - min_effect);
    struct qp_latency_verdict v;
    int slower = qp_latency_compare_effect(s, na, b, nb, confidence, 0, &v) == QP_OK &&
                 v.verdict == QP_LATENCY_SLOWER;
    free(s);
    return slower;
}

void qp_latency_race_options_default(struct qp_latency_race_options *o) {
    o->confidence = 0.95;
    o->min_rounds = 2;
    o->max_rounds = 10;
    o->runs_per_round = 10;
    o->budget_seconds = 60;
    o->min_effect = QP_LATENCY_MIN_EFFECT;
    o->stop_without_gain = 0;
    o->early_reject = 0;
    o->replicate = 0;
}

void qp_latency_race_result_release(struct qp_latency_race_result *r) {
    if (!r) return;
    free(r->cand_ms);
    free(r->best_ms);
    memset(r, 0, sizeof *r);
}

static enum qp_status check_race_options(const struct qp_latency_race_options *o, size_t *cap_out,
                                         struct qp_error *err) {
    if (!(o->confidence > 0 && o->confidence < 1))
        return qp_error_set(err, QP_ERR_USAGE, "latency race: confidence %g is not in (0, 1)",
                            o->confidence);
    if (o->min_rounds < 1 || o->max_rounds < o->min_rounds || o->runs_per_round < 1)
        return qp_error_set(err, QP_ERR_USAGE,
                            "latency race: rounds %zu..%zu of %zu runs: expected 1 <= min_rounds "
                            "<= max_rounds and runs_per_round >= 1",
                            o->min_rounds, o->max_rounds, o->runs_per_round);
    if (!(o->budget_seconds > 0) || !(o->min_effect >= 0))
        return qp_error_set(err, QP_ERR_USAGE,
                            "latency race: budget %g s must be > 0 and min_effect %g >= 0",
                            o->budget_seconds, o->min_effect);
    if (!qp_size_mul(o->max_rounds, o->runs_per_round, cap_out))
        return qp_error_set(err, QP_ERR_NOMEM, "latency race: too many samples");
    return QP_OK;
}

/* One round: both models through qp_latency_measure_pair (run by run where the backend can,
 * else one block each), which goes first alternating with the round (ABBA over two rounds). */
static enum qp_status race_round(struct qp_latency_backend *backend, const char *cand,
                                 const char *best, size_t runs, struct qp_latency_race_result *r,
                                 struct qp_error *err) {
    double *c = r->cand_ms + r->n_cand, *b = r->best_ms + r->n_best;
    enum qp_status st = r->n_rounds % 2 == 0
                            ? qp_latency_measure_pair(backend, cand, best, runs, c, b, err)
                            : qp_latency_measure_pair(backend, best, cand, runs, b, c, err);
    if (st != QP_OK) return st;
    r->n_cand += runs;
    r->n_best += runs;
    r->n_rounds++;
    return QP_OK;
}

/* The confidence of each look: Bonferroni over the looks a race may take (one per round)
 * keeps the overall level. */
static double look_level(const struct qp_latency_race_options *o) {
    return 1 - (1 - o->confidence) / (double)o->max_rounds;
}

/* One race (the options checked, `cap` samples per side at most). */
static enum qp_status race_once(struct qp_latency_backend *backend, const char *cand_path,
                                const char *best_path, const struct qp_latency_race_options *o,
                                size_t cap, struct qp_latency_race_result *out,
                                struct qp_error *err) {
    enum qp_status st = QP_OK;
    struct qp_latency_race_result r = {0};
    r.cand_ms = qp_malloc_n(cap, sizeof *r.cand_ms);
    r.best_ms = qp_malloc_n(cap, sizeof *r.best_ms);
    if (!r.cand_ms || !r.best_ms) {
        st = qp_error_set(err, QP_ERR_NOMEM, "latency race: out of memory");
        goto fail;
    }
    double look_confidence = look_level(o);
    double t0 = qp_clock_seconds();
    r.stop = QP_LATENCY_STOP_MAX_ROUNDS;
    while (r.n_rounds < o->max_rounds) {
        if (r.n_rounds >= o->min_rounds && qp_clock_seconds() - t0 >= o->budget_seconds) {
            r.stop = QP_LATENCY_STOP_BUDGET;
            break;
        }
        if ((st = race_round(backend, cand_path, best_path, o->runs_per_round, &r, err)) != QP_OK)
            goto fail;
        if (qp_latency_compare_effect(r.cand_ms, r.n_cand, r.best_ms, r.n_best, look_confidence,
                                      o->min_effect, &r.verdict) != QP_OK) {
            st = qp_error_set(err, QP_ERR_NOMEM, "latency race: out of memory");
            goto fail;
        }
        /* Before min_rounds only a look that rejects the candidate may stop the race, and only
         * where each round is timed run by run (both sides see the same machine). */
        int look = r.n_rounds >= o->min_rounds || (o->early_reject && backend->measure_pair);
        int decide = r.n_rounds >= o->min_rounds || r.verdict.verdict == QP_LATENCY_SLOWER;
        if (look && decide && r.verdict.verdict != QP_LATENCY_UNRESOLVED) {
            r.stop = QP_LATENCY_STOP_RESOLVED;
            break;
        }
        if (look && o->stop_without_gain &&
            without_gain(r.cand_ms, r.n_cand, r.best_ms, r.n_best, look_confidence,
                         o->min_effect)) {
            r.stop = QP_LATENCY_STOP_NO_GAIN;
            break;
        }
    }
    /* Before min_rounds the verdict is not a decision. */
    if (r.stop != QP_LATENCY_STOP_RESOLVED) r.verdict.verdict = QP_LATENCY_UNRESOLVED;
    *out = r;
    return QP_OK;
fail:
    qp_latency_race_result_release(&r);
    return st;
}

/* a's samples followed by b's, into a (b released); the verdict's figures (medians, z, p)
 * are the joined samples' at `confidence`, its kind b's. */
static enum qp_status join_races(struct qp_latency_race_result *a, struct qp_latency_race_result *b,
                                 double confidence, double min_effect, struct qp_error *err) {
    double *c = qp_malloc_n(a->n_cand + b->n_cand, sizeof *c);
    double *w = qp_malloc_n(a->n_best + b->n_best, sizeof *w);
    if (!c || !w) {
        free(c);
        free(w);
        return qp_error_set(err, QP_ERR_NOMEM, "latency race: out of memory");
    }
    memcpy(c, a->cand_ms, a->n_cand * sizeof *c);
    memcpy(c + a->n_cand, b->cand_ms, b->n_cand * sizeof *c);
    memcpy(w, a->best_ms, a->n_best * sizeof *w);
    memcpy(w + a->n_best, b->best_ms, b->n_best * sizeof *w);
    struct qp_latency_race_result r = *b;
    r.cand_ms = c;
    r.best_ms = w;
    r.n_cand = a->n_cand + b->n_cand;
    r.n_best = a->n_best + b->n_best;
    r.n_rounds = a->n_rounds + b->n_rounds;
    if (qp_latency_compare_effect(c, r.n_cand, w, r.n_best, confidence, min_effect, &r.verdict) !=
        QP_OK) {
        free(c);
        free(w);
        return qp_error_set(err, QP_ERR_NOMEM, "latency race: out of memory");
    }
    r.verdict.verdict = b->verdict.verdict;
    qp_latency_race_result_release(a);
    qp_latency_race_result_release(b);
    *a = r;
    return QP_OK;
}

enum qp_status qp_latency_race(struct qp_latency_backend *backend, const char *cand_path,
                               const char *best_path, const struct qp_latency_race_options *o,
                               struct qp_latency_race_result *out, struct qp_error *err) {
    struct qp_latency_race_options dflt;
    qp_latency_race_options_default(&dflt);
    if (!o) o = &dflt;
    if (!backend || !cand_path || !best_path || !out)
        return qp_error_set(err, QP_ERR_USAGE, "latency race: NULL argument");
    memset(out, 0, sizeof *out);
    size_t cap = 0;
    enum qp_status st = check_race_options(o, &cap, err);
    if (st != QP_OK) return st;
    struct qp_latency_race_result r = {0}, again = {0};
    if ((st = race_once(backend, cand_path, best_path, o, cap, &r, err)) != QP_OK) return st;
    if (!o->replicate || r.verdict.verdict != QP_LATENCY_FASTER || !backend->measure_pair ||
        !qp_latency_reset(backend)) {
        *out = r;
        return QP_OK;
    }
    st = race_once(backend, cand_path, best_path, o, cap, &again, err);
    if (st == QP_OK) st = join_races(&r, &again, look_level(o), o->min_effect, err);
    if (st != QP_OK) {
        qp_latency_race_result_release(&r);
        qp_latency_race_result_release(&again);
        return st;
    }
    if (r.verdict.verdict != QP_LATENCY_FASTER) {
        r.verdict.verdict = QP_LATENCY_UNRESOLVED;
        r.stop = QP_LATENCY_STOP_NOT_REPLICATED;
    }
    *out = r;
    return QP_OK;
}
