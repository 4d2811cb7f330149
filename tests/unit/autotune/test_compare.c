/* Latency comparison and the alternating race (autotune/compare.h) on the fixed backend's
 * deterministic, seeded latencies: clear differences resolve, equal ones do not, outliers do not
 * decide, and a noisy-but-equal pair is called faster at most at the stated rate. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "autotune/compare.h"
#include "autotune/latency.h"

/* Two models' latencies: median cand_ms / best_ms, log-normal noise of `sigma` and, with
 * probability outlier_p, a 3x outlier (another process took the core). */
struct noisy {
    uint64_t seed;
    double cand_ms, best_ms, sigma, outlier_p;
    size_t calls;
};

static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static double uniform(uint64_t seed, uint64_t k, int j) {
    return ((double)(splitmix64(seed * 0x100000001B3ull + 4 * k + (uint64_t)j) >> 11) + 0.5) /
           9007199254740992.0;
}

static double noisy_sample(void *ctx, const char *model_path, size_t k) {
    struct noisy *n = ctx;
    n->calls++;
    double base = strcmp(model_path, "cand.onnx") == 0 ? n->cand_ms : n->best_ms;
    double u1 = uniform(n->seed, k, 0), u2 = uniform(n->seed, k, 1);
    double z = sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
    double v = base * exp(n->sigma * z);
    if (uniform(n->seed, k, 2) < n->outlier_p) v *= 3;
    return v;
}

static struct qp_latency_backend *noisy_backend(struct noisy *n) {
    struct qp_latency_backend *b = NULL;
    struct qp_error err = {0};
    assert_int_equal(qp_latency_fixed_create(noisy_sample, n, &b, &err), QP_OK);
    assert_string_equal(b->name, "fixed");
    return b;
}

static void test_compare_clear(void **state) {
    (void)state;
    double a[12], b[12];
    for (int i = 0; i < 12; i++) {
        a[i] = 10 + 0.01 * i;
        b[i] = 12 + 0.01 * i;
    }
    struct qp_latency_verdict v;
    assert_int_equal(qp_latency_compare(a, 12, b, 12, 0.95, &v), QP_OK);
    assert_int_equal(v.verdict, QP_LATENCY_FASTER);
    assert_true(v.z < 0 && v.p_value < 0.001);
    assert_true(fabs(v.median_a_ms - 10.055) < 1e-9 && fabs(v.median_b_ms - 12.055) < 1e-9);
    assert_int_equal(qp_latency_compare(b, 12, a, 12, 0.95, &v), QP_OK);
    assert_int_equal(v.verdict, QP_LATENCY_SLOWER);
    assert_string_equal(qp_latency_verdict_name(v.verdict), "slower");
    /* Identical samples: every value a tie, nothing to resolve. */
    assert_int_equal(qp_latency_compare(a, 12, a, 12, 0.95, &v), QP_OK);
    assert_int_equal(v.verdict, QP_LATENCY_UNRESOLVED);
    assert_true(v.p_value > 0.99);
}

/* Ranks, not sizes: a few huge outliers on the faster side do not turn it slower, and a
 * difference below the minimum effect is not a verdict however sure the test is. */
static void test_compare_outliers_and_effect(void **state) {
    (void)state;
    double a[20], b[20];
    for (int i = 0; i < 20; i++) {
        a[i] = i < 3 ? 500 : 10 + 0.001 * i; /* 3 outliers of 50x */
        b[i] = 11 + 0.001 * i;
    }
    struct qp_latency_verdict v;
    assert_int_equal(qp_latency_compare(a, 20, b, 20, 0.95, &v), QP_OK);
    assert_int_equal(v.verdict, QP_LATENCY_FASTER);
    for (int i = 0; i < 20; i++) {
        a[i] = 10 + 0.001 * i;
        b[i] = 10.05 + 0.001 * i; /* 0.5% apart, perfectly separated */
    }
    assert_int_equal(qp_latency_compare(a, 20, b, 20, 0.95, &v), QP_OK);
    assert_true(v.p_value < 1e-6);
    assert_int_equal(v.verdict, QP_LATENCY_UNRESOLVED);
    assert_int_equal(qp_latency_compare_effect(a, 20, b, 20, 0.95, 0.001, &v), QP_OK);
    assert_int_equal(v.verdict, QP_LATENCY_FASTER);
    /* Too few samples for the normal approximation. */
    assert_int_equal(qp_latency_compare(a, 3, b, 3, 0.95, &v), QP_OK);
    assert_int_equal(v.verdict, QP_LATENCY_UNRESOLVED);
}

