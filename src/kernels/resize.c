/*
 * Resize (opsets 10-19: nearest / linear / cubic, every coordinate_transformation_mode and
 * nearest_mode, exclude_outside, extrapolation_value, axes and keep_aspect_ratio_policy; no
 * antialias) and Upsample (7, 9). Separable: prepare computes, per dimension and output
 * coordinate, the input taps and weights; run sums the product of taps. float32; int8 and
 * uint8 in nearest mode without extrapolation (a copy of bytes: the integer path's Resize
 * between a Q and a DQ, runtime/int8.h).
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/size.h"
#include "kernels/fast.h"
#include "kernels/kernels.h"

#define RS_TAPS 4

enum rs_mode { RS_NEAREST, RS_LINEAR, RS_CUBIC };

struct rs_state {
    int rank;
    int64_t in[QP_MAX_RANK], out[QP_MAX_RANK];
    float extrapolation;
    /* per dim d: taps for out coordinate o at tap_off[d] + o*RS_TAPS; ntap 0: extrapolate */
    int64_t tap_off[QP_MAX_RANK];
    int64_t *tap_idx;
    float *tap_w;
    unsigned char *ntap;
    /* Outer dims copied (one tap of weight 1 at the same index), the last two resized without
     * extrapolation: qp_k_resize_run takes the plane fast path. `copy2d`: every tap of the last
     * two dims is a single one of weight 1 (nearest, or linear on the grid). */
    int fast, copy2d;
    int bytes; /* int8/uint8: one tap of weight 1 everywhere, run by rs_bytes */
};

static float cubic_w(float a, float x) {
    x = fabsf(x);
    if (x <= 1.0f) return ((a + 2.0f) * x - (a + 3.0f)) * x * x + 1.0f;
    if (x < 2.0f) return ((a * x - 5.0f * a) * x + 8.0f * a) * x - 4.0f * a;
    return 0.0f;
}

static enum qp_status rs_read_floats(struct qp_kprep *p, int i, double *v, int *n) {
    *n = 0;
    if (i >= p->n_in || !p->in[i] || p->in[i]->numel == 0) return QP_OK;
    enum qp_status st = qp_kneed_const(p, i, i == 1 && p->opset >= 11 ? "roi" : "scales/sizes");
    if (st) return st;
    if (p->in[i]->numel > 2 * QP_MAX_RANK)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "input %d has too many elements", i);
    for (uint64_t k = 0; k < p->in[i]->numel; k++)
        v[k] = qp_kt_get_f64(p->in[i], k);
    *n = (int)p->in[i]->numel;
    return QP_OK;
}

/* Sets s->fast and s->copy2d (see struct rs_state). */
static void rs_classify(struct rs_state *s) {
    s->fast = s->copy2d = 0;
    if (s->rank < 2) return;
    for (int d = 0; d < s->rank - 2; d++) {
        if (s->in[d] != s->out[d]) return;
        for (int64_t o = 0; o < s->out[d]; o++) {
            int64_t t = s->tap_off[d] + o;
            if (s->ntap[t] != 1 || s->tap_idx[t * RS_TAPS] != o || s->tap_w[t * RS_TAPS] != 1.0f)
                return;
        }
    }
    int copy = 1;
    for (int d = s->rank - 2; d < s->rank; d++)
        for (int64_t o = 0; o < s->out[d]; o++) {
            int64_t t = s->tap_off[d] + o;
            if (s->ntap[t] == 0) return;
            if (s->ntap[t] != 1 || s->tap_w[t * RS_TAPS] != 1.0f) copy = 0;
        }
    s->fast = 1;
    s->copy2d = copy;
}

/* The attributes that choose how Resize samples. */
struct rs_attrs {
    int upsample; /* Upsample rather than Resize */
    enum rs_mode mode;
    char ctm[32], nm[32], kar[32]; /* coordinate_transformation_mode, nearest_mode, policy */
    float cubic_a;
    int exclude;
};

