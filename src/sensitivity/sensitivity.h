/*
 * Sensitivity analysis (docs/sensitivity.md): which parts of a placement hurt accuracy most when
 * quantized, and which to leave in float.
 *
 *   PLACEMENT -> targets (op types or nodes the placement quantizes) -> probes (sub-placements:
 *   the target's entries, or everything but them) -> engine runs with edge overlays (fake quant,
 *   src/qmath/qparams via the engine) -> per-sample metric against the float reference -> scores
 *   -> picker (coverage / threshold / blocks) -> exclusion list.
 *
 * Scales come from ONE calibration of the full placement, shared by every probe. Each probe is
 * evaluated on every sample; incrementally (the default), the float reference run of a batch is
 * cached by the engine (qp_session_set_cache) and a probe recomputes only the nodes downstream
 * of its edges (qp_session_run_partial); with incremental = 0 every probe is a full run. Both give
 * bit-identical outputs, hence identical scores. No model is written per probe.
 *
 * Honest results: a target whose probe places no quantizer is UNPROBED, one whose evaluation
 * fails (no calibrated range, a non-float tensor, an engine error, a non-finite score) is FAILED
 * with the message — neither is ever reported as a score of 0.
 *
 *     struct qp_sens_options o;
 *     qp_sens_options_default(&o);
 *     o.granularity = QP_SENS_NODE;
 *     struct qp_sens_result *r = NULL;
 *     if (qp_sens_score(model, placement, provider, ranges, &o, &r, &err) != QP_OK) ...
 *     for (size_t i = 0; i < r->n_targets; i++) ... r->targets[i].name, .score, .state ...
 *     qp_sens_result_free(r);
 */
#ifndef QP_SENSITIVITY_SENSITIVITY_H
#define QP_SENSITIVITY_SENSITIVITY_H

#include <regex.h>
#include <stddef.h>
#include <stdint.h>

#include "calib/calibrator.h"
#include "calib/provider.h"
#include "calib/ranges.h"
#include "ir/ir.h"
#include "qplace/dtype.h"
#include "qplace/status.h"
#include "placement/placement.h"

enum qp_sens_granularity { QP_SENS_OP_TYPE = 0, QP_SENS_NODE, QP_SENS_GRANULARITY_COUNT };
enum qp_sens_metric { QP_SENS_KL_DIV = 0, QP_SENS_MSE, QP_SENS_COS, QP_SENS_METRIC_COUNT };
enum qp_sens_probe { QP_SENS_QUANTIZE_ONE = 0, QP_SENS_EXCLUDE_ONE, QP_SENS_PROBE_COUNT };
enum qp_sens_state { QP_SENS_SCORED = 0, QP_SENS_UNPROBED, QP_SENS_FAILED };

/* Names as written in flags and JSON ("op_type", "kl_div", "quantize_one", ...); parse returns
 * -1 for an unknown name. */
const char *qp_sens_granularity_name(enum qp_sens_granularity g);
const char *qp_sens_metric_name(enum qp_sens_metric m);
const char *qp_sens_probe_name(enum qp_sens_probe p);
int qp_sens_granularity_parse(const char *s);
int qp_sens_metric_parse(const char *s);
int qp_sens_probe_parse(const char *s);

/* ---- metrics (float64; per sample) ---------------------------------------------------------- */

/* The distance between one sample's reference and quantized outputs (n values each):
 *   kl_div: KL(softmax(ref) || softmax(q)), max-shifted, denominators + 1e-12, logs of p + 1e-12;
 *   mse:    mean of squared differences;
 *   cos:    1 - dot / (|ref| |q| + 1e-12), in [0, 2]; both vectors zero gives 0 (an unchanged
 *           zero output is not sensitive), exactly one zero gives 1 (as orthogonal).
 * n == 0 gives 0. NaN/Inf inputs give a non-finite result (the caller reports it). */
double qp_sens_metric_sample(enum qp_sens_metric m, const float *ref, const float *q, size_t n);

/* Top-1 agreement of class scores: of the n / last rows of `last` values each (n a multiple of
 * last), how many have their argmax (the first maximum) at the same index in `ref` and `q`. */
uint64_t qp_sens_top1_agree(const float *ref, const float *q, size_t n, size_t last);

/* ---- scoring -------------------------------------------------------------------------------- */

