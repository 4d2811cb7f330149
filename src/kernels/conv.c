/*
 * Conv and ConvTranspose reference kernels: direct loops over N-d windows (1 to 3 spatial dims),
 * groups, dilations, pads, auto_pad, bias. Each output element is one sum in a fixed order.
 */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kcheck.h"
#include "kernels/kernels.h"
#include "kernels/dnnl_conv.h"
#include "kernels/spatial.h"

static void to3(struct qp_conv_state *s) {
    for (int i = 0; i < 3; i++) {
        int j = i - (3 - s->w.nsp);
        s->k3[i] = j >= 0 ? s->w.k[j] : 1;
        s->in3[i] = j >= 0 ? s->w.in[j] : 1;
        s->out3[i] = j >= 0 ? s->w.out[j] : 1;
        s->s3[i] = j >= 0 ? s->w.stride[j] : 1;
        s->d3[i] = j >= 0 ? s->w.dil[j] : 1;
        s->p3[i] = j >= 0 ? s->w.pad_begin[j] : 0;
    }
    s->in_sz = s->in3[0] * s->in3[1] * s->in3[2];
    s->out_sz = s->out3[0] * s->out3[1] * s->out3[2];
    s->k_sz = s->k3[0] * s->k3[1] * s->k3[2];
}

enum qp_status qp_conv_geometry(struct qp_kprep *p, int transpose, struct qp_conv_state *s) {
    enum qp_status st = qp_kneed(p, 0);
    if (!st) st = qp_kneed(p, 1);
    if (st) return st;
    const struct qp_kt *x = p->in[0], *w = p->in[1];
    if (x->dtype != QP_DTYPE_FLOAT || w->dtype != QP_DTYPE_FLOAT)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "dtype %s (float only)",
                            qp_dtype_name(x->dtype));
    if (x->rank < 3 || x->rank != w->rank)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "X has rank %d and W rank %d", x->rank,
                            w->rank);
    memset(s, 0, sizeof *s);
    s->group = qp_kattr_int(p->node, "group", 1);
    if (s->group < 1)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "group %lld", (long long)s->group);
    s->n = x->dims[0];
    s->c = x->dims[1];
    int nsp = x->rank - 2;
    const int64_t *ks;
    int64_t nk = qp_kattr_ints(p->node, "kernel_shape", &ks);
    if (nk >= 0) {
        if (nk != nsp) return qp_error_set(p->err, QP_ERR_BAD_INPUT, "kernel_shape length");
        for (int i = 0; i < nsp; i++)
            if (ks[i] != w->dims[i + 2])
                return qp_error_set(p->err, QP_ERR_BAD_INPUT, "kernel_shape disagrees with W");
    }
    if (!transpose) {
        s->m = w->dims[0];
        if (s->c != w->dims[1] * s->group || s->m % s->group)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                                "X has %lld channels, W expects %lld x group %lld", (long long)s->c,
                                (long long)w->dims[1], (long long)s->group);
        st = qp_window_init(&s->w, p->node, nsp, x->dims + 2, w->dims + 2, 0, p->err);
        if (st) return st;
    } else {
        if (w->dims[0] != s->c)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "W has %lld input channels, X %lld",
                                (long long)w->dims[0], (long long)s->c);
        s->m = w->dims[1] * s->group;
        if (s->c % s->group) return qp_error_set(p->err, QP_ERR_BAD_INPUT, "channels vs group");
        /* Geometry of ConvTranspose: output sizes from output_shape or the formula. */
        struct qp_window *g = &s->w;
        memset(g, 0, sizeof *g);
        g->nsp = nsp;
        if (nsp > QP_MAX_SPATIAL) return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "spatial rank");
        const int64_t *v;
        int64_t c;
        int64_t opad[QP_MAX_SPATIAL] = {0};
        for (int i = 0; i < nsp; i++) {
            g->in[i] = x->dims[i + 2];
            g->k[i] = w->dims[i + 2];
            g->stride[i] = 1;
            g->dil[i] = 1;
        }
        if ((c = qp_kattr_ints(p->node, "strides", &v)) == nsp)
            for (int i = 0; i < nsp; i++)
                g->stride[i] = v[i];
        if ((c = qp_kattr_ints(p->node, "dilations", &v)) == nsp)
            for (int i = 0; i < nsp; i++)
                g->dil[i] = v[i];
        if ((c = qp_kattr_ints(p->node, "output_padding", &v)) == nsp)
            for (int i = 0; i < nsp; i++)
                opad[i] = v[i];
        if ((c = qp_kattr_ints(p->node, "pads", &v)) == 2 * nsp)
            for (int i = 0; i < nsp; i++) {
                g->pad_begin[i] = v[i];
                g->pad_end[i] = v[i + nsp];
            }
        for (int i = 0; i < nsp; i++)
            if (g->stride[i] < 1 || g->dil[i] < 1)
                return qp_error_set(p->err, QP_ERR_BAD_INPUT, "strides/dilations must be >= 1");
        char ap[32];
        qp_kattr_str(p->node, "auto_pad", "NOTSET", ap, sizeof ap);
        int64_t n_os = qp_kattr_ints(p->node, "output_shape", &v);
        for (int i = 0; i < nsp; i++) {
            int64_t ek = (g->k[i] - 1) * g->dil[i] + 1;
            int64_t full = g->stride[i] * (g->in[i] - 1) + opad[i] + ek;
            if (n_os >= nsp) {
                int64_t want = v[n_os - nsp + i];
                int64_t total = full - want;
                if (total < 0) total = 0;
                if (strcmp(ap, "SAME_UPPER") == 0) {
                    g->pad_begin[i] = total / 2;
                    g->pad_end[i] = total - total / 2;
                } else {
                    g->pad_end[i] = total / 2;
                    g->pad_begin[i] = total - total / 2;
                }
                g->out[i] = want;
            } else if (strcmp(ap, "SAME_UPPER") == 0 || strcmp(ap, "SAME_LOWER") == 0) {
                int64_t want = g->in[i] * g->stride[i];
                int64_t total = full - want;
                if (total < 0) total = 0;
                if (ap[5] == 'U') {
                    g->pad_begin[i] = total / 2;
                    g->pad_end[i] = total - total / 2;
                } else {
                    g->pad_end[i] = total / 2;
                    g->pad_begin[i] = total - total / 2;
                }
                g->out[i] = want;
            } else {
                if (strcmp(ap, "VALID") == 0) g->pad_begin[i] = g->pad_end[i] = 0;
                g->out[i] = full - g->pad_begin[i] - g->pad_end[i];
            }
            if (g->out[i] < 0)
                return qp_error_set(p->err, QP_ERR_BAD_INPUT, "negative output size");
        }
    }
    if (p->n_in > 2 && p->in[2]) {
        if (p->in[2]->numel != (uint64_t)s->m || p->in[2]->dtype != QP_DTYPE_FLOAT)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "bias has %llu elements, expected %lld",
                                (unsigned long long)p->in[2]->numel, (long long)s->m);
        s->has_bias = 1;
    }
    to3(s);
    int64_t od[QP_MAX_RANK];
    od[0] = s->n;
    od[1] = s->m;
    for (int i = 0; i < nsp; i++)
        od[i + 2] = s->w.out[i];
    return qp_kt_set(p->out[0], QP_DTYPE_FLOAT, x->rank, od, p->err);
}

