/* The callback provider (qplace/calib.h, qp_provider_callback_create): batches handed from the
 * caller's memory by index, checked against the first batch's dtypes and ranks. */
#include <stdlib.h>
#include <string.h>

#include "calib/provider.h"

struct callback_impl {
    qp_batch_fn fn;
    void *user;
    uint64_t next;          /* index of the next batch */
    uint64_t samples_seen;  /* rows along axis 0 of input 0 in this pass */
    int have_first;         /* first[] holds batch 0's dtypes and ranks */
    struct qp_array *first; /* n_inputs entries: dtype and rank only */
};

static void release_batch(struct qp_provider *p) {
    for (size_t i = 0; i < p->n_inputs; i++)
        qp_array_release(&p->batch[i]);
}

/* Every array of batch `index` agrees with batch 0 (the first batch sets what they must be). */
static enum qp_status check_batch(struct qp_provider *p, struct callback_impl *c, uint64_t index,
                                  struct qp_error *err) {
    for (size_t i = 0; i < p->n_inputs; i++) {
        const struct qp_array *a = &p->batch[i];
        int ok = 1;
        uint64_t numel = qp_array_numel(a, &ok);
        if (a->dtype == QP_DTYPE_UNDEFINED || a->rank < 0 || a->rank > QP_MAX_RANK || !ok ||
            (numel && !a->data))
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "calibration data: batch %llu: input '%s' was not filled (use "
                                "qp_array_view or qp_array_alloc in the callback)",
                                (unsigned long long)index, p->names[i]);
        if (!c->have_first) continue;
        const struct qp_array *f = &c->first[i];
        if (a->dtype != f->dtype || a->rank != f->rank)
            return qp_error_set(
                err, QP_ERR_BAD_INPUT,
                "calibration data: batch %llu: input '%s' is %s of rank %d, batch 0 "
                "was %s of rank %d",
                (unsigned long long)index, p->names[i], qp_dtype_name(a->dtype), a->rank,
                qp_dtype_name(f->dtype), f->rank);
    }
    if (!c->have_first) {
        for (size_t i = 0; i < p->n_inputs; i++) {
            c->first[i].dtype = p->batch[i].dtype;
            c->first[i].rank = p->batch[i].rank;
        }
        c->have_first = 1;
    }
    return QP_OK;
}

static enum qp_status callback_next(struct qp_provider *p, int *end_out, struct qp_error *err) {
    struct callback_impl *c = p->impl;
    release_batch(p);
    if (c->next >= p->n_batches) {
        if (!p->n_samples) p->n_samples = c->samples_seen; /* known after one full pass */
        *end_out = 1;
        return QP_OK;
    }
    uint64_t index = c->next;
    enum qp_status st = c->fn(c->user, index, p->batch, err);
    if (st == QP_OK)
        st = check_batch(p, c, index, err);
    else
        qp_error_prefix(err, "calibration data: batch %llu", (unsigned long long)index);
    if (st != QP_OK) {
        release_batch(p);
        return st;
    }
    c->samples_seen += p->batch[0].rank > 0 ? (uint64_t)p->batch[0].dims[0] : 1;
    c->next++;
    *end_out = 0;
    return QP_OK;
}

static enum qp_status callback_reset(struct qp_provider *p, struct qp_error *err) {
    (void)err;
    struct callback_impl *c = p->impl;
    release_batch(p);
    c->next = 0;
    c->samples_seen = 0;
    return QP_OK;
}

static void callback_destroy(struct qp_provider *p) {
    struct callback_impl *c = p->impl;
    if (!c) return;
    release_batch(p);
    free(c->first);
    free(c);
}

static const struct qp_provider_ops callback_ops = {
    .next = callback_next, .reset = callback_reset, .destroy = callback_destroy};

static enum qp_status check_names(const char *const *names, size_t n, struct qp_error *err) {
    for (size_t i = 0; i < n; i++) {
        if (!names[i] || !*names[i])
            return qp_error_set(err, QP_ERR_USAGE, "calibration data: input name %zu is empty", i);
        for (size_t j = 0; j < i; j++)
            if (strcmp(names[i], names[j]) == 0)
                return qp_error_set(err, QP_ERR_USAGE,
                                    "calibration data: input '%s' is named twice", names[i]);
    }
    return QP_OK;
}

enum qp_status qp_provider_callback_create(const char *const *names, size_t n_inputs,
                                           uint64_t n_batches, qp_batch_fn fn, void *user,
                                           struct qp_provider **out, struct qp_error *err) {
    if (!out || !fn || !names || !n_inputs || !n_batches)
        return qp_error_set(err, QP_ERR_USAGE,
                            "calibration data: a callback provider needs input names, at least "
                            "one batch, a callback and an output");
    enum qp_status st = check_names(names, n_inputs, err);
    if (st != QP_OK) return st;
    struct callback_impl *c = calloc(1, sizeof *c);
    struct qp_array *first = c ? calloc(n_inputs, sizeof *first) : NULL;
    if (!first) {
        free(c);
        return qp_error_set(err, QP_ERR_NOMEM, "calibration data: out of memory");
    }
    struct qp_provider *p = NULL;
    if ((st = qp_provider_alloc(&callback_ops, "memory", names, n_inputs, &p, err)) != QP_OK) {
        free(first);
        free(c);
        return st;
    }
    c->fn = fn;
    c->user = user;
    c->first = first;
    p->impl = c;
    p->n_batches = n_batches;
    *out = p;
    return QP_OK;
}
