/*
 * Latency comparison that noise cannot fool: is placement A faster than placement B?
 *
 * Latency samples are skewed and carry outliers (a page fault, another process on the core), so
 * nothing here assumes normality or looks at a mean. qp_latency_compare uses:
 *   - the Mann-Whitney U test (rank based: an outlier counts as one rank, whatever its size)
 *     with the normal approximation, tie-corrected and continuity-corrected, two-sided at the
 *     given confidence (alpha = 1 - confidence); and
 *   - a minimum effect: the relative difference of the medians, (median_a - median_b) /
 *     median_b, must be at least `min_effect` (1% by default) in the same direction. A
 *     difference the test can resolve but smaller than that is not worth a placement change
 *     and stays UNRESOLVED.
 * The normal approximation needs a few samples per side: with fewer than 4 on either side the
 * verdict is UNRESOLVED.
 *
 * qp_latency_race times a candidate and the current best *alternately*: within a round run by
 * run where the backend keeps both models ready (builtin: qp_latency_measure_pair), else one
 * block of runs each; which goes first alternates round by round (ABBA order), so a drift or a
 * step of the machine's speed hits both. It pools each side's samples and compares after
 * every round from min_rounds on, until the verdict is resolved, max_rounds are done or the
 * time budget is spent (or, with stop_without_gain, once the candidate is shown not to be
 * min_effect faster: a difference the test resolves but smaller than the minimum effect no
 * longer runs to max_rounds; with early_reject, a candidate shown slower stops before
 * min_rounds). Looking after every round is a sequential test: to keep its overall
 * false-positive rate at most 1 - confidence, each look tests at (1 - confidence) / max_rounds
 * (Bonferroni over the looks the race may take: at most one per round).
 *
 *     struct qp_latency_race_options o;
 *     qp_latency_race_options_default(&o);   // 95%, 2..10 rounds of 10 runs, 60 s, 1%
 *     struct qp_latency_race_result r;
 *     if (qp_latency_race(backend, "cand.onnx", "best.onnx", &o, &r, &err) != QP_OK) ...
 *     if (r.verdict.verdict == QP_LATENCY_FASTER) ... adopt the candidate ...
 *     ... r.cand_ms[0..n_cand), r.best_ms[0..n_best): both distributions, for the log ...
 *     qp_latency_race_result_release(&r);
 */
#ifndef QP_AUTOTUNE_COMPARE_H
#define QP_AUTOTUNE_COMPARE_H

#include <stddef.h>

#include "autotune/latency.h"
#include "qplace/status.h"

enum qp_latency_verdict_kind {
    QP_LATENCY_UNRESOLVED = 0, /* no difference shown at the confidence and minimum effect */
    QP_LATENCY_FASTER,         /* a is faster than b */
    QP_LATENCY_SLOWER,         /* a is slower than b */
    QP_LATENCY_VERDICT_COUNT
};

/* "unresolved", "faster", "slower". */
const char *qp_latency_verdict_name(enum qp_latency_verdict_kind v);

struct qp_latency_verdict {
    enum qp_latency_verdict_kind verdict;
    size_t na, nb;
    double median_a_ms, median_b_ms;
    double rel_diff; /* (median_a - median_b) / median_b; 0 when median_b is 0 */
    double z;        /* Mann-Whitney z of a against b: negative when a tends to be faster */
    double p_value;  /* two-sided */
};

#define QP_LATENCY_MIN_EFFECT 0.01

/* Compares a[0..na) with b[0..nb) (latencies, borrowed for the call) at `confidence` in (0, 1)
 * with the minimum effect QP_LATENCY_MIN_EFFECT. *out is written only on success. Returns
 * QP_ERR_USAGE (NULL arguments, a confidence outside (0, 1), a NaN sample), QP_ERR_NOMEM. */
enum qp_status qp_latency_compare(const double *a, size_t na, const double *b, size_t nb,
                                  double confidence, struct qp_latency_verdict *out);

/* qp_latency_compare with the minimum relative effect given (>= 0). Same statuses. */
enum qp_status qp_latency_compare_effect(const double *a, size_t na, const double *b, size_t nb,
                                         double confidence, double min_effect,
                                         struct qp_latency_verdict *out);

