/*
 * .npy reading and writing (format versions 1.0, 2.0, 3.0), and the non-finite counter.
 *
 * The file is untrusted: its header is a Python dict literal, parsed here by a small strict
 * grammar (never evaluated), and the data size the header implies is checked against what the
 * file holds before the data is allocated. docs/npy.md says what is accepted and why.
 */
#include "calib/npy.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const uint8_t npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

/* ---- element types ------------------------------------------------------------------------ */

/* The numpy type codes qplace reads and writes: kind letter and item size. */
static const struct npy_type {
    char kind;
    int size;
    enum qp_dtype dtype;
} npy_types[] = {
    {'f', 2, QP_DTYPE_FLOAT16},   {'f', 4, QP_DTYPE_FLOAT},       {'f', 8, QP_DTYPE_DOUBLE},
    {'i', 1, QP_DTYPE_INT8},      {'i', 2, QP_DTYPE_INT16},       {'i', 4, QP_DTYPE_INT32},
    {'i', 8, QP_DTYPE_INT64},     {'u', 1, QP_DTYPE_UINT8},       {'u', 2, QP_DTYPE_UINT16},
    {'u', 4, QP_DTYPE_UINT32},    {'u', 8, QP_DTYPE_UINT64},      {'b', 1, QP_DTYPE_BOOL},
    {'c', 8, QP_DTYPE_COMPLEX64}, {'c', 16, QP_DTYPE_COMPLEX128},
};
#define N_NPY_TYPES (sizeof npy_types / sizeof npy_types[0])

static const struct npy_type *npy_type_of_dtype(enum qp_dtype dt) {
    for (size_t i = 0; i < N_NPY_TYPES; i++)
        if (npy_types[i].dtype == dt) return &npy_types[i];
    return NULL;
}

static int host_is_big_endian(void) {
    const uint16_t one = 1;
    uint8_t first;
    memcpy(&first, &one, 1);
    return first == 0;
}

/* ---- header parsing ----------------------------------------------------------------------- */

/* What the header says. */
struct npy_header {
    enum qp_dtype dtype;
    size_t item_size;
    int big_endian; /* the data is stored big-endian */
    int fortran;
    int rank;
    int64_t dims[QP_MAX_RANK];
};

struct hparse {
    const uint8_t *p;
    size_t n;    /* header dict bytes */
    size_t i;    /* cursor */
    size_t base; /* file offset of p[0], for messages */
    const char *name;
    struct qp_error *err;
};

static enum qp_status hp_fail(struct hparse *h, const char *what) {
    return qp_error_set(h->err, QP_ERR_BAD_INPUT, "%s: malformed header: %s at byte %zu", h->name,
                        what, h->base + h->i);
}

static void hp_skip_ws(struct hparse *h) {
    while (h->i < h->n) {
        uint8_t c = h->p[h->i];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        h->i++;
    }
}

static int hp_peek(struct hparse *h) {
    return h->i < h->n ? h->p[h->i] : -1;
}

static enum qp_status hp_expect(struct hparse *h, char c, const char *what) {
    hp_skip_ws(h);
    if (hp_peek(h) != (uint8_t)c) return hp_fail(h, what);
    h->i++;
    return QP_OK;
}

/* A quoted string without escapes; returns its bytes in place. */
static enum qp_status hp_string(struct hparse *h, const char **s, size_t *len) {
    hp_skip_ws(h);
    int q = hp_peek(h);
    if (q != '\'' && q != '"') return hp_fail(h, "expected a quoted string");
    h->i++;
    size_t start = h->i;
    while (h->i < h->n && h->p[h->i] != q) {
        uint8_t c = h->p[h->i];
        if (c == '\\') return hp_fail(h, "escape sequence in a string");
        if (c < 0x20 || c >= 0x7f) return hp_fail(h, "control or non-ASCII byte in a string");
        h->i++;
    }
    if (h->i >= h->n) return hp_fail(h, "unterminated string");
    *s = (const char *)h->p + start;
    *len = h->i - start;
    h->i++;
    return QP_OK;
}

static int hp_word(struct hparse *h, const char *w) {
    size_t len = strlen(w);
    if (h->n - h->i < len || memcmp(h->p + h->i, w, len) != 0) return 0;
    /* "Trueish" is not True */
    if (h->i + len < h->n) {
        uint8_t c = h->p[h->i + len];
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')
            return 0;
    }
    h->i += len;
    return 1;
}

