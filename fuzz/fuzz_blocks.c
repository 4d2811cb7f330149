/*
 * libFuzzer harness for the sensitivity blocks file (sensitivity/sensitivity.h,
 * qp_sens_blocks_parse: {"group": ["regex", ...], ...}) and the picker that groups targets with
 * it. Beyond "does not crash", blocks that parse pick, in coverage and threshold mode, only
 * indices of the names given, each at most once, with the excluded mass within the total.
 *
 *     scripts/build.sh fuzz && build-fuzz/fuzz/fuzz_blocks fuzz/corpus/blocks
 *
 * Seeds are in fuzz/corpus/blocks; inputs that once crashed go to
 * tests/data/fuzz-regressions/blocks/ (both replayed by ctest).
 */
#include <regex.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sensitivity/sensitivity.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "fuzz_blocks: invariant broken: %s\n", what);
        abort();
    }
}

static const char *const names[] = {
    "conv1", "conv2", "/blocks.0/attn/MatMul", "/blocks.0/mlp/fc1", "/blocks.1/attn/MatMul", "head",
    "",      "a.b*c"};
static const double scores[] = {4.0, 0.5, 3.0, 3.0, 1e-9, 0.0, 2.0, 1.0};
#define N_NAMES (sizeof names / sizeof names[0])

static void pick(const struct qp_sens_blocks *b, int threshold, enum qp_block_agg agg) {
    struct qp_pick_options o;
    qp_pick_options_default(&o);
    o.blocks = b;
    o.agg = agg;
    o.threshold_mode = threshold;
    o.threshold = 0.75;
    o.coverage = 0.8;
    struct qp_pick_result *r = NULL;
    struct qp_error err = {0};
    check(qp_sens_pick(names, scores, N_NAMES, &o, &r, &err) == QP_OK, "a pick failed");
    check(r->n_excluded <= N_NAMES, "more exclusions than names");
    unsigned char seen[N_NAMES] = {0};
    double mass = 0;
    for (size_t i = 0; i < r->n_excluded; i++) {
        check(r->excluded[i] < N_NAMES, "an excluded index out of range");
        check(!seen[r->excluded[i]], "a name excluded twice");
        seen[r->excluded[i]] = 1;
        mass += scores[r->excluded[i]];
    }
    check(mass <= 13.5 + 1e-9 && r->n_chosen_groups <= r->n_groups, "picked more than there is");
    qp_pick_result_free(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct qp_sens_blocks *b = NULL;
    struct qp_error err = {0};
    if (qp_sens_blocks_parse((const char *)data, size, "fuzz", &b, &err) != QP_OK) {
        check(err.msg[0] != '\0' && b == NULL, "a refusal without a message, or with blocks");
        return 0;
    }
    check(b->n > 0, "accepted blocks without a group");
    for (int agg = QP_BLOCK_SUM; agg <= QP_BLOCK_MEAN; agg++)
        for (int thr = 0; thr < 2; thr++)
            pick(b, thr, (enum qp_block_agg)agg);
    qp_sens_blocks_free(b);
    return 0;
}
