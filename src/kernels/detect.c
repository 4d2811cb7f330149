/*
 * Detection ops, float32: NonMaxSuppression and RoiAlign.
 *
 * NonMaxSuppression's output size depends on the values, so boxes, scores and the three
 * scalar inputs must be plan-time values (value-keyed when they come from the caller); prepare
 * runs the selection to size the output and run repeats it into the output, with its working
 * arrays in kernel scratch.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/size.h"
#include "kernels/kcheck.h"
#include "kernels/kernels.h"

/* ---- NonMaxSuppression (opset 10, 11) ------------------------------------------------------
 * Per batch and class: the boxes whose score is above score_threshold, by descending score
 * (ties: lower box index first), each kept unless its IoU with a box already kept exceeds
 * iou_threshold, at most max_output_boxes_per_class of them. Output [n, 3] int64 triples
 * (batch, class, box) in that order. */

struct nms_params {
    int64_t batches, classes, boxes, max_out;
    float iou, score;
    int has_score, center;
};

/* Corners (y1, x1, y2, x2) of box b, ordered so that y1 <= y2 and x1 <= x2. */
static void nms_corners(const float *bx, int center, float c[4]) {
    if (center) {
        float xc = bx[0], yc = bx[1], w = bx[2], h = bx[3];
        c[0] = yc - h / 2;
        c[1] = xc - w / 2;
        c[2] = yc + h / 2;
        c[3] = xc + w / 2;
    } else {
        c[0] = fminf(bx[0], bx[2]);
        c[1] = fminf(bx[1], bx[3]);
        c[2] = fmaxf(bx[0], bx[2]);
        c[3] = fmaxf(bx[1], bx[3]);
    }
    if (c[2] < c[0]) c[2] = c[0];
    if (c[3] < c[1]) c[3] = c[1];
}

static int nms_suppresses(const float *a, const float *b, int center, float thr) {
    float ca[4], cb[4];
    nms_corners(a, center, ca);
    nms_corners(b, center, cb);
    float area_a = (ca[2] - ca[0]) * (ca[3] - ca[1]);
    float area_b = (cb[2] - cb[0]) * (cb[3] - cb[1]);
    if (!(area_a > 0) || !(area_b > 0)) return 0;
    float ih = fminf(ca[2], cb[2]) - fmaxf(ca[0], cb[0]);
    float iw = fminf(ca[3], cb[3]) - fmaxf(ca[1], cb[1]);
    if (!(ih > 0) || !(iw > 0)) return 0;
    float inter = ih * iw;
    float iou = inter / (area_a + area_b - inter);
    return iou > thr;
}

/* Stable merge sort of idx[0, n) by descending score; tmp has room for n. */
static void nms_sort(int64_t *idx, int64_t *tmp, int64_t n, const float *score) {
    for (int64_t w = 1; w < n; w *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * w) {
            int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            int64_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                tmp[k++] = score[idx[j]] > score[idx[i]] ? idx[j++] : idx[i++];
            while (i < mid)
                tmp[k++] = idx[i++];
            while (j < hi)
                tmp[k++] = idx[j++];
        }
        memcpy(idx, tmp, sizeof(int64_t) * (size_t)n);
    }
}

/* Runs the selection; writes triples to out when not NULL. Returns the count. work holds
 * 3 * boxes int64. */
static int64_t nms_select(const struct nms_params *s, const float *boxes, const float *scores,
                          int64_t *out, int64_t *work) {
    int64_t n_out = 0;
    int64_t *cand = work, *tmp = work + s->boxes, *kept = work + 2 * s->boxes;
    for (int64_t b = 0; b < s->batches; b++)
        for (int64_t c = 0; c < s->classes; c++) {
            const float *sc = scores + (b * s->classes + c) * s->boxes;
            const float *bx = boxes + b * s->boxes * 4;
            int64_t n = 0, n_kept = 0;
            for (int64_t i = 0; i < s->boxes; i++)
                if (!isnan(sc[i]) && (!s->has_score || sc[i] > s->score)) cand[n++] = i;
            nms_sort(cand, tmp, n, sc);
            for (int64_t i = 0; i < n && n_kept < s->max_out; i++) {
                int keep = 1;
                for (int64_t k = 0; k < n_kept && keep; k++)
                    keep = !nms_suppresses(bx + kept[k] * 4, bx + cand[i] * 4, s->center, s->iou);
                if (!keep) continue;
                kept[n_kept++] = cand[i];
                if (out) {
                    out[n_out * 3] = b;
                    out[n_out * 3 + 1] = c;
                    out[n_out * 3 + 2] = cand[i];
                }
                n_out++;
            }
        }
    return n_out;
}

