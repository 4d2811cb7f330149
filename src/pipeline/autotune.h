/*
 * The autotune search behind `qplace autotune` (docs/autotune.md, "The search"): Q/DQ placement
 * chosen by measured latency, pattern by pattern.
 *
 *   load -> opset 19 -> seed placement (the trt policy, or a Q/DQ baseline model's) -> regions and
 * patterns -> one calibration of every insertion point's tensor (the data given, else synthetic
 * data as quantize uses) -> for each pattern, largest total node count first: schemes (the pattern
 *   cache's first, then generated ones), each applied to every instance of the pattern over the
 *   current best placement (with node_filter_list: every instance that has a matching node;
 *   patterns without one are not searched), written with those ranges and raced against the
 *   current best (autotune/compare.h); adopted only on a FASTER verdict; a pattern whose current
 *   scheme is the pattern cache's best stops after cache_patience lost races -> the guard: the best
 *   model raced against the model without Q/DQ at the same high precision, kept only when at
 *   least guard_min_effect faster -> output_dir: placement.json, optimized_final.onnx, log.jsonl,
 *   pattern_cache.json, pareto.json. Every placement also gets its output drift (before its
 *   race; autotune_drift.h), and schemes over max_output_drift are rejected unraced.
 *
 * Internal header (no public qplace/autotune.h yet).
 *
 *     struct qp_autotune_options o;
 *     qp_autotune_options_default(&o);
 *     o.onnx_path = "model.onnx"; o.output_dir = "autotune_out";
 *     struct qp_autotune_report *r = NULL;
 *     if (qp_autotune(&o, &r, &err) != QP_OK) ...
 *     ... r->seed_median_ms, r->best_median_ms, r->n_adopted, r->guard_passed ...
 *     qp_autotune_report_free(r);
 */
#ifndef QP_PIPELINE_AUTOTUNE_H
#define QP_PIPELINE_AUTOTUNE_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "autotune/compare.h"
#include "autotune/latency.h"
#include "pipeline/autotune_drift.h"
#include "placement/placement.h"
#include "qplace/calib.h"
#include "qplace/dtype.h"
#include "qplace/status.h"

enum qp_autotune_mode {
    QP_AUTOTUNE_QUICK = 0, /* 8 schemes per pattern */
    QP_AUTOTUNE_DEFAULT,   /* 16 */
    QP_AUTOTUNE_EXTENSIVE, /* 32 */
    QP_AUTOTUNE_MODE_COUNT
};

/* "quick", "default", "extensive"; -1 for anything else. */
int qp_autotune_mode_parse(const char *s);
/* The schemes per pattern of a mode. */
size_t qp_autotune_mode_schemes(enum qp_autotune_mode m);

/* How a scheme is timed (docs/autotune.md "Region-local timing"). */
enum qp_autotune_timing {
    QP_AUTOTUNE_TIMING_AUTO = 0, /* WHOLE on every backend (region timing is opt-in) */
    QP_AUTOTUNE_TIMING_WHOLE,    /* the whole model with the candidate against the whole best */
    /* the pattern's sub-model (autotune/subgraph.h), both ways, holding one instance of each
     * shape (qp_subgraph_representatives); a FASTER verdict on a sub-model that leaves some
     * instances out is confirmed by a whole-model race before it is adopted */
    QP_AUTOTUNE_TIMING_REGION,
    QP_AUTOTUNE_TIMING_REGION_ALL, /* REGION with every instance in the sub-model */
    QP_AUTOTUNE_TIMING_COUNT
};

/* "auto", "whole", "region", "region_all"; -1 for anything else. */
int qp_autotune_timing_parse(const char *s);

