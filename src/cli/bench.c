/*
 * qplace bench MODEL [--shape NAME=1x3x224x224 ...] [--iterations N] [--warmup N] [--threads N]
 *                    [--json] [--compare-ort] [--check]
 *
 * Latency of the engine on deterministic inputs: median, min and mean over N timed runs after
 * the warm-up runs, throughput (items per second from the median, items = the first input's
 * leading dimension) and the process's peak RSS (getrusage ru_maxrss, which includes loading).
 * --compare-ort runs ONNX Runtime (onnxruntime-node, bench/ort_bench.js) in a child process on
 * the same model, inputs (written to a temporary folder), thread count (intra-op N, inter-op 1,
 * sequential execution), warm-up and iterations, and prints both and the ratios qplace/ORT.
 * --check (with --compare-ort) also compares every output, |q - o| <= 1e-4 + 1e-3 * |o|, and
 * exits 3 when they differ: what the `real` test uses.
 *
 * The measurement itself (shapes, deterministic inputs, warm-up and timed runs, median/min/mean)
 * is the library's, src/runtime/bench.h; this file parses the flags, runs ONNX Runtime and
 * prints.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "autotune/latency.h"
#include "cli.h"
#include "ir/ir.h"
#include "kernels/isa.h"
#include "runtime/bench.h"
#include "qplace/array.h"
#include "qplace/model.h"
#include "qplace/session.h"

const struct cli_opt cli_bench_opts[] = {
    {"shape", CLI_MULTI, "NAME=1x3x224x224", "shape of a graph input (repeatable)"},
    {"iterations", CLI_VALUE, "N", "timed runs (default 20)"},
    {"warmup", CLI_VALUE, "N", "untimed runs first (default 3)"},
    {"threads", CLI_VALUE, "N", "kernel threads (default: all cores)"},
    {"json", CLI_BOOL, NULL, "print one JSON object (keys in bench/README.md)"},
    {"compare_ort", CLI_BOOL, NULL, "also run ONNX Runtime (onnxruntime-node) and print ratios"},
    {"check", CLI_BOOL, NULL, "with --compare-ort: outputs must agree (rtol 1e-3, atol 1e-4)"},
    {"ort_script", CLI_VALUE, "FILE", "ORT runner (default: bench/ort_bench.js of the source)"},
    {"ort_npm", CLI_VALUE, "DIR", "folder holding node_modules/onnxruntime-node"},
    {"int8", CLI_VALUE, "auto|off|exact",
     "the integer path on Q/DQ models (default auto; exact: off's bits, faster)"},
    {"explain", CLI_BOOL, NULL, "list what each Q/DQ node fused into, or why it runs alone"},
    {0},
};

const char cli_bench_details[] =
    "Runs MODEL on deterministic pseudo-random inputs (seeded; float inputs uniform in [0, 1),\n"
    "integer inputs 0, bool false) and reports median/min/mean latency, throughput and peak RSS.\n"
    "Inputs with symbolic or unknown dimensions need --shape. With --compare-ort, node\n"
    "(QP_NODE or `node` on PATH) runs bench/ort_bench.js on the same model and inputs; the\n"
    "script and npm folder default to the source tree next to the build folder (override with\n"
    "--ort-script / --ort-npm or QP_ORT_SCRIPT / QP_ORT_NPM).\n";

#define BENCH_MAX_INPUTS 64
#define BENCH_MAX_FILES  (2 * BENCH_MAX_INPUTS + 2)
#define BENCH_PATH       (PATH_MAX + 128) /* a temporary folder plus a file name */

/* One engine's row of the report. */
struct stats {
    double median_ms, min_ms, mean_ms, items_per_s;
    long peak_rss_kb;
};

struct flags {
    const char *path;
    long iters, warm, threads;
    int json, compare, check, int8, explain;
    size_t n_user; /* --shape flags */
};

/* The --shape flags, parsed (names point into `names`). */
struct shape_flags {
    struct qp_shape shapes[BENCH_MAX_INPUTS];
    char names[BENCH_MAX_INPUTS][256];
};

