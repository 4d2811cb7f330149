#include "calib/image.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jpeglib.h>
#include <png.h>

#include "core/size.h"
#include "core/sort.h"

void qp_image_release(struct qp_image *img) {
    if (!img) return;
    free(img->rgb);
    memset(img, 0, sizeof *img);
}

static enum qp_status check_size(const char *path, int64_t h, int64_t w, struct qp_error *err) {
    if (h < 1 || w < 1)
        return qp_error_set(err, QP_ERR_BAD_INPUT, "%s: image size %lldx%lld", path, (long long)w,
                            (long long)h);
    if (h > QP_IMAGE_MAX_PIXELS / w)
        return qp_error_set(err, QP_ERR_UNSUPPORTED,
                            "%s: image %lldx%lld is larger than %lld pixels", path, (long long)w,
                            (long long)h, (long long)QP_IMAGE_MAX_PIXELS);
    return QP_OK;
}

static enum qp_status alloc_rgb(const char *path, int64_t h, int64_t w, float **out,
                                struct qp_error *err) {
    enum qp_status st = check_size(path, h, w, err);
    if (st != QP_OK) return st;
    *out = qp_malloc_n((size_t)(h * w) * 3, sizeof(float));
    if (!*out) return qp_error_set(err, QP_ERR_NOMEM, "%s: out of memory", path);
    return QP_OK;
}

/* ---- PNG ----------------------------------------------------------------------------- */

struct png_ctx {
    char msg[256];
};