static void test_compare_usage(void **state) {
    (void)state;
    double a[4] = {1, 2, 3, 4}, nan_[4] = {1, NAN, 3, 4};
    struct qp_latency_verdict v = {.na = 99};
    assert_int_equal(qp_latency_compare(a, 4, a, 4, 1.0, &v), QP_ERR_USAGE);
    assert_int_equal(qp_latency_compare(a, 4, a, 4, 0, &v), QP_ERR_USAGE);
    assert_int_equal(qp_latency_compare(a, 0, a, 4, 0.95, &v), QP_ERR_USAGE);
    assert_int_equal(qp_latency_compare(NULL, 4, a, 4, 0.95, &v), QP_ERR_USAGE);
    assert_int_equal(qp_latency_compare(a, 4, nan_, 4, 0.95, &v), QP_ERR_USAGE);
    assert_int_equal(v.na, 99); /* untouched on failure */
}

static void test_race_clearly_faster(void **state) {
    (void)state;
    struct noisy n = {.seed = 7, .cand_ms = 8, .best_ms = 10, .sigma = 0.05, .outlier_p = 0.02};
    struct qp_latency_backend *b = noisy_backend(&n);
    struct qp_latency_race_options o;
    qp_latency_race_options_default(&o);
    struct qp_latency_race_result r;
    struct qp_error err = {0};
    assert_int_equal(qp_latency_race(b, "cand.onnx", "best.onnx", &o, &r, &err), QP_OK);
    assert_int_equal(r.verdict.verdict, QP_LATENCY_FASTER);
    assert_int_equal(r.stop, QP_LATENCY_STOP_RESOLVED);
    assert_int_equal(r.n_rounds, o.min_rounds); /* resolved at the first look */
    assert_int_equal(r.n_cand, o.min_rounds * o.runs_per_round);
    assert_int_equal(r.n_best, r.n_cand);
    assert_int_equal(n.calls, r.n_cand + r.n_best);
    assert_true(fabs(r.verdict.median_a_ms - 8) < 0.5 && fabs(r.verdict.median_b_ms - 10) < 0.5);
    qp_latency_race_result_release(&r);
    /* The other way round: slower, as quickly. */
    assert_int_equal(qp_latency_race(b, "best.onnx", "cand.onnx", &o, &r, &err), QP_OK);
    assert_int_equal(r.verdict.verdict, QP_LATENCY_SLOWER);
    assert_int_equal(r.n_rounds, o.min_rounds);
    qp_latency_race_result_release(&r);
    qp_latency_backend_free(b);
}

/* Equal distributions: no verdict, the race runs to its end (max_rounds here; the time budget
 * when that comes first). */
static void test_race_equal_unresolved(void **state) {
    (void)state;
    struct noisy n = {.seed = 11, .cand_ms = 10, .best_ms = 10, .sigma = 0.03};
    struct qp_latency_backend *b = noisy_backend(&n);
    struct qp_latency_race_options o;
    qp_latency_race_options_default(&o);
    o.max_rounds = 6;
    struct qp_latency_race_result r;
    struct qp_error err = {0};
    assert_int_equal(qp_latency_race(b, "cand.onnx", "best.onnx", &o, &r, &err), QP_OK);
    assert_int_equal(r.verdict.verdict, QP_LATENCY_UNRESOLVED);
    assert_int_equal(r.stop, QP_LATENCY_STOP_MAX_ROUNDS);
    assert_int_equal(r.n_rounds, 6);
    assert_int_equal(r.n_cand, 60);
    assert_int_equal(r.n_best, 60);
    qp_latency_race_result_release(&r);
    /* A budget already spent stops the race once min_rounds are done. */
    o.budget_seconds = 1e-12;
    assert_int_equal(qp_latency_race(b, "cand.onnx", "best.onnx", &o, &r, &err), QP_OK);
    assert_int_equal(r.stop, QP_LATENCY_STOP_BUDGET);
    assert_int_equal(r.n_rounds, o.min_rounds);
    assert_int_equal(r.verdict.verdict, QP_LATENCY_UNRESOLVED);
    qp_latency_race_result_release(&r);
    qp_latency_backend_free(b);
}

