/*
 * Bump allocator for objects that live as long as their owner (a model's IR strings, dims,
 * attribute arrays). Blocks are malloc'd on demand; everything is freed at once.
 */
#ifndef QP_CORE_ARENA_H
#define QP_CORE_ARENA_H

#include <stddef.h>

struct qp_arena;

/* Returns NULL when out of memory. */
struct qp_arena *qp_arena_create(void);
/* NULL-safe; frees every allocation made from the arena. */
void qp_arena_free(struct qp_arena *a);
/* 16-byte aligned, zeroed. NULL on overflow/out of memory (n == 0 gives a valid pointer). */
void *qp_arena_alloc(struct qp_arena *a, size_t n);
/* n * size with overflow check. */
void *qp_arena_calloc(struct qp_arena *a, size_t n, size_t size);
/* Copies a NUL-terminated string (NULL gives NULL, which is not an error). */
char *qp_arena_strdup(struct qp_arena *a, const char *s);
char *qp_arena_strndup(struct qp_arena *a, const char *s, size_t n);
/* Bytes held by the arena (for memory accounting). */
size_t qp_arena_bytes(const struct qp_arena *a);

#endif
