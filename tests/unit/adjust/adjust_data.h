/*
 * What the adjust/ tests share: NB batches of one float input "x", uniform in [0, 1) from a
 * fixed LCG, handed out by a callback provider; and writer options whose every activation range
 * is amax 1 (scale 1/127).
 */
#ifndef QP_TEST_ADJUST_DATA_H
#define QP_TEST_ADJUST_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "qplace/calib.h"
#include "quant/writer.h"

enum { NB = 6, MAX_ELEMS = 4096 };

struct data {
    int rank;
    int64_t dims[4];
    size_t n;
    float buf[NB * MAX_ELEMS];
};

static inline uint32_t adj_lcg(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

static inline void data_init(struct data *d, int rank, const int64_t *dims) {
    d->rank = rank;
    d->n = 1;
    for (int i = 0; i < rank; i++) {
        d->dims[i] = dims[i];
        d->n *= (size_t)dims[i];
    }
    assert_true(d->n <= MAX_ELEMS);
    uint32_t s = 12345;
    for (size_t i = 0; i < NB * d->n; i++)
        d->buf[i] = (float)adj_lcg(&s) / 16777216.0f;
}

static inline enum qp_status batch(void *user, uint64_t index, struct qp_array *in,
                                   struct qp_error *err) {
    struct data *d = user;
    return qp_array_view(&in[0], QP_DTYPE_FLOAT, d->rank, d->dims, d->buf + index * d->n,
                         d->n * sizeof(float), err);
}

static inline struct qp_provider *provider(struct data *d) {
    const char *names[1] = {"x"};
    struct qp_provider *p = NULL;
    struct qp_error err = {0};
    assert_int_equal(qp_provider_callback_create(names, 1, NB, batch, d, &p, &err), QP_OK);
    return p;
}

static inline int amax_one(void *user, const char *tensor, float *amax_out) {
    (void)user;
    (void)tensor;
    *amax_out = 1.0f;
    return 1;
}

static inline void writer_opts(struct qp_writer_options *o) {
    qp_writer_options_default(o);
    o->amax = amax_one;
}

#endif