static enum qp_status conv_common(struct qp_kprep *p, int transpose, struct qp_conv_state *s) {
    enum qp_status st = qp_conv_geometry(p, transpose, s);
    if (st) return st;
    return qp_ksave_state(p, s, sizeof *s);
}

enum qp_status qp_k_conv_prepare(struct qp_kprep *p) {
    struct qp_conv_state s;
    return conv_common(p, 0, &s);
}

enum qp_status qp_k_conv_transpose_prepare(struct qp_kprep *p) {
    struct qp_conv_state s;
    return conv_common(p, 1, &s);
}

enum qp_status qp_k_conv_run(const struct qp_krun *r) {
    const struct qp_conv_state *s = r->state;
    const float *x = r->in[0]->data, *w = r->in[1]->data;
    const float *b = s->has_bias ? r->in[2]->data : NULL;
    float *y = r->out[0]->data;
    int64_t cg = s->c / s->group, mg = s->m / s->group;
    int64_t planes = s->n * s->m;
    int nt = planes * s->out_sz * cg * s->k_sz < 65536 ? 1 : r->n_threads;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t pm = 0; pm < planes; pm++) {
        int64_t n = pm / s->m, m = pm % s->m, g = m / mg;
        float *yp = y + pm * s->out_sz;
        const float *wm = w + m * cg * s->k_sz;
        for (int64_t o0 = 0; o0 < s->out3[0]; o0++)
            for (int64_t o1 = 0; o1 < s->out3[1]; o1++)
                for (int64_t o2 = 0; o2 < s->out3[2]; o2++) {
                    float acc = b ? b[m] : 0.0f;
                    for (int64_t c = 0; c < cg; c++) {
                        const float *xc = x + (n * s->c + g * cg + c) * s->in_sz;
                        const float *wc = wm + c * s->k_sz;
                        for (int64_t k0 = 0; k0 < s->k3[0]; k0++) {
                            int64_t i0 = o0 * s->s3[0] - s->p3[0] + k0 * s->d3[0];
                            if (i0 < 0 || i0 >= s->in3[0]) continue;
                            for (int64_t k1 = 0; k1 < s->k3[1]; k1++) {
                                int64_t i1 = o1 * s->s3[1] - s->p3[1] + k1 * s->d3[1];
                                if (i1 < 0 || i1 >= s->in3[1]) continue;
                                const float *xr = xc + (i0 * s->in3[1] + i1) * s->in3[2];
                                const float *wr = wc + (k0 * s->k3[1] + k1) * s->k3[2];
                                for (int64_t k2 = 0; k2 < s->k3[2]; k2++) {
                                    int64_t i2 = o2 * s->s3[2] - s->p3[2] + k2 * s->d3[2];
                                    if (i2 < 0 || i2 >= s->in3[2]) continue;
                                    acc += xr[i2] * wr[k2];
                                }
                            }
                        }
                    }
                    yp[(o0 * s->out3[1] + o1) * s->out3[2] + o2] = acc;
                }
    }
    return QP_OK;
}

