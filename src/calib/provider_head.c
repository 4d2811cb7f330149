/* The head of another provider (provider.h, qp_provider_head_create): its first batches, up to
 * a sample count, borrowed batch by batch. */
#include <stdlib.h>
#include <string.h>

#include "calib/provider.h"

struct head_impl {
    struct qp_provider *inner; /* borrowed */
    uint64_t max_samples;
    uint64_t seen; /* samples handed out in this pass */
};

static uint64_t batch_rows(const struct qp_provider *p) {
    const struct qp_array *a = &p->batch[0];
    return p->n_inputs && a->rank > 0 && a->dims[0] > 0 ? (uint64_t)a->dims[0] : 1;
}

static enum qp_status head_next(struct qp_provider *p, int *end_out, struct qp_error *err) {
    struct head_impl *h = p->impl;
    if (p->n_inputs) memset(p->batch, 0, p->n_inputs * sizeof *p->batch);
    if (h->seen >= h->max_samples) {
        *end_out = 1;
        return QP_OK;
    }
    const struct qp_array *in = NULL;
    enum qp_status st = qp_provider_next(h->inner, &in, end_out, err);
    if (st != QP_OK || *end_out) return st;
    for (size_t i = 0; i < p->n_inputs; i++) {
        p->batch[i] = in[i];
        p->batch[i].owned = 0; /* the inner provider's until its next call */
    }
    h->seen += batch_rows(p);
    return QP_OK;
}

static enum qp_status head_reset(struct qp_provider *p, struct qp_error *err) {
    struct head_impl *h = p->impl;
    h->seen = 0;
    if (p->n_inputs) memset(p->batch, 0, p->n_inputs * sizeof *p->batch);
    return qp_provider_reset(h->inner, err);
}

static void head_destroy(struct qp_provider *p) {
    free(p->impl);
}

static const struct qp_provider_ops head_ops = {head_next, head_reset, head_destroy};

enum qp_status qp_provider_head_create(struct qp_provider *inner, uint64_t max_samples,
                                       struct qp_provider **out, struct qp_error *err) {
    if (!inner || !out || max_samples == 0)
        return qp_error_set(err, QP_ERR_USAGE, "calibration data: bad head of a provider");
    struct head_impl *h = calloc(1, sizeof *h);
    if (!h) return qp_error_set(err, QP_ERR_NOMEM, "calibration data: out of memory");
    h->inner = inner;
    h->max_samples = max_samples;
    struct qp_provider *p = NULL;
    enum qp_status st = qp_provider_alloc(
        &head_ops, inner->source, (const char *const *)inner->names, inner->n_inputs, &p, err);
    if (st != QP_OK) {
        free(h);
        return st;
    }
    p->impl = h;
    p->synthetic = inner->synthetic;
    p->n_samples = inner->n_samples < max_samples ? inner->n_samples : max_samples;
    p->n_batches = 0; /* not known before a pass */
    *out = p;
    return QP_OK;
}
