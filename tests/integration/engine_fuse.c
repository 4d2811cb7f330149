/*
 * engine_fuse MODEL HxW [MODEL HxW ...]: each PaddleOCR model (input "x", 1x3xHxW) runs fused
 * (the default) and with QP_NO_FUSE=1 (the unfused ONNX semantics) on the same deterministic
 * page-like input; every output element must agree within |a-b| <= 1e-5 + 1e-4*|b|. The fused
 * plan must actually fuse (steps with several nodes, blocked tensors between convolutions, every
 * ConvTranspose in a fused step: det's ConvTranspose -> Add -> BatchNormalization -> Relu and
 * ConvTranspose -> Add -> Sigmoid), runs after the first two must cause no page fault (run does
 * not allocate: nothing is mapped, nothing returned to the system and faulted in again; not in
 * the ASan build, see CHECK_FAULTS), and
 * a second fused run with 1 thread must equal the 2-thread run bit for bit. A missing model
 * skips (exit 77) unless QP_REQUIRE_REAL_MODELS=1.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* oneDNN's primitive execute allocates small C++ objects (its argument map) on every call:
 * glibc hands the same chunks back run after run (no page fault), ASan's quarantine does not,
 * so the sanitizer build cannot check for faults. Our own run code allocates nothing. */
#if defined(__SANITIZE_ADDRESS__)
#define CHECK_FAULTS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CHECK_FAULTS 0
#endif
#endif
#ifndef CHECK_FAULTS
#define CHECK_FAULTS 1
#endif

#include "qplace/model.h"
#include "qplace/session.h"
#include "runtime/runtime.h"

static int failures;
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                            \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
            failures++;                                                                            \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

static long minor_faults(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_minflt : -1;
}

/* Runs a new session (n_threads) on x, then 3 more times counting page faults into *faults
 * (after 2 warm-up runs: the first plans, the second may touch pages the plan left untouched). */
static int run(const struct qp_model *m, int n_threads, const struct qp_array *in, float **out,
               size_t *n_out, size_t *n_fused, size_t *n_blocked, int *convt, int *convt_fused,
               long *faults) {
    struct qp_session_options opts = {.n_threads = n_threads};
    struct qp_session *s = NULL;
    struct qp_error err = {0};
    struct qp_array o;
    int ok = qp_session_create(m, &opts, 0, NULL, &s, &err) == QP_OK &&
             qp_session_run(s, 1, in, &err) == QP_OK && qp_session_run(s, 1, in, &err) == QP_OK;
    long f0 = minor_faults();
    for (int i = 0; ok && i < 3; i++)
        ok = qp_session_run(s, 1, in, &err) == QP_OK;
    *faults = minor_faults() - f0;
    ok = ok && qp_session_output(s, 0, &o, &err) == QP_OK && o.dtype == QP_DTYPE_FLOAT;
    if (!ok) {
        printf("FAIL: run: %s\n", err.msg);
        qp_session_free(s);
        return 0;
    }
    *out = malloc(o.nbytes ? o.nbytes : 1);
    if (*out) memcpy(*out, o.data, o.nbytes);
    *n_out = o.nbytes / sizeof(float);
    *n_fused = s->last->n_fused;
    *n_blocked = s->last->n_blocked;
    *convt = *convt_fused = 0;
    for (size_t k = 0; k < s->g->n_topo; k++)
        *convt += strcmp(s->g->nodes[s->g->topo[k]].op_type, "ConvTranspose") == 0;
    for (size_t k = 0; k < s->last->n_steps; k++) {
        const struct rt_step *st = &s->last->steps[k];
        *convt_fused += st->nodes && strcmp(s->g->nodes[st->node].op_type, "ConvTranspose") == 0;
    }
    qp_session_free(s);
    return *out != NULL;
}

