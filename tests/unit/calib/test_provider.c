/* --calibration_shapes parsing, shape resolution, and the synthetic provider. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "calib/provider.h"
#include "calib/provider_npz.h"
#include "qplace/npy.h"

static void test_shapes_parse(void **state) {
    (void)state;
    struct qp_calib_shapes s = {0};
    struct qp_error err = {0};
    assert_int_equal(qp_calib_shapes_parse("input:1x3x224x224,mask:1x128,tf:0:2x5", &s, &err),
                     QP_OK);
    assert_int_equal(s.n, 3);
    assert_string_equal(s.items[0].name, "input");
    assert_int_equal(s.items[0].rank, 4);
    assert_true(s.items[0].dims[1] == 3 && s.items[0].dims[3] == 224);
    const struct qp_calib_shape *m = qp_calib_shapes_find(&s, "mask");
    assert_non_null(m);
    assert_true(m->rank == 2 && m->dims[1] == 128);
    m = qp_calib_shapes_find(&s, "tf:0"); /* the last ':' splits */
    assert_non_null(m);
    assert_true(m->rank == 2 && m->dims[0] == 2 && m->dims[1] == 5);
    assert_null(qp_calib_shapes_find(&s, "other"));
    qp_calib_shapes_release(&s);
    assert_int_equal(s.n, 0);
}

