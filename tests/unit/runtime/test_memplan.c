/* Unit tests of the liveness memory planner: tensors alive at the same step never overlap,
 * dead tensors' bytes are reused, offsets are aligned. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "runtime/memplan.h"

static void check_no_overlap(const struct qp_mem_req *r, size_t n, size_t total) {
    for (size_t i = 0; i < n; i++) {
        assert_true(r[i].offset % 64 == 0);
        assert_true(r[i].offset + r[i].size <= total);
        for (size_t j = i + 1; j < n; j++) {
            int live_together = !(r[i].last < r[j].first || r[j].last < r[i].first);
            if (!live_together || !r[i].size || !r[j].size) continue;
            int disjoint =
                r[i].offset + r[i].size <= r[j].offset || r[j].offset + r[j].size <= r[i].offset;
            assert_true(disjoint);
        }
    }
}

static void test_chain_reuses(void **state) {
    (void)state;
    /* a chain: t_k made at step k, read at k+1 */
    struct qp_mem_req r[6];
    for (int k = 0; k < 6; k++)
        r[k] = (struct qp_mem_req){1000, k, k + 1, 0};
    size_t total;
    assert_int_equal(qp_memplan(r, 6, 64, &total, NULL), QP_OK);
    check_no_overlap(r, 6, total);
    /* two buffers of 1024 suffice for a chain */
    assert_int_equal(total, 2048);
}

static void test_random_intervals(void **state) {
    (void)state;
    srand(7);
    enum { N = 300 };
    struct qp_mem_req r[N];
    size_t sum = 0;
    for (int i = 0; i < N; i++) {
        int a = rand() % 100, len = rand() % 10;
        r[i] = (struct qp_mem_req){(size_t)(rand() % 5000), a, a + len, 0};
        sum += (r[i].size + 63) / 64 * 64;
    }
    size_t total;
    assert_int_equal(qp_memplan(r, N, 64, &total, NULL), QP_OK);
    check_no_overlap(r, N, total);
    assert_true(total < sum);
}

static void test_bad_interval(void **state) {
    (void)state;
    struct qp_mem_req r = {10, 3, 2, 0};
    size_t total;
    assert_int_equal(qp_memplan(&r, 1, 64, &total, NULL), QP_ERR_INTERNAL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chain_reuses),
        cmocka_unit_test(test_random_intervals),
        cmocka_unit_test(test_bad_interval),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
