/* The builtin and ort latency backends (autotune/latency.h) on a small committed model
 * (tests/integration/calibrate_data/small.onnx: input [N, 2, 4, 4]): n positive samples, the
 * shape option for the dynamic dim, the errors. The ort case runs only where node and
 * onnxruntime-node are installed (scripts/setup.sh); QP_REQUIRE_REAL_MODELS=1 makes their
 * absence a failure, as in the other ORT tests. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "autotune/latency.h"
#include "qplace/session.h"

#define SRC   QP_TEST_DATA_DIR "/../.."
#define SMALL SRC "/tests/integration/calibrate_data/small.onnx"

static int require_real(void) {
    const char *e = getenv("QP_REQUIRE_REAL_MODELS");
    return e && strcmp(e, "1") == 0;
}

static void check_samples(const double *ms, size_t n) {
    for (size_t i = 0; i < n; i++)
        assert_true(ms[i] > 0 && ms[i] < 10000);
}

static void test_builtin(void **state) {
    (void)state;
    struct qp_error err = {0};
    struct qp_latency_builtin_options o;
    qp_latency_builtin_options_default(&o);
    assert_int_equal(o.int8, QP_INT8_AUTO);
    o.n_threads = 1;
    o.warmup = 1;
    o.shapes = "input:2x2x4x4";
    struct qp_latency_backend *b = NULL;
    assert_int_equal(qp_latency_builtin_create(&o, &b, &err), QP_OK);
    assert_string_equal(b->name, "builtin");
    assert_non_null(strstr(b->detail, qp_session_isa()));
    assert_non_null(strstr(b->detail, "1 threads, int8 auto"));
    double ms[7] = {0};
    assert_int_equal(qp_latency_measure(b, SMALL, 7, ms, &err), QP_OK);
    check_samples(ms, 7);
    /* A missing file: the loader's error, prefixed, and the samples untouched. */
    double keep[2] = {-1, -1};
    assert_int_equal(qp_latency_measure(b, SRC "/no/such.onnx", 2, keep, &err), QP_ERR_IO);
    assert_non_null(strstr(err.msg, "latency: builtin: '"));
    assert_true(keep[0] == -1);
    /* Two models in turn, run by run (both sessions open): samples for each; a missing second
     * model is the loader's error naming it, and neither array is written. */
    double pa[5] = {0}, pb[5] = {0}, kb[2] = {-1, -1};
    assert_non_null(b->measure_pair);
    assert_int_equal(qp_latency_measure_pair(b, SMALL, SMALL, 5, pa, pb, &err), QP_OK);
    check_samples(pa, 5);
    check_samples(pb, 5);
    assert_int_equal(qp_latency_measure_pair(b, SMALL, SRC "/no/such.onnx", 2, keep, kb, &err),
                     QP_ERR_IO);
    assert_non_null(strstr(err.msg, "no/such.onnx"));
    assert_true(keep[0] == -1 && kb[0] == -1);
    qp_latency_backend_free(b);
    /* Kept sessions: a pair call on the same files opens nothing; a file rewritten in place
     * (a new inode, as autotune's atomic writes make) is opened again; a file renamed keeps
     * its session; a file replaced by a broken one is read again and fails. */
    char dir[] = "/tmp/qp_keep_XXXXXX", fa[256], fb[256], fc[256], cmd[1024];
    assert_non_null(mkdtemp(dir));
    snprintf(fa, sizeof fa, "%s/a.onnx", dir);
    snprintf(fb, sizeof fb, "%s/b.onnx", dir);
    snprintf(fc, sizeof fc, "%s/c.onnx", dir);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s' && cp '%s' '%s'", SMALL, fa, SMALL, fb);
    assert_int_equal(system(cmd), 0);
    o.shapes = "input:2x2x4x4";
    assert_int_equal(qp_latency_builtin_create(&o, &b, &err), QP_OK);
    assert_int_equal(qp_latency_builtin_opened(b), 0);
    assert_int_equal(qp_latency_measure_pair(b, fa, fb, 2, pa, pb, &err), QP_OK);
    assert_int_equal(qp_latency_builtin_opened(b), 2);
    assert_int_equal(qp_latency_measure_pair(b, fb, fa, 2, pa, pb, &err), QP_OK);
    assert_int_equal(qp_latency_builtin_opened(b), 2);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s.tmp' && mv '%s.tmp' '%s'", SMALL, fa, fa, fa);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(qp_latency_measure_pair(b, fa, fb, 2, pa, pb, &err), QP_OK);
    assert_int_equal(qp_latency_builtin_opened(b), 3);
    assert_int_equal(rename(fa, fc), 0);
    assert_int_equal(qp_latency_measure_pair(b, fb, fc, 2, pa, pb, &err), QP_OK);
    assert_int_equal(qp_latency_builtin_opened(b), 3);
    check_samples(pa, 2);
    check_samples(pb, 2);
    snprintf(cmd, sizeof cmd, "printf 'not a model' > '%s.tmp' && mv '%s.tmp' '%s'", fc, fc, fc);
    assert_int_equal(system(cmd), 0);
    assert_int_not_equal(qp_latency_measure_pair(b, fb, fc, 2, pa, pb, &err), QP_OK);
    assert_non_null(strstr(err.msg, "c.onnx"));
    /* The failed file left no session: the next file takes its place, the pair's other one
     * stays. */
    assert_int_equal(qp_latency_measure_pair(b, fb, SMALL, 2, pa, pb, &err), QP_OK);
    assert_int_equal(qp_latency_builtin_opened(b), 5);
    assert_int_equal(qp_latency_measure_pair(b, SMALL, fb, 2, pa, pb, &err), QP_OK);
    assert_int_equal(qp_latency_builtin_opened(b), 5);
    /* Autotune's adoption: the candidate renamed over the best file keeps its session, and the
     * next candidate, at the old candidate's path and looked up first, takes the old best's
     * slot: one session made. */
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", SMALL, fa);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(qp_latency_measure_pair(b, fa, fb, 2, pa, pb, &err), QP_OK);
    assert_int_equal(qp_latency_builtin_opened(b), 6);
    assert_int_equal(rename(fa, fb), 0);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", SMALL, fa);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(qp_latency_measure_pair(b, fa, fb, 2, pa, pb, &err), QP_OK);
    assert_int_equal(qp_latency_builtin_opened(b), 7);
    assert_int_equal(qp_latency_measure_pair(b, fb, fa, 2, pa, pb, &err), QP_OK);
    assert_int_equal(qp_latency_builtin_opened(b), 7);
    /* A measure keeps its session too: the pair call after it on that file opens only the
     * other; a measure of a kept file opens nothing. */
    snprintf(cmd, sizeof cmd, "cp '%s' '%s.tmp' && mv '%s.tmp' '%s'", SMALL, fa, fa, fa);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(qp_latency_measure(b, fa, 2, pa, &err), QP_OK);
    assert_int_equal(qp_latency_builtin_opened(b), 8);
    assert_int_equal(qp_latency_measure_pair(b, fb, fa, 2, pa, pb, &err), QP_OK);
    assert_int_equal(qp_latency_builtin_opened(b), 8);
    assert_int_equal(qp_latency_measure(b, fb, 2, pb, &err), QP_OK);
    assert_int_equal(qp_latency_builtin_opened(b), 8);
    check_samples(pa, 2);
    check_samples(pb, 2);
    /* One file on both sides: one session. */
    assert_int_equal(qp_latency_measure_pair(b, fc, fc, 2, pa, pb, &err), QP_ERR_BAD_INPUT);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", SMALL, fc);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(qp_latency_measure_pair(b, fc, fc, 2, pa, pb, &err), QP_OK);
    assert_int_equal(qp_latency_builtin_opened(b), 10);
    /* reset forgets the kept sessions: the same pair is opened afresh, then kept again. */
    assert_int_equal(qp_latency_measure_pair(b, fa, fb, 2, pa, pb, &err), QP_OK);
    size_t opened = qp_latency_builtin_opened(b);
    assert_int_equal(qp_latency_reset(b), 1);
    assert_int_equal(qp_latency_measure_pair(b, fa, fb, 2, pa, pb, &err), QP_OK);
    assert_int_equal(qp_latency_builtin_opened(b), opened + 2);
    assert_int_equal(qp_latency_measure_pair(b, fb, fa, 2, pa, pb, &err), QP_OK);
    assert_int_equal(qp_latency_builtin_opened(b), opened + 2);
    assert_int_equal(qp_latency_reset(NULL), 0);
    qp_latency_backend_free(b);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    /* Without the shape the dynamic dim is a usage error naming it. */
    o.shapes = NULL;
    o.int8 = QP_INT8_OFF;
    assert_int_equal(qp_latency_builtin_create(&o, &b, &err), QP_OK);
    assert_non_null(strstr(b->detail, "int8 off"));
    assert_int_equal(qp_latency_measure(b, SMALL, 2, keep, &err), QP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "'N'"));
    qp_latency_backend_free(b);
    /* Bad options. */
    b = NULL;
    o.shapes = "input:2xZ";
    assert_int_equal(qp_latency_builtin_create(&o, &b, &err), QP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "latency: builtin: shapes: "));
    o.shapes = NULL;
    o.warmup = -1;
    assert_int_equal(qp_latency_builtin_create(&o, &b, &err), QP_ERR_USAGE);
    o.warmup = 0;
    o.int8 = 7;
    assert_int_equal(qp_latency_builtin_create(&o, &b, &err), QP_ERR_USAGE);
    assert_null(b);
}

