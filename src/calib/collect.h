/*
 * Calibration through the engine: a model, a data provider and a method in; calibrated ranges
 * (calib/ranges.h) out. Statistics are streamed: every batch runs through an engine session
 * whose observer feeds the chosen tensors to one qp_stats collector each (calib/stats.h), and
 * the batch is gone before the next one comes. Memory is the model, one batch of activations
 * (the session's arena) and the collectors (fixed by the histogram caps) — never proportional
 * to the number of samples.
 *
 *     struct qp_collect_options o;
 *     qp_collect_options_default(&o, QP_CALIB_ENTROPY);
 *     struct qp_ranges *r = NULL;
 *     struct qp_collect_report rep;
 *     if (qp_calibrate_model(model, provider, &o, &r, &rep, &err) != QP_OK) goto fail;
 *     qp_ranges_save_json(r, &meta, "model.ranges.json", &err);
 *
 * Which tensors: every float activation — a value that is not an initializer or a Constant's
 * output and that some node consumes (graph inputs included) — or, with o.placement, only the
 * tensors of the placement's activation edges. Tensors the engine evaluated ahead of time
 * (shape subgraphs) and non-float tensors are skipped; a placement tensor the engine never
 * computed as float is an error (calibration never drops an edge, DESIGN.md invariant 1).
 *
 * The session reports only the calibrated tensors (qp_session_set_observed), so the engine may
 * fuse across the others. Concat groups (o.group_concat: the inputs and output of each Concat,
 * joined transitively) share one range: for entropy and percentile the members' values of each
 * batch are pooled into one histogram (copies are kept until the run ends, then fed with
 * qp_stats_update_pooled) and the calibrator runs once on it; for max the members' ranges are
 * joined (qp_calib_group_share), which is the same. Then Softmax outputs are pinned to [0, 1] when
 * o.pin_softmax (ModelOpt's override). NaN/Inf values are counted per tensor, left out of the
 * ranges and reported through qp_log (a warning naming the tensor and the counts) and the
 * report; a tensor with no finite value at all is an error.
 *
 * With QP_CALIB_AUTO the collector keeps both histograms and copies of the first batches'
 * inputs (QP_AUTO_SAMPLES samples); qp_collector_finish computes every other method's range per
 * tensor and keeps, per tensor or Concat group, the one with the least error at the consumers'
 * outputs on those batches (calib/auto.h), entropy when none can be evaluated. The report
 * counts the tensors per method (n_auto, n_auto_fallback).
 *
 * For finer control (tests, sensitivity analysis) the collector underneath is public too:
 * qp_collector_create / _run / _bytes / _finish.
 */
#ifndef QP_CALIB_COLLECT_H
#define QP_CALIB_COLLECT_H

#include <stddef.h>
#include <stdint.h>

#include "calib/calibrator.h"
#include "calib/provider.h"
#include "calib/ranges.h"
#include "qplace/model.h"
#include "qplace/session.h"
#include "qplace/status.h"

struct qp_placement;

/* Graph inputs qp_calibrate_model feeds at most (a larger model is QP_ERR_UNSUPPORTED). */
#define QP_MAX_CALIB_INPUTS 64

/* Called after every batch with the samples done so far and the total (0 when unknown). */
typedef void (*qp_collect_progress_fn)(uint64_t samples_done, uint64_t samples_total, void *user);

struct qp_collect_options {
    struct qp_calib_options calib; /* method, bins, percentile */
    int pin_softmax;               /* default 1 */
    int group_concat;              /* default 1 */
    int n_threads;                 /* engine threads; 0: all cores */
    /* Only the activation tensors of this placement (borrowed; validated against the model's
     * top-level graph by the caller with qp_placement_validate). NULL: every float activation. */
    const struct qp_placement *placement;
    /* 1: a placement tensor the engine never hands over as a float tensor (a constant-folded
     * one, an integer one) gets no range instead of failing qp_collector_finish. Default 0. */
    int placement_float_only;
    /* 1: every tensor's statistics are read from its values. Default 0: the output of a Relu,
     * Identity, Reshape, Flatten, Squeeze, Unsqueeze or Transpose whose input is calibrated too
     * takes them from the input's when that is exact (qp_stats_update_derived); the results
     * are the same either way. */
    int values_only;
    qp_collect_progress_fn progress; /* may be NULL */
    void *progress_user;
};

void qp_collect_options_default(struct qp_collect_options *o, enum qp_calib_method m);

