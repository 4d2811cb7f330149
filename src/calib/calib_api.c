/* qplace/calib.h for library callers: opening data for a model, and one calibration call that
 * checks its placement and fills the ranges' meta. */
#include <stdlib.h>
#include <string.h>

#include "calib/collect.h"
#include "calib/data.h"
#include "ir/ir.h"
#include "placement/placement.h"

enum qp_status qp_provider_open_model(const struct qp_model *model, const char *path,
                                      const char *calibration_shapes,
                                      const struct qp_data_options *o, struct qp_provider **out,
                                      struct qp_error *err) {
    if (!model || !out) return qp_error_set(err, QP_ERR_USAGE, "calibration data: no model");
    const struct qp_graph *g = qp_model_graph(model);
    struct qp_calib_shapes shapes = {0};
    enum qp_status st = QP_OK;
    if (calibration_shapes && (st = qp_calib_shapes_parse(calibration_shapes, &shapes, err)))
        return st;
    struct qp_npz_provider_input *in = calloc(g->n_inputs ? g->n_inputs : 1, sizeof *in);
    size_t n_in = 0;
    if (!in) {
        st = qp_error_set(err, QP_ERR_NOMEM, "calibration data: out of memory");
        goto done;
    }
    if ((st = qp_provider_graph_inputs(g, calibration_shapes ? &shapes : NULL, "calibrate", in,
                                       g->n_inputs, &n_in, err)) != QP_OK)
        goto done;
    st = qp_provider_open(path, o, in, n_in, out, err);
done:
    free(in);
    qp_calib_shapes_release(&shapes);
    return st;
}

void qp_calibrate_options_default(struct qp_calibrate_options *o) {
    memset(o, 0, sizeof *o);
    o->method = QP_CALIB_ENTROPY;
    o->percentile = QP_CALIB_DEFAULT_PERCENTILE;
    o->group_concat = 1;
}

/* The public options as the collector's. */
static enum qp_status collect_options(const struct qp_calibrate_options *o,
                                      struct qp_collect_options *co, struct qp_error *err) {
    if ((unsigned)o->method >= QP_CALIB_METHOD_COUNT)
        return qp_error_set(err, QP_ERR_USAGE, "calibrate: unknown method %d", (int)o->method);
    if (!(o->percentile > 0 && o->percentile <= 100))
        return qp_error_set(err, QP_ERR_USAGE, "calibrate: percentile %g is not in (0, 100]",
                            o->percentile);
    if (o->n_threads < 0)
        return qp_error_set(err, QP_ERR_USAGE, "calibrate: %d threads", o->n_threads);
    qp_collect_options_default(co, o->method);
    co->calib.percentile = o->percentile;
    co->n_threads = o->n_threads;
    co->group_concat = o->group_concat != 0;
    co->placement_float_only = o->placement_float_only != 0;
    co->progress = o->progress;
    co->progress_user = o->progress_user;
    return QP_OK;
}

enum qp_status qp_calibrate(const struct qp_model *model, struct qp_provider *data,
                            const struct qp_calibrate_options *o, struct qp_ranges **out,
                            struct qp_calibrate_report *report, struct qp_error *err) {
    struct qp_calibrate_options defaults;
    if (!o) {
        qp_calibrate_options_default(&defaults);
        o = &defaults;
    }
    if (!model || !data || !out)
        return qp_error_set(err, QP_ERR_USAGE, "calibrate: no model, data or output");
    struct qp_collect_options co;
    enum qp_status st = collect_options(o, &co, err);
    if (st != QP_OK) return st;
    struct qp_placement *pl = NULL; /* a copy: validation records graph indices in it */
    struct qp_ranges *r = NULL;
    if (o->placement) {
        if ((st = qp_placement_copy(o->placement, &pl, err)) != QP_OK) return st;
        if ((st = qp_placement_validate(pl, qp_model_graph(model), err)) != QP_OK) goto fail;
        co.placement = pl;
    }
    struct qp_collect_report rep;
    if ((st = qp_calibrate_model(model, data, &co, &r, &rep, err)) != QP_OK) goto fail;
    struct qp_ranges_meta meta = {.method = qp_calib_method_name(o->method),
                                  .percentile = co.calib.percentile,
                                  .calibration_source = qp_provider_source(data),
                                  .num_samples = rep.n_samples};
    if ((st = qp_ranges_set_meta(r, &meta, err)) != QP_OK) goto fail;
    if (report)
        *report = (struct qp_calibrate_report){.n_batches = rep.n_batches,
                                               .n_samples = rep.n_samples,
                                               .n_tensors = rep.n_tensors,
                                               .n_nonfinite_tensors = rep.n_nonfinite_tensors,
                                               .n_nan = rep.n_nan,
                                               .n_inf = rep.n_inf,
                                               .peak_stats_bytes = rep.collector_bytes_max};
    qp_placement_free(pl);
    *out = r;
    return QP_OK;
fail:
    qp_ranges_free(r);
    qp_placement_free(pl);
    return st;
}