static enum qp_status hp_bool(struct hparse *h, int *v) {
    hp_skip_ws(h);
    if (hp_word(h, "True")) {
        *v = 1;
        return QP_OK;
    }
    if (hp_word(h, "False")) {
        *v = 0;
        return QP_OK;
    }
    return hp_fail(h, "'fortran_order' is not True or False");
}

/* A non-negative decimal integer that fits int64 (Python literal rules: no leading zeros). */
static enum qp_status hp_dim(struct hparse *h, int64_t *v) {
    size_t start = h->i;
    if (hp_peek(h) == '-')
        return qp_error_set(h->err, QP_ERR_BAD_INPUT,
                            "%s: malformed header: negative dimension in 'shape' at byte %zu",
                            h->name, h->base + h->i);
    uint64_t x = 0;
    while (h->i < h->n && h->p[h->i] >= '0' && h->p[h->i] <= '9') {
        unsigned d = (unsigned)(h->p[h->i] - '0');
        if (x > ((uint64_t)INT64_MAX - d) / 10)
            return qp_error_set(h->err, QP_ERR_BAD_INPUT,
                                "%s: malformed header: dimension in 'shape' at byte %zu is over "
                                "2^63-1",
                                h->name, h->base + start);
        x = x * 10 + d;
        h->i++;
    }
    if (h->i == start) return hp_fail(h, "expected an integer in 'shape'");
    if (h->i - start > 1 && h->p[start] == '0') {
        h->i = start;
        return hp_fail(h, "integer with a leading zero in 'shape'");
    }
    *v = (int64_t)x;
    return QP_OK;
}

/* "()", "(n,)", "(n, m)", "(n, m,)": a Python tuple of ints. */
static enum qp_status hp_shape(struct hparse *h, struct npy_header *hd) {
    enum qp_status st = hp_expect(h, '(', "'shape' is not a tuple");
    if (st != QP_OK) return st;
    int rank = 0;
    int trailing_comma = 0;
    for (;;) {
        hp_skip_ws(h);
        if (hp_peek(h) == ')') {
            h->i++;
            break;
        }
        if (rank == QP_MAX_RANK)
            return qp_error_set(h->err, QP_ERR_UNSUPPORTED,
                                "%s: the shape has more than %d dimensions, the most qplace "
                                "handles",
                                h->name, QP_MAX_RANK);
        st = hp_dim(h, &hd->dims[rank]);
        if (st != QP_OK) return st;
        rank++;
        hp_skip_ws(h);
        if (hp_peek(h) == ',') {
            h->i++;
            trailing_comma = 1;
        } else if (hp_peek(h) == ')') {
            h->i++;
            trailing_comma = 0;
            break;
        } else {
            return hp_fail(h, "expected ',' or ')' in 'shape'");
        }
    }
    /* "(5)" is the int 5 in Python, not a tuple */
    if (rank == 1 && !trailing_comma) return hp_fail(h, "'shape' (n) is not a tuple, (n,) is");
    hd->rank = rank;
    return QP_OK;
}

/* The descr string: byte order, kind, item size ("<f4", "|b1", ">i8"). */
static enum qp_status parse_descr(const char *s, size_t len, const char *name,
                                  struct npy_header *hd, struct qp_error *err) {
    int shown = len > 40 ? 40 : (int)len;
    char order = 0;
    const char *r = s;
    size_t rlen = len;
    if (len > 0 && strchr("<>|=", s[0])) {
        order = s[0];
        r++;
        rlen--;
    }
    char kind = rlen ? r[0] : 0;
    if (kind == 'O')
        return qp_error_set(err, QP_ERR_UNSUPPORTED,
                            "%s: dtype '%.*s' is an object array, which holds pickled Python "
                            "objects; qplace never unpickles data (save a numeric array instead)",
                            name, shown, s);
    if (kind == 'S' || kind == 'U' || kind == 'a')
        return qp_error_set(err, QP_ERR_UNSUPPORTED,
                            "%s: dtype '%.*s' holds strings; only numeric and bool arrays are "
                            "supported",
                            name, shown, s);
    if (kind == 'V')
        return qp_error_set(err, QP_ERR_UNSUPPORTED,
                            "%s: dtype '%.*s' is raw bytes (void; ml_dtypes' bfloat16 and float8 "
                            "are stored this way): save the array as float32 instead",
                            name, shown, s);
    if (kind == 'M' || kind == 'm')
        return qp_error_set(err, QP_ERR_UNSUPPORTED,
                            "%s: dtype '%.*s' is a datetime/timedelta type, not supported", name,
                            shown, s);
    if (!order)
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "%s: malformed header: descr '%.*s' does not start with a byte order "
                            "('<', '>', '|' or '=')",
                            name, shown, s);
    int size = 0;
    size_t digits = 0;
    for (size_t k = 1; k < rlen; k++) {
        if (r[k] < '0' || r[k] > '9' || digits >= 4) {
            size = -1;
            break;
        }
        size = size * 10 + (r[k] - '0');
        digits++;
    }
    const struct npy_type *t = NULL;
    if (digits > 0 && size > 0)
        for (size_t k = 0; k < N_NPY_TYPES; k++)
            if (npy_types[k].kind == kind && npy_types[k].size == size) t = &npy_types[k];
    if (!t)
        return qp_error_set(err, QP_ERR_UNSUPPORTED,
                            "%s: dtype '%.*s' is not supported (qplace reads f2 f4 f8 i1 i2 i4 i8 "
                            "u1 u2 u4 u8 b1 c8 c16)",
                            name, shown, s);
    if (order == '|' && t->size > 1)
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "%s: malformed header: descr '%.*s' gives no byte order ('|') to a "
                            "multi-byte type",
                            name, shown, s);
    hd->dtype = t->dtype;
    hd->item_size = (size_t)t->size;
    hd->big_endian = order == '>' || (order == '=' && host_is_big_endian());
    return QP_OK;
}