static enum qp_status rs_read_attrs(const struct qp_kprep *p, struct rs_attrs *a) {
    char mode_s[32];
    a->upsample = strcmp(p->node->op_type, "Upsample") == 0;
    qp_kattr_str(p->node, "mode", "nearest", mode_s, sizeof mode_s);
    if (strcmp(mode_s, "nearest") == 0)
        a->mode = RS_NEAREST;
    else if (strcmp(mode_s, "linear") == 0 || strcmp(mode_s, "bilinear") == 0)
        a->mode = RS_LINEAR;
    else if (strcmp(mode_s, "cubic") == 0)
        a->mode = RS_CUBIC;
    else
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "mode '%s'", mode_s);
    int old = a->upsample || p->opset < 11;
    qp_kattr_str(p->node, "coordinate_transformation_mode", old ? "asymmetric" : "half_pixel",
                 a->ctm, sizeof a->ctm);
    qp_kattr_str(p->node, "nearest_mode", old ? "floor" : "round_prefer_floor", a->nm,
                 sizeof a->nm);
    qp_kattr_str(p->node, "keep_aspect_ratio_policy", "stretch", a->kar, sizeof a->kar);
    a->cubic_a = qp_kattr_float(p->node, "cubic_coeff_a", -0.75f);
    a->exclude = (int)qp_kattr_int(p->node, "exclude_outside", 0);
    if (qp_kattr_int(p->node, "antialias", 0))
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "antialias=1");
    return QP_OK;
}

/* The axes that roi, scales and sizes list (all r by default). */
static enum qp_status rs_read_axes(const struct qp_kprep *p, int r, int64_t *axes, int *na_out) {
    enum qp_status st;
    *na_out = r;
    for (int d = 0; d < r; d++)
        axes[d] = d;
    const int64_t *av;
    int64_t nav = qp_kattr_ints(p->node, "axes", &av);
    if (nav < 0) return QP_OK;
    if (nav > r) return qp_error_set(p->err, QP_ERR_BAD_INPUT, "too many axes");
    *na_out = (int)nav;
    for (int i = 0; i < *na_out; i++)
        if ((st = qp_kaxis(av[i], r, &axes[i], "axis", p->err))) return st;
    return QP_OK;
}

/* Output shape and scales from the sizes input v (na entries along axes), with the
 * keep_aspect_ratio_policy. */
static void rs_from_sizes(const struct qp_kt *x, const char *kar, const double *v,
                          const int64_t *axes, int na, double *scales, int64_t *out) {
    int r = x->rank;
    for (int d = 0; d < r; d++)
        out[d] = x->dims[d];
    for (int i = 0; i < na; i++)
        out[axes[i]] = (int64_t)v[i];
    if (strcmp(kar, "stretch") == 0) {
        for (int d = 0; d < r; d++)
            scales[d] = x->dims[d] ? (double)out[d] / (double)x->dims[d] : 1.0;
        return;
    }
    double sc = strcmp(kar, "not_larger") == 0 ? INFINITY : 0.0;
    for (int i = 0; i < na; i++) {
        double t = v[i] / (double)x->dims[axes[i]];
        sc = strcmp(kar, "not_larger") == 0 ? fmin(sc, t) : fmax(sc, t);
    }
    for (int i = 0; i < na; i++) {
        out[axes[i]] = (int64_t)floor((double)x->dims[axes[i]] * sc + 0.5);
        scales[axes[i]] = sc;
    }
}

/* Scales, roi and the output shape, from the scales attribute (Upsample 7) or the roi, scales
 * and sizes inputs. */
