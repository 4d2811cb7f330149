/*
 * Growable arrays: the one doubling-capacity helper the modules share (placement edges and
 * weights, selection lists and rules, string builders).
 */
#ifndef QP_CORE_GROW_H
#define QP_CORE_GROW_H

#include <stddef.h>

/* Makes *arr (of *cap elements of elem bytes, realloc'd memory or NULL) hold at least need
 * elements: the capacity doubles from 16 until it does. Returns 1 on success, 0 when the size
 * would overflow or realloc fails (then *arr and *cap are unchanged and still valid). */
int qp_grow(void **arr, size_t *cap, size_t need, size_t elem);

#endif