enum npy_key { KEY_DESCR, KEY_FORTRAN, KEY_SHAPE, KEY_COUNT };

static enum qp_status parse_header(const uint8_t *p, size_t n, size_t base, const char *name,
                                   struct npy_header *hd, struct qp_error *err) {
    static const char *const key_names[KEY_COUNT] = {"descr", "fortran_order", "shape"};
    struct hparse h = {p, n, 0, base, name, err};
    int seen[KEY_COUNT] = {0};
    const char *descr = NULL;
    size_t descr_len = 0;
    enum qp_status st = hp_expect(&h, '{', "expected '{'");
    if (st != QP_OK) return st;
    for (;;) {
        hp_skip_ws(&h);
        if (hp_peek(&h) == '}') {
            h.i++;
            break;
        }
        const char *key;
        size_t key_len;
        st = hp_string(&h, &key, &key_len);
        if (st != QP_OK) return st;
        int k = -1;
        for (int j = 0; j < KEY_COUNT; j++)
            if (strlen(key_names[j]) == key_len && memcmp(key_names[j], key, key_len) == 0) k = j;
        if (k < 0)
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "%s: malformed header: unknown key '%.*s' (expected 'descr', "
                                "'fortran_order' and 'shape')",
                                name, key_len > 40 ? 40 : (int)key_len, key);
        if (seen[k])
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "%s: malformed header: key '%s' appears twice", name, key_names[k]);
        seen[k] = 1;
        st = hp_expect(&h, ':', "expected ':' after a key");
        if (st != QP_OK) return st;
        hp_skip_ws(&h);
        if (k == KEY_DESCR) {
            int c = hp_peek(&h);
            if (c == '[' || c == '{')
                return qp_error_set(err, QP_ERR_UNSUPPORTED,
                                    "%s: structured dtypes (a descr listing fields) are not "
                                    "supported; save each field as its own array",
                                    name);
            st = hp_string(&h, &descr, &descr_len);
        } else if (k == KEY_FORTRAN) {
            st = hp_bool(&h, &hd->fortran);
        } else {
            st = hp_shape(&h, hd);
        }
        if (st != QP_OK) return st;
        hp_skip_ws(&h);
        if (hp_peek(&h) == ',') {
            h.i++;
        } else if (hp_peek(&h) == '}') {
            h.i++;
            break;
        } else {
            return hp_fail(&h, "expected ',' or '}'");
        }
    }
    hp_skip_ws(&h);
    if (h.i != h.n) return hp_fail(&h, "unexpected bytes after the header dict");
    for (int j = 0; j < KEY_COUNT; j++)
        if (!seen[j])
            return qp_error_set(err, QP_ERR_BAD_INPUT, "%s: malformed header: key '%s' is missing",
                                name, key_names[j]);
    /* descr is checked last so that a malformed header is reported as such first */
    return parse_descr(descr, descr_len, name, hd, err);
}

/* ---- reading ------------------------------------------------------------------------------ */

static enum qp_status src_read_full(const struct qp_npy_source *src, void *buf, size_t n,
                                    size_t *got, struct qp_error *err) {
    size_t total = 0;
    while (total < n) {
        size_t g = 0;
        enum qp_status st = src->read(src->ctx, (uint8_t *)buf + total, n - total, &g, err);
        if (st != QP_OK) return st;
        if (g == 0) break;
        if (g > n - total)
            return qp_error_set(err, QP_ERR_INTERNAL, "%s: reader returned too many bytes",
                                src->name);
        total += g;
    }
    *got = total;
    return QP_OK;
}

