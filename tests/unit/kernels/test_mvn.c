/* mvn.c: MeanVarianceNormalization over the default axes and over custom ones, against the
 * formula in double; refusals of bad axes. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kharness.h"

enum { N = 2, C = 3, H = 4, W = 2 };

static void check(const float *x, const float *y, const int *red) {
    int64_t dims[4] = {N, C, H, W};
    /* group key: the coordinates of the kept dims */
    for (int i = 0; i < N * C * H * W; i++) {
        int ci[4] = {i / (C * H * W), i / (H * W) % C, i / W % H, i % W};
        double sum = 0, sq = 0;
        int cnt = 0;
        for (int j = 0; j < N * C * H * W; j++) {
            int cj[4] = {j / (C * H * W), j / (H * W) % C, j / W % H, j % W}, same = 1;
            for (int d = 0; d < 4; d++)
                if (!red[d] && ci[d] != cj[d]) same = 0;
            if (!same) continue;
            sum += x[j];
            cnt++;
        }
        double mean = sum / cnt;
        for (int j = 0; j < N * C * H * W; j++) {
            int cj[4] = {j / (C * H * W), j / (H * W) % C, j / W % H, j % W}, same = 1;
            for (int d = 0; d < 4; d++)
                if (!red[d] && ci[d] != cj[d]) same = 0;
            if (same) sq += (x[j] - mean) * (x[j] - mean);
        }
        double want = (x[i] - mean) / (sqrt(sq / cnt) + 1e-9);
        assert_true(fabs(y[i] - want) <= 1e-5 * (1 + fabs(want)));
    }
    (void)dims;
}

static void test_mvn(void **state) {
    (void)state;
    float x[N * C * H * W], y[N * C * H * W];
    for (int i = 0; i < N * C * H * W; i++)
        x[i] = (float)((i * 13) % 17) * 0.5f - 3.0f + (float)(i / 24);
    int64_t dx[4] = {N, C, H, W};
    struct qp_kt X = kh_t(QP_DTYPE_FLOAT, 4, dx, x), Y = {0};
    struct kh_call c = KH_CALL("MeanVarianceNormalization", 13, NULL, 0, &Y, y, &X);
    assert_int_equal(kh_run(&c), QP_OK);
    const int def[4] = {1, 0, 1, 1};
    check(x, y, def);
    static const int64_t axes[2] = {1, -1};
    struct qp_attr a = kh_ints("axes", axes, 2);
    c.attrs = &a;
    c.n_attrs = 1;
    assert_int_equal(kh_run(&c), QP_OK);
    const int custom[4] = {0, 1, 0, 1};
    check(x, y, custom);
    static const int64_t dup[2] = {1, 1}, far[1] = {4};
    a = kh_ints("axes", dup, 2);
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
    a = kh_ints("axes", far, 1);
    assert_int_equal(kh_run(&c), QP_ERR_BAD_INPUT);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mvn),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
