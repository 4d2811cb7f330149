/* Unit tests of the liveness memory planner: tensors alive at the same step never overlap,
 * dead tensors' bytes are reused, offsets are aligned; a request that takes over another's
 * bytes gets them only when that one dies where it is made. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "runtime/memplan.h"

/* 1 when request a took over b's bytes, directly or through a chain of take-overs. */
static int took(const struct qp_mem_req *r, size_t n, size_t a, size_t b) {
    for (size_t k = a; r[k].take && r[k].take <= n && r[k].take - 1 != k;) {
        size_t j = r[k].take - 1;
        if (r[j].offset != r[k].offset || r[j].last != r[k].first || r[j].first >= r[k].first)
            return 0;
        if (j == b) return 1;
        k = j;
    }
    return 0;
}

static void check_no_overlap(const struct qp_mem_req *r, size_t n, size_t total) {
    for (size_t i = 0; i < n; i++) {
        assert_true(r[i].offset % 64 == 0);
        assert_true(r[i].offset + r[i].size <= total);
        for (size_t j = i + 1; j < n; j++) {
            int live_together = !(r[i].last < r[j].first || r[j].last < r[i].first);
            if (!live_together || !r[i].size || !r[j].size) continue;
            if (took(r, n, i, j) || took(r, n, j, i)) {
                /* handed over at the one step where both live: b's last, a's first */
                assert_true(r[i].last == r[j].first || r[j].last == r[i].first);
                continue;
            }
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
        r[k] = (struct qp_mem_req){1000, k, k + 1, 0, 0};
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
        r[i] = (struct qp_mem_req){(size_t)(rand() % 5000), a, a + len, 0, 0};
        sum += (r[i].size + 63) / 64 * 64;
    }
    size_t total;
    assert_int_equal(qp_memplan(r, N, 64, &total, NULL), QP_OK);
    check_no_overlap(r, N, total);
    assert_true(total < sum);
}

static void test_bad_interval(void **state) {
    (void)state;
    struct qp_mem_req r = {10, 3, 2, 0, 0};
    size_t total;
    assert_int_equal(qp_memplan(&r, 1, 64, &total, NULL), QP_ERR_INTERNAL);
}

/* A residual r0 (steps 0..2) read last by the step that makes r1 there: r1 takes r0's bytes;
 * r2, made at the same step, does not get them; r3 (after r1 dies) reuses them. Then the
 * refusals: the taken one lives on, is smaller, started at the same step, or was taken. */
static void test_take_over(void **state) {
    (void)state;
    struct qp_mem_req r[4] = {
        {1000, 0, 2, 0, 0}, {1000, 2, 4, 0, 1}, {1000, 2, 3, 0, 0}, {1000, 5, 6, 0, 0}};
    size_t total;
    assert_int_equal(qp_memplan(r, 4, 64, &total, NULL), QP_OK);
    check_no_overlap(r, 4, total);
    assert_int_equal(r[1].offset, r[0].offset);
    assert_int_equal(total, 2048);
    /* a chain of take-overs: one block for all */
    struct qp_mem_req c[4] = {
        {1000, 0, 1, 0, 0}, {900, 1, 2, 0, 1}, {1000, 2, 3, 0, 2}, {64, 3, 3, 0, 3}};
    assert_int_equal(qp_memplan(c, 4, 64, &total, NULL), QP_OK);
    check_no_overlap(c, 4, total);
    assert_true(c[1].offset == c[0].offset && c[2].offset == c[0].offset &&
                c[3].offset == c[0].offset);
    assert_int_equal(total, 1024);
    static const struct qp_mem_req refused[][2] = {
        {{1000, 0, 3, 0, 0}, {1000, 2, 4, 0, 1}}, /* lives on after step 2 */
        {{500, 0, 2, 0, 0}, {1000, 2, 4, 0, 1}},  /* too small */
        {{1000, 2, 2, 0, 0}, {1000, 2, 4, 0, 1}}, /* made at the same step */
        {{1000, 0, 2, 0, 0}, {1000, 2, 4, 0, 2}}, /* itself */
        {{1000, 0, 2, 0, 0}, {1000, 2, 4, 0, 9}}, /* no such request */
    };
    for (size_t k = 0; k < sizeof refused / sizeof refused[0]; k++) {
        struct qp_mem_req q[2] = {refused[k][0], refused[k][1]};
        assert_int_equal(qp_memplan(q, 2, 64, &total, NULL), QP_OK);
        check_no_overlap(q, 2, total);
        assert_int_not_equal(q[0].offset, q[1].offset);
    }
    /* two ask for the same bytes: the first placed gets them */
    struct qp_mem_req d[3] = {{1000, 0, 2, 0, 0}, {1000, 2, 3, 0, 1}, {1000, 2, 3, 0, 1}};
    assert_int_equal(qp_memplan(d, 3, 64, &total, NULL), QP_OK);
    check_no_overlap(d, 3, total);
    assert_true((d[1].offset == d[0].offset) != (d[2].offset == d[0].offset));
}

/* Random lifetimes with random take-over requests: whatever is granted, nothing alive at the
 * same step overlaps except a taker and what it took, at the step of the hand-over. */
static void test_random_take_over(void **state) {
    (void)state;
    srand(11);
    enum { N = 300 };
    struct qp_mem_req r[N];
    for (int i = 0; i < N; i++) {
        int a = rand() % 100, len = rand() % 10;
        r[i] = (struct qp_mem_req){(size_t)(rand() % 5000), a, a + len, 0, 0};
    }
    int asked = 0;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++)
            if (r[j].last == r[i].first && r[j].first < r[i].first && rand() % 2) {
                r[i].take = (size_t)j + 1;
                asked++;
                break;
            }
    size_t total;
    assert_int_equal(qp_memplan(r, N, 64, &total, NULL), QP_OK);
    check_no_overlap(r, N, total);
    int granted = 0;
    for (int i = 0; i < N; i++)
        granted += r[i].take && r[i].size && r[i].offset == r[r[i].take - 1].offset;
    assert_true(asked > 20 && granted > 5);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chain_reuses),     cmocka_unit_test(test_random_intervals),
        cmocka_unit_test(test_bad_interval),     cmocka_unit_test(test_take_over),
        cmocka_unit_test(test_random_take_over),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
