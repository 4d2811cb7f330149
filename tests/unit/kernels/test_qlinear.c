/* qlinear.c: DynamicQuantizeLinear, MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv
 * against naive integer loops (zero points per tensor / row / column / output channel, batch
 * broadcasting, groups, strides, pads), saturation, and refusals of other types and of
 * parameter tensors of the wrong size. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kharness.h"

static void test_dynquant(void **state) {
    (void)state;
    float x[5] = {-1.0f, 0.0f, 2.0f, 3.0f, 0.5f}, scale;
    uint8_t y[5], zp;
    int64_t dx[1] = {5};
    struct qp_kt X = kh_t(QP_DTYPE_FLOAT, 1, dx, x), Y = {0}, S = {0}, Z = {0};
    struct kh_call c = kh_call_io("DynamicQuantizeLinear", 11, NULL, 0, KH_INS(&X),
                                  KH_OUTS(&Y, &S, &Z), KH_DATA(y, &scale, &zp));
    assert_int_equal(kh_run(&c), QP_OK);
    /* range [-1, 3]: scale 4/255, zero point round(255/4) = 64 */
    assert_true(scale == 4.0f / 255.0f);
    assert_int_equal(zp, 64);
    for (int i = 0; i < 5; i++) {
        float q = rintf(x[i] / scale) + 64;
        assert_int_equal(y[i], (uint8_t)(q < 0 ? 0 : (q > 255 ? 255 : q)));
    }
    x[2] = NAN;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
}

static void test_matmul_integer(void **state) {
    (void)state;
    enum { BA = 2, M = 3, K = 5, N = 4 };
    uint8_t a[BA * M * K], azp[M] = {3, 200, 128};
    int8_t b[K * N], bzp[N] = {-1, 0, 5, -128};
    for (int i = 0; i < BA * M * K; i++)
        a[i] = (uint8_t)(i * 37 + 11);
    for (int i = 0; i < K * N; i++)
        b[i] = (int8_t)(i * 53 - 90);
    int32_t y[BA * M * N];
    int64_t da[3] = {BA, M, K}, db[2] = {K, N}, dza[1] = {M}, dzb[1] = {N};
    struct qp_kt A = kh_t(QP_DTYPE_UINT8, 3, da, a), B = kh_t(QP_DTYPE_INT8, 2, db, b),
                 ZA = kh_t(QP_DTYPE_UINT8, 1, dza, azp), ZB = kh_t(QP_DTYPE_INT8, 1, dzb, bzp),
                 Y = {0};
    struct kh_call c = KH_CALL("MatMulInteger", 10, NULL, 0, &Y, y, &A, &B, &ZA, &ZB);
    assert_int_equal(kh_run(&c), QP_OK);
    assert_int_equal(Y.dtype, QP_DTYPE_INT32);
    assert_int_equal(Y.rank, 3);
    for (int bt = 0; bt < BA; bt++)
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                int64_t acc = 0;
                for (int q = 0; q < K; q++)
                    acc += (int64_t)(a[(bt * M + i) * K + q] - azp[i]) * (b[q * N + j] - bzp[j]);
                assert_int_equal(y[(bt * M + i) * N + j], (int32_t)acc);
            }
    /* zero point of another type, or of the wrong length */
    struct qp_kt ZBU = kh_t(QP_DTYPE_UINT8, 1, dzb, azp);
    c.in[3] = &ZBU;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    int64_t d2[1] = {2};
    struct qp_kt ZB2 = kh_t(QP_DTYPE_INT8, 1, d2, bzp);
    c.in[3] = &ZB2;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    /* int16 operands are not integer-matmul types */
    int16_t a16[BA * M * K] = {0};
    struct qp_kt A16 = kh_t(QP_DTYPE_INT16, 3, da, a16);
    c.in[0] = &A16;
    c.in[3] = &ZB;
    assert_int_equal(kh_run(&c), QP_ERR_UNSUPPORTED);
    /* K mismatch */
    int64_t dbk[2] = {K - 1, N};
    struct qp_kt BK = kh_t(QP_DTYPE_INT8, 2, dbk, b);
    c.in[0] = &A;
    c.in[1] = &BK;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
}