/* One measured scheme, for progress callbacks. */
struct qp_autotune_step {
    size_t pattern_k, n_patterns; /* 1-based position in the search order */
    size_t scheme_j, n_schemes;   /* 1-based among this pattern's schemes */
    double elapsed_s, eta_s;      /* eta: later patterns counted as min(max, 2^points) */
    double cand_median_ms, best_median_ms;
    enum qp_latency_verdict_kind verdict;
    int adopted;
    int replayed;       /* the race came from the state file, not measured */
    double drift;       /* the candidate's output drift (NaN: not measured) */
    int rejected_drift; /* over the drift bound: not raced (medians 0) */
    /* for verbose output and a progress bar */
    const char *signature;  /* the pattern's (borrowed for the callback) */
    const uint64_t *points; /* the candidate scheme: bit k = point k (autotune/scheme.h) */
    size_t n_points;
    double p_value;
    int from_cache;                   /* the scheme came from the pattern cache */
    size_t races_done, races_planned; /* schemes handled so far, and expected in all */
    /* what the medians time: 0 whole models, 1 the pattern's sub-models (region timing), 2
     * whole models again after a borderline sub-model race (region timing), 3 the pattern's
     * every-instance sub-model after a race of its representatives (region timing) */
    int timed;
};

typedef void (*qp_autotune_progress_fn)(const struct qp_autotune_step *s, void *user);

struct qp_autotune_options {
    const char *onnx_path;              /* required */
    const char *output_dir;             /* NULL: "autotune_out" */
    enum qp_autotune_mode mode;         /* default QP_AUTOTUNE_DEFAULT */
    size_t schemes_per_pattern;         /* 0: the mode's */
    const char *calibration_data_path;  /* NULL: synthetic data */
    const char *calibration_shapes;     /* "NAME:1x3x224x224,..." or NULL */
    const struct qp_data_options *data; /* image flags, caps (borrowed); NULL: defaults */
    const char *pattern_cache_in;       /* NULL: none */
    /* A Q/DQ model of the same graph (node names) whose placement seeds the search instead of
     * the trt policy's: every slot it feeds through a DequantizeLinear. NULL: the trt policy. */
    const char *qdq_baseline;
    enum qp_dtype high_precision;  /* QP_DTYPE_FLOAT (default) or QP_DTYPE_FLOAT16 */
    enum qp_quant_mode quant_mode; /* QP_QUANT_INT8 (default) or QP_QUANT_FP8 (E4M3FN) */
    int n_threads;                 /* calibration threads; 0: all cores */
    /* The latency backend (borrowed for the call; the caller creates it). Required. */
    struct qp_latency_backend *backend;
    /* Per scheme: compare.h's defaults with stop_without_gain, early_reject and replicate on
     * (the region check and the guard race without replicate). */
    struct qp_latency_race_options race;
    double guard_min_effect; /* default 0.02: at least 1.02x faster */
    /* Resume (docs/autotune.md): every race is recorded in this file as it ends; a run that
     * finds the file replays its races instead of measuring them again, as long as the search
     * asks for the same (pattern, scheme) at the same step. NULL: output_dir's
     * autotune_state.json. */
    const char *state_file;
    /* Polled before each race (may be NULL): when it reads non-zero the search stops, the state
     * kept, no final file written, and the report says interrupted. */
    const volatile sig_atomic_t *stop;
    qp_autotune_progress_fn progress; /* may be NULL */
    void *progress_user;
    /* A --node_filter_list file (pipeline/autotune_filter.h): only regions with a node matching
     * one of its fnmatch patterns are searched. NULL: every region. */
    const char *node_filter_list;
    /* Pattern cache early stop (docs/autotune.md, "Pattern cache"): a pattern whose current
     * scheme is the cache entry's best stops after this many further races in a row lost.
     * Default 2; 0: never stop early. */
    size_t cache_patience;
    /* Accuracy (docs/autotune.md, "Accuracy"): the whole-model output drift of the seed and of
     * every scheme, before it is raced (pipeline/autotune_drift.h: kl_div, sensitivity's
     * budget metric), on eval_data_path, else the calibration data, else synthetic data with
     * seed 2; the first drift_samples samples (0: all). A scheme whose drift exceeds the bound
     * max(max_output_drift, the seed's drift) is not raced nor adopted. */
    double max_output_drift;    /* < 0 (default): no bound; drift is measured all the same */
    const char *eval_data_path; /* NULL: as above */
    size_t drift_samples;       /* default QP_AUTOTUNE_DRIFT_SAMPLES */
    /* The calibration data as a provider (borrowed; reset before use), instead of
     * calibration_data_path: a library caller's arrays (qplace/autotune.h). NULL: the path. */
    struct qp_provider *calibration_provider;
    /* Region-local timing: each pattern's races time its sub-model (its instances and their
     * one-step neighbours, cut out with the same calibrated ranges) instead of the whole model,
     * with the minimum effect scaled by whole / sub-model latency so that a scheme is adopted
     * for the same whole-model gain; after the search the whole best is checked against the
     * whole seed. The guard stays whole-model. Default AUTO (= WHOLE). */
    enum qp_autotune_timing timing;
};