/* What --compare-ort leaves: the temporary folder and its files, ORT's result and the output
 * comparison. */
struct ort {
    char tmpdir[PATH_MAX];
    char files[BENCH_MAX_FILES][32];
    size_t n_files;
    cJSON *result; /* result.json of the runner */
    struct stats st;
    double max_diff;
    int mismatch;
};

static int parse_count(const char *s, const char *flag, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "qplace bench: --%s: '%s' is not an integer in [%ld, %ld]\n", flag, s, lo,
                hi);
        return 0;
    }
    *out = v;
    return 1;
}

/* "NAME=1x3x224x224" into *sh (name borrowed from the argument). */
static int parse_shape(const char *arg, struct qp_shape *sh, char *names, size_t names_size) {
    const char *eq = strrchr(arg, '=');
    if (!eq || eq == arg || (size_t)(eq - arg) >= names_size) return 0;
    memcpy(names, arg, (size_t)(eq - arg));
    names[eq - arg] = 0;
    sh->name = names;
    sh->rank = 0;
    const char *p = eq + 1;
    if (!*p) return 1; /* scalar */
    for (;;) {
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (errno || end == p || v < 0 || v > (1ll << 40) || sh->rank >= QP_MAX_RANK) return 0;
        sh->dims[sh->rank++] = v;
        if (!*end) return 1;
        if (*end != 'x' && *end != 'X' && *end != ',') return 0;
        p = end + 1;
    }
}

/* Every flag but --shape's values; 0, or the exit code after the message. */
static int parse_flags(const struct cli_args *args, struct flags *f) {
    *f = (struct flags){.path = args->pos[0], .iters = 20, .warm = 3};
    if (cli_has(args, "iterations") &&
        !parse_count(cli_value(args, "iterations", ""), "iterations", 1, 1000000, &f->iters))
        return 1;
    if (cli_has(args, "warmup") &&
        !parse_count(cli_value(args, "warmup", ""), "warmup", 0, 1000000, &f->warm))
        return 1;
    if (cli_has(args, "threads") &&
        !parse_count(cli_value(args, "threads", ""), "threads", 1, 1024, &f->threads))
        return 1;
    if ((f->int8 = cli_int8_mode(args, "bench")) < 0) return 1;
    f->explain = cli_has(args, "explain");
    f->json = cli_has(args, "json");
    f->compare = cli_has(args, "compare_ort");
    f->check = cli_has(args, "check");
    if (f->check && !f->compare) {
        fprintf(stderr, "qplace bench: --check needs --compare-ort\n");
        return 1;
    }
    f->n_user = cli_count(args, "shape");
    if (f->n_user > BENCH_MAX_INPUTS) {
        fprintf(stderr, "qplace bench: at most %d --shape flags\n", BENCH_MAX_INPUTS);
        return 1;
    }
    return 0;
}

static int parse_shapes(const struct cli_args *args, size_t n, struct shape_flags *sf) {
    for (size_t i = 0; i < n; i++) {
        const char *a = cli_value_at(args, "shape", i);
        if (!parse_shape(a, &sf->shapes[i], sf->names[i], sizeof sf->names[i])) {
            fprintf(stderr,
                    "qplace bench: --shape '%s': expected NAME=DxDx... (e.g. x=1x3x224x224)\n", a);
            return 1;
        }
    }
    return 0;
}

static int is_fed(const struct qp_value *v) {
    return v->is_graph_input && v->initializer < 0 && v->name;
}

/* The problems qp_bench_input_shapes would refuse, reported as flag errors with the --shape
 * hint (the library knows no flags); 0, or the exit code after the message. */
