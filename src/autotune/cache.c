/* The pattern cache (autotune/cache.h). */
#include "autotune/cache.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autotune/pattern.h"
#include "autotune/scheme.h"
#include "core/file.h"
#include "core/size.h"

struct qp_pattern_cache *qp_pattern_cache_create(void) {
    return calloc(1, sizeof(struct qp_pattern_cache));
}

static void entry_release(struct qp_cache_entry *e) {
    free(e->signature);
    for (size_t k = 0; k < e->n_ops; k++)
        free(e->ops[k]);
    free(e->ops);
    for (size_t k = 0; k < e->n_schemes; k++)
        free(e->schemes[k].bits);
    free(e->schemes);
}

void qp_pattern_cache_free(struct qp_pattern_cache *c) {
    if (!c) return;
    for (size_t k = 0; k < c->n; k++)
        entry_release(&c->entries[k]);
    free(c->entries);
    free(c);
}

int qp_pattern_cache_find(const struct qp_pattern_cache *c, const char *signature) {
    for (size_t k = 0; k < c->n; k++)
        if (strcmp(c->entries[k].signature, signature) == 0) return (int)k;
    return -1;
}

/* A new entry (signature and op strings copied) at the end; NULL when out of memory. */
static struct qp_cache_entry *entry_new(struct qp_pattern_cache *c, const char *signature,
                                        char *const *ops, size_t n_ops, size_t n_points) {
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 16;
        struct qp_cache_entry *e = qp_realloc_n(c->entries, cap, sizeof *e);
        if (!e) return NULL;
        c->entries = e;
        c->cap = cap;
    }
    struct qp_cache_entry *e = &c->entries[c->n];
    memset(e, 0, sizeof *e);
    e->n_points = n_points;
    e->signature = strdup(signature);
    e->ops = calloc(n_ops + 1, sizeof *e->ops);
    e->schemes = calloc(QP_PATTERN_CACHE_MAX_SCHEMES + 1, sizeof *e->schemes);
    int ok = e->signature && e->ops && e->schemes;
    for (size_t k = 0; ok && k < n_ops; k++) {
        e->ops[k] = strdup(ops[k]);
        ok = e->ops[k] != NULL;
        e->n_ops += (size_t)ok;
    }
    if (!ok) {
        entry_release(e);
        return NULL;
    }
    c->n++;
    return e;
}

/* Inserts (bits, latency) keeping the schemes sorted and distinct; 0 when out of memory. */
static int entry_add_scheme(struct qp_cache_entry *e, const uint64_t *bits, double latency_ms) {
    size_t words = QP_SCHEME_WORDS(e->n_points);
    for (size_t k = 0; k < e->n_schemes; k++) {
        if (memcmp(e->schemes[k].bits, bits, words * sizeof *bits) != 0) continue;
        if (latency_ms >= e->schemes[k].latency_ms) return 1;
        struct qp_cached_scheme s = e->schemes[k]; /* faster now: move it up */
        s.latency_ms = latency_ms;
        for (; k > 0 && e->schemes[k - 1].latency_ms > latency_ms; k--)
            e->schemes[k] = e->schemes[k - 1];
        e->schemes[k] = s;
        return 1;
    }
    uint64_t *copy = qp_malloc_n(words, sizeof *copy);
    if (!copy) return 0;
    memcpy(copy, bits, words * sizeof *copy);
    size_t k = e->n_schemes++;
    for (; k > 0 && e->schemes[k - 1].latency_ms > latency_ms; k--)
        e->schemes[k] = e->schemes[k - 1];
    e->schemes[k] = (struct qp_cached_scheme){copy, latency_ms};
    if (e->n_schemes > QP_PATTERN_CACHE_MAX_SCHEMES) free(e->schemes[--e->n_schemes].bits);
    return 1;
}

enum qp_status qp_pattern_cache_add(struct qp_pattern_cache *c, const struct qp_pattern *p,
                                    const uint64_t *bits, double latency_ms, struct qp_error *err) {
    if (!isfinite(latency_ms) || latency_ms < 0)
        return qp_error_set(err, QP_ERR_USAGE, "pattern cache: latency %g ms is not valid",
                            latency_ms);
    int k = qp_pattern_cache_find(c, p->signature);
    struct qp_cache_entry *e = k >= 0 ? &c->entries[k] : NULL;
    if (e && e->n_points != p->n_points)
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "pattern cache: pattern '%.200s' has %zu points, its entry %zu",
                            p->signature, p->n_points, e->n_points);
    if (!e) e = entry_new(c, p->signature, p->ops, p->n_ops, p->n_points);
    if (!e || !entry_add_scheme(e, bits, latency_ms))
        return qp_error_set(err, QP_ERR_NOMEM, "pattern cache: out of memory");
    return QP_OK;
}

