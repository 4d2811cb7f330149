/*
 * TensorProto -> struct qp_tensor: dtype and shape checks, raw_data and typed fields, external
 * data.
 *
 * Sizes claimed by dims are never trusted for allocation: every buffer is allocated only after
 * the bytes (or elements, or external file range) actually present have been found to match.
 * Data the host can use as is (raw_data; float/int32/int64/double/uint64 fields on a
 * little-endian host) is borrowed from the unpacked message, which lives as long as the model.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/size.h"
#include "core/arena.h"
#include "onnx/onnx_io.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define HOST_LE 1
#else
#define HOST_LE 0
#endif

static const char *tname(const Onnx__TensorProto *tp) {
    return tp->name && *tp->name ? tp->name : "(unnamed)";
}

/* "[64,3,7,7]", shortened with "..." when it does not fit. */
static const char *dims_str(char *buf, size_t size, const int64_t *dims, size_t n) {
    size_t at = 0;
    buf[0] = 0;
    at += (size_t)snprintf(buf + at, size - at, "[");
    for (size_t i = 0; i < n && at < size; i++) {
        if (at + 24 >= size) {
            snprintf(buf + at, size - at, "...");
            at = strlen(buf);
            break;
        }
        at += (size_t)snprintf(buf + at, size - at, "%s%lld", i ? "," : "", (long long)dims[i]);
    }
    if (at < size) snprintf(buf + at, size - at, "]");
    return buf;
}

/* Which typed field holds a dtype's elements when raw_data is not used. */
enum typed_field { TF_FLOAT, TF_INT32, TF_STRING, TF_INT64, TF_DOUBLE, TF_UINT64, TF_COUNT };

static const char *const typed_field_names[TF_COUNT] = {
    [TF_FLOAT] = "float_data", [TF_INT32] = "int32_data",   [TF_STRING] = "string_data",
    [TF_INT64] = "int64_data", [TF_DOUBLE] = "double_data", [TF_UINT64] = "uint64_data",
};

static enum typed_field typed_field_of(enum qp_dtype dt) {
    switch (dt) {
    case QP_DTYPE_FLOAT:
    case QP_DTYPE_COMPLEX64:
        return TF_FLOAT;
    case QP_DTYPE_STRING:
        return TF_STRING;
    case QP_DTYPE_INT64:
        return TF_INT64;
    case QP_DTYPE_DOUBLE:
    case QP_DTYPE_COMPLEX128:
        return TF_DOUBLE;
    case QP_DTYPE_UINT32:
    case QP_DTYPE_UINT64:
        return TF_UINT64;
    default:
        return TF_INT32; /* int8..int32, uint8, uint16, bool, fp16, bf16, fp8, 4-bit */
    }
}

static void put_le(uint8_t *dst, uint64_t v, int nbytes) {
    for (int i = 0; i < nbytes; i++)
        dst[i] = (uint8_t)(v >> (8 * i));
}

/* Converts the typed field `f` of `tp` (n entries) to packed little-endian bytes in `dst`
 * (nbytes long) for dtype `dt`. */
static void convert_typed(const Onnx__TensorProto *tp, enum typed_field f, enum qp_dtype dt,
                          size_t n, uint8_t *dst) {
    int bits = qp_dtype_traits(dt)->bits;
    switch (f) {
    case TF_INT32:
        for (size_t i = 0; i < n; i++) {
            uint32_t v = (uint32_t)tp->int32_data[i];
            if (dt == QP_DTYPE_BOOL) v = v != 0;
            if (bits <= 8) /* 8-bit types, and 4-bit types with one byte (two elements) each */
                dst[i] = (uint8_t)v;
            else
                put_le(dst + i * (size_t)(bits / 8), v, bits / 8);
        }
        break;
    case TF_UINT64:
        for (size_t i = 0; i < n; i++)
            put_le(dst + i * (size_t)(bits / 8), tp->uint64_data[i], bits / 8);
        break;
    case TF_INT64:
        for (size_t i = 0; i < n; i++)
            put_le(dst + i * 8, (uint64_t)tp->int64_data[i], 8);
        break;
    case TF_FLOAT:
        for (size_t i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, &tp->float_data[i], 4);
            put_le(dst + i * 4, u, 4);
        }
        break;
    case TF_DOUBLE:
        for (size_t i = 0; i < n; i++) {
            uint64_t u;
            memcpy(&u, &tp->double_data[i], 8);
            put_le(dst + i * 8, u, 8);
        }
        break;
    case TF_STRING:
    case TF_COUNT:
        break;
    }
}

