/*
 * Allocation-failure injection (SQLite's way): alloc_fail PHASE MODEL DATA WORKDIR.
 *
 * The program is linked with -Wl,--wrap for malloc, calloc, realloc, strdup, strndup and
 * aligned_alloc, so every allocation qplace's own code makes goes through the wrappers below
 * (those inside the shared libraries it calls, protobuf-c's excepted since qplace gives it its
 * allocator, do not). A phase first runs once with no failure to count its allocations N and
 * keep its output as the reference; then, for every k in 0..N-1, it runs again with the k-th
 * allocation failing, and once more with the k-th and every later one failing. Each run must end
 * either with an error status, a message and no output file (nor any temporary file) left in
 * WORKDIR, or with success and the reference's output (an allocation the code may do without).
 * Crashes abort the program; leaks are LeakSanitizer's to report at exit in the ASan build. Phases:
 *   load       qp_model_load_file and free
 *   calibrate  load, the .npz provider, calibration, the ranges file written
 *   quantize   the `qplace quantize` pipeline (qp_quantize) writing the model and the placement
 *   sensitivity the `qplace sensitivity` pipeline (node granularity, coverage picking) writing
 *              its JSON report and the exclusions file
 * One engine thread (OMP_NUM_THREADS=1 from ctest) keeps the allocation order the same run to
 * run. Prints the count of runs, failures and successes; exit 1 on any broken rule.
 * ALLOC_FAIL_ONLY=k runs only the k-th failure, ALLOC_FAIL_TRACE=1 names each before it runs.
 */
#include <dirent.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "calib/data.h"
#include "calib/provider_npz.h"
#include "calib/ranges.h"
#include "pipeline/quantize.h"
#include "pipeline/sensitivity.h"
#include "qplace/calib.h"
#include "qplace/model.h"

/* ---- the wrappers ----------------------------------------------------------------------- */

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t k);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t k);
void *__wrap_realloc(void *p, size_t n);
void *__wrap_aligned_alloc(size_t a, size_t n);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);

static atomic_long n_allocs;     /* allocations since the counter was reset */
static atomic_long fail_at = -1; /* the allocation to fail (-1: none) */
static atomic_int persistent;    /* 1: every allocation from fail_at on fails */

static int inject(void) {
    long k = atomic_fetch_add(&n_allocs, 1), at = atomic_load(&fail_at);
    return at >= 0 && (k == at || (atomic_load(&persistent) && k > at));
}

void *__wrap_malloc(size_t n) {
    return inject() ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t k) {
    return inject() ? NULL : __real_calloc(n, k);
}

void *__wrap_realloc(void *p, size_t n) {
    return inject() ? NULL : __real_realloc(p, n);
}

void *__wrap_aligned_alloc(size_t a, size_t n) {
    return inject() ? NULL : __real_aligned_alloc(a, n);
}

char *__wrap_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = __wrap_malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

char *__wrap_strndup(const char *s, size_t n) {
    size_t k = strnlen(s, n);
    char *p = __wrap_malloc(k + 1);
    if (p) {
        memcpy(p, s, k);
        p[k] = '\0';
    }
    return p;
}

/* ---- the phases --------------------------------------------------------------------------- */

struct ctx {
    const char *model, *data, *dir;
    char out[1024], out2[1024];
};

static enum qp_status phase_load(struct ctx *c, struct qp_error *err) {
    struct qp_model *m = NULL;
    enum qp_status st = qp_model_load_file(c->model, NULL, &m, err);
    qp_model_free(m);
    return st;
}

static enum qp_status phase_calibrate(struct ctx *c, struct qp_error *err) {
    struct qp_model *m = NULL;
    struct qp_provider *p = NULL;
    struct qp_ranges *r = NULL;
    struct qp_calibrate_options o;
    qp_calibrate_options_default(&o);
    o.n_threads = 1;
    enum qp_status st = qp_model_load_file(c->model, NULL, &m, err);
    if (st == QP_OK) st = qp_provider_open_model(m, c->data, NULL, NULL, &p, err);
    if (st == QP_OK) st = qp_calibrate(m, p, &o, &r, NULL, err);
    if (st == QP_OK) st = qp_ranges_save_json(r, NULL, c->out, err);
    qp_ranges_free(r);
    qp_provider_free(p);
    qp_model_free(m);
    return st;
}

