/*
 * Autotune schemes: which of a pattern's insertion points hold a quantizer, as a bitset over the
 * pattern's points (autotune/pattern.h numbers them the same way in every instance), and how a
 * choice of one scheme per pattern becomes a whole-model placement.
 *
 * Generation is deterministic for a seed: the seed scheme first (the trt placement's points in
 * the pattern's first instance, or any placement's), then mutations of schemes already listed
 * (add one point, remove one point, flip a pair of points on one node such as both inputs of an
 * Add, all points on, all off), chosen by a splitmix64 stream from the seed, without duplicates,
 * at most `max` schemes.
 *
 *     uint64_t *seed_bits = qp_scheme_alloc(pat->n_points);
 *     qp_scheme_from_placement(rs, region, trt, seed_bits);
 *     struct qp_scheme_list list = {0};
 *     qp_schemes_generate(rs, pattern, seed_bits, 42, 30, &list, &err);
 *     const uint64_t **choice = calloc(rs->n_patterns, sizeof *choice);   // NULL: keep base's
 *     choice[pattern] = qp_scheme_list_at(&list, 3);
 *     struct qp_placement *p = NULL;
 *     qp_schemes_apply(rs, base, choice, &p, &err);           // the placement the writer applies
 *     qp_scheme_list_free(&list);
 */
#ifndef QP_AUTOTUNE_SCHEME_H
#define QP_AUTOTUNE_SCHEME_H

#include <stddef.h>
#include <stdint.h>

#include "autotune/region.h"
#include "placement/placement.h"
#include "qplace/status.h"

/* Words of a scheme over n points. */
#define QP_SCHEME_WORDS(n) (((n) + 63) / 64 ? ((n) + 63) / 64 : 1)

static inline int qp_scheme_get(const uint64_t *bits, size_t k) {
    return (int)(bits[k / 64] >> (k % 64) & 1);
}
static inline void qp_scheme_set(uint64_t *bits, size_t k, int on) {
    if (on)
        bits[k / 64] |= (uint64_t)1 << (k % 64);
    else
        bits[k / 64] &= ~((uint64_t)1 << (k % 64));
}

/* A zeroed scheme for n points (calloc'd; free with free). NULL when out of memory. */
uint64_t *qp_scheme_alloc(size_t n_points);

/* Sets bit k of `bits` (pattern-sized, zeroed first) for each point k of region `r` that `p`
 * holds on the same tensor and of the same kind (edge or weight; borrowed for the call). */
void qp_scheme_from_placement(const struct qp_regions *rs, size_t r, const struct qp_placement *p,
                              uint64_t *bits);

/* Schemes of one pattern, in generation order; `bits` holds n * words words. */
struct qp_scheme_list {
    size_t n, words;
    uint64_t *bits;
};
static inline const uint64_t *qp_scheme_list_at(const struct qp_scheme_list *l, size_t i) {
    return l->bits + i * l->words;
}
void qp_scheme_list_free(struct qp_scheme_list *l);

/* Generates at most `max` distinct schemes of pattern `pattern` into *out (empty on entry), the
 * first `seed_bits` (NULL: all off). Returns QP_ERR_USAGE for a bad pattern or max 0,
 * QP_ERR_NOMEM. */
enum qp_status qp_schemes_generate(const struct qp_regions *rs, size_t pattern,
                                   const uint64_t *seed_bits, uint64_t seed, size_t max,
                                   struct qp_scheme_list *out, struct qp_error *err);

/* A copy of `base` (borrowed) in which every region whose pattern has a choice (choice[pattern]
 * not NULL; rs->n_patterns entries) holds exactly that scheme's points: the region's points are
 * removed, then the chosen ones added (reason "autotune.scheme"; weights with the point's axis).
 * Slots of regions without a choice, and slots that are no point, stay as in `base`. *out is a
 * new placement, written only on success. QP_ERR_BAD_INPUT from a conflicting slot, QP_ERR_NOMEM.
 */
enum qp_status qp_schemes_apply(const struct qp_regions *rs, const struct qp_placement *base,
                                const uint64_t *const *choice, struct qp_placement **out,
                                struct qp_error *err);

/* The same with one choice per region (rs->n_regions entries, NULL: keep the base's slots): the
 * trt placement's choices differ between instances of one pattern where they depend on what is
 * outside the region (docs/autotune.md), and this keeps each instance's own. */
enum qp_status qp_schemes_apply_regions(const struct qp_regions *rs,
                                        const struct qp_placement *base,
                                        const uint64_t *const *choice, struct qp_placement **out,
                                        struct qp_error *err);

#endif
