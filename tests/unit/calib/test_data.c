/* The one calibration data entry (calib/data.h): what a path means (synthetic, image folder,
 * .npz/.npy), the options reaching the provider, and the refusals. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "calib/data.h"
#include "calib/image.h"
#include "qplace/npy.h"

#define IMAGES QP_TEST_DATA_DIR "/images/folder" /* a.png, b.png, c.png (4x4 RGB), notes.txt */
#define TMP    QP_TEST_BINARY_DIR "/calib_data_tmp"

static struct qp_npz_provider_input image_input(int nhwc) {
    struct qp_npz_provider_input in = {.name = "x", .dtype = QP_DTYPE_FLOAT, .rank = 4};
    const int64_t nchw[4] = {1, 3, 4, 4}, nhwc_dims[4] = {1, 4, 4, 3};
    memcpy(in.model_dims, nhwc ? nhwc_dims : nchw, sizeof nchw);
    memcpy(in.batch_dims, nhwc ? nhwc_dims : nchw, sizeof nchw);
    return in;
}

static void test_synthetic(void **state) {
    (void)state;
    struct qp_data_options o;
    qp_data_options_default(&o);
    assert_int_equal(o.synthetic_batches, 1);
    assert_true(o.image_std[0] == 1.0f && o.image_mean[2] == 0.0f && !o.image_bgr);
    o.synthetic_batches = 3;
    o.seed = 5;
    struct qp_npz_provider_input in = image_input(0);
    struct qp_provider *p = NULL, *q = NULL;
    struct qp_error err = {0};
    assert_int_equal(qp_provider_open(NULL, &o, &in, 1, &p, &err), QP_OK);
    assert_string_equal(qp_provider_source(p), "synthetic");
    assert_true(qp_provider_is_synthetic(p));
    assert_int_equal(qp_provider_n_batches(p), 3);
    o.seed = 6;
    assert_int_equal(qp_provider_open(NULL, &o, &in, 1, &q, &err), QP_OK);
    const struct qp_array *a, *b;
    int end = 0;
    assert_int_equal(qp_provider_next(p, &a, &end, &err), QP_OK);
    assert_int_equal(qp_provider_next(q, &b, &end, &err), QP_OK);
    assert_true(memcmp(a[0].data, b[0].data, a[0].nbytes) != 0); /* the seed reaches it */
    qp_provider_free(p);
    qp_provider_free(q);
}

/* An image folder with the options gives exactly what the image provider gives for the
 * equivalent image options (resize to H x W, scale 1/255, mean/std, BGR, layout, batch). */
static void test_images(void **state) {
    (void)state;
    assert_true(qp_data_is_image_folder(IMAGES));
    for (int nhwc = 0; nhwc < 2; nhwc++) {
        struct qp_data_options o;
        qp_data_options_default(&o);
        const float mean[3] = {0.5f, 0.25f, 0.125f}, sd[3] = {0.5f, 2.0f, 4.0f};
        memcpy(o.image_mean, mean, sizeof mean);
        memcpy(o.image_std, sd, sizeof sd);
        o.image_bgr = 1;
        struct qp_npz_provider_input in = image_input(nhwc);
        struct qp_provider *p = NULL, *ref = NULL;
        struct qp_error err = {0};
        assert_int_equal(qp_provider_open(IMAGES, &o, &in, 1, &p, &err), QP_OK);
        assert_string_equal(qp_provider_source(p), "images");
        assert_int_equal(qp_provider_n_samples(p), 3);
        struct qp_image_options io;
        qp_image_options_default(&io);
        io.layout = nhwc ? QP_IMAGE_NHWC : QP_IMAGE_NCHW;
        io.resize_h = io.resize_w = 4;
        io.batch = 1;
        io.drop_last = 1;
        io.scale = 1.0f / 255;
        io.bgr = 1;
        memcpy(io.mean, mean, sizeof mean);
        memcpy(io.std, sd, sizeof sd);
        assert_int_equal(qp_provider_images_create(IMAGES, "x", &io, &ref, &err), QP_OK);
        for (int k = 0; k < 4; k++) {
            const struct qp_array *a, *b;
            int end_a = 0, end_b = 0;
            assert_int_equal(qp_provider_next(p, &a, &end_a, &err), QP_OK);
            assert_int_equal(qp_provider_next(ref, &b, &end_b, &err), QP_OK);
            assert_int_equal(end_a, end_b);
            if (end_a) break;
            assert_memory_equal(a[0].dims, in.batch_dims, 4 * sizeof(int64_t));
            assert_int_equal(a[0].nbytes, b[0].nbytes);
            assert_memory_equal(a[0].data, b[0].data, a[0].nbytes);
        }
        qp_provider_free(p);
        qp_provider_free(ref);
    }
}

/* Synthetic data and image folders never guess a dynamic size: a dynamic dim past the batch dim
 * that --calibration_shapes does not give is refused naming the input, its dims and the flag; a
 * dynamic batch dim alone is one row per batch; a given shape is used as it is. */
