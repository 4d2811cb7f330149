/* Kernel tests on raw buffers: prepare infers shapes, run computes values; results do not depend
 * on the thread count; model data (integer division by zero, bad indices) never traps. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/size.h"
#include "kernels/kernels.h"

static struct qp_kt kt(enum qp_dtype dt, int rank, const int64_t *dims, void *data) {
    struct qp_kt t;
    memset(&t, 0, sizeof t);
    assert_int_equal(qp_kt_set(&t, dt, rank, dims, NULL), QP_OK);
    t.data = data;
    t.is_const = data != NULL;
    return t;
}

/* Prepares and runs `op` (opset 17) with the given inputs; output 0 lands in out_data. */
static enum qp_status run_op(const char *op, struct qp_attr *attrs, int n_attrs, int n_in,
                             struct qp_kt *in, struct qp_kt *out, void *out_data, int threads) {
    struct qp_node node = {
        .name = "n", .op_type = op, .domain = "", .n_attrs = n_attrs, .attrs = attrs};
    const struct qp_kernel *k = qp_kernel_find("", op, 17);
    assert_non_null(k);
    const struct qp_kt *ins[4] = {&in[0], n_in > 1 ? &in[1] : NULL, n_in > 2 ? &in[2] : NULL};
    struct qp_kt *outs[1] = {out};
    struct qp_error err = {0};
    struct qp_kprep p = {.node = &node,
                         .opset = 17,
                         .n_in = n_in,
                         .n_out = 1,
                         .in = ins,
                         .out = outs,
                         .err = &err,
                         .missing_const = -1};
    enum qp_status st = k->prepare(&p);
    if (st) return st;
    out->data = out_data;
    void *scratch = p.scratch ? malloc(p.scratch) : NULL;
    struct qp_krun r = {.node = &node,
                        .state = p.state,
                        .n_in = n_in,
                        .n_out = 1,
                        .in = ins,
                        .out = outs,
                        .scratch = scratch,
                        .n_threads = threads,
                        .err = &err};
    st = k->run(&r);
    free(scratch);
    free(p.state);
    return st;
}

static void test_add_broadcast(void **state) {
    (void)state;
    float a[6] = {1, 2, 3, 4, 5, 6}, b[3] = {10, 20, 30}, y[6];
    int64_t da[2] = {2, 3}, db[1] = {3};
    struct qp_kt in[2] = {kt(QP_DTYPE_FLOAT, 2, da, a), kt(QP_DTYPE_FLOAT, 1, db, b)};
    struct qp_kt out = {0};
    assert_int_equal(run_op("Add", NULL, 0, 2, in, &out, y, 1), QP_OK);
    assert_int_equal(out.rank, 2);
    assert_int_equal(out.dims[0], 2);
    assert_int_equal(out.dims[1], 3);
    const float want[6] = {11, 22, 33, 14, 25, 36};
    assert_memory_equal(y, want, sizeof want);
    /* column broadcast: [2,1] + [1,3] */
    float c[2] = {1, 2}, d[3] = {10, 20, 30};
    int64_t dc[2] = {2, 1}, dd[2] = {1, 3};
    struct qp_kt in2[2] = {kt(QP_DTYPE_FLOAT, 2, dc, c), kt(QP_DTYPE_FLOAT, 2, dd, d)};
    assert_int_equal(run_op("Mul", NULL, 0, 2, in2, &out, y, 1), QP_OK);
    const float want2[6] = {10, 20, 30, 20, 40, 60};
    assert_memory_equal(y, want2, sizeof want2);
    /* incompatible shapes */
    int64_t de[1] = {4};
    float e[4] = {0};
    struct qp_kt in3[2] = {kt(QP_DTYPE_FLOAT, 2, da, a), kt(QP_DTYPE_FLOAT, 1, de, e)};
    assert_int_equal(run_op("Add", NULL, 0, 2, in3, &out, y, 1), QP_ERR_BAD_INPUT);
}

/* ReduceMean / ReduceSum / ReduceSumSquare of float32 over adjacent axes (the kernel's fast
 * loop, also with axes of size 1 between them) and over axes that are not adjacent (the general
 * loop): the bits of a double sum in input order, divided by the count for the mean (values of
 * +-1e20 and small ones, so that another order gives other bits). */