int qp_pattern_cache_nearest(const struct qp_pattern_cache *c, const struct qp_pattern *p,
                             size_t max_distance, size_t *distance_out) {
    int best = qp_pattern_cache_find(c, p->signature);
    size_t best_d = best >= 0 ? 0 : SIZE_MAX;
    for (size_t k = 0; best < 0 && k < c->n; k++) {
        const struct qp_cache_entry *e = &c->entries[k];
        if (e->n_points != p->n_points) continue;
        /* SIZE_MAX (out of memory) is never within the threshold */
        size_t d = qp_pattern_distance(e->ops, e->n_ops, p->ops, p->n_ops);
        if (d <= max_distance && d < best_d) best_d = d;
    }
    for (size_t k = 0; best < 0 && best_d != SIZE_MAX && k < c->n; k++) {
        const struct qp_cache_entry *e = &c->entries[k];
        if (e->n_points == p->n_points &&
            qp_pattern_distance(e->ops, e->n_ops, p->ops, p->n_ops) == best_d)
            best = (int)k;
    }
    if (best >= 0 && distance_out) *distance_out = best_d;
    return best;
}

/* ---- JSON ---------------------------------------------------------------------------------- */

static cJSON *entry_json(const struct qp_cache_entry *e) {
    cJSON *o = cJSON_CreateObject(), *ops = cJSON_AddArrayToObject(o, "ops");
    cJSON *schemes = NULL;
    if (!o || !ops || !cJSON_AddStringToObject(o, "signature", e->signature)) goto fail;
    for (size_t k = 0; k < e->n_ops; k++)
        if (!cJSON_AddItemToArray(ops, cJSON_CreateString(e->ops[k]))) goto fail;
    if (!cJSON_AddNumberToObject(o, "n_points", (double)e->n_points)) goto fail;
    if (!(schemes = cJSON_AddArrayToObject(o, "schemes"))) goto fail;
    for (size_t k = 0; k < e->n_schemes; k++) {
        cJSON *s = cJSON_CreateObject(), *pts = s ? cJSON_AddArrayToObject(s, "points") : NULL;
        if (!s || !cJSON_AddItemToArray(schemes, s) || !pts) goto fail;
        for (size_t j = 0; j < e->n_points; j++)
            if (qp_scheme_get(e->schemes[k].bits, j) &&
                !cJSON_AddItemToArray(pts, cJSON_CreateNumber((double)j)))
                goto fail;
        if (!cJSON_AddNumberToObject(s, "latency_ms", e->schemes[k].latency_ms)) goto fail;
    }
    return o;
fail:
    cJSON_Delete(o);
    return NULL;
}

enum qp_status qp_pattern_cache_write_json(const struct qp_pattern_cache *c, char **text_out,
                                           struct qp_error *err) {
    cJSON *root = cJSON_CreateObject(), *pats = NULL;
    char *text = NULL;
    int ok = root && cJSON_AddStringToObject(root, "format", QP_PATTERN_CACHE_FORMAT) &&
             cJSON_AddNumberToObject(root, "version", QP_PATTERN_CACHE_VERSION) &&
             (pats = cJSON_AddArrayToObject(root, "patterns"));
    for (size_t k = 0; ok && k < c->n; k++) {
        cJSON *e = entry_json(&c->entries[k]);
        ok = e && cJSON_AddItemToArray(pats, e);
        if (!ok) cJSON_Delete(e);
    }
    if (ok) text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) return qp_error_set(err, QP_ERR_NOMEM, "pattern cache: out of memory");
    *text_out = text;
    return QP_OK;
}

static const char *src_name(const char *source) {
    return source ? source : "<pattern cache>";
}

/* A JSON number that is an integer in [0, max]. */
static int json_count(const cJSON *it, double max, size_t *out) {
    if (!cJSON_IsNumber(it)) return 0;
    double d = it->valuedouble;
    if (!(d >= 0 && d <= max) || floor(d) != d) return 0;
    *out = (size_t)d;
    return 1;
}

