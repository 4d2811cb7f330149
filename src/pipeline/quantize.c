/* The quantization pipeline (quantize.h). */
#include "pipeline/quantize.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "adjust/adaround.h"
#include "adjust/bias_correct.h"
#include "adjust/equalize.h"
#include "calib/collect.h"
#include "calib/data.h"
#include "calib/provider.h"
#include "calib/provider_npz.h"
#include "calib/ranges.h"
#include "core/clock.h"
#include "core/file.h"
#include "ir/ir.h"
#include "ir/opset_convert.h"
#include "pipeline/drift.h"
#include "pipeline/sensitivity.h"
#include "qplace/model.h"
#include "qplace/session.h"

#define QP_QUANTIZE_MAX_INPUTS 64

void qp_quantize_options_default(struct qp_quantize_options *o) {
    memset(o, 0, sizeof *o);
    o->mode = QP_QUANT_INT8;
    o->method = QP_CALIB_ENTROPY;
    o->high_precision = QP_DTYPE_FLOAT;
    o->weight_clipping = QP_WEIGHT_CLIP_MSE;
    o->max_output_drift = -1;
    o->smoothquant_alpha = 0.5;
}

/* n drift entries (NULL-safe) and their names. */
static void drifts_free(struct qp_quantize_drift *d, size_t n) {
    for (size_t i = 0; d && i < n; i++)
        free(d[i].name);
    free(d);
}

void qp_quantize_report_free(struct qp_quantize_report *r) {
    if (!r) return;
    drifts_free(r->outputs, r->n_outputs);
    drifts_free(r->outputs_uncorrected, r->n_outputs);
    drifts_free(r->outputs_corrected, r->n_outputs);
    drifts_free(r->outputs_unclipped, r->n_outputs);
    drifts_free(r->outputs_unrounded, r->n_outputs);
    drifts_free(r->outputs_before, r->n_outputs_before);
    qp_equalize_report_free(r->equalize);
    free(r->output_path);
    free(r->placement_source);
    qp_placement_free(r->placement);
    qp_quantize_budget_release(&r->budget);
    free(r);
}

static enum qp_status nomem(struct qp_error *err) {
    return qp_error_set(err, QP_ERR_NOMEM, "quantize: out of memory");
}

/* 1 when `a` and `b` name the same existing file (or are the same string). */
static int same_file(const char *a, const char *b) {
    if (strcmp(a, b) == 0) return 1;
    struct stat sa, sb;
    if (stat(a, &sa) != 0 || stat(b, &sb) != 0) return 0;
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

static int amax_from_ranges(void *user, const char *tensor, float *amax_out) {
    const struct qp_range *r = qp_ranges_find(user, tensor);
    if (!r) return 0;
    *amax_out = r->amax;
    return 1;
}

/* Calibration or evaluation data through the one data module (calib/data.h): .npz/.npy,
 * shard folders, image folders, or synthetic data with `seed` when `path` is NULL. */
static enum qp_status make_provider(const struct qp_quantize_options *o, const char *path,
                                    const struct qp_npz_provider_input *in, size_t n, uint64_t seed,
                                    struct qp_provider **out, struct qp_error *err) {
    struct qp_data_options d;
    if (o->data)
        d = *o->data;
    else
        qp_data_options_default(&d);
    d.seed = seed;
    d.synthetic_batches = 1;
    return qp_provider_open(path, &d, in, n, out, err);
}

/* One range's auto choice (qp_collector_auto_choice): the method, or -1, and whether that is
 * entropy for want of an evaluated consumer. */
struct auto_choice {
    signed char method;
    unsigned char fallback;
};

/* What the steps after placement need: the float model (calibration and the drift reference),
 * the model that is written, its placement (validated against mq) and the data. */
struct qp_quantize_job {
    struct qp_model *mf, *mq;
    struct qp_placement *pl;
    struct qp_provider *cal, *ev; /* ev NULL: the drift on cal (in-sample); cal NULL: no data */
    const struct qp_ranges *file_ranges; /* borrowed; NULL: calibrate on every batch of cal */
    enum qp_calib_method method;
    double percentile; /* 0: the calibrator's default */
    enum qp_quant_mode mode;
    int dq_only;
    enum qp_dtype high_precision;
    int n_threads;
    int64_t opset_in; /* the model's opset before conversion */
    const char *const *keep_fp32_ops;
    size_t n_keep_fp32_ops;
    int direct_io_types;
    enum qp_weight_clipping weight_clipping;
    struct qp_sens_budget_goal goal; /* the accuracy budget; no bound set: none */
    unsigned equalization;
    double smoothquant_alpha;
    int bias_correction;
    enum qp_weight_rounding weight_rounding;
    double weight_rounding_seconds;
    /* 1: no drift measured and no variant written for it (the run without equalization: the
     * final drift pass measures its model, job->before_mq) */
    int no_drift;
    /* The run without equalization's written model and the float model as it was before
     * equalization (owned; NULL: none): the final drift pass measures them too. */
    struct qp_model *before_mq, *before_mf;
    /* keep_ranges (the run without equalization): its ranges and, per range (qp_ranges_at
     * order; NULL unless auto), auto's choice are handed back in kept_ranges / kept_choice
     * with the calibration's batch and sample counts. In the equalized run they are that run's,
     * and recalibrate (per value of mf; NULL: calibrate every tensor) marks the tensors whose
     * values the equalization changes (and their Concat groups): only those are calibrated
     * again, the others take the range the run without equalization measured on values that
     * differ from theirs by float rounding alone (qp_equalize_changed). */
    int keep_ranges;
    struct qp_ranges *kept_ranges;
    struct auto_choice *kept_choice;
    uint64_t kept_batches, kept_samples;
    unsigned char *recalibrate;
};

static void free_before(struct qp_quantize_job *job) {
    qp_model_free(job->before_mq);
    qp_model_free(job->before_mf);
    job->before_mq = job->before_mf = NULL;
    qp_ranges_free(job->kept_ranges);
    free(job->kept_choice);
    free(job->recalibrate);
    job->kept_ranges = NULL;
    job->kept_choice = NULL;
    job->recalibrate = NULL;
}

/* A requested output opset (0: none) qplace can write; `name` names it in the message. */
static enum qp_status check_opset(int64_t opset, const char *name, struct qp_error *err) {
    if (!opset || (opset >= 13 && opset <= QP_OPSET_CONVERT_MAX)) return QP_OK;
    return qp_error_set(err, QP_ERR_USAGE,
                        "quantize: %s %lld: qplace writes opsets 19..%d (per-channel "
                        "QuantizeLinear needs 13 at least; 13..18 are raised to 19)",
                        name, (long long)opset, QP_OPSET_CONVERT_MAX);
}

/* The opset mq is written at: max(model, 19, requested); a request below the model's opset or
 * below 19 is raised, with a warning. */
static int64_t output_opset(int64_t model, int64_t requested) {
    int64_t target = model < 19 ? 19 : model;
    if (requested && requested < 19)
        qp_log(QP_LOG_WARN,
               "quantize: --opset %lld is below 19, the lowest opset of qplace's int8/fp8 Q/DQ "
               "(as ModelOpt's); writing opset %lld",
               (long long)requested, (long long)target);
    else if (requested && requested < model)
        qp_log(QP_LOG_WARN,
               "quantize: --opset %lld is below the model's opset %lld, which is kept (opsets "
               "are never lowered, as in ModelOpt)",
               (long long)requested, (long long)model);
    else if (requested)
        target = requested;
    return target;
}

/* Refuses a model already holding Q/DQ, then brings mf to opset >= 19 and mq to the output opset
 * (output_opset) and sorts mq. `label` names the model in messages. */
static enum qp_status prepare_models(struct qp_model *mf, struct qp_model *mq, const char *label,
                                     int64_t opset, int64_t *opset_in, struct qp_error *err) {
    if (qp_model_has_qdq(mf))
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "quantize: '%s' already holds QuantizeLinear/DequantizeLinear nodes "
                            "(already quantized); give the float model",
                            label);
    enum qp_status st = QP_OK;
    if (qp_model_opset(mf, "") < 19 && (st = qp_model_convert_opset(mf, 19, err)) != QP_OK) {
        qp_error_prefix(err, "quantize: '%s'", label);
        return st;
    }
    *opset_in = qp_model_opset(mq, "");
    int64_t target = output_opset(*opset_in, opset);
    if (target > *opset_in && (st = qp_model_convert_opset(mq, target, err)) != QP_OK) {
        if (target != 19) qp_error_prefix(err, "quantize: --opset %lld", (long long)target);
        return st;
    }
    return qp_graph_toposort(mq->graph, err);
}