enum qp_status qp_k_nms_prepare(struct qp_kprep *p) {
    if (qp_kinputs_sane(p)) return QP_ERR_BAD_INPUT;
    enum qp_status st = qp_kneed_f32(p, 0);
    if (!st) st = qp_kneed_f32(p, 1);
    if (!st) st = qp_kneed_const(p, 0, "boxes (the output size depends on them)");
    if (!st) st = qp_kneed_const(p, 1, "scores (the output size depends on them)");
    if (st) return st;
    const struct qp_kt *bx = p->in[0], *sc = p->in[1];
    if (bx->rank != 3 || bx->dims[2] != 4 || sc->rank != 3 || sc->dims[0] != bx->dims[0] ||
        sc->dims[2] != bx->dims[1]) {
        char a[64], b[64];
        return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                            "boxes %s and scores %s: expected [B, N, 4] and [B, C, N]",
                            qp_kshape_str(bx, a, sizeof a), qp_kshape_str(sc, b, sizeof b));
    }
    struct nms_params s;
    memset(&s, 0, sizeof s);
    s.batches = bx->dims[0];
    s.boxes = bx->dims[1];
    s.classes = sc->dims[1];
    int64_t center = qp_kattr_int(p->node, "center_point_box", 0);
    if (center != 0 && center != 1)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "center_point_box is %lld, expected 0 or 1",
                            (long long)center);
    s.center = (int)center;
    /* Optional scalars: max_output_boxes_per_class (default 0), iou_threshold (0),
     * score_threshold (none). */
    static const char *const what[3] = {"max_output_boxes_per_class", "iou_threshold",
                                        "score_threshold"};
    for (int i = 2; i < 5; i++) {
        if (i >= p->n_in || !p->in[i]) continue;
        if ((st = qp_kneed_const(p, i, what[i - 2]))) return st;
        const struct qp_kt *t = p->in[i];
        int want_int = i == 2;
        if (t->numel != 1 || (want_int ? t->dtype != QP_DTYPE_INT64 : t->dtype != QP_DTYPE_FLOAT))
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "%s must be one %s value", what[i - 2],
                                want_int ? "int64" : "float");
        if (i == 2) s.max_out = qp_kt_get_i64(t, 0);
        if (i == 3) s.iou = (float)qp_kt_get_f64(t, 0);
        if (i == 4) {
            s.score = (float)qp_kt_get_f64(t, 0);
            s.has_score = 1;
        }
    }
    if (s.max_out < 0) s.max_out = 0;
    if (!(s.iou >= 0 && s.iou <= 1))
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "iou_threshold %g is outside [0, 1]",
                            (double)s.iou);
    size_t n_work;
    if (!qp_size_mul((size_t)s.boxes, 3, &n_work) || !qp_size_add(n_work, 1, &n_work))
        return qp_error_set(p->err, QP_ERR_NOMEM, "too many boxes");
    int64_t *work = qp_malloc_n(n_work, sizeof *work);
    if (!work) return qp_error_set(p->err, QP_ERR_NOMEM, "out of memory");
    int64_t n = nms_select(&s, bx->data, sc->data, NULL, work);
    free(work);
    int64_t od[2] = {n, 3};
    if ((st = qp_kt_set(p->out[0], QP_DTYPE_INT64, 2, od, p->err))) return st;
    p->scratch = n_work * sizeof *work; /* qp_malloc_n checked the product */
    return qp_ksave_state(p, &s, sizeof s);
}

