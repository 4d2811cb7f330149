/*
 * qplace/sensitivity.h — which quantizers hurt accuracy most, and which to leave in float.
 *
 * A sensitivity analysis ranks the *targets* of a placement — its op types, or its nodes — by how
 * far the model's outputs drift from the float model's when the target is quantized. Each
 * target's *probe* is the sub-placement of the target's edges and weights, quantized alone
 * (QP_SENSITIVITY_QUANTIZE_ONE) or everything but it (QP_SENSITIVITY_EXCLUDE_ONE). Probes run in
 * qplace's engine with fake quantization on the probe's tensors, every probe on every batch of
 * the data, and re-run only the nodes downstream of the probe from a cached float reference; no
 * model is written. One calibration of the full placement gives the scales of every probe. A
 * score is the metric per sample (float64), averaged over the samples and summed over the float
 * graph outputs. A target whose probe quantizes nothing is UNPROBED and one whose evaluation
 * fails is FAILED, with the reason — neither is ever reported as a score of 0.
 *
 * Picking turns the ranking into exclusions (ModelOpt's suggest_exclusion): the top targets
 * holding a fraction of the score mass (coverage), those scoring above a threshold, or — the
 * accuracy budget — the top targets one at a time until the whole quantized model's drift is at
 * most a bound and/or its top-1 agreement with the float model at least a fraction.
 * docs/sensitivity.md explains each choice; `qplace sensitivity` is this API.
 *
 *     struct qp_error err = {0};
 *     struct qp_model *m = NULL;
 *     struct qp_provider *data = NULL;                  // qplace/calib.h
 *     struct qp_sensitivity *s = NULL;
 *     if (qp_model_load_file("model.onnx", NULL, &m, &err) != QP_OK) goto fail;
 *     if (qp_provider_open_model(m, "calib.npz", NULL, NULL, &data, &err) != QP_OK) goto fail;
 *     struct qp_sensitivity_options o = {.granularity = QP_SENSITIVITY_NODE};
 *     // placement NULL: the trt policy; ranges NULL: calibrated here (entropy)
 *     if (qp_sensitivity_score(m, NULL, data, NULL, &o, &s, &err) != QP_OK) goto fail;
 *     for (size_t i = 0; i < qp_sensitivity_n_targets(s); i++) {
 *         struct qp_sensitivity_target t;
 *         qp_sensitivity_target(s, i, &t);              // highest score first
 *         if (t.state == QP_SENSITIVITY_SCORED) printf("%zu %s %g\n", t.rank, t.name, t.score);
 *     }
 *     struct qp_sensitivity_pick_options po;
 *     qp_sensitivity_pick_options_default(&po);          // coverage 0.9
 *     struct qp_sensitivity_exclusions *x = NULL;
 *     if (qp_sensitivity_pick(s, &po, &x, &err) != QP_OK) goto fail;
 *     struct qp_placement *kept = NULL;                  // the placement minus the exclusions
 *     qp_sensitivity_exclusions_placement(x, &kept, &err);
 *     ...
 *     qp_sensitivity_exclusions_free(x);
 *     qp_sensitivity_free(s);
 *     qp_provider_free(data);
 *     qp_model_free(m);
 *
 * Ownership: the model, the data and the ranges given to qp_sensitivity_score are borrowed for
 * the life of the analysis (picking with a budget runs the model again); the placement is copied.
 * Strings handed out are borrowed from the analysis until it is freed. An analysis is not safe to
 * use from two threads at once. Scores do not depend on the thread or worker counts.
 */
#ifndef QPLACE_SENSITIVITY_H
#define QPLACE_SENSITIVITY_H

#include <stddef.h>
#include <stdint.h>

#include "qplace/calib.h"
#include "qplace/model.h"
#include "qplace/placement.h"
#include "qplace/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct qp_sensitivity;

/* ---- scoring -------------------------------------------------------------------------------- */

enum qp_sensitivity_granularity {
    QP_SENSITIVITY_OP_TYPE = 0, /* one target per op type the placement quantizes */
    QP_SENSITIVITY_NODE,        /* one target per quantized node */
    QP_SENSITIVITY_GRANULARITY_COUNT
};

/* The distance of one sample's outputs from the float model's (docs/sensitivity.md):
 * KL(softmax(float) || softmax(quantized)), the mean squared difference, or 1 - cosine. */
