/*
 * GridSample (opset 16; opset 20's names "linear"/"cubic" too), float32, 4-D: X [N, C, H, W]
 * sampled at grid [N, Ho, Wo, 2] of normalized (x, y) in [-1, 1].
 *
 *   position:  align_corners  x = (gx + 1) / 2 * (W - 1)
 *              otherwise      x = ((gx + 1) * W - 1) / 2
 *   padding:   zeros          pixels outside the map read 0
 *              border         the position is clamped to [0, W-1], pixels to the map
 *              reflection     the position (and each pixel index) is reflected at the borders,
 *                             [0, W-1] with align_corners, [-0.5, W-0.5] otherwise
 *              (bicubic pads each of its 16 taps, never the position, as ONNX Runtime does)
 *   mode:      nearest (position rounded half to even), bilinear, bicubic (A = -0.75, 4x4)
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kcheck.h"
#include "kernels/kernels.h"

enum gs_mode { GS_NEAREST, GS_LINEAR, GS_CUBIC };
enum gs_pad { GS_ZEROS, GS_BORDER, GS_REFLECT };

struct gs_state {
    int64_t n, c, h, w, oh, ow;
    int mode, pad, align;
};

enum qp_status qp_k_gridsample_prepare(struct qp_kprep *p) {
    if (qp_kinputs_sane(p)) return QP_ERR_BAD_INPUT;
    enum qp_status st = qp_kneed(p, 0);
    if (!st) st = qp_kneed(p, 1);
    if (st) return st;
    const struct qp_kt *x = p->in[0], *g = p->in[1];
    if (x->dtype != QP_DTYPE_FLOAT || g->dtype != QP_DTYPE_FLOAT)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "X is %s and grid %s (float only)",
                            qp_dtype_name(x->dtype), qp_dtype_name(g->dtype));
    if (x->rank != 4)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "X has rank %d (only 4-D is supported)",
                            x->rank);
    if (g->rank != 4 || g->dims[0] != x->dims[0] || g->dims[3] != 2)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                            "grid must be [N, H_out, W_out, 2] with N = "
                            "%lld",
                            (long long)x->dims[0]);
    struct gs_state s;
    memset(&s, 0, sizeof s);
    char buf[32];
    qp_kattr_str(p->node, "mode", p->opset >= 20 ? "linear" : "bilinear", buf, sizeof buf);
    if (strcmp(buf, "nearest") == 0)
        s.mode = GS_NEAREST;
    else if (strcmp(buf, "bilinear") == 0 || strcmp(buf, "linear") == 0)
        s.mode = GS_LINEAR;
    else if (strcmp(buf, "bicubic") == 0 || strcmp(buf, "cubic") == 0)
        s.mode = GS_CUBIC;
    else
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "mode '%s'", buf);
    qp_kattr_str(p->node, "padding_mode", "zeros", buf, sizeof buf);
    if (strcmp(buf, "zeros") == 0)
        s.pad = GS_ZEROS;
    else if (strcmp(buf, "border") == 0)
        s.pad = GS_BORDER;
    else if (strcmp(buf, "reflection") == 0)
        s.pad = GS_REFLECT;
    else
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "padding_mode '%s'", buf);
    s.align = qp_kattr_int(p->node, "align_corners", 0) != 0;
    s.n = x->dims[0];
    s.c = x->dims[1];
    s.h = x->dims[2];
    s.w = x->dims[3];
    s.oh = g->dims[1];
    s.ow = g->dims[2];
    int64_t od[4] = {s.n, s.c, s.oh, s.ow};
    if ((st = qp_kt_set(p->out[0], QP_DTYPE_FLOAT, 4, od, p->err))) return st;
    return qp_ksave_state(p, &s, sizeof s);
}

static double gs_reflect(double x, double lo, double hi) {
    double range = hi - lo;
    if (!(range > 0)) return lo;
    if (x < lo) {
        double dx = lo - x, n = floor(dx / range), r = dx - n * range;
        return fmod(n, 2) == 0 ? lo + r : hi - r;
    }
    if (x > hi) {
        double dx = x - hi, n = floor(dx / range), r = dx - n * range;
        return fmod(n, 2) == 0 ? hi - r : lo + r;
    }
    return x;
}

/* Pixel (iy, ix) of a plane under the padding mode. */
static double gs_pixel(const float *pl, const struct gs_state *s, int64_t iy, int64_t ix) {
    switch (s->pad) {
    case GS_ZEROS:
        if (iy < 0 || iy >= s->h || ix < 0 || ix >= s->w) return 0;
        break;
    case GS_BORDER:
        iy = iy < 0 ? 0 : (iy >= s->h ? s->h - 1 : iy);
        ix = ix < 0 ? 0 : (ix >= s->w ? s->w - 1 : ix);
        break;
    default: {
        double lo_y = s->align ? 0 : -0.5, hi_y = s->align ? (double)(s->h - 1) : s->h - 0.5;
        double lo_x = s->align ? 0 : -0.5, hi_x = s->align ? (double)(s->w - 1) : s->w - 0.5;
        iy = (int64_t)gs_reflect((double)iy, lo_y, hi_y);
        ix = (int64_t)gs_reflect((double)ix, lo_x, hi_x);
        iy = iy < 0 ? 0 : (iy >= s->h ? s->h - 1 : iy);
        ix = ix < 0 ? 0 : (ix >= s->w ? s->w - 1 : ix);
        break;
    }
    }
    return pl[iy * s->w + ix];
}