/* The placement of `qplace quantize`: --placement_in, or the trt policy with lists and rules. */
static enum qp_status place_from_options(const struct qp_quantize_options *o, struct qp_graph *g,
                                         struct qp_quantize_report *r, struct qp_placement **out,
                                         struct qp_error *err) {
    enum qp_status st = QP_OK;
    if (o->placement_in) {
        if ((st = qp_placement_load_file(o->placement_in, out, err)) != QP_OK) return st;
        size_t n = strlen(o->placement_in) + 32;
        if (!(r->placement_source = malloc(n))) return nomem(err);
        snprintf(r->placement_source, n, "placement file %s", o->placement_in);
        return QP_OK;
    }
    if (o->placement) {
        if ((st = qp_placement_copy(o->placement, out, err)) != QP_OK) return st;
        r->placement_source = strdup(o->placement_label ? o->placement_label : "placement");
        return r->placement_source ? QP_OK : nomem(err);
    }
    if (!(*out = qp_placement_create())) return nomem(err);
    struct qp_policy_options po = {
        .mode = o->mode, .disable_mha_qdq = o->disable_mha_qdq, .select = o->select};
    if ((st = qp_policy_trt_place(g, &po, o->rules_path, *out, err)) != QP_OK) return st;
    r->placement_source = strdup(o->rules_path ? "trt policy + rules" : "trt policy");
    return r->placement_source ? QP_OK : nomem(err);
}

/* map[i] = the provider input that input i of session `s` reads (identity for data opened for
 * the model; a callback provider may name its inputs in another order). */
static enum qp_status input_map(struct qp_provider *p, const struct qp_session *s, size_t *map,
                                struct qp_error *err) {
    if (qp_session_n_inputs(s) > QP_QUANTIZE_MAX_INPUTS)
        return qp_error_set(err, QP_ERR_UNSUPPORTED, "quantize: more than %d model inputs",
                            QP_QUANTIZE_MAX_INPUTS);
    return qp_provider_map_inputs(p, s, "quantize", map, err);
}

static void feed_of(const struct qp_array *batch, const size_t *map, size_t n,
                    struct qp_array *feed) {
    for (size_t i = 0; i < n; i++)
        feed[i] = batch[map[i]];
}

static uint64_t batch_rows(const struct qp_array *batch, size_t n) {
    return n && batch[0].rank > 0 ? (uint64_t)batch[0].dims[0] : 1;
}

/* Auto's choice for every range of `ranges`, from the collector that made them, into *out. */
static enum qp_status record_choices(const struct qp_collector *col, const struct qp_ranges *ranges,
                                     struct auto_choice **out, struct qp_error *err) {
    size_t n = qp_ranges_count(ranges);
    struct auto_choice *c = calloc(n ? n : 1, sizeof *c);
    if (!c) return nomem(err);
    for (size_t i = 0; i < n; i++) {
        int fb = 0;
        c[i].method =
            (signed char)qp_collector_auto_choice(col, qp_ranges_at(ranges, i)->tensor, &fb);
        c[i].fallback = (unsigned char)fb;
    }
    *out = c;
    return QP_OK;
}

/* Calibrates the tensors of placement `pl` on every batch of job->cal into *ranges_out, with
 * auto's choice per range into *choice_out when choice_out is not NULL (*choice_out NULL unless
 * the method is auto). */
static enum qp_status calibrate_placement(const struct qp_quantize_job *job,
                                          const struct qp_placement *pl,
                                          struct qp_quantize_report *r,
                                          struct qp_ranges **ranges_out,
                                          struct auto_choice **choice_out, struct qp_error *err) {
    struct qp_collect_options co;
    qp_collect_options_default(&co, job->method);
    if (job->percentile > 0) co.calib.percentile = job->percentile;
    co.calib.qtype = job->mode == QP_QUANT_FP8 ? QP_DTYPE_FLOAT8E4M3FN : QP_DTYPE_INT8;
    co.placement = pl;
    co.n_threads = job->n_threads;
    size_t n_in = qp_provider_n_inputs(job->cal), map[QP_QUANTIZE_MAX_INPUTS];
    struct qp_shape bshapes[QP_QUANTIZE_MAX_INPUTS];
    struct qp_array feed[QP_QUANTIZE_MAX_INPUTS];
    if (n_in > QP_QUANTIZE_MAX_INPUTS)
        return qp_error_set(err, QP_ERR_UNSUPPORTED, "quantize: more than %d data inputs",
                            QP_QUANTIZE_MAX_INPUTS);
    struct qp_collector *col = NULL;
    const struct qp_array *batch = NULL;
    int end = 0;
    enum qp_status st = qp_provider_reset(job->cal, err);
    while (st == QP_OK) {
        if ((st = qp_provider_next(job->cal, &batch, &end, err)) != QP_OK || end) break;
        if (!col) {
            qp_provider_shapes(job->cal, batch, bshapes);
            if ((st = qp_collector_create(job->mf, &co, n_in, bshapes, &col, err)) != QP_OK ||
                (st = input_map(job->cal, qp_collector_session(col), map, err)) != QP_OK)
                break;
        }
        size_t ns = qp_session_n_inputs(qp_collector_session(col));
        feed_of(batch, map, ns, feed);
        if ((st = qp_collector_run(col, ns, feed, err)) != QP_OK) break;
        r->n_calib_batches++;
        r->n_calib_samples += batch_rows(batch, n_in);
    }
    if (st == QP_OK && !col)
        st = qp_error_set(err, QP_ERR_BAD_INPUT, "quantize: the calibration data has no batches");
    struct qp_collect_report rep;
    if (st == QP_OK && (st = qp_collector_finish(col, ranges_out, &rep, err)) == QP_OK) {
        memcpy(r->auto_methods, rep.n_auto, sizeof r->auto_methods);
        r->n_auto_fallback = rep.n_auto_fallback;
        if (choice_out && job->method == QP_CALIB_AUTO &&
            (st = record_choices(col, *ranges_out, choice_out, err)) != QP_OK) {
            qp_ranges_free(*ranges_out);
            *ranges_out = NULL;
        }
    }
    qp_collector_free(col);
    return st;
}

static int placement_has_tensor(const struct qp_placement *pl, const char *tensor);

/* 1 when the equalized run takes `tensor`'s range from the run without equalization. */
static int reusable(const struct qp_quantize_job *job, const char *tensor) {
    int v = qp_graph_find_value(job->mf->graph, tensor);
    return v >= 0 && !job->recalibrate[v] && qp_ranges_find(job->kept_ranges, tensor);
}

/* Adds to `to` range i of `from` (auto choices `fc`, aligned with it; NULL: none) unless `to`
 * has the tensor; with `r` (a reused range) counts it and its auto choice there. */
static enum qp_status add_range(struct qp_ranges *to, const struct qp_ranges *from,
                                const struct auto_choice *fc, size_t i,
                                struct qp_quantize_report *r, struct qp_error *err) {
    if (qp_ranges_find(to, qp_ranges_at(from, i)->tensor)) return QP_OK;
    if (r) {
        r->n_ranges_reused++;
        if (fc && fc[i].method >= 0) {
            r->auto_methods[fc[i].method]++;
            r->n_auto_fallback += fc[i].fallback;
        }
    }
    return qp_ranges_set(to, qp_ranges_at(from, i), err);
}

/* The equalized run's calibration (job->recalibrate): the placement's tensors the equalization
 * changed, or that the run without it has no range for, calibrated on every batch; the others'
 * ranges copied from that run, and with auto their choices counted (r->n_ranges_reused of
 * them). */
