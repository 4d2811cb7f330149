/* NaN, +-Inf and -0 through the pointwise activations, Min/Max and Softmax/LogSoftmax, against
 * ONNX Runtime. The expected values were produced with onnxruntime-node 1.30.0 (CPU provider)
 * on one-node models (opset 17; Clip and Min/Max opset 13; Softmax/LogSoftmax opset 11 and 13,
 * axis 1) by a script run by hand; they are written out here so the test needs no ORT. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/dnnl_softmax.h"
#include "kernels/kernels.h"

#define N9 9
/* The input of every one-input case: NaN, -Inf, +Inf, -2, -0, +0, 0.5, 3, -0.25. */
static const float x9[N9] = {NAN, -INFINITY, INFINITY, -2.0f, -0.0f, 0.0f, 0.5f, 3.0f, -0.25f};

static struct qp_kt kt(enum qp_dtype dt, int rank, const int64_t *dims, const void *data) {
    struct qp_kt t;
    memset(&t, 0, sizeof t);
    assert_int_equal(qp_kt_set(&t, dt, rank, dims, NULL), QP_OK);
    t.data = (void *)data;
    t.is_const = data != NULL;
    return t;
}

/* Prepares and runs `op` at `opset` through the registry (the kernel the engine would pick). */
static void run_op(const char *op, int opset, struct qp_attr *attrs, int n_attrs, int n_in,
                   struct qp_kt *in, float *y, int threads) {
    struct qp_node node = {
        .name = "n", .op_type = op, .domain = "", .n_attrs = n_attrs, .attrs = attrs};
    const struct qp_kernel *k = qp_kernel_find("", op, opset);
    assert_non_null(k);
    const struct qp_kt *ins[3] = {&in[0], n_in > 1 ? &in[1] : NULL, n_in > 2 ? &in[2] : NULL};
    struct qp_kt out = {0};
    struct qp_kt *outs[1] = {&out};
    struct qp_error err = {0};
    struct qp_kprep p = {.node = &node,
                         .opset = opset,
                         .n_in = n_in,
                         .n_out = 1,
                         .in = ins,
                         .out = outs,
                         .err = &err,
                         .missing_const = -1};
    assert_int_equal(k->prepare(&p), QP_OK);
    out.data = y;
    void *scratch = p.scratch ? calloc(1, p.scratch) : NULL;
    struct qp_krun r = {.node = &node,
                        .state = p.state,
                        .n_in = n_in,
                        .n_out = 1,
                        .in = ins,
                        .out = outs,
                        .scratch = scratch,
                        .n_threads = threads,
                        .err = &err};
    enum qp_status st = k->run(&r);
    free(scratch);
    free(p.state);
    assert_int_equal(st, QP_OK);
}

/* NaN where ORT gives NaN, the same infinity, else |y - want| <= 1e-6 + 1e-5 |want|; with
 * `zero_sign`, zeros must also carry ORT's sign. */
static void expect(const char *what, const float *y, const float *want, int n, int zero_sign) {
    for (int i = 0; i < n; i++) {
        int ok;
        if (isnan(want[i]))
            ok = isnan(y[i]);
        else if (isinf(want[i]))
            ok = y[i] == want[i];
        else
            ok = fabsf(y[i] - want[i]) <= 1e-6f + 1e-5f * fabsf(want[i]);
        if (ok && zero_sign && want[i] == 0.0f) ok = signbit(y[i]) == signbit(want[i]);
        if (!ok) fail_msg("%s: element %d is %g, ONNX Runtime gives %g", what, i, y[i], want[i]);
    }
}

static void unary(const char *op, struct qp_attr *attrs, int n_attrs, const float *want,
                  int zero_sign) {
    int64_t d[1] = {N9};
    struct qp_kt in[1] = {kt(QP_DTYPE_FLOAT, 1, d, x9)};
    float y[N9];
    run_op(op, 17, attrs, n_attrs, 1, in, y, 1);
    expect(op, y, want, N9, zero_sign);
}

