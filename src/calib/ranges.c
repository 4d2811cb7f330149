/* Calibrated ranges: the table, its JSON file and TensorRT calibration caches (ranges.h). */
#include "calib/ranges.h"
#include "core/file.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/numtext.h"
#include "core/size.h"
#include "qmath/qparams.h"

struct qp_ranges {
    size_t n, cap;
    struct qp_range *items;
    size_t hash_cap; /* power of two, >= 2 * n */
    int64_t *hash;   /* index into items, -1 empty */
    struct qp_ranges_meta meta;
    char *meta_model_path, *meta_method, *meta_source; /* owned copies behind `meta` */
};

/* ---- the table --------------------------------------------------------------------------- */

static uint64_t name_hash(const char *s) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    return h;
}

struct qp_ranges *qp_ranges_create(void) {
    struct qp_ranges *r = calloc(1, sizeof *r);
    return r;
}

static void meta_release(struct qp_ranges *r) {
    free(r->meta_model_path);
    free(r->meta_method);
    free(r->meta_source);
    r->meta_model_path = r->meta_method = r->meta_source = NULL;
    memset(&r->meta, 0, sizeof r->meta);
}

void qp_ranges_free(struct qp_ranges *r) {
    if (!r) return;
    for (size_t i = 0; i < r->n; i++)
        free((char *)r->items[i].tensor);
    free(r->items);
    free(r->hash);
    meta_release(r);
    free(r);
}

size_t qp_ranges_count(const struct qp_ranges *r) {
    return r ? r->n : 0;
}

const struct qp_range *qp_ranges_at(const struct qp_ranges *r, size_t i) {
    return r && i < r->n ? &r->items[i] : NULL;
}

static int64_t find_index(const struct qp_ranges *r, const char *tensor) {
    if (!r || !tensor || r->hash_cap == 0) return -1;
    size_t mask = r->hash_cap - 1;
    for (size_t k = name_hash(tensor) & mask;; k = (k + 1) & mask) {
        int64_t i = r->hash[k];
        if (i < 0) return -1;
        if (strcmp(r->items[i].tensor, tensor) == 0) return i;
    }
}

const struct qp_range *qp_ranges_find(const struct qp_ranges *r, const char *tensor) {
    int64_t i = find_index(r, tensor);
    return i < 0 ? NULL : &r->items[i];
}

static void hash_insert(int64_t *hash, size_t cap, const char *name, int64_t index) {
    size_t mask = cap - 1;
    size_t k = name_hash(name) & mask;
    while (hash[k] >= 0)
        k = (k + 1) & mask;
    hash[k] = index;
}

static enum qp_status grow(struct qp_ranges *r, struct qp_error *err) {
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 16;
        struct qp_range *items = qp_realloc_n(r->items, cap, sizeof *items);
        if (!items) return qp_error_set(err, QP_ERR_NOMEM, "ranges: out of memory");
        r->items = items;
        r->cap = cap;
    }
    if (2 * (r->n + 1) > r->hash_cap) {
        size_t cap = r->hash_cap ? 2 * r->hash_cap : 32;
        int64_t *hash = qp_malloc_n(cap, sizeof *hash);
        if (!hash) return qp_error_set(err, QP_ERR_NOMEM, "ranges: out of memory");
        for (size_t k = 0; k < cap; k++)
            hash[k] = -1;
        for (size_t i = 0; i < r->n; i++)
            hash_insert(hash, cap, r->items[i].tensor, (int64_t)i);
        free(r->hash);
        r->hash = hash;
        r->hash_cap = cap;
    }
    return QP_OK;
}

enum qp_status qp_ranges_set(struct qp_ranges *r, const struct qp_range *range,
                             struct qp_error *err) {
    if (!r || !range || !range->tensor || !range->tensor[0])
        return qp_error_set(err, QP_ERR_USAGE, "ranges: set needs a table and a tensor name");
    if (!isfinite(range->lo) || !isfinite(range->hi) || !isfinite(range->amax) || range->amax < 0)
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "ranges: tensor '%s': range [%g, %g] amax %g is not finite and "
                            "non-negative",
                            range->tensor, (double)range->lo, (double)range->hi,
                            (double)range->amax);
    int64_t i = find_index(r, range->tensor);
    if (i >= 0) {
        const char *name = r->items[i].tensor;
        r->items[i] = *range;
        r->items[i].tensor = name;
        return QP_OK;
    }
    enum qp_status st = grow(r, err);
    if (st != QP_OK) return st;
    char *name = strdup(range->tensor);
    if (!name) return qp_error_set(err, QP_ERR_NOMEM, "ranges: out of memory");
    r->items[r->n] = *range;
    r->items[r->n].tensor = name;
    hash_insert(r->hash, r->hash_cap, name, (int64_t)r->n);
    r->n++;
    return QP_OK;
}

