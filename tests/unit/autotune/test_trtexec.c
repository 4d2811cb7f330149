/* The trtexec backend (autotune/trtexec.h) without TensorRT: the command line, shell-like
 * splitting of the caller's arguments, the parser on fixtures in trtexec's output format
 * (tests/unit/autotune/data/trtexec_*.txt), and the runner on fake trtexec scripts. */
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
#include "autotune/spawn.h"
#include "autotune/trtexec.h"

#define DATA QP_TEST_DATA_DIR "/../unit/autotune/data/"

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char *buf = malloc(1 << 16);
    assert_non_null(buf);
    *len = fread(buf, 1, (1 << 16) - 1, f);
    buf[*len] = 0;
    fclose(f);
    return buf;
}

static void test_split_args(void **state) {
    (void)state;
    struct qp_error err = {0};
    char **w = NULL;
    size_t n = 0;
    assert_int_equal(
        qp_trtexec_split_args("  --a=1\t'b c' \"d \\\"e\\\" $f\" g\\ h '' x\"y\"z ", &w, &n, &err),
        QP_OK);
    assert_int_equal(n, 6);
    assert_string_equal(w[0], "--a=1");
    assert_string_equal(w[1], "b c");
    assert_string_equal(w[2], "d \"e\" $f");
    assert_string_equal(w[3], "g h");
    assert_string_equal(w[4], "");
    assert_string_equal(w[5], "xyz");
    assert_null(w[6]);
    qp_trtexec_argv_free(w);
    assert_int_equal(qp_trtexec_split_args("", &w, &n, &err), QP_OK);
    assert_int_equal(n, 0);
    assert_null(w[0]);
    qp_trtexec_argv_free(w);
    w = NULL;
    assert_int_equal(qp_trtexec_split_args("--x 'open", &w, &n, &err), QP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "unterminated quote"));
    assert_int_equal(qp_trtexec_split_args("a\\", &w, &n, &err), QP_ERR_USAGE);
    assert_int_equal(qp_trtexec_split_args("\"a", &w, &n, &err), QP_ERR_USAGE);
    assert_null(w);
}

static void test_argv(void **state) {
    (void)state;
    struct qp_error err = {0};
    const char *plugins[] = {"/opt/p/libA.so", "libB.so"};
    struct qp_latency_trtexec_options o;
    qp_latency_trtexec_options_default(&o);
    o.trtexec = "/opt/trt/bin/trtexec";
    o.timing_cache = "/tmp/tc.cache";
    o.plugins = plugins;
    o.n_plugins = 2;
    o.warmup_ms = 500;
    o.extra_args = "--memPoolSize=workspace:1024MiB --shapes='x:1x3x224x224'";
    char **argv = NULL;
    size_t argc = 0;
    assert_int_equal(qp_trtexec_argv(&o, "m q.onnx", 25, &argv, &argc, &err), QP_OK);
    const char *want[] = {"/opt/trt/bin/trtexec",
                          "--onnx=m q.onnx",
                          "--stronglyTyped",
                          "--warmUp=500",
                          "--iterations=25",
                          "--duration=0",
                          "--avgRuns=1",
                          "--timingCacheFile=/tmp/tc.cache",
                          "--staticPlugins=/opt/p/libA.so",
                          "--staticPlugins=libB.so",
                          "--memPoolSize=workspace:1024MiB",
                          "--shapes=x:1x3x224x224"};
    assert_int_equal(argc, sizeof want / sizeof want[0]);
    for (size_t i = 0; i < argc; i++)
        assert_string_equal(argv[i], want[i]);
    assert_null(argv[argc]);
    qp_trtexec_argv_free(argv);
    /* The program: $TRTEXEC, else trtexec; no cache, no plugins, no extras. */
    qp_latency_trtexec_options_default(&o);
    setenv("TRTEXEC", "/env/trtexec", 1);
    assert_int_equal(qp_trtexec_argv(&o, "m.onnx", 1, &argv, &argc, &err), QP_OK);
    assert_int_equal(argc, 7);
    assert_string_equal(argv[0], "/env/trtexec");
    assert_string_equal(argv[3], "--warmUp=200");
    qp_trtexec_argv_free(argv);
    unsetenv("TRTEXEC");
    assert_int_equal(qp_trtexec_argv(&o, "m.onnx", 1, &argv, &argc, &err), QP_OK);
    assert_string_equal(argv[0], "trtexec");
    qp_trtexec_argv_free(argv);
    argv = NULL;
    assert_int_equal(qp_trtexec_argv(&o, "m.onnx", 0, &argv, &argc, &err), QP_ERR_USAGE);
    o.extra_args = "'";
    assert_int_equal(qp_trtexec_argv(&o, "m.onnx", 1, &argv, &argc, &err), QP_ERR_USAGE);
    assert_null(argv);
}