static void test_reduce_orders(void **state) {
    (void)state;
    static const int64_t dims[5] = {2, 3, 1, 4, 5};
    static const struct {
        int n;
        int64_t axes[5];
    } sets[] = {{1, {1}}, {2, {3, 4}},          {3, {1, 2, 3}}, {2, {1, 3}}, {1, {0}},
                {1, {4}}, {5, {0, 1, 2, 3, 4}}, {2, {0, 2}},    {2, {0, 4}}};
    static const char *ops[3] = {"ReduceMean", "ReduceSum", "ReduceSumSquare"};
    float x[120], y[120];
    for (int i = 0; i < 120; i++)
        x[i] = i % 3 == 0   ? 1e20f * (float)(1 + i % 4)
               : i % 3 == 1 ? -1e20f
                            : (float)(i % 11) - 5.5f;
    for (size_t si = 0; si < sizeof sets / sizeof sets[0]; si++)
        for (int oi = 0; oi < 3; oi++) {
            int reduced[5] = {0};
            for (int k = 0; k < sets[si].n; k++)
                reduced[sets[si].axes[k]] = 1;
            double want[120] = {0};
            int64_t count = 1, ost[5], acc = 1;
            for (int d = 4; d >= 0; d--) {
                ost[d] = reduced[d] ? 0 : acc;
                if (!reduced[d])
                    acc *= dims[d];
                else
                    count *= dims[d];
            }
            for (int i = 0; i < 120; i++) { /* input order */
                int64_t o = 0, rest = i;
                for (int d = 4; d >= 0; d--) {
                    o += rest % dims[d] * ost[d];
                    rest /= dims[d];
                }
                double v = x[i];
                want[o] += oi == 2 ? v * v : v;
            }
            struct qp_attr a[2] = {{.name = "axes", .type = QP_ATTR_INTS},
                                   {.name = "keepdims", .type = QP_ATTR_INT, .i = 0}};
            a[0].ints = sets[si].axes;
            a[0].n = (size_t)sets[si].n;
            struct qp_kt in[1] = {kt(QP_DTYPE_FLOAT, 5, dims, x)}, out = {0};
            int64_t axes_dims[1] = {sets[si].n};
            struct qp_kt with_axes[2] = {in[0],
                                         kt(QP_DTYPE_INT64, 1, axes_dims, (void *)sets[si].axes)};
            /* opset 17: ReduceSum takes its axes as an input, the others as an attribute */
            enum qp_status st = oi == 1 ? run_op(ops[oi], a + 1, 1, 2, with_axes, &out, y, 2)
                                        : run_op(ops[oi], a, 2, 1, in, &out, y, 2);
            assert_int_equal(st, QP_OK);
            assert_int_equal((int64_t)out.numel, 120 / count);
            for (int64_t o = 0; o < 120 / count; o++) {
                float w = (float)(oi == 0 ? want[o] / (double)count : want[o]);
                if (memcmp(&y[o], &w, sizeof w) != 0)
                    fail_msg("%s, axes set %zu, output %lld: %.9g, want %.9g", ops[oi], si,
                             (long long)o, y[o], w);
            }
        }
}

static void test_int_div_by_zero(void **state) {
    (void)state;
    int32_t a[3] = {7, INT32_MIN, -7}, b[3] = {0, -1, 2}, y[3];
    int64_t d[1] = {3};
    struct qp_kt in[2] = {kt(QP_DTYPE_INT32, 1, d, a), kt(QP_DTYPE_INT32, 1, d, b)};
    struct qp_kt out = {0};
    assert_int_equal(run_op("Div", NULL, 0, 2, in, &out, y, 1), QP_OK);
    assert_int_equal(y[0], 0);
    assert_int_equal(y[1], INT32_MIN);
    assert_int_equal(y[2], -3);
}

static void test_threads_independent(void **state) {
    (void)state;
    enum { M = 64, K = 96, N = 80 };
    float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N);
    float *y1 = malloc(sizeof(float) * M * N), *y2 = malloc(sizeof(float) * M * N);
    srand(1);
    for (int i = 0; i < M * K; i++)
        a[i] = (float)rand() / RAND_MAX - 0.5f;
    for (int i = 0; i < K * N; i++)
        b[i] = (float)rand() / RAND_MAX - 0.5f;
    int64_t da[2] = {M, K}, db[2] = {K, N};
    struct qp_kt in[2] = {kt(QP_DTYPE_FLOAT, 2, da, a), kt(QP_DTYPE_FLOAT, 2, db, b)};
    struct qp_kt out = {0};
    assert_int_equal(run_op("MatMul", NULL, 0, 2, in, &out, y1, 1), QP_OK);
    assert_int_equal(run_op("MatMul", NULL, 0, 2, in, &out, y2, 2), QP_OK);
    assert_memory_equal(y1, y2, sizeof(float) * M * N);
    /* against a naive double-precision product */
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double acc = 0;
            for (int k = 0; k < K; k++)
                acc += (double)a[i * K + k] * b[k * N + j];
            assert_true(fabs(acc - y1[i * N + j]) <= 1e-4 + 1e-4 * fabs(acc));
        }
    free(a);
    free(b);
    free(y1);
    free(y2);
}

