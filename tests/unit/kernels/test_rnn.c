/* rnn.c: RNN, GRU and LSTM against naive step loops, sequence_lens (zeros past the length,
 * reverse direction starting at the last valid step), layout 1 as the transpose of layout 0,
 * 1 vs 2 threads bit for bit, and refusals of bad attributes, shapes and lengths. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kharness.h"

enum { S = 4, B = 2, I = 3, H = 2 };

static float val(int i, int salt) {
    return (float)((i * 7919 + salt * 104729) % 997) / 997.0f - 0.5f;
}

static void fill(float *p, int n, int salt) {
    for (int i = 0; i < n; i++)
        p[i] = val(i, salt);
}

static double sigm(double x) {
    return 1 / (1 + exp(-x));
}

static void test_rnn_reverse_seqlens(void **state) {
    (void)state;
    float x[S * B * I], w[H * I], r[H * H], b[2 * H], y[S * B * H], yh[B * H];
    fill(x, S * B * I, 1);
    fill(w, H * I, 2);
    fill(r, H * H, 3);
    fill(b, 2 * H, 4);
    int32_t lens[B] = {S, 2};
    int64_t dx[3] = {S, B, I}, dw[3] = {1, H, I}, dr[3] = {1, H, H}, db[2] = {1, 2 * H},
            dl[1] = {B};
    struct qp_kt X = kh_t(QP_DTYPE_FLOAT, 3, dx, x), W = kh_t(QP_DTYPE_FLOAT, 3, dw, w),
                 R = kh_t(QP_DTYPE_FLOAT, 3, dr, r), Bb = kh_t(QP_DTYPE_FLOAT, 2, db, b),
                 L = kh_t(QP_DTYPE_INT32, 1, dl, lens), Y = {0}, YH = {0};
    struct qp_attr a[2] = {kh_int("hidden_size", H), kh_str("direction", "reverse")};
    struct kh_call c =
        kh_call_io("RNN", 14, a, 2, KH_INS(&X, &W, &R, &Bb, &L), KH_OUTS(&Y, &YH), KH_DATA(y, yh));
    assert_int_equal(kh_run(&c), QP_OK);
    assert_int_equal(Y.rank, 4);
    assert_int_equal(Y.dims[1], 1);
    for (int bt = 0; bt < B; bt++) {
        double h[H] = {0, 0};
        for (int t = lens[bt] - 1; t >= 0; t--) {
            double nh[H];
            for (int k = 0; k < H; k++) {
                double acc = b[k] + b[H + k];
                for (int q = 0; q < I; q++)
                    acc += x[(t * B + bt) * I + q] * w[k * I + q];
                for (int q = 0; q < H; q++)
                    acc += h[q] * r[k * H + q];
                nh[k] = tanh(acc);
            }
            for (int k = 0; k < H; k++) {
                h[k] = nh[k];
                assert_true(fabs(y[(t * B + bt) * H + k] - h[k]) < 1e-6);
            }
        }
        for (int k = 0; k < H; k++)
            assert_true(fabs(yh[bt * H + k] - h[k]) < 1e-6);
        for (int t = lens[bt]; t < S; t++)
            for (int k = 0; k < H; k++)
                assert_true(y[(t * B + bt) * H + k] == 0.0f);
    }
    lens[1] = S + 1;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    lens[1] = 2;
    a[1] = kh_str("direction", "sideways");
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
}

static void test_gru_lstm_step(void **state) {
    (void)state;
    /* one step, batch 1, from a given initial state: the gate formulas spelled out */
    float x[I], wg[3 * H * I], rg[3 * H * H], bg[6 * H], h0[H] = {0.3f, -0.2f}, y[H];
    fill(x, I, 5);
    fill(wg, 3 * H * I, 6);
    fill(rg, 3 * H * H, 7);
    fill(bg, 6 * H, 8);
    int64_t dx[3] = {1, 1, I}, dw[3] = {1, 3 * H, I}, dr[3] = {1, 3 * H, H}, db[2] = {1, 6 * H},
            dh[3] = {1, 1, H};
    struct qp_kt X = kh_t(QP_DTYPE_FLOAT, 3, dx, x), W = kh_t(QP_DTYPE_FLOAT, 3, dw, wg),
                 R = kh_t(QP_DTYPE_FLOAT, 3, dr, rg), Bb = kh_t(QP_DTYPE_FLOAT, 2, db, bg),
                 H0 = kh_t(QP_DTYPE_FLOAT, 3, dh, h0), Y = {0};
    for (int lbr = 0; lbr < 2; lbr++) {
        struct qp_attr a = kh_int("linear_before_reset", lbr);
        struct kh_call c = KH_CALL("GRU", 14, &a, 1, &Y, y, &X, &W, &R, &Bb, NULL, &H0);
        assert_int_equal(kh_run(&c), QP_OK);
        double xw[3 * H], hr[3 * H], z[H], rr[H];
        for (int j = 0; j < 3 * H; j++) {
            xw[j] = bg[j];
            hr[j] = bg[3 * H + j];
            for (int q = 0; q < I; q++)
                xw[j] += x[q] * wg[j * I + q];
            for (int q = 0; q < H; q++)
                hr[j] += h0[q] * rg[j * H + q];
        }
        for (int k = 0; k < H; k++) {
            z[k] = sigm(xw[k] + hr[k]);
            rr[k] = sigm(xw[H + k] + hr[H + k]);
        }
        for (int k = 0; k < H; k++) {
            double hh;
            if (lbr) {
                hh = tanh(xw[2 * H + k] + rr[k] * hr[2 * H + k]);
            } else {
                double acc = bg[3 * H + 2 * H + k];
                for (int q = 0; q < H; q++)
                    acc += rr[q] * h0[q] * rg[(2 * H + k) * H + q];
                hh = tanh(xw[2 * H + k] + acc);
            }
            double want = (1 - z[k]) * hh + z[k] * h0[k];
            assert_true(fabs(y[k] - want) < 1e-6);
        }
    }
    /* LSTM with peepholes and input_forget */
    float wl[4 * H * I], rl[4 * H * H], bl[8 * H], c0[H] = {0.5f, -1.0f}, p[3 * H], yl[H], yc[H];
    fill(wl, 4 * H * I, 9);
    fill(rl, 4 * H * H, 10);
    fill(bl, 8 * H, 11);
    fill(p, 3 * H, 12);
    int64_t dwl[3] = {1, 4 * H, I}, drl[3] = {1, 4 * H, H}, dbl[2] = {1, 8 * H}, dp[2] = {1, 3 * H};
    struct qp_kt WL = kh_t(QP_DTYPE_FLOAT, 3, dwl, wl), RL = kh_t(QP_DTYPE_FLOAT, 3, drl, rl),
                 BL = kh_t(QP_DTYPE_FLOAT, 2, dbl, bl), C0 = kh_t(QP_DTYPE_FLOAT, 3, dh, c0),
                 P = kh_t(QP_DTYPE_FLOAT, 2, dp, p), YH = {0}, YC = {0};
    struct qp_attr a = kh_int("input_forget", 1);
    struct kh_call c = kh_call_io("LSTM", 14, &a, 1, KH_INS(&X, &WL, &RL, &BL, NULL, &H0, &C0, &P),
                                  KH_OUTS(&Y, &YH, &YC), KH_DATA(yl, y, yc));
    assert_int_equal(kh_run(&c), QP_OK);
    double g[4 * H];
    for (int j = 0; j < 4 * H; j++) {
        g[j] = bl[j] + bl[4 * H + j];
        for (int q = 0; q < I; q++)
            g[j] += x[q] * wl[j * I + q];
        for (int q = 0; q < H; q++)
            g[j] += h0[q] * rl[j * H + q];
    }
    for (int k = 0; k < H; k++) {
        double i_ = sigm(g[k] + p[k] * c0[k]);
        double f_ = 1 - i_;
        double cc = f_ * c0[k] + i_ * tanh(g[3 * H + k]);
        double o_ = sigm(g[H + k] + p[H + k] * cc);
        assert_true(fabs(yc[k] - cc) < 1e-6);
        assert_true(fabs(yl[k] - o_ * tanh(cc)) < 1e-6);
        assert_true(y[k] == yl[k]); /* Y_h is the last Y */
    }
    /* activations: wrong count, unknown name */
    static const struct qp_bytes names[2] = {{(const uint8_t *)"Sigmoid", 7},
                                             {(const uint8_t *)"Cosine", 6}};
    struct qp_attr acts;
    memset(&acts, 0, sizeof acts);
    acts.name = "activations";
    acts.type = QP_ATTR_STRINGS;
    acts.strings = names;
    acts.n = 2;
    c.attrs = &acts;
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT); /* LSTM needs 3 */
    struct kh_call cg = KH_CALL("GRU", 14, &acts, 1, &Y, y, &X, &W, &R, &Bb, NULL, &H0);
    assert_int_equal(kh_run(&cg), QP_ERR_UNSUPPORTED); /* Cosine */
    /* R of the wrong shape */
    cg.n_attrs = 0;
    cg.in[2] = &W;
    assert_int_equal(kh_run(&cg), QP_ERR_BAD_INPUT);
}