enum qp_status qp_k_nms_run(const struct qp_krun *r) {
    const struct nms_params *s = r->state;
    int64_t want = r->out[0]->dims[0];
    /* count first: the output holds exactly the planned number of triples */
    int64_t n = nms_select(s, r->in[0]->data, r->in[1]->data, NULL, r->scratch);
    if (n != want)
        return qp_error_set(r->err, QP_ERR_INTERNAL,
                            "selection changed since planning (%lld vs "
                            "%lld boxes)",
                            (long long)n, (long long)want);
    nms_select(s, r->in[0]->data, r->in[1]->data, r->out[0]->data, r->scratch);
    return QP_OK;
}

/* ---- RoiAlign (opset 10, 16) ---------------------------------------------------------------
 * For each region (x1, y1, x2, y2) * spatial_scale (minus 0.5 with half_pixel, opset 16's
 * default), an output_height x output_width grid of bins; each bin averages sampling_ratio^2
 * bilinear samples (adaptive: ceil(bin size) per dim when 0). Samples beyond one
 * pixel outside the map count as 0; those within clamp to the border, as in the reference. */

struct roi_state {
    int64_t n, c, h, w, n_rois, oh, ow, ratio;
    float scale;
    int half_pixel;
};

enum qp_status qp_k_roialign_prepare(struct qp_kprep *p) {
    if (qp_kinputs_sane(p)) return QP_ERR_BAD_INPUT;
    enum qp_status st = qp_kneed_f32(p, 0);
    if (!st) st = qp_kneed_f32(p, 1);
    if (!st) st = qp_kneed(p, 2);
    if (st) return st;
    const struct qp_kt *x = p->in[0], *rois = p->in[1], *bi = p->in[2];
    if (x->rank != 4)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "X has rank %d, expected 4", x->rank);
    if (rois->rank != 2 || rois->dims[1] != 4)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "rois must be [num_rois, 4]");
    if ((bi->dtype != QP_DTYPE_INT64 && bi->dtype != QP_DTYPE_INT32) || bi->rank != 1 ||
        bi->dims[0] != rois->dims[0])
        return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                            "batch_indices must be int64 [num_rois] (%lld rois)",
                            (long long)rois->dims[0]);
    struct roi_state s;
    memset(&s, 0, sizeof s);
    s.n = x->dims[0];
    s.c = x->dims[1];
    s.h = x->dims[2];
    s.w = x->dims[3];
    s.n_rois = rois->dims[0];
    s.oh = qp_kattr_int(p->node, "output_height", 1);
    s.ow = qp_kattr_int(p->node, "output_width", 1);
    s.ratio = qp_kattr_int(p->node, "sampling_ratio", 0);
    s.scale = qp_kattr_float(p->node, "spatial_scale", 1.0f);
    if (s.oh < 1 || s.ow < 1 || s.oh > 1 << 16 || s.ow > 1 << 16 || s.ratio < 0 ||
        s.ratio > 1 << 10)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                            "output_height %lld, output_width %lld, sampling_ratio %lld",
                            (long long)s.oh, (long long)s.ow, (long long)s.ratio);
    char buf[32];
    qp_kattr_str(p->node, "mode", "avg", buf, sizeof buf);
    /* ONNX Runtime's (and the reference's) max mode takes the maximum of the four weighted
     * corner terms of each sample, not of the samples: not reproduced here. */
    if (strcmp(buf, "max") == 0) return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "mode 'max'");
    if (strcmp(buf, "avg") != 0)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "mode '%s', expected avg or max", buf);
    qp_kattr_str(p->node, "coordinate_transformation_mode",
                 p->opset >= 16 ? "half_pixel" : "output_half_pixel", buf, sizeof buf);
    if (strcmp(buf, "half_pixel") != 0 && strcmp(buf, "output_half_pixel") != 0)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                            "coordinate_transformation_mode '%s', expected half_pixel or "
                            "output_half_pixel",
                            buf);
    s.half_pixel = strcmp(buf, "half_pixel") == 0;
    int64_t od[4] = {s.n_rois, s.c, s.oh, s.ow};
    if ((st = qp_kt_set(p->out[0], QP_DTYPE_FLOAT, 4, od, p->err))) return st;
    return qp_ksave_state(p, &s, sizeof s);
}

