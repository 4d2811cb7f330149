/*
 * Comparators for qsort shared by the modules.
 *
 *     qsort(names, n, sizeof *names, qp_cmp_strp);   // const char *names[n], by strcmp
 */
#ifndef QP_CORE_SORT_H
#define QP_CORE_SORT_H

#include <string.h>

/* Orders an array of C strings (each element a `const char *` or `char *`) by strcmp. */
static inline int qp_cmp_strp(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

#endif
