/*
 * Pattern signatures of autotune regions: a canonical text built from the op types, attributes
 * and topology of a region, independent of node names and of the order nodes appear in the file,
 * so repeated blocks (residual blocks, transformer layers) share one signature and one scheme.
 *
 * The canonical order: each node gets a label hash (op type and attributes), refined three times
 * with its in-region producers and consumers (Weisfeiler-Lehman); the nodes are then listed in a
 * topological order that takes, among ready nodes, the smallest hash (ties: graph order, which
 * only ever decides between nodes of equal hash). A node's text is `Op[attrs](inputs)`, each input
 * `p.o` (output o of the node at canonical position p), `x` (from outside the region), `c`
 * (constant) or `-` (omitted), with `*` after an input that is an insertion point; inputs of
 * commutative ops are sorted, and a point's canonical slot is its input's rank in that order.
 * Example, a Conv -> Relu region: `Conv[kernel_shape=1x1,...](x*,c*,c);Relu(0.0)`.
 *
 *     qp_patterns_compute(rs, &err);              // qp_regions_build calls it
 *     const struct qp_pattern *p = &rs->patterns[rs->regions[r].pattern];
 *     size_t d = qp_pattern_distance(p->ops, p->n_ops, q->ops, q->n_ops);   // Levenshtein
 */
#ifndef QP_AUTOTUNE_PATTERN_H
#define QP_AUTOTUNE_PATTERN_H

#include <stddef.h>

#include "autotune/region.h"
#include "qplace/status.h"

/* Puts every region's nodes and points in canonical order, fills rs->patterns and each region's
 * `pattern`. Returns QP_ERR_NOMEM. */
enum qp_status qp_patterns_compute(struct qp_regions *rs, struct qp_error *err);
/* Frees rs->patterns (qp_regions_free calls it). */
void qp_patterns_release(struct qp_regions *rs);

/* Levenshtein distance between two op-type sequences. SIZE_MAX when out of memory. */
size_t qp_pattern_distance(char *const *a, size_t na, char *const *b, size_t nb);

#endif
