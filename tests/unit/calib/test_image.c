/* Image decoding (PNG from tests/data/images, made by gen_images.py; JPEG made here with
 * libjpeg), preprocessing checked by hand on 4x4 images, and the folder provider. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jpeglib.h>

#include "calib/image.h"

#define IMG(name) QP_TEST_DATA_DIR "/images/" name

static float R(int y, int x) {
    return (float)(16 * (4 * y + x));
}
static float G(int y, int x) {
    return 255.0f - R(y, x);
}
static float B(int y, int x) {
    return (float)(40 * y + 10 * x);
}

static void decode_ok(const char *path, struct qp_image *img) {
    struct qp_error err = {0};
    enum qp_status st = qp_image_decode_file(path, img, &err);
    if (st != QP_OK) fail_msg("%s", err.msg);
}

static void test_png_types(void **state) {
    (void)state;
    struct qp_image img;
    decode_ok(IMG("rgb8_4x4.png"), &img);
    assert_int_equal(img.h, 4);
    assert_int_equal(img.w, 4);
    for (int y = 0; y < 4; y++)
        for (int x = 0; x < 4; x++) {
            const float *p = img.rgb + (y * 4 + x) * 3;
            assert_true(p[0] == R(y, x) && p[1] == G(y, x) && p[2] == B(y, x));
        }
    qp_image_release(&img);

    decode_ok(IMG("rgba8_4x4.png"), &img); /* alpha dropped */
    assert_true(img.rgb[(2 * 4 + 3) * 3 + 0] == R(2, 3) && img.rgb[(2 * 4 + 3) * 3 + 2] == B(2, 3));
    qp_image_release(&img);

    decode_ok(IMG("gray8_4x4.png"), &img); /* gray replicated to RGB */
    const float *p = img.rgb + (1 * 4 + 2) * 3;
    assert_true(p[0] == R(1, 2) && p[1] == R(1, 2) && p[2] == R(1, 2));
    qp_image_release(&img);

    decode_ok(IMG("rgb16_4x4.png"), &img); /* 16-bit samples / 257 */
    p = img.rgb + (3 * 4 + 1) * 3;
    assert_float_equal(p[0], 256.0f * R(3, 1) / 257.0f, 1e-4);
    assert_float_equal(p[1], 256.0f * G(3, 1) / 257.0f, 1e-4);
    qp_image_release(&img);

    decode_ok(IMG("palette_4x4.png"), &img); /* index (x + y) % 4 */
    static const float pal[4][3] = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {10, 20, 30}};
    for (int y = 0; y < 4; y++)
        for (int x = 0; x < 4; x++)
            assert_memory_equal(img.rgb + (y * 4 + x) * 3, pal[(x + y) % 4], sizeof pal[0]);
    qp_image_release(&img);
}

static void test_png_errors(void **state) {
    (void)state;
    struct qp_image img = {0};
    struct qp_error err = {0};
    assert_int_equal(qp_image_decode_file(IMG("truncated.png"), &img, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "truncated.png"));
    assert_int_equal(qp_image_decode_file(IMG("badcrc.png"), &img, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "badcrc.png"));
    assert_int_equal(qp_image_decode_file(IMG("notimage.png"), &img, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "not a PNG or JPEG"));
    assert_int_equal(qp_image_decode_file(IMG("missing.png"), &img, &err), QP_ERR_IO);
    assert_null(img.rgb);
    /* 186 bytes declaring a huge JPEG: refused at the first missing row, not decoded for minutes
     * (fuzz_image), and the same from memory. */
    const char *huge = QP_TEST_DATA_DIR "/fuzz-regressions/image/truncated_huge.jpg";
    assert_int_equal(qp_image_decode_file(huge, &img, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "corrupt or truncated JPEG"));
    FILE *f = fopen(huge, "rb");
    unsigned char buf[512];
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f) fclose(f);
    assert_true(n > 100);
    assert_int_equal(qp_image_decode_memory("mem", buf, n, &img, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "mem: corrupt or truncated JPEG"));
    assert_int_equal(qp_image_decode_memory(NULL, buf, 0, &img, &err), QP_ERR_BAD_INPUT);
    assert_null(img.rgb);
    /* 105 bytes declaring 16000x16000 RGB (3 GB of floats): refused from the header, from a
     * file and from memory, before anything is allocated for the rows */
    const char *big =
        QP_TEST_DATA_DIR "/fuzz-regressions/image/png-declares-256m-pixels-in-105-bytes.png";
    assert_int_equal(qp_image_decode_file(big, &img, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "declares 16000x16000 pixels"));
    f = fopen(big, "rb");
    n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f) fclose(f);
    assert_int_equal(n, 105);
    assert_int_equal(qp_image_decode_memory("mem", buf, n, &img, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "mem: corrupt or truncated PNG: it declares"));
    assert_null(img.rgb);
}