struct qp_latency_race_options {
    double confidence;     /* overall, in (0, 1) (default 0.95) */
    size_t min_rounds;     /* rounds before the first look, >= 1 (default 2) */
    size_t max_rounds;     /* >= min_rounds (default 10) */
    size_t runs_per_round; /* timed runs of each model per round, >= 1 (default 10) */
    double budget_seconds; /* wall time after which no new round starts once min_rounds are
                              done, > 0 (default 60) */
    double min_effect;     /* as qp_latency_compare_effect (default QP_LATENCY_MIN_EFFECT) */
    /* 1: also stop, UNRESOLVED, once the candidate cannot be min_effect faster: its samples
     * divided by (1 - min_effect) test slower than the best's at the look's confidence (a
     * futility stop; for callers that only act on FASTER, as autotune; default 0). A
     * min_effect of 1 or more can never be met: such a race stops at its first look. */
    int stop_without_gain;
    /* 1: with a backend that times the two models run by run (measure_pair, as builtin), also
     * look after each round before min_rounds, and stop there on a verdict that does not adopt
     * the candidate: SLOWER, or (with stop_without_gain) shown not min_effect faster. FASTER
     * still waits for min_rounds. Each look is one of the max_rounds the Bonferroni level
     * counts, so the race's error rates stay as stated. For callers that act on FASTER only, as
     * autotune's scheme races: a scheme 2-4x slower than the best (most of those a search
     * generates) stops after one round instead of two (default 0). */
    int early_reject;
    /* 1: with a backend that keeps its models ready between calls (a `reset`, as builtin), a
     * race that ends FASTER is run once more in full, on fresh sessions of both files
     * (qp_latency_reset first), and the candidate is FASTER only if that race says so too;
     * else the result is UNRESOLVED with the stop QP_LATENCY_STOP_NOT_REPLICATED. A session
     * is one draw of the memory layout its runs meet, and two sessions of one file can time a
     * few percent apart for as long as they live, the same way in every round, which no
     * number of rounds averages out; a second pair of sessions draws again. The result holds
     * both races' samples (the first race's, then the second's), their rounds added, and a
     * verdict whose figures (medians, z, p-value) are all the samples' at the per-look level
     * and whose kind is as above. For callers that act on FASTER (autotune's scheme
     * races; default 0). */
    int replicate;
};

void qp_latency_race_options_default(struct qp_latency_race_options *o);

enum qp_latency_race_stop {
    QP_LATENCY_STOP_RESOLVED,      /* the verdict is FASTER or SLOWER */
    QP_LATENCY_STOP_MAX_ROUNDS,    /* max_rounds done, unresolved */
    QP_LATENCY_STOP_BUDGET,        /* the budget was spent, unresolved */
    QP_LATENCY_STOP_NO_GAIN,       /* stop_without_gain: shown not min_effect faster, unresolved */
    QP_LATENCY_STOP_NOT_REPLICATED /* replicate: FASTER, then not on fresh sessions */
};

/* "resolved", "max_rounds", "budget", "no_gain", "not_replicated"; "?" for anything else. */
const char *qp_latency_stop_name(enum qp_latency_race_stop s);

struct qp_latency_race_result {
    double *cand_ms; /* every candidate sample, in measurement order; owned by the result */
    size_t n_cand;
    double *best_ms; /* every sample of the current best */
    size_t n_best;
    size_t n_rounds;
    enum qp_latency_race_stop stop;
    struct qp_latency_verdict verdict; /* of the candidate (a) against the best (b), at the
                                          per-look level (see the overview) */
};

/* Frees the sample arrays and zeroes `r`. NULL-safe. */
void qp_latency_race_result_release(struct qp_latency_race_result *r);

/* Races the model at cand_path against the one at best_path (paths borrowed for the call) on
 * `backend` (borrowed). `o` may be NULL for the defaults. On success *out holds both
 * distributions and the verdict (release with qp_latency_race_result_release); on failure it
 * is zeroed. Returns QP_ERR_USAGE (NULL arguments, bad options), QP_ERR_NOMEM, and what
 * qp_latency_measure returns. */
enum qp_status qp_latency_race(struct qp_latency_backend *backend, const char *cand_path,
                               const char *best_path, const struct qp_latency_race_options *o,
                               struct qp_latency_race_result *out, struct qp_error *err);

#endif
