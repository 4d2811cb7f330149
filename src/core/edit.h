/*
 * Edit distance (Levenshtein: insertions, deletions and substitutions each cost 1) between two
 * sequences of anything: the caller says whether element i of the first differs from element j
 * of the second. One row of scratch, the caller's, so short capped inputs need no allocation.
 *
 *     static int differ(size_t i, size_t j, const void *ctx) {
 *         const char *const *s = ctx;                        // {a, b}
 *         return tolower((unsigned char)s[0][i]) != tolower((unsigned char)s[1][j]);
 *     }
 *     size_t row[64];                                        // nb + 1 entries
 *     size_t d = qp_edit_distance(strlen(a), strlen(b), differ, (const char *[]){a, b}, row);
 *
 * Users: flag suggestions (cli/args.c), op-type suggestions (sensitivity/scope.c), autotune's
 * nearest pattern signature (autotune/pattern.c).
 */
#ifndef QP_CORE_EDIT_H
#define QP_CORE_EDIT_H

#include <stddef.h>

/* Nonzero when element i of the first sequence differs from element j of the second. */
typedef int (*qp_edit_differ_fn)(size_t i, size_t j, const void *ctx);

/* The edit distance between sequences of na and nb elements; row: scratch of nb + 1 entries. */
static inline size_t qp_edit_distance(size_t na, size_t nb, qp_edit_differ_fn differ,
                                      const void *ctx, size_t *row) {
    for (size_t j = 0; j <= nb; j++)
        row[j] = j;
    for (size_t i = 1; i <= na; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= nb; j++) {
            size_t up = row[j], best = diag + (differ(i - 1, j - 1, ctx) != 0);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[nb];
}

#endif
