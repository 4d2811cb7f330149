/* Metrics, the exclusion picker (coverage, threshold, max_nodes, min_score_floor, near-tie,
 * blocks with sum/max/mean), the summary, blocks files and exact-name regexes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sensitivity/sensitivity.h"

#define CLOSE(a, b) assert_true(fabs((double)(a) - (double)(b)) <= 1e-12 + 1e-9 * fabs((double)(b)))

static void test_metrics_identical(void **state) {
    (void)state;
    const float a[5] = {1, -2, 3, 0.5f, 7};
    for (int m = 0; m < QP_SENS_METRIC_COUNT; m++)
        CLOSE(qp_sens_metric_sample(m, a, a, 5), 0.0);
}

static void test_metrics_values(void **state) {
    (void)state;
    const float x[2] = {1, 0}, y[2] = {0, 1}, ny[2] = {-1, 0};
    CLOSE(qp_sens_metric_sample(QP_SENS_COS, x, y, 2), 1.0);  /* orthogonal */
    CLOSE(qp_sens_metric_sample(QP_SENS_COS, x, ny, 2), 2.0); /* opposite */
    CLOSE(qp_sens_metric_sample(QP_SENS_MSE, x, y, 2), 1.0);
    const float r[2] = {0, 0}, q[2] = {0, (float)log(3.0)};
    /* p = [.5, .5], q = [.25, .75]: KL = .5 ln 2 + .5 ln(2/3) = .5 ln(4/3). */
    assert_true(fabs(qp_sens_metric_sample(QP_SENS_KL_DIV, r, q, 2) - 0.5 * log(4.0 / 3.0)) < 1e-7);
    /* KL is magnitude-robust: a constant shift changes nothing. */
    const float r2[2] = {5, 5}, q2[2] = {5, 5 + (float)log(3.0)};
    assert_true(fabs(qp_sens_metric_sample(QP_SENS_KL_DIV, r2, q2, 2) - 0.5 * log(4.0 / 3.0)) <
                1e-6);
}

static void test_metrics_zero_vectors(void **state) {
    (void)state;
    const float z[3] = {0, 0, 0}, v[3] = {1, 2, 3};
    for (int m = 0; m < QP_SENS_METRIC_COUNT; m++)
        CLOSE(qp_sens_metric_sample(m, z, z, 3), 0.0); /* unchanged zero output: not sensitive */
    CLOSE(qp_sens_metric_sample(QP_SENS_COS, z, v, 3), 1.0); /* one zero: as orthogonal */
    CLOSE(qp_sens_metric_sample(QP_SENS_COS, v, z, 3), 1.0);
    CLOSE(qp_sens_metric_sample(QP_SENS_MSE, z, v, 3), 14.0 / 3.0);
    assert_true(qp_sens_metric_sample(QP_SENS_KL_DIV, z, v, 3) > 0);
    CLOSE(qp_sens_metric_sample(QP_SENS_MSE, z, v, 0), 0.0);
}

static void test_metrics_scalar(void **state) {
    (void)state;
    /* A 0-D output is one value per sample. */
    const float a = 2, b = 3, c = -3;
    CLOSE(qp_sens_metric_sample(QP_SENS_KL_DIV, &a, &b, 1), 0.0); /* softmax of one value is 1 */
    CLOSE(qp_sens_metric_sample(QP_SENS_MSE, &a, &b, 1), 1.0);
    CLOSE(qp_sens_metric_sample(QP_SENS_COS, &a, &b, 1), 0.0);
    CLOSE(qp_sens_metric_sample(QP_SENS_COS, &a, &c, 1), 2.0);
    const float nan = NAN;
    assert_false(isfinite(qp_sens_metric_sample(QP_SENS_MSE, &a, &nan, 1)));
}

static const char *const N4[4] = {"a", "b", "c", "d"};
static const double S4[4] = {4, 3, 2, 1};

/* Picks and returns the excluded names joined by ','. */
static char *pick(const char *const *names, const double *scores, size_t n,
                  const struct qp_pick_options *o, struct qp_pick_result **res) {
    struct qp_error err = {0};
    struct qp_pick_result *r = NULL;
    assert_int_equal(qp_sens_pick(names, scores, n, o, &r, &err), QP_OK);
    static char buf[256];
    buf[0] = '\0';
    for (size_t i = 0; i < r->n_excluded; i++) {
        if (i) strcat(buf, ",");
        strcat(buf, names[r->excluded[i]]);
    }
    if (res)
        *res = r;
    else
        qp_pick_result_free(r);
    return buf;
}

