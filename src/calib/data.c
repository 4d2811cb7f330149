/* Calibration data for every command: which provider a path means (data.h). */
#include "calib/data.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "calib/image.h"
#include "core/size.h"

void qp_data_options_default(struct qp_data_options *o) {
    memset(o, 0, sizeof *o);
    for (int c = 0; c < 3; c++)
        o->image_std[c] = 1.0f;
    o->synthetic_batches = 1;
}

static int has_suffix(const char *s, const char *suf) {
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && strcasecmp(s + n - k, suf) == 0;
}

int qp_data_is_image_folder(const char *dir) {
    DIR *d = dir ? opendir(dir) : NULL;
    if (!d) return 0;
    int images = 0, arrays = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        arrays += has_suffix(e->d_name, ".npz") || has_suffix(e->d_name, ".npy");
        images += has_suffix(e->d_name, ".png") || has_suffix(e->d_name, ".jpg") ||
                  has_suffix(e->d_name, ".jpeg");
    }
    closedir(d);
    return images > 0 && arrays == 0;
}

/* A batch of every input fits the byte cap (o->max_bytes, else the default), checked before any
 * provider allocates it: an absurd batch shape (--calibration_shapes x:100000x3x10000x10000) is
 * bad input naming the shape, not an out-of-memory. */
static enum qp_status check_batch_bytes(const struct qp_data_options *o,
                                        const struct qp_npz_provider_input *in, size_t n,
                                        struct qp_error *err) {
    uint64_t cap = o->max_bytes ? o->max_bytes : QP_CALIB_DEFAULT_MAX_BYTES;
    for (size_t i = 0; i < n; i++) {
        size_t elems = 1;
        int ok = 1;
        double approx = 1;
        for (int d = 0; d < in[i].rank; d++) {
            approx *= (double)in[i].batch_dims[d];
            ok = ok && in[i].batch_dims[d] >= 0 &&
                 qp_size_mul(elems, (size_t)in[i].batch_dims[d], &elems);
        }
        size_t bytes = ok ? qp_dtype_nbytes(in[i].dtype, elems, &ok) : 0;
        if (ok && bytes <= cap) continue;
        char shape[QP_MAX_RANK * 21 + 1] = "";
        size_t at = 0;
        for (int d = 0; d < in[i].rank && at < sizeof shape; d++)
            at += (size_t)snprintf(shape + at, sizeof shape - at, "%s%lld", d ? "x" : "",
                                   (long long)in[i].batch_dims[d]);
        approx *= (double)qp_dtype_traits(in[i].dtype)->bits / 8;
        return qp_error_set(
            err, QP_ERR_BAD_INPUT,
            "calibration data: a batch of input '%s' with shape %s (%s) would "
            "take %.3g bytes, over the cap of %llu bytes (--max_calibration_bytes); "
            "check --calibration_shapes",
            in[i].name, shape, qp_dtype_name(in[i].dtype), approx, (unsigned long long)cap);
    }
    return QP_OK;
}

/* Data made from nothing but the model's shapes (synthetic data; image folders, whose images are
 * resized to the input's H x W) never guess a size: a dynamic dim other than the batch dim that
 * --calibration_shapes does not give is bad input naming the input, its dims and the flag. A
 * dynamic batch dim is one row per batch, logged. `what` names the data in messages. */
static enum qp_status check_dynamic(const char *what, const struct qp_npz_provider_input *in,
                                    size_t n, struct qp_error *err) {
    for (size_t i = 0; i < n; i++) {
        const struct qp_npz_provider_input *x = &in[i];
        if (x->shape_given) continue;
        char dims[QP_MAX_RANK * 48], want[QP_MAX_RANK * 24];
        size_t at = 0, aw = 0;
        int bad = 0;
        for (int d = 0; d < x->rank; d++) {
            const char *sep = d ? ", " : "";
            const char *p = x->dim_params[d];
            if (x->model_dims[d] >= 0)
                at += (size_t)snprintf(dims + at, sizeof dims - at, "%s%lld", sep,
                                       (long long)x->model_dims[d]);
            else
                at += (size_t)snprintf(dims + at, sizeof dims - at, "%s%s", sep, p ? p : "?");
            if (at >= sizeof dims) at = sizeof dims - 1;
            bad += d > 0 && x->model_dims[d] < 0;
            if (x->model_dims[d] >= 0 || d == 0)
                aw += (size_t)snprintf(want + aw, sizeof want - aw, "%s%lld", d ? "x" : "",
                                       (long long)x->batch_dims[d]);
            else
                aw += (size_t)snprintf(want + aw, sizeof want - aw, "x<dim %d>", d);
            if (aw >= sizeof want) aw = sizeof want - 1;
        }
        if (bad)
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "%s: model input '%s' has dynamic dims [%s] and nothing gives "
                                "their sizes: set them with --calibration_shapes %s:%s, or give "
                                "real data with --calibration_data_path",
                                what, x->name, dims, x->name, want);
        if (x->rank > 0 && x->model_dims[0] < 0)
            qp_log(QP_LOG_INFO,
                   "%s: model input '%s' has a dynamic batch dim [%s]: one row per batch "
                   "(--calibration_shapes sets another)",
                   what, x->name, dims);
    }
    return QP_OK;
}