static void byteswap(uint8_t *p, size_t n_units, size_t unit) {
    for (size_t i = 0; i < n_units; i++, p += unit)
        for (size_t a = 0, b = unit - 1; a < b; a++, b--) {
            uint8_t t = p[a];
            p[a] = p[b];
            p[b] = t;
        }
}

/* Rewrites a Fortran-ordered array in C order. */
static enum qp_status fortran_to_c(struct qp_array *a, size_t es, const char *name,
                                   struct qp_error *err) {
    if (a->rank < 2 || a->nbytes == 0) return QP_OK; /* same bytes either way */
    uint8_t *dst = malloc(a->nbytes);
    if (!dst)
        return qp_error_set(err, QP_ERR_NOMEM,
                            "%s: cannot allocate %zu bytes to reorder Fortran-order data", name,
                            a->nbytes);
    const uint8_t *src = a->data;
    /* Strides of the Fortran layout. No dim is 0 (nbytes > 0), so every partial product is
     * at most nbytes. */
    size_t fstride[QP_MAX_RANK];
    size_t idx[QP_MAX_RANK] = {0};
    fstride[0] = es;
    for (int k = 1; k < a->rank; k++)
        fstride[k] = fstride[k - 1] * (size_t)a->dims[k - 1];
    size_t n = a->nbytes / es;
    size_t off = 0;
    for (size_t e = 0; e < n; e++) {
        memcpy(dst + e * es, src + off, es);
        for (int k = a->rank - 1; k >= 0; k--) {
            off += fstride[k];
            if (++idx[k] < (size_t)a->dims[k]) break;
            off -= fstride[k] * (size_t)a->dims[k];
            idx[k] = 0;
        }
    }
    free(a->data);
    a->data = dst;
    return QP_OK;
}