static void test_dynamic_dims(void **state) {
    (void)state;
    struct qp_npz_provider_input in = image_input(0);
    in.model_dims[0] = in.model_dims[2] = in.model_dims[3] = -1;
    in.batch_dims[0] = in.batch_dims[2] = in.batch_dims[3] = 1; /* what resolving gives */
    in.dim_params[0] = "batch";
    in.dim_params[2] = "height";
    struct qp_provider *p = NULL;
    struct qp_error err = {0};
    const char *paths[2] = {NULL, IMAGES};
    for (int k = 0; k < 2; k++) {
        assert_int_equal(qp_provider_open(paths[k], NULL, &in, 1, &p, &err), QP_ERR_BAD_INPUT);
        assert_null(p);
        assert_non_null(strstr(err.msg, "model input 'x' has dynamic dims [batch, 3, height, ?]"));
        assert_non_null(strstr(err.msg, "--calibration_shapes x:1x3x<dim 2>x<dim 3>"));
        assert_non_null(strstr(err.msg, k ? IMAGES : "synthetic calibration data"));
    }
    in.model_dims[2] = in.model_dims[3] = 4; /* only the batch dim dynamic: one row */
    in.batch_dims[2] = in.batch_dims[3] = 4;
    assert_int_equal(qp_provider_open(NULL, NULL, &in, 1, &p, &err), QP_OK);
    const struct qp_array *a;
    int end = 0;
    assert_int_equal(qp_provider_next(p, &a, &end, &err), QP_OK);
    assert_int_equal(a[0].dims[0], 1);
    qp_provider_free(p);
    in.model_dims[2] = -1; /* given by --calibration_shapes: taken as given */
    in.batch_dims[0] = 2;
    in.shape_given = 1;
    assert_int_equal(qp_provider_open(NULL, NULL, &in, 1, &p, &err), QP_OK);
    assert_int_equal(qp_provider_next(p, &a, &end, &err), QP_OK);
    assert_int_equal(a[0].dims[0], 2);
    qp_provider_free(p);
}

static void test_arrays_and_refusals(void **state) {
    (void)state;
    struct qp_error err = {0};
    struct qp_provider *p = NULL;
    struct qp_npz_provider_input in = image_input(0);
    /* an .npz path goes to the array provider, and so does a folder of shards */
    mkdir(TMP, 0755);
    mkdir(TMP "/shards", 0755);
    static float x[2 * 48];
    struct qp_array a;
    int64_t d[4] = {2, 3, 4, 4};
    assert_int_equal(qp_array_view(&a, QP_DTYPE_FLOAT, 4, d, x, sizeof x, &err), QP_OK);
    const char *name = "x";
    assert_int_equal(qp_npz_write_file(TMP "/x.npz", &name, &a, 1, QP_NPZ_DEFLATE, &err), QP_OK);
    assert_int_equal(qp_npz_write_file(TMP "/shards/s.npz", &name, &a, 1, QP_NPZ_STORE, &err),
                     QP_OK);
    assert_int_equal(qp_provider_open(TMP "/x.npz", NULL, &in, 1, &p, &err), QP_OK);
    assert_string_equal(qp_provider_source(p), "npz");
    assert_int_equal(qp_provider_n_samples(p), 2);
    qp_provider_free(p);
    assert_false(qp_data_is_image_folder(TMP "/shards"));
    assert_int_equal(qp_provider_open(TMP "/shards", NULL, &in, 1, &p, &err), QP_OK);
    qp_provider_free(p);
    /* the byte cap reaches the array provider */
    struct qp_data_options o;
    qp_data_options_default(&o);
    o.max_bytes = 100;
    p = NULL;
    assert_int_equal(qp_provider_open(TMP "/x.npz", &o, &in, 1, &p, &err), QP_ERR_BAD_INPUT);
    assert_null(p);
    /* refusals */
    assert_int_equal(qp_provider_open(TMP "/missing", NULL, &in, 1, &p, &err), QP_ERR_IO);
    assert_non_null(strstr(err.msg, "missing"));
    qp_data_options_default(&o);
    o.image_std[1] = 0.0f;
    assert_int_equal(qp_provider_open(IMAGES, &o, &in, 1, &p, &err), QP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "--image_std has a zero entry"));
    struct qp_npz_provider_input two_ch = in;
    two_ch.batch_dims[1] = two_ch.model_dims[1] = 2;
    assert_int_equal(qp_provider_open(IMAGES, NULL, &two_ch, 1, &p, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "no 3-channel axis"));
    struct qp_npz_provider_input pair[2] = {in, in};
    pair[1].name = "y";
    assert_int_equal(qp_provider_open(IMAGES, NULL, pair, 2, &p, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "one float input of rank 4"));
    struct qp_npz_provider_input ints = in;
    ints.dtype = QP_DTYPE_INT64;
    assert_int_equal(qp_provider_open(IMAGES, NULL, &ints, 1, &p, &err), QP_ERR_BAD_INPUT);
    assert_null(p);
    assert_false(qp_data_is_image_folder(TMP "/missing"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_synthetic),
        cmocka_unit_test(test_images),
        cmocka_unit_test(test_dynamic_dims),
        cmocka_unit_test(test_arrays_and_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