static enum qp_status calibrate_reusing(const struct qp_quantize_job *job,
                                        struct qp_quantize_report *r, struct qp_ranges **ranges_out,
                                        struct qp_error *err) {
    struct qp_placement *sub = qp_placement_create();
    struct qp_ranges *fresh = NULL, *all = qp_ranges_create();
    size_t n_fresh = 0;
    enum qp_status st = sub && all ? QP_OK : nomem(err);
    for (size_t i = 0; st == QP_OK && i < job->pl->n_edges; i++) {
        const struct qp_qedge *e = &job->pl->edges[i];
        if (!reusable(job, e->tensor))
            st = qp_placement_add_edge(sub, e->tensor, e->node, e->input, e->reason, err);
    }
    if (st == QP_OK && sub->n_edges) {
        st = calibrate_placement(job, sub, r, &fresh, NULL, err);
    } else if (st == QP_OK) { /* nothing changed: no pass at all */
        r->n_calib_batches = job->kept_batches;
        r->n_calib_samples = job->kept_samples;
    }
    n_fresh = fresh ? qp_ranges_count(fresh) : 0;
    for (size_t i = 0; st == QP_OK && i < n_fresh; i++)
        st = add_range(all, fresh, NULL, i, NULL, err);
    for (size_t i = 0; st == QP_OK && i < qp_ranges_count(job->kept_ranges); i++)
        if (reusable(job, qp_ranges_at(job->kept_ranges, i)->tensor) &&
            placement_has_tensor(job->pl, qp_ranges_at(job->kept_ranges, i)->tensor))
            st = add_range(all, job->kept_ranges, job->kept_choice, i, r, err);
    qp_placement_free(sub);
    qp_ranges_free(fresh);
    if (st != QP_OK) {
        qp_ranges_free(all);
        return st;
    }
    r->n_ranges_recalibrated = n_fresh;
    *ranges_out = all;
    return QP_OK;
}

/* Calibrates the placement's tensors (calibrate_placement; calibrate_reusing in the equalized
 * run, whose choices nobody keeps) into *ranges_out, and auto's choices into *choice_out when
 * it is not NULL (the run without equalization hands them on). */
static enum qp_status calibrate(const struct qp_quantize_job *job, struct qp_quantize_report *r,
                                struct qp_ranges **ranges_out, struct auto_choice **choice_out,
                                struct qp_error *err) {
    if (choice_out) *choice_out = NULL;
    if (job->recalibrate && job->kept_ranges) return calibrate_reusing(job, r, ranges_out, err);
    return calibrate_placement(job, job->pl, r, ranges_out, choice_out, err);
}

static void writer_options(const struct qp_quantize_job *job, const struct qp_ranges *ranges,
                           struct qp_writer_options *wo) {
    qp_writer_options_default(wo);
    wo->qtype = job->mode == QP_QUANT_FP8 ? QP_DTYPE_FLOAT8E4M3FN : QP_DTYPE_INT8;
    wo->dq_only = job->dq_only;
    wo->high_precision = job->high_precision;
    wo->amax = amax_from_ranges;
    wo->amax_user = (void *)ranges;
    wo->keep_fp32_ops = job->keep_fp32_ops;
    wo->n_keep_fp32_ops = job->n_keep_fp32_ops;
    wo->direct_io_types = job->direct_io_types;
    wo->weight_clip_mse = job->weight_clipping == QP_WEIGHT_CLIP_MSE;
    wo->n_threads = job->n_threads > 0 ? job->n_threads : omp_get_num_procs();
}

/* 1 when the precision step comes after the drift: the engine runs neither bfloat16 nor the
 * quantized graph inputs of direct_io_types. */
static int precision_after_drift(const struct qp_quantize_job *job) {
    return job->high_precision == QP_DTYPE_BFLOAT16 || job->direct_io_types;
}

/* Writes `m` (mq, or the uncorrected copy of bias correction) as mq is written. */
static enum qp_status write_model(const struct qp_quantize_job *job, struct qp_model *m,
                                  const struct qp_ranges *ranges, struct qp_writer_stats *stats,
                                  struct qp_error *err) {
    struct qp_writer_options wo;
    writer_options(job, ranges, &wo);
    if (precision_after_drift(job)) {
        wo.high_precision = QP_DTYPE_FLOAT;
        wo.direct_io_types = 0;
    }
    return qp_qdq_write(m, job->pl, &wo, stats, err);
}

/* The variants of mq written without one method each (NULL: that method did not run). */
struct variants {
    struct qp_model *uncorrected, *unclipped, *unrounded;
};

static void variants_free(struct variants *v) {
    qp_model_free(v->uncorrected);
    qp_model_free(v->unclipped);
    qp_model_free(v->unrounded);
}

/* Drift against mf over every batch of job->ev, else of job->cal (in-sample), before saving (so a
 * model the engine cannot run is an error), of mq into r->outputs and of the variants written
 * without bias correction, weight clipping and weight rounding into r->outputs_uncorrected,
 * r->outputs_unclipped and r->outputs_unrounded, on the same batches (drift.h). */
static enum qp_status measure_drift(const struct qp_quantize_job *job, const struct variants *v,
                                    struct qp_quantize_report *r, struct qp_error *err) {
    struct qp_drift_target t[QP_DRIFT_MAX_MODELS] = {{job->mq, &r->outputs}};
    size_t n = 1, n_out = 0;
    if (v->uncorrected) t[n++] = (struct qp_drift_target){v->uncorrected, &r->outputs_uncorrected};
    if (v->unclipped) t[n++] = (struct qp_drift_target){v->unclipped, &r->outputs_unclipped};
    if (v->unrounded) t[n++] = (struct qp_drift_target){v->unrounded, &r->outputs_unrounded};
    if (job->before_mq) t[n++] = (struct qp_drift_target){job->before_mq, &r->outputs_before};
    /* With equalization every model is compared with the float model as it was given. */
    const struct qp_model *mf = job->before_mf ? job->before_mf : job->mf;
    uint64_t samples = 0;
    enum qp_status st = qp_drift_measure(mf, t, n, job->ev ? job->ev : job->cal, job->n_threads,
                                         &n_out, &samples, err);
    r->n_outputs = n_out; /* the report's free walks every non-NULL array */
    if (job->before_mq) r->n_outputs_before = n_out;
    r->n_eval_samples += samples;
    return st;
}

/* The placement against the model that is written (its entries then carry graph indices). */
static enum qp_status validate_placement(const struct qp_quantize_job *job, const char *source,
                                         struct qp_error *err) {
    enum qp_status st = qp_placement_validate(job->pl, job->mq->graph, err);
    if (st != QP_OK) qp_error_prefix(err, "quantize: %s", source ? source : "the placement");
    return st;
}

/* The accuracy budget: job->pl becomes the placement minus the excluded nodes. Ranked on the
 * calibration data, decided on the evaluation data (either stands in for the other). */
static enum qp_status apply_budget(struct qp_quantize_job *job, const struct qp_ranges *ranges,
                                   struct qp_quantize_report *r, struct qp_error *err) {
    struct qp_provider *rank = job->cal ? job->cal : job->ev,
                       *decide = job->ev ? job->ev : job->cal;
    struct qp_placement *kept = NULL;
    enum qp_status st = qp_quantize_budget_run(job->mf, job->pl, rank, decide, ranges, job->mode,
                                               job->weight_clipping == QP_WEIGHT_CLIP_MSE,
                                               job->n_threads, &job->goal, &kept, &r->budget, err);
    if (st != QP_OK) return st;
    r->has_budget = 1;
    qp_placement_free(job->pl);
    job->pl = kept;
    return validate_placement(job, "the budget's placement", err);
}

/* A copy of mq as it stands, written as `job` writes (a variant job: without one method), into
 * *out: the model the drift of that method's absence is measured on. */
static enum qp_status write_copy(const struct qp_quantize_job *job, const struct qp_ranges *ranges,
                                 struct qp_model **out, struct qp_error *err) {
    struct qp_writer_stats ws;
    enum qp_status st = qp_model_clone(job->mq, out, err);
    return st == QP_OK ? write_model(job, *out, ranges, &ws, err) : st;
}

/* Before a method that measures on the calibration data (`what`, for the message): mq as it
 * stands written as mq will be into *before (for the drift without the method; not when the run
 * measures no drift) and the writer options of the final write into *wo. */
static enum qp_status before_method(const struct qp_quantize_job *job,
                                    const struct qp_ranges *ranges, const char *what,
                                    struct qp_model **before, struct qp_writer_options *wo,
                                    struct qp_error *err) {
    if (!job->cal)
        return qp_error_set(err, QP_ERR_USAGE,
                            "quantize: %s measures on calibration data; with ranges from a file, "
                            "give --calibration_data_path too",
                            what);
    writer_options(job, ranges, wo);
    return job->no_drift ? QP_OK : write_copy(job, ranges, before, err);
}

/* --bias_correction: the uncorrected model, written as mq will be, into *plain_out (for the
 * drift before and after), then mq's biases corrected on the calibration data and the
 * placement validated again on the edited graph. */
