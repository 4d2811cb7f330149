/* qplace calibrate: activation ranges for a model, as JSON and as a TensorRT calibration cache. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "calib/collect.h"
#include "calib/image.h"
#include "calib/provider.h"
#include "calib/provider_npz.h"
#include "calib/ranges.h"
#include "cli.h"
#include "ir/ir.h"
#include "progress.h"
#include "qplace/model.h"
#include "quant/placement.h"

const struct cli_opt cli_calibrate_opts[] = {
    {"onnx_path", CLI_VALUE, "MODEL", "the float model (required unless --trt_cache_in)"},
    {"calibration_data_path", CLI_VALUE, "FILE|DIR",
     ".npz/.npy file, folder of .npz/.npy shards, or folder of images (default: synthetic)"},
    {"calibration_method", CLI_VALUE, "max|entropy|percentile", "calibrator (default entropy)"},
    {"percentile", CLI_VALUE, "P", "percentile for --calibration_method percentile (99.999)"},
    {"calibration_shapes", CLI_VALUE, "NAME:1x3x224x224,...", "batch shape per input"},
    {"placement_in", CLI_VALUE, "FILE", "calibrate only the activation edges of this placement"},
    {"max_calibration_bytes", CLI_VALUE, "N",
     "cap on calibration data (bytes, K/M/G suffixes; 16G)"},
    {"output_path", CLI_VALUE, "RANGES.json",
     "where to write the ranges (<model stem>.ranges.json)"},
    {"trt_cache_out", CLI_VALUE, "FILE", "also write a TensorRT calibration cache"},
    {"trt_cache_in", CLI_VALUE, "FILE", "convert this TensorRT calibration cache to JSON, no run"},
    {"no_group_concat", CLI_BOOL, NULL, "do not share one range across each Concat's tensors"},
    {"image_mean", CLI_VALUE, "R,G,B", "image folders: mean after scaling to 0..1 (0,0,0)"},
    {"image_std", CLI_VALUE, "R,G,B", "image folders: std after scaling to 0..1 (1,1,1)"},
    {"image_bgr", CLI_BOOL, NULL, "image folders: channel order B,G,R"},
    {"threads", CLI_VALUE, "N", "engine threads (0: all cores)"},
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

static int parse_u64_size(const char *s, uint64_t *out) {
    errno = 0;
    char *end;
    if (!s || !isdigit((unsigned char)s[0])) return 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno) return 0;
    uint64_t mul = 1;
    if (*end) {
        char c = (char)toupper((unsigned char)*end++);
        if (c == 'K')
            mul = 1ULL << 10;
        else if (c == 'M')
            mul = 1ULL << 20;
        else if (c == 'G')
            mul = 1ULL << 30;
        else if (c == 'T')
            mul = 1ULL << 40;
        else
            return 0;
        if (*end == 'i' || *end == 'I') end++;
        if (*end == 'b' || *end == 'B') end++;
        if (*end) return 0;
    }
    if (v > UINT64_MAX / mul) return 0;
    *out = v * mul;
    return *out > 0;
}

static int parse_triple(const char *s, float out[3]) {
    char *end;
    for (int i = 0; i < 3; i++) {
        errno = 0;
        double v = strtod(s, &end);
        if (end == s || errno || !(v == v) || v > 1e30 || v < -1e30) return 0;
        out[i] = (float)v;
        if (i < 2 && *end != ',') return 0;
        s = end + 1;
    }
    return *end == '\0';
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

static int has_suffix(const char *s, const char *suf) {
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && strcasecmp(s + n - k, suf) == 0;
}

/* 1 when the folder holds images and no .npz/.npy shards. */
static int folder_is_images(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int images = 0, arrays = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        arrays += has_suffix(e->d_name, ".npz") || has_suffix(e->d_name, ".npy");
        images += has_suffix(e->d_name, ".png") || has_suffix(e->d_name, ".jpg") ||
                  has_suffix(e->d_name, ".jpeg");
    }
    closedir(d);
    return images > 0 && arrays == 0;
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

