/* qplace calibrate: activation ranges for a model, as JSON and as a TensorRT calibration cache. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "calib/collect.h"
#include "calib/data.h"
#include "calib/provider.h"
#include "calib/provider_npz.h"
#include "calib/ranges.h"
#include "cli.h"
#include "core/file.h"
#include "ir/ir.h"
#include "progress.h"
#include "qplace/model.h"
#include "placement/placement.h"

const struct cli_opt cli_calibrate_opts[] = {
    {"onnx_path", CLI_VALUE, "MODEL", "the float model (required unless --trt_cache_in)"},
    CLI_DATA_OPTS,
    CLI_CALIBRATION_METHOD_OPT,
    {"percentile", CLI_VALUE, "P", "percentile for --calibration_method percentile (99.999)"},
    {"placement_in", CLI_VALUE, "FILE", "calibrate only the activation edges of this placement"},
    {"output_path", CLI_VALUE, "RANGES.json",
     "where to write the ranges (<model stem>.ranges.json)"},
    {"trt_cache_out", CLI_VALUE, "FILE", "also write a TensorRT calibration cache"},
    {"trt_cache_in", CLI_VALUE, "FILE", "convert this TensorRT calibration cache to JSON, no run"},
    {"no_group_concat", CLI_BOOL, NULL, "do not share one range across each Concat's tensors"},
    CLI_THREADS_OPT,
    {"quiet", CLI_BOOL, NULL, "no progress and no summary (warnings and errors still print)"},
    {0},
};

const char cli_calibrate_details[] =
    "Runs the model in qplace's engine over the calibration data one batch at a time, collects\n"
    "per-tensor statistics of every float activation (or of the tensors of --placement_in),\n"
    "and writes the calibrated ranges as JSON (docs/calibration.md). Softmax outputs are\n"
    "pinned to [0, 1]; the tensors joined by a Concat share one range. NaN/Inf values are\n"
    "counted, reported and left out of the ranges. Without --calibration_data_path the data\n"
    "are synthetic (uniform [0, 1)): a warning is printed and the file says\n"
    "calibration_source: synthetic. Image folders are resized to the input's H x W, scaled to\n"
    "0..1, then normalised with --image_mean/--image_std. --trt_cache_in converts a TensorRT\n"
    "calibration cache (amax = scale * 127) to the JSON format without running anything.\n"
    "Progress (samples, samples/s, ETA) goes to stderr: a bar on a terminal, lines otherwise.\n";

static int bad_usage(const char *fmt, const char *a) {
    fprintf(stderr, "qplace calibrate: ");
    fprintf(stderr, fmt, a);
    fprintf(stderr, "\nTry 'qplace help calibrate'.\n");
    return 1;
}

/* "<dir>/<stem>.ranges.json" for "<dir>/<stem>.onnx" (or any other suffix kept). */
static char *default_output(const char *in) {
    size_t n = strlen(in);
    const char *slash = strrchr(in, '/');
    const char *dot = strrchr(in, '.');
    if (dot && (!slash || dot > slash + 1)) n = (size_t)(dot - in);
    char *out = malloc(n + sizeof ".ranges.json");
    if (!out) return NULL;
    memcpy(out, in, n);
    memcpy(out + n, ".ranges.json", sizeof ".ranges.json");
    return out;
}

/* 1 when a and b name the same existing file. */
static int same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return a && b && stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

/* Outputs must not replace an input (the input is never modified) or each other. */
static int outputs_clash(const char *out, const char *cache_out, const char *const *inputs,
                         size_t n) {
    const char *outs[2] = {out, cache_out};
    struct qp_error err = {0};
    for (int k = 0; k < 2; k++)
        if (qp_file_check_output(outs[k],
                                 k ? "calibrate: --trt_cache_out" : "calibrate: --output_path",
                                 &err) != QP_OK)
            return cli_fail(&err);
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; outs[k] && i < n; i++)
            if (same_file(outs[k], inputs[i]) || (inputs[i] && !strcmp(outs[k], inputs[i])))
                return bad_usage("output '%s' would replace an input file", outs[k]);
    if (out && cache_out && (!strcmp(out, cache_out) || same_file(out, cache_out)))
        return bad_usage("--output_path and --trt_cache_out are the same file '%s'", out);
    return 0;
}

struct progress_ctx {
    struct cli_progress bar;
};

static void on_progress(uint64_t done, uint64_t total, void *user) {
    (void)total;
    cli_progress_update(&((struct progress_ctx *)user)->bar, done);
}

/* Model inputs (graph inputs that are not initializers) with their batch shapes; *out is
 * malloc'd. */