static int check_shape_flags(const struct qp_graph *g, const char *path, size_t n_user,
                             const struct qp_shape *user) {
    for (size_t k = 0; k < n_user; k++) {
        int idx = qp_graph_find_value(g, user[k].name);
        if (idx < 0 || !is_fed(&g->values[idx])) {
            fprintf(stderr, "qplace bench: --shape %s: model '%s' has no input named '%s'\n",
                    user[k].name, path, user[k].name);
            return 2;
        }
    }
    for (size_t i = 0; i < g->n_values; i++) {
        const struct qp_value *v = &g->values[i];
        if (!is_fed(v)) continue;
        int given = 0;
        for (size_t k = 0; k < n_user; k++)
            given |= strcmp(user[k].name, v->name) == 0;
        if (given) continue;
        if (v->rank < 0) {
            fprintf(stderr, "qplace bench: input '%s' has an unknown rank: give --shape %s=...\n",
                    v->name, v->name);
            return 1;
        }
        for (int d = 0; d < v->rank; d++)
            if (v->dims[d].value < 0) {
                const char *prm = v->dims[d].param;
                fprintf(stderr,
                        "qplace bench: input '%s' dimension %d is %s%s%s: give --shape %s=...\n",
                        v->name, d, prm ? "'" : "unknown", prm ? prm : "", prm ? "'" : "", v->name);
                return 1;
            }
    }
    return 0;
}

/* The OpenMP waiting policy this process runs with (chosen by cli_choose_omp_wait at start or
 * set by the user): it moves latencies by up to 1.5x, so the report says which. */
static void omp_wait_desc(char *buf, size_t n) {
    const char *pol = getenv("OMP_WAIT_POLICY"), *spin = getenv("GOMP_SPINCOUNT");
    if (pol && *pol)
        snprintf(buf, n, "OMP_WAIT_POLICY=%s", pol);
    else if (spin && *spin)
        snprintf(buf, n, "GOMP_SPINCOUNT=%s", spin);
    else
        snprintf(buf, n, "libgomp default");
}

/* ---- --compare-ort: bench/ort_bench.js under node, in a child process ---------------------- */

static int write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    int ok = fwrite(data, 1, n, f) == n;
    ok = (fclose(f) == 0) && ok;
    return ok;
}

static void *read_file(const char *path, size_t *n_out) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    void *buf = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1))) {
        if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
            free(buf);
            buf = NULL;
        } else {
            ((char *)buf)[n] = 0;
            *n_out = (size_t)n;
        }
    }
    fclose(f);
    return buf;
}

/* Folder of the running executable's parent (the source tree for build-* folders). */
static void default_path(const char *env, const char *rel, char *out, size_t size) {
    const char *e = getenv(env);
    if (e && e[0]) {
        snprintf(out, size, "%s", e);
        return;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        snprintf(out, size, "%s", rel);
        return;
    }
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0; /* build dir */
    slash = strrchr(exe, '/');
    if (slash) *slash = 0; /* its parent */
    snprintf(out, size, "%s/%s", exe, rel);
}

/* Records file `name` of the temporary folder (removed at the end) and writes its path to p. */
static void ort_file(struct ort *o, const char *name, char *p, size_t size) {
    snprintf(o->files[o->n_files], sizeof o->files[0], "%s", name);
    snprintf(p, size, "%s/%s", o->tmpdir, o->files[o->n_files++]);
}

static void ort_cleanup(struct ort *o) {
    if (o->tmpdir[0]) {
        char p[BENCH_PATH];
        for (size_t i = 0; i < o->n_files; i++) {
            snprintf(p, sizeof p, "%s/%s", o->tmpdir, o->files[i]);
            unlink(p);
        }
        rmdir(o->tmpdir);
    }
    cJSON_Delete(o->result);
}