static enum qp_status correct_biases(const struct qp_quantize_job *job,
                                     const struct qp_ranges *ranges, struct qp_quantize_report *r,
                                     struct qp_model **plain_out, struct qp_error *err) {
    struct qp_writer_options wo;
    enum qp_status st = before_method(job, ranges, "bias correction", plain_out, &wo, err);
    if (st != QP_OK) return st;
    /* Two rounds and no verifying pass: each pass costs about three float passes of the
     * calibration data (the fake-quantized model and every layer's float twin), and the time
     * with bias correction is to stay within ~3x of the time without it. */
    struct qp_bias_correct_options bo = {.n_threads = job->n_threads, .writer = &wo};
    if ((st = qp_bias_correct(job->mq, job->pl, job->cal, &bo, &r->bias, err)) != QP_OK)
        return qp_error_prefix(err, "quantize");
    r->bias_correction = 1;
    return validate_placement(job, "bias correction", err);
}

/* --weight_clipping mse: mq as it stands (with any corrected biases) written with each weight
 * channel's absmax instead, into *out, for the drift before and after the clipping. */
static enum qp_status write_unclipped(const struct qp_quantize_job *job,
                                      const struct qp_ranges *ranges, struct qp_model **out,
                                      struct qp_error *err) {
    struct qp_quantize_job plain = *job;
    plain.weight_clipping = QP_WEIGHT_CLIP_ABSMAX;
    return write_copy(&plain, ranges, out, err);
}

/* --weight_rounding adaround: mq as it stands (nearest levels) written as mq will be, into
 * *out (for the drift before and after), then mq's weights put on the levels the layer-output
 * error chooses. */
static enum qp_status round_weights(const struct qp_quantize_job *job,
                                    const struct qp_ranges *ranges, struct qp_quantize_report *r,
                                    struct qp_model **out, struct qp_error *err) {
    struct qp_writer_options wo;
    enum qp_status st = before_method(job, ranges, "weight rounding", out, &wo, err);
    if (st != QP_OK) return st;
    struct qp_adaround_options ao = {
        .seconds = job->weight_rounding_seconds, .n_threads = job->n_threads, .writer = &wo};
    if ((st = qp_adaround(job->mq, job->pl, job->cal, &ao, &r->rounding, err)) != QP_OK)
        return qp_error_prefix(err, "quantize");
    r->weight_rounding = 1;
    return validate_placement(job, "weight rounding", err);
}

/* Whether bias correction runs: on always (correct_biases refuses to without data), auto with
 * calibration data of the user's. */
static int bias_correction_runs(const struct qp_quantize_job *job) {
    if (job->bias_correction == QP_BIAS_CORRECTION_AUTO)
        return job->cal && !qp_provider_is_synthetic(job->cal);
    return job->bias_correction == QP_BIAS_CORRECTION_ON;
}

/* The mean over outputs of the drift's cosine. */
static double mean_cosine(const struct qp_quantize_drift *d, size_t n) {
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += d[i].cosine;
    return n ? sum / (double)n : 0;
}

/* Bias correction auto, after the drift of the corrected model (r->outputs) and of the one
 * without (*plain, r->outputs_uncorrected) was measured: the corrected model stays unless its
 * mean cosine is not higher; then the model without the correction becomes job->mq (the
 * corrected one goes with *plain) and the drifts move with their models. The drift without
 * weight clipping was measured on the corrected model, so it no longer describes the one
 * written and is dropped. */
static void decide_bias(struct qp_quantize_job *job, struct qp_model **plain,
                        struct qp_quantize_report *r) {
    r->bias_auto = 1;
    r->bias_kept =
        mean_cosine(r->outputs, r->n_outputs) > mean_cosine(r->outputs_uncorrected, r->n_outputs);
    if (r->bias_kept) return;
    struct qp_model *corrected = job->mq;
    job->mq = *plain;
    *plain = corrected;
    r->outputs_corrected = r->outputs;
    r->outputs = r->outputs_uncorrected;
    r->outputs_uncorrected = NULL;
    drifts_free(r->outputs_unclipped, r->n_outputs);
    r->outputs_unclipped = NULL;
}

/* Logs (debug) the seconds since `t0` that step `what` took; returns the time now. */
static double step_time(const char *what, double t0) {
    double t = qp_clock_seconds();
    qp_log(QP_LOG_DEBUG, "quantize: %s took %.2f s", what, t - t0);
    return t;
}

/* Everything after placement and data: calibration on every batch (or the ranges from files),
 * the accuracy budget, bias correction, the writer and the drift. */
static enum qp_status quantize_job(struct qp_quantize_job *job, struct qp_quantize_report *r,
                                   struct qp_error *err) {
    enum qp_status st = QP_OK;
    r->calibration_source = job->cal ? qp_provider_source(job->cal) : "none";
    r->method = qp_calib_method_name(job->method);
    r->eval_on_calibration = !job->ev;
    r->calibrated = !job->file_ranges;
    struct qp_ranges *ranges = NULL;
    struct auto_choice *choice = NULL;
    struct variants v = {0};
    double t = qp_clock_seconds();
    if (r->calibrated) st = calibrate(job, r, &ranges, job->keep_ranges ? &choice : NULL, err);
    t = step_time("calibration", t);
    const struct qp_ranges *used = r->calibrated ? ranges : job->file_ranges;
    if (st == QP_OK && qp_sens_goal_set(&job->goal)) st = apply_budget(job, used, r, err);
    t = step_time("budget", t);
    if (st == QP_OK && job->weight_rounding == QP_WEIGHT_ROUND_ADAROUND)
        st = round_weights(job, used, r, &v.unrounded, err);
    t = step_time("weight rounding", t);
    if (st == QP_OK && bias_correction_runs(job))
        st = correct_biases(job, used, r, &v.uncorrected, err);
    t = step_time("bias correction", t);
    if (st == QP_OK && job->weight_clipping == QP_WEIGHT_CLIP_MSE && !job->no_drift)
        st = write_unclipped(job, used, &v.unclipped, err);
    if (st == QP_OK && (st = write_model(job, job->mq, used, &r->writer, err)) == QP_OK) {
        r->writer.opset_from = job->opset_in;
        t = step_time("writer", t);
        if (!job->no_drift) st = measure_drift(job, &v, r, err);
        step_time("drift", t);
    }
    free_before(job);
    if (st == QP_OK && r->bias_correction && job->bias_correction == QP_BIAS_CORRECTION_AUTO)
        decide_bias(job, &v.uncorrected, r);
    if (st == QP_OK && precision_after_drift(job)) {
        struct qp_writer_options wo;
        writer_options(job, ranges, &wo);
        r->drift_before_precision = 1;
        st = qp_qdq_write_precision(job->mq, &wo, &r->writer, err);
    }
    variants_free(&v);
    if (st == QP_OK && job->keep_ranges) { /* handed to the equalized run */
        job->kept_ranges = ranges;
        job->kept_choice = choice;
        job->kept_batches = r->n_calib_batches;
        job->kept_samples = r->n_calib_samples;
        ranges = NULL;
        choice = NULL;
    }
    qp_ranges_free(ranges);
    free(choice);
    return st;
}

/* Weight rounding usage checks shared by both entry points. */
static enum qp_status check_rounding(enum qp_weight_rounding w, double seconds,
                                     enum qp_quant_mode mode, struct qp_error *err) {
    if (w != QP_WEIGHT_ROUND_NEAREST && w != QP_WEIGHT_ROUND_ADAROUND)
        return qp_error_set(err, QP_ERR_USAGE,
                            "quantize: weight_rounding %d is not nearest (0) or adaround (1)",
                            (int)w);
    if (!(seconds >= 0) || !isfinite(seconds))
        return qp_error_set(err, QP_ERR_USAGE,
                            "quantize: weight rounding seconds %g is not >= 0 (0: the default)",
                            seconds);
    if (w == QP_WEIGHT_ROUND_ADAROUND && mode != QP_QUANT_INT8)
        return qp_error_set(err, QP_ERR_USAGE,
                            "quantize: weight rounding adaround chooses int8 levels; it cannot be "
                            "combined with --quantize_mode fp8");
    return QP_OK;
}

/* Sets job->pl, the placement of job->mq (the entry point's own way: options or config). */
typedef enum qp_status (*place_fn)(const void *user, struct qp_quantize_job *job,
                                   struct qp_quantize_report *r, struct qp_error *err);

