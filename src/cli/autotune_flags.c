/* The autotune flags shared by `qplace autotune` and `qplace quantize --autotune`
 * (autotune_flags.h). */
#include "autotune_flags.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autotune/latency.h"
#include "autotune/trtexec.h"
#include "autotune_progress.h"
#include "cli.h"

const struct cli_autotune_names cli_autotune_standalone = {
    .cmd = "autotune",
    .output_dir = "output_dir",
    .schemes_per_region = "schemes_per_region",
    .pattern_cache = "pattern_cache",
    .qdq_baseline = "qdq_baseline",
    .state_file = "state_file",
    .backend = "backend",
    .use_trtexec = "use_trtexec",
    .timing_cache = "timing_cache",
    .trtexec_args = "trtexec_benchmark_args",
    .plugin_libraries = "plugin_libraries",
    .warmup_runs = "warmup_runs",
    .timing_runs = "timing_runs",
};

const struct cli_autotune_names cli_autotune_integrated = {
    .cmd = "quantize",
    .output_dir = "autotune_output_dir",
    .schemes_per_region = "autotune_schemes_per_region",
    .pattern_cache = "autotune_pattern_cache",
    .qdq_baseline = "autotune_qdq_baseline",
    .state_file = "autotune_state_file",
    .backend = "autotune_backend",
    .use_trtexec = "autotune_use_trtexec",
    .timing_cache = "autotune_timing_cache",
    .trtexec_args = "autotune_trtexec_args",
    .plugin_libraries = NULL, /* quantize refuses --trt_plugins: its engine cannot load them */
    .warmup_runs = "autotune_warmup_runs",
    .timing_runs = "autotune_timing_runs",
};

static int bad_usage(const struct cli_autotune_names *n, const char *fmt, const char *a) {
    fprintf(stderr, "qplace %s: ", n->cmd);
    fprintf(stderr, fmt, a);
    fprintf(stderr, "\nTry 'qplace help %s'.\n", n->cmd);
    return 1;
}