/* Noisy but equal, 200 seeds: called faster at most 10 times (5%) at 95% confidence. */
static void test_race_false_positive_rate(void **state) {
    (void)state;
    int faster = 0, slower = 0;
    struct qp_latency_race_options o;
    qp_latency_race_options_default(&o);
    for (uint64_t seed = 1; seed <= 200; seed++) {
        struct noisy n = {
            .seed = seed, .cand_ms = 10, .best_ms = 10, .sigma = 0.08, .outlier_p = 0.05};
        struct qp_latency_backend *b = noisy_backend(&n);
        struct qp_latency_race_result r;
        struct qp_error err = {0};
        assert_int_equal(qp_latency_race(b, "cand.onnx", "best.onnx", &o, &r, &err), QP_OK);
        faster += r.verdict.verdict == QP_LATENCY_FASTER;
        slower += r.verdict.verdict == QP_LATENCY_SLOWER;
        qp_latency_race_result_release(&r);
        qp_latency_backend_free(b);
    }
    printf("noisy-but-equal: %d of 200 called faster, %d slower\n", faster, slower);
    assert_true(faster <= 10);
    assert_true(faster + slower <= 10);
}

/* stop_without_gain: a race whose candidate is shown not min_effect faster stops there
 * (equal models, a real gain smaller than the minimum effect), one with a larger gain still
 * ends FASTER and a slower candidate SLOWER; without the option the small gain runs to
 * max_rounds. Over 100 seeds a 3% gain (1% minimum effect, 5% noise) is stopped without gain
 * at most 5 times. */
static void test_race_stop_without_gain(void **state) {
    (void)state;
    struct qp_latency_race_options o;
    qp_latency_race_options_default(&o);
    o.stop_without_gain = 1;
    struct qp_latency_race_result r;
    struct qp_error err = {0};
    static const struct {
        double cand, sigma;
        int stop_on, verdict, stop;
    } cases[] = {
        {10.0, 0.01, 1, QP_LATENCY_UNRESOLVED, QP_LATENCY_STOP_NO_GAIN},
        {9.97, 0.003, 1, QP_LATENCY_UNRESOLVED, QP_LATENCY_STOP_NO_GAIN},
        {9.97, 0.003, 0, QP_LATENCY_UNRESOLVED, QP_LATENCY_STOP_MAX_ROUNDS},
        {9.5, 0.01, 1, QP_LATENCY_FASTER, QP_LATENCY_STOP_RESOLVED},
        {11.0, 0.01, 1, QP_LATENCY_SLOWER, QP_LATENCY_STOP_RESOLVED},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct noisy n = {
            .seed = 3 + i, .cand_ms = cases[i].cand, .best_ms = 10, .sigma = cases[i].sigma};
        struct qp_latency_backend *b = noisy_backend(&n);
        o.stop_without_gain = cases[i].stop_on;
        assert_int_equal(qp_latency_race(b, "cand.onnx", "best.onnx", &o, &r, &err), QP_OK);
        if ((int)r.verdict.verdict != cases[i].verdict || (int)r.stop != cases[i].stop)
            fail_msg("case %zu: verdict %d stop %d after %zu rounds", i, (int)r.verdict.verdict,
                     (int)r.stop, r.n_rounds);
        if (cases[i].stop == QP_LATENCY_STOP_NO_GAIN) assert_true(r.n_rounds < o.max_rounds);
        qp_latency_race_result_release(&r);
        qp_latency_backend_free(b);
    }
    /* A minimum effect of 1 or more (a tiny sub-model's scaled effect) cannot be met by any
     * candidate, even one twice as fast: the race stops at its first look. */
    struct noisy tiny = {.seed = 9, .cand_ms = 5, .best_ms = 10, .sigma = 0.01};
    struct qp_latency_backend *tb = noisy_backend(&tiny);
    o.stop_without_gain = 1;
    o.min_effect = 1.5;
    assert_int_equal(qp_latency_race(tb, "cand.onnx", "best.onnx", &o, &r, &err), QP_OK);
    assert_int_equal(r.stop, QP_LATENCY_STOP_NO_GAIN);
    assert_int_equal(r.verdict.verdict, QP_LATENCY_UNRESOLVED);
    assert_int_equal(r.n_rounds, o.min_rounds);
    qp_latency_race_result_release(&r);
    qp_latency_backend_free(tb);
    o.min_effect = QP_LATENCY_MIN_EFFECT;
    o.stop_without_gain = 1;
    int stopped = 0, faster = 0;
    for (uint64_t seed = 1; seed <= 100; seed++) {
        struct noisy n = {
            .seed = seed, .cand_ms = 9.7, .best_ms = 10, .sigma = 0.05, .outlier_p = 0.02};
        struct qp_latency_backend *b = noisy_backend(&n);
        assert_int_equal(qp_latency_race(b, "cand.onnx", "best.onnx", &o, &r, &err), QP_OK);
        stopped += r.stop == QP_LATENCY_STOP_NO_GAIN;
        faster += r.verdict.verdict == QP_LATENCY_FASTER;
        qp_latency_race_result_release(&r);
        qp_latency_backend_free(b);
    }
    printf("3%% gain, 1%% minimum effect: %d of 100 stopped without gain, %d faster\n", stopped,
           faster);
    assert_true(stopped <= 5);
    assert_true(faster >= 80);
}

