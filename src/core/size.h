/*
 * Checked size arithmetic: every size computed before an allocation goes through these, so an
 * element count from a model or a data file can never wrap around to a small buffer.
 *
 *     size_t bytes;
 *     if (!qp_size_mul(n, sizeof *rows, &bytes)) return nomem(err);   // or:
 *     float *buf = qp_malloc_n(n, sizeof *buf);                       // NULL on overflow too
 */
#ifndef QP_CORE_SIZE_H
#define QP_CORE_SIZE_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* *out = a * b; returns 1, or 0 when the product does not fit a size_t (*out unchanged). */
static inline int qp_size_mul(size_t a, size_t b, size_t *out) {
    size_t r;
    if (__builtin_mul_overflow(a, b, &r)) return 0;
    *out = r;
    return 1;
}

/* *out = a * b * c, checked the same way. */
static inline int qp_size_mul3(size_t a, size_t b, size_t c, size_t *out) {
    size_t ab;
    return qp_size_mul(a, b, &ab) && qp_size_mul(ab, c, out);
}

/* *out = a + b; 0 when the sum does not fit. */
static inline int qp_size_add(size_t a, size_t b, size_t *out) {
    size_t r;
    if (__builtin_add_overflow(a, b, &r)) return 0;
    *out = r;
    return 1;
}

/* malloc / realloc of n elements of `elem` bytes: NULL when n * elem overflows or the
 * allocation fails (realloc then leaves p untouched, as realloc does). n == 0 asks for 1 byte, so
 * a NULL return always means failure. */
static inline void *qp_malloc_n(size_t n, size_t elem) {
    size_t bytes;
    if (!qp_size_mul(n, elem, &bytes)) return NULL;
    return malloc(bytes ? bytes : 1);
}
static inline void *qp_realloc_n(void *p, size_t n, size_t elem) {
    size_t bytes;
    if (!qp_size_mul(n, elem, &bytes)) return NULL;
    return realloc(p, bytes ? bytes : 1);
}

/* n zeroed bytes (at least 1; the block is rounded up to 64) starting on a 64-byte boundary,
 * freed with free(); NULL on overflow or failure. For what vector kernels load: kernel states
 * holding weights, the arrays callers hand the engine. malloc aligns to 16 bytes only, so
 * whether such data straddled cache lines depended on the heap's history (docs/engine.md
 * "Alignment of kernel states"). */
static inline void *qp_zalloc64(size_t n) {
    if (n > SIZE_MAX - 64) return NULL;
    size_t bytes = n ? (n + 63) / 64 * 64 : 64;
    void *p = aligned_alloc(64, bytes);
    if (p) memset(p, 0, bytes);
    return p;
}

#endif