/* Called as probes progress with the probes done and the number of probes (a probe is one
 * target evaluated on every batch; done counts finished batch steps / batches). */
typedef void (*qp_sens_progress_fn)(uint64_t done, uint64_t total, void *user);

struct qp_sens_options {
    enum qp_sens_granularity granularity; /* default op_type */
    enum qp_sens_metric metric;           /* default kl_div */
    enum qp_sens_probe probe;             /* default quantize_one */
    enum qp_dtype qtype;                  /* QP_DTYPE_INT8 (default) or QP_DTYPE_FLOAT8E4M3FN */
    /* Weight scales as the writer gives them (quant/writer.h qp_qdq_weight_scales): 1 (default,
     * as `qplace quantize`'s default) each channel's least-error clipping, 0 its absmax. */
    int weight_clip_mse;
    int incremental;    /* default 1 */
    size_t cache_bytes; /* reference cache budget; default 1 GiB */
    int n_threads;      /* 0: all cores */
    /* Probes run side by side on this many workers, each a session of its own with
     * n_threads / workers threads (scores do not depend on it). 0 (default): one per thread,
     * fewer when the extra sessions would take more than half of the available memory;
     * at most n_threads and the number of targets. */
    int probe_workers;
    /* Op types targets are limited to (borrowed; n_scope 0: every op type the placement
     * quantizes). A scoped op type with no entry in the placement given to qp_sens_score is
     * listed as unprobed; callers wanting ModelOpt's probes of such types also score
     * qp_sens_scope_placement and merge (below). */
    const char *const *scope;
    size_t n_scope;
    qp_sens_progress_fn progress; /* may be NULL */
    void *progress_user;
};

void qp_sens_options_default(struct qp_sens_options *o);

struct qp_sens_target {
    char *name;                /* node name, or the op type */
    char *op_type;             /* the node's op type, or the op type itself */
    size_t n_edges, n_weights; /* placement entries the target owns */
    /* Entries its probe quantized that the placement does not hold (qp_sens_scope_merge): a
     * scoped op type the placement does not quantize. Such a target owns no entry. */
    size_t n_scope_edges, n_scope_weights;
    size_t n_nodes; /* quantized nodes it covers (1 for a node target) */
    char **nodes;   /* those node names, in topological order */
    enum qp_sens_state state;
    double score;    /* SCORED only: sum over graph outputs of the mean per-sample metric */
    char *error;     /* FAILED: the message; UNPROBED: why */
    size_t *entries; /* internal: entry indices (edges first, then n_edges + weight index) */
};

struct qp_sens_result {
    size_t n_targets;
    struct qp_sens_target *targets; /* op types sorted by name; nodes in topological order */
    uint64_t n_samples, n_batches;  /* evaluated */
    size_t n_float_outputs;
    double reference_seconds; /* float reference runs over all samples (one pass) */
    double probe_seconds;     /* every probe over every sample */
    /* The same two as CPU time of the process (all threads): on a shared machine the wall times
     * follow the other jobs, the CPU times the work done (OpenMP spin-waiting counts in them). */
    double reference_cpu_seconds, probe_cpu_seconds;
    uint64_t nodes_executed;  /* node computations of the probes */
    size_t n_probe_workers;   /* workers the probes ran on */
    uint64_t nodes_full_pass; /* node computations of one full run (per batch) */
};

void qp_sens_result_free(struct qp_sens_result *r);
/* Frees the strings and arrays one target owns (not the target itself). */
void qp_sens_target_release(struct qp_sens_target *t);

/* Scores every target of `pl` on `model`.
 *   model:  borrowed; its top-level graph must be topologically sorted;
 *   pl:     borrowed; validated against that graph (qp_placement_validate);
 *   prov:   borrowed; reset first; every batch is one evaluation step;
 *   ranges: borrowed; the calibrated amax of every activation tensor of `pl` (a missing one
 *           makes the targets reading it FAILED).
 * Returns QP_ERR_USAGE (bad options), QP_ERR_BAD_INPUT (data the model cannot take, no batches,
 * no float graph output), QP_ERR_NOMEM and the engine's statuses for the reference runs. Probe
 * failures are not errors: they are recorded on their target. */