const struct qp_ranges_meta *qp_ranges_get_meta(const struct qp_ranges *r) {
    return r ? &r->meta : NULL;
}

static int dup_or_null(const char *s, char **out) {
    *out = NULL;
    if (!s) return 1;
    *out = strdup(s);
    return *out != NULL;
}

enum qp_status qp_ranges_set_meta(struct qp_ranges *r, const struct qp_ranges_meta *meta,
                                  struct qp_error *err) {
    if (!r || !meta) return qp_error_set(err, QP_ERR_USAGE, "ranges: set_meta needs arguments");
    char *path, *method, *source;
    int ok = dup_or_null(meta->model_path, &path);
    ok = dup_or_null(meta->method, &method) && ok;
    ok = dup_or_null(meta->calibration_source, &source) && ok;
    if (!ok) {
        free(path);
        free(method);
        free(source);
        return qp_error_set(err, QP_ERR_NOMEM, "ranges: out of memory");
    }
    meta_release(r);
    r->meta_model_path = path;
    r->meta_method = method;
    r->meta_source = source;
    r->meta = *meta;
    r->meta.model_path = path;
    r->meta.method = method;
    r->meta.calibration_source = source;
    return QP_OK;
}

/* ---- a growing text buffer ----------------------------------------------------------------- */

struct buf {
    char *p;
    size_t n, cap;
    int oom;
};

static void buf_add(struct buf *b, const char *s, size_t len) {
    if (b->oom) return;
    if (len > SIZE_MAX - b->n - 1) {
        b->oom = 1;
        return;
    }
    if (b->n + len + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + len + 1)
            cap = cap > SIZE_MAX / 2 ? b->n + len + 1 : 2 * cap;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, len);
    b->n += len;
    b->p[b->n] = '\0';
}

static void buf_str(struct buf *b, const char *s) {
    buf_add(b, s, strlen(s));
}

static void buf_printf(struct buf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void buf_printf(struct buf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) {
        b->oom = 1; /* only short numeric fields go through here */
        return;
    }
    buf_add(b, tmp, (size_t)n);
}

/* A JSON string literal (quotes and escapes) through cJSON. */
static void buf_json_string(struct buf *b, const char *s) {
    cJSON *j = cJSON_CreateString(s ? s : "");
    char *t = j ? cJSON_PrintUnformatted(j) : NULL;
    if (!t)
        b->oom = 1;
    else
        buf_add(b, t, strlen(t));
    free(t);
    cJSON_Delete(j);
}

/* %.9g gives back the same float32; "-0" and exponents are valid JSON numbers. */
static void buf_float(struct buf *b, float v) {
    buf_printf(b, "%.9g", (double)v);
}

/* Text that reads back as the same double (core/numtext.h). */
static void buf_double(struct buf *b, const char *key, double v) {
    char tmp[QP_DOUBLE_TEXT];
    buf_str(b, key);
    buf_str(b, qp_double_text(v, tmp));
}

/* ---- atomic file writes and bounded reads ------------------------------------------------- */

static enum qp_status write_atomic(const char *path, const char *text, size_t len,
                                   struct qp_error *err) {
    return qp_file_write_atomic(path, text, len, err);
}

static enum qp_status read_file(const char *path, char **text_out, size_t *len_out,
                                struct qp_error *err) {
    return qp_file_read_text(path, QP_RANGES_MAX_FILE_BYTES, text_out, len_out, err);
}

/* ---- JSON ---------------------------------------------------------------------------------- */