enum qp_sensitivity_metric {
    QP_SENSITIVITY_KL_DIV = 0,
    QP_SENSITIVITY_MSE,
    QP_SENSITIVITY_COS,
    QP_SENSITIVITY_METRIC_COUNT
};

enum qp_sensitivity_probe {
    QP_SENSITIVITY_QUANTIZE_ONE = 0, /* only the target quantized */
    QP_SENSITIVITY_EXCLUDE_ONE,      /* everything but the target quantized */
    QP_SENSITIVITY_PROBE_COUNT
};

/* Called as probes progress with the probes done and the number of probes (a probe is a target
 * evaluated on every batch). */
typedef void (*qp_sensitivity_progress_fn)(uint64_t done, uint64_t total, void *user);

/* Zero-initialized: op types, kl_div, quantize_one, INT8, every op type, incremental runs,
 * a 1 GiB reference cache, all cores. */
struct qp_sensitivity_options {
    enum qp_sensitivity_granularity granularity;
    enum qp_sensitivity_metric metric;
    enum qp_sensitivity_probe probe;
    enum qp_quant_mode quantize_mode; /* what the quantizers hold */
    /* Op types the targets are limited to (borrowed for the call); 0: every op type the placement
     * quantizes. Each must be an op type of the model or an ONNX operator (else QP_ERR_USAGE
     * naming it and the closest spelling). With QP_SENSITIVITY_QUANTIZE_ONE, a listed op type the
     * placement does not quantize is probed as ModelOpt does: on the inputs the int8 trt policy
     * quantizes for a quantizable op (its n_edges / n_weights stay 0: the placement owns none);
     * it is UNPROBED when the model has no such node (or, with EXCLUDE_ONE, always). */
    const char *const *op_types_scope;
    size_t n_op_types_scope;
    int no_incremental; /* 1: every probe a full run (same scores, slower) */
    size_t cache_bytes; /* the float reference cache; 0: 1 GiB */
    int n_threads;      /* engine threads; 0: all cores */
    /* Probes side by side, each on a session of its own; 0: one per thread, fewer when the
     * sessions would take more than half the available memory. */
    int probe_workers;
    qp_sensitivity_progress_fn progress; /* may be NULL */
    void *progress_user;
    /* 1: weight scales from each channel's absmax (`qplace quantize --weight_clipping absmax`);
     * 0 (default): each channel's least-error clipping, as `qplace quantize` writes by default. */
    int absmax_weights;
};

/* Scores every target of `placement` on `model`, evaluating each probe on every batch of `data`.
 *   model:     borrowed for the analysis' life; a model below opset 19 is converted to opset 19
 *              in place (as qp_placement_trt does) and its topological order recomputed;
 *   placement: copied and checked against the model; NULL: the trt policy for o->quantize_mode;
 *   data:      borrowed for the analysis' life; reset before every pass;
 *   ranges:    borrowed for the analysis' life: the amax of every activation tensor of the
 *              placement (a missing one makes the targets reading it FAILED); NULL: calibrated
 *              here as `qplace sensitivity` does (entropy over every batch of `data`, the
 *              placement's tensors the engine computes as float32);
 *   o:         may be NULL (defaults).
 * On success *out owns a new analysis (free with qp_sensitivity_free). Returns QP_ERR_USAGE (bad
 * options, NULL model or data), QP_ERR_BAD_INPUT (a model already holding Q/DQ nodes, a placement
 * naming what the model lacks, data the model cannot take, no batches, no float graph output),
 * QP_ERR_UNSUPPORTED (an opset that cannot be converted, an op the engine lacks), QP_ERR_NOMEM
 * and the engine's statuses for the float reference runs. A probe that fails is not an error:
 * it is recorded on its target. */
enum qp_status qp_sensitivity_score(struct qp_model *model, const struct qp_placement *placement,
                                    struct qp_provider *data, const struct qp_ranges *ranges,
                                    const struct qp_sensitivity_options *o,
                                    struct qp_sensitivity **out, struct qp_error *err);

/* NULL-safe. Free every exclusions handle of the analysis first. */
void qp_sensitivity_free(struct qp_sensitivity *s);

/* ---- results -------------------------------------------------------------------------------- */