/* The inputs as files and their entries in spec["inputs"]; 0, or the exit code. */
static int ort_spec_inputs(struct ort *o, cJSON *ins, const struct qp_session *s,
                           const struct qp_array *inputs, size_t n_in) {
    char p[BENCH_PATH], name[32];
    for (size_t i = 0; i < n_in; i++) {
        const char *ty = qp_latency_ort_type(inputs[i].dtype);
        if (!ty) {
            fprintf(stderr, "qplace bench: --compare-ort: input '%s' has dtype %s\n",
                    qp_session_input_name(s, i), qp_dtype_name(inputs[i].dtype));
            return 2;
        }
        snprintf(name, sizeof name, "in%zu.bin", i);
        ort_file(o, name, p, sizeof p);
        if (!write_file(p, inputs[i].data, inputs[i].nbytes)) {
            fprintf(stderr, "qplace bench: cannot write %s\n", p);
            return 3;
        }
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", qp_session_input_name(s, i));
        cJSON_AddStringToObject(e, "type", ty);
        cJSON_AddStringToObject(e, "file", p);
        cJSON *dims = cJSON_AddArrayToObject(e, "dims");
        for (int d = 0; d < inputs[i].rank; d++)
            cJSON_AddItemToArray(dims, cJSON_CreateNumber((double)inputs[i].dims[d]));
        cJSON_AddItemToArray(ins, e);
    }
    return 0;
}

/* The runner's spec (inputs, outputs, model, threads, counts) in spec_path; 0, or the exit
 * code after the message. */
static int ort_write_spec(struct ort *o, const struct flags *f, int n_threads,
                          const struct qp_session *s, const struct qp_array *inputs, size_t n_in,
                          char *spec_path, size_t size) {
    cJSON *spec = cJSON_CreateObject(), *ins = cJSON_AddArrayToObject(spec, "inputs");
    int rc = ort_spec_inputs(o, ins, s, inputs, n_in);
    if (rc) {
        cJSON_Delete(spec);
        return rc;
    }
    cJSON *outs = cJSON_AddArrayToObject(spec, "outputs");
    char p[BENCH_PATH], name[32];
    size_t n_out = qp_session_n_outputs(s);
    for (size_t i = 0; i < n_out && o->n_files < BENCH_MAX_FILES - 2; i++) {
        snprintf(name, sizeof name, "out%zu.bin", i);
        ort_file(o, name, p, sizeof p);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", qp_session_output_name(s, i));
        cJSON_AddStringToObject(e, "file", p);
        cJSON_AddItemToArray(outs, e);
    }
    cJSON_AddStringToObject(spec, "model", f->path);
    cJSON_AddNumberToObject(spec, "threads", n_threads);
    cJSON_AddNumberToObject(spec, "warmup", (double)f->warm);
    cJSON_AddNumberToObject(spec, "iterations", (double)f->iters);
    char *text = cJSON_Print(spec);
    cJSON_Delete(spec);
    ort_file(o, "spec.json", spec_path, size);
    ort_file(o, "result.json", p, sizeof p);
    int wrote = text && write_file(spec_path, text, strlen(text));
    free(text);
    if (!wrote) {
        fprintf(stderr, "qplace bench: cannot write %s\n", spec_path);
        return 3;
    }
    return 0;
}

/* node SCRIPT --npm DIR --spec SPEC --result RESULT; 0, or the exit code after the message. */
static int ort_spawn(const struct cli_args *args, const char *spec, const char *result) {
    char script[BENCH_PATH], npm[BENCH_PATH];
    if (cli_has(args, "ort_script"))
        snprintf(script, sizeof script, "%s", cli_value(args, "ort_script", ""));
    else
        default_path("QP_ORT_SCRIPT", "bench/ort_bench.js", script, sizeof script);
    if (cli_has(args, "ort_npm"))
        snprintf(npm, sizeof npm, "%s", cli_value(args, "ort_npm", ""));
    else
        default_path("QP_ORT_NPM", ".cache/npm", npm, sizeof npm);
    const char *node = getenv("QP_NODE");
    if (!node || !node[0]) node = "node";
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "qplace bench: fork: %s\n", strerror(errno));
        return 3;
    }
    if (pid == 0) {
        /* stdout of the child goes to stderr: ours carries only the report. */
        dup2(2, 1);
        execlp(node, node, script, "--npm", npm, "--spec", spec, "--result", result, (char *)NULL);
        fprintf(stderr, "qplace bench: cannot run %s: %s\n", node, strerror(errno));
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "qplace bench: ONNX Runtime runner %s failed (exit %d)\n", script,
                WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        return 3;
    }
    return 0;
}