static void test_relu(void **state) {
    (void)state;
    const float want[N9] = {NAN, 0, INFINITY, 0, -0.0f, 0, 0.5f, 3, 0};
    unary("Relu", NULL, 0, want, 1);
}

static void test_leaky_relu(void **state) {
    (void)state;
    struct qp_attr a[1] = {{.name = "alpha", .type = QP_ATTR_FLOAT, .f = 0.1f}};
    const float want[N9] = {NAN, -INFINITY, INFINITY, -0.2f, -0.0f, 0, 0.5f, 3, -0.025f};
    unary("LeakyRelu", a, 1, want, 1);
}

static void test_clip(void **state) {
    (void)state;
    int64_t d[1] = {N9};
    const float lo = -1.0f, hi = 1.0f;
    struct qp_kt in[3] = {kt(QP_DTYPE_FLOAT, 1, d, x9), kt(QP_DTYPE_FLOAT, 0, NULL, &lo),
                          kt(QP_DTYPE_FLOAT, 0, NULL, &hi)};
    float y[N9];
    run_op("Clip", 13, NULL, 0, 3, in, y, 1);
    const float want[N9] = {NAN, -1, 1, -1, -0.0f, 0, 0.5f, 1, -0.25f};
    expect("Clip", y, want, N9, 1);
}

static void test_hard_sigmoid(void **state) {
    (void)state;
    const float want[N9] = {
        NAN, 0, 1, 0.09999999403953552f, 0.5f, 0.5f, 0.6000000238418579f, 1, 0.44999998807907104f};
    unary("HardSigmoid", NULL, 0, want, 0);
}

static void test_hard_swish(void **state) {
    (void)state;
    const float want[N9] = {NAN,
                            NAN,
                            INFINITY,
                            -0.3333333134651184f,
                            -0.0f,
                            0,
                            0.2916666567325592f,
                            3,
                            -0.1145833358168602f};
    unary("HardSwish", NULL, 0, want, 1);
}

static void test_other_activations(void **state) {
    (void)state;
    const float celu[N9] = {NAN, -1,   INFINITY, -0.8646647334098816f, 0,
                            0,   0.5f, 3,        -0.22119921445846558f};
    unary("Celu", NULL, 0, celu, 0);
    const float elu[N9] = {NAN, -1,   INFINITY, -0.8646647334098816f, -0.0f,
                           0,   0.5f, 3,        -0.22119921445846558f};
    unary("Elu", NULL, 0, elu, 1);
    const float selu[N9] = {NAN,
                            -1.7580993175506592f,
                            INFINITY,
                            -1.5201665163040161f,
                            0,
                            0,
                            0.5253505110740662f,
                            3.1521029472351074f,
                            -0.38889017701148987f};
    unary("Selu", NULL, 0, selu, 0);
    const float sigmoid[N9] = {NAN,
                               0,
                               1,
                               0.11920291185379028f,
                               0.5f,
                               0.5f,
                               0.6224592924118042f,
                               0.9525741338729858f,
                               0.43782350420951843f};
    unary("Sigmoid", NULL, 0, sigmoid, 0);
    const float softsign[N9] = {
        NAN, NAN, NAN, -0.6666666865348816f, -0.0f, 0, 0.3333333432674408f, 0.75f, -0.2f};
    unary("Softsign", NULL, 0, softsign, 0);
    /* ThresholdedRelu and Shrink map NaN to 0 in ORT (x > alpha is false). */
    const float threlu[N9] = {0, 0, INFINITY, 0, 0, 0, 0, 3, 0};
    unary("ThresholdedRelu", NULL, 0, threlu, 0);
    const float shrink[N9] = {0, -INFINITY, INFINITY, -2, 0, 0, 0, 3, 0};
    unary("Shrink", NULL, 0, shrink, 0);
}

