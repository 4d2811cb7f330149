/* The CLI's choice of OpenMP waiting policy (src/cli/omp_wait.c, compiled in here). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "../../../src/cli/omp_wait.c"

static void test_spin_only_when_idle(void **state) {
    (void)state;
    assert_true(cli_omp_spin_ok(0.0, 0, 2));
    assert_true(cli_omp_spin_ok(1.9, 0, 2));  /* e.g. our own previous run */
    assert_true(cli_omp_spin_ok(2.3, 0, 2));  /* ours again, with a little else */
    assert_false(cli_omp_spin_ok(4.0, 0, 2)); /* bursts the snapshots missed */
    assert_false(cli_omp_spin_ok(0.1, 1, 2)); /* another task runnable right now */
    assert_false(cli_omp_spin_ok(8.0, 3, 2)); /* a loaded machine */
    assert_true(cli_omp_spin_ok(15.9, 0, 8));
    assert_false(cli_omp_spin_ok(16.0, 0, 8));
    assert_false(cli_omp_spin_ok(0.0, 0, 0)); /* unknown CPU count: sleep */
    assert_false(cli_omp_spin_ok(-1.0, 0, 2));
    assert_false(cli_omp_spin_ok(0.0, -1, 2));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spin_only_when_idle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
