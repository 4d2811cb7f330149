/*
 * DepthToSpace and SpaceToDepth: moves blocks of `blocksize` x `blocksize` pixels between the
 * channel dim and the two spatial dims of an NCHW tensor. Pure data movement, so any type of
 * 8 bits or more.
 *
 *   DepthToSpace DCR (default): y[n, c, h*b + i, w*b + j] = x[n, (i*b + j)*C' + c, h, w]
 *   DepthToSpace CRD:           y[n, c, h*b + i, w*b + j] = x[n, c*b*b + i*b + j, h, w]
 *   SpaceToDepth:               y[n, (i*b + j)*C + c, h, w] = x[n, c, h*b + i, w*b + j]
 */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kcheck.h"
#include "kernels/kernels.h"

struct space_state {
    int to_space, crd;
    int64_t b;
    int64_t n, c, h, w; /* the space-side (large H, W) tensor: c channels, h x w pixels */
    size_t es;
};

static enum qp_status space_prepare(struct qp_kprep *p, int to_space) {
    if (qp_kinputs_sane(p)) return QP_ERR_BAD_INPUT;
    enum qp_status st = qp_kneed_bytes(p, 0);
    if (st) return st;
    const struct qp_kt *x = p->in[0];
    if (x->rank != 4)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "input rank %d, expected 4 (NCHW)", x->rank);
    if (!qp_kattr(p->node, "blocksize"))
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "attribute 'blocksize' is required");
    int64_t b = qp_kattr_int(p->node, "blocksize", 0);
    if (b < 1 || b > 65536)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "blocksize %lld is not in [1, 65536]",
                            (long long)b);
    struct space_state s;
    memset(&s, 0, sizeof s);
    s.to_space = to_space;
    s.b = b;
    s.es = (size_t)qp_dtype_traits(x->dtype)->bits / 8;
    s.n = x->dims[0];
    int64_t od[4] = {x->dims[0], 0, 0, 0};
    if (to_space) {
        char mode[8];
        qp_kattr_str(p->node, "mode", "DCR", mode, sizeof mode);
        if (strcmp(mode, "DCR") != 0 && strcmp(mode, "CRD") != 0)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "mode '%s', expected DCR or CRD", mode);
        s.crd = p->opset >= 11 && strcmp(mode, "CRD") == 0;
        if (x->dims[1] % (b * b))
            return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                                "%lld channels are not a multiple of blocksize^2 = %lld",
                                (long long)x->dims[1], (long long)(b * b));
        if (x->dims[2] > INT64_MAX / b || x->dims[3] > INT64_MAX / b)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "output size overflows");
        s.c = x->dims[1] / (b * b);
        s.h = x->dims[2] * b;
        s.w = x->dims[3] * b;
        od[1] = s.c;
        od[2] = s.h;
        od[3] = s.w;
    } else {
        if (x->dims[2] % b || x->dims[3] % b)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                                "spatial dims %lldx%lld are not multiples of blocksize %lld",
                                (long long)x->dims[2], (long long)x->dims[3], (long long)b);
        s.c = x->dims[1];
        s.h = x->dims[2];
        s.w = x->dims[3];
        od[1] = s.c * b * b;
        od[2] = s.h / b;
        od[3] = s.w / b;
    }
    if ((st = qp_kt_set(p->out[0], x->dtype, 4, od, p->err))) return st;
    return qp_ksave_state(p, &s, sizeof s);
}

enum qp_status qp_k_depth_to_space_prepare(struct qp_kprep *p) {
    return space_prepare(p, 1);
}

enum qp_status qp_k_space_to_depth_prepare(struct qp_kprep *p) {
    return space_prepare(p, 0);
}

enum qp_status qp_k_space_run(const struct qp_krun *r) {
    const struct space_state *s = r->state;
    const unsigned char *x = r->in[0]->data;
    unsigned char *y = r->out[0]->data;
    if (!r->in[0]->numel) return QP_OK; /* a zero dim: other dims may be huge, nothing to move */
    int64_t b = s->b, hs = s->h / b, ws = s->w / b, cd = s->c * b * b;
    int64_t planes = s->n * s->c;
    int nt = planes * s->h * s->w < 65536 ? 1 : r->n_threads;
    /* One space-side (n, c) plane per iteration: every element is copied once. */
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t pl = 0; pl < planes; pl++) {
        int64_t n = pl / s->c, c = pl % s->c;
        for (int64_t hh = 0; hh < s->h; hh++)
            for (int64_t ww = 0; ww < s->w; ww++) {
                int64_t h = hh / b, i = hh % b, w = ww / b, j = ww % b;
                int64_t cdepth = s->crd ? c * b * b + i * b + j : (i * b + j) * s->c + c;
                size_t sp = (size_t)(((n * s->c + c) * s->h + hh) * s->w + ww) * s->es;
                size_t dp = (size_t)(((n * cd + cdepth) * hs + h) * ws + w) * s->es;
                if (s->to_space)
                    memcpy(y + sp, x + dp, s->es);
                else
                    memcpy(y + dp, x + sp, s->es);
            }
    }
    return QP_OK;
}