static enum qp_status model_inputs(const struct qp_graph *g, const struct qp_calib_shapes *shapes,
                                   struct qp_npz_provider_input **out, size_t *n_out,
                                   struct qp_error *err) {
    struct qp_npz_provider_input *in = calloc(g->n_inputs ? g->n_inputs : 1, sizeof *in);
    if (!in) return qp_error_set(err, QP_ERR_NOMEM, "calibrate: out of memory");
    enum qp_status st =
        qp_provider_graph_inputs(g, shapes, "calibrate", in, g->n_inputs, n_out, err);
    if (st != QP_OK) {
        free(in);
        return st;
    }
    *out = in;
    return QP_OK;
}

/* --trt_cache_in: no run, just a conversion. */
/* Writes the ranges file `out` and, when cache_out is given, the TensorRT cache: all or nothing
 * (the ranges file goes again when the cache cannot be written). */
static enum qp_status save_ranges(const struct qp_ranges *r, const struct qp_ranges_meta *meta,
                                  const char *out, const char *cache_out, struct qp_error *err) {
    enum qp_status st = qp_ranges_save_json(r, meta, out, err);
    if (st == QP_OK && cache_out &&
        (st = qp_ranges_save_trt_cache(r, meta->method, QP_TRT_CACHE_DEFAULT_VERSION, cache_out,
                                       err)) != QP_OK)
        unlink(out);
    return st;
}

static int convert_cache(const struct cli_args *args, const char *cache_in) {
    struct qp_error err = {0};
    struct qp_ranges *r = NULL;
    struct qp_model *m = NULL;
    char *out_default = NULL;
    int rc = 0;
    const char *model_path = cli_value(args, "onnx_path", NULL);
    if (qp_ranges_load_trt_cache(cache_in, &r, &err) != QP_OK) goto fail;
    if (model_path) {
        if (qp_model_load_file(model_path, NULL, &m, &err) != QP_OK) goto fail;
        const struct qp_graph *g = qp_model_graph(m);
        size_t missing = 0;
        for (size_t i = 0; i < qp_ranges_count(r); i++)
            if (qp_graph_find_value(g, qp_ranges_at(r, i)->tensor) < 0 && missing++ < 5)
                qp_log(QP_LOG_WARN, "%s: tensor '%s' is not in %s", cache_in,
                       qp_ranges_at(r, i)->tensor, model_path);
        if (missing > 5)
            qp_log(QP_LOG_WARN, "%s: %zu tensors in all are not in %s", cache_in, missing,
                   model_path);
    }
    const char *out = cli_value(args, "output_path", NULL);
    if (!out) {
        out_default = default_output(model_path ? model_path : cache_in);
        if (!out_default) {
            qp_error_set(&err, QP_ERR_NOMEM, "out of memory");
            goto fail;
        }
        out = out_default;
    }
    const char *ins[2] = {cache_in, model_path};
    if ((rc = outputs_clash(out, cli_value(args, "trt_cache_out", NULL), ins, 2)) != 0) goto done;
    struct qp_ranges_meta meta = *qp_ranges_get_meta(r);
    meta.model_path = model_path;
    if (save_ranges(r, &meta, out, cli_value(args, "trt_cache_out", NULL), &err) != QP_OK)
        goto fail;
    if (!cli_has(args, "quiet"))
        printf("wrote %zu ranges from %s to %s\n", qp_ranges_count(r), cache_in, out);
    goto done;
fail:
    rc = cli_fail(&err);
done:
    free(out_default);
    qp_ranges_free(r);
    qp_model_free(m);
    return rc;
}