/* The noisy samples through a backend that times pairs run by run, as builtin does
 * (early_reject looks before min_rounds only there). */
struct noisy_pairs {
    struct qp_latency_backend base;
    struct noisy n;
    size_t k;
};

static enum qp_status np_measure(struct qp_latency_backend *b, const char *path, size_t n,
                                 double *ms, struct qp_error *err) {
    (void)err;
    struct noisy_pairs *p = (struct noisy_pairs *)b;
    for (size_t i = 0; i < n; i++)
        ms[i] = noisy_sample(&p->n, path, p->k++);
    return QP_OK;
}

static enum qp_status np_pair(struct qp_latency_backend *b, const char *a, const char *c, size_t n,
                              double *a_ms, double *c_ms, struct qp_error *err) {
    (void)err;
    struct noisy_pairs *p = (struct noisy_pairs *)b;
    for (size_t i = 0; i < n; i++) {
        a_ms[i] = noisy_sample(&p->n, a, p->k++);
        c_ms[i] = noisy_sample(&p->n, c, p->k++);
    }
    return QP_OK;
}

static size_t race_rounds(struct qp_latency_backend *b, const struct qp_latency_race_options *o,
                          enum qp_latency_verdict_kind *v, enum qp_latency_race_stop *stop) {
    struct qp_latency_race_result r;
    struct qp_error err = {0};
    assert_int_equal(qp_latency_race(b, "cand.onnx", "best.onnx", o, &r, &err), QP_OK);
    size_t n = r.n_rounds;
    *v = r.verdict.verdict;
    *stop = r.stop;
    assert_int_equal(r.n_cand, n * o->runs_per_round);
    qp_latency_race_result_release(&r);
    return n;
}

/* early_reject: a clearly slower candidate stops after one round on a backend that times pairs
 * run by run (two rounds without the option, or timed in blocks); a faster one still waits for
 * min_rounds; with stop_without_gain an equal pair may stop without gain after one round. Over
 * 200 seeds of equal models the option keeps the error rates (at most 10 verdicts of either
 * kind), and over 100 seeds a 3% gain is still found faster at least 80 times. */
