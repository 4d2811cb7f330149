/* Runs one registry row on raw buffers, as the runtime would: prepare (shapes, validation),
 * then run with `threads` threads. Shared by the kernel unit tests (include after cmocka.h). */
#ifndef QP_TESTS_KHARNESS_H
#define QP_TESTS_KHARNESS_H

#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

#define KH_MAX_IO 12

/* A kernel tensor over `data` (constant at plan time when data is not NULL). */
static inline struct qp_kt kh_t(enum qp_dtype dt, int rank, const int64_t *dims, void *data) {
    struct qp_kt t;
    memset(&t, 0, sizeof t);
    assert_int_equal(qp_kt_set(&t, dt, rank, dims, NULL), QP_OK);
    t.data = data;
    t.is_const = data != NULL;
    return t;
}

struct kh_call {
    const char *op;
    int opset;
    struct qp_attr *attrs;
    int n_attrs;
    int n_in, n_out;
    struct qp_kt *in[KH_MAX_IO];  /* NULL: omitted optional input */
    struct qp_kt *out[KH_MAX_IO]; /* NULL: omitted optional output */
    void *out_data[KH_MAX_IO];
    int threads;
    struct qp_error err;
};

/* QP_OK or the first failing status (prepare's, else run's); messages in c->err. */
static inline enum qp_status kh_run(struct kh_call *c) {
    struct qp_node node = {
        .name = "n", .op_type = c->op, .domain = "", .n_attrs = c->n_attrs, .attrs = c->attrs};
    const struct qp_kernel *k = qp_kernel_find("", c->op, c->opset);
    assert_non_null(k);
    memset(&c->err, 0, sizeof c->err);
    struct qp_kprep p = {.node = &node,
                         .opset = c->opset,
                         .n_in = c->n_in,
                         .n_out = c->n_out,
                         .in = (const struct qp_kt *const *)c->in,
                         .out = c->out,
                         .err = &c->err,
                         .missing_const = -1};
    enum qp_status st = k->prepare(&p);
    if (st) {
        free(p.state);
        return st;
    }
    for (int i = 0; i < c->n_out; i++)
        if (c->out[i]) c->out[i]->data = c->out_data[i];
    void *scratch = p.scratch ? malloc(p.scratch) : NULL;
    struct qp_krun r = {.node = &node,
                        .state = p.state,
                        .n_in = c->n_in,
                        .n_out = c->n_out,
                        .in = (const struct qp_kt *const *)c->in,
                        .out = c->out,
                        .scratch = scratch,
                        .n_threads = c->threads ? c->threads : 1,
                        .err = &c->err};
    st = k->run(&r);
    free(scratch);
    free(p.state);
    return st;
}

static inline struct qp_attr kh_int(const char *name, int64_t v) {
    struct qp_attr a;
    memset(&a, 0, sizeof a);
    a.name = name;
    a.type = QP_ATTR_INT;
    a.i = v;
    return a;
}

static inline struct qp_attr kh_float(const char *name, float v) {
    struct qp_attr a;
    memset(&a, 0, sizeof a);
    a.name = name;
    a.type = QP_ATTR_FLOAT;
    a.f = v;
    return a;
}

static inline struct qp_attr kh_str(const char *name, const char *v) {
    struct qp_attr a;
    memset(&a, 0, sizeof a);
    a.name = name;
    a.type = QP_ATTR_STRING;
    a.s.data = (const uint8_t *)v;
    a.s.len = strlen(v);
    return a;
}

static inline struct qp_attr kh_ints(const char *name, const int64_t *v, size_t n) {
    struct qp_attr a;
    memset(&a, 0, sizeof a);
    a.name = name;
    a.type = QP_ATTR_INTS;
    a.ints = v;
    a.n = n;
    return a;
}

#endif