/* 1 when field `f` of `tp`, holding dtype `dt`, is already the packed little-endian layout. */
static int borrowable(enum typed_field f, enum qp_dtype dt) {
    if (!HOST_LE) return 0;
    switch (f) {
    case TF_FLOAT:
    case TF_INT64:
    case TF_DOUBLE:
        return 1;
    case TF_INT32:
        return dt == QP_DTYPE_INT32;
    case TF_UINT64:
        return dt == QP_DTYPE_UINT64;
    default:
        return 0;
    }
}

static const void *typed_ptr(const Onnx__TensorProto *tp, enum typed_field f) {
    switch (f) {
    case TF_FLOAT:
        return tp->float_data;
    case TF_INT32:
        return tp->int32_data;
    case TF_INT64:
        return tp->int64_data;
    case TF_DOUBLE:
        return tp->double_data;
    case TF_UINT64:
        return tp->uint64_data;
    default:
        return NULL;
    }
}

/* ---- external data ---------------------------------------------------------------------- */

/* Parses a non-negative decimal number (digits only). */
static int parse_u64(const char *s, uint64_t *out) {
    if (!s || !*s) return 0;
    uint64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return 0;
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10) return 0;
        v = v * 10 + d;
    }
    *out = v;
    return 1;
}

static size_t str_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return (size_t)h;
}

/* Records `loc` once. Hashed: a crafted model may spell one file many different ways. */
static enum qp_status note_location(struct qp_onnx_load *c, const char *loc, struct qp_error *err) {
    size_t mask = c->loc_hash_cap - 1;
    if (c->loc_hash_cap)
        for (size_t k = str_hash(loc) & mask; c->loc_hash[k]; k = (k + 1) & mask)
            if (!strcmp(c->locations[c->loc_hash[k] - 1], loc)) return QP_OK;
    if (c->n_locations == c->cap_locations) {
        size_t cap = c->cap_locations ? c->cap_locations * 2 : 8;
        const char **l = qp_realloc_n(c->locations, cap, sizeof *l);
        if (!l) return qp_error_set(err, QP_ERR_NOMEM, "out of memory");
        c->locations = l;
        c->cap_locations = cap;
    }
    c->locations[c->n_locations++] = loc;
    if (c->n_locations * 2 > c->loc_hash_cap) {
        size_t cap = c->loc_hash_cap ? c->loc_hash_cap * 2 : 32;
        size_t *h = calloc(cap, sizeof *h);
        if (!h) return qp_error_set(err, QP_ERR_NOMEM, "out of memory");
        free(c->loc_hash);
        c->loc_hash = h;
        c->loc_hash_cap = cap;
        for (size_t i = 0; i + 1 < c->n_locations; i++) {
            size_t k = str_hash(c->locations[i]) & (cap - 1);
            while (h[k])
                k = (k + 1) & (cap - 1);
            h[k] = i + 1;
        }
    }
    mask = c->loc_hash_cap - 1;
    size_t k = str_hash(loc) & mask;
    while (c->loc_hash[k])
        k = (k + 1) & mask;
    c->loc_hash[k] = c->n_locations;
    return QP_OK;
}

/* Reads exactly `n` bytes at `off`. Returns 0 and sets errno on failure (errno 0: short file). */
static int pread_all(int fd, uint8_t *dst, size_t n, uint64_t off) {
    while (n > 0) {
        size_t chunk = n > (size_t)1 << 30 ? (size_t)1 << 30 : n;
        if (off > (uint64_t)INT64_MAX) {
            errno = EOVERFLOW;
            return 0;
        }
        ssize_t r = pread(fd, dst, chunk, (off_t)off);
        if (r < 0) {
            if (errno == EINTR) continue;
            return 0;
        }
        if (r == 0) {
            errno = 0;
            return 0;
        }
        dst += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 1;
}

/* A shared tensor (qp_model_clone_shared): its bytes are the source model's, found by offset. */
static enum qp_status read_shared(const struct qp_onnx_shared *sh, const Onnx__TensorProto *tp,
                                  const char *what, const char *off_s, size_t nbytes,
                                  struct qp_tensor *t, struct qp_error *err) {
    uint64_t offset = 0;
    if (!off_s || !parse_u64(off_s, &offset))
        return qp_error_set(err, QP_ERR_INTERNAL, "%s '%s': shared tensor without an offset", what,
                            tname(tp));
    size_t lo = 0, hi = sh->n_chunks;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (sh->chunks[mid].offset < offset)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == sh->n_chunks || sh->chunks[lo].offset != offset || sh->chunks[lo].n != nbytes)
        return qp_error_set(err, QP_ERR_INTERNAL, "%s '%s': no shared bytes at offset %llu", what,
                            tname(tp), (unsigned long long)offset);
    t->data = sh->chunks[lo].data;
    t->nbytes = nbytes;
    return QP_OK;
}