/* No resize: scale 1/255, mean/std per channel, NCHW. */
static void test_normalise_nchw(void **state) {
    (void)state;
    struct qp_image img;
    decode_ok(IMG("rgb8_4x4.png"), &img);
    struct qp_image_options o;
    qp_image_options_default(&o);
    o.scale = 1.0f / 255.0f;
    float mean[3] = {0.5f, 0.25f, 0.0f}, std[3] = {0.25f, 0.5f, 2.0f};
    memcpy(o.mean, mean, sizeof mean);
    memcpy(o.std, std, sizeof std);
    float out[48];
    struct qp_error err = {0};
    assert_int_equal(qp_image_preprocess(&img, &o, out, &err), QP_OK);
    /* channel 0 (R), y 1, x 2: R = 96 -> (96/255 - 0.5) / 0.25 */
    assert_float_equal(out[(0 * 4 + 1) * 4 + 2], (96.0f / 255.0f - 0.5f) / 0.25f, 1e-6);
    /* channel 1 (G), y 3, x 3: G = 255 - 240 = 15 -> (15/255 - 0.25) / 0.5 */
    assert_float_equal(out[(1 * 4 + 3) * 4 + 3], (15.0f / 255.0f - 0.25f) / 0.5f, 1e-6);
    /* channel 2 (B), y 2, x 1: B = 90 -> (90/255) / 2 */
    assert_float_equal(out[(2 * 4 + 2) * 4 + 1], 90.0f / 255.0f / 2.0f, 1e-6);
    qp_image_release(&img);
}

/* BGR + NHWC, scale 1. */
static void test_bgr_nhwc(void **state) {
    (void)state;
    struct qp_image img;
    decode_ok(IMG("rgb8_4x4.png"), &img);
    struct qp_image_options o;
    qp_image_options_default(&o);
    o.bgr = 1;
    o.layout = QP_IMAGE_NHWC;
    float out[48];
    struct qp_error err = {0};
    assert_int_equal(qp_image_preprocess(&img, &o, out, &err), QP_OK);
    for (int y = 0; y < 4; y++)
        for (int x = 0; x < 4; x++) {
            const float *p = out + (y * 4 + x) * 3;
            assert_true(p[0] == B(y, x) && p[1] == G(y, x) && p[2] == R(y, x));
        }
    qp_image_release(&img);
}

/* 4x4 -> 2x2 bilinear with half-pixel centres samples at 0.5 and 2.5: each output is the mean
 * of a 2x2 block; R(Y, X) = 16 * (4 * (2Y + 0.5) + 2X + 0.5) = 128Y + 32X + 40. */
