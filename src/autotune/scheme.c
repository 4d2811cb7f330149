/* Schemes: generation and application to a placement (autotune/scheme.h). */
#include "autotune/scheme.h"

#include <stdlib.h>
#include <string.h>

#include "core/size.h"

uint64_t *qp_scheme_alloc(size_t n_points) {
    return calloc(QP_SCHEME_WORDS(n_points), sizeof(uint64_t));
}

void qp_scheme_from_placement(const struct qp_regions *rs, size_t r, const struct qp_placement *p,
                              uint64_t *bits) {
    const struct qp_region *reg = &rs->regions[r];
    const struct qp_graph *g = rs->graph;
    memset(bits, 0, QP_SCHEME_WORDS(reg->n_points) * sizeof *bits);
    for (size_t k = 0; k < reg->n_points; k++) {
        const struct qp_region_point *pt = &reg->points[k];
        int is_weight = 0;
        size_t i = 0;
        if (!qp_placement_find(p, g->nodes[pt->node].name, pt->input, &is_weight, &i)) continue;
        if (is_weight != pt->is_weight) continue;
        const char *t = is_weight ? p->weights[i].tensor : p->edges[i].tensor;
        if (strcmp(t, g->values[pt->value].name) == 0) qp_scheme_set(bits, k, 1);
    }
}

void qp_scheme_list_free(struct qp_scheme_list *l) {
    if (!l) return;
    free(l->bits);
    memset(l, 0, sizeof *l);
}

static uint64_t next_random(uint64_t *state) {
    uint64_t x = (*state += 0x9E3779B97F4A7C15ull);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Mutation `kind` of `s` (in place) on pattern points of the pattern's first instance `reg`. */
static void mutate(const struct qp_region *reg, uint64_t *s, unsigned kind, uint64_t *rng) {
    size_t n = reg->n_points;
    size_t k = (size_t)(next_random(rng) % n);
    switch (kind) {
    case 0: /* add one point (the first missing one from k on) */
    case 1: /* remove one point */
        for (size_t j = 0; j < n; j++) {
            size_t q = (k + j) % n;
            if (qp_scheme_get(s, q) == (int)kind) {
                qp_scheme_set(s, q, !kind);
                return;
            }
        }
        return;
    case 2: /* flip a pair: point k and the next point on the same node */
        qp_scheme_set(s, k, !qp_scheme_get(s, k));
        if (k + 1 < n && reg->points[k + 1].pos == reg->points[k].pos)
            qp_scheme_set(s, k + 1, !qp_scheme_get(s, k + 1));
        else if (k > 0 && reg->points[k - 1].pos == reg->points[k].pos)
            qp_scheme_set(s, k - 1, !qp_scheme_get(s, k - 1));
        return;
    case 3: /* all on */
        for (size_t j = 0; j < n; j++)
            qp_scheme_set(s, j, 1);
        return;
    default: /* all off */
        memset(s, 0, QP_SCHEME_WORDS(n) * sizeof *s);
        return;
    }
}

static int listed(const struct qp_scheme_list *l, const uint64_t *s) {
    for (size_t i = 0; i < l->n; i++)
        if (memcmp(qp_scheme_list_at(l, i), s, l->words * sizeof *s) == 0) return 1;
    return 0;
}

static const struct qp_region *first_instance(const struct qp_regions *rs, size_t pattern) {
    for (size_t r = 0; r < rs->n_regions; r++)
        if (rs->regions[r].pattern == (int)pattern) return &rs->regions[r];
    return NULL;
}

enum qp_status qp_schemes_generate(const struct qp_regions *rs, size_t pattern,
                                   const uint64_t *seed_bits, uint64_t seed, size_t max,
                                   struct qp_scheme_list *out, struct qp_error *err) {
    const struct qp_region *reg = pattern < rs->n_patterns ? first_instance(rs, pattern) : NULL;
    if (!reg || max == 0)
        return qp_error_set(err, QP_ERR_USAGE, "autotune schemes: no pattern %zu or max 0",
                            pattern);
    size_t words = QP_SCHEME_WORDS(reg->n_points);
    /* 2^n distinct schemes at most */
    if (reg->n_points < 20 && max > ((size_t)1 << reg->n_points)) max = (size_t)1 << reg->n_points;
    struct qp_scheme_list l = {.words = words};
    uint64_t *cand = calloc(words, sizeof *cand);
    l.bits = qp_malloc_n(max, words * sizeof *l.bits);
    if (!cand || !l.bits) {
        free(cand);
        free(l.bits);
        return qp_error_set(err, QP_ERR_NOMEM, "autotune schemes: out of memory");
    }
    if (seed_bits)
        memcpy(l.bits, seed_bits, words * sizeof *l.bits);
    else
        memset(l.bits, 0, words * sizeof *l.bits);
    l.n = 1;
    uint64_t rng = seed;
    for (size_t attempt = 0; l.n < max && reg->n_points > 0 && attempt < 100 * max; attempt++) {
        size_t base = (size_t)(next_random(&rng) % l.n);
        memcpy(cand, qp_scheme_list_at(&l, base), words * sizeof *cand);
        mutate(reg, cand, (unsigned)(next_random(&rng) % 5), &rng);
        if (listed(&l, cand)) continue;
        memcpy(l.bits + l.n * words, cand, words * sizeof *cand);
        l.n++;
    }
    free(cand);
    *out = l;
    return QP_OK;
}

static enum qp_status add_point(struct qp_placement *p, const struct qp_graph *g,
                                const struct qp_region_point *pt, struct qp_error *err) {
    const char *node = g->nodes[pt->node].name, *tensor = g->values[pt->value].name;
    if (pt->is_weight)
        return qp_placement_add_weight(p, tensor, node, pt->input, pt->axis, "autotune.scheme",
                                       err);
    return qp_placement_add_edge(p, tensor, node, pt->input, "autotune.scheme", err);
}

/* by_region: choice is indexed by region, else by pattern */
static enum qp_status apply(const struct qp_regions *rs, const struct qp_placement *base,
                            const uint64_t *const *choice, int by_region, struct qp_placement **out,
                            struct qp_error *err) {
    struct qp_placement *p = NULL;
    enum qp_status st = qp_placement_copy(base, &p, err);
    const struct qp_graph *g = rs->graph;
    for (size_t r = 0; st == QP_OK && r < rs->n_regions; r++) {
        const struct qp_region *reg = &rs->regions[r];
        const uint64_t *bits = choice[by_region ? (int)r : reg->pattern];
        if (!bits) continue;
        for (size_t k = 0; k < reg->n_points; k++)
            qp_placement_remove(p, g->nodes[reg->points[k].node].name, reg->points[k].input);
        for (size_t k = 0; st == QP_OK && k < reg->n_points; k++)
            if (qp_scheme_get(bits, k)) st = add_point(p, g, &reg->points[k], err);
    }
    if (st != QP_OK) {
        qp_placement_free(p);
        return st;
    }
    *out = p;
    return QP_OK;
}

enum qp_status qp_schemes_apply(const struct qp_regions *rs, const struct qp_placement *base,
                                const uint64_t *const *choice, struct qp_placement **out,
                                struct qp_error *err) {
    return apply(rs, base, choice, 0, out, err);
}

enum qp_status qp_schemes_apply_regions(const struct qp_regions *rs,
                                        const struct qp_placement *base,
                                        const uint64_t *const *choice, struct qp_placement **out,
                                        struct qp_error *err) {
    return apply(rs, base, choice, 1, out, err);
}