static void test_coverage(void **state) {
    (void)state;
    struct qp_pick_options o;
    qp_pick_options_default(&o);
    o.coverage = 0.5;
    assert_string_equal(pick(N4, S4, 4, &o, NULL), "a");
    o.coverage = 0.8;
    assert_string_equal(pick(N4, S4, 4, &o, NULL), "a,b");
    o.coverage = 0.7; /* exactly 7 of 10: not crossing, so b is in */
    assert_string_equal(pick(N4, S4, 4, &o, NULL), "a,b");
    o.coverage = 0;
    assert_string_equal(pick(N4, S4, 4, &o, NULL), "");
    o.coverage = 1;
    assert_string_equal(pick(N4, S4, 4, &o, NULL), "a,b,c,d");
    const double big[2] = {10, 1};
    o.coverage = 0.5; /* the top item alone exceeds the target */
    assert_string_equal(pick(N4, big, 2, &o, NULL), "");
    const double zero[3] = {0, 0, 0};
    assert_string_equal(pick(N4, zero, 3, &o, NULL), "");
    /* Unsorted input is ranked; ties keep input order. */
    const double mixed[4] = {1, 3, 3, 2};
    o.coverage = 0.7;
    assert_string_equal(pick(N4, mixed, 4, &o, NULL), "b,c");
    struct qp_error err = {0};
    struct qp_pick_result *r = NULL;
    o.coverage = 1.5;
    assert_int_equal(qp_sens_pick(N4, S4, 4, &o, &r, &err), QP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "coverage"));
    assert_null(r);
}

static void test_threshold(void **state) {
    (void)state;
    struct qp_pick_options o;
    qp_pick_options_default(&o);
    o.threshold_mode = 1;
    o.threshold = 2; /* strictly above: c (2) is not taken */
    assert_string_equal(pick(N4, S4, 4, &o, NULL), "a,b");
    o.threshold = 4;
    assert_string_equal(pick(N4, S4, 4, &o, NULL), "");
    o.threshold = 0.5;
    o.coverage = 0.1; /* ignored in threshold mode */
    assert_string_equal(pick(N4, S4, 4, &o, NULL), "a,b,c,d");
}

static void test_max_nodes_and_floor(void **state) {
    (void)state;
    struct qp_pick_options o;
    qp_pick_options_default(&o);
    o.coverage = 1;
    o.max_nodes = 2;
    assert_string_equal(pick(N4, S4, 4, &o, NULL), "a,b");
    o.max_nodes = 0;
    o.min_score_floor = 2.5;
    assert_string_equal(pick(N4, S4, 4, &o, NULL), "a,b");
    o.threshold_mode = 1;
    o.threshold = 0;
    o.min_score_floor = 2;
    assert_string_equal(pick(N4, S4, 4, &o, NULL), "a,b,c");
    o.max_nodes = 1;
    assert_string_equal(pick(N4, S4, 4, &o, NULL), "a");
}

static void test_summary(void **state) {
    (void)state;
    struct qp_pick_options o;
    qp_pick_options_default(&o);
    o.coverage = 0.8;
    struct qp_pick_result *r = NULL;
    assert_string_equal(pick(N4, S4, 4, &o, &r), "a,b");
    CLOSE(r->coverage_pct, 70.0);
    CLOSE(r->excluded_mass, 7.0);
    CLOSE(r->total_mass, 10.0);
    assert_int_equal(r->num_previously_quantized, 4);
    assert_int_equal(r->num_remaining_quantized, 2);
    assert_int_equal(r->n_excluded, 2);
    assert_int_equal(r->n_chosen_groups, 2);
    qp_pick_result_free(r);
}