static void test_resize_and_crop(void **state) {
    (void)state;
    struct qp_image img;
    decode_ok(IMG("rgb8_4x4.png"), &img);
    struct qp_image_options o;
    qp_image_options_default(&o);
    o.resize_h = o.resize_w = 2;
    float out[12];
    struct qp_error err = {0};
    assert_int_equal(qp_image_preprocess(&img, &o, out, &err), QP_OK);
    for (int y = 0; y < 2; y++)
        for (int x = 0; x < 2; x++) {
            assert_float_equal(out[(0 * 2 + y) * 2 + x], 128.0f * y + 32.0f * x + 40.0f, 1e-4);
            assert_float_equal(out[(2 * 2 + y) * 2 + x], 80.0f * y + 20.0f * x + 25.0f, 1e-4);
        }
    /* centre crop 2x2 of the 4x4: offset (1, 1) */
    qp_image_options_default(&o);
    o.crop_h = o.crop_w = 2;
    int64_t oh, ow;
    assert_int_equal(qp_image_output_size(&o, 4, 4, &oh, &ow, &err), QP_OK);
    assert_true(oh == 2 && ow == 2);
    assert_int_equal(qp_image_preprocess(&img, &o, out, &err), QP_OK);
    for (int y = 0; y < 2; y++)
        for (int x = 0; x < 2; x++)
            assert_true(out[(0 * 2 + y) * 2 + x] == R(y + 1, x + 1));
    /* resize 4x4 -> 6x6 then crop 4x4: samples at (y+1+0.5)*4/6-0.5 */
    qp_image_options_default(&o);
    o.resize_h = o.resize_w = 6;
    o.crop_h = o.crop_w = 4;
    float big[48];
    assert_int_equal(qp_image_preprocess(&img, &o, big, &err), QP_OK);
    /* output (0,0) is resized (1,1): src 1.5*4/6-0.5 = 0.5 in both dims -> R mean of block */
    assert_float_equal(big[0], 16.0f * (4 * 0.5f + 0.5f), 1e-4);
    /* a resize to the image's own size (plain or keeping the ratio) gives the pixels */
    for (int keep = 0; keep < 2; keep++) {
        qp_image_options_default(&o);
        o.resize_h = o.resize_w = 4;
        o.keep_ratio = keep;
        assert_int_equal(qp_image_preprocess(&img, &o, big, &err), QP_OK);
        for (int y = 0; y < 4; y++)
            for (int x = 0; x < 4; x++)
                assert_true(big[(0 * 4 + y) * 4 + x] == R(y, x) &&
                            big[(1 * 4 + y) * 4 + x] == G(y, x) &&
                            big[(2 * 4 + y) * 4 + x] == B(y, x));
    }
    /* a crop larger than the image is refused */
    qp_image_options_default(&o);
    o.crop_h = o.crop_w = 5;
    assert_int_equal(qp_image_preprocess(&img, &o, big, &err), QP_ERR_BAD_INPUT);
    qp_image_release(&img);
}

/* Keep ratio: the 4-wide, 2-high image into 4x4: scale min(4/2, 4/4) = 1, placed at row 1;
 * rows 0 and 3 are padding. */
static void test_keep_ratio_pad(void **state) {
    (void)state;
    struct qp_image img;
    decode_ok(IMG("rgb8_4x2.png"), &img);
    assert_true(img.h == 2 && img.w == 4);
    struct qp_image_options o;
    qp_image_options_default(&o);
    o.resize_h = o.resize_w = 4;
    o.keep_ratio = 1;
    o.pad_value = 114.0f;
    o.scale = 0.5f;
    float out[48];
    struct qp_error err = {0};
    assert_int_equal(qp_image_preprocess(&img, &o, out, &err), QP_OK);
    for (int c = 0; c < 3; c++)
        for (int x = 0; x < 4; x++) {
            assert_float_equal(out[(c * 4 + 0) * 4 + x], 57.0f, 1e-6);
            assert_float_equal(out[(c * 4 + 3) * 4 + x], 57.0f, 1e-6);
        }
    for (int y = 0; y < 2; y++)
        for (int x = 0; x < 4; x++) {
            assert_float_equal(out[(0 * 4 + y + 1) * 4 + x], R(y, x) * 0.5f, 1e-5);
            assert_float_equal(out[(2 * 4 + y + 1) * 4 + x], B(y, x) * 0.5f, 1e-5);
        }
    o.keep_ratio = 0;
    o.resize_w = 0;
    assert_int_equal(qp_image_preprocess(&img, &o, out, &err), QP_ERR_USAGE);
    qp_image_release(&img);
}