/* qp_quantize of the model to out (placement to out2) on one thread; DATA "-": synthetic. */
static void quantize_options(const struct ctx *c, struct qp_quantize_options *o) {
    qp_quantize_options_default(o);
    o->onnx_path = c->model;
    o->calibration_data_path = strcmp(c->data, "-") ? c->data : NULL;
    o->output_path = c->out;
    o->placement_out = c->out2;
    o->n_threads = 1;
}

static enum qp_status run_quantize(const struct qp_quantize_options *o, struct qp_error *err) {
    struct qp_quantize_report *r = NULL;
    enum qp_status st = qp_quantize(o, &r, err);
    qp_quantize_report_free(r);
    return st;
}

static enum qp_status phase_quantize(struct ctx *c, struct qp_error *err) {
    struct qp_quantize_options o;
    quantize_options(c, &o);
    return run_quantize(&o, err);
}

/* quantize with --equalization all: the run without it, the plan and its application, and the
 * equalized run's calibration of what changed, merged with the ranges it keeps (auto's choices
 * are recorded in phase_accuracy; with auto here the test would take minutes). */
static enum qp_status phase_equalize(struct ctx *c, struct qp_error *err) {
    struct qp_quantize_options o;
    quantize_options(c, &o);
    o.equalization = QP_EQUALIZE_ALL;
    return run_quantize(&o, err);
}

/* quantize with auto calibration, bias correction and an accuracy budget no quantizer meets
 * (drift 0): the candidates and one-node models of auto, the correction's scratch models and
 * passes, the ranking and every step of the budget's search. */
static enum qp_status phase_accuracy(struct ctx *c, struct qp_error *err) {
    struct qp_quantize_options o;
    quantize_options(c, &o);
    o.method = QP_CALIB_AUTO;
    o.bias_correction = 1;
    o.max_output_drift = 0;
    o.min_top1_agreement = 1;
    return run_quantize(&o, err);
}

/* quantize with weight rounding: the model it measures, its pass, H per layer and the choice. */
static enum qp_status phase_rounding(struct ctx *c, struct qp_error *err) {
    struct qp_quantize_options o;
    quantize_options(c, &o);
    o.weight_rounding = QP_WEIGHT_ROUND_ADAROUND;
    return run_quantize(&o, err);
}

static enum qp_status phase_sensitivity(struct ctx *c, struct qp_error *err) {
    struct qp_sensitivity_run_options o;
    qp_sensitivity_run_options_default(&o);
    o.onnx_path = c->model;
    o.calibration_data_path = c->data;
    o.sens.granularity = QP_SENS_NODE;
    o.sens.n_threads = 1;
    o.sens.probe_workers = 1;
    o.output_json = c->out;
    o.picking = 1; /* coverage 0.9: the picker and the exclusions file too */
    o.exclusions_out = c->out2;
    struct qp_sensitivity_report *r = NULL;
    enum qp_status st = qp_sensitivity_run(&o, &r, err);
    qp_sensitivity_report_free(r);
    return st;
}

/* ---- checks ------------------------------------------------------------------------------- */

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *buf = __real_malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return buf;
}

/* Files in the work folder (outputs, temporary files). */
static int n_files(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += e->d_name[0] != '.';
    if (d) closedir(d);
    return n;
}

/* Equal outputs; the sensitivity report's "timings" object (seconds, no nested object) is left
 * out of the comparison. */
static int same_output(const char *a, size_t na, const char *b, size_t nb) {
    const char *ta = memmem(a, na, "\"timings\"", 9), *tb = memmem(b, nb, "\"timings\"", 9);
    if (!ta || !tb) return na == nb && memcmp(a, b, na) == 0;
    const char *ea = memchr(ta, '}', na - (size_t)(ta - a)),
               *eb = memchr(tb, '}', nb - (size_t)(tb - b));
    if (!ea || !eb) return 0;
    size_t ha = (size_t)(ta - a), hb = (size_t)(tb - b);
    size_t ra = na - (size_t)(ea - a), rb = nb - (size_t)(eb - b);
    return ha == hb && memcmp(a, b, ha) == 0 && ra == rb && memcmp(ea, eb, ra) == 0;
}