void qp_autotune_options_default(struct qp_autotune_options *o);

struct qp_autotune_report {
    char *output_dir;
    size_t n_regions, n_patterns, n_points;
    size_t n_measured, n_adopted, n_skipped; /* skipped: equal to the best, or not writable */
    size_t n_replayed;                       /* of n_measured, races taken from the state file */
    int interrupted;                         /* stopped by `stop`: no final files */
    double seed_median_ms, best_median_ms;   /* from the races (0 when nothing was measured) */
    double reference_median_ms;              /* the model without Q/DQ, in the guard race */
    struct qp_latency_verdict guard;         /* best (a) against the reference (b) */
    int guard_passed;                        /* 1: optimized_final.onnx holds the Q/DQ model */
    struct qp_placement *best;               /* the search's best placement; owned */
    struct qp_placement *seed;               /* the trt policy's or --qdq_baseline's; owned */
    double seconds;
    const char *calibration_source; /* "synthetic" or the data's kind (static) */
    size_t n_regions_filtered;      /* regions left to the seed by node_filter_list */
    size_t n_cache_stops;           /* patterns stopped early on the pattern cache's best */
    /* Accuracy: drift of the seed, of the search's best and of what optimized_final.onnx holds
     * (0 when the guard kept the model without Q/DQ), schemes rejected by the bound. */
    double max_output_drift, drift_bound; /* as asked, and max(it, seed_drift); < 0: none */
    double seed_drift, best_drift, final_drift;
    int seed_over_bound; /* the seed's drift exceeds max_output_drift */
    size_t n_rejected_drift;
    size_t n_drift_measured, n_drift_replayed; /* scheme drifts measured / from the state */
    const char *drift_source, *drift_path;     /* autotune_drift.h; borrowed */
    uint64_t drift_samples;
    double drift_seconds;               /* opening the evaluator and every measurement */
    size_t n_frontier;                  /* pareto.json's frontier, fastest first */
    struct qp_autotune_front *frontier; /* owned */
    int timing_region;                  /* 1: the races timed sub-models (seed_median_ms is then
                                           the whole seed's, best_median_ms the guard race's) */
    double search_seconds;              /* the pattern loop: from before the first race (and, with
                                           region timing, the capture) to after the last */
    /* Region timing with adoptions: the whole best raced against the whole seed once after the
     * search (region_check, its medians best / seed); region_reverted when the best was slower
     * as a whole model, so the seed's placement was kept instead. */
    int region_checked, region_reverted;
    struct qp_latency_verdict region_check;
    double region_best_ms, region_seed_ms;
    /* Region timing: sub-model races that ended near the minimum effect without adopting
     * (faster by at least half of it), raced again as whole models, and how many of those the
     * whole-model race adopted (docs/autotune.md "Borderline schemes"). */
    size_t n_escalated, n_escalated_adopted;
    /* Region timing with representatives: races on a pattern's every-instance sub-model after
     * a FASTER or borderline race of its representatives, and how many of those adopted
     * (docs/autotune.md "Representative instances"). */
    size_t n_confirmed, n_confirmed_adopted;
    /* Races that ended FASTER but not again on fresh sessions (compare.h `replicate`; their
     * stop is not_replicated), so their schemes were not adopted. */
    size_t n_not_replicated;
};

void qp_autotune_report_free(struct qp_autotune_report *r);

/* Runs the search. Nothing is written before the model loads, its placement is made and the
 * options are checked; output_dir is created when missing. *report_out (may be NULL) receives a
 * report to free. Returns QP_ERR_USAGE (no onnx_path or backend, bad options), QP_ERR_BAD_INPUT
 * (an unreadable or already quantized model, bad calibration data, a bad pattern cache),
 * QP_ERR_IO, QP_ERR_NOMEM, and the backend's statuses. */
enum qp_status qp_autotune(const struct qp_autotune_options *o,
                           struct qp_autotune_report **report_out, struct qp_error *err);

#endif