enum qp_status qp_npy_stream_begin(const struct qp_npy_source *src, struct qp_npy_stream *out,
                                   struct qp_error *err) {
    const char *name = src->name;
    uint8_t pre[12];
    uint8_t *hdr = NULL;
    size_t got = 0;
    enum qp_status st = src_read_full(src, pre, 10, &got, err);
    if (st != QP_OK) goto fail;
    if (memcmp(pre, npy_magic, got < 6 ? got : 6) != 0 || got == 0) {
        st = qp_error_set(err, QP_ERR_BAD_INPUT,
                          "%s: not an .npy file (it does not start with \"\\x93NUMPY\")", name);
        goto fail;
    }
    /* A known size smaller than what was read is a lying archive directory; every later
     * subtraction from src->size relies on this check and the one below. */
    if (got < 10 || (src->size_known && src->size < 10)) {
        st = qp_error_set(err, QP_ERR_BAD_INPUT,
                          "%s: truncated: %llu bytes, fewer than the 10-byte .npy preamble", name,
                          (unsigned long long)(src->size_known ? src->size : got));
        goto fail;
    }
    int major = pre[6], minor = pre[7];
    if (major < 1 || major > 3 || minor != 0) {
        st = qp_error_set(err, QP_ERR_UNSUPPORTED,
                          "%s: .npy format version %d.%d is not supported (1.0, 2.0 and 3.0 are)",
                          name, major, minor);
        goto fail;
    }
    size_t pre_len = major == 1 ? 10 : 12;
    uint64_t hlen;
    if (major == 1) {
        hlen = (uint64_t)pre[8] | (uint64_t)pre[9] << 8;
    } else {
        st = src_read_full(src, pre + 10, 2, &got, err);
        if (st != QP_OK) goto fail;
        if (got < 2 || (src->size_known && src->size < 12)) {
            st = qp_error_set(err, QP_ERR_BAD_INPUT,
                              "%s: truncated: the file ends inside the 12-byte preamble", name);
            goto fail;
        }
        hlen = (uint64_t)pre[8] | (uint64_t)pre[9] << 8 | (uint64_t)pre[10] << 16 |
               (uint64_t)pre[11] << 24;
    }
    if (src->size_known && hlen > src->size - pre_len) {
        st =
            qp_error_set(err, QP_ERR_BAD_INPUT,
                         "%s: truncated: the header claims %llu bytes but the file has %llu "
                         "after the preamble",
                         name, (unsigned long long)hlen, (unsigned long long)(src->size - pre_len));
        goto fail;
    }
    if (hlen > QP_NPY_MAX_HEADER - pre_len) {
        st = qp_error_set(err, QP_ERR_UNSUPPORTED,
                          "%s: the header is %llu bytes, over the %zu qplace reads", name,
                          (unsigned long long)hlen, QP_NPY_MAX_HEADER);
        goto fail;
    }
    hdr = malloc(hlen ? (size_t)hlen : 1);
    if (!hdr) {
        st = qp_error_set(err, QP_ERR_NOMEM, "%s: cannot allocate the header", name);
        goto fail;
    }
    st = src_read_full(src, hdr, (size_t)hlen, &got, err);
    if (st != QP_OK) goto fail;
    if (got < hlen) {
        st = qp_error_set(err, QP_ERR_BAD_INPUT,
                          "%s: truncated: the file ends inside the %llu-byte header", name,
                          (unsigned long long)hlen);
        goto fail;
    }
    struct npy_header hd = {0};
    st = parse_header(hdr, (size_t)hlen, pre_len, name, &hd, err);
    if (st != QP_OK) goto fail;
    size_t header_size = pre_len + (size_t)hlen;

    /* The data size the shape needs, checked for overflow. */
    struct qp_array shape = {.dtype = hd.dtype, .rank = hd.rank};
    memcpy(shape.dims, hd.dims, sizeof hd.dims);
    char shape_str[QP_MAX_RANK * 21 + 8];
    qp_array_shape_str(&shape, shape_str, sizeof shape_str);
    int ok;
    uint64_t numel = qp_array_numel(&shape, &ok);
    size_t data_size = ok ? qp_dtype_nbytes(hd.dtype, numel, &ok) : 0;
    if (!ok) {
        st =
            qp_error_set(err, QP_ERR_BAD_INPUT, "%s: shape %s of %s has a byte size that overflows",
                         name, shape_str, qp_dtype_name(hd.dtype));
        goto fail;
    }
    if (src->size_known && src->size - header_size != data_size) {
        st = qp_error_set(err, QP_ERR_BAD_INPUT,
                          "%s: %llu bytes of data after the header, but shape %s of %s needs %zu "
                          "(%s)",
                          name, (unsigned long long)(src->size - header_size), shape_str,
                          qp_dtype_name(hd.dtype), data_size,
                          src->size - header_size < data_size ? "truncated" : "trailing bytes");
        goto fail;
    }
    memset(out, 0, sizeof *out);
    out->dtype = hd.dtype;
    out->rank = hd.rank;
    memcpy(out->dims, hd.dims, sizeof out->dims);
    out->item_size = hd.item_size;
    out->big_endian = hd.big_endian;
    out->fortran = hd.fortran;
    out->data_size = data_size;
    free(hdr);
    return QP_OK;
fail:
    free(hdr);
    return st;
}

/* Makes freshly read data host-ready: little-endian, bools 0/1 (`n` whole items). */
static void fix_items(const struct qp_npy_stream *s, uint8_t *p, size_t n) {
    if (s->big_endian && s->item_size > 1) {
        int complex = s->dtype == QP_DTYPE_COMPLEX64 || s->dtype == QP_DTYPE_COMPLEX128;
        size_t unit = complex ? s->item_size / 2 : s->item_size;
        byteswap(p, n / unit, unit);
    }
    if (s->dtype == QP_DTYPE_BOOL)
        for (size_t i = 0; i < n; i++)
            p[i] = p[i] != 0;
}

enum qp_status qp_npy_stream_read(const struct qp_npy_source *src, struct qp_npy_stream *s,
                                  void *buf, size_t n, struct qp_error *err) {
    if (n % s->item_size || n > s->data_size - s->done)
        return qp_error_set(err, QP_ERR_INTERNAL, "%s: bad stream read of %zu bytes", src->name, n);
    size_t got = 0;
    enum qp_status st = src_read_full(src, buf, n, &got, err);
    if (st != QP_OK) return st;
    if (got < n)
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "%s: truncated: the data end after %llu of %llu bytes", src->name,
                            (unsigned long long)(s->done + got), (unsigned long long)s->data_size);
    fix_items(s, buf, n);
    s->done += n;
    return QP_OK;
}

enum qp_status qp_npy_stream_end(const struct qp_npy_source *src, const struct qp_npy_stream *s,
                                 struct qp_error *err) {
    if (s->done != s->data_size)
        return qp_error_set(err, QP_ERR_INTERNAL, "%s: stream ended early", src->name);
    uint8_t extra;
    size_t got = 0;
    enum qp_status st = src_read_full(src, &extra, 1, &got, err);
    if (st != QP_OK) return st;
    if (got)
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "%s: trailing bytes after the %llu bytes of data its shape needs",
                            src->name, (unsigned long long)s->data_size);
    return QP_OK;
}