static void test_shapes_errors(void **state) {
    (void)state;
    static const struct {
        const char *in, *msg;
    } bad[] = {
        {"", "empty entry"},
        {"a:1x2,", "empty entry"},
        {"a1x2", "no ':'"},
        {":1x2", "no name"},
        {"a:", "no dims"},
        {"a:1x0", "dim 1 is 0"},
        {"a:1x-2", "positive integers"},
        {"a:1xx2", "positive integers"},
        {"a:1x2x", "ends with 'x'"},
        {"a:1,2", "no ':'"},
        {"a:1x2,a:3", "given twice"},
        {"a:99999999999999999999", "too large"},
        {"a:1x1x1x1x1x1x1x1x1", "more than 8 dims"},
        {"a:1 x2", "positive integers"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct qp_calib_shapes s = {0};
        struct qp_error err = {0};
        assert_int_equal(qp_calib_shapes_parse(bad[i].in, &s, &err), QP_ERR_USAGE);
        if (!strstr(err.msg, bad[i].msg)) fail_msg("'%s': message '%s'", bad[i].in, err.msg);
        assert_int_equal(s.n, 0);
    }
}

static void test_shape_resolve(void **state) {
    (void)state;
    struct qp_calib_shapes s = {0};
    struct qp_error err = {0};
    assert_int_equal(qp_calib_shapes_parse("x:4x3x8x8", &s, &err), QP_OK);
    int64_t model[4] = {-1, 3, -1, 8}, out[4];
    assert_int_equal(qp_calib_shape_resolve("x", 4, model, &s, out, &err), QP_OK);
    assert_true(out[0] == 4 && out[1] == 3 && out[2] == 8 && out[3] == 8);
    /* not given: dynamic dims become 1 */
    assert_int_equal(qp_calib_shape_resolve("y", 4, model, &s, out, &err), QP_OK);
    assert_true(out[0] == 1 && out[1] == 3 && out[2] == 1 && out[3] == 8);
    assert_int_equal(qp_calib_shape_resolve("y", 4, model, NULL, out, &err), QP_OK);
    /* a static dim that disagrees, a rank that disagrees */
    int64_t model2[4] = {1, 4, 8, 8};
    assert_int_equal(qp_calib_shape_resolve("x", 4, model2, &s, out, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "'x' dim 0 is 1 in the model, 4 given"));
    assert_int_equal(qp_calib_shape_resolve("x", 3, model2, &s, out, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "rank 3"));
    qp_calib_shapes_release(&s);
}

static void test_synthetic(void **state) {
    (void)state;
    struct qp_synthetic_input in[3] = {
        {.name = "pixels", .dtype = QP_DTYPE_FLOAT, .rank = 4, .dims = {2, 3, 4, 4}},
        {.name = "input_ids", .dtype = QP_DTYPE_INT64, .rank = 2, .dims = {2, 16}},
        {.name = "attention_mask", .dtype = QP_DTYPE_INT32, .rank = 2, .dims = {2, 16}},
    };
    struct qp_provider *p = NULL, *q = NULL;
    struct qp_error err = {0};
    assert_int_equal(qp_provider_synthetic_create(in, 3, 42, 2, &p, &err), QP_OK);
    assert_int_equal(qp_provider_synthetic_create(in, 3, 42, 2, &q, &err), QP_OK);
    assert_string_equal(qp_provider_source(p), "synthetic");
    assert_true(qp_provider_is_synthetic(p));
    assert_int_equal(qp_provider_n_samples(p), 4);
    assert_int_equal(qp_provider_n_batches(p), 2);
    assert_int_equal(qp_provider_n_inputs(p), 3);
    assert_string_equal(qp_provider_input_name(p, 1), "input_ids");
    const struct qp_array *a, *b;
    int end = 0;
    static float first[96];
    assert_int_equal(qp_provider_next(p, &a, &end, &err), QP_OK);
    assert_false(end);
    memcpy(first, a[0].data, sizeof first);
    int distinct = 0;
    for (int i = 0; i < 96; i++) {
        float v = ((const float *)a[0].data)[i];
        assert_true(v >= 0.0f && v < 1.0f);
        distinct += i && v != ((const float *)a[0].data)[i - 1];
    }
    assert_true(distinct > 90);
    for (int i = 0; i < 32; i++) {
        int64_t id = ((const int64_t *)a[1].data)[i];
        int32_t m = ((const int32_t *)a[2].data)[i];
        assert_true(id >= 0 && id < 50000);
        assert_true(m == 0 || m == 1);
    }
    /* same seed, same data */
    assert_int_equal(qp_provider_next(q, &b, &end, &err), QP_OK);
    assert_memory_equal(b[0].data, first, sizeof first);
    assert_memory_equal(b[1].data, a[1].data, a[1].nbytes);
    /* second batch differs, then the end, then reset gives the first batch again */
    assert_int_equal(qp_provider_next(p, &a, &end, &err), QP_OK);
    assert_false(end);
    assert_true(memcmp(a[0].data, first, sizeof first) != 0);
    assert_int_equal(qp_provider_next(p, &a, &end, &err), QP_OK);
    assert_true(end);
    assert_int_equal(qp_provider_reset(p, &err), QP_OK);
    assert_int_equal(qp_provider_next(p, &a, &end, &err), QP_OK);
    assert_memory_equal(a[0].data, first, sizeof first);
    qp_provider_free(p);
    qp_provider_free(q);

    /* another seed, other data */
    assert_int_equal(qp_provider_synthetic_create(in, 1, 43, 1, &p, &err), QP_OK);
    assert_int_equal(qp_provider_next(p, &a, &end, &err), QP_OK);
    assert_true(memcmp(a[0].data, first, sizeof first) != 0);
    qp_provider_free(p);

    /* unresolved dims and unsupported types are refused */
    struct qp_synthetic_input bad = {
        .name = "x", .dtype = QP_DTYPE_FLOAT, .rank = 2, .dims = {-1, 3}};
    assert_int_equal(qp_provider_synthetic_create(&bad, 1, 1, 1, &p, &err), QP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "dynamic"));
    bad.dims[0] = 1;
    bad.dtype = QP_DTYPE_STRING;
    assert_int_equal(qp_provider_synthetic_create(&bad, 1, 1, 1, &p, &err), QP_ERR_USAGE);
}

#define TMP QP_TEST_BINARY_DIR "/calib_provider_tmp"