/* ---- JPEG, written here with libjpeg ---------------------------------------------------- */

static void write_jpeg(const char *path, int w, int h, int comps, J_COLOR_SPACE cs, int progressive,
                       const unsigned char *pixels) {
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr jerr;
    c.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&c);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    jpeg_stdio_dest(&c, f);
    c.image_width = (JDIMENSION)w;
    c.image_height = (JDIMENSION)h;
    c.input_components = comps;
    c.in_color_space = cs;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 100, TRUE);
    if (progressive) jpeg_simple_progression(&c);
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = (JSAMPROW)(pixels + (size_t)c.next_scanline * (size_t)(w * comps));
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    fclose(f);
}

#define TMP QP_TEST_BINARY_DIR "/calib_image_tmp"

static void test_jpeg(void **state) {
    (void)state;
    mkdir(TMP, 0755);
    unsigned char px[16 * 16 * 4];
    for (int i = 0; i < 16 * 16; i++) {
        px[3 * i] = 200;
        px[3 * i + 1] = 100;
        px[3 * i + 2] = 50;
    }
    struct qp_image img;
    struct qp_error err = {0};
    for (int prog = 0; prog < 2; prog++) {
        const char *path = prog ? TMP "/prog.jpg" : TMP "/base.jpg";
        write_jpeg(path, 16, 16, 3, JCS_RGB, prog, px);
        decode_ok(path, &img);
        assert_true(img.h == 16 && img.w == 16);
        for (int i = 0; i < 16 * 16; i++) {
            assert_float_equal(img.rgb[3 * i], 200.0f, 3.0f);
            assert_float_equal(img.rgb[3 * i + 1], 100.0f, 3.0f);
            assert_float_equal(img.rgb[3 * i + 2], 50.0f, 3.0f);
        }
        qp_image_release(&img);
    }
    /* grayscale: replicated */
    memset(px, 77, 16 * 16);
    write_jpeg(TMP "/gray.jpg", 16, 16, 1, JCS_GRAYSCALE, 0, px);
    decode_ok(TMP "/gray.jpg", &img);
    assert_float_equal(img.rgb[0], 77.0f, 2.0f);
    assert_true(img.rgb[0] == img.rgb[1] && img.rgb[1] == img.rgb[2]);
    qp_image_release(&img);
    /* CMYK: refused with a clear message */
    memset(px, 30, sizeof px);
    write_jpeg(TMP "/cmyk.jpg", 16, 16, 4, JCS_CMYK, 0, px);
    assert_int_equal(qp_image_decode_file(TMP "/cmyk.jpg", &img, &err), QP_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "CMYK"));
    assert_non_null(strstr(err.msg, "cmyk.jpg"));
    /* truncated: libjpeg would pad it with grey; we refuse it */
    FILE *f = fopen(TMP "/base.jpg", "rb");
    assert_non_null(f);
    static unsigned char buf[65536];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    f = fopen(TMP "/trunc.jpg", "wb");
    fwrite(buf, 1, n / 2, f);
    fclose(f);
    assert_int_equal(qp_image_decode_file(TMP "/trunc.jpg", &img, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "trunc.jpg"));
    /* garbage after the SOI marker */
    f = fopen(TMP "/junk.jpg", "wb");
    fwrite("\xff\xd8\xff\x00garbage", 1, 11, f);
    fclose(f);
    assert_int_equal(qp_image_decode_file(TMP "/junk.jpg", &img, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "junk.jpg"));
}