static void check_model(const char *path, int h, int w) {
    struct qp_model *m = NULL;
    struct qp_error err = {0};
    float *x = NULL, *a = NULL, *b = NULL, *c = NULL;
    size_t na = 0, nb = 0, nc = 0, fa = 0, fb = 0, fc = 0, ba = 0, bb = 0, bc = 0;
    int ta = 0, tfa = 0, tb = 0, tfb = 0;
    long pa = 0, pb = 0, pc = 0;
    CHECK(qp_model_load_file(path, NULL, &m, &err) == QP_OK, "%s: %s", path, err.msg);
    x = malloc(sizeof(float) * 3 * (size_t)h * (size_t)w);
    CHECK(x, "out of memory");
    for (int i = 0; i < 3 * h * w; i++) /* text-like stripes over a gradient */
        x[i] = (float)sin(0.05 * i) * 0.8f + (float)((i / w) % h) / (float)h - 0.5f;
    int64_t dims[4] = {1, 3, h, w};
    struct qp_array in;
    CHECK(qp_array_view(&in, QP_DTYPE_FLOAT, 4, dims, x, sizeof(float) * 3 * (size_t)h * (size_t)w,
                        &err) == QP_OK,
          "%s", err.msg);
    CHECK(run(m, 2, &in, &a, &na, &fa, &ba, &ta, &tfa, &pa), "fused run");
    CHECK(run(m, 1, &in, &c, &nc, &fc, &bc, &tb, &tfb, &pc), "fused 1-thread run");
    setenv("QP_NO_FUSE", "1", 1);
    int ok = run(m, 2, &in, &b, &nb, &fb, &bb, &tb, &tfb, &pb);
    unsetenv("QP_NO_FUSE");
    CHECK(ok, "unfused run");
    CHECK(fa > 0 && ba > 0 && fb == 0 && bb == 0,
          "%zu fused steps, %zu blocked tensors (unfused %zu, %zu)", fa, ba, fb, bb);
    CHECK(!CHECK_FAULTS || (pa == 0 && pb == 0 && pc == 0),
          "page faults in 3 runs: %ld fused, %ld 1 thread, %ld unfused", pa, pc, pb);
    CHECK(tfa == ta && tfb == 0, "%d of %d ConvTranspose fused (unfused: %d)", tfa, ta, tfb);
    CHECK(na == nb && na == nc && na > 0, "output sizes %zu, %zu, %zu", na, nb, nc);
    CHECK(memcmp(a, c, na * sizeof *a) == 0, "1 and 2 threads differ");
    double worst = 0;
    for (size_t i = 0; i < na; i++) {
        double d = fabs((double)a[i] - b[i]), tol = 1e-5 + 1e-4 * fabs((double)b[i]);
        CHECK(d <= tol, "element %zu: fused %.9g, unfused %.9g", i, (double)a[i], (double)b[i]);
        if (d > worst) worst = d;
    }
    printf("ok   %s %dx%d: %zu fused steps (%d with a ConvTranspose), %zu blocked tensors; fused "
           "== unfused within rtol 1e-4 (max |diff| %.3g), 1 == 2 threads\n",
           path, h, w, fa, tfa, ba, worst);
done:
    free(x);
    free(a);
    free(b);
    free(c);
    qp_model_free(m);
}

int main(int argc, char **argv) {
    if (argc < 3 || argc % 2 == 0) {
        fprintf(stderr, "usage: engine_fuse MODEL HxW [MODEL HxW ...]\n");
        return 2;
    }
    int ran = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        int h = 0, w = 0;
        if (sscanf(argv[i + 1], "%dx%d", &h, &w) != 2 || h <= 0 || w <= 0 || h > 4096 || w > 4096) {
            fprintf(stderr, "engine_fuse: bad size '%s'\n", argv[i + 1]);
            return 2;
        }
        FILE *f = fopen(argv[i], "rb");
        if (!f) {
            const char *req = getenv("QP_REQUIRE_REAL_MODELS");
            if (req && strcmp(req, "1") == 0) {
                printf("FAIL: %s is missing (QP_REQUIRE_REAL_MODELS=1; run scripts/setup.sh)\n",
                       argv[i]);
                return 1;
            }
            printf("SKIP: %s is missing (run scripts/setup.sh)\n", argv[i]);
            continue;
        }
        fclose(f);
        check_model(argv[i], h, w);
        ran++;
    }
    if (failures) {
        printf("FAILED\n");
        return 1;
    }
    if (!ran) return 77;
    printf("PASSED\n");
    return 0;
}