static void clean(struct ctx *c) {
    unlink(c->out);
    unlink(c->out2);
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: alloc_fail "
                        "load|calibrate|quantize|equalize|accuracy|rounding|sensitivity MODEL "
                        "DATA "
                        "DIR\n");
        return 2;
    }
    struct ctx c = {.model = argv[2], .data = argv[3], .dir = argv[4]};
    enum qp_status (*phase)(struct ctx *, struct qp_error *) =
        strcmp(argv[1], "load") == 0          ? phase_load
        : strcmp(argv[1], "calibrate") == 0   ? phase_calibrate
        : strcmp(argv[1], "quantize") == 0    ? phase_quantize
        : strcmp(argv[1], "equalize") == 0    ? phase_equalize
        : strcmp(argv[1], "accuracy") == 0    ? phase_accuracy
        : strcmp(argv[1], "rounding") == 0    ? phase_rounding
        : strcmp(argv[1], "sensitivity") == 0 ? phase_sensitivity
                                              : NULL;
    if (!phase) return fprintf(stderr, "alloc_fail: unknown phase '%s'\n", argv[1]), 2;
    mkdir(c.dir, 0777);
    snprintf(c.out, sizeof c.out, "%s/out.%s", c.dir, argv[1]);
    snprintf(c.out2, sizeof c.out2, "%s/out2.%s", c.dir, argv[1]);
    clean(&c);
    if (n_files(c.dir) != 0) return fprintf(stderr, "alloc_fail: %s is not empty\n", c.dir), 2;

    /* The reference run. */
    struct qp_error err = {0};
    atomic_store(&n_allocs, 0);
    if (phase(&c, &err) != QP_OK) return fprintf(stderr, "alloc_fail: reference: %s\n", err.msg), 1;
    long total = atomic_load(&n_allocs);
    size_t ref_len = 0, len = 0;
    char *ref = phase == phase_load ? NULL : slurp(c.out, &ref_len);
    int ref_files = n_files(c.dir);
    clean(&c);

    /* ALLOC_FAIL_ONLY=k runs that one failure (to debug it); ALLOC_FAIL_TRACE=1 names each. */
    const char *only = getenv("ALLOC_FAIL_ONLY"), *trace = getenv("ALLOC_FAIL_TRACE");
    long first = only ? atol(only) : 0, last = only ? first + 1 : total;
    long n_err = 0, n_ok = 0, broken = 0;
    for (long run = 0; run < 2 * (last - first); run++) {
        long k = first + run % (last - first);
        atomic_store(&persistent, run >= last - first);
        if (trace)
            fprintf(stderr, "alloc_fail %s: failing allocation %ld%s\n", argv[1], k,
                    run >= last - first ? " and every later one" : "");
        memset(&err, 0, sizeof err);
        atomic_store(&n_allocs, 0);
        atomic_store(&fail_at, k);
        enum qp_status st = phase(&c, &err);
        atomic_store(&fail_at, -1);
        int files = n_files(c.dir);
        if (st != QP_OK) {
            n_err++;
            if (!err.msg[0] || files != 0) {
                broken++;
                fprintf(stderr,
                        "alloc_fail %s: allocation %ld: status %d, message '%s', %d files "
                        "left\n",
                        argv[1], k, (int)st, err.msg, files);
            }
        } else {
            n_ok++;
            char *got = phase == phase_load ? NULL : slurp(c.out, &len);
            int same = phase == phase_load || (got && ref && same_output(got, len, ref, ref_len));
            if (!same || files != ref_files) {
                broken++;
                fprintf(stderr,
                        "alloc_fail %s: allocation %ld failed, the run succeeded with "
                        "another output\n",
                        argv[1], k);
            }
            free(got);
        }
        clean(&c);
    }
    free(ref);
    printf("alloc_fail %s: %ld allocations, each failed once, then with every later one: %ld runs "
           "ended with an error and a message, %ld succeeded with the reference output, %ld broke "
           "a rule\n",
           argv[1], total, n_err, n_ok, broken);
    return broken ? 1 : 0;
}
