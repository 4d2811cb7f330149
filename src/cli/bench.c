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
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "cli.h"
#include "ir/ir.h"
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
#define BENCH_PATH       (PATH_MAX + 128) /* a temporary folder plus a file name */

struct stats {
    double median_ms, min_ms, mean_ms, items_per_s;
    long peak_rss_kb;
};

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

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

static const struct qp_value *find_input(const struct qp_graph *g, const char *name) {
    for (size_t i = 0; i < g->n_values; i++) {
        const struct qp_value *v = &g->values[i];
        if (v->is_graph_input && v->initializer < 0 && v->name && strcmp(v->name, name) == 0)
            return v;
    }
    return NULL;
}

/* xorshift64*: the same stream on every machine. */
static uint64_t next_rand(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

static void fill_input(struct qp_array *a, size_t index) {
    uint64_t s = 0x9E3779B97F4A7C15ull ^ (uint64_t)(index + 1);
    if (a->dtype == QP_DTYPE_FLOAT) {
        float *f = a->data;
        size_t n = a->nbytes / sizeof(float);
        for (size_t i = 0; i < n; i++)
            f[i] = (float)(next_rand(&s) >> 40) / 16777216.0f;
    } else if (a->dtype == QP_DTYPE_DOUBLE) {
        double *f = a->data;
        size_t n = a->nbytes / sizeof(double);
        for (size_t i = 0; i < n; i++)
            f[i] = (double)(next_rand(&s) >> 40) / 16777216.0;
    } /* integers and bool stay zero (qp_array_alloc zeroes) */
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

static const char *ort_type(enum qp_dtype dt) {
    switch (dt) {
    case QP_DTYPE_FLOAT:
        return "float32";
    case QP_DTYPE_DOUBLE:
        return "float64";
    case QP_DTYPE_INT64:
        return "int64";
    case QP_DTYPE_INT32:
        return "int32";
    case QP_DTYPE_INT8:
        return "int8";
    case QP_DTYPE_UINT8:
        return "uint8";
    case QP_DTYPE_BOOL:
        return "bool";
    default:
        return NULL;
    }
}

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

static void remove_tree(const char *dir, size_t n_files, char names[][32]) {
    char p[BENCH_PATH];
    for (size_t i = 0; i < n_files; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    rmdir(dir);
}

int cli_bench_run(const struct cli_args *args) {
    struct qp_error err = {0};
    const char *path = args->pos[0];
    long iters = 20, warm = 3, threads = 0;
    if (cli_has(args, "iterations") &&
        !parse_count(cli_value(args, "iterations", ""), "iterations", 1, 1000000, &iters))
        return 1;
    if (cli_has(args, "warmup") &&
        !parse_count(cli_value(args, "warmup", ""), "warmup", 0, 1000000, &warm))
        return 1;
    if (cli_has(args, "threads") &&
        !parse_count(cli_value(args, "threads", ""), "threads", 1, 1024, &threads))
        return 1;
    int json = cli_has(args, "json"), compare = cli_has(args, "compare_ort");
    int check = cli_has(args, "check");
    if (check && !compare) {
        fprintf(stderr, "qplace bench: --check needs --compare-ort\n");
        return 1;
    }
    size_t n_user = cli_count(args, "shape");
    if (n_user > BENCH_MAX_INPUTS) {
        fprintf(stderr, "qplace bench: at most %d --shape flags\n", BENCH_MAX_INPUTS);
        return 1;
    }
    struct qp_shape *shapes = calloc(BENCH_MAX_INPUTS, sizeof *shapes);
    char(*names)[256] = calloc(BENCH_MAX_INPUTS, sizeof *names);
    struct qp_array *inputs = calloc(BENCH_MAX_INPUTS, sizeof *inputs);
    double *times = calloc((size_t)iters, sizeof *times);
    struct qp_model *m = NULL;
    struct qp_session *s = NULL;
    char tmpdir[PATH_MAX] = "";
    char files[2 * BENCH_MAX_INPUTS + 2][32];
    size_t n_files = 0;
    char *ort_out = NULL;
    cJSON *ort = NULL;
    int rc = 3;
    if (!shapes || !names || !inputs || !times) {
        fprintf(stderr, "qplace bench: out of memory\n");
        goto done;
    }
    for (size_t i = 0; i < n_user; i++) {
        const char *a = cli_value_at(args, "shape", i);
        if (!parse_shape(a, &shapes[i], names[i], sizeof names[i])) {
            fprintf(stderr,
                    "qplace bench: --shape '%s': expected NAME=DxDx... (e.g. x=1x3x224x224)\n", a);
            rc = 1;
            goto done;
        }
    }
    if (qp_model_load_file(path, NULL, &m, &err) != QP_OK) {
        rc = cli_fail(&err);
        goto done;
    }
    const struct qp_graph *g = qp_model_graph(m);
    /* Every input gets a concrete shape: --shape, else the model's static one. */
    size_t n_shapes = n_user;
    for (size_t i = 0; i < n_user; i++)
        if (!find_input(g, shapes[i].name)) {
            fprintf(stderr, "qplace bench: --shape %s: model '%s' has no input named '%s'\n",
                    shapes[i].name, path, shapes[i].name);
            rc = 2;
            goto done;
        }
    {
        struct qp_session_options o = {.n_threads = (int)threads};
        /* Shapes for inputs without --shape come from the model. */
        for (size_t i = 0; i < g->n_values && n_shapes < BENCH_MAX_INPUTS; i++) {
            const struct qp_value *v = &g->values[i];
            if (!v->is_graph_input || v->initializer >= 0 || !v->name) continue;
            int given = 0;
            for (size_t k = 0; k < n_user; k++)
                given |= strcmp(shapes[k].name, v->name) == 0;
            if (given) continue;
            if (v->rank < 0) {
                fprintf(stderr,
                        "qplace bench: input '%s' has an unknown rank: give --shape %s=...\n",
                        v->name, v->name);
                rc = 1;
                goto done;
            }
            struct qp_shape *sh = &shapes[n_shapes++];
            sh->name = v->name;
            sh->rank = v->rank;
            for (int d = 0; d < v->rank; d++) {
                if (v->dims[d].value < 0) {
                    fprintf(
                        stderr,
                        "qplace bench: input '%s' dimension %d is %s%s%s: give --shape %s=...\n",
                        v->name, d, v->dims[d].param ? "'" : "unknown",
                        v->dims[d].param ? v->dims[d].param : "", v->dims[d].param ? "'" : "",
                        v->name);
                    rc = 1;
                    goto done;
                }
                sh->dims[d] = v->dims[d].value;
            }
        }
        if (qp_session_create(m, &o, n_shapes, shapes, &s, &err) != QP_OK) {
            rc = cli_fail(&err);
            goto done;
        }
    }
    size_t n_in = qp_session_n_inputs(s);
    if (n_in > BENCH_MAX_INPUTS) {
        fprintf(stderr, "qplace bench: model '%s' has %zu inputs (at most %d)\n", path, n_in,
                BENCH_MAX_INPUTS);
        rc = 2;
        goto done;
    }
    int64_t items = 1;
    for (size_t i = 0; i < n_in; i++) {
        const char *nm = qp_session_input_name(s, i);
        const struct qp_shape *sh = NULL;
        for (size_t k = 0; k < n_shapes; k++)
            if (strcmp(shapes[k].name, nm) == 0) sh = &shapes[k];
        if (!sh) {
            fprintf(stderr, "qplace bench: no shape for input '%s'\n", nm);
            rc = 1;
            goto done;
        }
        if (qp_array_alloc(&inputs[i], qp_session_input_dtype(s, i), sh->rank, sh->dims, &err)) {
            rc = cli_fail(&err);
            goto done;
        }
        fill_input(&inputs[i], i);
        if (i == 0 && sh->rank > 0) items = sh->dims[0];
    }
    /* Warm-up (the first run may plan), then timed runs. */
    for (long i = 0; i < warm; i++)
        if (qp_session_run(s, n_in, inputs, &err) != QP_OK) {
            rc = cli_fail(&err);
            goto done;
        }
    for (long i = 0; i < iters; i++) {
        double t0 = (1e3 * qp_clock_seconds());
        if (qp_session_run(s, n_in, inputs, &err) != QP_OK) {
            rc = cli_fail(&err);
            goto done;
        }
        times[i] = (1e3 * qp_clock_seconds()) - t0;
    }
    struct stats q = {0};
    {
        double sum = 0;
        for (long i = 0; i < iters; i++)
            sum += times[i];
        qsort(times, (size_t)iters, sizeof *times, cmp_double);
        q.min_ms = times[0];
        q.median_ms =
            iters % 2 ? times[iters / 2] : 0.5 * (times[iters / 2 - 1] + times[iters / 2]);
        q.mean_ms = sum / (double)iters;
        q.items_per_s = q.median_ms > 0 ? (double)items * 1e3 / q.median_ms : 0;
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        q.peak_rss_kb = ru.ru_maxrss;
    }
    int n_threads_used = threads ? (int)threads : 0;
    if (!n_threads_used) {
        long np = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads_used = np > 0 ? (int)np : 1;
    }
    struct stats o = {0};
    double max_diff = 0;
    int mismatch = 0;
    if (compare) {
        /* Inputs and a spec for the ORT runner in a private temporary folder. */
        const char *td = getenv("TMPDIR");
        snprintf(tmpdir, sizeof tmpdir, "%s/qplace-bench-XXXXXX", td && td[0] ? td : "/tmp");
        if (!mkdtemp(tmpdir)) {
            fprintf(stderr, "qplace bench: cannot create a temporary folder in %s: %s\n",
                    td && td[0] ? td : "/tmp", strerror(errno));
            tmpdir[0] = 0;
            goto done;
        }
        cJSON *spec = cJSON_CreateObject(), *ins = cJSON_AddArrayToObject(spec, "inputs");
        char p[BENCH_PATH];
        for (size_t i = 0; i < n_in; i++) {
            const char *ty = ort_type(inputs[i].dtype);
            if (!ty) {
                fprintf(stderr, "qplace bench: --compare-ort: input '%s' has dtype %s\n",
                        qp_session_input_name(s, i), qp_dtype_name(inputs[i].dtype));
                cJSON_Delete(spec);
                rc = 2;
                goto done;
            }
            snprintf(files[n_files], sizeof files[0], "in%zu.bin", i);
            snprintf(p, sizeof p, "%s/%s", tmpdir, files[n_files++]);
            if (!write_file(p, inputs[i].data, inputs[i].nbytes)) {
                fprintf(stderr, "qplace bench: cannot write %s\n", p);
                cJSON_Delete(spec);
                goto done;
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
        cJSON *outs = cJSON_AddArrayToObject(spec, "outputs");
        size_t n_out = qp_session_n_outputs(s);
        for (size_t i = 0; i < n_out && n_files < sizeof files / sizeof files[0] - 2; i++) {
            snprintf(files[n_files], sizeof files[0], "out%zu.bin", i);
            snprintf(p, sizeof p, "%s/%s", tmpdir, files[n_files++]);
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "name", qp_session_output_name(s, i));
            cJSON_AddStringToObject(e, "file", p);
            cJSON_AddItemToArray(outs, e);
        }
        cJSON_AddStringToObject(spec, "model", path);
        cJSON_AddNumberToObject(spec, "threads", n_threads_used);
        cJSON_AddNumberToObject(spec, "warmup", (double)warm);
        cJSON_AddNumberToObject(spec, "iterations", (double)iters);
        char *text = cJSON_Print(spec);
        cJSON_Delete(spec);
        snprintf(files[n_files], sizeof files[0], "spec.json");
        snprintf(p, sizeof p, "%s/%s", tmpdir, files[n_files++]);
        snprintf(files[n_files], sizeof files[0], "result.json");
        n_files++;
        int wrote = text && write_file(p, text, strlen(text));
        free(text);
        if (!wrote) {
            fprintf(stderr, "qplace bench: cannot write %s\n", p);
            goto done;
        }
        char script[BENCH_PATH], npm[BENCH_PATH], result[BENCH_PATH];
        if (cli_has(args, "ort_script"))
            snprintf(script, sizeof script, "%s", cli_value(args, "ort_script", ""));
        else
            default_path("QP_ORT_SCRIPT", "bench/ort_bench.js", script, sizeof script);
        if (cli_has(args, "ort_npm"))
            snprintf(npm, sizeof npm, "%s", cli_value(args, "ort_npm", ""));
        else
            default_path("QP_ORT_NPM", ".cache/npm", npm, sizeof npm);
        snprintf(result, sizeof result, "%s/result.json", tmpdir);
        const char *node = getenv("QP_NODE");
        if (!node || !node[0]) node = "node";
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "qplace bench: fork: %s\n", strerror(errno));
            goto done;
        }
        if (pid == 0) {
            /* stdout of the child goes to stderr: ours carries only the report. */
            dup2(2, 1);
            execlp(node, node, script, "--npm", npm, "--spec", p, "--result", result, (char *)NULL);
            fprintf(stderr, "qplace bench: cannot run %s: %s\n", node, strerror(errno));
            _exit(127);
        }
        int status = 0;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "qplace bench: ONNX Runtime runner %s failed (exit %d)\n", script,
                    WIFEXITED(status) ? WEXITSTATUS(status) : -1);
            goto done;
        }
        size_t len = 0;
        ort_out = read_file(result, &len);
        ort = ort_out ? cJSON_Parse(ort_out) : NULL;
        if (!ort) {
            fprintf(stderr, "qplace bench: unreadable ONNX Runtime result %s\n", result);
            goto done;
        }
        o.median_ms = cJSON_GetNumberValue(cJSON_GetObjectItem(ort, "median_ms"));
        o.min_ms = cJSON_GetNumberValue(cJSON_GetObjectItem(ort, "min_ms"));
        o.mean_ms = cJSON_GetNumberValue(cJSON_GetObjectItem(ort, "mean_ms"));
        o.peak_rss_kb = (long)cJSON_GetNumberValue(cJSON_GetObjectItem(ort, "peak_rss_kb"));
        o.items_per_s = o.median_ms > 0 ? (double)items * 1e3 / o.median_ms : 0;
        /* Outputs: the last qplace run vs ORT's. */
        for (size_t i = 0; i < n_out; i++) {
            struct qp_array v;
            if (qp_session_output(s, i, &v, &err) != QP_OK) {
                rc = cli_fail(&err);
                goto done;
            }
            snprintf(p, sizeof p, "%s/out%zu.bin", tmpdir, i);
            size_t nb = 0;
            void *ob = read_file(p, &nb);
            if (!ob || nb != v.nbytes) {
                fprintf(stderr,
                        "qplace bench: output '%s': ONNX Runtime gave %zu bytes, qplace %zu\n",
                        qp_session_output_name(s, i), nb, v.nbytes);
                free(ob);
                mismatch = 1;
                continue;
            }
            if (v.dtype == QP_DTYPE_FLOAT) {
                const float *a = v.data, *b = ob;
                for (size_t k = 0; k < nb / 4; k++) {
                    double d = fabs((double)a[k] - (double)b[k]);
                    if (d > max_diff || isnan(d)) max_diff = isnan(d) ? INFINITY : d;
                    if (!(d <= 1e-4 + 1e-3 * fabs((double)b[k]))) {
                        if (!mismatch)
                            fprintf(stderr,
                                    "qplace bench: output '%s' element %zu: qplace %.9g, ONNX "
                                    "Runtime %.9g\n",
                                    qp_session_output_name(s, i), k, a[k], b[k]);
                        mismatch = 1;
                    }
                }
            } else if (memcmp(v.data, ob, nb) != 0) {
                fprintf(stderr, "qplace bench: output '%s' differs from ONNX Runtime\n",
                        qp_session_output_name(s, i));
                mismatch = 1;
            }
            free(ob);
        }
    }
    char wait_desc[96];
    omp_wait_desc(wait_desc, sizeof wait_desc);
    if (json) {
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "model", path);
        cJSON_AddNumberToObject(r, "threads", n_threads_used);
        cJSON_AddNumberToObject(r, "iterations", (double)iters);
        cJSON_AddNumberToObject(r, "warmup", (double)warm);
        cJSON_AddStringToObject(r, "omp_wait", wait_desc);
        cJSON *qj = cJSON_AddObjectToObject(r, "qplace");
        cJSON_AddNumberToObject(qj, "median_ms", q.median_ms);
        cJSON_AddNumberToObject(qj, "min_ms", q.min_ms);
        cJSON_AddNumberToObject(qj, "mean_ms", q.mean_ms);
        cJSON_AddNumberToObject(qj, "items_per_s", q.items_per_s);
        cJSON_AddNumberToObject(qj, "peak_rss_kb", (double)q.peak_rss_kb);
        if (compare) {
            cJSON *oj = cJSON_AddObjectToObject(r, "ort");
            cJSON_AddNumberToObject(oj, "median_ms", o.median_ms);
            cJSON_AddNumberToObject(oj, "min_ms", o.min_ms);
            cJSON_AddNumberToObject(oj, "mean_ms", o.mean_ms);
            cJSON_AddNumberToObject(oj, "items_per_s", o.items_per_s);
            cJSON_AddNumberToObject(oj, "peak_rss_kb", (double)o.peak_rss_kb);
            cJSON_AddStringToObject(oj, "version",
                                    cJSON_GetStringValue(cJSON_GetObjectItem(ort, "version"))
                                        ? cJSON_GetStringValue(cJSON_GetObjectItem(ort, "version"))
                                        : "");
            cJSON *ra = cJSON_AddObjectToObject(r, "ratio");
            cJSON_AddNumberToObject(ra, "latency", o.median_ms > 0 ? q.median_ms / o.median_ms : 0);
            cJSON_AddNumberToObject(
                ra, "rss", o.peak_rss_kb > 0 ? (double)q.peak_rss_kb / (double)o.peak_rss_kb : 0);
            cJSON_AddNumberToObject(r, "max_abs_diff", max_diff);
            cJSON_AddBoolToObject(r, "outputs_match", !mismatch);
        }
        char *text = cJSON_Print(r);
        cJSON_Delete(r);
        if (text) printf("%s\n", text);
        free(text);
    } else {
        printf("model       %s\nthreads     %d\niterations  %ld (warm-up %ld)\nomp wait    %s\n",
               path, n_threads_used, iters, warm, wait_desc);
        printf("%-8s %11s %11s %11s %12s %13s\n", "engine", "median_ms", "min_ms", "mean_ms",
               "items/s", "peak_rss_MB");
        printf("%-8s %11.2f %11.2f %11.2f %12.2f %13.1f\n", "qplace", q.median_ms, q.min_ms,
               q.mean_ms, q.items_per_s, (double)q.peak_rss_kb / 1024.0);
        if (compare) {
            printf("%-8s %11.2f %11.2f %11.2f %12.2f %13.1f\n", "ort", o.median_ms, o.min_ms,
                   o.mean_ms, o.items_per_s, (double)o.peak_rss_kb / 1024.0);
            printf("ratio qplace/ort: latency %.3f, peak RSS %.3f\n",
                   o.median_ms > 0 ? q.median_ms / o.median_ms : 0,
                   o.peak_rss_kb > 0 ? (double)q.peak_rss_kb / (double)o.peak_rss_kb : 0);
            printf("outputs: max |qplace - ort| %.3g, %s (rtol 1e-3, atol 1e-4)\n", max_diff,
                   mismatch ? "DIFFER" : "agree");
        }
    }
    rc = check && mismatch ? 3 : 0;
done:
    if (tmpdir[0]) remove_tree(tmpdir, n_files, files);
    cJSON_Delete(ort);
    free(ort_out);
    for (size_t i = 0; inputs && i < BENCH_MAX_INPUTS; i++)
        qp_array_release(&inputs[i]);
    qp_session_free(s);
    qp_model_free(m);
    free(shapes);
    free(names);
    free(inputs);
    free(times);
    return rc;
}