static enum qp_status rs_geometry(struct qp_kprep *p, const struct rs_attrs *a, double *scales,
                                  double *roi, int64_t *out) {
    const struct qp_kt *x = p->in[0];
    int r = x->rank;
    enum qp_status st;
    for (int d = 0; d < r; d++) {
        scales[d] = 1.0;
        roi[d] = 0.0;
        roi[d + r] = 1.0;
    }
    int64_t axes[QP_MAX_RANK];
    int na;
    if ((st = rs_read_axes(p, r, axes, &na))) return st;
    double v[2 * QP_MAX_RANK];
    int nv;
    int have_sizes = 0;
    if (a->upsample && p->opset < 9) {
        const float *f;
        int64_t nf = qp_kattr_floats(p->node, "scales", &f);
        if (nf != r) return qp_error_set(p->err, QP_ERR_BAD_INPUT, "scales attribute length");
        for (int d = 0; d < r; d++)
            scales[d] = f[d];
    } else {
        int newer = !a->upsample && p->opset >= 11;
        if (newer) {
            if ((st = rs_read_floats(p, 1, v, &nv))) return st;
            if (nv) {
                if (nv != 2 * na) return qp_error_set(p->err, QP_ERR_BAD_INPUT, "roi length");
                for (int i = 0; i < na; i++) {
                    roi[axes[i]] = v[i];
                    roi[axes[i] + r] = v[i + na];
                }
            }
        }
        if ((st = rs_read_floats(p, newer ? 2 : 1, v, &nv))) return st;
        if (nv) {
            if (nv != na)
                return qp_error_set(p->err, QP_ERR_BAD_INPUT, "scales has %d entries", nv);
            for (int i = 0; i < na; i++)
                scales[axes[i]] = v[i];
        } else if (newer) {
            if ((st = rs_read_floats(p, 3, v, &nv))) return st;
            if (nv != na)
                return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                                    "one of scales and sizes is required");
            have_sizes = 1;
            rs_from_sizes(x, a->kar, v, axes, na, scales, out);
        }
    }
    for (int d = 0; d < r; d++) {
        if (!(scales[d] > 0)) return qp_error_set(p->err, QP_ERR_BAD_INPUT, "scale %g", scales[d]);
        if (!have_sizes) out[d] = (int64_t)floor((double)x->dims[d] * (float)scales[d]);
    }
    return QP_OK;
}

/* The input coordinate of output coordinate o along a dimension of in -> on elements at scale
 * sc (roi a..b for tf_crop_and_resize); *outside when it falls outside the input (then
 * extrapolated). 0 for an unknown mode. */
static int rs_coord(const char *ctm, int64_t o, int64_t in, int64_t on, float sc, float a, float b,
                    float *xo_out, int *outside) {
    float xo;
    *outside = 0;
    if (strcmp(ctm, "half_pixel") == 0)
        xo = ((float)o + 0.5f) / sc - 0.5f;
    else if (strcmp(ctm, "half_pixel_symmetric") == 0) {
        float adj = (float)on / (sc * (float)in);
        float center = (float)in / 2.0f;
        xo = center * (1.0f - adj) + ((float)o + 0.5f) / sc - 0.5f;
    } else if (strcmp(ctm, "pytorch_half_pixel") == 0)
        xo = on > 1 ? ((float)o + 0.5f) / sc - 0.5f : 0.0f;
    else if (strcmp(ctm, "align_corners") == 0)
        xo = on > 1 ? (float)o * (float)(in - 1) / ((float)in * sc - 1.0f) : 0.0f;
    else if (strcmp(ctm, "tf_half_pixel_for_nn") == 0)
        xo = ((float)o + 0.5f) / sc;
    else if (strcmp(ctm, "asymmetric") == 0)
        xo = (float)o / sc;
    else if (strcmp(ctm, "tf_crop_and_resize") == 0) {
        xo = on > 1 ? a * (float)(in - 1) + (float)o * (b - a) * (float)(in - 1) / (float)(on - 1)
                    : 0.5f * (a + b) * (float)(in - 1);
        if (xo < 0.0f || xo > (float)(in - 1)) *outside = 1;
    } else {
        return 0;
    }
    *xo_out = xo;
    return 1;
}

/* The taps (indices ti, weights tw) of input coordinate xo along a dimension of `in`
 * elements; returns how many. */
