/* The ranges table, its JSON file and TensorRT calibration caches (calib/ranges.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "calib/ranges.h"

static void set(struct qp_ranges *r, const char *name, float lo, float hi, float amax) {
    struct qp_error err = {0};
    struct qp_range x = {.tensor = name, .lo = lo, .hi = hi, .amax = amax, .n_values = 10};
    assert_int_equal(qp_ranges_set(r, &x, &err), QP_OK);
}

static void test_table(void **state) {
    (void)state;
    struct qp_ranges *r = qp_ranges_create();
    assert_non_null(r);
    char name[32];
    for (int i = 0; i < 1000; i++) {
        snprintf(name, sizeof name, "t%d", i);
        set(r, name, (float)-i, (float)i, (float)i);
    }
    assert_int_equal(qp_ranges_count(r), 1000);
    for (int i = 0; i < 1000; i += 37) {
        snprintf(name, sizeof name, "t%d", i);
        const struct qp_range *x = qp_ranges_find(r, name);
        assert_non_null(x);
        assert_string_equal(x->tensor, name);
        assert_true(x->hi == (float)i);
        assert_ptr_equal(qp_ranges_at(r, (size_t)i), x); /* insertion order */
    }
    assert_null(qp_ranges_find(r, "t1000"));
    assert_null(qp_ranges_at(r, 1000));
    /* replace keeps the position */
    set(r, "t5", -1, 2, 2);
    assert_int_equal(qp_ranges_count(r), 1000);
    assert_true(qp_ranges_at(r, 5)->hi == 2.0f);
    struct qp_error err = {0};
    struct qp_range bad = {.tensor = "n", .lo = NAN, .hi = 1, .amax = 1};
    assert_int_equal(qp_ranges_set(r, &bad, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "'n'"));
    bad = (struct qp_range){.tensor = "n", .lo = 0, .hi = 1, .amax = -1};
    assert_int_equal(qp_ranges_set(r, &bad, &err), QP_ERR_BAD_INPUT);
    bad = (struct qp_range){.tensor = "n", .lo = 0, .hi = INFINITY, .amax = 1};
    assert_int_equal(qp_ranges_set(r, &bad, &err), QP_ERR_BAD_INPUT);
    assert_null(qp_ranges_find(r, "n"));
    qp_ranges_free(r);
    qp_ranges_free(NULL);
}

static struct qp_ranges *sample(void) {
    struct qp_ranges *r = qp_ranges_create();
    set(r, "conv1_out", -1.5f, 6.0f, 6.0f);
    set(r, "a \"quoted\"\\name", 0.1f, 0.30000001f, 0.30000001f);
    set(r, "zero", 0, 0, 0);
    set(r, "tiny", -1e-30f, 3.4e38f, 3.4e38f);
    return r;
}

static const struct qp_ranges_meta meta = {.model_path = "m.onnx",
                                           .method = "percentile",
                                           .percentile = 99.99,
                                           .calibration_source = "synthetic",
                                           .num_samples = 200};

static void test_json_round_trip(void **state) {
    (void)state;
    struct qp_error err = {0};
    struct qp_ranges *r = sample();
    char *text = NULL;
    assert_int_equal(qp_ranges_write_json(r, &meta, &text, &err), QP_OK);
    assert_non_null(strstr(text, "\"format\": \"qplace.ranges\""));
    assert_non_null(strstr(text, "\"calibration_source\": \"synthetic\""));
    assert_non_null(strstr(text, "\"percentile\": 99.99"));
    /* scale = amax / 127 from qparams; amax 0 gives scale 1 */
    assert_non_null(strstr(text, "{\"name\": \"zero\", \"lo\": 0, \"hi\": 0, \"amax\": 0, "
                                 "\"scale\": 1,"));
    assert_non_null(strstr(text, "\"name\": \"conv1_out\", \"lo\": -1.5, \"hi\": 6, \"amax\": 6, "
                                 "\"scale\": 0.0472440943"));
    struct qp_ranges *back = NULL;
    assert_int_equal(qp_ranges_read_json(text, strlen(text), "t.json", &back, &err), QP_OK);
    assert_int_equal(qp_ranges_count(back), 4);
    for (size_t i = 0; i < 4; i++) {
        const struct qp_range *a = qp_ranges_at(r, i), *b = qp_ranges_at(back, i);
        assert_string_equal(a->tensor, b->tensor);
        assert_memory_equal(&a->lo, &b->lo, sizeof(float));
        assert_memory_equal(&a->hi, &b->hi, sizeof(float));
        assert_memory_equal(&a->amax, &b->amax, sizeof(float));
        assert_true(a->n_values == b->n_values);
    }
    const struct qp_ranges_meta *bm = qp_ranges_get_meta(back);
    assert_string_equal(bm->model_path, "m.onnx");
    assert_string_equal(bm->method, "percentile");
    assert_string_equal(bm->calibration_source, "synthetic");
    assert_true(bm->percentile == 99.99 && bm->num_samples == 200);
    char *again = NULL;
    assert_int_equal(qp_ranges_write_json(back, NULL, &again, &err), QP_OK);
    assert_string_equal(text, again); /* the table's own meta is written with NULL */
    free(text);
    free(again);
    qp_ranges_free(back);
    qp_ranges_free(r);
}

