#include "kernels/spatial.h"

#include <string.h>

enum qp_status qp_window_init(struct qp_window *w, const struct qp_node *n, int nsp,
                              const int64_t *in, const int64_t *k, int pool, struct qp_error *err) {
    memset(w, 0, sizeof *w);
    if (nsp < 1 || nsp > QP_MAX_SPATIAL)
        return qp_error_set(err, QP_ERR_UNSUPPORTED, "%d spatial dimensions (1..%d supported)", nsp,
                            QP_MAX_SPATIAL);
    w->nsp = nsp;
    const int64_t *v;
    int64_t c;
    for (int i = 0; i < nsp; i++) {
        w->in[i] = in[i];
        w->k[i] = k[i];
        w->stride[i] = 1;
        w->dil[i] = 1;
        if (k[i] < 1)
            return qp_error_set(err, QP_ERR_BAD_INPUT, "kernel size %lld", (long long)k[i]);
    }
    if ((c = qp_kattr_ints(n, "strides", &v)) >= 0) {
        if (c != nsp)
            return qp_error_set(err, QP_ERR_BAD_INPUT, "strides has %lld entries", (long long)c);
        for (int i = 0; i < nsp; i++)
            w->stride[i] = v[i];
    }
    if ((c = qp_kattr_ints(n, "dilations", &v)) >= 0) {
        if (c != nsp)
            return qp_error_set(err, QP_ERR_BAD_INPUT, "dilations has %lld entries", (long long)c);
        for (int i = 0; i < nsp; i++)
            w->dil[i] = v[i];
    }
    for (int i = 0; i < nsp; i++)
        if (w->stride[i] < 1 || w->dil[i] < 1)
            return qp_error_set(err, QP_ERR_BAD_INPUT, "strides and dilations must be >= 1");
    if ((c = qp_kattr_ints(n, "pads", &v)) >= 0) {
        if (c != 2 * nsp)
            return qp_error_set(err, QP_ERR_BAD_INPUT, "pads has %lld entries", (long long)c);
        for (int i = 0; i < nsp; i++) {
            w->pad_begin[i] = v[i];
            w->pad_end[i] = v[i + nsp];
            if (v[i] < 0 || v[i + nsp] < 0)
                return qp_error_set(err, QP_ERR_BAD_INPUT, "negative pad");
        }
    }
    char ap[32];
    qp_kattr_str(n, "auto_pad", "NOTSET", ap, sizeof ap);
    int ceil_mode = pool ? (int)qp_kattr_int(n, "ceil_mode", 0) : 0;
    for (int i = 0; i < nsp; i++) {
        int64_t ek = (k[i] - 1) * w->dil[i] + 1;
        if (strcmp(ap, "SAME_UPPER") == 0 || strcmp(ap, "SAME_LOWER") == 0) {
            int64_t o = (in[i] + w->stride[i] - 1) / w->stride[i];
            int64_t total = (o - 1) * w->stride[i] + ek - in[i];
            if (total < 0) total = 0;
            int upper = ap[5] == 'U';
            w->pad_begin[i] = upper ? total / 2 : total - total / 2;
            w->pad_end[i] = total - w->pad_begin[i];
            w->out[i] = o;
            continue;
        }
        if (strcmp(ap, "VALID") == 0) {
            w->pad_begin[i] = w->pad_end[i] = 0;
        } else if (strcmp(ap, "NOTSET") != 0 && ap[0]) {
            return qp_error_set(err, QP_ERR_BAD_INPUT, "auto_pad '%s'", ap);
        }
        int64_t span = in[i] + w->pad_begin[i] + w->pad_end[i] - ek;
        if (span < 0)
            return qp_error_set(
                err, QP_ERR_BAD_INPUT,
                "kernel (%lld with dilation) is larger than the padded input (%lld)", (long long)ek,
                (long long)(in[i] + w->pad_begin[i] + w->pad_end[i]));
        int64_t o =
            ceil_mode ? (span + w->stride[i] - 1) / w->stride[i] + 1 : span / w->stride[i] + 1;
        /* The last window must start inside the input or its begin padding. */
        if (ceil_mode && (o - 1) * w->stride[i] >= in[i] + w->pad_begin[i]) o--;
        w->out[i] = o;
    }
    return QP_OK;
}