static int rs_taps(const struct rs_attrs *a, float xo, int64_t in, int64_t *ti, float *tw) {
    int n = 0;
    if (a->mode == RS_NEAREST) {
        float f = floorf(xo);
        int64_t k;
        if (strcmp(a->nm, "round_prefer_ceil") == 0)
            k = (int64_t)(xo - f >= 0.5f ? f + 1 : f);
        else if (strcmp(a->nm, "floor") == 0)
            k = (int64_t)f;
        else if (strcmp(a->nm, "ceil") == 0)
            k = (int64_t)ceilf(xo);
        else
            k = (int64_t)(xo - f > 0.5f ? f + 1 : f);
        if (k < 0) k = 0;
        if (k > in - 1) k = in - 1;
        ti[0] = k;
        tw[0] = 1.0f;
        return 1;
    }
    if (a->mode == RS_LINEAR) {
        float xc = xo;
        if (xc < 0.0f) xc = 0.0f;
        if (xc > (float)(in - 1)) xc = (float)(in - 1);
        float f = floorf(xc);
        float t = xc - f;
        int64_t k = (int64_t)f;
        ti[n] = k;
        tw[n++] = 1.0f - t;
        if (t != 0.0f) {
            ti[n] = k + 1 > in - 1 ? in - 1 : k + 1;
            tw[n++] = t;
        }
        return n;
    }
    float f = floorf(xo);
    float t = xo - f;
    int64_t k = (int64_t)f;
    float wsum = 0.0f;
    for (int j = -1; j <= 2; j++) {
        float w = cubic_w(a->cubic_a, t - (float)j);
        int64_t idx = k + j;
        if (idx < 0 || idx >= in) {
            if (a->exclude) continue;
            idx = idx < 0 ? 0 : in - 1;
        }
        ti[n] = idx;
        tw[n++] = w;
        wsum += w;
    }
    if (a->exclude && wsum != 0.0f)
        for (int j = 0; j < n; j++)
            tw[j] /= wsum;
    return n;
}

/* The state in one block (the runtime frees it at once): the struct, then total * RS_TAPS + 1
 * tap indices and weights and total + 1 tap counts (total: the sum of the output dims). */
static struct rs_state *rs_state_alloc(int r, const int64_t *out) {
    size_t total = 0, n_taps, bytes, b_idx, b_w;
    for (int d = 0; d < r; d++)
        if (!qp_size_add(total, (size_t)out[d], &total)) return NULL;
    if (!qp_size_mul(total, RS_TAPS, &n_taps) || !qp_size_add(n_taps, 1, &n_taps) ||
        !qp_size_mul(n_taps, sizeof(int64_t), &b_idx) ||
        !qp_size_mul(n_taps, sizeof(float), &b_w) ||
        !qp_size_add(sizeof(struct rs_state), b_idx, &bytes) || !qp_size_add(bytes, b_w, &bytes) ||
        !qp_size_add(bytes, total, &bytes) || !qp_size_add(bytes, 1, &bytes))
        return NULL;
    unsigned char *blk = malloc(bytes);
    if (!blk) return NULL;
    struct rs_state *s = (struct rs_state *)blk;
    memset(s, 0, sizeof *s);
    s->tap_idx = (int64_t *)(blk + sizeof *s);
    s->tap_w = (float *)(s->tap_idx + n_taps);
    s->ntap = (unsigned char *)(s->tap_w + n_taps);
    return s;
}

enum qp_status qp_k_resize_prepare(struct qp_kprep *p) {
    enum qp_status st = qp_kneed(p, 0);
    if (st) return st;
    const struct qp_kt *x = p->in[0];
    int bytes = x->dtype == QP_DTYPE_INT8 || x->dtype == QP_DTYPE_UINT8;
    if (x->dtype != QP_DTYPE_FLOAT && !bytes)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "dtype %s", qp_dtype_name(x->dtype));
    int r = x->rank;
    struct rs_attrs a;
    if ((st = rs_read_attrs(p, &a))) return st;
    if (bytes && a.mode != RS_NEAREST)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED,
                            "%s input in a mode other than nearest (only nearest copies values)",
                            qp_dtype_name(x->dtype));
    double scales[QP_MAX_RANK], roi[2 * QP_MAX_RANK];
    int64_t out[QP_MAX_RANK];
    if ((st = rs_geometry(p, &a, scales, roi, out))) return st;
    st = qp_kt_set(p->out[0], x->dtype, r, out, p->err);
    if (st) return st;
    p->state = NULL;
    struct rs_state *s = rs_state_alloc(r, out);
    if (!s) return qp_error_set(p->err, QP_ERR_NOMEM, "out of memory");
    s->rank = r;
    s->bytes = bytes;
    s->extrapolation = qp_kattr_float(p->node, "extrapolation_value", 0.0f);
    int64_t off = 0;
    for (int d = 0; d < r; d++) {
        s->in[d] = x->dims[d];
        s->out[d] = out[d];
        s->tap_off[d] = off;
        int64_t in = x->dims[d], on = out[d];
        float sc = (float)scales[d];
        for (int64_t o = 0; o < on; o++) {
            float xo;
            int outside;
            if (!rs_coord(a.ctm, o, in, on, sc, (float)roi[d], (float)roi[d + r], &xo, &outside)) {
                free(s);
                return qp_error_set(p->err, QP_ERR_BAD_INPUT, "coordinate_transformation_mode '%s'",
                                    a.ctm);
            }
            s->ntap[off + o] =
                outside ? 0
                        : (unsigned char)rs_taps(&a, xo, in, s->tap_idx + (off + o) * RS_TAPS,
                                                 s->tap_w + (off + o) * RS_TAPS);
            if (bytes && outside) {
                free(s);
                return qp_error_set(p->err, QP_ERR_UNSUPPORTED,
                                    "%s input with extrapolation_value (tf_crop_and_resize "
                                    "outside its roi)",
                                    qp_dtype_name(x->dtype));
            }
        }
        off += on;
    }
    rs_classify(s);
    p->state = s;
    return QP_OK;
}