enum qp_status qp_npy_read_source(const struct qp_npy_source *src, struct qp_array *out,
                                  struct qp_error *err) {
    const char *name = src->name;
    uint8_t *buf = NULL;
    struct qp_array a = {0};
    size_t got = 0;
    struct qp_npy_stream hd;
    enum qp_status st = qp_npy_stream_begin(src, &hd, err);
    if (st != QP_OK) return st;
    size_t data_size = (size_t)hd.data_size;
    struct qp_array shape = {.dtype = hd.dtype, .rank = hd.rank};
    memcpy(shape.dims, hd.dims, sizeof hd.dims);
    char shape_str[QP_MAX_RANK * 21 + 8];
    qp_array_shape_str(&shape, shape_str, sizeof shape_str);

    /* With a known size this is one exact allocation; otherwise memory follows the bytes that
     * actually arrive, so a header claiming terabytes costs nothing. */
    const size_t step = (size_t)1 << 20;
    size_t cap = src->size_known || data_size <= step ? data_size : step;
    size_t have = 0;
    buf = malloc(cap ? cap : 1);
    if (!buf) {
        st = qp_error_set(err, QP_ERR_NOMEM, "%s: cannot allocate %zu bytes for the data", name,
                          cap);
        goto fail;
    }
    for (;;) {
        st = src_read_full(src, buf + have, cap - have, &got, err);
        if (st != QP_OK) goto fail;
        have += got;
        if (have < cap || cap == data_size) break;
        size_t ncap = cap > data_size / 2 ? data_size : cap * 2;
        uint8_t *nb = realloc(buf, ncap);
        if (!nb) {
            st = qp_error_set(err, QP_ERR_NOMEM, "%s: cannot allocate %zu bytes for the data", name,
                              ncap);
            goto fail;
        }
        buf = nb;
        cap = ncap;
    }
    if (have < data_size) {
        st = qp_error_set(err, QP_ERR_BAD_INPUT,
                          "%s: truncated: %zu bytes of data, but shape %s of %s needs %zu", name,
                          have, shape_str, qp_dtype_name(hd.dtype), data_size);
        goto fail;
    }
    uint8_t extra;
    st = src_read_full(src, &extra, 1, &got, err);
    if (st != QP_OK) goto fail;
    if (got) {
        st = qp_error_set(err, QP_ERR_BAD_INPUT,
                          "%s: trailing bytes after the %zu bytes of data that shape %s of %s "
                          "needs",
                          name, data_size, shape_str, qp_dtype_name(hd.dtype));
        goto fail;
    }

    st = qp_array_view(&a, hd.dtype, hd.rank, hd.dims, buf, data_size, err);
    if (st != QP_OK) goto fail;
    a.owned = 1;
    buf = NULL;

    /* qp_array data is little-endian whatever the host */
    fix_items(&hd, a.data, data_size);
    if (hd.fortran) {
        st = fortran_to_c(&a, hd.item_size, name, err);
        if (st != QP_OK) goto fail;
    }
    *out = a;
    return QP_OK;

fail:
    free(buf);
    qp_array_release(&a);
    return st;
}

struct mem_ctx {
    const uint8_t *data;
    size_t size, pos;
};

static enum qp_status mem_read(void *ctx, void *buf, size_t n, size_t *got, struct qp_error *err) {
    struct mem_ctx *m = ctx;
    size_t left = m->size - m->pos;
    size_t k = n < left ? n : left;
    if (k) memcpy(buf, m->data + m->pos, k);
    m->pos += k;
    *got = k;
    return QP_OK;
}

enum qp_status qp_npy_read_buffer(const void *data, size_t size, const char *name,
                                  struct qp_array *out, struct qp_error *err) {
    if (!name) name = "npy";
    if (!out || (!data && size))
        return qp_error_set(err, QP_ERR_USAGE, "%s: qp_npy_read_buffer: NULL argument", name);
    struct mem_ctx m = {data, size, 0};
    struct qp_npy_source src = {name, 1, size, mem_read, &m};
    return qp_npy_read_source(&src, out, err);
}

enum qp_status qp_npy_file_read(void *ctx, void *buf, size_t n, size_t *got, struct qp_error *err) {
    struct qp_npy_file *fc = ctx;
    size_t k = fread(buf, 1, n, fc->f);
    if (k < n && ferror(fc->f))
        return qp_error_set(err, QP_ERR_IO, "%s: read failed: %s", fc->path, strerror(errno));
    *got = k;
    return QP_OK;
}