static void test_race_early_reject(void **state) {
    (void)state;
    struct qp_latency_race_options o;
    qp_latency_race_options_default(&o);
    enum qp_latency_verdict_kind v;
    enum qp_latency_race_stop stop;
    struct noisy_pairs p = {
        .base = {.name = "pairs", .measure = np_measure, .measure_pair = np_pair},
        .n = {.seed = 5, .cand_ms = 13, .best_ms = 10, .sigma = 0.03}};
    assert_int_equal(race_rounds(&p.base, &o, &v, &stop), 2); /* off: the first look at 2 */
    assert_int_equal(v, QP_LATENCY_SLOWER);
    o.early_reject = 1;
    assert_int_equal(race_rounds(&p.base, &o, &v, &stop), 1);
    assert_int_equal(v, QP_LATENCY_SLOWER);
    assert_int_equal(stop, QP_LATENCY_STOP_RESOLVED);
    struct noisy_pairs blocks = {.base = {.name = "blocks", .measure = np_measure}, .n = p.n};
    assert_int_equal(race_rounds(&blocks.base, &o, &v, &stop), 2); /* no pairs: no early look */
    assert_int_equal(v, QP_LATENCY_SLOWER);
    p.n.cand_ms = 8; /* faster: decided at min_rounds only */
    assert_int_equal(race_rounds(&p.base, &o, &v, &stop), o.min_rounds);
    assert_int_equal(v, QP_LATENCY_FASTER);
    p.n.cand_ms = 10; /* equal and quiet: shown not 1% faster at the first look */
    p.n.sigma = 0.002;
    o.stop_without_gain = 1;
    assert_int_equal(race_rounds(&p.base, &o, &v, &stop), 1);
    assert_int_equal(v, QP_LATENCY_UNRESOLVED);
    assert_int_equal(stop, QP_LATENCY_STOP_NO_GAIN);
    int wrong = 0, found = 0;
    for (uint64_t seed = 1; seed <= 200; seed++) {
        struct noisy_pairs q = {
            .base = p.base,
            .n = {.seed = seed, .cand_ms = 10, .best_ms = 10, .sigma = 0.08, .outlier_p = 0.05}};
        race_rounds(&q.base, &o, &v, &stop);
        wrong += v != QP_LATENCY_UNRESOLVED;
    }
    for (uint64_t seed = 1; seed <= 100; seed++) {
        struct noisy_pairs q = {
            .base = p.base,
            .n = {.seed = seed, .cand_ms = 9.7, .best_ms = 10, .sigma = 0.05, .outlier_p = 0.02}};
        race_rounds(&q.base, &o, &v, &stop);
        found += v == QP_LATENCY_FASTER;
    }
    printf("early_reject: equal pairs %d of 200 resolved; 3%% gain %d of 100 faster\n", wrong,
           found);
    assert_true(wrong <= 10);
    assert_true(found >= 80);
}

/* Sessions that each carry a bias, as builtin's did (docs/autotune.md): every sample of a
 * model is multiplied by its session's factor, drawn anew (within +-`bias`) each time the
 * backend is reset; without reset the sessions live on. */
struct biased_pairs {
    struct noisy_pairs p;
    double bias;
    uint64_t draw;
    double f_cand, f_best;
    int resets;
};

static void bp_draw(struct biased_pairs *b) {
    b->draw++;
    b->f_cand = 1 + b->bias * (2 * uniform(b->p.n.seed + 1000, b->draw, 0) - 1);
    b->f_best = 1 + b->bias * (2 * uniform(b->p.n.seed + 1000, b->draw, 1) - 1);
}

static enum qp_status bp_pair(struct qp_latency_backend *be, const char *a, const char *c, size_t n,
                              double *a_ms, double *c_ms, struct qp_error *err) {
    struct biased_pairs *b = (struct biased_pairs *)be;
    enum qp_status st = np_pair(be, a, c, n, a_ms, c_ms, err);
    double fa = strcmp(a, "cand.onnx") == 0 ? b->f_cand : b->f_best;
    double fc = strcmp(c, "cand.onnx") == 0 ? b->f_cand : b->f_best;
    for (size_t i = 0; i < n; i++) {
        a_ms[i] *= fa;
        c_ms[i] *= fc;
    }
    return st;
}

static void bp_reset(struct qp_latency_backend *be) {
    struct biased_pairs *b = (struct biased_pairs *)be;
    b->resets++;
    bp_draw(b);
}

/* Sessions up to +-bias apart, the candidate cand_ms against a best of 10 ms, 1% noise. */
static struct biased_pairs biased(uint64_t seed, double cand_ms, double bias) {
    struct biased_pairs b = {
        .p = {.base = {.name = "biased",
                       .measure = np_measure,
                       .measure_pair = bp_pair,
                       .reset = bp_reset},
              .n = {.seed = seed, .cand_ms = cand_ms, .best_ms = 10, .sigma = 0.01}},
        .bias = bias};
    bp_draw(&b);
    return b;
}

/* replicate: over 200 seeds of equal models whose sessions sit up to 3% apart, a race without
 * it calls many of them FASTER (the bias is the same in every round); with it, a FASTER must
 * hold on a second pair of sessions, and few do (each such result holds both races' samples
 * and rounds, and a race that fails the second ends UNRESOLVED, not_replicated): at most half
 * as many. A true 6% gain is still found at least 90 times in 100. A backend without reset,
 * and the options' default, run one race. */