static void test_near_tie(void **state) {
    (void)state;
    const double s[3] = {1.0, 0.995, 0.5};
    struct qp_pick_options o;
    qp_pick_options_default(&o);
    o.threshold_mode = 1;
    o.threshold = 0.997;
    struct qp_pick_result *r = NULL;
    assert_string_equal(pick(N4, s, 3, &o, &r), "a");
    assert_int_equal(r->near_tie, 1);
    assert_non_null(strstr(r->warning, "near-tie at the exclusion cut-off"));
    assert_non_null(strstr(r->warning, "mode=threshold"));
    qp_pick_result_free(r);
    o.threshold_mode = 0;
    o.coverage = 0.45; /* a = 40% of 2.495 */
    assert_string_equal(pick(N4, s, 3, &o, &r), "a");
    assert_int_equal(r->near_tie, 1);
    assert_non_null(strstr(r->warning, "mode=coverage"));
    qp_pick_result_free(r);
    o.near_tie_ratio = 0; /* disabled */
    assert_string_equal(pick(N4, s, 3, &o, &r), "a");
    assert_int_equal(r->near_tie, 0);
    assert_string_equal(r->warning, "");
    qp_pick_result_free(r);
    /* No warning when the cut is clear, when nothing or everything is chosen. */
    o.near_tie_ratio = 0.99;
    o.coverage = 0.8;
    assert_string_equal(pick(N4, s, 3, &o, &r), "a,b");
    assert_int_equal(r->near_tie, 0);
    qp_pick_result_free(r);
    o.coverage = 0.1;
    assert_string_equal(pick(N4, s, 3, &o, &r), "");
    assert_int_equal(r->near_tie, 0);
    qp_pick_result_free(r);
    o.coverage = 1;
    assert_string_equal(pick(N4, s, 3, &o, &r), "a,b,c");
    assert_int_equal(r->near_tie, 0);
    qp_pick_result_free(r);
}

static const char *const BN[5] = {"blk1/conv", "blk1/relu", "blk2/conv", "other", "blk10/x"};
static const double BS[5] = {1, 2, 3, 0.5, 0.25};
static const char BLOCKS[] = "{\"b1\": [\"blk1/\", \"blk10\"], \"b2\": [\"blk2/\", \"blk1/conv\"]}";

static void test_blocks(void **state) {
    (void)state;
    struct qp_error err = {0};
    struct qp_sens_blocks *b = NULL;
    assert_int_equal(qp_sens_blocks_parse(BLOCKS, strlen(BLOCKS), "t.json", &b, &err), QP_OK);
    assert_int_equal(b->n, 2);
    struct qp_pick_options o;
    qp_pick_options_default(&o);
    o.blocks = b;
    o.threshold_mode = 1;
    o.threshold = 2.9;
    /* sum: b1 = 1 + 2 + 0.25 (blk1/conv joins b1: first match in file order), b2 = 3. */
    struct qp_pick_result *r = NULL;
    assert_string_equal(pick(BN, BS, 5, &o, &r), "blk1/relu,blk1/conv,blk10/x,blk2/conv");
    assert_int_equal(r->n_groups, 3);
    assert_string_equal(r->groups[0].name, "b1");
    CLOSE(r->groups[0].score, 3.25);
    assert_string_equal(r->groups[2].name, "other"); /* unmatched: its own group */
    assert_int_equal(r->n_chosen_groups, 2);
    CLOSE(r->coverage_pct, 100.0 * 6.25 / 6.75);
    assert_int_equal(r->num_remaining_quantized, 1);
    qp_pick_result_free(r);
    /* max: b2 = 3 ranks above b1 = 2. */
    o.agg = QP_BLOCK_MAX;
    o.threshold = 2.5;
    assert_string_equal(pick(BN, BS, 5, &o, &r), "blk2/conv");
    assert_string_equal(r->groups[1].name, "b1");
    CLOSE(r->groups[1].score, 2.0);
    qp_pick_result_free(r);
    /* mean: b1 = 3.25 / 3. */
    o.agg = QP_BLOCK_MEAN;
    o.threshold = 1.0;
    assert_string_equal(pick(BN, BS, 5, &o, &r), "blk2/conv,blk1/relu,blk1/conv,blk10/x");
    CLOSE(r->groups[1].score, 3.25 / 3.0);
    qp_pick_result_free(r);
    /* max_nodes counts groups; coverage on group sums. */
    o.agg = QP_BLOCK_SUM;
    o.threshold_mode = 0;
    o.coverage = 1;
    o.max_nodes = 1;
    assert_string_equal(pick(BN, BS, 5, &o, NULL), "blk1/relu,blk1/conv,blk10/x");
    o.agg = (enum qp_block_agg)7;
    assert_int_equal(qp_sens_pick(BN, BS, 5, &o, &r, &err), QP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "block_agg"));
    qp_sens_blocks_free(b);
    assert_int_equal(qp_block_agg_parse("mean"), QP_BLOCK_MEAN);
    assert_int_equal(qp_block_agg_parse("median"), -1);
}

