/*
 * Image folders as calibration data: PNG (libpng) and JPEG (libjpeg), decoded, preprocessed and
 * stacked into float32 batches of N images.
 *
 *     struct qp_image_options o;
 *     qp_image_options_default(&o);
 *     o.resize_h = o.resize_w = 256; o.crop_h = o.crop_w = 224;
 *     o.scale = 1.0f / 255; o.mean[0] = 0.485f; ...; o.std[0] = 0.229f; ...
 *     o.batch = 8;
 *     qp_provider_images_create("calib/", "input", &o, &p, &err);
 *
 * Files: every *.png, *.jpg, *.jpeg (any case) in the folder, not recursive, sorted by name
 * (byte order); hidden files and other files are skipped. Decoding: PNG of any bit depth and
 * colour type (gray, gray+alpha, RGB, RGBA, palette; alpha is dropped, not composited;
 * interlaced is fine); JPEG baseline or progressive, gray or RGB/YCbCr — CMYK/YCCK JPEGs are
 * refused. Pixels are floats in 0..255 (16-bit PNG samples are divided by 257). Every decoder
 * error or warning (corrupt or truncated data) is an error naming the file; nothing calls
 * exit(). Images larger than QP_IMAGE_MAX_PIXELS are refused before allocation.
 *
 * Preprocessing, in this order:
 *   1. resize (if resize_h/resize_w > 0): bilinear with half-pixel centres and no antialiasing
 *      (OpenCV's INTER_LINEAR): src = (dst + 0.5) * in / out - 0.5, clamped to the image.
 *      keep_ratio: scale by min(rh / h, rw / w), round the size, centre the result on a
 *      rh x rw canvas filled with pad_value (offsets (rh - h') / 2, (rw - w') / 2, floored);
 *   2. centre crop (if crop_h/crop_w > 0): offsets (H - ch) / 2, (W - cw) / 2, floored; a crop
 *      larger than the image is an error;
 *   3. channel order: RGB, or BGR when `bgr`;
 *   4. v = v * scale;
 *   5. v = (v - mean[c]) / std[c], c the channel in the OUTPUT order;
 *   6. layout NCHW or NHWC.
 * Without resize, all images must end up the same size (the error names the odd one).
 */
#ifndef QP_CALIB_IMAGE_H
#define QP_CALIB_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "calib/provider.h"
#include "qplace/status.h"

#define QP_IMAGE_MAX_PIXELS ((int64_t)1 << 28)

/* A decoded image: h x w RGB, interleaved, floats in 0..255. */
struct qp_image {
    int64_t h, w;
    float *rgb; /* owned; h * w * 3 */
};

/* Decodes the PNG or JPEG at `path` (format from the file's signature, not its name).
 * QP_ERR_IO (cannot open), QP_ERR_BAD_INPUT (not an image, corrupt, truncated),
 * QP_ERR_UNSUPPORTED (CMYK JPEG, over QP_IMAGE_MAX_PIXELS), QP_ERR_NOMEM. Messages start with
 * the path. `out` is written only on success; release with qp_image_release. */
enum qp_status qp_image_decode_file(const char *path, struct qp_image *out, struct qp_error *err);
/* The same for `size` bytes in memory (borrowed for the call); `name` (may be NULL) starts the
 * messages. What the fuzz harness feeds. */
enum qp_status qp_image_decode_memory(const char *name, const void *data, size_t size,
                                      struct qp_image *out, struct qp_error *err);
void qp_image_release(struct qp_image *img);

enum qp_image_layout { QP_IMAGE_NCHW, QP_IMAGE_NHWC, QP_IMAGE_LAYOUT_COUNT };

struct qp_image_options {
    int64_t resize_h, resize_w; /* 0: no resize */
    int keep_ratio;             /* resize keeping the aspect ratio, pad the rest */
    float pad_value;            /* in pixel units (0..255), before scale/mean/std */
    int64_t crop_h, crop_w;     /* 0: no crop */
    int bgr;                    /* 1: channel order B, G, R */
    float scale;                /* default 1 */
    float mean[3], std[3];      /* default 0 and 1 */
    enum qp_image_layout layout;
    int64_t batch; /* images per batch (default 1) */
    int drop_last; /* 1: drop a final batch with fewer than `batch` images */
};

void qp_image_options_default(struct qp_image_options *o);

/* Output size of `img` under `o`; QP_ERR_BAD_INPUT (crop larger than the image) or
 * QP_ERR_USAGE (bad options). */
enum qp_status qp_image_output_size(const struct qp_image_options *o, int64_t h, int64_t w,
                                    int64_t *oh, int64_t *ow, struct qp_error *err);

/* Preprocesses one image into `out` (3 * oh * ow floats in o->layout without the batch dim;
 * oh, ow from qp_image_output_size). `img` and `out` borrowed. QP_ERR_USAGE / BAD_INPUT /
 * NOMEM (the resize needs a scratch image). */
enum qp_status qp_image_preprocess(const struct qp_image *img, const struct qp_image_options *o,
                                   float *out, struct qp_error *err);

/* A provider over the image folder `dir` for the model input `input_name` (both copied):
 * batches [N, 3, H, W] (NCHW) or [N, H, W, 3] (NHWC) float32, N = o->batch except possibly
 * the last. The folder is listed when the provider is made; files are decoded one batch at a
 * time. QP_ERR_IO (no folder), QP_ERR_BAD_INPUT (no images), QP_ERR_USAGE (bad options),
 * QP_ERR_NOMEM. Source "images". */
enum qp_status qp_provider_images_create(const char *dir, const char *input_name,
                                         const struct qp_image_options *o, struct qp_provider **out,
                                         struct qp_error *err);

#endif
