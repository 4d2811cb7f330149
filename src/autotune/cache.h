/*
 * The autotune pattern cache: for each pattern signature, the best schemes measured with their
 * latency, saved as JSON so that another run (on the same model, or on another model of the same
 * family) starts from them. A pattern of the new model that has no entry of its own may reuse the
 * nearest entry by edit distance: the Levenshtein distance between the op-type sequences
 * (autotune/pattern.h), within a threshold, among entries with the same number of points (so the
 * scheme's bits mean something there).
 *
 *     struct qp_pattern_cache *c = NULL;
 *     qp_pattern_cache_load_file("pattern_cache.json", &c, &err);      // or
 * qp_pattern_cache_create size_t d; int e = qp_pattern_cache_nearest(c, &rs->patterns[k], 4, &d);
 * // -1: nothing near if (e >= 0) seed = c->entries[e].schemes[0].bits;               // fastest
 * first qp_pattern_cache_add(c, &rs->patterns[k], bits, 1.25, &err);     // after a measurement
 *     qp_pattern_cache_save_file(c, "pattern_cache.json", &err);
 *     qp_pattern_cache_free(c);
 *
 * The file (format "qplace.pattern_cache", version 1):
 *
 *     {"format": "qplace.pattern_cache", "version": 1, "patterns": [
 *       {"signature": "Gemm[transB=1](x*,c*,c)", "ops": ["Gemm"], "n_points": 2,
 *        "schemes": [{"points": [0, 1], "latency_ms": 0.41}, {"points": [], "latency_ms": 0.5}]}]}
 *
 * `points` lists the scheme's point indices (increasing). Reading rejects what is not exactly
 * that with QP_ERR_BAD_INPUT naming the file and the entry (QP_ERR_UNSUPPORTED for a newer
 * version). Schemes of an entry are kept sorted by latency, duplicates merged (the faster kept),
 * at most QP_PATTERN_CACHE_MAX_SCHEMES.
 */
#ifndef QP_AUTOTUNE_CACHE_H
#define QP_AUTOTUNE_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "autotune/region.h"
#include "qplace/status.h"

#define QP_PATTERN_CACHE_FORMAT      "qplace.pattern_cache"
#define QP_PATTERN_CACHE_VERSION     1
#define QP_PATTERN_CACHE_MAX_SCHEMES 32
#define QP_PATTERN_CACHE_MAX_POINTS  (1 << 20)
#define QP_PATTERN_CACHE_MAX_FILE    ((size_t)64 << 20)

struct qp_cached_scheme {
    uint64_t *bits; /* QP_SCHEME_WORDS(n_points) words */
    double latency_ms;
};

struct qp_cache_entry {
    char *signature;
    size_t n_ops;
    char **ops;
    size_t n_points;
    size_t n_schemes;
    struct qp_cached_scheme *schemes; /* fastest first */
};

struct qp_pattern_cache {
    size_t n, cap;
    struct qp_cache_entry *entries;
};

/* An empty cache; NULL when out of memory. Free with qp_pattern_cache_free (NULL-safe). */
struct qp_pattern_cache *qp_pattern_cache_create(void);
void qp_pattern_cache_free(struct qp_pattern_cache *c);

/* Records scheme `bits` of pattern `p` (both borrowed for the call) at `latency_ms`. A pattern
 * with the signature of an entry but another point count is QP_ERR_BAD_INPUT; a negative or
 * non-finite latency QP_ERR_USAGE; QP_ERR_NOMEM. */
enum qp_status qp_pattern_cache_add(struct qp_pattern_cache *c, const struct qp_pattern *p,
                                    const uint64_t *bits, double latency_ms, struct qp_error *err);

/* The entry of exactly this signature, or -1. */
int qp_pattern_cache_find(const struct qp_pattern_cache *c, const char *signature);
/* The entry for pattern `p`: its own signature's (distance 0), else the entry with the same
 * point count nearest by op-sequence edit distance, at most `max_distance` (ties: the earlier
 * entry). Sets *distance_out (may be NULL) and returns the entry index, or -1. */
int qp_pattern_cache_nearest(const struct qp_pattern_cache *c, const struct qp_pattern *p,
                             size_t max_distance, size_t *distance_out);

/* JSON text (malloc'd into *text_out; caller frees). QP_ERR_NOMEM. */
enum qp_status qp_pattern_cache_write_json(const struct qp_pattern_cache *c, char **text_out,
                                           struct qp_error *err);
/* Parses `len` bytes of `text` (borrowed); `source` names it in messages (may be NULL). *out is
 * a new cache, written only on success. */
enum qp_status qp_pattern_cache_read_json(const char *text, size_t len, const char *source,
                                          struct qp_pattern_cache **out, struct qp_error *err);
/* Files: QP_ERR_IO when unreadable/unwritable; saving is atomic. */
enum qp_status qp_pattern_cache_load_file(const char *path, struct qp_pattern_cache **out,
                                          struct qp_error *err);
enum qp_status qp_pattern_cache_save_file(const struct qp_pattern_cache *c, const char *path,
                                          struct qp_error *err);

#endif