static void test_blocks_errors(void **state) {
    (void)state;
    static const char *const bad[] = {
        "[1,2]", "{}", "{\"a\": []}", "{\"a\": [1]}", "{\"a\": [\"(\"]}",
        "{\"a\": \"x\", \"a\": \"y\"}", "{",
        /* regcomp would take gigabytes (found by fuzzing) */
        "{\"a\": \".+++++++++++++++++++++++++++*\"}",
        "{\"a\": \"((((((((((((((((((a)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+\"}",
        "{\"a\": \",#{,24444}x\"}"};
    static const char *const what[] = {"expected an object", "no groups",
                                       "non-empty list",     "not a string",
                                       "does not compile",   "repeated",
                                       "not valid JSON",     "stacked quantifiers",
                                       "too complex",        "repetition bound 24444 above 255"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        struct qp_error err = {0};
        struct qp_sens_blocks *b = NULL;
        assert_int_equal(qp_sens_blocks_parse(bad[i], strlen(bad[i]), "g.json", &b, &err),
                         QP_ERR_BAD_INPUT);
        assert_null(b);
        assert_non_null(strstr(err.msg, "g.json"));
        if (!strstr(err.msg, what[i])) fail_msg("case %zu: %s", i, err.msg);
    }
    struct qp_error err = {0};
    struct qp_sens_blocks *b = NULL;
    assert_int_equal(qp_sens_blocks_load("/nonexistent/blocks.json", &b, &err), QP_ERR_IO);
    /* A single string is one regex; \d works. */
    const char *one = "{\"g\": \"n\\\\d\"}";
    assert_int_equal(qp_sens_blocks_parse(one, strlen(one), NULL, &b, &err), QP_OK);
    assert_int_equal(regexec(&b->patterns[0][0], "n7x", 0, NULL, 0), 0);
    assert_int_not_equal(regexec(&b->patterns[0][0], "xn7", 0, NULL, 0), 0); /* re.match */
    qp_sens_blocks_free(b);
    /* \d inside a bracket is the digit range too. */
    const char *br = "{\"g\": \"n[\\\\dx]$\"}";
    assert_int_equal(qp_sens_blocks_parse(br, strlen(br), NULL, &b, &err), QP_OK);
    assert_int_equal(regexec(&b->patterns[0][0], "n7", 0, NULL, 0), 0);
    assert_int_equal(regexec(&b->patterns[0][0], "nx", 0, NULL, 0), 0);
    assert_int_not_equal(regexec(&b->patterns[0][0], "n[", 0, NULL, 0), 0);
    qp_sens_blocks_free(b);
}

static void test_name_regex(void **state) {
    (void)state;
    char buf[64];
    size_t n = qp_sens_name_regex("/l1/a.b(c)+", buf, sizeof buf);
    assert_string_equal(buf, "^/l1/a\\.b\\(c\\)\\+$");
    assert_int_equal(n, strlen(buf));
    char small[4];
    assert_int_equal(qp_sens_name_regex("abcdef", small, sizeof small), 8);
    assert_string_equal(small, "^ab");
    regex_t re;
    qp_sens_name_regex("a.b", buf, sizeof buf);
    assert_int_equal(regcomp(&re, buf, REG_EXTENDED | REG_NOSUB), 0);
    assert_int_equal(regexec(&re, "a.b", 0, NULL, 0), 0);
    assert_int_not_equal(regexec(&re, "axb", 0, NULL, 0), 0);
    assert_int_not_equal(regexec(&re, "a.bc", 0, NULL, 0), 0);
    regfree(&re);
}

static void test_names(void **state) {
    (void)state;
    for (int g = 0; g < QP_SENS_GRANULARITY_COUNT; g++)
        assert_int_equal(qp_sens_granularity_parse(qp_sens_granularity_name(g)), g);
    for (int m = 0; m < QP_SENS_METRIC_COUNT; m++)
        assert_int_equal(qp_sens_metric_parse(qp_sens_metric_name(m)), m);
    for (int p = 0; p < QP_SENS_PROBE_COUNT; p++)
        assert_int_equal(qp_sens_probe_parse(qp_sens_probe_name(p)), p);
    assert_int_equal(qp_sens_metric_parse("kl"), -1);
    assert_string_equal(qp_sens_metric_name(QP_SENS_COS), "cos");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metrics_identical),
        cmocka_unit_test(test_metrics_values),
        cmocka_unit_test(test_metrics_zero_vectors),
        cmocka_unit_test(test_metrics_scalar),
        cmocka_unit_test(test_coverage),
        cmocka_unit_test(test_threshold),
        cmocka_unit_test(test_max_nodes_and_floor),
        cmocka_unit_test(test_summary),
        cmocka_unit_test(test_near_tie),
        cmocka_unit_test(test_blocks),
        cmocka_unit_test(test_blocks_errors),
        cmocka_unit_test(test_name_regex),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