static enum qp_status int8_scale(const struct qp_range *x, float *scale, struct qp_error *err) {
    int32_t zp;
    enum qp_status st = qp_qparams_from_range(QP_DTYPE_INT8, -x->amax, x->amax, 1, scale, &zp, err);
    if (st != QP_OK) return qp_error_prefix(err, "ranges: tensor '%s'", x->tensor);
    return QP_OK;
}

enum qp_status qp_ranges_write_json(const struct qp_ranges *r, const struct qp_ranges_meta *meta,
                                    char **text_out, struct qp_error *err) {
    if (!r || !text_out) return qp_error_set(err, QP_ERR_USAGE, "ranges: write_json arguments");
    if (!meta) meta = &r->meta;
    struct buf b = {0};
    buf_printf(&b, "{\n  \"format\": \"%s\",\n  \"version\": %d,\n  \"model\": ", QP_RANGES_FORMAT,
               QP_RANGES_VERSION);
    if (meta->model_path)
        buf_json_string(&b, meta->model_path);
    else
        buf_str(&b, "null");
    buf_str(&b, ",\n  \"method\": ");
    buf_json_string(&b, meta->method ? meta->method : "unknown");
    if (meta->method && strcmp(meta->method, "percentile") == 0 && meta->percentile > 0)
        buf_double(&b, ",\n  \"percentile\": ", meta->percentile);
    buf_str(&b, ",\n  \"calibration_source\": ");
    buf_json_string(&b, meta->calibration_source ? meta->calibration_source : "unknown");
    buf_printf(&b, ",\n  \"num_samples\": %llu,\n  \"tensors\": [",
               (unsigned long long)meta->num_samples);
    for (size_t i = 0; i < r->n; i++) {
        const struct qp_range *x = &r->items[i];
        float scale;
        enum qp_status st = int8_scale(x, &scale, err);
        if (st != QP_OK) {
            free(b.p);
            return st;
        }
        buf_str(&b, i ? ",\n    {\"name\": " : "\n    {\"name\": ");
        buf_json_string(&b, x->tensor);
        buf_str(&b, ", \"lo\": ");
        buf_float(&b, x->lo);
        buf_str(&b, ", \"hi\": ");
        buf_float(&b, x->hi);
        buf_str(&b, ", \"amax\": ");
        buf_float(&b, x->amax);
        buf_str(&b, ", \"scale\": ");
        buf_float(&b, scale);
        buf_printf(&b, ", \"n_values\": %llu, \"n_nan\": %llu, \"n_inf\": %llu}",
                   (unsigned long long)x->n_values, (unsigned long long)x->n_nan,
                   (unsigned long long)x->n_inf);
    }
    buf_str(&b, r->n ? "\n  ]\n}\n" : "]\n}\n");
    if (b.oom) {
        free(b.p);
        return qp_error_set(err, QP_ERR_NOMEM, "ranges: out of memory writing JSON");
    }
    *text_out = b.p;
    return QP_OK;
}

enum qp_status qp_ranges_save_json(const struct qp_ranges *r, const struct qp_ranges_meta *meta,
                                   const char *path, struct qp_error *err) {
    if (!path) return qp_error_set(err, QP_ERR_USAGE, "ranges: save_json needs a path");
    char *text = NULL;
    enum qp_status st = qp_ranges_write_json(r, meta, &text, err);
    if (st != QP_OK) return st;
    st = write_atomic(path, text, strlen(text), err);
    free(text);
    return st;
}

/* A non-negative integer that fits in uint64 exactly (doubles are exact up to 2^53). */
static int json_count(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return 0;
    double v = j->valuedouble;
    if (!(v >= 0) || v > 9007199254740992.0 || v != floor(v)) return 0;
    *out = (uint64_t)v;
    return 1;
}

/* A number that is a finite float32 (no overflow on the conversion). */
static int json_float(const cJSON *j, float *out) {
    if (!cJSON_IsNumber(j)) return 0;
    double v = j->valuedouble;
    if (!isfinite(v) || fabs(v) > 3.4028234663852886e38) return 0;
    *out = (float)v;
    return 1;
}

#define SRC(s) ((s) ? (s) : "ranges")

