/* The quantization pipeline (quantize.h). */
#include "pipeline/quantize.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "calib/collect.h"
#include "calib/data.h"
#include "calib/provider.h"
#include "calib/provider_npz.h"
#include "calib/ranges.h"
#include "ir/ir.h"
#include "ir/opset_convert.h"
#include "qplace/model.h"
#include "qplace/session.h"

#define QP_QUANTIZE_MAX_INPUTS 64

void qp_quantize_options_default(struct qp_quantize_options *o) {
    memset(o, 0, sizeof *o);
    o->mode = QP_QUANT_INT8;
    o->method = QP_CALIB_ENTROPY;
    o->high_precision = QP_DTYPE_FLOAT;
}

void qp_quantize_report_free(struct qp_quantize_report *r) {
    if (!r) return;
    for (size_t i = 0; i < r->n_outputs; i++)
        free(r->outputs[i].name);
    free(r->outputs);
    free(r->output_path);
    free(r->placement_source);
    qp_placement_free(r->placement);
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

/* Running sums for one output. */
struct drift_acc {
    double dot, na, nb, max_abs;
    uint64_t rows, agree;
};

static enum qp_status compare_outputs(struct qp_session *sf, struct qp_session *sq,
                                      struct drift_acc *acc, struct qp_quantize_report *r,
                                      struct qp_error *err) {
    for (size_t i = 0; i < r->n_outputs; i++) {
        struct qp_array a, b;
        enum qp_status st = qp_session_output(sf, i, &a, err);
        if (st == QP_OK) st = qp_session_output(sq, i, &b, err);
        if (st != QP_OK) return st;
        if (a.dtype != QP_DTYPE_FLOAT || b.dtype != QP_DTYPE_FLOAT || a.nbytes != b.nbytes)
            continue;
        size_t n = a.nbytes / 4;
        const float *x = a.data, *y = b.data;
        struct drift_acc *d = &acc[i];
        for (size_t k = 0; k < n; k++) {
            d->dot += (double)x[k] * y[k];
            d->na += (double)x[k] * x[k];
            d->nb += (double)y[k] * y[k];
            double e = fabs((double)x[k] - (double)y[k]);
            if (e > d->max_abs || isnan(e)) d->max_abs = e;
        }
        if (a.rank >= 2 && a.dims[a.rank - 1] >= 2) {
            r->outputs[i].has_top1 = 1;
            size_t c = (size_t)a.dims[a.rank - 1];
            for (size_t row = 0; row + c <= n; row += c) {
                size_t ia = 0, ib = 0;
                for (size_t k = 1; k < c; k++) {
                    if (x[row + k] > x[row + ia]) ia = k;
                    if (y[row + k] > y[row + ib]) ib = k;
                }
                d->rows++;
                d->agree += ia == ib;
            }
        }
    }
    return QP_OK;
}

enum qp_status qp_quantize(const struct qp_quantize_options *o,
                           struct qp_quantize_report **report_out, struct qp_error *err) {
    if (!o || !o->onnx_path)
        return qp_error_set(err, QP_ERR_USAGE, "quantize: --onnx_path is required");
    enum qp_status st = QP_OK;
    struct qp_quantize_report *r = calloc(1, sizeof *r);
    struct qp_model *mf = NULL, *mq = NULL;
    struct qp_placement *pl = NULL;
    struct qp_calib_shapes shapes = {0};
    struct qp_provider *cal = NULL, *ev = NULL;
    struct qp_collector *col = NULL;
    struct qp_ranges *ranges = NULL;
    struct qp_session *sf = NULL, *sq = NULL;
    struct drift_acc *acc = NULL;
    struct qp_npz_provider_input inputs[QP_QUANTIZE_MAX_INPUTS];
    struct qp_shape bshapes[QP_QUANTIZE_MAX_INPUTS];
    size_t n_inputs = 0;
    if (!r) return nomem(err);

    r->output_path =
        o->output_path ? strdup(o->output_path) : qp_quant_default_output(o->onnx_path);
    if (!r->output_path) goto oom;
    if (same_file(o->onnx_path, r->output_path)) {
        st = qp_error_set(err, QP_ERR_BAD_INPUT,
                          "quantize: output path '%s' is the input model; choose another "
                          "--output_path",
                          r->output_path);
        goto done;
    }
    if (o->calibration_shapes &&
        (st = qp_calib_shapes_parse(o->calibration_shapes, &shapes, err)) != QP_OK)
        goto done;

    /* Two loads: `mf` stays float (calibration and the drift reference), `mq` is written. */
    if ((st = qp_model_load_file(o->onnx_path, NULL, &mf, err)) != QP_OK) goto done;
    if (qp_model_has_qdq(mf)) {
        st = qp_error_set(err, QP_ERR_BAD_INPUT,
                          "quantize: '%s' already holds QuantizeLinear/DequantizeLinear nodes "
                          "(already quantized); give the float model",
                          o->onnx_path);
        goto done;
    }
    if (qp_model_opset(mf, "") < 19 && (st = qp_model_convert_opset(mf, 19, err)) != QP_OK) {
        qp_error_prefix(err, "quantize: '%s'", o->onnx_path);
        goto done;
    }
    if ((st = qp_model_load_file(o->onnx_path, NULL, &mq, err)) != QP_OK) goto done;
    int64_t opset_in = qp_model_opset(mq, "");
    if (qp_model_opset(mq, "") < 19 && (st = qp_model_convert_opset(mq, 19, err)) != QP_OK)
        goto done;
    struct qp_graph *g = mq->graph;
    if ((st = qp_graph_toposort(g, err)) != QP_OK) goto done;

    /* Placement. */
    if (o->placement_in) {
        if ((st = qp_placement_load_file(o->placement_in, &pl, err)) != QP_OK) goto done;
        size_t n = strlen(o->placement_in) + 32;
        r->placement_source = malloc(n);
        if (!r->placement_source) goto oom;
        snprintf(r->placement_source, n, "placement file %s", o->placement_in);
    } else {
        pl = qp_placement_create();
        if (!pl) goto oom;
        struct qp_policy_options po = {
            .mode = o->mode, .disable_mha_qdq = o->disable_mha_qdq, .select = o->select};
        if ((st = qp_policy_trt_place(g, &po, o->rules_path, pl, err)) != QP_OK) goto done;
        r->placement_source = strdup(o->rules_path ? "trt policy + rules" : "trt policy");
        if (!r->placement_source) goto oom;
    }
    if ((st = qp_placement_validate(pl, g, err)) != QP_OK) {
        qp_error_prefix(err, "quantize: placement");
        goto done;
    }

    /* Calibration of the placement's tensors on the float model. */
    if ((st =
             qp_provider_graph_inputs(mf->graph, o->calibration_shapes ? &shapes : NULL, "quantize",
                                      inputs, QP_QUANTIZE_MAX_INPUTS, &n_inputs, err)) != QP_OK)
        goto done;
    if ((st = make_provider(o, o->calibration_data_path, inputs, n_inputs, 1, &cal, err)) != QP_OK)
        goto done;
    r->calibration_source = qp_provider_source(cal);
    r->method = qp_calib_method_name(o->method);
    uint64_t nb = qp_provider_n_batches(cal), n_cal = nb;
    if (o->eval_data_path) {
        if ((st = make_provider(o, o->eval_data_path, inputs, n_inputs, 2, &ev, err)) != QP_OK)
            goto done;
    } else if (!o->calibration_data_path) {
        if ((st = make_provider(o, NULL, inputs, n_inputs, 2, &ev, err)) != QP_OK) goto done;
    } else if (nb >= 2) {
        uint64_t n_eval = nb / 5 ? nb / 5 : 1;
        n_cal = nb - n_eval;
        r->eval_source_split = 1;
    } else {
        r->eval_on_calibration = 1;
    }

    struct qp_collect_options co;
    qp_collect_options_default(&co, o->method);
    co.placement = pl;
    co.n_threads = o->n_threads;
    const struct qp_array *batch = NULL;
    int end = 0;
    if ((st = qp_provider_reset(cal, err)) != QP_OK) goto done;
    for (uint64_t b = 0; b < n_cal; b++) {
        if ((st = qp_provider_next(cal, &batch, &end, err)) != QP_OK) goto done;
        if (end) break;
        if (!col) {
            qp_provider_shapes(cal, batch, bshapes);
            if ((st = qp_collector_create(mf, &co, n_inputs, bshapes, &col, err)) != QP_OK)
                goto done;
        }
        if ((st = qp_collector_run(col, n_inputs, batch, err)) != QP_OK) goto done;
        r->n_calib_batches++;
        r->n_calib_samples += n_inputs && batch[0].rank > 0 ? (uint64_t)batch[0].dims[0] : 1;
    }
    if (!col) {
        st = qp_error_set(err, QP_ERR_BAD_INPUT, "quantize: the calibration data has no batches");
        goto done;
    }
    if ((st = qp_collector_finish(col, &ranges, NULL, err)) != QP_OK) goto done;
    qp_collector_free(col);
    col = NULL;

    /* Q/DQ, then the atomic save. */
    struct qp_writer_options wo;
    qp_writer_options_default(&wo);
    wo.qtype = o->mode == QP_QUANT_FP8 ? QP_DTYPE_FLOAT8E4M3FN : QP_DTYPE_INT8;
    wo.dq_only = o->dq_only;
    wo.high_precision = o->high_precision;
    wo.amax = amax_from_ranges;
    wo.amax_user = ranges;
    if ((st = qp_qdq_write(mq, pl, &wo, &r->writer, err)) != QP_OK) goto done;
    r->writer.opset_from = opset_in;

    /* Drift on held-out samples, before saving so a model the engine cannot run is an error. */
    struct qp_session_options so = {.n_threads = o->n_threads};
    if ((st = qp_session_create(mf, &so, 0, NULL, &sf, err)) != QP_OK) goto done;
    if ((st = qp_session_create(mq, &so, 0, NULL, &sq, err)) != QP_OK) {
        qp_error_prefix(err, "quantize: the quantized model does not run in the engine");
        goto done;
    }
    r->n_outputs = qp_session_n_outputs(sf);
    r->outputs = calloc(r->n_outputs ? r->n_outputs : 1, sizeof *r->outputs);
    acc = calloc(r->n_outputs ? r->n_outputs : 1, sizeof *acc);
    if (!r->outputs || !acc) goto oom;
    for (size_t i = 0; i < r->n_outputs; i++)
        if (!(r->outputs[i].name = strdup(qp_session_output_name(sf, i)))) goto oom;
    struct qp_provider *src = ev ? ev : cal;
    if ((st = qp_provider_reset(src, err)) != QP_OK) goto done;
    uint64_t skip = ev ? 0 : (r->eval_on_calibration ? 0 : n_cal);
    for (uint64_t b = 0;; b++) {
        if ((st = qp_provider_next(src, &batch, &end, err)) != QP_OK) goto done;
        if (end) break;
        if (b < skip) continue;
        if ((st = qp_session_run(sf, n_inputs, batch, err)) != QP_OK) goto done;
        if ((st = qp_session_run(sq, n_inputs, batch, err)) != QP_OK) goto done;
        if ((st = compare_outputs(sf, sq, acc, r, err)) != QP_OK) goto done;
        r->n_eval_samples += n_inputs && batch[0].rank > 0 ? (uint64_t)batch[0].dims[0] : 1;
    }
    for (size_t i = 0; i < r->n_outputs; i++) {
        struct qp_quantize_drift *d = &r->outputs[i];
        d->cosine = acc[i].na > 0 && acc[i].nb > 0 ? acc[i].dot / sqrt(acc[i].na * acc[i].nb)
                    : acc[i].na == acc[i].nb       ? 1.0
                                                   : 0.0;
        d->max_abs = acc[i].max_abs;
        d->n_rows = acc[i].rows;
        d->top1 = acc[i].rows ? (double)acc[i].agree / (double)acc[i].rows : 0;
    }
    qp_session_free(sq);
    sq = NULL;
    if ((st = qp_model_save_file(mq, r->output_path, NULL, err)) != QP_OK) goto done;
    /* The placement last, so a failed run leaves neither file behind. */
    if (o->placement_out && (st = qp_placement_save_file(pl, o->placement_out, err)) != QP_OK)
        goto done;
    r->placement = pl;
    pl = NULL;
    st = QP_OK;
    goto done;
oom:
    st = nomem(err);
done:
    free(acc);
    qp_session_free(sf);
    qp_session_free(sq);
    qp_collector_free(col);
    qp_ranges_free(ranges);
    qp_provider_free(cal);
    qp_provider_free(ev);
    qp_calib_shapes_release(&shapes);
    qp_placement_free(pl);
    qp_model_free(mq);
    qp_model_free(mf);
    if (st == QP_OK && report_out)
        *report_out = r;
    else
        qp_quantize_report_free(r);
    return st;
}