static void binary(const char *op, const float *want) {
    int64_t d[1] = {N9};
    const float b[N9] = {0.0f, 0.0f, NAN, 1.0f, 0.0f, -0.0f, 0.5f, 1.0f, 2.0f};
    struct qp_kt in[2] = {kt(QP_DTYPE_FLOAT, 1, d, x9), kt(QP_DTYPE_FLOAT, 1, d, b)};
    float y[N9];
    run_op(op, 13, NULL, 0, 2, in, y, 1);
    expect(op, y, want, N9, 1);
}

static void test_min_max(void **state) {
    (void)state;
    /* NaN in either input gives NaN; equal zeros give the second input's zero, as ORT. */
    const float mn[N9] = {NAN, -INFINITY, NAN, -2, 0, -0.0f, 0.5f, 1, -0.25f};
    const float mx[N9] = {NAN, 0, NAN, 1, 0, -0.0f, 0.5f, 3, 2};
    binary("Min", mn);
    binary("Max", mx);
}

/* Rows: a NaN, ordinary, a +Inf, a -Inf; then all -Inf, all NaN, two -Inf, three 0 and a +Inf. */
static const float xs[2][16] = {{1, NAN, 2, 3, 1, 2, 3, 4, 1, INFINITY, 2, 3, -INFINITY, 0, 1, 2},
                                {-INFINITY, -INFINITY, -INFINITY, -INFINITY, NAN, NAN, NAN, NAN,
                                 -INFINITY, 5, -INFINITY, 5, 0, 0, 0, INFINITY}};

static const float softmax_want[2][16] = {
    {NAN, NAN, NAN, NAN, 0.032058604061603546f, 0.08714432269334793f, 0.23688283562660217f,
     0.6439142823219299f, NAN, NAN, NAN, NAN, 0, 0.09003057330846786f, 0.2447284758090973f,
     0.6652409434318542f},
    {NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, 0, 0.5f, 0, 0.5f, NAN, NAN, NAN, NAN}};

static const float logsoftmax_want[2][16] = {
    {NAN, NAN, NAN, NAN, -3.4401895999908447f, -2.4401895999908447f, -1.4401897192001343f,
     -0.4401896893978119f, NAN, NAN, NAN, NAN, -INFINITY, -2.4076058864593506f,
     -1.4076058864593506f, -0.40760594606399536f},
    {NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, -INFINITY, -0.6931471824645996f, -INFINITY,
     -0.6931471824645996f, NAN, NAN, NAN, NAN}};

/* Defined in src/kernels/norm.c (no header yet). */
int64_t qp_k_softmax_nan_rows(const float *x, float *y, int64_t outer, int64_t axis_len,
                              int64_t inner);

/* The reference Softmax/LogSoftmax kernel (src/kernels/norm.c) at `opset`, axis 1 of [4, 4]. */
static void run_reference(const char *op, int opset, const float *x, float *y, int threads) {
    int64_t d[2] = {4, 4};
    struct qp_attr a[1] = {{.name = "axis", .type = QP_ATTR_INT, .i = 1}};
    struct qp_node node = {.name = "n", .op_type = op, .domain = "", .n_attrs = 1, .attrs = a};
    struct qp_kt in = kt(QP_DTYPE_FLOAT, 2, d, x);
    const struct qp_kt *ins[1] = {&in};
    struct qp_kt out = {0};
    struct qp_kt *outs[1] = {&out};
    struct qp_error err = {0};
    struct qp_kprep p = {.node = &node,
                         .opset = opset,
                         .n_in = 1,
                         .n_out = 1,
                         .in = ins,
                         .out = outs,
                         .err = &err,
                         .missing_const = -1};
    assert_int_equal(qp_k_softmax_prepare(&p), QP_OK);
    out.data = y;
    struct qp_krun r = {.node = &node,
                        .state = p.state,
                        .n_in = 1,
                        .n_out = 1,
                        .in = ins,
                        .out = outs,
                        .n_threads = threads,
                        .err = &err};
    enum qp_status st = qp_k_softmax_run(&r);
    free(p.state);
    assert_int_equal(st, QP_OK);
}