static void test_conv_matches_naive(void **state) {
    (void)state;
    /* 1x2x5x5 input, 3x2x3x3 weights, pad 1, stride 2 */
    float x[50], w[54], bias[3] = {0.5f, -1.0f, 2.0f}, y[3 * 3 * 3];
    for (int i = 0; i < 50; i++)
        x[i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < 54; i++)
        w[i] = (float)(i % 5) * 0.25f - 0.5f;
    int64_t dx[4] = {1, 2, 5, 5}, dw[4] = {3, 2, 3, 3}, db[1] = {3};
    struct qp_kt in[3] = {kt(QP_DTYPE_FLOAT, 4, dx, x), kt(QP_DTYPE_FLOAT, 4, dw, w),
                          kt(QP_DTYPE_FLOAT, 1, db, bias)};
    static const int64_t pads[4] = {1, 1, 1, 1}, strides[2] = {2, 2};
    struct qp_attr attrs[2] = {{.name = "pads", .type = QP_ATTR_INTS, .n = 4, .ints = pads},
                               {.name = "strides", .type = QP_ATTR_INTS, .n = 2, .ints = strides}};
    struct qp_kt out = {0};
    assert_int_equal(run_op("Conv", attrs, 2, 3, in, &out, y, 1), QP_OK);
    assert_int_equal(out.dims[2], 3);
    assert_int_equal(out.dims[3], 3);
    for (int m = 0; m < 3; m++)
        for (int oh = 0; oh < 3; oh++)
            for (int ow = 0; ow < 3; ow++) {
                double acc = bias[m];
                for (int c = 0; c < 2; c++)
                    for (int kh = 0; kh < 3; kh++)
                        for (int kw = 0; kw < 3; kw++) {
                            int ih = oh * 2 - 1 + kh, iw = ow * 2 - 1 + kw;
                            if (ih < 0 || ih >= 5 || iw < 0 || iw >= 5) continue;
                            acc += x[c * 25 + ih * 5 + iw] * w[((m * 2 + c) * 3 + kh) * 3 + kw];
                        }
                assert_true(fabs(acc - y[(m * 3 + oh) * 3 + ow]) < 1e-5);
            }
}

static void test_gather_bad_index(void **state) {
    (void)state;
    float x[4] = {1, 2, 3, 4}, y[2];
    int64_t idx[2] = {1, 7};
    int64_t dx[1] = {4}, di[1] = {2};
    struct qp_kt in[2] = {kt(QP_DTYPE_FLOAT, 1, dx, x), kt(QP_DTYPE_INT64, 1, di, idx)};
    struct qp_kt out = {0};
    assert_int_equal(run_op("Gather", NULL, 0, 2, in, &out, y, 1), QP_ERR_BAD_INPUT);
    idx[1] = -1;
    assert_int_equal(run_op("Gather", NULL, 0, 2, in, &out, y, 1), QP_OK);
    assert_true(y[0] == 2.0f && y[1] == 4.0f);
}

static void test_reshape_needs_const(void **state) {
    (void)state;
    float x[6] = {0};
    int64_t shape[2] = {3, -1}, dx[2] = {2, 3}, ds[1] = {2};
    struct qp_kt in[2] = {kt(QP_DTYPE_FLOAT, 2, dx, x), kt(QP_DTYPE_INT64, 1, ds, shape)};
    struct qp_kt out = {0};
    float y[6];
    assert_int_equal(run_op("Reshape", NULL, 0, 2, in, &out, y, 1), QP_OK);
    assert_int_equal(out.dims[0], 3);
    assert_int_equal(out.dims[1], 2);
    in[1].is_const = 0;
    assert_int_equal(run_op("Reshape", NULL, 0, 2, in, &out, y, 1), QP_ERR_UNSUPPORTED);
}

/* Kernel states (qp_zalloc64) are 64-byte aligned and zeroed at every size, the mmap'd sizes
 * included (calloc gave those a page offset of 16: weights straddling cache lines, engine.md). */
static void test_zalloc64(void **state) {
    (void)state;
    const size_t sizes[] = {0, 1, 63, 64, 4096 + 16, (size_t)3 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        unsigned char *p = qp_zalloc64(sizes[i]);
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % 64, 0);
        size_t zeros = 0;
        for (size_t j = 0; j < sizes[i]; j++)
            zeros += p[j] == 0;
        assert_int_equal(zeros, sizes[i]);
        free(p);
    }
    assert_null(qp_zalloc64(SIZE_MAX - 10));
}

static void test_registry_rows_unique(void **state) {
    (void)state;
    /* No two rows of one op overlap in opset range: resolution is unambiguous. */
    for (size_t i = 0; i < qp_kernel_count(); i++)
        for (size_t j = i + 1; j < qp_kernel_count(); j++) {
            const struct qp_kernel *a = qp_kernel_at(i), *b = qp_kernel_at(j);
            if (strcmp(a->op, b->op) || strcmp(a->domain, b->domain)) continue;
            assert_true(a->since_max < b->since_min || b->since_max < a->since_min);
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_broadcast),
        cmocka_unit_test(test_int_div_by_zero),
        cmocka_unit_test(test_threads_independent),
        cmocka_unit_test(test_conv_matches_naive),
        cmocka_unit_test(test_gather_bad_index),
        cmocka_unit_test(test_reshape_needs_const),
        cmocka_unit_test(test_registry_rows_unique),
        cmocka_unit_test(test_reduce_orders),
        cmocka_unit_test(test_zalloc64),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