/* A count flag in [lo, hi]; absent leaves *out. 0 on a bad value. */
static int parse_count(const struct cli_args *a, const char *flag, long lo, long hi, long *out) {
    const char *s = cli_value(a, flag, NULL);
    if (!s) return 1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || !*s || *end || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

static int has(const struct cli_args *a, const char *flag) {
    return flag && cli_has(a, flag);
}

static enum qp_status make_trtexec(const struct cli_args *a, const struct cli_autotune_names *n,
                                   struct qp_latency_backend **out, struct qp_error *err) {
    size_t np = n->plugin_libraries ? cli_count(a, n->plugin_libraries) : 0;
    const char **plugins = calloc(np ? np : 1, sizeof *plugins);
    if (!plugins) return qp_error_set(err, QP_ERR_NOMEM, "autotune: out of memory");
    for (size_t i = 0; i < np; i++)
        plugins[i] = cli_value_at(a, n->plugin_libraries, i);
    struct qp_latency_trtexec_options o;
    qp_latency_trtexec_options_default(&o);
    o.timing_cache = cli_value(a, n->timing_cache, NULL);
    o.plugins = plugins;
    o.n_plugins = np;
    o.extra_args = cli_value(a, n->trtexec_args, NULL);
    enum qp_status st = qp_latency_trtexec_create(&o, out, err);
    free(plugins);
    return st;
}

/* The backend the flags ask for; 0 or the exit code. */
static int make_backend(const struct cli_args *a, const struct cli_autotune_names *n, int warmup,
                        int threads, struct qp_latency_backend **out) {
    const char *name = cli_value(a, n->backend, has(a, n->use_trtexec) ? "trtexec" : "builtin");
    char msg[256];
    if (has(a, n->use_trtexec) && strcmp(name, "trtexec") != 0) {
        snprintf(msg, sizeof msg, "--%s and --%s %%s disagree", n->use_trtexec, n->backend);
        return bad_usage(n, msg, name);
    }
    int trt = strcmp(name, "trtexec") == 0;
    if (!trt &&
        (has(a, n->timing_cache) || has(a, n->trtexec_args) || has(a, n->plugin_libraries))) {
        if (n->plugin_libraries)
            snprintf(msg, sizeof msg, "--%s, --%s and --%s need --%s trtexec", n->timing_cache,
                     n->trtexec_args, n->plugin_libraries, n->backend);
        else
            snprintf(msg, sizeof msg, "--%s and --%s need --%s trtexec", n->timing_cache,
                     n->trtexec_args, n->backend);
        return bad_usage(n, "%s", msg);
    }
    if (trt && has(a, n->warmup_runs)) {
        snprintf(msg, sizeof msg,
                 "--%s counts runs of builtin and ort; trtexec warms up for a time (its default "
                 "200 ms)",
                 n->warmup_runs);
        return bad_usage(n, "%s", msg);
    }
    struct qp_error err = {0};
    enum qp_status st;
    if (strcmp(name, "builtin") == 0) {
        struct qp_latency_builtin_options o;
        qp_latency_builtin_options_default(&o);
        o.n_threads = threads;
        if (warmup >= 0) o.warmup = warmup;
        o.shapes = cli_value(a, "calibration_shapes", NULL);
        st = qp_latency_builtin_create(&o, out, &err);
    } else if (strcmp(name, "ort") == 0) {
        struct qp_latency_ort_options o;
        qp_latency_ort_options_default(&o);
        o.n_threads = threads;
        if (warmup >= 0) o.warmup = warmup;
        o.shapes = cli_value(a, "calibration_shapes", NULL);
        st = qp_latency_ort_create(&o, out, &err);
    } else if (trt) {
        st = make_trtexec(a, n, out, &err);
    } else {
        snprintf(msg, sizeof msg, "--%s must be builtin, trtexec or ort, not '%%s'", n->backend);
        return bad_usage(n, msg, name);
    }
    if (st == QP_ERR_USAGE) return bad_usage(n, "%s", err.msg);
    return st == QP_OK ? 0 : cli_fail(&err);
}

/* A count flag into *out, or the usage message naming the flag and what it takes. */
static int count_flag(const struct cli_args *a, const struct cli_autotune_names *n,
                      const char *flag, long lo, long hi, const char *what, long *out) {
    if (parse_count(a, flag, lo, hi, out)) return 0;
    char msg[160];
    snprintf(msg, sizeof msg, "--%s: '%%s' is not %s", flag, what);
    return bad_usage(n, msg, cli_value(a, flag, ""));
}

int cli_autotune_flags(const struct cli_args *a, const struct cli_autotune_names *n,
                       struct qp_autotune_options *o, struct qp_latency_backend **backend_out) {
    long schemes = 0, runs = 10, warmup = -1, threads = 0;
    if (count_flag(a, n, n->schemes_per_region, 1, 1 << 20, "a positive count", &schemes) ||
        count_flag(a, n, n->timing_runs, 4, 100000, "a count >= 4", &runs) ||
        count_flag(a, n, n->warmup_runs, 0, 100000, "a count", &warmup) ||
        count_flag(a, n, "threads", 0, 4096, "a thread count", &threads))
        return 1;
    o->output_dir = cli_value(a, n->output_dir, NULL);
    o->schemes_per_pattern = (size_t)schemes;
    o->race.runs_per_round = (size_t)runs;
    o->n_threads = (int)threads;
    o->pattern_cache_in = cli_value(a, n->pattern_cache, NULL);
    o->qdq_baseline = cli_value(a, n->qdq_baseline, NULL);
    o->state_file = cli_value(a, n->state_file, NULL);
    return make_backend(a, n, (int)warmup, (int)threads, backend_out);
}

int cli_autotune_drift_flags(const struct cli_args *a, struct qp_autotune_options *o) {
    const struct cli_autotune_names *n = &cli_autotune_standalone;
    const char *s = cli_value(a, "max_output_drift", NULL);
    if (s) {
        double d = 0;
        if (!cli_parse_finite(s, &d) || !(d >= 0))
            return bad_usage(n, "--max_output_drift: '%s' is not a non-negative number", s);
        o->max_output_drift = d;
    }
    long v = QP_AUTOTUNE_DRIFT_SAMPLES;
    if (!parse_count(a, "drift_samples", 0, 1L << 30, &v))
        return bad_usage(n, "--drift_samples: '%s' is not a count",
                         cli_value(a, "drift_samples", ""));
    o->drift_samples = (size_t)v;
    o->eval_data_path = cli_value(a, "eval_data_path", NULL);
    return 0;
}

static volatile sig_atomic_t stop_requested;

static void on_sigint(int sig) {
    (void)sig;
    stop_requested = 1;
}

static struct cli_autotune_progress progress;

struct cli_autotune_progress *cli_autotune_watch(struct qp_autotune_options *o, int verbose) {
    progress = (struct cli_autotune_progress){
        .f = stderr, .bar = isatty(STDERR_FILENO), .verbose = verbose};
    o->progress = cli_autotune_progress_step;
    o->progress_user = &progress;
    o->stop = &stop_requested;
    return &progress;
}

void cli_autotune_sigint(struct sigaction *old_out) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, old_out);
}

void cli_autotune_sigint_restore(const struct sigaction *old) {
    sigaction(SIGINT, old, NULL);
    cli_autotune_progress_end(&progress);
}