/* Bilinear sample of plane at (y, x); 0 outside [-1, size]. */
static double roi_sample(const float *pl, int64_t h, int64_t w, double y, double x) {
    if (y < -1.0 || y > (double)h || x < -1.0 || x > (double)w) return 0;
    if (y <= 0) y = 0;
    if (x <= 0) x = 0;
    int64_t y0 = (int64_t)y, x0 = (int64_t)x, y1, x1;
    if (y0 >= h - 1) {
        y0 = y1 = h - 1;
        y = (double)y0;
    } else {
        y1 = y0 + 1;
    }
    if (x0 >= w - 1) {
        x0 = x1 = w - 1;
        x = (double)x0;
    } else {
        x1 = x0 + 1;
    }
    double ly = y - (double)y0, lx = x - (double)x0, hy = 1 - ly, hx = 1 - lx;
    return hy * hx * pl[y0 * w + x0] + hy * lx * pl[y0 * w + x1] + ly * hx * pl[y1 * w + x0] +
           ly * lx * pl[y1 * w + x1];
}

enum qp_status qp_k_roialign_run(const struct qp_krun *r) {
    const struct roi_state *s = r->state;
    const float *x = r->in[0]->data, *rois = r->in[1]->data;
    const struct qp_kt *bi = r->in[2];
    float *y = r->out[0]->data;
    for (int64_t k = 0; k < s->n_rois; k++) {
        int64_t b = qp_kt_get_i64(bi, (uint64_t)k);
        if (b < 0 || b >= s->n)
            return qp_error_set(r->err, QP_ERR_BAD_INPUT,
                                "batch_indices[%lld] = %lld is out of range for batch %lld",
                                (long long)k, (long long)b, (long long)s->n);
    }
    int64_t jobs = s->n_rois * s->c;
    int nt = jobs * s->oh * s->ow < 4096 ? 1 : r->n_threads;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t job = 0; job < jobs; job++) {
        int64_t k = job / s->c, c = job % s->c;
        int64_t b = qp_kt_get_i64(bi, (uint64_t)k);
        const float *pl = x + (b * s->c + c) * s->h * s->w;
        double off = s->half_pixel ? 0.5 : 0.0;
        double x1 = rois[k * 4] * s->scale - off, y1 = rois[k * 4 + 1] * s->scale - off;
        double x2 = rois[k * 4 + 2] * s->scale - off, y2 = rois[k * 4 + 3] * s->scale - off;
        double rw = x2 - x1, rh = y2 - y1;
        if (!s->half_pixel) {
            /* output_half_pixel (the opset-10 behaviour) forces a region of at least 1 */
            if (rw < 1) rw = 1;
            if (rh < 1) rh = 1;
        }
        double bh = rh / (double)s->oh, bw = rw / (double)s->ow;
        int64_t gh = s->ratio > 0 ? s->ratio : (int64_t)ceil(rh / (double)s->oh);
        int64_t gw = s->ratio > 0 ? s->ratio : (int64_t)ceil(rw / (double)s->ow);
        /* an empty region samples nothing: its bins are 0 */
        double cnt = gh * gw > 0 ? (double)(gh * gw) : 1.0;
        float *yp = y + job * s->oh * s->ow;
        for (int64_t ph = 0; ph < s->oh; ph++)
            for (int64_t pw = 0; pw < s->ow; pw++) {
                double acc = 0;
                for (int64_t iy = 0; iy < gh; iy++) {
                    double yy = y1 + (double)ph * bh + ((double)iy + 0.5) * bh / (double)gh;
                    for (int64_t ix = 0; ix < gw; ix++) {
                        double xx = x1 + (double)pw * bw + ((double)ix + 0.5) * bw / (double)gw;
                        acc += roi_sample(pl, s->h, s->w, yy, xx);
                    }
                }
                yp[ph * s->ow + pw] = (float)(acc / cnt);
            }
    }
    return QP_OK;
}