static void gs_cubic_coeffs(double t, double c[4]) {
    const double a = -0.75;
    double t1 = t + 1, t2 = 1 - t, t3 = 2 - t;
    c[0] = ((a * t1 - 5 * a) * t1 + 8 * a) * t1 - 4 * a;
    c[1] = ((a + 2) * t - (a + 3)) * t * t + 1;
    c[2] = ((a + 2) * t2 - (a + 3)) * t2 * t2 + 1;
    c[3] = ((a * t3 - 5 * a) * t3 + 8 * a) * t3 - 4 * a;
}

enum qp_status qp_k_gridsample_run(const struct qp_krun *r) {
    const struct gs_state *s = r->state;
    const float *x = r->in[0]->data, *g = r->in[1]->data;
    float *y = r->out[0]->data;
    int64_t planes = s->n * s->c;
    int nt = planes * s->oh * s->ow < 4096 ? 1 : r->n_threads;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t pl = 0; pl < planes; pl++) {
        int64_t n = pl / s->c;
        const float *xp = x + pl * s->h * s->w;
        const float *gp = g + n * s->oh * s->ow * 2;
        float *yp = y + pl * s->oh * s->ow;
        for (int64_t o = 0; o < s->oh * s->ow; o++) {
            double gx = gp[o * 2], gy = gp[o * 2 + 1];
            double fx = s->align ? (gx + 1) / 2 * (double)(s->w - 1) : ((gx + 1) * s->w - 1) / 2;
            double fy = s->align ? (gy + 1) / 2 * (double)(s->h - 1) : ((gy + 1) * s->h - 1) / 2;
            if (!isfinite(fx) || !isfinite(fy)) {
                yp[o] = NAN;
                continue;
            }
            /* Bicubic pads each of its 16 taps instead of the position. */
            if (s->mode == GS_CUBIC) {
                /* nothing here: gs_pixel pads the taps */
            } else if (s->pad == GS_BORDER) {
                fx = fx < 0 ? 0 : (fx > (double)(s->w - 1) ? (double)(s->w - 1) : fx);
                fy = fy < 0 ? 0 : (fy > (double)(s->h - 1) ? (double)(s->h - 1) : fy);
            } else if (s->pad == GS_REFLECT) {
                fx =
                    gs_reflect(fx, s->align ? 0 : -0.5, s->align ? (double)(s->w - 1) : s->w - 0.5);
                fy =
                    gs_reflect(fy, s->align ? 0 : -0.5, s->align ? (double)(s->h - 1) : s->h - 0.5);
            }
            /* Far outside (zeros padding): every pixel reads 0; keeps the casts in range. */
            if (fabs(fx) > 1e15 || fabs(fy) > 1e15) {
                yp[o] = 0;
                continue;
            }
            double v;
            if (s->mode == GS_NEAREST) {
                v = gs_pixel(xp, s, (int64_t)rint(fy), (int64_t)rint(fx));
            } else if (s->mode == GS_LINEAR) {
                double x0 = floor(fx), y0 = floor(fy), dx = fx - x0, dy = fy - y0;
                int64_t ix = (int64_t)x0, iy = (int64_t)y0;
                v = (1 - dy) *
                        ((1 - dx) * gs_pixel(xp, s, iy, ix) + dx * gs_pixel(xp, s, iy, ix + 1)) +
                    dy * ((1 - dx) * gs_pixel(xp, s, iy + 1, ix) +
                          dx * gs_pixel(xp, s, iy + 1, ix + 1));
            } else {
                double x0 = floor(fx), y0 = floor(fy), cx[4], cy[4];
                gs_cubic_coeffs(fx - x0, cx);
                gs_cubic_coeffs(fy - y0, cy);
                int64_t ix = (int64_t)x0 - 1, iy = (int64_t)y0 - 1;
                v = 0;
                for (int i = 0; i < 4; i++) {
                    double row = 0;
                    for (int j = 0; j < 4; j++)
                        row += cx[j] * gs_pixel(xp, s, iy + i, ix + j);
                    v += cy[i] * row;
                }
            }
            yp[o] = (float)v;
        }
    }
    return QP_OK;
}