/* Equalization usage checks shared by both entry points. */
static enum qp_status check_equalization(unsigned bits, double alpha, int ranges_given,
                                         struct qp_error *err) {
    if (bits & ~(unsigned)QP_EQUALIZE_ALL)
        return qp_error_set(err, QP_ERR_USAGE,
                            "quantize: equalization %u is not none (0), cle "
                            "(1), smoothquant (2) or all (3)",
                            bits);
    if (!(alpha >= 0.0 && alpha <= 1.0))
        return qp_error_set(err, QP_ERR_USAGE, "quantize: smoothquant_alpha %g is not in [0, 1]",
                            alpha);
    if (bits && ranges_given)
        return qp_error_set(err, QP_ERR_USAGE,
                            "quantize: equalization cannot be combined with ranges from a file "
                            "(they were measured on the model before equalization)");
    return QP_OK;
}

/* The equalized run calibrates again only what the plan changed (job->recalibrate, over mf as
 * rescaled) and takes the other ranges from the run without equalization (b's, moved here). */
static enum qp_status reuse_plain_ranges(struct qp_quantize_job *job, struct qp_quantize_job *b,
                                         const struct qp_equalize_plan *plan,
                                         struct qp_error *err) {
    const struct qp_graph *g = job->mf->graph;
    if (!(job->recalibrate = malloc(g->n_values ? g->n_values : 1))) return nomem(err);
    enum qp_status st = qp_equalize_changed(plan, g, job->recalibrate, err);
    if (st != QP_OK) return st;
    qp_collect_concat_close(g, job->recalibrate);
    job->kept_ranges = b->kept_ranges;
    job->kept_choice = b->kept_choice;
    job->kept_batches = b->kept_batches;
    job->kept_samples = b->kept_samples;
    b->kept_ranges = NULL;
    b->kept_choice = NULL;
    return QP_OK;
}

/* Equalization before placement (a weight copied for one pair is then what the placement
 * sees): first the plain quantization of the unequalized model (its own placement, calibration
 * and writer, on shallow clones; no budget, no bias correction), kept with the float model as
 * it was (job->before_mq, before_mf) for the "before" drift that the final drift pass measures,
 * then one plan on mf applied to both mf and mq, and the plain run's ranges handed on for the
 * tensors the plan leaves unchanged (reuse_plain_ranges). */
static enum qp_status equalize_models(struct qp_quantize_job *job, place_fn place,
                                      const void *place_user, struct qp_quantize_report *r,
                                      struct qp_error *err) {
    struct qp_quantize_job b = *job;
    b.mf = b.mq = NULL;
    b.pl = NULL;
    b.goal = (struct qp_sens_budget_goal){.max_drift = -1, .min_top1 = 0}; /* plain: no budget */
    b.bias_correction = 0;
    b.weight_rounding = QP_WEIGHT_ROUND_NEAREST; /* nor correction */
    b.no_drift = 1; /* measured with the others' (measure_drift: one float run per batch) */
    b.keep_ranges = 1;
    struct qp_quantize_report *r0 = calloc(1, sizeof *r0);
    struct qp_equalize_plan *plan = NULL;
    enum qp_status st = r0 ? QP_OK : nomem(err);
    r->equalization = job->equalization;
    r->smoothquant_alpha = job->smoothquant_alpha;
    double t = qp_clock_seconds();
    if (st == QP_OK && ((st = qp_graph_toposort(job->mf->graph, err)) != QP_OK ||
                        (st = qp_model_clone_shared(job->mf, &b.mf, err)) != QP_OK ||
                        (st = qp_model_clone_shared(job->mq, &b.mq, err)) != QP_OK ||
                        (st = qp_graph_toposort(b.mq->graph, err)) != QP_OK ||
                        (st = place(place_user, &b, r0, err)) != QP_OK ||
                        (st = validate_placement(&b, NULL, err)) != QP_OK ||
                        (st = quantize_job(&b, r0, err)) != QP_OK))
        qp_error_prefix(err, "quantize: the run without equalization");
    t = step_time("the run without equalization", t);
    if (st == QP_OK) {
        job->before_mq = b.mq;
        job->before_mf = b.mf;
        b.mq = b.mf = NULL;
        struct qp_equalize_options eo;
        qp_equalize_options_default(&eo);
        eo.methods = job->equalization;
        eo.alpha = job->smoothquant_alpha;
        eo.n_threads = job->n_threads;
        if ((st = qp_equalize_plan(job->mf, job->cal, &eo, &plan, &r->equalize, err)) == QP_OK &&
            (st = qp_equalize_apply(plan, job->mf, err)) == QP_OK &&
            (st = qp_equalize_apply(plan, job->mq, err)) == QP_OK)
            st = reuse_plain_ranges(job, &b, plan, err);
        step_time("equalization", t);
    }
    qp_equalize_plan_free(plan);
    qp_placement_free(b.pl);
    qp_model_free(b.mq);
    qp_model_free(b.mf);
    qp_ranges_free(b.kept_ranges);
    free(b.kept_choice);
    qp_quantize_report_free(r0);
    return st;
}

/* 1 when the placement has an activation edge on `tensor`. */
static int placement_has_tensor(const struct qp_placement *pl, const char *tensor) {
    for (size_t i = 0; i < pl->n_edges; i++)
        if (strcmp(pl->edges[i].tensor, tensor) == 0) return 1;
    return 0;
}

/* The ranges of `r` (from `path`) for tensors the placement does not quantize: one warning. */
static size_t warn_unused(const struct qp_ranges *r, const char *path,
                          const struct qp_placement *pl) {
    size_t n = 0, total = qp_ranges_count(r);
    const char *first = NULL;
    for (size_t i = 0; i < total; i++) {
        const char *t = qp_ranges_at(r, i)->tensor;
        if (placement_has_tensor(pl, t)) continue;
        if (!n++) first = t;
    }
    if (n)
        qp_log(QP_LOG_WARN,
               "quantize: %zu of the %zu ranges in %s are for tensors the placement does not "
               "quantize (the first: '%s'); they are not used",
               n, total, path, first);
    return n;
}

/* Every activation tensor of the placement has a range in `r`, which came from `source` (given
 * ranges: no calibration runs, so a missing one is an error naming the tensor). */
static enum qp_status check_ranges_cover(const struct qp_ranges *r, const char *source,
                                         const struct qp_placement *pl, struct qp_error *err) {
    for (size_t i = 0; i < pl->n_edges; i++)
        if (!qp_ranges_find(r, pl->edges[i].tensor))
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "quantize: activation tensor '%s' of the placement has no range in "
                                "%s (no calibration runs when ranges are given)",
                                pl->edges[i].tensor, source);
    return QP_OK;
}

/* --ranges_in and --calibration_cache_path as one table (the cache's entries over the JSON's),
 * covering every activation tensor of the placement. */
static enum qp_status load_file_ranges(const struct qp_quantize_options *o,
                                       const struct qp_placement *pl, struct qp_quantize_report *r,
                                       struct qp_ranges **out, struct qp_error *err) {
    struct qp_ranges *json = NULL, *cache = NULL;
    const char *cache_path = o->calibration_cache_path;
    enum qp_status st = QP_OK;
    if (o->ranges_in && (st = qp_ranges_load_json(o->ranges_in, &json, err)) != QP_OK) goto fail;
    if (cache_path && (st = qp_ranges_load_trt_cache(cache_path, &cache, err)) != QP_OK) goto fail;
    r->n_file_ranges = qp_ranges_count(json) + qp_ranges_count(cache);
    if (json) r->n_unused_ranges += warn_unused(json, o->ranges_in, pl);
    if (cache) r->n_unused_ranges += warn_unused(cache, cache_path, pl);
    for (size_t i = 0; json && i < qp_ranges_count(cache); i++)
        if ((st = qp_ranges_set(json, qp_ranges_at(cache, i), err)) != QP_OK) goto fail;
    struct qp_ranges *all = json ? json : cache;
    char source[1024];
    snprintf(source, sizeof source, "%s%s%s", o->ranges_in ? o->ranges_in : cache_path,
             o->ranges_in && cache_path ? " or " : "",
             o->ranges_in && cache_path ? cache_path : "");
    if ((st = check_ranges_cover(all, source, pl, err)) != QP_OK) goto fail;
    if (all == json) qp_ranges_free(cache);
    *out = all;
    return QP_OK;
fail:
    qp_ranges_free(json);
    qp_ranges_free(cache);
    return st;
}

/* Sets every dim named `param` in g's value types to `value`. */
static void fix_dim_param(struct qp_graph *g, const char *param, int64_t value) {
    for (size_t v = 0; v < g->n_values; v++) {
        struct qp_value *val = &g->values[v];
        for (int d = 0; val->kind == QP_VALUE_TENSOR && d < val->rank; d++)
            if (val->dims[d].value < 0 && val->dims[d].param &&
                strcmp(val->dims[d].param, param) == 0) {
                val->dims[d].value = value;
                val->dims[d].param = NULL;
            }
    }
}