static void test_qlinear_matmul(void **state) {
    (void)state;
    uint8_t a[6] = {0, 255, 128, 10, 20, 30}, b[6] = {255, 0, 128, 7, 250, 3}, y[4];
    float as = 0.5f, bs[2] = {0.25f, 2.0f}, ys = 0.1f;
    uint8_t azp = 128, bzp = 128, yzp = 10;
    int64_t da[2] = {2, 3}, db[2] = {3, 2}, d1[1] = {1}, d2[1] = {2};
    struct qp_kt A = kh_t(QP_DTYPE_UINT8, 2, da, a), AS = kh_t(QP_DTYPE_FLOAT, 0, d1, &as),
                 AZ = kh_t(QP_DTYPE_UINT8, 0, d1, &azp), B = kh_t(QP_DTYPE_UINT8, 2, db, b),
                 BS = kh_t(QP_DTYPE_FLOAT, 1, d2, bs), BZ = kh_t(QP_DTYPE_UINT8, 0, d1, &bzp),
                 YS = kh_t(QP_DTYPE_FLOAT, 0, d1, &ys), YZ = kh_t(QP_DTYPE_UINT8, 0, d1, &yzp),
                 Y = {0};
    struct kh_call c =
        KH_CALL("QLinearMatMul", 10, NULL, 0, &Y, y, &A, &AS, &AZ, &B, &BS, &BZ, &YS, &YZ);
    assert_int_equal(kh_run(&c), QP_OK);
    assert_int_equal(Y.dtype, QP_DTYPE_UINT8);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) {
            int64_t acc = 0;
            for (int q = 0; q < 3; q++)
                acc += (int64_t)(a[i * 3 + q] - 128) * (b[q * 2 + j] - 128);
            float mult = as * bs[j] / ys;
            float v = rintf((float)acc * mult) + 10;
            uint8_t want = (uint8_t)(v < 0 ? 0 : (v > 255 ? 255 : v));
            assert_int_equal(y[i * 2 + j], want);
        }
    /* saturation happened somewhere in this data: both ends of the range are reached */
    int lo = 0, hi = 0;
    for (int i = 0; i < 4; i++) {
        lo |= y[i] == 0;
        hi |= y[i] == 255;
    }
    assert_true(lo && hi);
    /* scale of the wrong length; y zero point that is not 8-bit */
    int64_t d3[1] = {3};
    float bs3[3] = {1, 1, 1};
    struct qp_kt BS3 = kh_t(QP_DTYPE_FLOAT, 1, d3, bs3);
    c.in[4] = &BS3;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    c.in[4] = &BS;
    int32_t yz32 = 0;
    struct qp_kt YZ32 = kh_t(QP_DTYPE_INT32, 0, d1, &yz32);
    c.in[7] = &YZ32;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
}