/* Folder: a.png, b.png, c.png in name order (red at (0,0) = 1, 2, 3), notes.txt skipped. */
static void test_folder_provider(void **state) {
    (void)state;
    struct qp_image_options o;
    qp_image_options_default(&o);
    o.batch = 2;
    struct qp_provider *p = NULL;
    struct qp_error err = {0};
    assert_int_equal(qp_provider_images_create(IMG("folder"), "pixel_values", &o, &p, &err), QP_OK);
    assert_string_equal(qp_provider_source(p), "images");
    assert_false(qp_provider_is_synthetic(p));
    assert_int_equal(qp_provider_n_samples(p), 3);
    assert_int_equal(qp_provider_n_batches(p), 2);
    assert_string_equal(qp_provider_input_name(p, 0), "pixel_values");
    for (int pass = 0; pass < 2; pass++) {
        const struct qp_array *b;
        int end = 0;
        assert_int_equal(qp_provider_next(p, &b, &end, &err), QP_OK);
        assert_false(end);
        assert_int_equal(b[0].rank, 4);
        assert_true(b[0].dims[0] == 2 && b[0].dims[1] == 3 && b[0].dims[2] == 4 &&
                    b[0].dims[3] == 4);
        const float *v = b[0].data;
        assert_true(v[0] == 1.0f && v[48] == 2.0f);
        assert_true(v[1] == R(0, 1));
        assert_int_equal(qp_provider_next(p, &b, &end, &err), QP_OK);
        assert_false(end);
        assert_int_equal(b[0].dims[0], 1);
        assert_true(((const float *)b[0].data)[0] == 3.0f);
        assert_int_equal(qp_provider_next(p, &b, &end, &err), QP_OK);
        assert_true(end);
        assert_null(b);
        assert_int_equal(qp_provider_reset(p, &err), QP_OK);
    }
    qp_provider_free(p);

    o.drop_last = 1;
    assert_int_equal(qp_provider_images_create(IMG("folder"), "x", &o, &p, &err), QP_OK);
    assert_int_equal(qp_provider_n_samples(p), 2);
    assert_int_equal(qp_provider_n_batches(p), 1);
    qp_provider_free(p);

    /* empty or missing folders */
    assert_int_equal(qp_provider_images_create(IMG("nope"), "x", &o, &p, &err), QP_ERR_IO);
    mkdir(TMP "/empty", 0755);
    assert_int_equal(qp_provider_images_create(TMP "/empty", "x", &o, &p, &err), QP_ERR_BAD_INPUT);
}

/* Without a resize, an image of another size is an error naming it. */
static void test_folder_mixed_sizes(void **state) {
    (void)state;
    mkdir(TMP, 0755);
    mkdir(TMP "/mixed", 0755);
    const char *src[2] = {IMG("rgb8_4x4.png"), IMG("rgb8_4x2.png")};
    const char *dst[2] = {TMP "/mixed/1.png", TMP "/mixed/2.png"};
    for (int i = 0; i < 2; i++) {
        FILE *in = fopen(src[i], "rb"), *out = fopen(dst[i], "wb");
        assert_non_null(in);
        assert_non_null(out);
        char buf[4096];
        size_t n = fread(buf, 1, sizeof buf, in);
        fwrite(buf, 1, n, out);
        fclose(in);
        fclose(out);
    }
    struct qp_image_options o;
    qp_image_options_default(&o);
    o.batch = 2;
    struct qp_provider *p = NULL;
    struct qp_error err = {0};
    assert_int_equal(qp_provider_images_create(TMP "/mixed", "x", &o, &p, &err), QP_OK);
    const struct qp_array *b;
    int end = 0;
    assert_int_equal(qp_provider_next(p, &b, &end, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "2.png"));
    qp_provider_free(p);
    /* with a resize they all fit */
    o.resize_h = o.resize_w = 3;
    assert_int_equal(qp_provider_images_create(TMP "/mixed", "x", &o, &p, &err), QP_OK);
    assert_int_equal(qp_provider_next(p, &b, &end, &err), QP_OK);
    assert_true(b[0].dims[0] == 2 && b[0].dims[2] == 3 && b[0].dims[3] == 3);
    qp_provider_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_png_types),
        cmocka_unit_test(test_png_errors),
        cmocka_unit_test(test_normalise_nchw),
        cmocka_unit_test(test_bgr_nhwc),
        cmocka_unit_test(test_resize_and_crop),
        cmocka_unit_test(test_keep_ratio_pad),
        cmocka_unit_test(test_jpeg),
        cmocka_unit_test(test_folder_provider),
        cmocka_unit_test(test_folder_mixed_sizes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