enum qp_sensitivity_state {
    QP_SENSITIVITY_SCORED = 0,
    QP_SENSITIVITY_UNPROBED, /* the probe quantizes nothing */
    QP_SENSITIVITY_FAILED    /* no calibrated range, a non-float tensor, an engine error, ... */
};

/* One target as qp_sensitivity_target hands it out; strings borrowed from the analysis. */
struct qp_sensitivity_target {
    const char *name;    /* the node name, or the op type */
    const char *op_type; /* the node's op type, or the op type itself */
    enum qp_sensitivity_state state;
    double score;              /* SCORED: higher is more sensitive; else 0 */
    size_t rank;               /* SCORED: 1 for the highest score; else 0 */
    size_t n_edges, n_weights; /* placement entries the target owns */
    size_t n_nodes;            /* quantized nodes it covers (1 for a node target) */
    const char *error;         /* UNPROBED: why; FAILED: the message; else NULL */
};

/* The whole analysis. */
struct qp_sensitivity_summary {
    size_t n_targets, n_scored, n_unprobed, n_failed;
    uint64_t n_samples;             /* evaluated per probe */
    uint64_t n_calibration_samples; /* when calibrated here, else 0 */
    double total_score;             /* the sum of the scores (the "mass" picking covers) */
    double reference_seconds;       /* the float reference runs */
    double probe_seconds;           /* every probe over every sample */
};

void qp_sensitivity_get_summary(const struct qp_sensitivity *s, struct qp_sensitivity_summary *out);
size_t qp_sensitivity_n_targets(const struct qp_sensitivity *s);
/* Target i in rank order — the scored targets, highest score first (ties in target order), then
 * the unprobed and the failed ones — into *out. Returns 0 (out untouched) when i is out of range,
 * else 1. */
int qp_sensitivity_target(const struct qp_sensitivity *s, size_t i,
                          struct qp_sensitivity_target *out);
/* Quantized node k (0 <= k < n_nodes, topological order) of target i; NULL when out of range.
 * Borrowed from the analysis. */
const char *qp_sensitivity_target_node(const struct qp_sensitivity *s, size_t i, size_t k);

/* ---- picking exclusions --------------------------------------------------------------------- */

enum qp_sensitivity_pick_mode {
    QP_SENSITIVITY_COVERAGE = 0, /* the top targets holding up to `coverage` of the score mass */
    QP_SENSITIVITY_THRESHOLD,    /* every target scoring above `threshold` */
    QP_SENSITIVITY_BUDGET        /* top targets one at a time until the model meets the budget */
};

/* How a group of targets scores (blocks files only). */
enum qp_sensitivity_block_agg {
    QP_SENSITIVITY_BLOCK_SUM = 0,
    QP_SENSITIVITY_BLOCK_MAX,
    QP_SENSITIVITY_BLOCK_MEAN
};

struct qp_sensitivity_pick_options {
    enum qp_sensitivity_pick_mode mode; /* default coverage */
    double coverage;                    /* in [0, 1]; default 0.9 */
    double threshold;                   /* threshold mode: scores strictly above it */
    /* budget mode: the drift bound in the analysis' metric (summed over outputs); < 0 (default
     * -1): none. */
    double max_output_drift;
    size_t max_targets;     /* at most this many (groups, with blocks); 0: no cap */
    double min_score_floor; /* never exclude a lower score; default 0 */
    double near_tie_ratio;  /* warning ratio; default 0.99; <= 0: none */
    /* A JSON file {"group": ["regex", ...], ...} grouping targets whose names match (POSIX
     * extended, anchored at the start): groups are picked whole. NULL (default): none. */
    const char *blocks_path;
    enum qp_sensitivity_block_agg block_agg; /* default sum */
    /* budget mode: in (0, 1], every float output holding class scores (rank >= 2, last
     * dimension >= 2) must have at least this fraction of its rows — all positions before the
     * last axis: per sample for a classifier, per time step for a CTC head — with the float
     * model's argmax; 0 (default): none. The budget needs this or max_output_drift >= 0; with
     * both, both must hold. */
    double min_top1_agreement;
};

void qp_sensitivity_pick_options_default(struct qp_sensitivity_pick_options *o);

struct qp_sensitivity_exclusions;