/* What a calibration run saw. */
struct qp_collect_report {
    uint64_t n_batches, n_samples; /* samples: rows along axis 0 of the first input */
    size_t n_tensors;              /* ranges produced */
    size_t n_nonfinite_tensors;    /* tensors in which NaN or Inf were seen */
    uint64_t n_nan, n_inf;         /* over every calibrated tensor */
    size_t n_pinned, n_grouped;    /* Softmax outputs pinned; tensors in shared Concat groups */
    size_t collector_bytes_max;    /* largest qp_collector_bytes seen after a batch */
    uint64_t n_derived;            /* tensor batches whose statistics came from their input's */
    /* auto: tensors per chosen method (indexed by enum qp_calib_method, before QP_CALIB_AUTO),
     * and how many of them took entropy because no consumer could be evaluated */
    size_t n_auto[QP_CALIB_AUTO];
    size_t n_auto_fallback;
};

/* ---- the collector ------------------------------------------------------------------------- */

struct qp_collector;

/* A collector for `model` (borrowed for the collector's lifetime; its top-level graph must be
 * topologically sorted, as a loaded model is). Creates the engine session; `shapes` (n_shapes,
 * borrowed for the call) fix input shapes as in qp_session_create. QP_ERR_USAGE for bad options,
 * plus every status of qp_session_create and qp_stats_create. */
enum qp_status qp_collector_create(const struct qp_model *model, const struct qp_collect_options *o,
                                   size_t n_shapes, const struct qp_shape *shapes,
                                   struct qp_collector **out, struct qp_error *err);
/* NULL-safe. */
void qp_collector_free(struct qp_collector *c);
/* The session's inputs, for building batches. */
const struct qp_session *qp_collector_session(const struct qp_collector *c);

/* Runs one batch (n arrays in the session's input order, borrowed for the call) and feeds the
 * chosen tensors' values to their statistics. Statuses of qp_session_run (a shape the model
 * cannot take is QP_ERR_BAD_INPUT naming it), QP_ERR_NOMEM. */
enum qp_status qp_collector_run(struct qp_collector *c, size_t n, const struct qp_array *inputs,
                                struct qp_error *err);

/* Heap bytes held by the statistics (collectors and the collector's own tables), without the
 * engine session: constant from batch to batch once the histograms stop growing, and bounded
 * by the histogram caps in any case. */
size_t qp_collector_bytes(const struct qp_collector *c);

/* Turns the statistics into ranges (grouping and pinning as the options say). `report` may be
 * NULL; its batch/sample counts are those of qp_collector_run calls. QP_ERR_BAD_INPUT for a
 * tensor with no finite value or a placement tensor never computed; QP_ERR_NOMEM. */
enum qp_status qp_collector_finish(struct qp_collector *c, struct qp_ranges **out,
                                   struct qp_collect_report *report, struct qp_error *err);

/* After qp_collector_finish with QP_CALIB_AUTO: the method auto chose for `tensor` (an enum
 * qp_calib_method before QP_CALIB_AUTO, counted in the report's n_auto), with *fallback (may be
 * NULL) 1 when that is entropy because no consumer could be evaluated; -1 when the tensor got no
 * evaluated range (not calibrated, a pinned Softmax output) or the method is not auto. */
int qp_collector_auto_choice(const struct qp_collector *c, const char *tensor, int *fallback);

/* Concat groups (o.group_concat joins the inputs and output of each Concat, transitively):
 * marks (mark[v] per value of g, a sorted graph) every value joined to a marked one, so that a
 * caller calibrating a subset of tensors calibrates whole groups (quantize after equalization). */
struct qp_graph;
void qp_collect_concat_close(const struct qp_graph *g, unsigned char *mark);

/* ---- all in one ---------------------------------------------------------------------------- */

/* Calibrates `model` on every batch of `provider` (both borrowed; the provider is reset first
 * and its inputs are matched to the model's by name — a model input the provider lacks, or a
 * provider input the model lacks, is QP_ERR_BAD_INPUT). The session is created with the first
 * batch's shapes. The provider is read one batch ahead on a thread of its own while the engine
 * runs a copy of the current batch (two batches of input in memory); it is never used by two
 * threads at once, and the thread has ended when this returns. Errors of the provider are
 * returned as they are. *out owns the ranges; `report` may be NULL. */
enum qp_status qp_calibrate_model(const struct qp_model *model, struct qp_provider *provider,
                                  const struct qp_collect_options *o, struct qp_ranges **out,
                                  struct qp_collect_report *report, struct qp_error *err);

#endif