enum qp_status qp_sens_score(const struct qp_model *model, const struct qp_placement *pl,
                             struct qp_provider *prov, const struct qp_ranges *ranges,
                             const struct qp_sens_options *o, struct qp_sens_result **out,
                             struct qp_error *err);

/* One calibration of the full placement, shared by every probe: the ranges of the activation
 * tensors of `pl` that the engine computes as float32 (graph inputs included), from every batch
 * of `prov` (reset first) with `method` (`percentile`: the percentile method's, in (0, 100];
 * 0: its default 99.999; `qtype`: the type the mse method fits the range to). Edges on other
 * tensors (integer tensors, tensors the engine folds at plan time) get no range, so the targets
 * reading them fail with a message instead of the whole analysis. *n_samples_out (may be NULL)
 * receives the samples seen. Statuses of qp_collector_create / _run / _finish. */
enum qp_status qp_sens_calibrate(const struct qp_model *model, const struct qp_placement *pl,
                                 struct qp_provider *prov, enum qp_calib_method method,
                                 double percentile, enum qp_dtype qtype, int n_threads,
                                 struct qp_ranges **out, uint64_t *n_samples_out,
                                 struct qp_error *err);

/* ---- op types scope (ModelOpt's --op_types_scope) ------------------------------------------ */

/* Checks every name of scope[0..n): an op type of a live node of `g` or an ONNX operator
 * (ir/optraits.h); else QP_ERR_USAGE naming it, with the closest spelling when it looks like a
 * misspelling ("conv": did you mean 'Conv'?). */
enum qp_status qp_sens_scope_check(const struct qp_graph *g, const char *const *scope, size_t n,
                                   struct qp_error *err);

/* The probe-only entries of a scope: for every scoped op type that `pl` (validated on g) holds
 * no entry for and `g` has nodes of, the entries the int8 trt policy places on a quantizable op
 * (qp_policy_trt with op_types_to_quantize = those types: ORT's input slots of the op, float
 * activation inputs as edges, float constants as per-tensor weights, on every node of the type
 * outside shape computation), as a new validated placement in *out; NULL when there are none.
 * They are scored apart from `pl` (their own calibration and qp_sens_score), so that the probes
 * of `pl` stay what they are without the scope. Re-sorts g->topo. QP_ERR_NOMEM and the policy's
 * statuses. */
enum qp_status qp_sens_scope_placement(struct qp_graph *g, const struct qp_placement *pl,
                                       const char *const *scope, size_t n,
                                       struct qp_placement **out, struct qp_error *err);

/* Moves the targets of `extra` (scored on a qp_sens_scope_placement) that quantize something
 * into `r` (scored on the placement), as scope-only targets (entries dropped, counted in
 * n_scope_edges / _weights), replacing r's unprobed target of the same op type and keeping r's
 * order (op types by name, nodes topologically on g); timings are added. `extra` keeps what was
 * not moved (free it as usual). QP_ERR_NOMEM (r unchanged). */
enum qp_status qp_sens_scope_merge(struct qp_sens_result *r, struct qp_sens_result *extra,
                                   const struct qp_graph *g, enum qp_sens_granularity gr,
                                   struct qp_error *err);

/* qp_sens_score of `pl`, then (extra not NULL) of `extra` (qp_sens_scope_placement of pl) on
 * the same data and ranges, merged with qp_sens_scope_merge; o->progress counts the probes of
 * both. The statuses of both. */
enum qp_status qp_sens_score_scoped(const struct qp_model *model, const struct qp_placement *pl,
                                    const struct qp_placement *extra, struct qp_provider *prov,
                                    const struct qp_ranges *ranges, const struct qp_sens_options *o,
                                    struct qp_sens_result **out, struct qp_error *err);

/* Adds to `dst` every range of `src` for a tensor `dst` lacks. QP_ERR_NOMEM. */
enum qp_status qp_sens_ranges_add(struct qp_ranges *dst, const struct qp_ranges *src,
                                  struct qp_error *err);

/* ---- accuracy budget ------------------------------------------------------------------------ */

/* What an accuracy budget asks of the whole quantized model; at least one bound is set. */
struct qp_sens_budget_goal {
    double max_drift; /* the options' metric, summed over outputs, at most this; < 0: no bound */
    /* Every float output holding class scores (rank >= 2, last dim >= 2): the fraction of its
     * rows (all positions before the last axis: per sample for a classifier, per time step for
     * a CTC head) whose argmax agrees with the float model's, at least this; <= 0: no bound. */
    double min_top1;
};