static void test_parse_fixtures(void **state) {
    (void)state;
    struct qp_error err = {0};
    size_t len = 0;
    char *text = slurp(DATA "trtexec_ok.txt", &len);
    struct qp_trtexec_report r;
    assert_int_equal(qp_trtexec_parse(text, len, &r, &err), QP_OK);
    assert_true(r.min_ms == 0.5987 && r.max_ms == 1.0791);
    assert_true(r.mean_ms == 0.6839 && r.median_ms == 0.6007);
    const double host[] = {0.6010, 0.5987, 0.6245, 0.6003, 1.0791, 0.5996};
    assert_int_equal(r.n_runs, 6);
    for (size_t i = 0; i < 6; i++)
        assert_true(r.run_ms[i] == host[i]);
    qp_trtexec_report_release(&r);
    free(text);
    /* The default --avgRuns=10: the summary, and no per-inference samples. */
    text = slurp(DATA "trtexec_avg10.txt", &len);
    assert_int_equal(qp_trtexec_parse(text, len, &r, &err), QP_OK);
    assert_true(r.median_ms == 2.1298 && r.min_ms == 2.1021);
    assert_int_equal(r.n_runs, 0);
    assert_null(r.run_ms);
    qp_trtexec_report_release(&r);
    free(text);
    /* A failed build: no Latency line (the H2D/GPU lines never count as one either). */
    text = slurp(DATA "trtexec_build_failed.txt", &len);
    assert_int_equal(qp_trtexec_parse(text, len, &r, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "no 'Latency: min = ...' line"));
    free(text);
    const char *only_gpu = "[I] GPU Compute Time: min = 1 ms, max = 2 ms, mean = 1 ms, median = "
                           "1 ms\n[I] H2D Latency: min = 1 ms, max = 2 ms, mean = 1 ms, median = "
                           "1 ms\n";
    assert_int_equal(qp_trtexec_parse(only_gpu, strlen(only_gpu), &r, &err), QP_ERR_BAD_INPUT);
    const char *cut = "[I] Latency: min = 1 ms, max = 2 ms\n";
    assert_int_equal(qp_trtexec_parse(cut, strlen(cut), &r, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "lacks"));
}

static struct qp_latency_backend *fake(const char *script, const char *extra) {
    struct qp_latency_trtexec_options o;
    qp_latency_trtexec_options_default(&o);
    o.trtexec = script;
    o.timing_cache = "tc.cache";
    o.extra_args = extra;
    struct qp_latency_backend *b = NULL;
    struct qp_error err = {0};
    assert_int_equal(qp_latency_trtexec_create(&o, &b, &err), QP_OK);
    assert_string_equal(b->name, "trtexec");
    assert_string_equal(b->detail, script);
    return b;
}

static void test_run_fake(void **state) {
    (void)state;
    char args_path[] = "/tmp/qp_fake_trtexec_XXXXXX";
    int fd = mkstemp(args_path);
    assert_true(fd >= 0);
    close(fd);
    setenv("FAKE_TRTEXEC_ARGS", args_path, 1);
    struct qp_latency_backend *b = fake(DATA "fake_trtexec.sh", "--noDataTransfers");
    struct qp_error err = {0};
    double ms[5] = {0};
    assert_int_equal(qp_latency_measure(b, "model.onnx", 5, ms, &err), QP_OK);
    for (int i = 0; i < 5; i++)
        assert_true(ms[i] == 1.0 + 0.001 * i);
    qp_latency_backend_free(b);
    unsetenv("FAKE_TRTEXEC_ARGS");
    size_t len = 0;
    char *seen = slurp(args_path, &len);
    unlink(args_path);
    assert_string_equal(seen, "--onnx=model.onnx\n--stronglyTyped\n--warmUp=200\n--iterations=5\n"
                              "--duration=0\n--avgRuns=1\n--timingCacheFile=tc.cache\n"
                              "--noDataTransfers\n");
    free(seen);
}

static void test_run_failures(void **state) {
    (void)state;
    struct qp_error err = {0};
    double ms[3] = {7, 7, 7};
    /* Exit 1: the message has the status and trtexec's last lines. */
    struct qp_latency_backend *b = fake(DATA "fake_trtexec_fail.sh", NULL);
    assert_int_equal(qp_latency_measure(b, "broken.onnx", 3, ms, &err), QP_ERR_IO);
    assert_non_null(strstr(err.msg, "exit 1"));
    assert_non_null(strstr(err.msg, "Engine set up failed"));
    assert_non_null(strstr(err.msg, "&&&& FAILED"));
    assert_true(ms[0] == 7);
    qp_latency_backend_free(b);
    /* Exit 0 without a summary. */
    b = fake(DATA "fake_trtexec_nolatency.sh", NULL);
    assert_int_equal(qp_latency_measure(b, "m.onnx", 3, ms, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "no 'Latency: min = ...' summary"));
    assert_non_null(strstr(err.msg, "Skipped inference phase"));
    qp_latency_backend_free(b);
    /* A per-run count overridden by the caller's arguments. */
    b = fake(DATA "fake_trtexec.sh", "--iterations=2");
    assert_int_equal(qp_latency_measure(b, "m.onnx", 3, ms, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "2 per-inference lines"));
    qp_latency_backend_free(b);
    /* No such program. */
    b = fake("/nonexistent/trtexec", NULL);
    assert_int_equal(qp_latency_measure(b, "m.onnx", 3, ms, &err), QP_ERR_IO);
    assert_non_null(strstr(err.msg, "cannot run '/nonexistent/trtexec'"));
    qp_latency_backend_free(b);
    assert_true(ms[0] == 7 && ms[2] == 7);
    /* Options checked at creation. */
    struct qp_latency_trtexec_options o;
    qp_latency_trtexec_options_default(&o);
    o.extra_args = "\"unterminated";
    b = NULL;
    assert_int_equal(qp_latency_trtexec_create(&o, &b, &err), QP_ERR_USAGE);
    assert_null(b);
}

static void test_spawn_tail(void **state) {
    (void)state;
    char text[] = "one\ntwo\nthree\nfour\n";
    struct qp_spawn_output o = {.text = text, .len = sizeof text - 1};
    assert_string_equal(qp_spawn_tail(&o, 2), "three\nfour\n");
    assert_string_equal(qp_spawn_tail(&o, 10), text);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_args),     cmocka_unit_test(test_argv),
        cmocka_unit_test(test_parse_fixtures), cmocka_unit_test(test_run_fake),
        cmocka_unit_test(test_run_failures),   cmocka_unit_test(test_spawn_tail),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