static enum qp_status parse_tensor(const cJSON *t, size_t idx, const char *source,
                                   struct qp_ranges *r, struct qp_error *err) {
    if (!cJSON_IsObject(t))
        return qp_error_set(err, QP_ERR_BAD_INPUT, "%s: tensors[%zu] is not an object", SRC(source),
                            idx);
    static const char *const known[] = {"name",  "lo",    "hi",    "amax",
                                        "scale", "n_nan", "n_inf", "n_values"};
    for (const cJSON *k = t->child; k; k = k->next) {
        int ok = 0;
        for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
            ok |= k->string && strcmp(k->string, known[i]) == 0;
        if (!ok)
            return qp_error_set(err, QP_ERR_BAD_INPUT, "%s: tensors[%zu]: unknown key '%s'",
                                SRC(source), idx, k->string ? k->string : "");
    }
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
    if (!cJSON_IsString(name) || !name->valuestring[0])
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "%s: tensors[%zu]: \"name\" must be a non-empty string", SRC(source),
                            idx);
    const char *nm = name->valuestring;
    if (qp_ranges_find(r, nm))
        return qp_error_set(err, QP_ERR_BAD_INPUT, "%s: tensors[%zu]: tensor '%s' is repeated",
                            SRC(source), idx, nm);
    struct qp_range x = {.tensor = nm};
    static const char *const fnames[] = {"lo", "hi", "amax"};
    float *fields[] = {&x.lo, &x.hi, &x.amax};
    for (int i = 0; i < 3; i++)
        if (!json_float(cJSON_GetObjectItemCaseSensitive(t, fnames[i]), fields[i]))
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "%s: tensor '%s': \"%s\" must be a finite float32 number",
                                SRC(source), nm, fnames[i]);
    static const char *const cnames[] = {"n_values", "n_nan", "n_inf"};
    uint64_t *counts[] = {&x.n_values, &x.n_nan, &x.n_inf};
    for (int i = 0; i < 3; i++) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(t, cnames[i]);
        if (c && !json_count(c, counts[i]))
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "%s: tensor '%s': \"%s\" must be a non-negative integer",
                                SRC(source), nm, cnames[i]);
    }
    if (x.lo > x.hi || x.amax < 0)
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "%s: tensor '%s': needs lo <= hi and amax >= 0 (lo %g, hi %g, amax "
                            "%g)",
                            SRC(source), nm, (double)x.lo, (double)x.hi, (double)x.amax);
    const cJSON *sj = cJSON_GetObjectItemCaseSensitive(t, "scale");
    if (sj) {
        float scale, want;
        if (!json_float(sj, &scale))
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "%s: tensor '%s': \"scale\" must be a finite float32 number",
                                SRC(source), nm);
        enum qp_status st = int8_scale(&x, &want, err);
        if (st != QP_OK) return qp_error_prefix(err, "%s", SRC(source));
        if (scale != want)
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "%s: tensor '%s': scale %.9g does not match amax / 127 = %.9g",
                                SRC(source), nm, (double)scale, (double)want);
    }
    enum qp_status st = qp_ranges_set(r, &x, err);
    if (st != QP_OK) return qp_error_prefix(err, "%s", SRC(source));
    return QP_OK;
}