/* The whole quantized model after some exclusions. */
struct qp_sens_budget_step {
    int measured; /* 0: the search did not measure this step (the fields are 0) */
    double drift; /* the metric summed over outputs, mean over the samples */
    double top1;  /* the least top-1 agreement over class-score outputs; -1: none has them */
};

/* Groups of target indices, highest-ranked group first. */
struct qp_sens_groups {
    size_t n;
    const size_t *const *members; /* members[g][0 .. sizes[g]) */
    const size_t *sizes;
};

/* The fewest leading groups to exclude from the full placement for the whole quantized model
 * (every sample of `prov`) to meet `goal`: a galloping search over k, the groups excluded —
 * k = 0, 1, 2, 4, ... whole-model measurements until the goal holds, then bisection between the
 * last k that failed and the first that held — so about 2 log2(k) measurements instead of k + 1.
 * The k found holds and k - 1 fails; it is the least such k when excluding more of the ranking
 * never hurts (which the search assumes and does not check). *n_groups_out receives k (every
 * group when even that fails: *met_out 0, else 1); steps_out (may be NULL) has groups->n + 1
 * entries: the model after 0, 1, ... exclusions, `measured` set on those the search measured.
 * *placement_out (may be NULL) receives the full placement minus the excluded targets'
 * entries. QP_ERR_BAD_INPUT when min_top1 is set and no output holds class scores. */
enum qp_status qp_sens_budget(const struct qp_model *model, const struct qp_placement *pl,
                              struct qp_provider *prov, const struct qp_ranges *ranges,
                              const struct qp_sens_options *o, const struct qp_sens_result *r,
                              const struct qp_sens_groups *groups,
                              const struct qp_sens_budget_goal *goal, size_t *n_groups_out,
                              struct qp_sens_budget_step *steps_out, int *met_out,
                              struct qp_placement **placement_out, struct qp_error *err);

/* ---- whole-model drift of sub-placements --------------------------------------------------- */

/* The whole model under sub-placements of one placement `pl`, on every sample of a provider,
 * measured as the accuracy budget measures a step (qp_sens_budget: the options' metric, mean per
 * sample, summed over the float outputs; the least top-1 agreement of the class-score outputs).
 * One session holds an overlay per entry of `pl`, planned once; the float reference outputs of
 * every batch are computed once, at creation, and kept, so a measurement is one full quantized
 * run per batch. With `incremental` and a single batch (one sample, or every sample in one
 * batch), the first measurement's run stays as the session's reference (what the options'
 * cache_bytes holds of it), and later measurements recompute only the nodes downstream of the
 * entries that differ from the reference's (partial re-execution, qplace/session.h:
 * bit-identical to a full run); qp_sens_eval_rebase makes the next measurement a full run
 * again, whose run becomes the reference. For a search that
 * measures many placements drawn from one set of entries (autotune's schemes, which differ
 * from one another in one pattern's entries).
 *
 *     struct qp_sens_eval *ev = NULL;
 *     if (qp_sens_eval_create(model, every, prov, ranges, &o, &ev, &err) != QP_OK) ...
 *     // quantized[e]: entry e of `every` (edges first, then n_edges + weight index) is on
 *     struct qp_sens_budget_step s;
 *     if (qp_sens_eval_measure(ev, quantized, &s, &err) != QP_OK) ... s.drift ...
 *     qp_sens_eval_free(ev);
 */
struct qp_sens_eval;

/* `model`, `pl`, `prov` and `ranges` are borrowed for the evaluator's lifetime. QP_ERR_BAD_INPUT
 * (no batches, no float output), QP_ERR_USAGE (bad options), QP_ERR_NOMEM, the engine's. */
enum qp_status qp_sens_eval_create(const struct qp_model *model, const struct qp_placement *pl,
                                   struct qp_provider *prov, const struct qp_ranges *ranges,
                                   const struct qp_sens_options *o, struct qp_sens_eval **out,
                                   struct qp_error *err);
/* The model with the entries marked in `quantized` (one byte per entry of `pl`) quantized, into
 * *out (`measured` set). QP_ERR_BAD_INPUT naming the entry when a marked entry cannot be
 * overlaid (no calibrated range, a weight without float data). */