#define BAD(...) qp_error_set(err, QP_ERR_BAD_INPUT, __VA_ARGS__)

static enum qp_status read_scheme(struct qp_cache_entry *e, const cJSON *s, const char *src,
                                  size_t i, size_t j, uint64_t *bits, struct qp_error *err) {
    const cJSON *pts = NULL, *lat = NULL;
    if (!cJSON_IsObject(s))
        return BAD("pattern cache '%s': patterns[%zu].schemes[%zu] is not an object", src, i, j);
    for (const cJSON *it = s->child; it; it = it->next) {
        if (it->string && strcmp(it->string, "points") == 0)
            pts = it;
        else if (it->string && strcmp(it->string, "latency_ms") == 0)
            lat = it;
        else
            return BAD("pattern cache '%s': patterns[%zu].schemes[%zu]: unknown key '%s'", src, i,
                       j, it->string ? it->string : "");
    }
    if (!cJSON_IsArray(pts) || !cJSON_IsNumber(lat) || !isfinite(lat->valuedouble) ||
        lat->valuedouble < 0)
        return BAD("pattern cache '%s': patterns[%zu].schemes[%zu] needs a 'points' array and a "
                   "non-negative 'latency_ms'",
                   src, i, j);
    memset(bits, 0, QP_SCHEME_WORDS(e->n_points) * sizeof *bits);
    size_t prev = 0, k = 0, first = 1;
    for (const cJSON *it = pts->child; it; it = it->next, first = 0) {
        if (!json_count(it, (double)e->n_points - 1, &k) || (!first && k <= prev))
            return BAD("pattern cache '%s': patterns[%zu].schemes[%zu].points: each must be an "
                       "increasing point index below %zu",
                       src, i, j, e->n_points);
        qp_scheme_set(bits, k, 1);
        prev = k;
    }
    if (!entry_add_scheme(e, bits, lat->valuedouble))
        return qp_error_set(err, QP_ERR_NOMEM, "pattern cache: out of memory");
    return QP_OK;
}

/* The entry's keys, checked for presence and type; QP_OK or QP_ERR_BAD_INPUT. */
static enum qp_status entry_keys(const cJSON *o, const char *src, size_t i, const cJSON **sig,
                                 const cJSON **ops, const cJSON **np, const cJSON **schemes,
                                 struct qp_error *err) {
    if (!cJSON_IsObject(o))
        return BAD("pattern cache '%s': patterns[%zu] is not an object", src, i);
    for (const cJSON *it = o->child; it; it = it->next) {
        const char *k = it->string ? it->string : "";
        if (strcmp(k, "signature") == 0)
            *sig = it;
        else if (strcmp(k, "ops") == 0)
            *ops = it;
        else if (strcmp(k, "n_points") == 0)
            *np = it;
        else if (strcmp(k, "schemes") == 0)
            *schemes = it;
        else
            return BAD("pattern cache '%s': patterns[%zu]: unknown key '%s'", src, i, k);
    }
    if (!cJSON_IsString(*sig) || !(*sig)->valuestring[0] || !cJSON_IsArray(*ops) ||
        !cJSON_IsArray(*schemes) || !*np)
        return BAD("pattern cache '%s': patterns[%zu] needs 'signature' (a non-empty string), "
                   "'ops', 'n_points' and 'schemes'",
                   src, i);
    for (const cJSON *it = (*ops)->child; it; it = it->next)
        if (!cJSON_IsString(it))
            return BAD("pattern cache '%s': patterns[%zu].ops: each must be a string", src, i);
    return QP_OK;
}