/* --override_shapes on one copy of the model: the dynamic dims of the named inputs take the
 * given values (static dims must match). */
static enum qp_status override_shapes(struct qp_graph *g, const struct qp_calib_shapes *sh,
                                      struct qp_error *err) {
    for (size_t k = 0; k < sh->n; k++) {
        const struct qp_calib_shape *e = &sh->items[k];
        int v = qp_graph_find_value(g, e->name);
        struct qp_value *val = v >= 0 ? &g->values[v] : NULL;
        if (!val || !val->is_graph_input || val->initializer >= 0)
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "quantize: --override_shapes: '%s' is not an input of the model",
                                e->name);
        if (val->kind != QP_VALUE_TENSOR || val->rank != e->rank)
            return qp_error_set(
                err, QP_ERR_BAD_INPUT,
                "quantize: --override_shapes: input '%s' has rank %d in the model, %d given",
                e->name, val->kind == QP_VALUE_TENSOR ? val->rank : -1, e->rank);
        for (int d = 0; d < e->rank; d++)
            if (val->dims[d].value >= 0 && val->dims[d].value != e->dims[d])
                return qp_error_set(
                    err, QP_ERR_BAD_INPUT,
                    "quantize: --override_shapes: input '%s' dim %d is %lld in the model, "
                    "%lld given",
                    e->name, d, (long long)val->dims[d].value, (long long)e->dims[d]);
        for (int d = 0; d < e->rank; d++) {
            if (val->dims[d].value >= 0) continue;
            const char *param = val->dims[d].param;
            val->dims[d].value = e->dims[d];
            val->dims[d].param = NULL;
            if (param) fix_dim_param(g, param, e->dims[d]);
        }
    }
    return QP_OK;
}

/* Parses --override_shapes with the --calibration_shapes grammar (messages name the flag). */
static enum qp_status parse_override(const char *s, struct qp_calib_shapes *out,
                                     struct qp_error *err) {
    enum qp_status st = qp_calib_shapes_parse(s, out, err);
    static const char from[] = "--calibration_shapes:";
    if (st != QP_OK && err && strncmp(err->msg, from, sizeof from - 1) == 0) {
        char tail[sizeof err->msg];
        snprintf(tail, sizeof tail, "%s", err->msg + sizeof from - 1);
        qp_error_set(err, st, "--override_shapes:%s", tail);
    }
    return st;
}

/* Opens --calibration_data_path and --eval_data_path (or synthetic data) for `mf`'s inputs.
 * With ranges from files (`calibrate` 0) and no --calibration_data_path, *cal stays NULL. */
static enum qp_status open_data(const struct qp_quantize_options *o, const struct qp_graph *g,
                                const struct qp_calib_shapes *shapes, int calibrate,
                                struct qp_provider **cal, struct qp_provider **ev,
                                struct qp_error *err) {
    struct qp_npz_provider_input inputs[QP_QUANTIZE_MAX_INPUTS];
    size_t n = 0;
    enum qp_status st =
        qp_provider_graph_inputs(g, o->calibration_shapes ? shapes : NULL, "quantize", inputs,
                                 QP_QUANTIZE_MAX_INPUTS, &n, err);
    if (st == QP_OK && (calibrate || o->calibration_data_path))
        st = make_provider(o, o->calibration_data_path, inputs, n, 1, cal, err);
    if (st != QP_OK) return st;
    if (o->eval_data_path) return make_provider(o, o->eval_data_path, inputs, n, 2, ev, err);
    if (!o->calibration_data_path) return make_provider(o, NULL, inputs, n, 2, ev, err);
    return QP_OK;
}

/* Saves mq; --use_external_data_format puts tensors of 1 KiB and more into "<file name>_data"
 * beside it (ModelOpt's name). */
static enum qp_status save_output(const struct qp_quantize_options *o, const struct qp_model *mq,
                                  const char *path, struct qp_error *err) {
    if (!o->use_external_data_format) return qp_model_save_file(mq, path, NULL, err);
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t n = strlen(base) + 6;
    char *location = malloc(n);
    if (!location) return nomem(err);
    snprintf(location, n, "%s_data", base);
    struct qp_save_options so = {.external = QP_EXTERNAL_ALWAYS, .external_location = location};
    enum qp_status st = qp_model_save_file(mq, path, &so, err);
    free(location);
    return st;
}

/* Removes the model save_output wrote (and its external data file). */
static void remove_output(const struct qp_quantize_options *o, const char *path) {
    unlink(path);
    if (!o->use_external_data_format) return;
    size_t n = strlen(path) + 6;
    char *data = malloc(n);
    if (!data) return;
    snprintf(data, n, "%s_data", path);
    unlink(data);
    free(data);
}

static enum qp_status place_options_cb(const void *user, struct qp_quantize_job *job,
                                       struct qp_quantize_report *r, struct qp_error *err) {
    return place_from_options(user, job->mq->graph, r, &job->pl, err);
}

enum qp_status qp_quantize(const struct qp_quantize_options *o,
                           struct qp_quantize_report **report_out, struct qp_error *err) {
    if (!o || !o->onnx_path)
        return qp_error_set(err, QP_ERR_USAGE, "quantize: --onnx_path is required");
    enum qp_status st = QP_OK;
    struct qp_quantize_report *r = calloc(1, sizeof *r);
    struct qp_calib_shapes shapes = {0}, over = {0};
    struct qp_ranges *file_ranges = NULL;
    struct qp_quantize_job job = {
        .method = o->method,
        .percentile = o->percentile,
        .mode = o->mode,
        .dq_only = o->dq_only,
        .high_precision = o->high_precision,
        .n_threads = o->n_threads,
        .keep_fp32_ops = o->op_types_to_exclude_fp16,
        .n_keep_fp32_ops = o->n_op_types_to_exclude_fp16,
        .direct_io_types = o->direct_io_types,
        .weight_clipping = o->weight_clipping,
        .goal = {.max_drift = o->max_output_drift, .min_top1 = o->min_top1_agreement},
        .equalization = o->equalization,
        .smoothquant_alpha = o->smoothquant_alpha,
        .bias_correction = o->bias_correction,
        .weight_rounding = o->weight_rounding,
        .weight_rounding_seconds = o->weight_rounding_seconds};
    if (!r) return nomem(err);
    if ((st = check_opset(o->opset, "--opset", err)) != QP_OK) {
        free(r);
        return st;
    }
    r->output_path =
        o->output_path ? strdup(o->output_path) : qp_quant_default_output(o->onnx_path);
    if (!r->output_path) {
        st = nomem(err);
        goto done;
    }
    if ((st = qp_file_check_output(r->output_path, "quantize: --output_path", err)) != QP_OK ||
        (st = qp_file_check_output(o->placement_out, "quantize: --placement_out", err)) != QP_OK)
        goto done;
    if (same_file(o->onnx_path, r->output_path)) {
        st = qp_error_set(err, QP_ERR_BAD_INPUT,
                          "quantize: output path '%s' is the input model; choose another "
                          "--output_path",
                          r->output_path);
        goto done;
    }
    if (o->percentile != 0 && !(o->percentile > 0 && o->percentile <= 100)) {
        st = qp_error_set(err, QP_ERR_USAGE, "quantize: percentile %g is not in (0, 100]",
                          o->percentile);
        goto done;
    }
    if ((st = check_equalization(o->equalization, o->smoothquant_alpha,
                                 o->ranges_in || o->calibration_cache_path, err)) != QP_OK ||
        (st = check_rounding(o->weight_rounding, o->weight_rounding_seconds, o->mode, err)) !=
            QP_OK)
        goto done;
    if ((o->calibration_shapes &&
         (st = qp_calib_shapes_parse(o->calibration_shapes, &shapes, err)) != QP_OK) ||
        (o->override_shapes && (st = parse_override(o->override_shapes, &over, err)) != QP_OK))
        goto done;
    /* Two loads: `mf` stays float (calibration and the drift reference), `mq` is written. */
    if ((st = qp_model_load_file(o->onnx_path, NULL, &job.mf, err)) != QP_OK ||
        (st = qp_model_load_file(o->onnx_path, NULL, &job.mq, err)) != QP_OK ||
        (st = override_shapes(job.mf->graph, &over, err)) != QP_OK ||
        (st = override_shapes(job.mq->graph, &over, err)) != QP_OK ||
        (st = prepare_models(job.mf, job.mq, o->onnx_path, o->opset, &job.opset_in, err)) != QP_OK)
        goto done;
    if (o->equalization &&
        ((st = open_data(o, job.mf->graph, &shapes, 1, &job.cal, &job.ev, err)) != QP_OK ||
         (st = equalize_models(&job, place_options_cb, o, r, err)) != QP_OK))
        goto done;
    if ((st = place_from_options(o, job.mq->graph, r, &job.pl, err)) != QP_OK ||
        (st = validate_placement(&job, o->placement_in ? o->placement_in : o->placement_label,
                                 err)) != QP_OK)
        goto done;
    r->n_overridden = over.n;
    if ((o->ranges_in || o->calibration_cache_path) &&
        (st = load_file_ranges(o, job.pl, r, &file_ranges, err)) != QP_OK)
        goto done;
    job.file_ranges = file_ranges;
    if ((!o->equalization && (st = open_data(o, job.mf->graph, &shapes, !file_ranges, &job.cal,
                                             &job.ev, err)) != QP_OK) ||
        (st = quantize_job(&job, r, err)) != QP_OK)
        goto done;
    if ((st = save_output(o, job.mq, r->output_path, err)) != QP_OK) goto done;
    /* The placement last; when it cannot be written, the model just written goes too, so a
     * failed run leaves neither file behind. */
    if (o->placement_out && (st = qp_placement_save_file(job.pl, o->placement_out, err)) != QP_OK) {
        remove_output(o, r->output_path);
        goto done;
    }
    r->placement = job.pl;
    job.pl = NULL;
done:
    qp_provider_free(job.cal);
    qp_provider_free(job.ev);
    qp_calib_shapes_release(&shapes);
    qp_calib_shapes_release(&over);
    qp_ranges_free(file_ranges);
    qp_placement_free(job.pl);
    free_before(&job);
    qp_model_free(job.mq);
    qp_model_free(job.mf);
    if (st == QP_OK && report_out)
        *report_out = r;
    else
        qp_quantize_report_free(r);
    return st;
}

