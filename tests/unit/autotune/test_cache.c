/* The autotune pattern cache (autotune/cache.h): JSON round trip, merge and order of schemes,
 * nearest lookup by edit distance, and malformed files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "autotune/cache.h"
#include "autotune/pattern.h"
#include "autotune/region.h"
#include "autotune/scheme.h"
#include "ir/ir.h"
#include "qplace/model.h"

#define DEEP QP_TEST_DATA_DIR "/../unit/autotune/data/resnet_deep.onnx"

static struct qp_regions *regions(struct qp_model **m) {
    struct qp_error err = {0};
    struct qp_regions *rs = NULL;
    assert_int_equal(qp_model_load_file(DEEP, NULL, m, &err), QP_OK);
    assert_int_equal(qp_regions_build((*m)->graph, &rs, &err), QP_OK);
    return rs;
}

/* Every pattern gets all-off at 2 ms and all-on at 1 ms (and all-on again at 3 ms: merged). */
static struct qp_pattern_cache *filled(const struct qp_regions *rs) {
    struct qp_error err = {0};
    struct qp_pattern_cache *c = qp_pattern_cache_create();
    assert_non_null(c);
    for (size_t k = 0; k < rs->n_patterns; k++) {
        const struct qp_pattern *p = &rs->patterns[k];
        uint64_t *on = qp_scheme_alloc(p->n_points), *off = qp_scheme_alloc(p->n_points);
        for (size_t j = 0; j < p->n_points; j++)
            qp_scheme_set(on, j, 1);
        assert_int_equal(qp_pattern_cache_add(c, p, off, 2.0, &err), QP_OK);
        assert_int_equal(qp_pattern_cache_add(c, p, on, 1.0 + (double)k, &err), QP_OK);
        assert_int_equal(qp_pattern_cache_add(c, p, on, 3.0 + (double)k, &err), QP_OK);
        free(on);
        free(off);
    }
    return c;
}

static void test_round_trip(void **state) {
    (void)state;
    struct qp_model *m = NULL;
    struct qp_regions *rs = regions(&m);
    struct qp_pattern_cache *c = filled(rs), *back = NULL;
    struct qp_error err = {0};
    assert_int_equal(c->n, rs->n_patterns);
    /* pattern 0: all-on (1 ms) before all-off (2 ms); the 3 ms duplicate merged */
    assert_int_equal(c->entries[0].n_schemes, 2);
    assert_true(c->entries[0].schemes[0].latency_ms == 1.0);
    assert_int_equal(qp_scheme_get(c->entries[0].schemes[0].bits, 0), 1);
    /* pattern 2: all-off (2 ms) first */
    assert_true(c->entries[2].schemes[0].latency_ms == 2.0);
    char path[512];
    snprintf(path, sizeof path, "%s/pattern_cache_test.json", QP_TEST_BINARY_DIR);
    assert_int_equal(qp_pattern_cache_save_file(c, path, &err), QP_OK);
    assert_int_equal(qp_pattern_cache_load_file(path, &back, &err), QP_OK);
    char *a = NULL, *b = NULL;
    assert_int_equal(qp_pattern_cache_write_json(c, &a, &err), QP_OK);
    assert_int_equal(qp_pattern_cache_write_json(back, &b, &err), QP_OK);
    assert_string_equal(a, b);
    for (size_t k = 0; k < rs->n_patterns; k++) {
        size_t d = 99;
        assert_int_equal(qp_pattern_cache_nearest(back, &rs->patterns[k], 0, &d), (int)k);
        assert_int_equal(d, 0);
    }
    free(a);
    free(b);
    remove(path);
    qp_pattern_cache_free(back);
    qp_pattern_cache_free(c);
    qp_regions_free(rs);
    qp_model_free(m);
}

/* A pattern of another model: not the same signature, one op more than the repeated residual
 * block, same point count: found at distance 1 within 4, not within 0; another point count never.
 */
static void test_nearest(void **state) {
    (void)state;
    struct qp_model *m = NULL;
    struct qp_regions *rs = regions(&m);
    struct qp_pattern_cache *c = filled(rs);
    int block = rs->regions[rs->region_of[qp_graph_find_node(m->graph, "add_b2")]].pattern;
    const struct qp_pattern *bp = &rs->patterns[block];
    char *ops[16];
    assert_true(bp->n_ops < 15);
    for (size_t k = 0; k < bp->n_ops; k++)
        ops[k] = bp->ops[k];
    ops[bp->n_ops] = "Identity";
    struct qp_pattern other = {
        .signature = "other", .n_ops = bp->n_ops + 1, .ops = ops, .n_points = bp->n_points};
    size_t d = 0;
    assert_int_equal(qp_pattern_cache_nearest(c, &other, 4, &d), block);
    assert_int_equal(d, 1);
    assert_int_equal(qp_pattern_cache_nearest(c, &other, 0, &d), -1);
    other.n_points = 999; /* no pattern has that many */
    assert_int_equal(qp_pattern_cache_nearest(c, &other, 100, &d), -1);
    /* a signature already cached with another point count is refused */
    struct qp_pattern clash = *bp;
    clash.n_points++;
    uint64_t *bits = qp_scheme_alloc(clash.n_points);
    struct qp_error err = {0};
    assert_int_equal(qp_pattern_cache_add(c, &clash, bits, 1.0, &err), QP_ERR_BAD_INPUT);
    assert_int_equal(qp_pattern_cache_add(c, bp, bits, -1.0, &err), QP_ERR_USAGE);
    free(bits);
    qp_pattern_cache_free(c);
    qp_regions_free(rs);
    qp_model_free(m);
}