static void write_xy(const char *path, int64_t rows, float x0, int with_y, int extra) {
    static float x[64];
    static int64_t y[64];
    for (int64_t i = 0; i < rows * 2; i++)
        x[i] = x0 + (float)i;
    for (int64_t i = 0; i < rows; i++)
        y[i] = 100 + i;
    struct qp_array a[3];
    struct qp_error err = {0};
    int64_t dx[2] = {rows, 2}, dy[1] = {rows};
    assert_int_equal(qp_array_view(&a[0], QP_DTYPE_FLOAT, 2, dx, x, (size_t)rows * 8, &err), QP_OK);
    assert_int_equal(qp_array_view(&a[1], QP_DTYPE_INT64, 1, dy, y, (size_t)rows * 8, &err), QP_OK);
    assert_int_equal(qp_array_view(&a[2], QP_DTYPE_INT64, 1, dy, y, (size_t)rows * 8, &err), QP_OK);
    const char *names[3] = {"x", "y", "extra"};
    if (!with_y) {
        a[1] = a[2];
        names[1] = "extra";
    }
    assert_int_equal(
        qp_npz_write_file(path, names, a, (size_t)(1 + with_y + extra), QP_NPZ_STORE, &err), QP_OK);
}

static const struct qp_npz_provider_input xy[2] = {
    {.name = "x", .dtype = QP_DTYPE_FLOAT, .rank = 2, .model_dims = {-1, 2}, .batch_dims = {2, 2}},
    {.name = "y", .dtype = QP_DTYPE_INT64, .rank = 1, .model_dims = {-1}, .batch_dims = {2}},
};

static void test_npz_provider(void **state) {
    (void)state;
    mkdir(TMP, 0755);
    write_xy(TMP "/xy.npz", 5, 0.0f, 1, 0);
    struct qp_provider *p = NULL;
    struct qp_error err = {0};
    assert_int_equal(qp_provider_npz_create(TMP "/xy.npz", xy, 2, 0, &p, &err), QP_OK);
    assert_string_equal(qp_provider_source(p), "npz");
    assert_false(qp_provider_is_synthetic(p));
    assert_int_equal(qp_provider_n_samples(p), 5);
    assert_int_equal(qp_provider_n_batches(p), 2); /* int(5 / 2) steps */
    const struct qp_array *b;
    int end = 0;
    /* np.array_split(5 rows, 2) -> 3 + 2 */
    assert_int_equal(qp_provider_next(p, &b, &end, &err), QP_OK);
    assert_true(b[0].dims[0] == 3 && b[1].dims[0] == 3);
    assert_true(((const float *)b[0].data)[5] == 5.0f);
    assert_true(((const int64_t *)b[1].data)[2] == 102);
    assert_int_equal(qp_provider_next(p, &b, &end, &err), QP_OK);
    assert_true(b[0].dims[0] == 2 && ((const float *)b[0].data)[0] == 6.0f);
    assert_true(((const int64_t *)b[1].data)[0] == 103);
    assert_int_equal(qp_provider_next(p, &b, &end, &err), QP_OK);
    assert_true(end);
    qp_provider_free(p);

    /* a folder of shards, in name order, concatenated */
    mkdir(TMP "/shards", 0755);
    write_xy(TMP "/shards/s1.npz", 2, 50.0f, 1, 0);
    write_xy(TMP "/shards/s0.npz", 2, 10.0f, 1, 0);
    assert_int_equal(qp_provider_npz_create(TMP "/shards", xy, 2, 0, &p, &err), QP_OK);
    assert_int_equal(qp_provider_n_samples(p), 4);
    assert_int_equal(qp_provider_next(p, &b, &end, &err), QP_OK);
    assert_true(((const float *)b[0].data)[0] == 10.0f);
    assert_int_equal(qp_provider_next(p, &b, &end, &err), QP_OK);
    assert_true(((const float *)b[0].data)[0] == 50.0f);
    qp_provider_free(p);

    /* a single-input model takes a .npy */
    float v[6] = {1, 2, 3, 4, 5, 6};
    int64_t d[2] = {3, 2};
    struct qp_array a;
    assert_int_equal(qp_array_view(&a, QP_DTYPE_FLOAT, 2, d, v, sizeof v, &err), QP_OK);
    assert_int_equal(qp_npy_write_file(TMP "/x.npy", &a, &err), QP_OK);
    struct qp_npz_provider_input x1 = xy[0];
    x1.batch_dims[0] = 1;
    assert_int_equal(qp_provider_npz_create(TMP "/x.npy", &x1, 1, 0, &p, &err), QP_OK);
    assert_string_equal(qp_provider_source(p), "npy");
    assert_int_equal(qp_provider_n_batches(p), 3);
    qp_provider_free(p);
}