#define QPLACE_BIN QP_TEST_BINARY_DIR "/../qplace"

/* A Q/DQ model (resnet_like quantized by `qplace quantize`, synthetic calibration) on the
 * integer path and as written: n positive samples from each. */
static void test_builtin_qdq(void **state) {
    (void)state;
    char dir[] = "/tmp/qp_latency_XXXXXX", q[256], cmd[1024];
    assert_non_null(mkdtemp(dir));
    snprintf(q, sizeof q, "%s/resnet_like.quant.onnx", dir);
    snprintf(cmd, sizeof cmd,
             "'%s' quantize --onnx_path '%s/tests/integration/quantize_models/resnet_like.onnx' "
             "--output_path '%s' > '%s/log.txt' 2>&1",
             QPLACE_BIN, SRC, q, dir);
    assert_int_equal(system(cmd), 0);
    struct qp_error err = {0};
    struct qp_latency_builtin_options o;
    qp_latency_builtin_options_default(&o);
    o.n_threads = 1;
    for (int int8 = QP_INT8_OFF; int8 <= QP_INT8_AUTO; int8++) {
        o.int8 = int8;
        struct qp_latency_backend *b = NULL;
        assert_int_equal(qp_latency_builtin_create(&o, &b, &err), QP_OK);
        double ms[4] = {0};
        enum qp_status st = qp_latency_measure(b, q, 4, ms, &err);
        if (st != QP_OK) fail_msg("%s", err.msg);
        check_samples(ms, 4);
        qp_latency_backend_free(b);
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static void test_ort(void **state) {
    (void)state;
    int have_node = system("command -v node > /dev/null 2>&1") == 0;
    int have_ort = access(SRC "/.cache/npm/node_modules/onnxruntime-node/package.json", R_OK) == 0;
    if (!have_node || !have_ort) {
        if (require_real()) fail_msg("node or onnxruntime-node missing (QP_REQUIRE_REAL_MODELS=1)");
        printf("skip ort backend: %s not found\n", have_node ? "onnxruntime-node" : "node");
        return;
    }
    struct qp_error err = {0};
    struct qp_latency_ort_options o;
    qp_latency_ort_options_default(&o);
    o.script = SRC "/src/autotune/ort_latency.js";
    o.npm = SRC "/.cache/npm";
    o.n_threads = 1;
    o.warmup = 1;
    o.shapes = "input:2x2x4x4";
    struct qp_latency_backend *b = NULL;
    assert_int_equal(qp_latency_ort_create(&o, &b, &err), QP_OK);
    assert_string_equal(b->name, "ort");
    double ms[5] = {0};
    enum qp_status st = qp_latency_measure(b, SMALL, 5, ms, &err);
    if (st != QP_OK) fail_msg("%s", err.msg);
    check_samples(ms, 5);
    /* A model ORT cannot load: the child's failure, quoted. */
    double keep[2] = {-1, -1};
    assert_int_not_equal(
        qp_latency_measure(b, SRC "/tests/unit/autotune/data/trtexec_ok.txt", 2, keep, &err),
        QP_OK);
    assert_true(keep[0] == -1);
    qp_latency_backend_free(b);
    /* A script that is not there. */
    o.script = SRC "/no/such/script.js";
    assert_int_equal(qp_latency_ort_create(&o, &b, &err), QP_OK);
    assert_int_equal(qp_latency_measure(b, SMALL, 2, keep, &err), QP_ERR_IO);
    assert_non_null(strstr(err.msg, "failed (exit"));
    qp_latency_backend_free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_builtin),
        cmocka_unit_test(test_builtin_qdq),
        cmocka_unit_test(test_ort),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