enum qp_status qp_npy_read_file(const char *path, struct qp_array *out, struct qp_error *err) {
    if (!path || !out) return qp_error_set(err, QP_ERR_USAGE, "qp_npy_read_file: NULL argument");
    FILE *f = fopen(path, "rb");
    if (!f) return qp_error_set(err, QP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    enum qp_status st;
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0) {
        st = qp_error_set(err, QP_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
        goto done;
    }
    if (S_ISDIR(sb.st_mode)) {
        st = qp_error_set(err, QP_ERR_IO, "%s: is a directory, not an .npy file", path);
        goto done;
    }
    struct qp_npy_file fc = {f, path};
    struct qp_npy_source src = {path, S_ISREG(sb.st_mode), (uint64_t)sb.st_size, qp_npy_file_read,
                                &fc};
    if (!S_ISREG(sb.st_mode)) src.size = 0;
    st = qp_npy_read_source(&src, out, err);
done:
    fclose(f);
    return st;
}

/* ---- writing ------------------------------------------------------------------------------ */

enum qp_status qp_npy_header_format(const struct qp_array *a, const char *what, uint8_t *buf,
                                    size_t cap, size_t *len_out, struct qp_error *err) {
    if (!a) return qp_error_set(err, QP_ERR_USAGE, "%s: NULL array", what);
    if (cap < QP_NPY_HEADER_CAP)
        return qp_error_set(err, QP_ERR_INTERNAL, "%s: header buffer too small", what);
    if (!qp_dtype_valid((int)a->dtype))
        return qp_error_set(err, QP_ERR_USAGE, "%s: invalid dtype %d", what, (int)a->dtype);
    const struct npy_type *t = npy_type_of_dtype(a->dtype);
    if (!t)
        return qp_error_set(err, QP_ERR_UNSUPPORTED,
                            "%s: numpy has no standard type for %s; convert the array (e.g. to "
                            "float32) before saving it",
                            what, qp_dtype_name(a->dtype));
    if (a->rank < 0 || a->rank > QP_MAX_RANK)
        return qp_error_set(err, QP_ERR_USAGE, "%s: rank %d is outside 0..%d", what, a->rank,
                            QP_MAX_RANK);
    int ok;
    uint64_t numel = qp_array_numel(a, &ok);
    size_t nbytes = ok ? qp_dtype_nbytes(a->dtype, numel, &ok) : 0;
    if (!ok) return qp_error_set(err, QP_ERR_USAGE, "%s: negative or overflowing shape", what);
    if (nbytes != a->nbytes || (nbytes && !a->data))
        return qp_error_set(err, QP_ERR_USAGE,
                            "%s: the array holds %zu bytes%s but its shape needs %zu", what,
                            a->nbytes, a->data ? "" : " (NULL data)", nbytes);

    /* Exactly numpy 1.24's layout: sorted keys, repr() values, room for the first dim to grow
     * to 21 digits, spaces and '\n' up to a multiple of 64 (a full 64 when already aligned). */
    char dict[QP_NPY_HEADER_CAP];
    size_t n = 0;
    int w = snprintf(dict, sizeof dict, "{'descr': '%c%c%d', 'fortran_order': False, 'shape': (",
                     t->size == 1 ? '|' : '<', t->kind, t->size);
    if (w < 0) return qp_error_set(err, QP_ERR_INTERNAL, "%s: snprintf failed", what);
    n = (size_t)w;
    int first_digits = 0;
    for (int i = 0; i < a->rank; i++) {
        w = snprintf(dict + n, sizeof dict - n, i ? ", %lld" : "%lld", (long long)a->dims[i]);
        if (w < 0) return qp_error_set(err, QP_ERR_INTERNAL, "%s: snprintf failed", what);
        if (i == 0) first_digits = w;
        n += (size_t)w;
    }
    w = snprintf(dict + n, sizeof dict - n, "%s), }", a->rank == 1 ? "," : "");
    if (w < 0) return qp_error_set(err, QP_ERR_INTERNAL, "%s: snprintf failed", what);
    n += (size_t)w;
    if (a->rank > 0)
        for (int i = first_digits; i < 21; i++)
            dict[n++] = ' ';
    size_t hlen = n + 1;
    size_t pad = 64 - (10 + hlen) % 64;
    size_t total = 10 + hlen + pad;
    if (total > cap) return qp_error_set(err, QP_ERR_INTERNAL, "%s: header too long", what);
    memcpy(buf, npy_magic, 6);
    buf[6] = 1;
    buf[7] = 0;
    buf[8] = (uint8_t)((total - 10) & 0xff);
    buf[9] = (uint8_t)((total - 10) >> 8);
    memcpy(buf + 10, dict, n);
    memset(buf + 10 + n, ' ', pad);
    buf[total - 1] = '\n';
    *len_out = total;
    return QP_OK;
}

enum qp_status qp_npy_write_file(const char *path, const struct qp_array *a, struct qp_error *err) {
    if (!path) return qp_error_set(err, QP_ERR_USAGE, "qp_npy_write_file: NULL path");
    uint8_t header[QP_NPY_HEADER_CAP];
    size_t hlen;
    enum qp_status st = qp_npy_header_format(a, path, header, sizeof header, &hlen, err);
    if (st != QP_OK) return st;
    struct qp_file_part parts[2] = {{header, hlen}, {a->data, a->nbytes}};
    return qp_file_write_atomic_parts(path, parts, 2, err);
}

/* ---- non-finite values -------------------------------------------------------------------- */

enum qp_status qp_array_count_nonfinite(const struct qp_array *a, uint64_t *nan_out,
                                        uint64_t *inf_out, struct qp_error *err) {
    if (!a) return qp_error_set(err, QP_ERR_USAGE, "count_nonfinite: NULL array");
    if (!qp_dtype_valid((int)a->dtype) || a->dtype == QP_DTYPE_STRING)
        return qp_error_set(err, QP_ERR_USAGE, "count_nonfinite: invalid dtype %d", (int)a->dtype);
    int ok;
    uint64_t numel = qp_array_numel(a, &ok);
    size_t nbytes = ok ? qp_dtype_nbytes(a->dtype, numel, &ok) : 0;
    if (!ok || nbytes != a->nbytes || (nbytes && !a->data))
        return qp_error_set(err, QP_ERR_USAGE,
                            "count_nonfinite: the array's data does not match its shape");
    uint64_t nan = 0, inf = 0;
    const uint8_t *p = a->data;
    switch (a->dtype) {
    case QP_DTYPE_FLOAT:
    case QP_DTYPE_COMPLEX64:
        for (size_t i = 0; i < nbytes / 4; i++) {
            uint32_t u;
            memcpy(&u, p + 4 * i, 4);
            if ((u & 0x7f800000u) != 0x7f800000u) continue;
            if (u & 0x007fffffu)
                nan++;
            else
                inf++;
        }
        break;
    case QP_DTYPE_DOUBLE:
    case QP_DTYPE_COMPLEX128:
        for (size_t i = 0; i < nbytes / 8; i++) {
            uint64_t u;
            memcpy(&u, p + 8 * i, 8);
            if ((u & 0x7ff0000000000000ull) != 0x7ff0000000000000ull) continue;
            if (u & 0x000fffffffffffffull)
                nan++;
            else
                inf++;
        }
        break;
    case QP_DTYPE_FLOAT16:
    case QP_DTYPE_BFLOAT16: {
        uint16_t exp = a->dtype == QP_DTYPE_FLOAT16 ? 0x7c00 : 0x7f80;
        for (size_t i = 0; i < nbytes / 2; i++) {
            uint16_t u = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8); /* little-endian data */
            if ((u & exp) != exp) continue;
            if (u & (uint16_t)(~exp & 0x7fff))
                nan++;
            else
                inf++;
        }
        break;
    }
    case QP_DTYPE_FLOAT8E4M3FN: /* NaN is S.1111.111; no infinities */
        for (size_t i = 0; i < nbytes; i++)
            nan += (p[i] & 0x7f) == 0x7f;
        break;
    case QP_DTYPE_FLOAT8E4M3FNUZ: /* NaN is 0x80, the would-be negative zero */
    case QP_DTYPE_FLOAT8E5M2FNUZ:
        for (size_t i = 0; i < nbytes; i++)
            nan += p[i] == 0x80;
        break;
    case QP_DTYPE_FLOAT8E5M2: /* IEEE-like: exponent 11111 */
        for (size_t i = 0; i < nbytes; i++) {
            uint8_t m = p[i] & 0x7f;
            if (m == 0x7c)
                inf++;
            else if (m > 0x7c)
                nan++;
        }
        break;
    default: /* integers, bool, float4e2m1: no NaN or infinity */
        break;
    }
    if (nan_out) *nan_out = nan;
    if (inf_out) *inf_out = inf;
    return QP_OK;
}