enum qp_status qp_ranges_read_json(const char *text, size_t len, const char *source,
                                   struct qp_ranges **out, struct qp_error *err) {
    if (!text || !out) return qp_error_set(err, QP_ERR_USAGE, "ranges: read_json arguments");
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        size_t off = at && at >= text && at <= text + len ? (size_t)(at - text) : 0;
        return qp_error_set(err, QP_ERR_BAD_INPUT, "%s: not valid JSON (near byte %zu)",
                            SRC(source), off);
    }
    struct qp_ranges *r = qp_ranges_create();
    enum qp_status st = QP_OK;
    if (!r) {
        st = qp_error_set(err, QP_ERR_NOMEM, "%s: out of memory", SRC(source));
        goto done;
    }
    if (!cJSON_IsObject(root)) {
        st =
            qp_error_set(err, QP_ERR_BAD_INPUT, "%s: the top level must be an object", SRC(source));
        goto done;
    }
    static const char *const known[] = {"format",      "version",    "model",
                                        "method",      "percentile", "calibration_source",
                                        "num_samples", "tensors"};
    for (const cJSON *k = root->child; k; k = k->next) {
        int ok = 0;
        for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
            ok |= k->string && strcmp(k->string, known[i]) == 0;
        if (!ok) {
            st = qp_error_set(err, QP_ERR_BAD_INPUT, "%s: unknown key '%s'", SRC(source),
                              k->string ? k->string : "");
            goto done;
        }
    }
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, QP_RANGES_FORMAT) != 0) {
        st = qp_error_set(err, QP_ERR_BAD_INPUT, "%s: \"format\" must be \"%s\"", SRC(source),
                          QP_RANGES_FORMAT);
        goto done;
    }
    uint64_t version;
    if (!json_count(cJSON_GetObjectItemCaseSensitive(root, "version"), &version) || version < 1) {
        st = qp_error_set(err, QP_ERR_BAD_INPUT, "%s: \"version\" must be a positive integer",
                          SRC(source));
        goto done;
    }
    if (version > QP_RANGES_VERSION) {
        st = qp_error_set(err, QP_ERR_UNSUPPORTED,
                          "%s: version %llu is newer than this qplace reads (%d)", SRC(source),
                          (unsigned long long)version, QP_RANGES_VERSION);
        goto done;
    }
    struct qp_ranges_meta meta = {0};
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (j && !cJSON_IsNull(j) && !cJSON_IsString(j)) {
        st = qp_error_set(err, QP_ERR_BAD_INPUT, "%s: \"model\" must be a string or null",
                          SRC(source));
        goto done;
    }
    meta.model_path = cJSON_IsString(j) ? j->valuestring : NULL;
    static const char *const skeys[] = {"method", "calibration_source"};
    const char **sdst[] = {&meta.method, &meta.calibration_source};
    for (int i = 0; i < 2; i++) {
        j = cJSON_GetObjectItemCaseSensitive(root, skeys[i]);
        if (!cJSON_IsString(j)) {
            st = qp_error_set(err, QP_ERR_BAD_INPUT, "%s: \"%s\" must be a string", SRC(source),
                              skeys[i]);
            goto done;
        }
        *sdst[i] = j->valuestring;
    }
    j = cJSON_GetObjectItemCaseSensitive(root, "percentile");
    if (j) {
        if (!cJSON_IsNumber(j) || !(j->valuedouble > 0 && j->valuedouble <= 100)) {
            st = qp_error_set(err, QP_ERR_BAD_INPUT, "%s: \"percentile\" must be in (0, 100]",
                              SRC(source));
            goto done;
        }
        meta.percentile = j->valuedouble;
    }
    /* Absent means unknown (0): a TensorRT cache says "Percentile" without the value. */
    j = cJSON_GetObjectItemCaseSensitive(root, "num_samples");
    if (j && !json_count(j, &meta.num_samples)) {
        st = qp_error_set(err, QP_ERR_BAD_INPUT,
                          "%s: \"num_samples\" must be a non-negative integer", SRC(source));
        goto done;
    }
    const cJSON *tensors = cJSON_GetObjectItemCaseSensitive(root, "tensors");
    if (!cJSON_IsArray(tensors)) {
        st = qp_error_set(err, QP_ERR_BAD_INPUT, "%s: \"tensors\" must be an array", SRC(source));
        goto done;
    }
    size_t idx = 0;
    for (const cJSON *t = tensors->child; t; t = t->next, idx++)
        if ((st = parse_tensor(t, idx, source, r, err)) != QP_OK) goto done;
    st = qp_ranges_set_meta(r, &meta, err);
done:
    cJSON_Delete(root);
    if (st != QP_OK) {
        qp_ranges_free(r);
        return st;
    }
    *out = r;
    return QP_OK;
}

enum qp_status qp_ranges_load_json(const char *path, struct qp_ranges **out, struct qp_error *err) {
    if (!path || !out) return qp_error_set(err, QP_ERR_USAGE, "ranges: load_json arguments");
    char *text;
    size_t len;
    enum qp_status st = read_file(path, &text, &len, err);
    if (st != QP_OK) return st;
    st = qp_ranges_read_json(text, len, path, out, err);
    free(text);
    return st;
}

/* ---- TensorRT calibration cache ------------------------------------------------------------ */