static void test_race_replicate(void **state) {
    (void)state;
    struct qp_latency_race_options o;
    qp_latency_race_options_default(&o);
    o.stop_without_gain = o.early_reject = 1;
    assert_int_equal(o.replicate, 0);
    int phantom[2] = {0, 0}, found = 0, not_replicated = 0;
    for (int rep = 0; rep <= 1; rep++) {
        o.replicate = rep;
        for (uint64_t seed = 1; seed <= 200; seed++) {
            struct biased_pairs b = biased(seed, 10, 0.03);
            enum qp_latency_verdict_kind v;
            enum qp_latency_race_stop stop;
            race_rounds(&b.p.base, &o, &v, &stop); /* checks samples = rounds x runs */
            phantom[rep] += v == QP_LATENCY_FASTER;
            if (rep && b.resets) {
                assert_int_equal(b.resets, 1);
                assert_true(v == QP_LATENCY_FASTER || stop == QP_LATENCY_STOP_NOT_REPLICATED);
                not_replicated += stop == QP_LATENCY_STOP_NOT_REPLICATED;
            }
            if (!rep) assert_int_equal(b.resets, 0);
        }
    }
    o.replicate = 1;
    for (uint64_t seed = 1; seed <= 100; seed++) {
        struct biased_pairs b = biased(seed, 9.4, 0.01);
        enum qp_latency_verdict_kind v;
        enum qp_latency_race_stop stop;
        race_rounds(&b.p.base, &o, &v, &stop);
        found += v == QP_LATENCY_FASTER;
    }
    printf("replicate: equal models, sessions +-3%% apart: %d of 200 faster without, %d with "
           "(%d not replicated); 6%% gain %d of 100 faster\n",
           phantom[0], phantom[1], not_replicated, found);
    assert_true(phantom[0] >= 40);
    assert_true(phantom[1] * 2 <= phantom[0]);
    assert_true(not_replicated >= phantom[0] / 2);
    assert_true(found >= 90);
    /* no reset (a backend that keeps nothing): one race */
    struct noisy_pairs q = {
        .base = {.name = "pairs", .measure = np_measure, .measure_pair = np_pair},
        .n = {.seed = 3, .cand_ms = 8, .best_ms = 10, .sigma = 0.03}};
    enum qp_latency_verdict_kind v;
    enum qp_latency_race_stop stop;
    assert_int_equal(race_rounds(&q.base, &o, &v, &stop), o.min_rounds);
    assert_int_equal(v, QP_LATENCY_FASTER);
    assert_string_equal(qp_latency_stop_name(QP_LATENCY_STOP_NOT_REPLICATED), "not_replicated");
}

static double negative_sample(void *ctx, const char *model_path, size_t k) {
    (void)ctx;
    (void)model_path;
    return k == 2 ? -1 : 5;
}

/* A machine whose speed steps: every latency doubles from the step_at-th run on (runs of both
 * models counted together). The candidate takes 9 ms, the best 10 ms. With measure_pair the
 * backend times them run by run, as builtin does; without it, one block each (trtexec, ort). */
struct stepper {
    struct qp_latency_backend base;
    size_t k, step_at;
    int pairs, cand_first, singles;
};

static double step_ms(struct stepper *s, const char *path) {
    double ms = strstr(path, "cand") ? 9.0 : 10.0;
    return s->k++ >= s->step_at ? 2 * ms : ms;
}

static enum qp_status stepper_measure(struct qp_latency_backend *b, const char *path, size_t n,
                                      double *ms, struct qp_error *err) {
    (void)err;
    struct stepper *s = (struct stepper *)b;
    s->singles++;
    for (size_t i = 0; i < n; i++)
        ms[i] = step_ms(s, path);
    return QP_OK;
}

static enum qp_status stepper_pair(struct qp_latency_backend *b, const char *a, const char *c,
                                   size_t n, double *a_ms, double *c_ms, struct qp_error *err) {
    (void)err;
    struct stepper *s = (struct stepper *)b;
    s->pairs++;
    s->cand_first += strstr(a, "cand") != NULL;
    for (size_t i = 0; i < n; i++) {
        a_ms[i] = step_ms(s, a);
        c_ms[i] = step_ms(s, c);
    }
    return QP_OK;
}