static void test_layout_and_threads(void **state) {
    (void)state;
    enum { LS = 16, LB = 8, LI = 32, LH = 48, D = 2 };
    float *x = kh_alloc(sizeof(float) * LS * LB * LI), *xt = kh_alloc(sizeof(float) * LS * LB * LI);
    float *w = kh_alloc(sizeof(float) * D * 4 * LH * LI),
          *r = kh_alloc(sizeof(float) * D * 4 * LH * LH);
    float *y1 = kh_alloc(sizeof(float) * LS * D * LB * LH),
          *y2 = kh_alloc(sizeof(float) * LS * D * LB * LH);
    float *y3 = kh_alloc(sizeof(float) * LS * D * LB * LH);
    fill(x, LS * LB * LI, 13);
    fill(w, D * 4 * LH * LI, 14);
    fill(r, D * 4 * LH * LH, 15);
    for (int t = 0; t < LS; t++)
        for (int b = 0; b < LB; b++)
            memcpy(xt + (b * LS + t) * LI, x + (t * LB + b) * LI, sizeof(float) * LI);
    int64_t dx[3] = {LS, LB, LI}, dxt[3] = {LB, LS, LI}, dw[3] = {D, 4 * LH, LI},
            dr[3] = {D, 4 * LH, LH};
    struct qp_kt X = kh_t(QP_DTYPE_FLOAT, 3, dx, x), XT = kh_t(QP_DTYPE_FLOAT, 3, dxt, xt),
                 W = kh_t(QP_DTYPE_FLOAT, 3, dw, w), R = kh_t(QP_DTYPE_FLOAT, 3, dr, r), Y = {0};
    struct qp_attr a[3] = {kh_str("direction", "bidirectional"), kh_float("clip", 0.8f),
                           kh_int("layout", 1)};
    struct kh_call c = KH_CALL("LSTM", 14, a, 2, &Y, y1, &X, &W, &R);
    kh_run_threads(&c, y1, y2, sizeof(float) * LS * D * LB * LH);
    /* layout 1: X [batch, seq, in], Y [batch, seq, dirs, hidden] */
    c.n_attrs = 3;
    c.in[0] = &XT;
    c.out_data[0] = y3;
    assert_int_equal(kh_run(&c), QP_OK);
    for (int t = 0; t < LS; t++)
        for (int d = 0; d < D; d++)
            for (int b = 0; b < LB; b++)
                assert_memory_equal(y3 + ((b * LS + t) * D + d) * LH,
                                    y1 + ((t * D + d) * LB + b) * LH, sizeof(float) * LH);
    free(x);
    free(xt);
    free(w);
    free(r);
    free(y1);
    free(y2);
    free(y3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rnn_reverse_seqlens),
        cmocka_unit_test(test_gru_lstm_step),
        cmocka_unit_test(test_layout_and_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