static uint32_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_float(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

enum qp_status qp_ranges_write_trt_cache(const struct qp_ranges *r, const char *method,
                                         int trt_version, char **text_out, struct qp_error *err) {
    if (!r || !text_out)
        return qp_error_set(err, QP_ERR_USAGE, "ranges: write_trt_cache arguments");
    if (trt_version < 0 || trt_version > 99999999)
        return qp_error_set(err, QP_ERR_USAGE, "TensorRT cache: version %d out of range",
                            trt_version);
    if (!method) method = r->meta.method;
    const char *calibrator =
        method && strcmp(method, "max") == 0 ? "MinMaxCalibration" : "EntropyCalibration2";
    struct buf b = {0};
    buf_printf(&b, "TRT-%d-%s\n", trt_version, calibrator);
    for (size_t i = 0; i < r->n; i++) {
        const struct qp_range *x = &r->items[i];
        if (strpbrk(x->tensor, "\r\n")) {
            free(b.p);
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "TensorRT cache: tensor name '%s' holds a line break", x->tensor);
        }
        float scale;
        enum qp_status st = int8_scale(x, &scale, err);
        if (st != QP_OK) {
            free(b.p);
            return st;
        }
        buf_add(&b, x->tensor, strlen(x->tensor));
        buf_printf(&b, ": %08x\n", (unsigned)float_bits(scale));
    }
    if (b.oom) {
        free(b.p);
        return qp_error_set(err, QP_ERR_NOMEM, "TensorRT cache: out of memory");
    }
    *text_out = b.p;
    return QP_OK;
}

enum qp_status qp_ranges_save_trt_cache(const struct qp_ranges *r, const char *method,
                                        int trt_version, const char *path, struct qp_error *err) {
    if (!path) return qp_error_set(err, QP_ERR_USAGE, "ranges: save_trt_cache needs a path");
    char *text = NULL;
    enum qp_status st = qp_ranges_write_trt_cache(r, method, trt_version, &text, err);
    if (st != QP_OK) return st;
    st = write_atomic(path, text, strlen(text), err);
    free(text);
    return st;
}

/* amax with amax / 127 == scale exactly when such a float exists near scale * 127. */
static float amax_from_scale(float scale) {
    float a = scale * 127.0f;
    if (!isfinite(a)) return a;
    if (a / 127.0f == scale) return a;
    float up = nextafterf(a, INFINITY), down = nextafterf(a, 0.0f);
    if (up / 127.0f == scale) return up;
    if (down / 127.0f == scale) return down;
    return a;
}

static const struct {
    const char *calibrator, *method;
} trt_calibrators[] = {
    {"EntropyCalibration2", "entropy"},
    {"EntropyCalibration", "entropy"},
    {"MinMaxCalibration", "max"},
    {"LegacyCalibration", "legacy"},
    {"PercentileCalibration", "percentile"},
};

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