static void png_on_error(png_structp png, png_const_charp msg) {
    struct png_ctx *c = png_get_error_ptr(png);
    snprintf(c->msg, sizeof c->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg) {
    (void)png;
    (void)msg; /* benign (e.g. an unknown ancillary chunk); errors come through png_on_error */
}

/* Bytes in stream f (from its start), -1 when it cannot tell; the position is kept. */
static long long stream_bytes(FILE *f) {
    long at = ftell(f);
    if (at < 0 || fseek(f, 0, SEEK_END) != 0) return -1;
    long end = ftell(f);
    if (fseek(f, at, SEEK_SET) != 0) return -1;
    return end;
}

/* Deflate expands a byte into at most about 1032 (its largest ratio), so a PNG of `have` bytes
 * holds at most that many bytes of filtered rows; the margin covers the chunks' overhead. */
#define PNG_MAX_RATIO 1100.0

static enum qp_status decode_png(const char *path, FILE *f, struct qp_image *out,
                                 struct qp_error *err) {
    struct png_ctx ctx = {{0}};
    png_structp png =
        png_create_read_struct(PNG_LIBPNG_VER_STRING, &ctx, png_on_error, png_on_warning);
    if (!png) return qp_error_set(err, QP_ERR_NOMEM, "%s: out of memory", path);
    png_infop info = png_create_info_struct(png);
    /* Touched between setjmp and a possible longjmp: volatile so they survive it. */
    unsigned char *volatile pixels = NULL;
    png_bytep *volatile rows = NULL;
    float *volatile rgb = NULL;
    enum qp_status st = QP_OK;
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return qp_error_set(err, QP_ERR_NOMEM, "%s: out of memory", path);
    }
    if (setjmp(png_jmpbuf(png))) {
        st = qp_error_set(err, QP_ERR_BAD_INPUT, "%s: corrupt or truncated PNG: %s", path, ctx.msg);
        goto done;
    }
    png_init_io(png, f);
    png_set_user_limits(png, 0x7fffffff, 0x7fffffff);
    png_read_info(png, info);
    png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
    /* A header declaring more rows than the file can hold is refused before anything is
     * allocated for them (a 100-byte file may declare 2^28 pixels: gigabytes; the JPEG reader
     * grows its rows instead, but an interlaced PNG needs all of them at once). */
    long long have = stream_bytes(f);
    double need = ((double)png_get_rowbytes(png, info) + 1.0) * (double)h;
    if (have >= 0 && need > PNG_MAX_RATIO * (double)have + 65536.0) {
        st = qp_error_set(err, QP_ERR_BAD_INPUT,
                          "%s: corrupt or truncated PNG: it declares %ux%u pixels (%.0f bytes of "
                          "rows) in %lld bytes, more than compression can hold",
                          path, (unsigned)w, (unsigned)h, need, have);
        goto done;
    }
    int depth = png_get_bit_depth(png, info);
    int ct = png_get_color_type(png, info);
    if (ct == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (ct == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (ct == PNG_COLOR_TYPE_GRAY || ct == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
    /* alpha (including a tRNS chunk, which libpng otherwise ignores here) is dropped */
    if (png_get_valid(png, info, PNG_INFO_tRNS)) png_set_tRNS_to_alpha(png);
    if ((ct & PNG_COLOR_MASK_ALPHA) || png_get_valid(png, info, PNG_INFO_tRNS))
        png_set_strip_alpha(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    int out_depth = png_get_bit_depth(png, info);
    int channels = png_get_channels(png, info);
    size_t rowbytes = png_get_rowbytes(png, info);
    if (channels != 3 || (out_depth != 8 && out_depth != 16) ||
        rowbytes != (size_t)w * 3 * (size_t)(out_depth / 8)) {
        st = qp_error_set(err, QP_ERR_UNSUPPORTED,
                          "%s: PNG layout not handled (%d channels, %d "
                          "bits)",
                          path, channels, out_depth);
        goto done;
    }
    float *tmp = NULL;
    if ((st = alloc_rgb(path, h, w, &tmp, err)) != QP_OK) goto done;
    rgb = tmp;
    pixels = malloc(rowbytes * h);
    rows = malloc(sizeof(png_bytep) * h);
    if (!pixels || !rows) {
        st = qp_error_set(err, QP_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    for (png_uint_32 y = 0; y < h; y++)
        rows[y] = pixels + rowbytes * y;
    png_read_image(png, rows);
    png_read_end(png, NULL);
    size_t n = (size_t)w * h * 3;
    if (out_depth == 8) {
        for (size_t i = 0; i < n; i++)
            rgb[i] = pixels[i];
    } else {
        for (size_t i = 0; i < n; i++)
            rgb[i] = (float)((pixels[2 * i] << 8) | pixels[2 * i + 1]) / 257.0f;
    }
    out->h = h;
    out->w = w;
    out->rgb = rgb;
    rgb = NULL;
done:
    png_destroy_read_struct(&png, &info, NULL);
    free(pixels);
    free(rows);
    free(rgb);
    return st;
}

/* ---- JPEG ---------------------------------------------------------------------------- */

struct jpeg_ctx {
    struct jpeg_error_mgr mgr;
    jmp_buf jmp;
    char msg[JMSG_LENGTH_MAX];
    int n_warnings;
};

static void jpeg_on_error(j_common_ptr cinfo) {
    struct jpeg_ctx *c = (struct jpeg_ctx *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, c->msg);
    longjmp(c->jmp, 1);
}

/* libjpeg reports corrupt or truncated data as warnings and fills in grey; we refuse it. */
static void jpeg_on_message(j_common_ptr cinfo, int level) {
    struct jpeg_ctx *c = (struct jpeg_ctx *)cinfo->err;
    if (level < 0 && c->n_warnings++ == 0) (*cinfo->err->format_message)(cinfo, c->msg);
}

static enum qp_status decode_jpeg(const char *path, FILE *f, struct qp_image *out,
                                  struct qp_error *err) {
    struct jpeg_decompress_struct cinfo;
    struct jpeg_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    cinfo.err = jpeg_std_error(&ctx.mgr);
    ctx.mgr.error_exit = jpeg_on_error;
    ctx.mgr.emit_message = jpeg_on_message;
    unsigned char *volatile row = NULL;
    float *volatile rgb = NULL;
    volatile enum qp_status st = QP_OK;
    if (setjmp(ctx.jmp)) {
        st = qp_error_set(err, QP_ERR_BAD_INPUT, "%s: corrupt JPEG: %s", path, ctx.msg);
        goto done;
    }
    jpeg_create_decompress(&cinfo);
    jpeg_stdio_src(&cinfo, f);
    jpeg_read_header(&cinfo, TRUE);
    int comps = cinfo.num_components;
    if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
        st = qp_error_set(err, QP_ERR_UNSUPPORTED,
                          "%s: CMYK JPEG is not supported (convert it to RGB)", path);
        goto done;
    }
    if (comps != 1 && comps != 3) {
        st = qp_error_set(err, QP_ERR_UNSUPPORTED, "%s: JPEG with %d components", path, comps);
        goto done;
    }
    cinfo.out_color_space = comps == 1 ? JCS_GRAYSCALE : JCS_RGB;
    if ((int64_t)cinfo.image_width * cinfo.image_height > QP_IMAGE_MAX_PIXELS) {
        st = qp_error_set(err, QP_ERR_UNSUPPORTED, "%s: image %ux%u is larger than %lld pixels",
                          path, cinfo.image_width, cinfo.image_height,
                          (long long)QP_IMAGE_MAX_PIXELS);
        goto done;
    }
    jpeg_start_decompress(&cinfo);
    int64_t w = cinfo.output_width, h = cinfo.output_height;
    int oc = cinfo.output_components;
    enum qp_status ast = check_size(path, h, w, err);
    if (ast != QP_OK) {
        st = ast;
        goto done;
    }
    int64_t cap = 0; /* rows of rgb allocated: grown as rows decode, so that a small file
                      * declaring 2^28 pixels and then ending allocates little (found by
                      * fuzzing: 3 GB for a 146-byte file) */
    row = malloc((size_t)w * (size_t)oc);
    if (!row) {
        st = qp_error_set(err, QP_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    /* The first warning (corrupt or missing data) ends the decode: libjpeg would otherwise fill
     * every remaining row of a truncated file, and a 200-byte file may declare 2^28 pixels
     * (found by fuzzing: minutes per file). */
    while (cinfo.output_scanline < cinfo.output_height && !ctx.n_warnings) {
        int64_t y = cinfo.output_scanline;
        JSAMPROW rp = row;
        if (jpeg_read_scanlines(&cinfo, &rp, 1) != 1) break;
        if (y >= cap) {
            int64_t nc = cap ? 2 * cap : 64;
            if (nc > h) nc = h;
            float *g = realloc(rgb, (size_t)(nc * w) * 3 * sizeof(float));
            if (!g) {
                st = qp_error_set(err, QP_ERR_NOMEM, "%s: out of memory", path);
                goto done;
            }
            rgb = g;
            cap = nc;
        }
        float *dst = rgb + y * w * 3;
        for (int64_t x = 0; x < w; x++) {
            if (oc == 1) {
                dst[3 * x] = dst[3 * x + 1] = dst[3 * x + 2] = row[x];
            } else {
                dst[3 * x] = row[3 * x];
                dst[3 * x + 1] = row[3 * x + 1];
                dst[3 * x + 2] = row[3 * x + 2];
            }
        }
    }
    if (!ctx.n_warnings && cinfo.output_scanline == cinfo.output_height)
        jpeg_finish_decompress(&cinfo);
    if (ctx.n_warnings || cinfo.output_scanline < cinfo.output_height) {
        st =
            qp_error_set(err, QP_ERR_BAD_INPUT, "%s: corrupt or truncated JPEG: %s", path, ctx.msg);
        goto done;
    }
    out->h = h;
    out->w = w;
    out->rgb = rgb;
    rgb = NULL;
done:
    jpeg_destroy_decompress(&cinfo);
    free(row);
    free(rgb);
    return st;
}

/* Decodes the open stream `f` (at its start) by its signature; `name` starts the messages. */
static enum qp_status decode_stream(const char *name, FILE *f, struct qp_image *out,
                                    struct qp_error *err) {
    unsigned char sig[8] = {0};
    size_t got = fread(sig, 1, sizeof sig, f);
    enum qp_status st;
    struct qp_image img = {0};
    if (got == 8 && png_sig_cmp(sig, 0, 8) == 0) {
        rewind(f);
        st = decode_png(name, f, &img, err);
    } else if (got >= 3 && sig[0] == 0xFF && sig[1] == 0xD8 && sig[2] == 0xFF) {
        rewind(f);
        st = decode_jpeg(name, f, &img, err);
    } else {
        st = qp_error_set(err, QP_ERR_BAD_INPUT, "%s: not a PNG or JPEG file", name);
    }
    if (st == QP_OK) *out = img;
    return st;
}

enum qp_status qp_image_decode_file(const char *path, struct qp_image *out, struct qp_error *err) {
    if (!path || !out) return qp_error_set(err, QP_ERR_USAGE, "image: NULL argument");
    FILE *f = fopen(path, "rb");
    if (!f) return qp_error_set(err, QP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    enum qp_status st = decode_stream(path, f, out, err);
    fclose(f);
    return st;
}

enum qp_status qp_image_decode_memory(const char *name, const void *data, size_t size,
                                      struct qp_image *out, struct qp_error *err) {
    if (!out || (!data && size)) return qp_error_set(err, QP_ERR_USAGE, "image: NULL argument");
    const char *nm = name ? name : "image";
    if (size == 0) return qp_error_set(err, QP_ERR_BAD_INPUT, "%s: not a PNG or JPEG file", nm);
    FILE *f = fmemopen((void *)data, size, "rb");
    if (!f) return qp_error_set(err, QP_ERR_NOMEM, "%s: cannot open the bytes as a stream", nm);
    enum qp_status st = decode_stream(nm, f, out, err);
    fclose(f);
    return st;
}

/* ---- preprocessing ------------------------------------------------------------------- */

void qp_image_options_default(struct qp_image_options *o) {
    memset(o, 0, sizeof *o);
    o->scale = 1.0f;
    for (int c = 0; c < 3; c++)
        o->std[c] = 1.0f;
    o->layout = QP_IMAGE_NCHW;
    o->batch = 1;
}

static enum qp_status check_options(const struct qp_image_options *o, struct qp_error *err) {
    if ((o->resize_h > 0) != (o->resize_w > 0) || o->resize_h < 0 || o->resize_w < 0)
        return qp_error_set(err, QP_ERR_USAGE, "image: resize needs both a height and a width");
    if ((o->crop_h > 0) != (o->crop_w > 0) || o->crop_h < 0 || o->crop_w < 0)
        return qp_error_set(err, QP_ERR_USAGE, "image: crop needs both a height and a width");
    if (o->resize_h > 65536 || o->resize_w > 65536 || o->crop_h > 65536 || o->crop_w > 65536)
        return qp_error_set(err, QP_ERR_USAGE, "image: target size over 65536");
    if (o->keep_ratio && !o->resize_h)
        return qp_error_set(err, QP_ERR_USAGE, "image: keep-ratio needs a resize size");
    for (int c = 0; c < 3; c++)
        if (!(o->std[c] != 0.0f) || !isfinite(o->std[c]) || !isfinite(o->mean[c]))
            return qp_error_set(err, QP_ERR_USAGE, "image: std[%d] must be finite and non-zero", c);
    if (!isfinite(o->scale) || !isfinite(o->pad_value))
        return qp_error_set(err, QP_ERR_USAGE, "image: scale and pad value must be finite");
    if ((unsigned)o->layout >= QP_IMAGE_LAYOUT_COUNT)
        return qp_error_set(err, QP_ERR_USAGE, "image: unknown layout %d", (int)o->layout);
    if (o->batch < 1)
        return qp_error_set(err, QP_ERR_USAGE, "image: batch size %lld < 1", (long long)o->batch);
    return QP_OK;
}

enum qp_status qp_image_output_size(const struct qp_image_options *o, int64_t h, int64_t w,
                                    int64_t *oh, int64_t *ow, struct qp_error *err) {
    enum qp_status st = check_options(o, err);
    if (st != QP_OK) return st;
    int64_t H = o->resize_h ? o->resize_h : h, W = o->resize_w ? o->resize_w : w;
    if (o->crop_h) {
        if (o->crop_h > H || o->crop_w > W)
            return qp_error_set(
                err, QP_ERR_BAD_INPUT, "image: crop %lldx%lld is larger than the image %lldx%lld",
                (long long)o->crop_w, (long long)o->crop_h, (long long)W, (long long)H);
        H = o->crop_h;
        W = o->crop_w;
    }
    *oh = H;
    *ow = W;
    return QP_OK;
}

/* Source position of destination index i on an axis of `sn` source and `dn` destination
 * samples (half-pixel centres): the two neighbours *i0, *i1 and the weight *a of *i1. */
static void bilinear_coord(int64_t i, int64_t sn, int64_t dn, int64_t *i0, int64_t *i1, double *a) {
    double f = ((double)i + 0.5) * (double)sn / (double)dn - 0.5;
    if (f < 0) f = 0;
    int64_t lo = (int64_t)f;
    if (lo > sn - 1) lo = sn - 1;
    *i0 = lo;
    *i1 = lo + 1 < sn ? lo + 1 : sn - 1;
    *a = f - (double)lo;
    if (*a < 0) *a = 0;
}

/* Bilinear, half-pixel centres (OpenCV INTER_LINEAR without its fixed-point rounding). */
static void resize_bilinear(const float *src, int64_t sh, int64_t sw, float *dst, int64_t dh,
                            int64_t dw, int64_t dst_stride) {
    for (int64_t y = 0; y < dh; y++) {
        int64_t y0, y1;
        double ay;
        bilinear_coord(y, sh, dh, &y0, &y1, &ay);
        for (int64_t x = 0; x < dw; x++) {
            int64_t x0, x1;
            double ax;
            bilinear_coord(x, sw, dw, &x0, &x1, &ax);
            for (int c = 0; c < 3; c++) {
                double p00 = src[(y0 * sw + x0) * 3 + c], p01 = src[(y0 * sw + x1) * 3 + c];
                double p10 = src[(y1 * sw + x0) * 3 + c], p11 = src[(y1 * sw + x1) * 3 + c];
                double top = p00 + (p01 - p00) * ax, bot = p10 + (p11 - p10) * ax;
                dst[(y * dst_stride + x) * 3 + c] = (float)(top + (bot - top) * ay);
            }
        }
    }
}

enum qp_status qp_image_preprocess(const struct qp_image *img, const struct qp_image_options *o,
                                   float *out, struct qp_error *err) {
    int64_t oh = 0, ow = 0;
    enum qp_status st = qp_image_output_size(o, img->h, img->w, &oh, &ow, err);
    if (st != QP_OK) return st;
    const float *src = img->rgb;
    int64_t H = img->h, W = img->w;
    float *scratch = NULL;
    /* A resize to the image's own size is the identity (every sample lands on a pixel centre
     * with weight 1), so it is skipped. */
    if (o->resize_h && !(o->resize_h == img->h && o->resize_w == img->w)) {
        H = o->resize_h;
        W = o->resize_w;
        scratch = qp_malloc_n((size_t)(H * W) * 3, sizeof *scratch);
        if (!scratch) return qp_error_set(err, QP_ERR_NOMEM, "image: out of memory");
        if (o->keep_ratio) {
            double s = fmin((double)H / (double)img->h, (double)W / (double)img->w);
            int64_t nh = (int64_t)llround((double)img->h * s),
                    nw = (int64_t)llround((double)img->w * s);
            if (nh < 1) nh = 1;
            if (nw < 1) nw = 1;
            if (nh > H) nh = H;
            if (nw > W) nw = W;
            for (int64_t i = 0; i < H * W * 3; i++)
                scratch[i] = o->pad_value;
            int64_t top = (H - nh) / 2, left = (W - nw) / 2;
            resize_bilinear(img->rgb, img->h, img->w, scratch + (top * W + left) * 3, nh, nw, W);
        } else {
            resize_bilinear(img->rgb, img->h, img->w, scratch, H, W, W);
        }
        src = scratch;
    }
    int64_t top = (H - oh) / 2, left = (W - ow) / 2;
    for (int64_t y = 0; y < oh; y++) {
        for (int64_t x = 0; x < ow; x++) {
            const float *px = src + ((y + top) * W + (x + left)) * 3;
            for (int c = 0; c < 3; c++) {
                float v = px[o->bgr ? 2 - c : c];
                v = (v * o->scale - o->mean[c]) / o->std[c];
                if (o->layout == QP_IMAGE_NCHW)
                    out[(c * oh + y) * ow + x] = v;
                else
                    out[(y * ow + x) * 3 + c] = v;
            }
        }
    }
    free(scratch);
    return QP_OK;
}

/* ---- the folder provider ------------------------------------------------------------- */

struct images {
    struct qp_image_options o;
    char **files; /* full paths, sorted by name */
    size_t n_files, next;
    int64_t oh, ow; /* output size, fixed by the first image when there is no resize */
};

static int has_image_ext(const char *name) {
    const char *dot = strrchr(name, '.');
    return dot && (strcasecmp(dot, ".png") == 0 || strcasecmp(dot, ".jpg") == 0 ||
                   strcasecmp(dot, ".jpeg") == 0);
}

static enum qp_status images_next(struct qp_provider *p, int *end_out, struct qp_error *err) {
    struct images *im = p->impl;
    size_t left = im->n_files - im->next;
    size_t n = left < (size_t)im->o.batch ? left : (size_t)im->o.batch;
    if (n == 0 || (im->o.drop_last && n < (size_t)im->o.batch)) {
        *end_out = 1;
        return QP_OK;
    }
    struct qp_array *a = &p->batch[0];
    int64_t dims[4] = {(int64_t)n, 3, im->oh, im->ow};
    if (im->o.layout == QP_IMAGE_NHWC) {
        dims[1] = im->oh;
        dims[2] = im->ow;
        dims[3] = 3;
    }
    if (!a->data || a->dims[0] != (int64_t)n) {
        qp_array_release(a);
        enum qp_status st = qp_array_alloc(a, QP_DTYPE_FLOAT, 4, dims, err);
        if (st != QP_OK) return st;
    }
    size_t per = (size_t)(3 * im->oh * im->ow);
    for (size_t i = 0; i < n; i++) {
        const char *path = im->files[im->next + i];
        struct qp_image img = {0};
        enum qp_status st = qp_image_decode_file(path, &img, err);
        if (st != QP_OK) return st;
        int64_t oh = 0, ow = 0;
        st = qp_image_output_size(&im->o, img.h, img.w, &oh, &ow, err);
        if (st == QP_OK && (oh != im->oh || ow != im->ow))
            st = qp_error_set(err, QP_ERR_BAD_INPUT,
                              "%s: image is %lldx%lld after preprocessing, the first image "
                              "gave %lldx%lld (resize them with a resize size)",
                              path, (long long)ow, (long long)oh, (long long)im->ow,
                              (long long)im->oh);
        else if (st != QP_OK)
            qp_error_prefix(err, "%s", path);
        if (st == QP_OK) st = qp_image_preprocess(&img, &im->o, (float *)a->data + i * per, err);
        qp_image_release(&img);
        if (st != QP_OK) return st;
    }
    im->next += n;
    *end_out = 0;
    return QP_OK;
}

static enum qp_status images_reset(struct qp_provider *p, struct qp_error *err) {
    (void)err;
    ((struct images *)p->impl)->next = 0;
    return QP_OK;
}

static void images_destroy(struct qp_provider *p) {
    struct images *im = p->impl;
    if (!im) return;
    for (size_t i = 0; i < im->n_files; i++)
        free(im->files[i]);
    free(im->files);
    free(im);
}

static const struct qp_provider_ops images_ops = {images_next, images_reset, images_destroy};

enum qp_status qp_provider_images_create(const char *dir, const char *input_name,
                                         const struct qp_image_options *o, struct qp_provider **out,
                                         struct qp_error *err) {
    if (!dir || !input_name || !o || !out)
        return qp_error_set(err, QP_ERR_USAGE, "images: NULL argument");
    enum qp_status st = check_options(o, err);
    if (st != QP_OK) return st;
    struct images *im = calloc(1, sizeof *im);
    if (!im) return qp_error_set(err, QP_ERR_NOMEM, "images: out of memory");
    im->o = *o;
    struct qp_provider *p = NULL;
    DIR *d = opendir(dir);
    if (!d) {
        st = qp_error_set(err, QP_ERR_IO, "%s: cannot open folder: %s", dir, strerror(errno));
        goto fail;
    }
    size_t cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || !has_image_ext(e->d_name)) continue;
        if (im->n_files == cap) {
            size_t nc = cap ? cap * 2 : 16;
            char **nf = qp_realloc_n(im->files, nc, sizeof *nf);
            if (!nf) {
                closedir(d);
                st = qp_error_set(err, QP_ERR_NOMEM, "images: out of memory");
                goto fail;
            }
            im->files = nf;
            cap = nc;
        }
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        char *path = malloc(len);
        if (!path) {
            closedir(d);
            st = qp_error_set(err, QP_ERR_NOMEM, "images: out of memory");
            goto fail;
        }
        snprintf(path, len, "%s/%s", dir, e->d_name);
        im->files[im->n_files++] = path;
    }
    closedir(d);
    if (im->n_files == 0) {
        st = qp_error_set(err, QP_ERR_BAD_INPUT, "%s: no .png, .jpg or .jpeg files", dir);
        goto fail;
    }
    qsort(im->files, im->n_files, sizeof *im->files, qp_cmp_strp);
    if (o->resize_h) {
        st = qp_image_output_size(o, o->resize_h, o->resize_w, &im->oh, &im->ow, err);
    } else {
        /* the first image fixes the size; its header is decoded once here */
        struct qp_image img = {0};
        st = qp_image_decode_file(im->files[0], &img, err);
        if (st == QP_OK) {
            st = qp_image_output_size(o, img.h, img.w, &im->oh, &im->ow, err);
            if (st != QP_OK) qp_error_prefix(err, "%s", im->files[0]);
        }
        qp_image_release(&img);
    }
    if (st != QP_OK) goto fail;
    st = qp_provider_alloc(&images_ops, "images", &input_name, 1, &p, err);
    if (st != QP_OK) goto fail;
    p->impl = im;
    p->n_samples = o->drop_last ? im->n_files / (size_t)o->batch * (size_t)o->batch : im->n_files;
    p->n_batches = (p->n_samples + (uint64_t)o->batch - 1) / (uint64_t)o->batch;
    *out = p;
    return QP_OK;
fail:
    for (size_t i = 0; i < im->n_files; i++)
        free(im->files[i]);
    free(im->files);
    free(im);
    return st;
}