static enum qp_status make_provider(const struct cli_args *args, const char *data_path,
                                    const struct qp_npz_provider_input *in, size_t n,
                                    uint64_t max_bytes, struct qp_provider **out,
                                    struct qp_error *err) {
    if (!data_path) {
        struct qp_synthetic_input *s = calloc(n ? n : 1, sizeof *s);
        if (!s) return qp_error_set(err, QP_ERR_NOMEM, "calibrate: out of memory");
        for (size_t i = 0; i < n; i++) {
            s[i].name = in[i].name;
            s[i].dtype = in[i].dtype;
            s[i].rank = in[i].rank;
            memcpy(s[i].dims, in[i].batch_dims, sizeof s[i].dims);
        }
        enum qp_status st = qp_provider_synthetic_create(s, n, 0, 1, out, err);
        free(s);
        return st;
    }
    struct stat sb;
    if (stat(data_path, &sb) != 0)
        return qp_error_set(err, QP_ERR_IO, "%s: %s", data_path, strerror(errno));
    if (S_ISDIR(sb.st_mode) && folder_is_images(data_path)) {
        if (n != 1 || in[0].rank != 4 || in[0].dtype != QP_DTYPE_FLOAT)
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "%s: an image folder needs a model with one float input of rank 4",
                                data_path);
        const int64_t *d = in[0].batch_dims;
        struct qp_image_options o;
        qp_image_options_default(&o);
        int nhwc = d[1] != 3 && d[3] == 3;
        if (!nhwc && d[1] != 3)
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "%s: model input '%s' has no 3-channel axis (NCHW or NHWC) for "
                                "images",
                                data_path, in[0].name);
        o.layout = nhwc ? QP_IMAGE_NHWC : QP_IMAGE_NCHW;
        o.resize_h = nhwc ? d[1] : d[2];
        o.resize_w = nhwc ? d[2] : d[3];
        o.batch = d[0];
        o.drop_last = 1;
        o.scale = 1.0f / 255;
        o.bgr = cli_has(args, "image_bgr");
        const char *mean = cli_value(args, "image_mean", NULL);
        const char *sd = cli_value(args, "image_std", NULL);
        if (mean && !parse_triple(mean, o.mean))
            return qp_error_set(err, QP_ERR_USAGE, "--image_mean '%s' is not three numbers R,G,B",
                                mean);
        if (sd && !parse_triple(sd, o.std))
            return qp_error_set(err, QP_ERR_USAGE, "--image_std '%s' is not three numbers R,G,B",
                                sd);
        for (int c = 0; c < 3; c++)
            if (!(o.std[c] != 0))
                return qp_error_set(err, QP_ERR_USAGE, "--image_std has a zero entry");
        return qp_provider_images_create(data_path, in[0].name, &o, out, err);
    }
    struct qp_npz_provider_input *pi = calloc(n ? n : 1, sizeof *pi);
    if (!pi) return qp_error_set(err, QP_ERR_NOMEM, "calibrate: out of memory");
    for (size_t i = 0; i < n; i++) {
        pi[i].name = in[i].name;
        pi[i].dtype = in[i].dtype;
        pi[i].rank = in[i].rank;
        memcpy(pi[i].model_dims, in[i].model_dims, sizeof pi[i].model_dims);
        memcpy(pi[i].batch_dims, in[i].batch_dims, sizeof pi[i].batch_dims);
    }
    enum qp_status st = qp_provider_npz_create(data_path, pi, n, max_bytes, out, err);
    free(pi);
    return st;
}

/* --trt_cache_in: no run, just a conversion. */
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
    if (qp_ranges_save_json(r, &meta, out, &err) != QP_OK) goto fail;
    const char *cache_out = cli_value(args, "trt_cache_out", NULL);
    if (cache_out && qp_ranges_save_trt_cache(r, meta.method, QP_TRT_CACHE_DEFAULT_VERSION,
                                              cache_out, &err) != QP_OK)
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
    const char *ps = cli_value(args, "percentile", NULL);
    if (ps) {
        char *end;
        errno = 0;
        double p = strtod(ps, &end);
        if (end == ps || *end || errno || !(p > 0 && p <= 100))
            return bad_usage("--percentile '%s' is not a number in (0, 100]", ps);
        if (method != QP_CALIB_PERCENTILE)
            return bad_usage("%s", "--percentile needs --calibration_method percentile");
        o.calib.percentile = p;
    }
    uint64_t max_bytes = QP_CALIB_DEFAULT_MAX_BYTES;
    const char *mb = cli_value(args, "max_calibration_bytes", NULL);
    if (mb && !parse_u64_size(mb, &max_bytes))
        return bad_usage("--max_calibration_bytes '%s' is not a positive byte count", mb);
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
    if (make_provider(args, data_path, in, n_in, max_bytes, &prov, &err) != QP_OK) goto fail;
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
    if (qp_ranges_save_json(r, &meta, out, &err) != QP_OK) goto fail;
    const char *cache_out = cli_value(args, "trt_cache_out", NULL);
    if (cache_out && qp_ranges_save_trt_cache(r, meta.method, QP_TRT_CACHE_DEFAULT_VERSION,
                                              cache_out, &err) != QP_OK)
        goto fail;
    if (!quiet)
        printf("wrote %zu ranges (%s, %llu samples%s) to %s\n", rep.n_tensors, meta.method,
               (unsigned long long)rep.n_samples, synthetic ? ", SYNTHETIC data" : "", out);
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