static enum qp_status read_external(struct qp_onnx_load *c, const Onnx__TensorProto *tp,
                                    const char *what, size_t nbytes, struct qp_tensor *t,
                                    struct qp_error *err) {
    const char *name = tname(tp);
    const char *loc = NULL, *off_s = NULL, *len_s = NULL;
    char *full = NULL, *real = NULL;
    uint8_t *buf = NULL;
    int fd = -1;
    enum qp_status st = QP_OK;

    for (size_t i = 0; i < tp->n_external_data; i++) {
        const Onnx__StringStringEntryProto *kv = tp->external_data[i];
        const char *k = kv->key ? kv->key : "";
        const char *v = kv->value ? kv->value : "";
        if (!strcmp(k, "location"))
            loc = v;
        else if (!strcmp(k, "offset"))
            off_s = v;
        else if (!strcmp(k, "length"))
            len_s = v;
        /* "checksum" and unknown keys are informational. */
    }
    if (c->shared && loc && strcmp(loc, c->shared->location) == 0)
        return read_shared(c->shared, tp, what, off_s, nbytes, t, err);
    if (!c->dir)
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "%s '%s': uses external data, but the model was loaded from memory "
                            "without a base folder",
                            what, name);
    if (!loc || !*loc)
        return qp_error_set(err, QP_ERR_BAD_INPUT, "%s '%s': external data has no 'location'", what,
                            name);
    if (loc[0] == '/')
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "%s '%s': external data location '%s' is an absolute path; only paths "
                            "relative to the model's folder are allowed",
                            what, name, loc);
    if (qp_onnx_path_has_dotdot(loc))
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "%s '%s': external data location '%s' contains '..'; only paths "
                            "inside the model's folder are allowed",
                            what, name, loc);
    uint64_t offset = 0, length = 0;
    if (off_s && !parse_u64(off_s, &offset))
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "%s '%s': external data offset '%s' is not a decimal number", what,
                            name, off_s);
    if (len_s && !parse_u64(len_s, &length))
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "%s '%s': external data length '%s' is not a decimal number", what,
                            name, len_s);

    full = qp_onnx_path_join(c->dir, loc);
    if (!full) goto nomem;
    real = realpath(full, NULL);
    if (!real) {
        int e = errno;
        if (e == ENOMEM) goto nomem;
        st = qp_error_set(err, QP_ERR_BAD_INPUT, "%s '%s': external data file '%s' %s", what, name,
                          loc, e == ENOENT ? "does not exist" : "cannot be resolved");
        goto fail;
    }
    if (!qp_onnx_path_inside(real, c->dir) || !strcmp(real, c->dir)) {
        st = qp_error_set(err, QP_ERR_BAD_INPUT,
                          "%s '%s': external data file '%s' resolves to '%s', outside the "
                          "model's folder '%s'",
                          what, name, loc, real, c->dir);
        goto fail;
    }
    fd = open(real, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        st = qp_error_set(err, QP_ERR_BAD_INPUT, "%s '%s': cannot open external data file '%s': %s",
                          what, name, loc, strerror(errno));
        goto fail;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st =
            qp_error_set(err, QP_ERR_BAD_INPUT,
                         "%s '%s': external data file '%s' is not a regular file", what, name, loc);
        goto fail;
    }
    uint64_t fsize = (uint64_t)sb.st_size;
    if (offset > fsize) {
        st = qp_error_set(err, QP_ERR_BAD_INPUT,
                          "%s '%s': external data offset %llu is past the end of '%s' (%llu "
                          "bytes)",
                          what, name, (unsigned long long)offset, loc, (unsigned long long)fsize);
        goto fail;
    }
    if (len_s) {
        if (length > fsize - offset) {
            st = qp_error_set(err, QP_ERR_BAD_INPUT,
                              "%s '%s': external data range %llu+%llu runs past the end of '%s' "
                              "(%llu bytes)",
                              what, name, (unsigned long long)offset, (unsigned long long)length,
                              loc, (unsigned long long)fsize);
            goto fail;
        }
    } else {
        length = fsize - offset;
    }
    if (length != (uint64_t)nbytes) {
        char d[128];
        st = qp_error_set(
            err, QP_ERR_BAD_INPUT, "%s '%s': external data %s %llu bytes, dims %s of %s need %zu",
            what, name, len_s ? "length is" : "file holds", (unsigned long long)length,
            dims_str(d, sizeof d, tp->dims, tp->n_dims), qp_dtype_name(t->dtype), nbytes);
        goto fail;
    }
    if (!c->skip_external) {
        buf = malloc(nbytes ? nbytes : 1);
        if (!buf) goto nomem;
        if (!pread_all(fd, buf, nbytes, offset)) {
            st = qp_error_set(err, QP_ERR_IO, "%s '%s': reading external data file '%s': %s", what,
                              name, loc, errno ? strerror(errno) : "file shrank");
            goto fail;
        }
        uint8_t *data = buf;
        buf = NULL; /* qp_model_own frees it on failure */
        if ((st = qp_model_own(c->m, data, err)) != QP_OK) goto fail;
        t->data = data;
    }
    if ((st = note_location(c, loc, err)) != QP_OK) goto fail;
    t->nbytes = nbytes;
    t->external_location = loc;
    t->external_offset = offset;
    t->external_length = length;
    goto done;