static enum qp_status open_synthetic(const struct qp_data_options *o,
                                     const struct qp_npz_provider_input *in, size_t n,
                                     struct qp_provider **out, struct qp_error *err) {
    struct qp_synthetic_input *s = calloc(n ? n : 1, sizeof *s);
    if (!s) return qp_error_set(err, QP_ERR_NOMEM, "calibration data: out of memory");
    for (size_t i = 0; i < n; i++) {
        s[i].name = in[i].name;
        s[i].dtype = in[i].dtype;
        s[i].rank = in[i].rank;
        memcpy(s[i].dims, in[i].batch_dims, sizeof s[i].dims);
    }
    enum qp_status st = qp_provider_synthetic_create(
        s, n, o->seed, o->synthetic_batches ? o->synthetic_batches : 1, out, err);
    free(s);
    return st;
}

static enum qp_status open_images(const char *path, const struct qp_data_options *o,
                                  const struct qp_npz_provider_input *in, size_t n,
                                  struct qp_provider **out, struct qp_error *err) {
    if (n != 1 || in[0].rank != 4 || in[0].dtype != QP_DTYPE_FLOAT)
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "%s: an image folder needs a model with one float input of rank 4",
                            path);
    const int64_t *d = in[0].batch_dims;
    int nhwc = d[1] != 3 && d[3] == 3;
    if (!nhwc && d[1] != 3)
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "%s: model input '%s' has no 3-channel axis (NCHW or NHWC) for images",
                            path, in[0].name);
    for (int c = 0; c < 3; c++)
        if (!(o->image_std[c] != 0.0f))
            return qp_error_set(err, QP_ERR_USAGE, "%s: --image_std has a zero entry", path);
    struct qp_image_options io;
    qp_image_options_default(&io);
    io.layout = nhwc ? QP_IMAGE_NHWC : QP_IMAGE_NCHW;
    io.resize_h = nhwc ? d[1] : d[2];
    io.resize_w = nhwc ? d[2] : d[3];
    io.batch = d[0];
    io.drop_last = 1;
    io.scale = 1.0f / 255;
    io.bgr = o->image_bgr;
    memcpy(io.mean, o->image_mean, sizeof io.mean);
    memcpy(io.std, o->image_std, sizeof io.std);
    return qp_provider_images_create(path, in[0].name, &io, out, err);
}

enum qp_status qp_provider_open(const char *path, const struct qp_data_options *o,
                                const struct qp_npz_provider_input *in, size_t n,
                                struct qp_provider **out, struct qp_error *err) {
    if (!out || (n && !in))
        return qp_error_set(err, QP_ERR_USAGE, "qp_provider_open: NULL argument");
    struct qp_data_options def;
    if (!o) {
        qp_data_options_default(&def);
        o = &def;
    }
    enum qp_status st = QP_OK;
    if (!path) {
        if ((st = check_dynamic("synthetic calibration data", in, n, err)) != QP_OK ||
            (st = check_batch_bytes(o, in, n, err)) != QP_OK)
            return st;
        return open_synthetic(o, in, n, out, err);
    }
    struct stat sb;
    if (stat(path, &sb) != 0) return qp_error_set(err, QP_ERR_IO, "%s: %s", path, strerror(errno));
    if (S_ISDIR(sb.st_mode) && qp_data_is_image_folder(path)) {
        if ((st = check_dynamic(path, in, n, err)) != QP_OK ||
            (st = check_batch_bytes(o, in, n, err)) != QP_OK)
            return st;
        return open_images(path, o, in, n, out, err);
    }
    return qp_provider_npz_create(path, in, n, o->max_bytes, out, err);
}