static void test_conv_integer(void **state) {
    (void)state;
    enum { N = 1, C = 4, H = 5, W = 6, M = 4, G = 2, KH = 3, KW = 2 };
    uint8_t x[N * C * H * W], xzp = 100;
    int8_t w[M * (C / G) * KH * KW], wzp[M] = {0, 1, -2, 3};
    for (int i = 0; i < N * C * H * W; i++)
        x[i] = (uint8_t)(i * 29 + 7);
    for (int i = 0; i < M * (C / G) * KH * KW; i++)
        w[i] = (int8_t)(i * 41 - 60);
    static const int64_t pads[4] = {1, 0, 1, 1}, strides[2] = {2, 1};
    struct qp_attr a[3] = {kh_int("group", G), kh_ints("pads", pads, 4),
                           kh_ints("strides", strides, 2)};
    int64_t dx[4] = {N, C, H, W}, dw[4] = {M, C / G, KH, KW}, d1[1] = {1}, dm[1] = {M};
    struct qp_kt X = kh_t(QP_DTYPE_UINT8, 4, dx, x), Wt = kh_t(QP_DTYPE_INT8, 4, dw, w),
                 XZ = kh_t(QP_DTYPE_UINT8, 0, d1, &xzp), WZ = kh_t(QP_DTYPE_INT8, 1, dm, wzp),
                 Y = {0};
    int32_t y[N * M * 3 * 6];
    struct kh_call c = KH_CALL("ConvInteger", 10, a, 3, &Y, y, &X, &Wt, &XZ, &WZ);
    assert_int_equal(kh_run(&c), QP_OK);
    int oh = (H + 2 - KH) / 2 + 1, ow = (W + 1 - KW) + 1;
    assert_int_equal(Y.dims[2], oh);
    assert_int_equal(Y.dims[3], ow);
    for (int m = 0; m < M; m++)
        for (int i = 0; i < oh; i++)
            for (int j = 0; j < ow; j++) {
                int64_t acc = 0;
                int g = m / (M / G);
                for (int cc = 0; cc < C / G; cc++)
                    for (int kh = 0; kh < KH; kh++)
                        for (int kw = 0; kw < KW; kw++) {
                            int ih = i * 2 - 1 + kh, iw = j + kw;
                            if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                            acc += (int64_t)(x[((g * (C / G) + cc) * H + ih) * W + iw] - xzp) *
                                   (w[((m * (C / G) + cc) * KH + kh) * KW + kw] - wzp[m]);
                        }
                assert_int_equal(y[(m * oh + i) * ow + j], (int32_t)acc);
            }
    /* QLinearConv on the same data: requantized accumulators plus bias */
    float xs = 0.02f, ws[M] = {0.01f, 0.02f, 0.03f, 0.04f}, ys = 0.5f;
    int8_t yzp = -5;
    int32_t bias[M] = {100, -200, 0, 5000};
    int8_t yq[N * M * 3 * 6];
    struct qp_kt XS = kh_t(QP_DTYPE_FLOAT, 0, d1, &xs), WS = kh_t(QP_DTYPE_FLOAT, 1, dm, ws),
                 YS = kh_t(QP_DTYPE_FLOAT, 0, d1, &ys), YZ = kh_t(QP_DTYPE_INT8, 0, d1, &yzp),
                 BI = kh_t(QP_DTYPE_INT32, 1, dm, bias), YQ = {0};
    struct kh_call q =
        KH_CALL("QLinearConv", 10, a, 3, &YQ, yq, &X, &XS, &XZ, &Wt, &WS, &WZ, &YS, &YZ, &BI);
    assert_int_equal(kh_run(&q), QP_OK);
    assert_int_equal(YQ.dtype, QP_DTYPE_INT8);
    for (int m = 0; m < M; m++)
        for (int i = 0; i < oh * ow; i++) {
            float mult = xs * ws[m] / ys;
            float v = rintf((float)(y[m * oh * ow + i] + bias[m]) * mult) - 5;
            int8_t want = (int8_t)(v < -128 ? -128 : (v > 127 ? 127 : v));
            assert_int_equal(yq[m * oh * ow + i], want);
        }
    /* a per-channel x zero point is not allowed; bias must be int32 with M values */
    uint8_t xz2[2] = {1, 2};
    int64_t d2[1] = {2};
    struct qp_kt XZ2 = kh_t(QP_DTYPE_UINT8, 1, d2, xz2);
    c.in[2] = &XZ2;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    struct qp_kt BI2 = kh_t(QP_DTYPE_INT32, 1, d2, bias);
    q.in[8] = &BI2;
    assert_int_equal(kh_run(&q), QP_ERR_BAD_INPUT);
    /* groups that do not divide the channels */
    c.in[2] = &XZ;
    a[0] = kh_int("group", 3);
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dynquant),
        cmocka_unit_test(test_matmul_integer),
        cmocka_unit_test(test_qlinear_matmul),
        cmocka_unit_test(test_conv_integer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