enum qp_status qp_sens_eval_measure(struct qp_sens_eval *ev, const unsigned char *quantized,
                                    struct qp_sens_budget_step *out, struct qp_error *err);
/* The next qp_sens_eval_measure runs in full and its run becomes the reference (incremental,
 * one batch; nothing otherwise). NULL-safe. */
void qp_sens_eval_rebase(struct qp_sens_eval *ev);
/* Samples a measurement covers (the rows of every batch's first input). */
uint64_t qp_sens_eval_n_samples(const struct qp_sens_eval *ev);
/* Node computations of every measurement so far (qp_session_nodes_executed summed). */
uint64_t qp_sens_eval_nodes_executed(const struct qp_sens_eval *ev);
void qp_sens_eval_free(struct qp_sens_eval *ev);

/* The placement `pl` minus the entries whose mask[e] is set (edges first, then n_edges + weight
 * index, as a target's entries), as a new placement in *out. QP_ERR_NOMEM. */
enum qp_status qp_sens_placement_minus(const struct qp_placement *pl, const unsigned char *mask,
                                       struct qp_placement **out, struct qp_error *err);

/* ---- picker (ModelOpt's suggest_exclusion, reference §9.3) ---------------------------------- */

enum qp_block_agg { QP_BLOCK_SUM = 0, QP_BLOCK_MAX, QP_BLOCK_MEAN };
/* "sum", "max", "mean"; -1 otherwise. */
int qp_block_agg_parse(const char *s);

/* Named groups of regexes (POSIX extended, matched at the start of the name like re.match). */
struct qp_sens_blocks {
    size_t n;
    char **names;
    size_t *n_patterns;
    regex_t **patterns;
};
/* JSON: {"group": ["regex", ...], ...} (an object; order kept; a string is one regex).
 * QP_ERR_BAD_INPUT naming `source` and the group for anything else or a regex that does not
 * compile. */
enum qp_status qp_sens_blocks_parse(const char *text, size_t len, const char *source,
                                    struct qp_sens_blocks **out, struct qp_error *err);
enum qp_status qp_sens_blocks_load(const char *path, struct qp_sens_blocks **out,
                                   struct qp_error *err);
void qp_sens_blocks_free(struct qp_sens_blocks *b);

struct qp_pick_options {
    int threshold_mode;                  /* 0: coverage mode, 1: threshold mode */
    double coverage;                     /* default 0.9 */
    double threshold;                    /* threshold mode: take scores strictly above */
    size_t max_nodes;                    /* 0: no cap (counts groups with blocks) */
    double min_score_floor;              /* default 0 */
    double near_tie_ratio;               /* default 0.99; <= 0 disables the warning */
    const struct qp_sens_blocks *blocks; /* NULL: each name its own group */
    enum qp_block_agg agg;
};
void qp_pick_options_default(struct qp_pick_options *o);

struct qp_pick_group {
    char *name;
    double score;
    size_t n_members;
    size_t *members; /* indices into the picker's input, highest score first */
};

struct qp_pick_result {
    size_t n_groups; /* every group, ranked (highest first, stable) */
    struct qp_pick_group *groups;
    size_t n_chosen_groups; /* groups[0 .. n_chosen_groups) were chosen */
    size_t n_excluded;
    size_t *excluded; /* indices into the input: the chosen groups' members, in group order */
    int near_tie;
    char warning[256]; /* the near-tie warning, or "" */
    /* summarize_exclusion (reference §9.4) */
    double coverage_pct, excluded_mass, total_mass;
    size_t num_previously_quantized, num_remaining_quantized;
};
void qp_pick_result_free(struct qp_pick_result *r);

/* Picks exclusions among names[0..n) with scores[0..n). QP_ERR_USAGE for a coverage outside
 * [0, 1], a non-finite threshold or an agg out of range; QP_ERR_NOMEM. */
enum qp_status qp_sens_pick(const char *const *names, const double *scores, size_t n,
                            const struct qp_pick_options *o, struct qp_pick_result **out,
                            struct qp_error *err);

/* Writes a regex matching exactly `name` ("^" + escaped name + "$") into buf; returns the length
 * needed (not counting the NUL), like snprintf. */
size_t qp_sens_name_regex(const char *name, char *buf, size_t cap);

#endif