/* Picks exclusions among the scored targets of `s` (borrowed for the exclusions' life; a budget
 * runs the whole quantized model again on the analysis' data). On success *out owns a new
 * exclusions handle (free with qp_sensitivity_exclusions_free). Returns QP_ERR_USAGE (a coverage
 * outside [0, 1], a non-finite threshold, a budget without a bound or with min_top1_agreement
 * outside [0, 1], an unknown mode or agg), QP_ERR_IO and QP_ERR_BAD_INPUT (a blocks file that
 * cannot be read or parsed, naming the group; a top-1 budget on a model without class-score
 * outputs),
 * QP_ERR_NOMEM and, with a budget, the engine's statuses. A near tie at the cut is reported in
 * the summary and logged, not an error. */
enum qp_status qp_sensitivity_pick(struct qp_sensitivity *s,
                                   const struct qp_sensitivity_pick_options *o,
                                   struct qp_sensitivity_exclusions **out, struct qp_error *err);
/* NULL-safe. */
void qp_sensitivity_exclusions_free(struct qp_sensitivity_exclusions *x);

struct qp_sensitivity_pick_summary {
    size_t n_excluded;      /* targets excluded */
    double excluded_score;  /* the sum of their scores */
    double coverage_pct;    /* 100 * excluded_score / total_score (0 when the total is 0) */
    int near_tie;           /* the cut fell between near-equal scores */
    const char *warning;    /* the near-tie warning or ""; borrowed from the handle */
    size_t n_budget_groups; /* budget: targets (groups) excluded one at a time */
    int budget_met;         /* budget: the model met every bound */
    double drift_quantized; /* budget: drift with everything quantized */
    double drift_after;     /* budget: drift after the exclusions */
    /* budget: the least top-1 agreement of the class-score outputs with everything quantized
     * and after the exclusions; -1 when no output holds class scores */
    double top1_quantized, top1_after;
};

void qp_sensitivity_exclusions_get_summary(const struct qp_sensitivity_exclusions *x,
                                           struct qp_sensitivity_pick_summary *out);
/* The name of excluded target i (0 <= i < n_excluded, in the order they were chosen), or NULL;
 * borrowed from the analysis. */
const char *qp_sensitivity_excluded(const struct qp_sensitivity_exclusions *x, size_t i);
/* The analysis' placement minus every entry of the excluded targets, as a new placement in *out
 * (what `qplace sensitivity --placement_out` writes). QP_ERR_NOMEM. */
enum qp_status qp_sensitivity_exclusions_placement(const struct qp_sensitivity_exclusions *x,
                                                   struct qp_placement **out, struct qp_error *err);

/* ---- picking on plain scores ---------------------------------------------------------------
 *
 * ModelOpt's suggest_exclusion(scores, ...) on a {name: score} table that no analysis holds (a
 * scores file, another tool's scores, a table edited by hand): the picker of
 * qp_sensitivity_pick over names[0..n) ranked by score (highest first, ties in input order),
 * without the budget mode, which runs the model. */
struct qp_sensitivity_score_pick {
    size_t n_excluded;
    size_t *excluded;      /* indices into names, in the order chosen */
    double excluded_score; /* the sum of their scores */
    double total_score;    /* the sum of every score */
    double coverage_pct;   /* 100 * excluded_score / total_score (0 when the total is <= 0) */
    int near_tie;          /* the cut fell between near-equal scores */
    char warning[256];     /* the near-tie warning, or "" */
};

/* Picks among names[0..n) with scores[0..n) (both borrowed for the call; every score finite,
 * names not repeated) with `o` (mode coverage or threshold). Blocks come from o->blocks_path or,
 * when that is NULL, from `blocks_json` (the text of a blocks file, blocks_len bytes; NULL: no
 * blocks). On success *out owns the result (qp_sensitivity_score_pick_free). Returns QP_ERR_USAGE
 * (the budget mode, bad options, a non-finite score, a repeated or NULL name), QP_ERR_IO and
 * QP_ERR_BAD_INPUT (blocks that cannot be read or parsed, naming the group), QP_ERR_NOMEM. */
enum qp_status qp_sensitivity_pick_scores(const char *const *names, const double *scores, size_t n,
                                          const struct qp_sensitivity_pick_options *o,
                                          const char *blocks_json, size_t blocks_len,
                                          struct qp_sensitivity_score_pick **out,
                                          struct qp_error *err);
/* NULL-safe. */
void qp_sensitivity_score_pick_free(struct qp_sensitivity_score_pick *p);

#ifdef __cplusplus
}
#endif
#endif