static enum qp_status read_entry(struct qp_pattern_cache *c, const cJSON *o, const char *src,
                                 size_t i, struct qp_error *err) {
    const cJSON *sig = NULL, *ops = NULL, *np = NULL, *schemes = NULL;
    size_t n_points = 0, n_ops = 0;
    enum qp_status st = entry_keys(o, src, i, &sig, &ops, &np, &schemes, err);
    if (st != QP_OK) return st;
    if (!json_count(np, QP_PATTERN_CACHE_MAX_POINTS, &n_points))
        return BAD("pattern cache '%s': patterns[%zu].n_points must be an integer in 0..%d", src, i,
                   QP_PATTERN_CACHE_MAX_POINTS);
    if (qp_pattern_cache_find(c, sig->valuestring) >= 0)
        return BAD("pattern cache '%s': patterns[%zu]: signature repeated", src, i);
    n_ops = (size_t)cJSON_GetArraySize(ops);
    char **names = calloc(n_ops + 1, sizeof *names);
    uint64_t *bits = qp_scheme_alloc(n_points);
    struct qp_cache_entry *e = NULL;
    if (names && bits) {
        size_t k = 0;
        for (const cJSON *it = ops->child; it; it = it->next)
            names[k++] = it->valuestring;
        e = entry_new(c, sig->valuestring, names, n_ops, n_points);
    }
    free(names);
    if (!e) st = qp_error_set(err, QP_ERR_NOMEM, "pattern cache: out of memory");
    size_t j = 0;
    for (const cJSON *it = schemes->child; st == QP_OK && it; it = it->next, j++)
        st = read_scheme(e, it, src, i, j, bits, err);
    free(bits);
    return st;
}

static enum qp_status read_root(struct qp_pattern_cache *c, const cJSON *root, const char *src,
                                struct qp_error *err) {
    const cJSON *format = NULL, *version = NULL, *pats = NULL;
    if (!cJSON_IsObject(root))
        return BAD("pattern cache '%s': top level must be a JSON object", src);
    for (const cJSON *it = root->child; it; it = it->next) {
        const char *k = it->string ? it->string : "";
        if (strcmp(k, "format") == 0)
            format = it;
        else if (strcmp(k, "version") == 0)
            version = it;
        else if (strcmp(k, "patterns") == 0)
            pats = it;
        else
            return BAD("pattern cache '%s': unknown key '%s'", src, k);
    }
    if (!cJSON_IsString(format) || strcmp(format->valuestring, QP_PATTERN_CACHE_FORMAT) != 0)
        return BAD("pattern cache '%s': 'format' must be \"%s\"", src, QP_PATTERN_CACHE_FORMAT);
    size_t v = 0;
    if (!json_count(version, 1e9, &v) || v < 1)
        return BAD("pattern cache '%s': 'version' must be a positive integer", src);
    if (v > QP_PATTERN_CACHE_VERSION)
        return qp_error_set(err, QP_ERR_UNSUPPORTED,
                            "pattern cache '%s': version %zu is newer than %d", src, v,
                            QP_PATTERN_CACHE_VERSION);
    if (!cJSON_IsArray(pats)) return BAD("pattern cache '%s': 'patterns' must be an array", src);
    size_t i = 0;
    enum qp_status st = QP_OK;
    for (const cJSON *it = pats->child; st == QP_OK && it; it = it->next, i++)
        st = read_entry(c, it, src, i, err);
    return st;
}

enum qp_status qp_pattern_cache_read_json(const char *text, size_t len, const char *source,
                                          struct qp_pattern_cache **out, struct qp_error *err) {
    const char *src = src_name(source);
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        size_t off = at && at >= text && at <= text + len ? (size_t)(at - text) : len;
        return BAD("pattern cache '%s': not valid JSON (near byte %zu)", src, off);
    }
    struct qp_pattern_cache *c = qp_pattern_cache_create();
    enum qp_status st = c ? read_root(c, root, src, err)
                          : qp_error_set(err, QP_ERR_NOMEM, "pattern cache: out of memory");
    cJSON_Delete(root);
    if (st != QP_OK) {
        qp_pattern_cache_free(c);
        return st;
    }
    *out = c;
    return QP_OK;
}

enum qp_status qp_pattern_cache_load_file(const char *path, struct qp_pattern_cache **out,
                                          struct qp_error *err) {
    char *text = NULL;
    size_t len = 0;
    enum qp_status st = qp_file_read_text(path, QP_PATTERN_CACHE_MAX_FILE, &text, &len, err);
    if (st != QP_OK) return st;
    st = qp_pattern_cache_read_json(text, len, path, out, err);
    free(text);
    return st;
}

enum qp_status qp_pattern_cache_save_file(const struct qp_pattern_cache *c, const char *path,
                                          struct qp_error *err) {
    char *text = NULL;
    enum qp_status st = qp_pattern_cache_write_json(c, &text, err);
    if (st != QP_OK) return st;
    st = qp_file_write_atomic(path, text, strlen(text), err);
    free(text);
    return st;
}