static void test_npz_provider_refusals(void **state) {
    (void)state;
    mkdir(TMP, 0755);
    struct qp_provider *p = NULL;
    struct qp_error err = {0};
    write_xy(TMP "/extra.npz", 4, 0.0f, 1, 1);
    assert_int_equal(qp_provider_npz_create(TMP "/extra.npz", xy, 2, 0, &p, &err),
                     QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "key 'extra' is not an input"));
    write_xy(TMP "/noy.npz", 4, 0.0f, 0, 0);
    assert_int_equal(qp_provider_npz_create(TMP "/noy.npz", xy, 2, 0, &p, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "no array for model input 'y'"));
    struct qp_npz_provider_input in[2] = {xy[0], xy[1]};
    write_xy(TMP "/xy4.npz", 4, 0.0f, 1, 0);
    in[1].dtype = QP_DTYPE_INT32;
    assert_int_equal(qp_provider_npz_create(TMP "/xy4.npz", in, 2, 0, &p, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "'y' is int64, the model takes int32"));
    in[1] = xy[1];
    in[0].model_dims[1] = 3;
    assert_int_equal(qp_provider_npz_create(TMP "/xy4.npz", in, 2, 0, &p, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "dim 1 is 2, the model takes 3"));
    in[0] = xy[0];
    in[0].rank = 3;
    assert_int_equal(qp_provider_npz_create(TMP "/xy4.npz", in, 2, 0, &p, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "rank 2"));
    in[0] = xy[0];
    in[0].batch_dims[0] = 8;
    assert_int_equal(qp_provider_npz_create(TMP "/xy4.npz", in, 2, 0, &p, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "fewer than one batch"));
    /* the byte cap */
    assert_int_equal(qp_provider_npz_create(TMP "/xy4.npz", xy, 2, 40, &p, &err), QP_ERR_BAD_INPUT);
    /* .npy with two inputs */
    float v[4] = {0};
    int64_t d[2] = {2, 2};
    struct qp_array a;
    assert_int_equal(qp_array_view(&a, QP_DTYPE_FLOAT, 2, d, v, sizeof v, &err), QP_OK);
    assert_int_equal(qp_npy_write_file(TMP "/two.npy", &a, &err), QP_OK);
    assert_int_equal(qp_provider_npz_create(TMP "/two.npy", xy, 2, 0, &p, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "2 inputs"));
    assert_int_equal(qp_provider_npz_create(TMP "/missing.npz", xy, 2, 0, &p, &err), QP_ERR_IO);
    assert_null(p);
}

/* Writes rows [r0, r0 + rows) of the global sequence x[r][c] = 2 r + c as a Fortran-ordered,
 * big-endian .npy (numpy's '>f4', fortran_order True), by hand. */
static void write_fortran_be(const char *path, int64_t r0, int64_t rows) {
    char dict[128];
    int dl =
        snprintf(dict, sizeof dict, "{'descr': '>f4', 'fortran_order': True, 'shape': (%lld, 2), }",
                 (long long)rows);
    size_t hlen = (size_t)dl + 1;
    while ((10 + hlen) % 64)
        hlen++;
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    uint8_t hl[2] = {(uint8_t)(hlen & 0xff), (uint8_t)(hlen >> 8)};
    fwrite(hl, 1, 2, f);
    fwrite(dict, 1, (size_t)dl, f);
    for (size_t i = (size_t)dl; i + 1 < hlen; i++)
        fputc(' ', f);
    fputc('\n', f);
    for (int c = 0; c < 2; c++)
        for (int64_t r = 0; r < rows; r++) {
            float v = (float)(2 * (r0 + r) + c);
            uint8_t b[4];
            memcpy(b, &v, 4);
            uint8_t be[4] = {b[3], b[2], b[1], b[0]};
            fwrite(be, 1, 4, f);
        }
    fclose(f);
}

