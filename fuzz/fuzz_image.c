/*
 * libFuzzer harness for the image readers of image-folder calibration (calib/image.h): the bytes
 * go to the PNG / JPEG decoder as a file's would (format by signature). Beyond "does not crash",
 * an accepted image has a size within the pixel cap and every value in 0..255, and preprocessing
 * it (a resize with the aspect ratio kept and padding, then a crop, NCHW; and NHWC unresized)
 * succeeds with finite values.
 *
 *     scripts/build.sh fuzz && build-fuzz/fuzz/fuzz_image fuzz/corpus/image
 *
 * Seeds are in fuzz/corpus/image (tests/data/images/gen_images.py and fuzz/corpus/image/gen.py
 * made them); inputs that once crashed go to tests/data/fuzz-regressions/image/ (both replayed
 * by ctest).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "calib/image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "fuzz_image: invariant broken: %s\n", what);
        abort();
    }
}

static void preprocess(const struct qp_image *img, const struct qp_image_options *o) {
    struct qp_error err = {0};
    int64_t oh = 0, ow = 0;
    if (qp_image_output_size(o, img->h, img->w, &oh, &ow, &err) != QP_OK) return;
    check(oh > 0 && ow > 0 && oh * ow <= QP_IMAGE_MAX_PIXELS, "output size out of range");
    float *out = malloc((size_t)(3 * oh * ow) * sizeof *out);
    if (!out) return;
    if (qp_image_preprocess(img, o, out, &err) == QP_OK)
        for (int64_t i = 0; i < 3 * oh * ow; i++)
            check(isfinite(out[i]), "preprocessing made a non-finite value");
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct qp_image img = {0};
    struct qp_error err = {0};
    if (qp_image_decode_memory("fuzz", data, size, &img, &err) != QP_OK) {
        check(err.msg[0] != '\0', "a refusal without a message");
        return 0;
    }
    check(img.h > 0 && img.w > 0 && img.h * img.w <= QP_IMAGE_MAX_PIXELS, "bad image size");
    for (int64_t i = 0; i < img.h * img.w * 3; i++)
        check(img.rgb[i] >= 0.0f && img.rgb[i] <= 255.0f, "a pixel value outside 0..255");
    if (img.h * img.w <= 1 << 16) { /* keep the runs fast: preprocess small images only */
        struct qp_image_options o;
        qp_image_options_default(&o);
        o.resize_h = 7;
        o.resize_w = 5;
        o.keep_ratio = 1;
        o.crop_h = 5;
        o.crop_w = 3;
        o.scale = 1.0f / 255;
        preprocess(&img, &o);
        qp_image_options_default(&o);
        o.layout = QP_IMAGE_NHWC;
        o.bgr = 1;
        preprocess(&img, &o);
    }
    qp_image_release(&img);
    return 0;
}