int cli_calibrate_run(const struct cli_args *args) {
    const char *cache_in = cli_value(args, "trt_cache_in", NULL);
    const char *model_path = cli_value(args, "onnx_path", NULL);
    const char *data_path = cli_value(args, "calibration_data_path", NULL);
    int quiet = cli_has(args, "quiet");
    if (args->n_pos > 0)
        return bad_usage("unexpected argument '%s' (use --onnx_path)", args->pos[0]);
    if (cache_in) {
        static const char *const no_run[] = {
            "calibration_data_path", "calibration_method", "percentile",
            "calibration_shapes",    "placement_in",       "max_calibration_bytes"};
        for (size_t i = 0; i < sizeof no_run / sizeof no_run[0]; i++)
            if (cli_has(args, no_run[i]))
                return bad_usage("--%s does not go with --trt_cache_in (nothing is run)",
                                 no_run[i]);
        return convert_cache(args, cache_in);
    }
    if (!model_path) return bad_usage("%s", "--onnx_path is required");

    struct qp_error err = {0};
    enum qp_calib_method method = QP_CALIB_ENTROPY;
    const char *ms = cli_value(args, "calibration_method", NULL);
    if (ms && qp_calib_method_parse(ms, &method, &err) != QP_OK) return bad_usage("%s", err.msg);
    struct qp_collect_options o;
    qp_collect_options_default(&o, method);
    o.group_concat = !cli_has(args, "no_group_concat");
    if (cli_percentile(args, method, &o.calib.percentile, &err) != QP_OK)
        return bad_usage("%s", err.msg);
    struct qp_data_options dopt;
    if (cli_data_options(args, "calibrate", &dopt)) return 1;
    const char *ts = cli_value(args, "threads", NULL);
    if (ts) {
        char *end;
        errno = 0;
        long t = strtol(ts, &end, 10);
        if (end == ts || *end || errno || t < 0 || t > 4096)
            return bad_usage("--threads '%s' is not a thread count", ts);
        o.n_threads = (int)t;
    }
    struct qp_calib_shapes shapes = {0};
    const char *ss = cli_value(args, "calibration_shapes", NULL);
    if (ss && qp_calib_shapes_parse(ss, &shapes, &err) != QP_OK) return bad_usage("%s", err.msg);

    struct qp_model *m = NULL;
    struct qp_placement *pl = NULL;
    struct qp_npz_provider_input *in = NULL;
    size_t n_in = 0;
    struct qp_provider *prov = NULL;
    struct qp_ranges *r = NULL;
    char *out_default = NULL;
    int rc = 0;
    const char *out = cli_value(args, "output_path", NULL);
    if (!out) {
        if (!(out_default = default_output(model_path))) {
            qp_error_set(&err, QP_ERR_NOMEM, "out of memory");
            goto fail;
        }
        out = out_default;
    }
    const char *pl_path = cli_value(args, "placement_in", NULL);
    const char *ins[3] = {model_path, data_path, pl_path};
    if ((rc = outputs_clash(out, cli_value(args, "trt_cache_out", NULL), ins, 3)) != 0) goto done;
    if (qp_model_load_file(model_path, NULL, &m, &err) != QP_OK) goto fail;
    const struct qp_graph *g = qp_model_graph(m);
    if (pl_path) {
        if (qp_placement_load_file(pl_path, &pl, &err) != QP_OK) goto fail;
        if (qp_placement_validate(pl, g, &err) != QP_OK) {
            qp_error_prefix(&err, "%s", pl_path);
            goto fail;
        }
        o.placement = pl;
    }
    if (model_inputs(g, ss ? &shapes : NULL, &in, &n_in, &err) != QP_OK) goto fail;
    if (qp_provider_open(data_path, &dopt, in, n_in, &prov, &err) != QP_OK) goto fail;
    int synthetic = qp_provider_is_synthetic(prov);
    if (synthetic)
        qp_log(QP_LOG_WARN,
               "no --calibration_data_path: calibrating %s on synthetic random data "
               "(uniform [0, 1)); the ranges are placeholders, marked "
               "calibration_source: synthetic",
               model_path);

    struct progress_ctx pc;
    cli_progress_start(&pc.bar, stderr, "calibrate", "samples", qp_provider_n_samples(prov),
                       quiet ? CLI_PROGRESS_QUIET : CLI_PROGRESS_AUTO);
    o.progress = on_progress;
    o.progress_user = &pc;
    struct qp_collect_report rep;
    if (qp_calibrate_model(m, prov, &o, &r, &rep, &err) != QP_OK) {
        if (pc.bar.mode == CLI_PROGRESS_BAR && pc.bar.drawn) fputc('\n', stderr);
        goto fail;
    }
    cli_progress_finish(&pc.bar, rep.n_samples);
    if (rep.n_nonfinite_tensors)
        qp_log(QP_LOG_WARN,
               "calibrate: %zu tensors held non-finite values (%llu NaN, %llu Inf in all); they "
               "were left out of the ranges",
               rep.n_nonfinite_tensors, (unsigned long long)rep.n_nan,
               (unsigned long long)rep.n_inf);
    struct qp_ranges_meta meta = {.model_path = model_path,
                                  .method = qp_calib_method_name(method),
                                  .percentile = o.calib.percentile,
                                  .calibration_source = qp_provider_source(prov),
                                  .num_samples = rep.n_samples};
    if (save_ranges(r, &meta, out, cli_value(args, "trt_cache_out", NULL), &err) != QP_OK)
        goto fail;
    if (!quiet) {
        printf("wrote %zu ranges (%s, %llu samples%s) to %s\n", rep.n_tensors, meta.method,
               (unsigned long long)rep.n_samples, synthetic ? ", SYNTHETIC data" : "", out);
        if (method == QP_CALIB_AUTO) cli_print_auto(rep.n_auto, rep.n_auto_fallback);
    }
    goto done;
fail:
    rc = cli_fail(&err);
done:
    free(out_default);
    qp_ranges_free(r);
    qp_provider_free(prov);
    free(in);
    qp_placement_free(pl);
    qp_model_free(m);
    qp_calib_shapes_release(&shapes);
    return rc;
}