enum qp_status qp_ranges_read_trt_cache(const char *text, size_t len, const char *source,
                                        struct qp_ranges **out, struct qp_error *err) {
    if (!text || !out) return qp_error_set(err, QP_ERR_USAGE, "ranges: read_trt_cache arguments");
    const char *src = source ? source : "TensorRT cache";
    if (memchr(text, '\0', len))
        return qp_error_set(err, QP_ERR_BAD_INPUT, "%s: holds a NUL byte (not a text file)", src);
    struct qp_ranges *r = qp_ranges_create();
    if (!r) return qp_error_set(err, QP_ERR_NOMEM, "%s: out of memory", src);
    enum qp_status st = QP_OK;
    char *name = NULL;
    const char *method = NULL;
    size_t pos = 0, line = 0;
    int seen_blank = 0;
    while (pos < len) {
        line++;
        const char *s = text + pos;
        const char *nl = memchr(s, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - s) : len - pos;
        pos += n + (nl ? 1 : 0);
        if (n > 0 && s[n - 1] == '\r') n--;
        if (memchr(s, '\r', n)) {
            st = qp_error_set(err, QP_ERR_BAD_INPUT, "%s:%zu: stray carriage return", src, line);
            goto done;
        }
        if (line == 1) {
            /* TRT-<digits>-<calibrator> */
            size_t k = 4;
            if (n < 6 || memcmp(s, "TRT-", 4) != 0) goto bad_header;
            while (k < n && s[k] >= '0' && s[k] <= '9')
                k++;
            if (k == 4 || k - 4 > 8 || k >= n || s[k] != '-') goto bad_header;
            k++;
            for (size_t c = 0; c < sizeof trt_calibrators / sizeof trt_calibrators[0]; c++) {
                size_t cl = strlen(trt_calibrators[c].calibrator);
                if (n - k == cl && memcmp(s + k, trt_calibrators[c].calibrator, cl) == 0)
                    method = trt_calibrators[c].method;
            }
            if (!method) goto bad_header;
            continue;
        bad_header:
            st = qp_error_set(err, QP_ERR_BAD_INPUT,
                              "%s:1: not a TensorRT calibration cache header (expected "
                              "TRT-<version>-<EntropyCalibration2|EntropyCalibration|"
                              "MinMaxCalibration|LegacyCalibration|PercentileCalibration>)",
                              src);
            goto done;
        }
        if (n == 0) {
            seen_blank = 1;
            continue;
        }
        if (seen_blank) {
            st = qp_error_set(err, QP_ERR_BAD_INPUT, "%s:%zu: entry after a blank line", src, line);
            goto done;
        }
        /* <name>: <8 hex digits> — the value is the last 8 characters after ": ". */
        if (n < 11 || s[n - 10] != ':' || s[n - 9] != ' ') {
            st = qp_error_set(err, QP_ERR_BAD_INPUT, "%s:%zu: expected '<tensor>: <8 hex digits>'",
                              src, line);
            goto done;
        }
        uint32_t bits = 0;
        for (size_t k = n - 8; k < n; k++) {
            int v = hexval(s[k]);
            if (v < 0) {
                st = qp_error_set(err, QP_ERR_BAD_INPUT, "%s:%zu: '%.8s' is not 8 hex digits", src,
                                  line, s + n - 8);
                goto done;
            }
            bits = bits << 4 | (uint32_t)v;
        }
        size_t nlen = n - 10;
        name = malloc(nlen + 1);
        if (!name) {
            st = qp_error_set(err, QP_ERR_NOMEM, "%s: out of memory", src);
            goto done;
        }
        memcpy(name, s, nlen);
        name[nlen] = '\0';
        float scale = bits_float(bits);
        if (!isfinite(scale) || scale < 0 || (scale == 0 && (bits >> 31))) {
            st = qp_error_set(err, QP_ERR_BAD_INPUT,
                              "%s:%zu: tensor '%s': scale 0x%08x is not a finite, non-negative "
                              "float32",
                              src, line, name, (unsigned)bits);
            goto done;
        }
        if (qp_ranges_find(r, name)) {
            st = qp_error_set(err, QP_ERR_BAD_INPUT, "%s:%zu: tensor '%s' is repeated", src, line,
                              name);
            goto done;
        }
        float amax = amax_from_scale(scale);
        if (!isfinite(amax)) {
            st = qp_error_set(err, QP_ERR_BAD_INPUT,
                              "%s:%zu: tensor '%s': scale %g gives an amax beyond float32", src,
                              line, name, (double)scale);
            goto done;
        }
        struct qp_range x = {.tensor = name, .lo = -amax, .hi = amax, .amax = amax};
        if ((st = qp_ranges_set(r, &x, err)) != QP_OK) {
            qp_error_prefix(err, "%s:%zu", src, line);
            goto done;
        }
        free(name);
        name = NULL;
    }
    if (line == 0) {
        st = qp_error_set(err, QP_ERR_BAD_INPUT, "%s: empty file (no TRT- header)", src);
        goto done;
    }
    struct qp_ranges_meta meta = {
        .model_path = NULL, .method = method, .calibration_source = "trt_cache"};
    st = qp_ranges_set_meta(r, &meta, err);
done:
    free(name);
    if (st != QP_OK) {
        qp_ranges_free(r);
        return st;
    }
    *out = r;
    return QP_OK;
}

enum qp_status qp_ranges_load_trt_cache(const char *path, struct qp_ranges **out,
                                        struct qp_error *err) {
    if (!path || !out) return qp_error_set(err, QP_ERR_USAGE, "ranges: load_trt_cache arguments");
    char *text;
    size_t len;
    enum qp_status st = read_file(path, &text, &len, err);
    if (st != QP_OK) return st;
    st = qp_ranges_read_trt_cache(text, len, path, out, err);
    free(text);
    return st;
}