/* ORT's timings from result.json into o->st; 0, or the exit code after the message. */
static int ort_read_result(struct ort *o, const char *result, int64_t items) {
    size_t len = 0;
    char *text = read_file(result, &len);
    o->result = text ? cJSON_Parse(text) : NULL;
    free(text);
    if (!o->result) {
        fprintf(stderr, "qplace bench: unreadable ONNX Runtime result %s\n", result);
        return 3;
    }
    struct stats *st = &o->st;
    st->median_ms = cJSON_GetNumberValue(cJSON_GetObjectItem(o->result, "median_ms"));
    st->min_ms = cJSON_GetNumberValue(cJSON_GetObjectItem(o->result, "min_ms"));
    st->mean_ms = cJSON_GetNumberValue(cJSON_GetObjectItem(o->result, "mean_ms"));
    st->peak_rss_kb = (long)cJSON_GetNumberValue(cJSON_GetObjectItem(o->result, "peak_rss_kb"));
    st->items_per_s = st->median_ms > 0 ? (double)items * 1e3 / st->median_ms : 0;
    return 0;
}

/* Output i of the last qplace run against ORT's bytes `ob` (nb of them): floats within
 * |q - o| <= 1e-4 + 1e-3 |o| (the first difference printed), others exactly. */
static void ort_compare_one(struct ort *o, const char *name, const struct qp_array *v,
                            const void *ob, size_t nb) {
    if (v->dtype != QP_DTYPE_FLOAT) {
        if (memcmp(v->data, ob, nb) != 0) {
            fprintf(stderr, "qplace bench: output '%s' differs from ONNX Runtime\n", name);
            o->mismatch = 1;
        }
        return;
    }
    const float *a = v->data, *b = ob;
    for (size_t k = 0; k < nb / 4; k++) {
        double d = fabs((double)a[k] - (double)b[k]);
        if (d > o->max_diff || isnan(d)) o->max_diff = isnan(d) ? INFINITY : d;
        if (!(d <= 1e-4 + 1e-3 * fabs((double)b[k]))) {
            if (!o->mismatch)
                fprintf(stderr,
                        "qplace bench: output '%s' element %zu: qplace %.9g, ONNX Runtime %.9g\n",
                        name, k, a[k], b[k]);
            o->mismatch = 1;
        }
    }
}

/* Every output of the last qplace run against ORT's files; 0, or the exit code. */
static int ort_compare(struct ort *o, const struct qp_session *s) {
    struct qp_error err = {0};
    char p[BENCH_PATH];
    for (size_t i = 0; i < qp_session_n_outputs(s); i++) {
        struct qp_array v;
        if (qp_session_output(s, i, &v, &err) != QP_OK) return cli_fail(&err);
        snprintf(p, sizeof p, "%s/out%zu.bin", o->tmpdir, i);
        size_t nb = 0;
        void *ob = read_file(p, &nb);
        if (!ob || nb != v.nbytes) {
            fprintf(stderr, "qplace bench: output '%s': ONNX Runtime gave %zu bytes, qplace %zu\n",
                    qp_session_output_name(s, i), nb, v.nbytes);
            o->mismatch = 1;
        } else {
            ort_compare_one(o, qp_session_output_name(s, i), &v, ob, nb);
        }
        free(ob);
    }
    return 0;
}

/* --compare-ort: the same model, inputs, threads and counts under ONNX Runtime, in a private
 * temporary folder; 0, or the exit code after the message. */
static int ort_run(const struct cli_args *args, const struct flags *f, int n_threads,
                   const struct qp_session *s, const struct qp_array *inputs, size_t n_in,
                   int64_t items, struct ort *o) {
    const char *td = getenv("TMPDIR");
    snprintf(o->tmpdir, sizeof o->tmpdir, "%s/qplace-bench-XXXXXX", td && td[0] ? td : "/tmp");
    if (!mkdtemp(o->tmpdir)) {
        fprintf(stderr, "qplace bench: cannot create a temporary folder in %s: %s\n",
                td && td[0] ? td : "/tmp", strerror(errno));
        o->tmpdir[0] = 0;
        return 3;
    }
    char spec[BENCH_PATH], result[BENCH_PATH];
    int rc = ort_write_spec(o, f, n_threads, s, inputs, n_in, spec, sizeof spec);
    snprintf(result, sizeof result, "%s/result.json", o->tmpdir);
    if (!rc) rc = ort_spawn(args, spec, result);
    if (!rc) rc = ort_read_result(o, result, items);
    if (!rc) rc = ort_compare(o, s);
    return rc;
}