static void reference_case(const char *op, const float (*want)[16]) {
    for (int opset = 11; opset <= 13; opset += 2)
        for (int c = 0; c < 2; c++)
            for (int threads = 1; threads <= 2; threads++) {
                float y[16];
                run_reference(op, opset, xs[c], y, threads);
                expect(op, y, want[c], 16, 0);
            }
}

static void test_softmax(void **state) {
    (void)state;
    reference_case("Softmax", softmax_want);
}

static void test_logsoftmax(void **state) {
    (void)state;
    reference_case("LogSoftmax", logsoftmax_want);
}

/* The registry's Softmax (oneDNN's primitive when available, which applies the NaN-row fix-up
 * itself) gives ORT's values; the fix-up finds exactly the rows ORT makes NaN. */
static void test_softmax_nan_rows(void **state) {
    (void)state;
    int64_t d[2] = {4, 4};
    struct qp_attr a[1] = {{.name = "axis", .type = QP_ATTR_INT, .i = 1}};
    for (int c = 0; c < 2; c++) {
        struct qp_kt in[1] = {kt(QP_DTYPE_FLOAT, 2, d, xs[c])};
        float y[16];
        run_op("Softmax", 13, a, 1, 1, in, y, 1);
        expect("Softmax (registry)", y, softmax_want[c], 16, 0);
        assert_int_equal(qp_k_softmax_nan_rows(xs[c], y, 4, 4, 1), c == 0 ? 2 : 3);
    }
    /* Rows shared out between two threads (64 x 1024, the fast path's size): a NaN in the last
     * row (the second thread's), a +Inf in the first, both NaN rows, every other row not */
    enum { RR = 64, RN = 1024 };
    int64_t d2[2] = {RR, RN};
    float *bx = malloc(sizeof(float) * RR * RN), *by = malloc(sizeof(float) * RR * RN);
    assert_non_null(bx);
    assert_non_null(by);
    for (int i = 0; i < RR * RN; i++)
        bx[i] = (float)(i % 7) * 0.5f;
    bx[(RR - 1) * RN + 3] = NAN;
    bx[5] = INFINITY;
    struct qp_kt bin[1] = {kt(QP_DTYPE_FLOAT, 2, d2, bx)};
    run_op("Softmax", 13, a, 1, 1, bin, by, 2);
    for (int rr = 0; rr < RR; rr++) {
        int nan_row = rr == 0 || rr == RR - 1;
        for (int j = 0; j < RN; j += 97)
            if (nan_row != (by[rr * RN + j] != by[rr * RN + j]))
                fail_msg("row %d element %d is %g", rr, j, by[rr * RN + j]);
    }
    free(bx);
    free(by);
    /* Rows along a non-last axis: [2, 3, 2] over axis 1, a NaN in row (0, *, 0) only. */
    const float x[12] = {1, 2, NAN, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    float y[12];
    for (int i = 0; i < 12; i++)
        y[i] = 0.25f;
    assert_int_equal(qp_k_softmax_nan_rows(x, y, 2, 3, 2), 1);
    for (int i = 0; i < 12; i++)
        if ((i == 0 || i == 2 || i == 4) != (y[i] != y[i])) fail_msg("element %d is %g", i, y[i]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_relu),       cmocka_unit_test(test_leaky_relu),
        cmocka_unit_test(test_clip),       cmocka_unit_test(test_hard_sigmoid),
        cmocka_unit_test(test_hard_swish), cmocka_unit_test(test_other_activations),
        cmocka_unit_test(test_min_max),    cmocka_unit_test(test_softmax),
        cmocka_unit_test(test_logsoftmax), cmocka_unit_test(test_softmax_nan_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