/* ---- qplace/quantize.h: the in-memory form -------------------------------------------------- */

void qp_quantize_config_default(struct qp_quantize_config *c) {
    memset(c, 0, sizeof *c);
    c->calibration_method = QP_CALIB_ENTROPY;
    c->high_precision_dtype = QP_DTYPE_FLOAT16;
    c->weight_clipping = QP_WEIGHT_CLIP_MSE;
    c->max_output_drift = -1;
    c->smoothquant_alpha = 0.5;
    c->bias_correction = QP_BIAS_CORRECTION_AUTO;
}

void qp_quantize_summary_free(struct qp_quantize_summary *s) {
    if (!s) return;
    drifts_free(s->outputs, s->n_outputs);
    drifts_free(s->outputs_uncorrected, s->n_outputs);
    drifts_free(s->outputs_corrected, s->n_outputs);
    drifts_free(s->outputs_unclipped, s->n_outputs);
    drifts_free(s->outputs_unrounded, s->n_outputs);
    drifts_free(s->outputs_before, s->n_outputs);
    qp_placement_free(s->placement);
    for (size_t i = 0; s->budget_excluded && i < s->n_budget_excluded; i++)
        free(s->budget_excluded[i]);
    free(s->budget_excluded);
    free(s);
}

static enum qp_status check_config(const struct qp_quantize_config *c, struct qp_error *err) {
    enum qp_status st;
    if ((unsigned)c->trt.quantize_mode >= QP_QUANT_MODE_COUNT)
        return qp_error_set(err, QP_ERR_USAGE, "quantize: quantize_mode %d is not int8 or fp8",
                            (int)c->trt.quantize_mode);
    if ((unsigned)c->calibration_method >= QP_CALIB_METHOD_COUNT)
        return qp_error_set(err, QP_ERR_USAGE, "quantize: unknown calibration_method %d",
                            (int)c->calibration_method);
    if ((unsigned)c->bias_correction > QP_BIAS_CORRECTION_AUTO)
        return qp_error_set(err, QP_ERR_USAGE,
                            "quantize: bias_correction %d is not off (0), on (1) or auto (2)",
                            c->bias_correction);
    if (c->high_precision_dtype != QP_DTYPE_FLOAT && c->high_precision_dtype != QP_DTYPE_FLOAT16 &&
        c->high_precision_dtype != QP_DTYPE_BFLOAT16)
        return qp_error_set(err, QP_ERR_USAGE,
                            "quantize: high_precision_dtype must be float, float16 or bfloat16, "
                            "not %s",
                            qp_dtype_name(c->high_precision_dtype));
    if (c->n_threads < 0)
        return qp_error_set(err, QP_ERR_USAGE, "quantize: %d threads", c->n_threads);
    if (c->percentile != 0 && !(c->percentile > 0 && c->percentile <= 100))
        return qp_error_set(err, QP_ERR_USAGE, "quantize: percentile %g is not in (0, 100]",
                            c->percentile);
    if (c->weight_clipping != QP_WEIGHT_CLIP_ABSMAX && c->weight_clipping != QP_WEIGHT_CLIP_MSE)
        return qp_error_set(err, QP_ERR_USAGE,
                            "quantize: weight_clipping %d is not absmax (0) or mse (1)",
                            (int)c->weight_clipping);
    if ((st = check_rounding(c->weight_rounding, c->weight_rounding_seconds, c->trt.quantize_mode,
                             err)) != QP_OK)
        return st;
    if (check_opset(c->opset, "opset", err) != QP_OK) return QP_ERR_USAGE;
    if (isnan(c->max_output_drift) || !isfinite(c->max_output_drift) ||
        !(c->min_top1_agreement >= 0 && c->min_top1_agreement <= 1))
        return qp_error_set(err, QP_ERR_USAGE,
                            "quantize: max_output_drift must be finite (< 0: none) and "
                            "min_top1_agreement in [0, 1] (0: none), not %g and %g",
                            c->max_output_drift, c->min_top1_agreement);
    st = check_equalization(c->equalization, c->smoothquant_alpha, c->ranges != NULL, err);
    if (st != QP_OK) return st;
    if (c->n_op_types_to_exclude_fp16 && !c->op_types_to_exclude_fp16)
        return qp_error_set(err, QP_ERR_USAGE, "quantize: op_types_to_exclude_fp16 is NULL");
    return QP_OK;
}

/* The given placement (copied) or the trt policy's, on the model that is written. */
static enum qp_status place_from_config(const struct qp_quantize_config *c,
                                        struct qp_quantize_job *job, struct qp_quantize_report *r,
                                        struct qp_error *err) {
    const char *source = c->placement        ? "placement"
                         : c->trt.rules_path ? "trt policy + rules"
                                             : "trt policy";
    if (!(r->placement_source = strdup(source))) return nomem(err);
    if (c->placement) return qp_placement_copy(c->placement, &job->pl, err);
    return qp_placement_trt(job->mq, &c->trt, &job->pl, err);
}

static enum qp_status place_config_cb(const void *user, struct qp_quantize_job *job,
                                      struct qp_quantize_report *r, struct qp_error *err) {
    return place_from_config(user, job, r, err);
}

/* Synthetic calibration (seed 1) and evaluation (seed 2) data, as `qplace quantize` makes them
 * without --calibration_data_path. */
static enum qp_status synthetic_data(const struct qp_quantize_config *c, const struct qp_model *mf,
                                     struct qp_provider **cal, struct qp_provider **ev,
                                     struct qp_error *err) {
    struct qp_data_options d;
    qp_data_options_default(&d);
    d.synthetic_batches = 1;
    d.seed = 1;
    enum qp_status st = qp_provider_open_model(mf, NULL, c->calibration_shapes, &d, cal, err);
    d.seed = 2;
    if (st == QP_OK && !c->eval_data)
        st = qp_provider_open_model(mf, NULL, c->calibration_shapes, &d, ev, err);
    return st;
}

/* The calibration and evaluation data of qp_quantize_model: the caller's, or synthetic. */
static enum qp_status open_config_data(const struct qp_quantize_config *c,
                                       struct qp_provider *calibration_data,
                                       struct qp_quantize_job *job, struct qp_provider **own_cal,
                                       struct qp_provider **own_ev, struct qp_error *err) {
    enum qp_status st = QP_OK;
    if (!calibration_data && (st = synthetic_data(c, job->mf, own_cal, own_ev, err)) != QP_OK)
        return st;
    job->cal = calibration_data ? calibration_data : *own_cal;
    job->ev = c->eval_data ? c->eval_data : *own_ev;
    return QP_OK;
}