/* ---- the report ----------------------------------------------------------------------------- */

static double ratio(double a, double b) {
    return b > 0 ? a / b : 0;
}

static cJSON *add_stats_json(cJSON *r, const char *key, const struct stats *st) {
    cJSON *j = cJSON_AddObjectToObject(r, key);
    cJSON_AddNumberToObject(j, "median_ms", st->median_ms);
    cJSON_AddNumberToObject(j, "min_ms", st->min_ms);
    cJSON_AddNumberToObject(j, "mean_ms", st->mean_ms);
    cJSON_AddNumberToObject(j, "items_per_s", st->items_per_s);
    cJSON_AddNumberToObject(j, "peak_rss_kb", (double)st->peak_rss_kb);
    return j;
}

/* The --json report (keys in bench/README.md); o is NULL without --compare-ort. */
static void print_json(const struct flags *f, int n_threads, const char *wait_desc,
                       const struct stats *q, const struct ort *o) {
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "model", f->path);
    cJSON_AddNumberToObject(r, "threads", n_threads);
    cJSON_AddNumberToObject(r, "iterations", (double)f->iters);
    cJSON_AddNumberToObject(r, "warmup", (double)f->warm);
    cJSON_AddStringToObject(r, "omp_wait", wait_desc);
    cJSON_AddStringToObject(r, "isa", qp_session_isa());
    cJSON_AddStringToObject(r, "cpu_isa", qp_isa_name(qp_cpu_isa()));
    cJSON_AddStringToObject(r, "int8", cli_int8_name(f->int8));
    add_stats_json(r, "qplace", q);
    if (o) {
        cJSON *oj = add_stats_json(r, "ort", &o->st);
        const char *version = cJSON_GetStringValue(cJSON_GetObjectItem(o->result, "version"));
        cJSON_AddStringToObject(oj, "version", version ? version : "");
        cJSON *ra = cJSON_AddObjectToObject(r, "ratio");
        cJSON_AddNumberToObject(ra, "latency", ratio(q->median_ms, o->st.median_ms));
        cJSON_AddNumberToObject(ra, "rss",
                                ratio((double)q->peak_rss_kb, (double)o->st.peak_rss_kb));
        cJSON_AddNumberToObject(r, "max_abs_diff", o->max_diff);
        cJSON_AddBoolToObject(r, "outputs_match", !o->mismatch);
    }
    char *text = cJSON_Print(r);
    cJSON_Delete(r);
    if (text) printf("%s\n", text);
    free(text);
}

static void print_row(const char *engine, const struct stats *st) {
    printf("%-8s %11.2f %11.2f %11.2f %12.2f %13.1f\n", engine, st->median_ms, st->min_ms,
           st->mean_ms, st->items_per_s, (double)st->peak_rss_kb / 1024.0);
}

static void print_text(const struct flags *f, int n_threads, const char *wait_desc,
                       const struct stats *q, const struct ort *o) {
    printf("model       %s\nthreads     %d\niterations  %ld (warm-up %ld)\nomp wait    %s\n"
           "isa         %s (CPU: %s)\nint8        %s\n",
           f->path, n_threads, f->iters, f->warm, wait_desc, qp_session_isa(),
           qp_isa_name(qp_cpu_isa()), cli_int8_name(f->int8));
    printf("%-8s %11s %11s %11s %12s %13s\n", "engine", "median_ms", "min_ms", "mean_ms", "items/s",
           "peak_rss_MB");
    print_row("qplace", q);
    if (o) {
        print_row("ort", &o->st);
        printf("ratio qplace/ort: latency %.3f, peak RSS %.3f\n",
               ratio(q->median_ms, o->st.median_ms),
               ratio((double)q->peak_rss_kb, (double)o->st.peak_rss_kb));
        printf("outputs: max |qplace - ort| %.3g, %s (rtol 1e-3, atol 1e-4)\n", o->max_diff,
               o->mismatch ? "DIFFER" : "agree");
    }
}