/* One output row (plane `pl`, row `oh`) of the plane fast path. The arithmetic is the general
 * kernel's, term for term (weights multiplied in dimension order, starting from 1; the sum
 * starting from 0 in tap order), so the results are bit-identical to it. */
static void rs_row(const struct rs_state *s, const float *x, float *y, int64_t pl, int64_t oh) {
    int r = s->rank;
    int64_t ih_n = s->in[r - 2], iw_n = s->in[r - 1], ow_n = s->out[r - 1];
    const float *xp = x + pl * ih_n * iw_n;
    float *yr = y + (pl * s->out[r - 2] + oh) * ow_n;
    int64_t th = s->tap_off[r - 2] + oh, tw0 = s->tap_off[r - 1];
    const int64_t *hi = s->tap_idx + th * RS_TAPS;
    const float *hw = s->tap_w + th * RS_TAPS;
    if (s->copy2d) {
        const float *xr = xp + hi[0] * iw_n;
        const int64_t *wi = s->tap_idx + tw0 * RS_TAPS;
        /* 0 + 1*v: -0 becomes +0 as in the general kernel. */
        for (int64_t o = 0; o < ow_n; o++)
            yr[o] = 0.0f + xr[wi[o * RS_TAPS]];
        return;
    }
    int nh = s->ntap[th];
    for (int64_t o = 0; o < ow_n; o++) {
        int64_t tw = tw0 + o;
        const int64_t *wi = s->tap_idx + tw * RS_TAPS;
        const float *ww = s->tap_w + tw * RS_TAPS;
        int nw = s->ntap[tw];
        float sum = 0.0f;
        for (int a = 0; a < nh; a++) {
            const float *xr = xp + hi[a] * iw_n;
            float wa = 1.0f * hw[a];
            for (int b = 0; b < nw; b++) {
                float w = wa * ww[b];
                sum += w * xr[wi[b]];
            }
        }
        yr[o] = sum;
    }
}

/* The plane fast path: rows of N*C*... planes shared out among threads; an output row whose
 * vertical taps equal the previous row's (nearest upsampling) is a copy of it. */
static void rs_fast(const struct rs_state *s, const float *x, float *y, int nt) {
    int r = s->rank;
    int64_t planes = 1;
    for (int d = 0; d < r - 2; d++)
        planes *= s->out[d];
    int64_t oh_n = s->out[r - 2], ow_n = s->out[r - 1], rows = planes * oh_n;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int64_t lo, hi;
        qp_ksplit(rows, omp_get_num_threads(), omp_get_thread_num(), &lo, &hi);
        for (int64_t row = lo; row < hi; row++) {
            int64_t pl = row / oh_n, oh = row % oh_n;
            if (s->copy2d && row > lo && oh > 0) {
                int64_t t = s->tap_off[r - 2] + oh;
                if (s->tap_idx[t * RS_TAPS] == s->tap_idx[(t - 1) * RS_TAPS]) {
                    memcpy(y + row * ow_n, y + (row - 1) * ow_n, (size_t)ow_n * sizeof(float));
                    continue;
                }
            }
            rs_row(s, x, y, pl, oh);
        }
    }
}