static enum qp_status summary_of(struct qp_quantize_report *r, struct qp_quantize_summary **out,
                                 struct qp_error *err) {
    struct qp_quantize_summary *s = calloc(1, sizeof *s);
    if (!s) return nomem(err);
    *s = (struct qp_quantize_summary){
        .n_edges = r->writer.n_edges,
        .n_tensors = r->writer.n_tensors,
        .n_weights = r->writer.n_weights,
        .n_weight_tensors = r->writer.n_weight_tensors,
        .opset_from = r->writer.opset_from,
        .opset_to = r->writer.opset_to,
        .high_precision = r->writer.high_precision,
        .calibration_source = r->calibration_source,
        .method = r->method,
        .n_calib_samples = r->n_calib_samples,
        .n_calib_batches = r->n_calib_batches,
        .n_eval_samples = r->n_eval_samples,
        .eval_on_calibration = r->eval_on_calibration,
        .n_outputs = r->n_outputs,
        .outputs = r->outputs,
        .placement = r->placement,
        .drift_before_precision = r->drift_before_precision,
        .n_overridden = r->n_overridden,
        .weight_clipping = r->writer.n_weight_channels ? QP_WEIGHT_CLIP_MSE : QP_WEIGHT_CLIP_ABSMAX,
        .n_weight_channels = r->writer.n_weight_channels,
        .n_weight_channels_clipped = r->writer.n_weight_channels_clipped,
        .weight_clip_mean_ratio = r->writer.weight_clip_mean_ratio,
        .budget = r->has_budget,
        .budget_met = r->budget.met,
        .n_budget_ranked = r->budget.n_ranked,
        .n_budget_excluded = r->budget.n_excluded,
        .budget_excluded = r->budget.excluded,
        .budget_drift_before = r->budget.before.drift,
        .budget_drift_after = r->budget.after.drift,
        .budget_top1_before = r->budget.before.top1,
        .budget_top1_after = r->budget.after.top1,
        .equalization = r->equalization,
        .smoothquant_alpha = r->smoothquant_alpha,
        .bias_correction = r->bias_correction,
        .n_bias_layers = r->bias.n_layers,
        .n_biases_added = r->bias.n_biases_added,
        .bias_rounds = r->bias.n_rounds,
        .bias_shift_before = r->bias.shift_before,
        .bias_shift_after = r->bias.shift_after,
        .bias_seconds = r->bias.seconds,
        .outputs_uncorrected = r->outputs_uncorrected,
        .bias_auto = r->bias_auto,
        .bias_kept = r->bias_kept,
        .outputs_corrected = r->outputs_corrected,
        .outputs_unclipped = r->outputs_unclipped,
        .n_auto_fallback = r->n_auto_fallback,
        .weight_rounding = r->weight_rounding ? QP_WEIGHT_ROUND_ADAROUND : QP_WEIGHT_ROUND_NEAREST,
        .n_rounded_layers = r->rounding.n_layers,
        .n_rounding_skipped = r->rounding.n_skipped,
        .n_rounding_timed_out = r->rounding.n_timed_out,
        .n_rounded_weights = r->rounding.n_weights,
        .n_rounded_flipped = r->rounding.n_flipped,
        .rounding_error_before = r->rounding.error_before,
        .rounding_error_after = r->rounding.error_after,
        .rounding_seconds = r->rounding.seconds,
        .outputs_unrounded = r->outputs_unrounded,
    };
    memcpy(s->auto_methods, r->auto_methods, sizeof s->auto_methods);
    s->n_ranges_reused = r->n_ranges_reused;
    r->budget.excluded = NULL; /* moved into the summary */
    r->budget.n_excluded = 0;
    if (r->equalize) {
        s->n_cle_pairs = r->equalize->n_cle_pairs;
        s->n_cle_skipped = r->equalize->n_cle_skipped;
        s->n_smoothquant_pairs = r->equalize->n_smoothquant_pairs;
        s->n_smoothquant_skipped = r->equalize->n_smoothquant_skipped;
    }
    if (r->outputs_before && r->n_outputs_before == r->n_outputs) {
        s->outputs_before = r->outputs_before; /* moved */
        r->outputs_before = NULL;
        r->n_outputs_before = 0;
    }
    s->placement_source = strcmp(r->placement_source, "placement") == 0    ? "placement"
                          : strcmp(r->placement_source, "trt policy") == 0 ? "trt policy"
                                                                           : "trt policy + rules";
    r->outputs = NULL; /* moved into the summary */
    r->outputs_uncorrected = NULL;
    r->outputs_corrected = NULL;
    r->outputs_unclipped = NULL;
    r->outputs_unrounded = NULL;
    r->n_outputs = 0;
    r->placement = NULL;
    *out = s;
    return QP_OK;
}

enum qp_status qp_quantize_model(const struct qp_model *model, struct qp_provider *calibration_data,
                                 const struct qp_quantize_config *c, struct qp_model **out,
                                 struct qp_quantize_summary **summary_out, struct qp_error *err) {
    struct qp_quantize_config defaults;
    if (!c) {
        qp_quantize_config_default(&defaults);
        c = &defaults;
    }
    if (!model || !out) return qp_error_set(err, QP_ERR_USAGE, "quantize: no model or output");
    enum qp_status st = check_config(c, err);
    if (st != QP_OK) return st;
    struct qp_quantize_report *r = calloc(1, sizeof *r);
    if (!r) return nomem(err);
    struct qp_provider *own_cal = NULL, *own_ev = NULL;
    struct qp_quantize_job job = {
        .method = c->calibration_method,
        .percentile = c->percentile,
        .mode = c->trt.quantize_mode,
        .dq_only = c->dq_only,
        .high_precision = c->high_precision_dtype,
        .n_threads = c->n_threads,
        .file_ranges = c->ranges,
        .keep_fp32_ops = c->op_types_to_exclude_fp16,
        .n_keep_fp32_ops = c->n_op_types_to_exclude_fp16,
        .direct_io_types = c->direct_io_types,
        .weight_clipping = c->weight_clipping,
        .goal = {.max_drift = c->max_output_drift, .min_top1 = c->min_top1_agreement},
        .equalization = c->equalization,
        .smoothquant_alpha = c->smoothquant_alpha,
        .bias_correction = c->bias_correction,
        .weight_rounding = c->weight_rounding,
        .weight_rounding_seconds = c->weight_rounding_seconds};
    struct qp_calib_shapes over = {0};
    if ((c->override_shapes && (st = parse_override(c->override_shapes, &over, err)) != QP_OK) ||
        (st = qp_model_clone(model, &job.mf, err)) != QP_OK ||
        (st = qp_model_clone(model, &job.mq, err)) != QP_OK ||
        (st = override_shapes(job.mf->graph, &over, err)) != QP_OK ||
        (st = override_shapes(job.mq->graph, &over, err)) != QP_OK ||
        (st = prepare_models(job.mf, job.mq, "model", c->opset, &job.opset_in, err)) != QP_OK)
        goto done;
    /* Equalization needs the data before placement; otherwise placement errors come first. */
    if (c->equalization &&
        ((st = open_config_data(c, calibration_data, &job, &own_cal, &own_ev, err)) != QP_OK ||
         (st = equalize_models(&job, place_config_cb, c, r, err)) != QP_OK))
        goto done;
    if ((st = place_from_config(c, &job, r, err)) != QP_OK ||
        (st = validate_placement(&job, NULL, err)) != QP_OK ||
        (c->ranges &&
         (st = check_ranges_cover(c->ranges, "the given ranges", job.pl, err)) != QP_OK))
        goto done;
    if (!c->equalization &&
        (st = open_config_data(c, calibration_data, &job, &own_cal, &own_ev, err)) != QP_OK)
        goto done;
    if ((st = quantize_job(&job, r, err)) != QP_OK) goto done;
    r->placement = job.pl;
    r->n_overridden = over.n;
    job.pl = NULL;
    if (summary_out && (st = summary_of(r, summary_out, err)) != QP_OK) goto done;
    *out = job.mq;
    job.mq = NULL;
done:
    qp_calib_shapes_release(&over);
    qp_provider_free(own_cal);
    qp_provider_free(own_ev);
    qp_placement_free(job.pl);
    free_before(&job);
    qp_model_free(job.mq);
    qp_model_free(job.mf);
    qp_quantize_report_free(r);
    return st;
}