/* ConvTranspose as a gather: output o receives x[i] * w[k] where o = i*stride - pad + k*dil. */
enum qp_status qp_k_conv_transpose_run(const struct qp_krun *r) {
    const struct qp_conv_state *s = r->state;
    const float *x = r->in[0]->data, *w = r->in[1]->data;
    const float *b = s->has_bias ? r->in[2]->data : NULL;
    float *y = r->out[0]->data;
    int64_t cg = s->c / s->group, mg = s->m / s->group;
    int64_t planes = s->n * s->m;
    int nt = planes * s->out_sz * cg * s->k_sz < 65536 ? 1 : r->n_threads;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t pm = 0; pm < planes; pm++) {
        int64_t n = pm / s->m, m = pm % s->m, g = m / mg, mm = m % mg;
        float *yp = y + pm * s->out_sz;
        for (int64_t o0 = 0; o0 < s->out3[0]; o0++)
            for (int64_t o1 = 0; o1 < s->out3[1]; o1++)
                for (int64_t o2 = 0; o2 < s->out3[2]; o2++) {
                    float acc = b ? b[m] : 0.0f;
                    for (int64_t c = 0; c < cg; c++) {
                        int64_t ci = g * cg + c;
                        const float *xc = x + (n * s->c + ci) * s->in_sz;
                        const float *wc = w + (ci * mg + mm) * s->k_sz;
                        for (int64_t k0 = 0; k0 < s->k3[0]; k0++) {
                            int64_t t0 = o0 + s->p3[0] - k0 * s->d3[0];
                            if (t0 < 0 || t0 % s->s3[0]) continue;
                            int64_t i0 = t0 / s->s3[0];
                            if (i0 >= s->in3[0]) continue;
                            for (int64_t k1 = 0; k1 < s->k3[1]; k1++) {
                                int64_t t1 = o1 + s->p3[1] - k1 * s->d3[1];
                                if (t1 < 0 || t1 % s->s3[1]) continue;
                                int64_t i1 = t1 / s->s3[1];
                                if (i1 >= s->in3[1]) continue;
                                for (int64_t k2 = 0; k2 < s->k3[2]; k2++) {
                                    int64_t t2 = o2 + s->p3[2] - k2 * s->d3[2];
                                    if (t2 < 0 || t2 % s->s3[2]) continue;
                                    int64_t i2 = t2 / s->s3[2];
                                    if (i2 >= s->in3[2]) continue;
                                    acc += xc[(i0 * s->in3[1] + i1) * s->in3[2] + i2] *
                                           wc[(k0 * s->k3[1] + k1) * s->k3[2] + k2];
                                }
                            }
                        }
                    }
                    yp[(o0 * s->out3[1] + o1) * s->out3[2] + o2] = acc;
                }
    }
    return QP_OK;
}