/* A step in the middle of round two: timed run by run it falls on both sides and the faster
 * candidate wins; timed in blocks it falls on the candidate's block alone, which then looks
 * slower. The pair's order alternates with the round. */
static void test_race_run_by_run(void **state) {
    (void)state;
    struct qp_error err = {0};
    struct qp_latency_race_options o;
    qp_latency_race_options_default(&o);
    o.min_rounds = 2;
    o.max_rounds = 4;
    struct qp_latency_race_result r;
    struct stepper s = {
        .base = {.name = "stepper", .measure = stepper_measure, .measure_pair = stepper_pair},
        .step_at = 30};
    assert_int_equal(qp_latency_race(&s.base, "cand.onnx", "best.onnx", &o, &r, &err), QP_OK);
    assert_int_equal(r.verdict.verdict, QP_LATENCY_FASTER);
    assert_int_equal(r.n_rounds, 2);
    assert_int_equal(s.pairs, 2);
    assert_int_equal(s.cand_first, 1); /* round 1 candidate first, round 2 best first */
    assert_int_equal(s.singles, 0);
    size_t slow = 0;
    for (size_t i = 0; i < r.n_cand; i++)
        slow += r.cand_ms[i] > 10;
    assert_int_equal(slow, 5);
    qp_latency_race_result_release(&r);
    struct stepper blocks = {.base = {.name = "stepper", .measure = stepper_measure},
                             .step_at = 30};
    assert_int_equal(qp_latency_race(&blocks.base, "cand.onnx", "best.onnx", &o, &r, &err), QP_OK);
    assert_int_not_equal(r.verdict.verdict, QP_LATENCY_FASTER);
    assert_int_equal(blocks.singles, 2 * (int)r.n_rounds);
    qp_latency_race_result_release(&r);
    /* The pair's argument checks; its samples land on their sides. */
    double a[2] = {42, 42}, c[2] = {42, 42};
    s.k = 0;
    s.step_at = 0;
    assert_int_equal(qp_latency_measure_pair(&s.base, "cand", "best", 0, a, c, &err), QP_ERR_USAGE);
    assert_int_equal(qp_latency_measure_pair(&s.base, "cand", NULL, 2, a, c, &err), QP_ERR_USAGE);
    assert_int_equal(qp_latency_measure_pair(&s.base, "cand", "best", 2, a, c, &err), QP_OK);
    assert_true(a[0] == 18 && c[0] == 20);
}

/* A backend failure reaches the caller; its array is written only on success. */
static void test_measure_errors(void **state) {
    (void)state;
    struct qp_latency_backend *b = NULL;
    struct qp_error err = {0};
    assert_int_equal(qp_latency_fixed_create(NULL, NULL, &b, &err), QP_ERR_USAGE);
    assert_int_equal(qp_latency_fixed_create(negative_sample, NULL, &b, &err), QP_OK);
    double ms[4] = {42, 42, 42, 42};
    assert_int_equal(qp_latency_measure(b, "m.onnx", 4, ms, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "sample 2"));
    assert_true(ms[0] == 42 && ms[1] == 42);
    assert_int_equal(qp_latency_measure(b, "m.onnx", 0, ms, &err), QP_ERR_USAGE);
    assert_int_equal(qp_latency_measure(b, "m.onnx", 2, ms, &err), QP_OK);
    assert_true(ms[0] == 5 && ms[1] == 5 && ms[2] == 42);
    struct qp_latency_race_options o;
    qp_latency_race_options_default(&o);
    struct qp_latency_race_result r = {.n_rounds = 99};
    o.max_rounds = 1; /* below min_rounds */
    assert_int_equal(qp_latency_race(b, "a", "b", &o, &r, &err), QP_ERR_USAGE);
    assert_int_equal(r.n_rounds, 0);
    qp_latency_backend_free(b);
    qp_latency_backend_free(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_compare_clear),
        cmocka_unit_test(test_compare_outliers_and_effect),
        cmocka_unit_test(test_compare_usage),
        cmocka_unit_test(test_race_clearly_faster),
        cmocka_unit_test(test_race_equal_unresolved),
        cmocka_unit_test(test_race_false_positive_rate),
        cmocka_unit_test(test_race_stop_without_gain),
        cmocka_unit_test(test_race_early_reject),
        cmocka_unit_test(test_race_replicate),
        cmocka_unit_test(test_race_run_by_run),
        cmocka_unit_test(test_measure_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