nomem:
    st = qp_error_set(err, QP_ERR_NOMEM, "%s '%s': out of memory", what, name);
fail:
done:
    if (fd >= 0) close(fd);
    free(buf);
    free(real);
    free(full);
    return st;
}

/* ---- tensors ------------------------------------------------------------------------------ */

enum qp_status qp_onnx_tensor_from_proto(struct qp_onnx_load *c, const Onnx__TensorProto *tp,
                                         const char *what, struct qp_tensor *t,
                                         struct qp_error *err) {
    const char *name = tname(tp);
    char d[128];
    memset(t, 0, sizeof *t);
    t->name = tp->name;
    t->doc_string = tp->doc_string;
    t->origin = tp;

    int dt = tp->has_data_type ? tp->data_type : 0;
    if (!qp_dtype_valid(dt))
        return qp_error_set(err, dt ? QP_ERR_UNSUPPORTED : QP_ERR_BAD_INPUT,
                            "%s '%s': %s data_type %d", what, name,
                            dt ? "unknown" : "missing or undefined", dt);
    t->dtype = (enum qp_dtype)dt;
    if (tp->segment)
        return qp_error_set(err, QP_ERR_UNSUPPORTED,
                            "%s '%s': segmented tensors (TensorProto.segment) are not supported",
                            what, name);
    if (tp->n_dims > (size_t)INT_MAX)
        return qp_error_set(err, QP_ERR_BAD_INPUT, "%s '%s': %zu dims", what, name, tp->n_dims);
    t->rank = (int)tp->n_dims;
    t->dims = tp->dims;
    uint64_t numel = 1;
    for (size_t i = 0; i < tp->n_dims; i++) {
        if (tp->dims[i] < 0)
            return qp_error_set(err, QP_ERR_BAD_INPUT, "%s '%s': negative dimension in dims %s",
                                what, name, dims_str(d, sizeof d, tp->dims, tp->n_dims));
        uint64_t x = (uint64_t)tp->dims[i];
        if (x && numel > UINT64_MAX / x)
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "%s '%s': dims %s overflow the element count", what, name,
                                dims_str(d, sizeof d, tp->dims, tp->n_dims));
        numel *= x;
    }
    t->numel = numel;
    int external = tp->has_data_location && tp->data_location != 0;
    if (external && tp->data_location != ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL)
        return qp_error_set(err, QP_ERR_BAD_INPUT, "%s '%s': unknown data_location %d", what, name,
                            (int)tp->data_location);

    size_t counts[TF_COUNT] = {
        [TF_FLOAT] = tp->n_float_data,   [TF_INT32] = tp->n_int32_data,
        [TF_STRING] = tp->n_string_data, [TF_INT64] = tp->n_int64_data,
        [TF_DOUBLE] = tp->n_double_data, [TF_UINT64] = tp->n_uint64_data,
    };
    enum typed_field want = typed_field_of(t->dtype);
    for (int f = 0; f < TF_COUNT; f++) {
        if (!counts[f]) continue;
        if (f != (int)want)
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "%s '%s': holds %s, which a %s tensor does not use", what, name,
                                typed_field_names[f], qp_dtype_name(t->dtype));
        if (tp->has_raw_data || external)
            return qp_error_set(err, QP_ERR_BAD_INPUT, "%s '%s': holds both %s and %s", what, name,
                                typed_field_names[f], external ? "external data" : "raw_data");
    }
    if (external && tp->has_raw_data)
        return qp_error_set(err, QP_ERR_BAD_INPUT, "%s '%s': holds both raw_data and external data",
                            what, name);

    if (t->dtype == QP_DTYPE_STRING) {
        if (external || tp->has_raw_data)
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "%s '%s': string tensors must use string_data, not %s", what, name,
                                external ? "external data" : "raw_data");
        if ((uint64_t)tp->n_string_data != numel)
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "%s '%s': holds %zu strings, dims %s need %llu", what, name,
                                tp->n_string_data, dims_str(d, sizeof d, tp->dims, tp->n_dims),
                                (unsigned long long)numel);
        struct qp_bytes *s = qp_arena_calloc(c->m->arena, tp->n_string_data, sizeof *s);
        if (!s) return qp_error_set(err, QP_ERR_NOMEM, "%s '%s': out of memory", what, name);
        for (size_t i = 0; i < tp->n_string_data; i++) {
            s[i].data = tp->string_data[i].data;
            s[i].len = tp->string_data[i].len;
        }
        t->strings = s;
        return QP_OK;
    }

    int ok;
    size_t nbytes = qp_dtype_nbytes(t->dtype, numel, &ok);
    if (!ok)
        return qp_error_set(err, QP_ERR_BAD_INPUT, "%s '%s': dims %s of %s overflow the byte size",
                            what, name, dims_str(d, sizeof d, tp->dims, tp->n_dims),
                            qp_dtype_name(t->dtype));
    if (external) return read_external(c, tp, what, nbytes, t, err);

    t->nbytes = nbytes;
    if (tp->has_raw_data) {
        if (tp->raw_data.len != nbytes)
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "%s '%s': raw_data holds %zu bytes, dims %s of %s need %zu", what,
                                name, tp->raw_data.len, dims_str(d, sizeof d, tp->dims, tp->n_dims),
                                qp_dtype_name(t->dtype), nbytes);
        t->data = tp->raw_data.data;
        return QP_OK;
    }

    /* Typed field: one entry per element, except complex (two) and 4-bit types (one byte, i.e.
     * two elements, per int32). nbytes is a valid size_t, so these cannot overflow. */
    int bits = qp_dtype_traits(t->dtype)->bits;
    uint64_t need = numel;
    if (t->dtype == QP_DTYPE_COMPLEX64 || t->dtype == QP_DTYPE_COMPLEX128) need = numel * 2;
    if (bits < 8) need = nbytes;
    if ((uint64_t)counts[want] != need)
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "%s '%s': holds %zu %s values, dims %s of %s need %llu", what, name,
                            counts[want], typed_field_names[want],
                            dims_str(d, sizeof d, tp->dims, tp->n_dims), qp_dtype_name(t->dtype),
                            (unsigned long long)need);
    if (nbytes == 0) return QP_OK;
    if (borrowable(want, t->dtype)) {
        t->data = typed_ptr(tp, want);
        return QP_OK;
    }
    uint8_t *buf = malloc(nbytes);
    if (!buf) return qp_error_set(err, QP_ERR_NOMEM, "%s '%s': out of memory", what, name);
    convert_typed(tp, want, t->dtype, counts[want], buf);
    if (qp_model_own(c->m, buf, err) != QP_OK)
        return qp_error_set(err, QP_ERR_NOMEM, "%s '%s': out of memory", what, name);
    t->data = buf;
    return QP_OK;
}
