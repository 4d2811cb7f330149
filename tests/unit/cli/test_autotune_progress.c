/* What qplace autotune prints per race (src/cli/autotune_progress.c and progress.c, compiled in
 * here: the CLI is not part of qplace_lib): the bar, the line and the -v line. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "../../../src/cli/autotune_progress.c"
#include "../../../src/cli/progress.c"

static struct qp_autotune_step step(size_t done, size_t planned, double eta) {
    static const uint64_t bits[1] = {0x25}; /* points 0, 2, 5 */
    struct qp_autotune_step s = {
        .pattern_k = 3,
        .n_patterns = 6,
        .scheme_j = 2,
        .n_schemes = 8,
        .elapsed_s = 4.1,
        .eta_s = eta,
        .cand_median_ms = 1.234,
        .best_median_ms = 1.3,
        .verdict = QP_LATENCY_FASTER,
        .adopted = 1,
        .signature = "Conv(x*,c*,c);Relu(0.0*)",
        .points = bits,
        .n_points = 6,
        .p_value = 0.0012,
        .races_done = done,
        .races_planned = planned,
        .drift = NAN,
    };
    return s;
}

static void test_bar(void **state) {
    (void)state;
    char buf[128];
    struct qp_autotune_step s = step(12, 38, 80);
    cli_autotune_bar_format(&s, buf, sizeof buf);
    assert_string_equal(buf, "[=====>              ] 12/38 races  pattern 3/6  ETA 1m20s");
    s = step(0, 38, -1);
    cli_autotune_bar_format(&s, buf, sizeof buf);
    assert_string_equal(buf, "[                    ] 0/38 races  pattern 3/6  ETA ?");
    s = step(38, 38, 0);
    cli_autotune_bar_format(&s, buf, sizeof buf);
    assert_string_equal(buf, "[====================] 38/38 races  pattern 3/6  ETA 0s");
    s = step(40, 38, 7300); /* more done than planned: the bar stays full */
    cli_autotune_bar_format(&s, buf, sizeof buf);
    assert_string_equal(buf, "[====================] 40/38 races  pattern 3/6  ETA 2h01m");
    s = step(1, 0, 5); /* nothing planned */
    cli_autotune_bar_format(&s, buf, sizeof buf);
    assert_string_equal(buf, "[                    ] 1/0 races  pattern 3/6  ETA 5s");
    char tiny[8];
    cli_autotune_bar_format(&s, tiny, sizeof tiny);
    assert_int_equal(strlen(tiny), 7);
}

static void test_lines(void **state) {
    (void)state;
    char buf[512];
    struct qp_autotune_step s = step(12, 38, 80);
    cli_autotune_line_format(&s, buf, sizeof buf);
    assert_string_equal(buf, "autotune: pattern 3/6, scheme 2/8: 1.2340 ms vs best 1.3000 ms, "
                             "faster, adopted [4.1 s, ETA 80 s]");
    cli_autotune_verbose_format(&s, buf, sizeof buf);
    assert_string_equal(buf, "autotune: pattern 3/6 'Conv(x*,c*,c);Relu(0.0*)' scheme 2/8 points "
                             "{0,2,5} of 6: candidate 1.2340 ms, best 1.3000 ms (medians), p "
                             "0.0012: faster, adopted");
    s.timed = 1; /* region timing: the medians are the sub-model's */
    cli_autotune_line_format(&s, buf, sizeof buf);
    assert_non_null(strstr(buf, "scheme 2/8: sub-model 1.2340 ms vs best 1.3000 ms"));
    cli_autotune_verbose_format(&s, buf, sizeof buf);
    assert_non_null(strstr(buf, "of 6: sub-model candidate 1.2340 ms"));
    s.timed = 2; /* a borderline scheme raced again as whole models */
    cli_autotune_line_format(&s, buf, sizeof buf);
    assert_non_null(strstr(buf, "scheme 2/8: borderline, as whole models: 1.2340 ms vs best"));
    s.timed = 3; /* a representatives' race raced again on every instance */
    cli_autotune_line_format(&s, buf, sizeof buf);
    assert_non_null(strstr(buf, "scheme 2/8: confirmed on every instance: 1.2340 ms vs best"));
    s.timed = 0;
    s.adopted = 0;
    s.from_cache = 1;
    s.verdict = QP_LATENCY_SLOWER;
    cli_autotune_verbose_format(&s, buf, sizeof buf);
    assert_non_null(strstr(buf, "scheme 2/8 (pattern cache) points {0,2,5}"));
    assert_non_null(strstr(buf, ": slower, not adopted"));
    s.drift = 1.5e-7; /* measured: said in both forms */
    cli_autotune_line_format(&s, buf, sizeof buf);
    assert_non_null(strstr(buf, "slower, drift 1.5e-07 [4.1 s"));
    cli_autotune_verbose_format(&s, buf, sizeof buf);
    assert_non_null(strstr(buf, "not adopted, drift 1.5e-07"));
    s.rejected_drift = 1; /* over the bound: no medians */
    cli_autotune_line_format(&s, buf, sizeof buf);
    assert_string_equal(buf, "autotune: pattern 3/6, scheme 2/8: drift 1.5e-07 over the bound, "
                             "rejected unraced [4.1 s, ETA 80 s]");
    cli_autotune_verbose_format(&s, buf, sizeof buf);
    assert_non_null(strstr(buf, "points {0,2,5} of 6: drift 1.5e-07 over the bound, rejected"));
}

/* On a stream that is no terminal: one line per race; with a bar, the line is redrawn with \r
 * and ended by cli_autotune_progress_end. */
static void test_stream(void **state) {
    (void)state;
    char buf[2048] = {0};
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    struct cli_autotune_progress p = {.f = f};
    struct qp_autotune_step s = step(1, 2, 3);
    cli_autotune_progress_step(&s, &p);
    s = step(2, 2, 0);
    cli_autotune_progress_step(&s, &p);
    cli_autotune_progress_end(&p);
    fclose(f);
    assert_int_equal(strchr(buf, '\r') == NULL, 1);
    assert_non_null(strstr(buf, "autotune: pattern 3/6, scheme 2/8"));
    memset(buf, 0, sizeof buf);
    f = fmemopen(buf, sizeof buf - 1, "w");
    p = (struct cli_autotune_progress){.f = f, .bar = 1};
    s = step(1, 2, 3);
    cli_autotune_progress_step(&s, &p);
    s = step(2, 2, 0);
    cli_autotune_progress_step(&s, &p);
    cli_autotune_progress_end(&p);
    fclose(f);
    assert_string_equal(buf, "[=========>          ] 1/2 races  pattern 3/6  ETA 3s"
                             "\r\033[K[====================] 2/2 races  pattern 3/6  ETA 0s\n");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bar),
        cmocka_unit_test(test_lines),
        cmocka_unit_test(test_stream),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