/* ---- the command ------------------------------------------------------------------------------
 */

int cli_bench_run(const struct cli_args *args) {
    struct flags f;
    int rc = parse_flags(args, &f);
    if (rc) return rc;
    struct qp_error err = {0};
    struct shape_flags *sf = calloc(1, sizeof *sf);
    struct ort *ort = calloc(1, sizeof *ort);
    struct qp_model *m = NULL;
    struct qp_session *s = NULL;
    struct qp_shape *shapes = NULL;
    struct qp_array *inputs = NULL;
    size_t n_shapes = 0, n_in = 0;
    struct qp_bench_result res = {0};
    rc = 3;
    if (!sf || !ort) {
        fprintf(stderr, "qplace bench: out of memory\n");
        goto done;
    }
    if ((rc = parse_shapes(args, f.n_user, sf))) goto done;
    if (qp_model_load_file(f.path, NULL, &m, &err) != QP_OK) goto fail;
    if ((rc = check_shape_flags(qp_model_graph(m), f.path, f.n_user, sf->shapes))) goto done;
    /* Every input gets a concrete shape: --shape, else the model's static one. */
    if (qp_bench_input_shapes(m, f.n_user, sf->shapes, &shapes, &n_shapes, &err) != QP_OK)
        goto fail;
    struct qp_session_options so = {.n_threads = (int)f.threads, .int8 = f.int8};
    if (qp_session_create(m, &so, n_shapes, shapes, &s, &err) != QP_OK) goto fail;
    n_in = qp_session_n_inputs(s);
    if (n_in > BENCH_MAX_INPUTS) {
        fprintf(stderr, "qplace bench: model '%s' has %zu inputs (at most %d)\n", f.path, n_in,
                BENCH_MAX_INPUTS);
        rc = 2;
        goto done;
    }
    if (qp_bench_inputs_create(s, n_shapes, shapes, &inputs, &err) != QP_OK) goto fail;
    struct qp_bench_options bo = {.warmup = (int)f.warm, .iterations = (int)f.iters};
    if (qp_bench_session(s, n_in, inputs, &bo, &res, &err) != QP_OK) goto fail;
    struct stats q = {.median_ms = res.median_ms,
                      .min_ms = res.min_ms,
                      .mean_ms = res.mean_ms,
                      .items_per_s = res.items_per_s};
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    q.peak_rss_kb = ru.ru_maxrss;
    int n_threads = (int)f.threads;
    if (!n_threads) {
        long np = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = np > 0 ? (int)np : 1;
    }
    if (f.compare && (rc = ort_run(args, &f, n_threads, s, inputs, n_in, res.items, ort)))
        goto done;
    char wait_desc[96];
    omp_wait_desc(wait_desc, sizeof wait_desc);
    if (f.json)
        print_json(&f, n_threads, wait_desc, &q, f.compare ? ort : NULL);
    else
        print_text(&f, n_threads, wait_desc, &q, f.compare ? ort : NULL);
    if (!f.json && f.int8 == QP_INT8_AUTO) cli_int8_summary(s, f.explain);
    if (!f.json && f.int8 == QP_INT8_EXACT)
        printf("int8 path   exact: the bits of --int8 off, Q/DQ pairs and elementwise chains in "
               "fewer passes\n");
    rc = f.check && ort->mismatch ? 3 : 0;
    goto done;
fail:
    rc = cli_fail(&err);
done:
    if (ort) ort_cleanup(ort);
    free(ort);
    qp_bench_result_release(&res);
    qp_bench_inputs_free(inputs, n_in);
    qp_session_free(s);
    qp_model_free(m);
    free(shapes);
    free(sf);
    return rc;
}