static void bad(const char *text, enum qp_status want, const char *in_msg) {
    struct qp_pattern_cache *c = (struct qp_pattern_cache *)(uintptr_t)1;
    struct qp_error err = {0};
    assert_int_equal(qp_pattern_cache_read_json(text, strlen(text), "cache.json", &c, &err), want);
    assert_true(c == (struct qp_pattern_cache *)(uintptr_t)1); /* untouched */
    if (!strstr(err.msg, in_msg) || !strstr(err.msg, "cache.json"))
        fail_msg("message '%s' lacks '%s'", err.msg, in_msg);
}

#define HEAD "{\"format\":\"qplace.pattern_cache\",\"version\":1,\"patterns\":["
#define ENTRY(pts, lat)                                                                            \
    "{\"signature\":\"A(x*)\",\"ops\":[\"A\"],\"n_points\":2,\"schemes\":[{\"points\":" pts        \
    ",\"latency_ms\":" lat "}]}"

static void test_malformed(void **state) {
    (void)state;
    struct qp_pattern_cache *c = NULL;
    struct qp_error err = {0};
    const char *good = HEAD ENTRY("[0,1]", "1.5") "]}";
    assert_int_equal(qp_pattern_cache_read_json(good, strlen(good), "x", &c, &err), QP_OK);
    assert_int_equal(c->n, 1);
    qp_pattern_cache_free(c);
    bad("{\"format\":", QP_ERR_BAD_INPUT, "not valid JSON");
    bad("[]", QP_ERR_BAD_INPUT, "top level");
    bad("{\"format\":\"other\",\"version\":1,\"patterns\":[]}", QP_ERR_BAD_INPUT, "format");
    bad("{\"format\":\"qplace.pattern_cache\",\"version\":2,\"patterns\":[]}", QP_ERR_UNSUPPORTED,
        "newer");
    bad(HEAD "]", QP_ERR_BAD_INPUT, "not valid JSON");
    bad(HEAD "], \"extra\": 1}", QP_ERR_BAD_INPUT, "unknown key 'extra'");
    bad(HEAD "3]}", QP_ERR_BAD_INPUT, "patterns[0] is not an object");
    bad(HEAD ENTRY("[0,2]", "1") "]}", QP_ERR_BAD_INPUT, "patterns[0].schemes[0].points");
    bad(HEAD ENTRY("[1,0]", "1") "]}", QP_ERR_BAD_INPUT, "patterns[0].schemes[0].points");
    bad(HEAD ENTRY("[0.5]", "1") "]}", QP_ERR_BAD_INPUT, "patterns[0].schemes[0].points");
    bad(HEAD ENTRY("[0]", "-1") "]}", QP_ERR_BAD_INPUT, "patterns[0].schemes[0]");
    bad(HEAD ENTRY("[0]", "\"fast\"") "]}", QP_ERR_BAD_INPUT, "patterns[0].schemes[0]");
    bad(HEAD ENTRY("[0]", "1") "," ENTRY("[1]", "2") "]}", QP_ERR_BAD_INPUT,
        "patterns[1]: signature repeated");
    bad(HEAD "{\"signature\":\"A\",\"ops\":[1],\"n_points\":1,\"schemes\":[]}]}", QP_ERR_BAD_INPUT,
        "patterns[0].ops");
    bad(HEAD "{\"signature\":\"A\",\"ops\":[],\"n_points\":-1,\"schemes\":[]}]}", QP_ERR_BAD_INPUT,
        "patterns[0].n_points");
    bad(HEAD "{\"ops\":[],\"n_points\":1,\"schemes\":[]}]}", QP_ERR_BAD_INPUT, "patterns[0] needs");
    /* a file: the message names it */
    char path[512];
    snprintf(path, sizeof path, "%s/pattern_cache_bad.json", QP_TEST_BINARY_DIR);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(HEAD ENTRY("[7]", "1") "]}", f);
    fclose(f);
    assert_int_equal(qp_pattern_cache_load_file(path, &c, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, path));
    assert_non_null(strstr(err.msg, "patterns[0].schemes[0].points"));
    remove(path);
    assert_int_equal(qp_pattern_cache_load_file(path, &c, &err), QP_ERR_IO);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_nearest),
        cmocka_unit_test(test_malformed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