static void test_json_errors(void **state) {
    (void)state;
    static const struct {
        const char *text, *msg;
        enum qp_status st;
    } cases[] = {
        {"{", "not valid JSON", QP_ERR_BAD_INPUT},
        {"[]", "top level", QP_ERR_BAD_INPUT},
        {"{\"format\":\"other\",\"version\":1}", "\"format\"", QP_ERR_BAD_INPUT},
        {"{\"format\":\"qplace.ranges\",\"version\":2,\"method\":\"max\",\"calibration_source\":"
         "\"npz\",\"tensors\":[]}",
         "newer", QP_ERR_UNSUPPORTED},
        {"{\"format\":\"qplace.ranges\",\"version\":1.5}", "\"version\"", QP_ERR_BAD_INPUT},
        {"{\"format\":\"qplace.ranges\",\"version\":1,\"extra\":1}", "unknown key 'extra'",
         QP_ERR_BAD_INPUT},
        {"{\"format\":\"qplace.ranges\",\"version\":1,\"method\":\"max\",\"calibration_source\":"
         "\"npz\",\"tensors\":{}}",
         "\"tensors\" must be an array", QP_ERR_BAD_INPUT},
        {"{\"format\":\"qplace.ranges\",\"version\":1,\"method\":\"max\",\"calibration_source\":"
         "\"npz\",\"tensors\":[{\"name\":\"a\",\"lo\":0,\"hi\":1,\"amax\":1},{\"name\":\"a\","
         "\"lo\":"
         "0,\"hi\":1,\"amax\":1}]}",
         "tensor 'a' is repeated", QP_ERR_BAD_INPUT},
        {"{\"format\":\"qplace.ranges\",\"version\":1,\"method\":\"max\",\"calibration_source\":"
         "\"npz\",\"tensors\":[{\"name\":\"a\",\"lo\":2,\"hi\":1,\"amax\":2}]}",
         "lo <= hi", QP_ERR_BAD_INPUT},
        {"{\"format\":\"qplace.ranges\",\"version\":1,\"method\":\"max\",\"calibration_source\":"
         "\"npz\",\"tensors\":[{\"name\":\"a\",\"lo\":0,\"hi\":1,\"amax\":1e39}]}",
         "\"amax\" must be a finite float32", QP_ERR_BAD_INPUT},
        {"{\"format\":\"qplace.ranges\",\"version\":1,\"method\":\"max\",\"calibration_source\":"
         "\"npz\",\"tensors\":[{\"name\":\"a\",\"lo\":0,\"hi\":1,\"amax\":1,\"scale\":0.5}]}",
         "does not match amax / 127", QP_ERR_BAD_INPUT},
        {"{\"format\":\"qplace.ranges\",\"version\":1,\"method\":\"max\",\"calibration_source\":"
         "\"npz\",\"tensors\":[{\"name\":\"a\",\"lo\":0,\"hi\":1,\"amax\":1,\"n_nan\":-1}]}",
         "\"n_nan\" must be a non-negative integer", QP_ERR_BAD_INPUT},
        {"{\"format\":\"qplace.ranges\",\"version\":1,\"method\":\"max\",\"calibration_source\":"
         "\"npz\",\"tensors\":[{\"name\":\"\",\"lo\":0,\"hi\":1,\"amax\":1}]}",
         "non-empty string", QP_ERR_BAD_INPUT},
        {"{\"format\":\"qplace.ranges\",\"version\":1,\"method\":\"max\",\"calibration_source\":"
         "\"npz\",\"tensors\":[{\"name\":\"a\",\"lo\":0,\"hi\":1,\"amax\":1,\"x\":1}]}",
         "tensors[0]: unknown key 'x'", QP_ERR_BAD_INPUT},
        {"{\"format\":\"qplace.ranges\",\"version\":1,\"method\":3,\"calibration_source\":"
         "\"npz\",\"tensors\":[]}",
         "\"method\" must be a string", QP_ERR_BAD_INPUT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct qp_error err = {0};
        struct qp_ranges *r = (struct qp_ranges *)&err; /* must stay untouched */
        enum qp_status st =
            qp_ranges_read_json(cases[i].text, strlen(cases[i].text), "f.json", &r, &err);
        if (st != cases[i].st || !strstr(err.msg, cases[i].msg) || !strstr(err.msg, "f.json"))
            fail_msg("case %zu: status %d, message '%s', wanted '%s'", i, (int)st, err.msg,
                     cases[i].msg);
        assert_ptr_equal(r, (struct qp_ranges *)&err);
    }
}

static void test_trt_write(void **state) {
    (void)state;
    struct qp_error err = {0};
    struct qp_ranges *r = qp_ranges_create();
    set(r, "x", -127, 127, 127);                                /* scale 1.0 = 0x3f800000 */
    set(r, "(Unnamed Layer* 5) [Convolution]_output", 0, 0, 0); /* scale 1 (zero range) */
    set(r, "y", -2.54f, 1, 2.54f);                              /* scale 0.02 */
    char *text = NULL;
    assert_int_equal(qp_ranges_write_trt_cache(r, "max", 8601, &text, &err), QP_OK);
    float s = 2.54f / 127.0f;
    uint32_t bits;
    memcpy(&bits, &s, 4);
    char want[256];
    snprintf(want, sizeof want,
             "TRT-8601-MinMaxCalibration\nx: 3f800000\n(Unnamed Layer* 5) "
             "[Convolution]_output: 3f800000\ny: %08x\n",
             (unsigned)bits);
    assert_string_equal(text, want);
    free(text);
    assert_int_equal(qp_ranges_write_trt_cache(r, "percentile", 100, &text, &err), QP_OK);
    assert_true(strncmp(text, "TRT-100-EntropyCalibration2\n", 28) == 0);
    free(text);
    assert_int_equal(qp_ranges_write_trt_cache(r, NULL, -1, &text, &err), QP_ERR_USAGE);
    set(r, "bad\nname", 0, 1, 1);
    assert_int_equal(qp_ranges_write_trt_cache(r, NULL, 1, &text, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "line break"));
    qp_ranges_free(r);
}

static void test_trt_read(void **state) {
    (void)state;
    struct qp_error err = {0};
    struct qp_ranges *r = NULL;
    const char *ok = "TRT-8601-EntropyCalibration2\r\nx: 3f800000\r\n(Unnamed Layer* 5) "
                     "[Convolution]_output: 3C010A14\r\nzero: 00000000\r\n\r\n";
    assert_int_equal(qp_ranges_read_trt_cache(ok, strlen(ok), "c", &r, &err), QP_OK);
    assert_int_equal(qp_ranges_count(r), 3);
    const struct qp_range *x = qp_ranges_find(r, "x");
    assert_true(x->amax == 127.0f && x->lo == -127.0f && x->hi == 127.0f && x->n_values == 0);
    x = qp_ranges_find(r, "(Unnamed Layer* 5) [Convolution]_output");
    assert_non_null(x);
    uint32_t bits = 0x3c010a14;
    float scale;
    memcpy(&scale, &bits, 4);
    assert_true(x->amax / 127.0f == scale);
    assert_true(qp_ranges_find(r, "zero")->amax == 0);
    assert_string_equal(qp_ranges_get_meta(r)->calibration_source, "trt_cache");
    assert_string_equal(qp_ranges_get_meta(r)->method, "entropy");
    qp_ranges_free(r);
    const char *mm = "TRT-7000-MinMaxCalibration\n";
    assert_int_equal(qp_ranges_read_trt_cache(mm, strlen(mm), "c", &r, &err), QP_OK);
    assert_string_equal(qp_ranges_get_meta(r)->method, "max");
    assert_int_equal(qp_ranges_count(r), 0);
    qp_ranges_free(r);

    static const struct {
        const char *text, *msg;
    } bad[] = {
        {"", "empty file"},
        {"TRT-8601-Foo\n", "c:1: not a TensorRT calibration cache header"},
        {"TRT--EntropyCalibration2\n", "c:1:"},
        {"TRT-123456789-EntropyCalibration2\n", "c:1:"},
        {"trt-8601-EntropyCalibration2\n", "c:1:"},
        {"TRT-8601-EntropyCalibration2\nx 3f800000\n", "c:2: expected '<tensor>: <8 hex digits>'"},
        {"TRT-8601-EntropyCalibration2\nx: 3f80000g\n", "c:2: '3f80000g' is not 8 hex digits"},
        {"TRT-8601-EntropyCalibration2\nx: 3f8000000\n", "c:2: expected"},
        {"TRT-8601-EntropyCalibration2\n: 3f800000\n", "c:2: expected"},
        {"TRT-8601-EntropyCalibration2\nx: 3f800000\ny: bf800000\n", "c:3: tensor 'y': scale"},
        {"TRT-8601-EntropyCalibration2\nx: 7fc00000\n", "c:2: tensor 'x': scale 0x7fc00000"},
        {"TRT-8601-EntropyCalibration2\nx: 7f800000\n", "not a finite"},
        {"TRT-8601-EntropyCalibration2\nx: 7f7fffff\n", "beyond float32"},
        {"TRT-8601-EntropyCalibration2\nx: 3f800000\nx: 3f800000\n", "c:3: tensor 'x' is repeated"},
        {"TRT-8601-EntropyCalibration2\nx: 3f800000\n\ny: 3f800000\n", "c:4: entry after a blank"},
        {"TRT-8601-EntropyCalibration2\nx\r: 3f800000\n", "c:2: stray carriage return"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        r = NULL;
        enum qp_status st =
            qp_ranges_read_trt_cache(bad[i].text, strlen(bad[i].text), "c", &r, &err);
        if (st != QP_ERR_BAD_INPUT || !strstr(err.msg, bad[i].msg))
            fail_msg("case %zu: status %d, message '%s', wanted '%s'", i, (int)st, err.msg,
                     bad[i].msg);
        assert_null(r);
    }
    const char nul[] = "TRT-8601-EntropyCalibration2\nx\0: 3f800000\n";
    assert_int_equal(qp_ranges_read_trt_cache(nul, sizeof nul - 1, "c", &r, &err),
                     QP_ERR_BAD_INPUT);
}

/* write -> read -> write gives the same bytes for any amax (the read amax is chosen so that
 * amax / 127 is exactly the cached scale). */
static void test_trt_round_trip(void **state) {
    (void)state;
    struct qp_error err = {0};
    struct qp_ranges *r = qp_ranges_create();
    uint32_t seed = 12345;
    char name[32];
    for (int i = 0; i < 2000; i++) {
        seed = seed * 1664525u + 1013904223u;
        float a = ldexpf((float)(seed >> 8) / 16777216.0f, (int)(seed % 60) - 30);
        snprintf(name, sizeof name, "t%d", i);
        set(r, name, -a, a, a);
    }
    char *t1 = NULL, *t2 = NULL;
    assert_int_equal(qp_ranges_write_trt_cache(r, "entropy", 8601, &t1, &err), QP_OK);
    struct qp_ranges *back = NULL;
    assert_int_equal(qp_ranges_read_trt_cache(t1, strlen(t1), "c", &back, &err), QP_OK);
    assert_int_equal(qp_ranges_count(back), 2000);
    for (size_t i = 0; i < 2000; i++) {
        float a = qp_ranges_at(r, i)->amax, b = qp_ranges_at(back, i)->amax;
        assert_true(fabsf(a - b) <= 2e-7f * a + 1e-38f);
    }
    assert_int_equal(qp_ranges_write_trt_cache(back, NULL, 8601, &t2, &err), QP_OK);
    assert_string_equal(t1, t2);
    free(t1);
    free(t2);
    qp_ranges_free(back);
    qp_ranges_free(r);
}

static void test_files(void **state) {
    (void)state;
    char dir[] = "/tmp/qp_ranges_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256], cache[256];
    snprintf(path, sizeof path, "%s/r.json", dir);
    snprintf(cache, sizeof cache, "%s/r.cache", dir);
    struct qp_error err = {0};
    struct qp_ranges *r = sample(), *back = NULL;
    assert_int_equal(qp_ranges_save_json(r, &meta, path, &err), QP_OK);
    assert_int_equal(qp_ranges_load_json(path, &back, &err), QP_OK);
    assert_int_equal(qp_ranges_count(back), 4);
    qp_ranges_free(back);
    assert_int_equal(qp_ranges_save_trt_cache(r, "max", 8601, cache, &err), QP_OK);
    assert_int_equal(qp_ranges_load_trt_cache(cache, &back, &err), QP_OK);
    assert_int_equal(qp_ranges_count(back), 4);
    qp_ranges_free(back);
    /* a JSON file is not a cache and the other way round */
    assert_int_equal(qp_ranges_load_trt_cache(path, &back, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "r.json:1:"));
    assert_int_equal(qp_ranges_load_json(cache, &back, &err), QP_ERR_BAD_INPUT);
    /* only the two outputs are in the folder: no temporary files left behind */
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    assert_int_equal(n, 2);
    char missing[300];
    snprintf(missing, sizeof missing, "%s/none/r.json", dir);
    assert_int_equal(qp_ranges_save_json(r, &meta, missing, &err), QP_ERR_IO);
    assert_int_equal(qp_ranges_load_json(missing, &back, &err), QP_ERR_IO);
    assert_int_equal(qp_ranges_load_json(dir, &back, &err), QP_ERR_IO); /* a folder */
    unlink(path);
    unlink(cache);
    rmdir(dir);
    qp_ranges_free(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),       cmocka_unit_test(test_json_round_trip),
        cmocka_unit_test(test_json_errors), cmocka_unit_test(test_trt_write),
        cmocka_unit_test(test_trt_read),    cmocka_unit_test(test_trt_round_trip),
        cmocka_unit_test(test_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
