/* Out of memory is an ordinary error in regions, patterns, schemes and the pattern cache: the
 * k-th allocation made while they run fails, for every k, and each call must return QP_OK or
 * QP_ERR_NOMEM with a message, never crash, and free every block it allocated (the graph's new
 * topological order excepted: the graph keeps it). Allocations are counted
 * through this program's own malloc/calloc/realloc, which replace the C library's (glibc
 * supports that) and fail only while `armed`; so the test means nothing under valgrind, which
 * replaces them again. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "autotune/cache.h"
#include "autotune/region.h"
#include "autotune/scheme.h"
#include "ir/ir.h"
#include "placement/placement.h"
#include "qplace/model.h"

/* Under AddressSanitizer the C library's allocator is ASan's (strdup and others allocate there),
 * so replacing malloc would mix two heaps: the test is skipped in that build. */
#if defined(__SANITIZE_ADDRESS__)
#define QP_REPLACE_MALLOC 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define QP_REPLACE_MALLOC 0
#endif
#endif
#ifndef QP_REPLACE_MALLOC
#define QP_REPLACE_MALLOC 1
#endif

extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);
extern void __libc_free(void *p);

static int armed;
static long count, fail_at = -1;
/* Blocks allocated while armed and not yet freed (a leak check without a sanitizer). */
#define MAX_LIVE 8192
static void *live[MAX_LIVE];
static size_t n_live;
static int overflow;

/* Forgets p; 1 when it was tracked. */
static int untrack(void *p) {
    for (size_t k = n_live; p && k-- > 0;)
        if (live[k] == p) {
            live[k] = live[--n_live];
            return 1;
        }
    return 0;
}

#if QP_REPLACE_MALLOC
static void track(void *p) {
    if (!p || !armed) return;
    if (n_live < MAX_LIVE)
        live[n_live++] = p;
    else
        overflow = 1;
}

/* A place for a debugger's breakpoint: the allocation that fails. */
__attribute__((noinline)) static void failing(long k) {
    __asm__ volatile("" ::"r"(k));
}

static int fail_now(void) {
    if (!armed || count++ != fail_at) return 0;
    failing(fail_at);
    return 1;
}
void *malloc(size_t n) {
    void *p = fail_now() ? NULL : __libc_malloc(n);
    track(p);
    return p;
}
void *calloc(size_t n, size_t size) {
    void *p = fail_now() ? NULL : __libc_calloc(n, size);
    track(p);
    return p;
}
void *realloc(void *p, size_t n) {
    if (fail_now()) return NULL;
    /* a block from before arming (the graph's own arrays) stays untracked when it moves */
    int was = untrack(p);
    void *q = __libc_realloc(p, n);
    if (was || !p)
        track(q);
    else if (!q)
        track(p);
    return q;
}
void free(void *p) {
    untrack(p);
    __libc_free(p);
}
#endif

static int ok_or_nomem(enum qp_status st, const struct qp_error *err) {
    if (st == QP_OK) return 1;
    if (st != QP_ERR_NOMEM || !err->msg[0]) fail_msg("status %d, message '%s'", st, err->msg);
    return 0;
}

/* The whole chain once; the k-th allocation fails when fail_at == k. */
static void chain(struct qp_model *m) {
    struct qp_error err = {0};
    struct qp_regions *rs = NULL;
    struct qp_scheme_list l = {0};
    struct qp_placement *base = NULL, *out = NULL;
    struct qp_pattern_cache *c = NULL, *back = NULL;
    char *text = NULL;
    const uint64_t **choice = NULL;
    armed = 1;
    if (!ok_or_nomem(qp_regions_build(m->graph, &rs, &err), &err)) goto done;
    if (!ok_or_nomem(qp_schemes_generate(rs, 1, NULL, 7, 20, &l, &err), &err)) goto done;
    if (!(base = qp_placement_create()) || !(choice = calloc(rs->n_patterns, sizeof *choice)))
        goto done;
    choice[1] = l.bits + l.words;
    if (!ok_or_nomem(qp_schemes_apply(rs, base, choice, &out, &err), &err)) goto done;
    if (!(c = qp_pattern_cache_create())) goto done;
    for (size_t k = 0; k < l.n; k++)
        if (!ok_or_nomem(qp_pattern_cache_add(c, &rs->patterns[1], qp_scheme_list_at(&l, k),
                                              (double)k, &err),
                         &err))
            goto done;
    if (!ok_or_nomem(qp_pattern_cache_write_json(c, &text, &err), &err)) goto done;
    /* cJSON returns NULL for an allocation failure inside its parser as for bad text, so the
     * reader can only say "not valid JSON" then: an error with a message all the same */
    enum qp_status st = qp_pattern_cache_read_json(text, strlen(text), "x", &back, &err);
    if (!(st == QP_ERR_BAD_INPUT && strstr(err.msg, "not valid JSON"))) ok_or_nomem(st, &err);
done:
    armed = 0;
    free(text);
    free(choice);
    qp_pattern_cache_free(back);
    qp_pattern_cache_free(c);
    qp_placement_free(out);
    qp_placement_free(base);
    qp_scheme_list_free(&l);
    qp_regions_free(rs);
}

static void test_every_allocation(void **state) {
    (void)state;
    if (!QP_REPLACE_MALLOC) skip();
    struct qp_error err = {0};
    struct qp_model *m = NULL;
    assert_int_equal(qp_model_load_file(QP_TEST_DATA_DIR "/../unit/autotune/data/resnet_deep.onnx",
                                        NULL, &m, &err),
                     QP_OK);
    count = 0;
    fail_at = -1;
    chain(m);
    long n = count;
    print_message("%ld allocations, each failed in turn\n", n);
    assert_true(n > 50);
    for (long k = 0; k < n; k++) {
        count = 0;
        fail_at = k;
        n_live = 0;
        chain(m);
        untrack(m->graph->topo); /* toposort's new order belongs to the graph */
        assert_false(overflow);
        if (n_live) fail_msg("allocation %ld failing leaks %zu blocks", k, n_live);
    }
    fail_at = -1;
    qp_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_every_allocation)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