/* int8/uint8 (one tap of weight 1 per output coordinate): rows of the last dimension, each a
 * gather from one input row, or a copy of the row before when both read the same input row. */
static void rs_bytes(const struct rs_state *s, const uint8_t *x, uint8_t *y, int64_t n, int nt) {
    int r = s->rank;
    int64_t istr[QP_MAX_RANK], acc = 1;
    for (int d = r - 1; d >= 0; d--) {
        istr[d] = acc;
        acc *= s->in[d];
    }
    int64_t ow = r ? s->out[r - 1] : 1, rows = ow ? n / ow : 0;
    const int64_t *wi = s->tap_idx + (r ? s->tap_off[r - 1] : 0) * RS_TAPS;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int64_t lo, hi, prev = -1;
        qp_ksplit(rows, omp_get_num_threads(), omp_get_thread_num(), &lo, &hi);
        for (int64_t row = lo; row < hi; row++) {
            int64_t rem = row, src = 0;
            for (int d = r - 2; d >= 0; d--) {
                src += s->tap_idx[(s->tap_off[d] + rem % s->out[d]) * RS_TAPS] * istr[d];
                rem /= s->out[d];
            }
            uint8_t *yr = y + row * ow;
            if (src == prev) {
                memcpy(yr, yr - ow, (size_t)ow);
                continue;
            }
            prev = src;
            const uint8_t *xr = x + src;
            if (r == 0) {
                yr[0] = xr[0];
                continue;
            }
            for (int64_t o = 0; o < ow; o++)
                yr[o] = xr[wi[o * RS_TAPS]];
        }
    }
}

enum qp_status qp_k_resize_run(const struct qp_krun *r) {
    const struct rs_state *s = r->state;
    if (s->bytes) {
        int64_t n = (int64_t)r->out[0]->numel;
        rs_bytes(s, r->in[0]->data, r->out[0]->data, n, n < 65536 ? 1 : r->n_threads);
        return QP_OK;
    }
    if (!s->fast) return qp_k_resize_ref_run(r);
    int64_t n = (int64_t)r->out[0]->numel;
    rs_fast(s, r->in[0]->data, r->out[0]->data, n < 16384 ? 1 : r->n_threads);
    return QP_OK;
}

int qp_k_resize_state_is_fast(const void *state) {
    return ((const struct rs_state *)state)->fast;
}

enum qp_status qp_k_resize_ref_run(const struct qp_krun *r) {
    const struct rs_state *s = r->state;
    if (s->bytes) return qp_k_resize_run(r);
    const float *x = r->in[0]->data;
    float *y = r->out[0]->data;
    int64_t n = (int64_t)r->out[0]->numel;
    int rank = s->rank;
    int64_t istr[QP_MAX_RANK], acc = 1;
    for (int d = rank - 1; d >= 0; d--) {
        istr[d] = acc;
        acc *= s->in[d];
    }
    int nt = n < 16384 ? 1 : r->n_threads;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t o = 0; o < n; o++) {
        int64_t coord[QP_MAX_RANK], rem = o;
        int out_of_range = 0;
        for (int d = rank - 1; d >= 0; d--) {
            coord[d] = rem % s->out[d];
            rem /= s->out[d];
            if (s->ntap[s->tap_off[d] + coord[d]] == 0) out_of_range = 1;
        }
        if (out_of_range) {
            y[o] = s->extrapolation;
            continue;
        }
        int cnt[QP_MAX_RANK] = {0};
        float sum = 0.0f;
        for (;;) {
            float w = 1.0f;
            int64_t off = 0;
            for (int d = 0; d < rank; d++) {
                int64_t t = (s->tap_off[d] + coord[d]) * RS_TAPS + cnt[d];
                w *= s->tap_w[t];
                off += s->tap_idx[t] * istr[d];
            }
            sum += w * x[off];
            int d = rank - 1;
            for (; d >= 0; d--) {
                if (++cnt[d] < s->ntap[s->tap_off[d] + coord[d]]) break;
                cnt[d] = 0;
            }
            if (d < 0) break;
        }
        y[o] = sum;
    }
    return QP_OK;
}
