/* Shared by the kernel unit tests (include after cmocka.h): runs one registry row on raw
 * buffers, as the runtime would (prepare: shapes, validation; then run with `threads` threads),
 * a deterministic random generator, and a tolerance check for float results. */
#ifndef QP_TESTS_KHARNESS_H
#define QP_TESTS_KHARNESS_H

#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

#define KH_MAX_IO 12

/* The kernel tests' deterministic generator (an LCG over *state): the next value in [-1, 1). */
static inline float kh_frand(uint32_t *state) {
    *state = *state * 1664525u + 1013904223u;
    return (float)((*state >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

/* got within rtol 1e-4 of want; the absolute floor grows with the reduction length `red`
 * because sums of many terms of both signs cancel (the error is relative to the terms, not to
 * the small result). Names `what` and the first element off. */
static inline void kh_assert_close(const float *got, const float *want, uint64_t n, double red,
                                   const char *what) {
    float atol = (float)(1e-6 * sqrt(red > 1 ? red : 1));
    for (uint64_t i = 0; i < n; i++) {
        float d = fabsf(got[i] - want[i]);
        if (!(d <= atol + 1e-4f * fabsf(want[i]))) {
            fprintf(stderr, "%s: element %llu: %.9g vs reference %.9g\n", what,
                    (unsigned long long)i, got[i], want[i]);
            fail();
        }
    }
}

/* n values of kh_frand(state) in a malloc'd buffer. */
static inline float *kh_rand_buf(uint32_t *state, uint64_t n) {
    float *b = malloc((size_t)(n ? n : 1) * sizeof *b);
    assert_non_null(b);
    for (uint64_t i = 0; i < n; i++)
        b[i] = kh_frand(state);
    return b;
}

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

/* A call from lists: kh_call_io(op, opset, attrs, n_attrs, KH_INS(&X, ...), KH_OUTS(&Y, ...),
 * KH_DATA(y, ...)); NULL in KH_INS/KH_OUTS omits an optional input/output. The counts are those
 * of the lists; fields stay editable afterwards. KH_CALL is the one-output form. */
#define KH_INS(...)                                                                                \
    (int)(sizeof((struct qp_kt *[]){__VA_ARGS__}) / sizeof(struct qp_kt *)), (struct qp_kt *[]) {  \
        __VA_ARGS__                                                                                \
    }
#define KH_OUTS(...) KH_INS(__VA_ARGS__)
#define KH_DATA(...)                                                                               \
    (int)(sizeof((void *[]){__VA_ARGS__}) / sizeof(void *)), (void *[]) {                          \
        __VA_ARGS__                                                                                \
    }
#define KH_CALL(op, opset, attrs, n_attrs, Y, y, ...)                                              \
    kh_call_io((op), (opset), (attrs), (n_attrs), KH_INS(__VA_ARGS__), KH_OUTS(Y), KH_DATA(y))

static inline struct kh_call kh_call_io(const char *op, int opset, struct qp_attr *attrs,
                                        int n_attrs, int n_in, struct qp_kt *const *in, int n_out,
                                        struct qp_kt *const *out, int n_data,
                                        void *const *out_data) {
    struct kh_call c;
    memset(&c, 0, sizeof c);
    assert_true(n_in <= KH_MAX_IO && n_out <= KH_MAX_IO);
    assert_int_equal(n_data, n_out);
    c.op = op;
    c.opset = opset;
    c.attrs = attrs;
    c.n_attrs = n_attrs;
    c.n_in = n_in;
    c.n_out = n_out;
    for (int i = 0; i < n_in; i++)
        c.in[i] = in[i];
    for (int i = 0; i < n_out; i++) {
        c.out[i] = out[i];
        c.out_data[i] = out_data[i];
    }
    return c;
}

/* Runs c with 1 thread into y1 and with 2 threads into y2 (output 0); both must succeed and
 * agree bit for bit over `bytes`. c is left at 2 threads writing y2. */
static inline void kh_run_threads(struct kh_call *c, void *y1, void *y2, size_t bytes) {
    c->threads = 1;
    c->out_data[0] = y1;
    assert_int_equal(kh_run(c), QP_OK);
    c->threads = 2;
    c->out_data[0] = y2;
    assert_int_equal(kh_run(c), QP_OK);
    assert_memory_equal(y1, y2, bytes);
}

/* malloc that fails the test instead of returning NULL. */
static inline void *kh_alloc(size_t bytes) {
    void *p = malloc(bytes);
    assert_non_null(p);
    return p;
}

/* Attributes: a zeroed attribute of the type, then its value. */
static inline struct qp_attr kh_attr(const char *name, enum qp_attr_type type) {
    struct qp_attr a;
    memset(&a, 0, sizeof a);
    a.name = name;
    a.type = type;
    return a;
}

static inline struct qp_attr kh_int(const char *name, int64_t v) {
    struct qp_attr a = kh_attr(name, QP_ATTR_INT);
    a.i = v;
    return a;
}

static inline struct qp_attr kh_float(const char *name, float v) {
    struct qp_attr a = kh_attr(name, QP_ATTR_FLOAT);
    a.f = v;
    return a;
}

static inline struct qp_attr kh_str(const char *name, const char *v) {
    struct qp_attr a = kh_attr(name, QP_ATTR_STRING);
    a.s.data = (const uint8_t *)v;
    a.s.len = strlen(v);
    return a;
}

static inline struct qp_attr kh_ints(const char *name, const int64_t *v, size_t n) {
    struct qp_attr a = kh_attr(name, QP_ATTR_INTS);
    a.ints = v;
    a.n = n;
    return a;
}

#endif