static void write_x_rows(const char *path, int64_t r0, int64_t rows, int deflate) {
    static float x[64];
    for (int64_t i = 0; i < rows * 2; i++)
        x[i] = (float)(2 * r0 + i);
    struct qp_array a;
    struct qp_error err = {0};
    int64_t d[2] = {rows, 2};
    assert_int_equal(qp_array_view(&a, QP_DTYPE_FLOAT, 2, d, x, (size_t)rows * 8, &err), QP_OK);
    const char *name = "x";
    if (deflate < 0)
        assert_int_equal(qp_npy_write_file(path, &a, &err), QP_OK);
    else
        assert_int_equal(
            qp_npz_write_file(path, &name, &a, 1, deflate ? QP_NPZ_DEFLATE : QP_NPZ_STORE, &err),
            QP_OK);
}

/* Shards are streamed: batches cross shard boundaries (4 | 0 | 3 | 5 rows of .npy, an empty
 * stored .npz, a Fortran-ordered big-endian .npy, a deflated .npz), give exactly the
 * concatenated rows in array_split chunks, and a reset replays them. A shard that changes
 * after the provider was made is an error naming it. */
static void test_npz_provider_streams_shards(void **state) {
    (void)state;
    mkdir(TMP, 0755);
    mkdir(TMP "/stream", 0755);
    write_x_rows(TMP "/stream/s0.npy", 0, 4, -1);
    write_x_rows(TMP "/stream/s1.npz", 4, 0, 0);
    write_fortran_be(TMP "/stream/s2.npy", 4, 3);
    write_x_rows(TMP "/stream/s3.npz", 7, 5, 1);
    struct qp_npz_provider_input x1 = xy[0];
    x1.batch_dims[0] = 5; /* 12 rows -> int(12 / 5) = 2 steps: 6 + 6 rows */
    struct qp_provider *p = NULL;
    struct qp_error err = {0};
    assert_int_equal(qp_provider_npz_create(TMP "/stream", &x1, 1, 0, &p, &err), QP_OK);
    assert_int_equal(qp_provider_n_samples(p), 12);
    assert_int_equal(qp_provider_n_batches(p), 2);
    for (int pass = 0; pass < 2; pass++) {
        const struct qp_array *b;
        int end = 0;
        for (int k = 0; k < 2; k++) {
            assert_int_equal(qp_provider_next(p, &b, &end, &err), QP_OK);
            assert_false(end);
            assert_int_equal(b[0].dims[0], 6);
            assert_int_equal(b[0].dims[1], 2);
            const float *v = b[0].data;
            for (int i = 0; i < 12; i++)
                assert_true(v[i] == (float)(12 * k + i));
        }
        assert_int_equal(qp_provider_next(p, &b, &end, &err), QP_OK);
        assert_true(end);
        assert_int_equal(qp_provider_reset(p, &err), QP_OK);
    }
    /* s3 loses rows after the provider was made */
    write_x_rows(TMP "/stream/s3.npz", 7, 4, 1);
    const struct qp_array *b;
    int end = 0;
    assert_int_equal(qp_provider_next(p, &b, &end, &err), QP_OK);
    assert_int_equal(qp_provider_next(p, &b, &end, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "s3.npz: input 'x' changed since"));
    qp_provider_free(p);
    p = NULL;
    /* a shard whose data end early (declared sizes are checked when it is opened) */
    write_x_rows(TMP "/stream/s3.npz", 7, 5, 1);
    assert_int_equal(truncate(TMP "/stream/s0.npy", 128 + 20), 0); /* 128-byte header */
    assert_int_equal(qp_provider_npz_create(TMP "/stream", &x1, 1, 0, &p, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "s0.npy"));
    assert_null(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shapes_parse),
        cmocka_unit_test(test_shapes_errors),
        cmocka_unit_test(test_shape_resolve),
        cmocka_unit_test(test_synthetic),
        cmocka_unit_test(test_npz_provider),
        cmocka_unit_test(test_npz_provider_refusals),
        cmocka_unit_test(test_npz_provider_streams_shards),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
