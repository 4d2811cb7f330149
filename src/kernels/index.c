/*
 * Index ops: GatherND, ScatterElements (and opset 9-10 Scatter), ScatterND, OneHot, NonZero,
 * Compress, ReverseSequence, MaxUnpool, Unique. Data movement works on any type of 8 bits or more;
 * the scatter reductions (add, mul, max, min) on numeric types. Indices come from data, so an
 * out-of-range index is QP_ERR_BAD_INPUT at run. Scatters apply their updates sequentially in index
 * order, so duplicate indices give one defined result (the last write, or the reduction of all).
 * NonZero's, Compress's and Unique's output shapes depend on values: those inputs must be plan-time
 * constants (value-keyed when they come from the caller).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/size.h"
#include "kernels/kcheck.h"
#include "kernels/kernels.h"

static size_t esize(enum qp_dtype dt) {
    return (size_t)qp_dtype_traits(dt)->bits / 8;
}

static enum qp_status need_indices(const struct qp_kprep *p, int i) {
    enum qp_status st = qp_kneed(p, i);
    if (st) return st;
    if (p->in[i]->dtype != QP_DTYPE_INT64 && p->in[i]->dtype != QP_DTYPE_INT32)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "input %d (indices) is %s, expected int64", i,
                            qp_dtype_name(p->in[i]->dtype));
    return QP_OK;
}

/* The inputs every gather and scatter starts from: sane shapes, data (0) of whole bytes and
 * integer indices (1); with `updates`, also updates (2) of the data's dtype. */
static enum qp_status data_and_indices(const struct qp_kprep *p, int updates) {
    if (qp_kinputs_sane(p)) return QP_ERR_BAD_INPUT;
    enum qp_status st = qp_kneed_bytes(p, 0);
    if (!st) st = need_indices(p, 1);
    if (!st && updates) st = qp_kneed(p, 2);
    if (st || !updates) return st;
    if (p->in[2]->dtype != p->in[0]->dtype)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "updates are %s, data is %s",
                            qp_dtype_name(p->in[2]->dtype), qp_dtype_name(p->in[0]->dtype));
    return QP_OK;
}

static void strides_of(const struct qp_kt *t, int64_t *st) {
    int64_t acc = 1;
    for (int i = t->rank - 1; i >= 0; i--) {
        st[i] = acc;
        acc *= t->dims[i];
    }
}

/* Index value v for a dim of size n: negative counts from the end. 0 when out of range. */
static int wrap_index(int64_t v, int64_t n, int64_t *out) {
    if (v < 0) v += n;
    if (v < 0 || v >= n) return 0;
    *out = v;
    return 1;
}

/* off += the element offset of index tuple t (entries t*last .. t*last+last-1 of idx) over
 * dims/strides; an entry out of range (after negative wrap) is QP_ERR_BAD_INPUT. */
static enum qp_status tuple_offset(const struct qp_kt *idx, int64_t t, int64_t last,
                                   const int64_t *dims, const int64_t *strides, int64_t *off,
                                   struct qp_error *err) {
    for (int64_t k = 0; k < last; k++) {
        int64_t raw = qp_kt_get_i64(idx, (uint64_t)(t * last + k)), v;
        if (!wrap_index(raw, dims[k], &v))
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "index %lld out of range for a dim of size %lld", (long long)raw,
                                (long long)dims[k]);
        *off += v * strides[k];
    }
    return QP_OK;
}

/* ---- scatter reductions ---------------------------------------------------------------- */

enum scatter_red { RED_NONE, RED_ADD, RED_MUL, RED_MAX, RED_MIN };

static enum qp_status reduction_attr(const struct qp_kprep *p, enum scatter_red *out) {
    char buf[16];
    qp_kattr_str(p->node, "reduction", "none", buf, sizeof buf);
    static const char *const names[] = {"none", "add", "mul", "max", "min"};
    for (int i = 0; i < 5; i++)
        if (strcmp(buf, names[i]) == 0) {
            *out = (enum scatter_red)i;
            if (*out != RED_NONE) {
                enum qp_dtype dt = p->in[0]->dtype;
                int numeric = dt == QP_DTYPE_FLOAT || dt == QP_DTYPE_DOUBLE ||
                              (!qp_dtype_traits(dt)->is_float && dt != QP_DTYPE_BOOL);
                if (!numeric)
                    return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "reduction '%s' on %s", buf,
                                        qp_dtype_name(dt));
            }
            return QP_OK;
        }
    return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                        "reduction '%s', expected none, add, mul, max or min", buf);
}

/* y[yi] = reduce(y[yi], u[ui]). */
static void scatter_one(struct qp_kt *y, uint64_t yi, const struct qp_kt *u, uint64_t ui,
                        enum scatter_red red, size_t es) {
    if (red == RED_NONE) {
        memcpy((unsigned char *)y->data + yi * es, (const unsigned char *)u->data + ui * es, es);
        return;
    }
    if (qp_dtype_traits(y->dtype)->is_float) {
        double a = qp_kt_get_f64(y, yi), b = qp_kt_get_f64(u, ui), v;
        switch (red) {
        case RED_ADD:
            v = a + b;
            break;
        case RED_MUL:
            v = a * b;
            break;
        case RED_MAX:
            v = isnan(a) || isnan(b) ? NAN : (a > b ? a : b);
            break;
        default:
            v = isnan(a) || isnan(b) ? NAN : (a < b ? a : b);
            break;
        }
        qp_kt_set_f64(y, yi, v);
        return;
    }
    int is_unsigned = y->dtype == QP_DTYPE_UINT64;
    int64_t a = qp_kt_get_i64(y, yi), b = qp_kt_get_i64(u, ui), v;
    switch (red) {
    case RED_ADD:
        v = (int64_t)((uint64_t)a + (uint64_t)b); /* wraps, as the narrower stores do */
        break;
    case RED_MUL:
        v = (int64_t)((uint64_t)a * (uint64_t)b);
        break;
    case RED_MAX:
        v = is_unsigned ? ((uint64_t)a > (uint64_t)b ? a : b) : (a > b ? a : b);
        break;
    default:
        v = is_unsigned ? ((uint64_t)a < (uint64_t)b ? a : b) : (a < b ? a : b);
        break;
    }
    qp_kt_set_i64(y, yi, v);
}

/* ---- GatherND (opset 11, 12+ with batch_dims) ------------------------------------------- */

struct gnd_state {
    int64_t batch;     /* product of the batch dims */
    int64_t per_batch; /* index tuples per batch */
    int64_t last;      /* tuple length */
    int64_t slice;     /* elements per gathered slice */
    int64_t data_batch;
    int64_t dims[QP_MAX_RANK], strides[QP_MAX_RANK]; /* the indexed data dims */
    size_t es;
};

enum qp_status qp_k_gathernd_prepare(struct qp_kprep *p) {
    enum qp_status st = data_and_indices(p, 0);
    if (st) return st;
    const struct qp_kt *x = p->in[0], *idx = p->in[1];
    int64_t b = p->opset >= 12 ? qp_kattr_int(p->node, "batch_dims", 0) : 0;
    if (x->rank < 1 || idx->rank < 1)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                            "data rank %d and indices rank %d must be "
                            ">= 1",
                            x->rank, idx->rank);
    if (b < 0 || b >= x->rank || b >= idx->rank)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                            "batch_dims %lld must be below both ranks (%d, %d)", (long long)b,
                            x->rank, idx->rank);
    struct gnd_state s;
    memset(&s, 0, sizeof s);
    s.last = idx->dims[idx->rank - 1];
    if (s.last < 1 || s.last > x->rank - b)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                            "index tuples have %lld entries for %lld indexable data dims",
                            (long long)s.last, (long long)(x->rank - b));
    s.batch = 1;
    for (int i = 0; i < b; i++) {
        if (x->dims[i] != idx->dims[i])
            return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                                "batch dim %d is %lld in data and %lld in indices", i,
                                (long long)x->dims[i], (long long)idx->dims[i]);
        s.batch *= x->dims[i];
    }
    s.per_batch = 1;
    for (int i = (int)b; i < idx->rank - 1; i++)
        s.per_batch *= idx->dims[i];
    s.slice = 1;
    for (int i = (int)(b + s.last); i < x->rank; i++)
        s.slice *= x->dims[i];
    s.data_batch = 1;
    for (int i = (int)b; i < x->rank; i++)
        s.data_batch *= x->dims[i];
    int64_t acc = s.slice;
    for (int64_t k = s.last - 1; k >= 0; k--) {
        s.dims[k] = x->dims[b + k];
        s.strides[k] = acc;
        acc *= s.dims[k];
    }
    s.es = esize(x->dtype);
    int64_t od[QP_MAX_RANK];
    int r = 0;
    for (int i = 0; i < idx->rank - 1; i++)
        od[r++] = idx->dims[i];
    for (int i = (int)(b + s.last); i < x->rank; i++) {
        if (r >= QP_MAX_RANK)
            return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "output rank over %d", QP_MAX_RANK);
        od[r++] = x->dims[i];
    }
    if ((st = qp_kt_set(p->out[0], x->dtype, r, od, p->err))) return st;
    return qp_ksave_state(p, &s, sizeof s);
}

enum qp_status qp_k_gathernd_run(const struct qp_krun *r) {
    const struct gnd_state *s = r->state;
    const struct qp_kt *idx = r->in[1];
    const unsigned char *x = r->in[0]->data;
    unsigned char *y = r->out[0]->data;
    size_t slice_bytes = (size_t)s->slice * s->es;
    for (int64_t bt = 0; bt < s->batch; bt++)
        for (int64_t g = 0; g < s->per_batch; g++) {
            int64_t t = bt * s->per_batch + g, off = bt * s->data_batch;
            enum qp_status st = tuple_offset(idx, t, s->last, s->dims, s->strides, &off, r->err);
            if (st) return st;
            if (slice_bytes)
                memcpy(y + (size_t)t * slice_bytes, x + (size_t)off * s->es, slice_bytes);
        }
    return QP_OK;
}

/* ---- ScatterElements / Scatter ------------------------------------------------------------ */

struct sel_state {
    int rank;
    int64_t axis;
    int64_t xstride[QP_MAX_RANK], idims[QP_MAX_RANK];
    enum scatter_red red;
    size_t es;
};

enum qp_status qp_k_scatter_elements_prepare(struct qp_kprep *p) {
    enum qp_status st = data_and_indices(p, 1);
    if (st) return st;
    const struct qp_kt *x = p->in[0], *idx = p->in[1], *u = p->in[2];
    if (x->rank < 1 || idx->rank != x->rank || u->rank != x->rank)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                            "data, indices and updates need one rank >= 1 (%d, %d, %d)", x->rank,
                            idx->rank, u->rank);
    struct sel_state s;
    memset(&s, 0, sizeof s);
    if ((st = qp_kaxis(qp_kattr_int(p->node, "axis", 0), x->rank, &s.axis, "axis", p->err)))
        return st;
    s.red = RED_NONE;
    if (p->opset >= 16 && strcmp(p->node->op_type, "ScatterElements") == 0 &&
        (st = reduction_attr(p, &s.red)))
        return st;
    s.rank = x->rank;
    s.es = esize(x->dtype);
    strides_of(x, s.xstride);
    for (int i = 0; i < x->rank; i++) {
        if (idx->dims[i] != u->dims[i])
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "indices and updates differ in dim %d",
                                i);
        if (i != s.axis && idx->dims[i] > x->dims[i])
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "indices dim %d is %lld, data has %lld",
                                i, (long long)idx->dims[i], (long long)x->dims[i]);
        s.idims[i] = idx->dims[i];
    }
    if ((st = qp_kt_set(p->out[0], x->dtype, x->rank, x->dims, p->err))) return st;
    return qp_ksave_state(p, &s, sizeof s);
}

enum qp_status qp_k_scatter_elements_run(const struct qp_krun *r) {
    const struct sel_state *s = r->state;
    const struct qp_kt *x = r->in[0], *idx = r->in[1], *u = r->in[2];
    struct qp_kt *y = r->out[0];
    if (y->data != x->data && x->nbytes) memcpy(y->data, x->data, x->nbytes);
    int64_t alen = x->dims[s->axis];
    for (uint64_t o = 0; o < idx->numel; o++) {
        int64_t rem = (int64_t)o, off = 0;
        for (int i = s->rank - 1; i >= 0; i--) {
            int64_t c = rem % s->idims[i];
            rem /= s->idims[i];
            if (i == s->axis) {
                int64_t raw = qp_kt_get_i64(idx, o);
                if (!wrap_index(raw, alen, &c))
                    return qp_error_set(r->err, QP_ERR_BAD_INPUT,
                                        "index %lld out of range for axis size %lld",
                                        (long long)raw, (long long)alen);
            }
            off += c * s->xstride[i];
        }
        scatter_one(y, (uint64_t)off, u, o, s->red, s->es);
    }
    return QP_OK;
}

/* ---- ScatterND ---------------------------------------------------------------------------- */

struct snd_state {
    int64_t n_tuples, last, slice;
    int64_t dims[QP_MAX_RANK], strides[QP_MAX_RANK];
    enum scatter_red red;
    size_t es;
};

enum qp_status qp_k_scatternd_prepare(struct qp_kprep *p) {
    enum qp_status st = data_and_indices(p, 1);
    if (st) return st;
    const struct qp_kt *x = p->in[0], *idx = p->in[1], *u = p->in[2];
    if (x->rank < 1 || idx->rank < 1)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                            "data rank %d and indices rank %d must be "
                            ">= 1",
                            x->rank, idx->rank);
    struct snd_state s;
    memset(&s, 0, sizeof s);
    s.red = RED_NONE;
    if (p->opset >= 16 && (st = reduction_attr(p, &s.red))) return st;
    s.last = idx->dims[idx->rank - 1];
    if (s.last < 1 || s.last > x->rank)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                            "index tuples have %lld entries for data rank %d", (long long)s.last,
                            x->rank);
    /* updates.shape == indices.shape[:-1] + data.shape[last:] */
    int ur = idx->rank - 1 + x->rank - (int)s.last;
    int ok = u->rank == ur;
    for (int i = 0; ok && i < idx->rank - 1; i++)
        ok = u->dims[i] == idx->dims[i];
    for (int i = (int)s.last; ok && i < x->rank; i++)
        ok = u->dims[idx->rank - 1 + i - s.last] == x->dims[i];
    if (!ok)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                            "updates shape does not equal indices.shape[:-1] + "
                            "data.shape[%lld:]",
                            (long long)s.last);
    s.n_tuples = 1;
    for (int i = 0; i < idx->rank - 1; i++)
        s.n_tuples *= idx->dims[i];
    s.slice = 1;
    for (int i = (int)s.last; i < x->rank; i++)
        s.slice *= x->dims[i];
    int64_t acc = s.slice;
    for (int64_t k = s.last - 1; k >= 0; k--) {
        s.dims[k] = x->dims[k];
        s.strides[k] = acc;
        acc *= s.dims[k];
    }
    s.es = esize(x->dtype);
    if ((st = qp_kt_set(p->out[0], x->dtype, x->rank, x->dims, p->err))) return st;
    return qp_ksave_state(p, &s, sizeof s);
}

enum qp_status qp_k_scatternd_run(const struct qp_krun *r) {
    const struct snd_state *s = r->state;
    const struct qp_kt *x = r->in[0], *idx = r->in[1], *u = r->in[2];
    struct qp_kt *y = r->out[0];
    if (y->data != x->data && x->nbytes) memcpy(y->data, x->data, x->nbytes);
    for (int64_t t = 0; t < s->n_tuples; t++) {
        int64_t off = 0;
        enum qp_status st = tuple_offset(idx, t, s->last, s->dims, s->strides, &off, r->err);
        if (st) return st;
        for (int64_t e = 0; e < s->slice; e++)
            scatter_one(y, (uint64_t)(off + e), u, (uint64_t)(t * s->slice + e), s->red, s->es);
    }
    return QP_OK;
}

/* ---- OneHot (opset 9, 11) ------------------------------------------------------------------
 * Output: indices' shape with `depth` inserted at `axis`; values[1] where the index (negative
 * counts from the end at opset 11) equals the position, values[0] elsewhere and for indices
 * out of range. depth (input 1) sets the shape, so it is a plan-time value. */

struct onehot_state {
    int64_t depth, outer, inner;
    size_t es;
    int wrap_negative;
};

enum qp_status qp_k_onehot_prepare(struct qp_kprep *p) {
    if (qp_kinputs_sane(p)) return QP_ERR_BAD_INPUT;
    enum qp_status st = qp_kneed(p, 0);
    if (!st) st = qp_kneed_const(p, 1, "depth");
    if (!st) st = qp_kneed_bytes(p, 2);
    if (st) return st;
    const struct qp_kt *idx = p->in[0], *dep = p->in[1], *val = p->in[2];
    enum qp_dtype it = idx->dtype;
    if (it == QP_DTYPE_BOOL || it == QP_DTYPE_STRING || qp_dtype_traits(it)->bits < 8)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "indices are %s", qp_dtype_name(it));
    if (dep->numel != 1 || dep->rank > 1 || dep->dtype == QP_DTYPE_STRING ||
        dep->dtype == QP_DTYPE_BOOL)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "depth must be one number");
    double d = qp_kt_get_f64(dep, 0);
    if (!(d >= 1 && d <= 1e9))
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "depth %g is not in [1, 1e9]", d);
    if (val->numel != 2 || val->rank != 1)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                            "values must be [off_value, on_value], got %llu elements",
                            (unsigned long long)val->numel);
    if (idx->rank + 1 > QP_MAX_RANK)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "output rank over %d", QP_MAX_RANK);
    struct onehot_state s;
    memset(&s, 0, sizeof s);
    s.depth = (int64_t)d;
    int64_t axis;
    if ((st = qp_kaxis(qp_kattr_int(p->node, "axis", -1), idx->rank + 1, &axis, "axis", p->err)))
        return st;
    s.outer = s.inner = 1;
    int64_t od[QP_MAX_RANK];
    for (int i = 0, j = 0; i <= idx->rank; i++) {
        if (i == axis) {
            od[i] = s.depth;
            continue;
        }
        od[i] = idx->dims[j];
        if (i < axis)
            s.outer *= idx->dims[j];
        else
            s.inner *= idx->dims[j];
        j++;
    }
    s.es = esize(val->dtype);
    s.wrap_negative = p->opset >= 11;
    if ((st = qp_kt_set(p->out[0], val->dtype, idx->rank + 1, od, p->err))) return st;
    return qp_ksave_state(p, &s, sizeof s);
}

enum qp_status qp_k_onehot_run(const struct qp_krun *r) {
    const struct onehot_state *s = r->state;
    const struct qp_kt *idx = r->in[0];
    const unsigned char *val = r->in[2]->data;
    unsigned char *y = r->out[0]->data;
    int is_float = qp_dtype_traits(idx->dtype)->is_float;
    uint64_t n = r->out[0]->numel;
    for (uint64_t i = 0; i < n; i++)
        memcpy(y + i * s->es, val, s->es);
    for (int64_t o = 0; o < s->outer; o++)
        for (int64_t in = 0; in < s->inner; in++) {
            uint64_t ii = (uint64_t)(o * s->inner + in);
            int64_t v;
            if (is_float) {
                double f = qp_kt_get_f64(idx, ii);
                if (!(f > -1e18 && f < 1e18)) continue; /* NaN or far out of range: all off */
                v = (int64_t)f;
            } else {
                v = qp_kt_get_i64(idx, ii);
            }
            if (v < 0 && s->wrap_negative && v >= -s->depth) v += s->depth;
            if (v < 0 || v >= s->depth) continue;
            memcpy(y + (size_t)((o * s->depth + v) * s->inner + in) * s->es, val + s->es, s->es);
        }
    return QP_OK;
}

/* ---- NonZero (opset 9, 13) ------------------------------------------------------------------ */

static int nonzero_at(const struct qp_kt *x, uint64_t i) {
    if (qp_dtype_traits(x->dtype)->is_float) return qp_kt_get_f64(x, i) != 0.0; /* NaN counts */
    return qp_kt_get_i64(x, i) != 0;
}

enum qp_status qp_k_nonzero_prepare(struct qp_kprep *p) {
    if (qp_kinputs_sane(p)) return QP_ERR_BAD_INPUT;
    enum qp_status st = qp_kneed_const(p, 0, "data (the output shape depends on its values)");
    if (!st) st = qp_kneed_bytes(p, 0);
    if (st) return st;
    const struct qp_kt *x = p->in[0];
    int64_t nnz = 0;
    for (uint64_t i = 0; i < x->numel; i++)
        nnz += nonzero_at(x, i);
    int64_t od[2] = {x->rank, nnz};
    return qp_kt_set(p->out[0], QP_DTYPE_INT64, 2, od, p->err);
}

enum qp_status qp_k_nonzero_run(const struct qp_krun *r) {
    const struct qp_kt *x = r->in[0];
    int64_t *y = r->out[0]->data;
    int64_t nnz = r->out[0]->dims[1], k = 0;
    for (uint64_t i = 0; i < x->numel; i++) {
        if (!nonzero_at(x, i)) continue;
        if (k >= nnz) /* the values changed since planning: cannot happen through a session */
            return qp_error_set(r->err, QP_ERR_INTERNAL, "more non-zeros than planned");
        uint64_t rem = i;
        for (int d = x->rank - 1; d >= 0; d--) {
            y[d * nnz + k] = (int64_t)(rem % (uint64_t)x->dims[d]);
            rem /= (uint64_t)x->dims[d];
        }
        k++;
    }
    return QP_OK;
}

/* ---- Compress (opset 9, 11) -----------------------------------------------------------------
 * Keeps the slices along `axis` (or the elements of the flattened input) whose condition is
 * true; a shorter condition drops the rest. */

struct compress_state {
    int64_t outer, len, inner, kept;
    size_t es;
};

enum qp_status qp_k_compress_prepare(struct qp_kprep *p) {
    if (qp_kinputs_sane(p)) return QP_ERR_BAD_INPUT;
    enum qp_status st = qp_kneed_bytes(p, 0);
    if (!st) st = qp_kneed_const(p, 1, "condition (the output shape depends on its values)");
    if (st) return st;
    const struct qp_kt *x = p->in[0], *c = p->in[1];
    if (c->dtype != QP_DTYPE_BOOL || c->rank != 1)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                            "condition is %s of rank %d, expected a "
                            "1-D bool tensor",
                            qp_dtype_name(c->dtype), c->rank);
    struct compress_state s;
    memset(&s, 0, sizeof s);
    s.es = esize(x->dtype);
    s.outer = s.inner = 1;
    int64_t od[QP_MAX_RANK];
    int orank;
    const struct qp_attr *ax = qp_kattr(p->node, "axis");
    int64_t axis = -1;
    if (ax) {
        if ((st = qp_kaxis(qp_kattr_int(p->node, "axis", 0), x->rank, &axis, "axis", p->err)))
            return st;
        for (int i = 0; i < axis; i++)
            s.outer *= x->dims[i];
        s.len = x->dims[axis];
        for (int i = (int)axis + 1; i < x->rank; i++)
            s.inner *= x->dims[i];
    } else {
        s.len = (int64_t)x->numel;
    }
    if ((int64_t)c->numel > s.len)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "condition has %llu entries for %lld",
                            (unsigned long long)c->numel, (long long)s.len);
    const uint8_t *cv = c->data;
    for (uint64_t i = 0; i < c->numel; i++)
        s.kept += cv[i] != 0;
    if (ax) {
        orank = x->rank;
        memcpy(od, x->dims, sizeof(int64_t) * (size_t)x->rank);
        od[axis] = s.kept;
    } else {
        orank = 1;
        od[0] = s.kept;
    }
    if ((st = qp_kt_set(p->out[0], x->dtype, orank, od, p->err))) return st;
    return qp_ksave_state(p, &s, sizeof s);
}

enum qp_status qp_k_compress_run(const struct qp_krun *r) {
    const struct compress_state *s = r->state;
    const struct qp_kt *c = r->in[1];
    const uint8_t *cv = c->data;
    const unsigned char *x = r->in[0]->data;
    unsigned char *y = r->out[0]->data;
    size_t row = (size_t)s->inner * s->es;
    if (!r->in[0]->numel) return QP_OK;
    int64_t k = 0;
    for (uint64_t i = 0; i < c->numel; i++)
        k += cv[i] != 0;
    if (k != s->kept)
        return qp_error_set(r->err, QP_ERR_INTERNAL,
                            "condition changed since "
                            "planning");
    for (int64_t o = 0; o < s->outer; o++) {
        int64_t j = 0;
        for (uint64_t i = 0; i < c->numel; i++) {
            if (!cv[i]) continue;
            memcpy(y + ((size_t)(o * s->kept + j) * row),
                   x + (size_t)(o * s->len + (int64_t)i) * row, row);
            j++;
        }
    }
    return QP_OK;
}

/* ---- ReverseSequence (opset 10) -------------------------------------------------------------
 * For batch entry b (along batch_axis), the first sequence_lens[b] steps along time_axis are
 * reversed; the rest are copied. */

struct revseq_state {
    int64_t batch_axis, time_axis, nb, nt;
    int64_t bstride, tstride; /* in elements */
    size_t es;
};

enum qp_status qp_k_reverse_sequence_prepare(struct qp_kprep *p) {
    enum qp_status st = data_and_indices(p, 0);
    if (st) return st;
    const struct qp_kt *x = p->in[0], *sl = p->in[1];
    if (x->rank < 2) return qp_error_set(p->err, QP_ERR_BAD_INPUT, "input rank %d < 2", x->rank);
    struct revseq_state s;
    memset(&s, 0, sizeof s);
    s.batch_axis = qp_kattr_int(p->node, "batch_axis", 1);
    s.time_axis = qp_kattr_int(p->node, "time_axis", 0);
    if (!((s.batch_axis == 0 && s.time_axis == 1) || (s.batch_axis == 1 && s.time_axis == 0)))
        return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                            "batch_axis %lld and time_axis %lld must be 0 and 1 in some order",
                            (long long)s.batch_axis, (long long)s.time_axis);
    int64_t xs[QP_MAX_RANK];
    strides_of(x, xs);
    s.nb = x->dims[s.batch_axis];
    s.nt = x->dims[s.time_axis];
    s.bstride = xs[s.batch_axis];
    s.tstride = xs[s.time_axis];
    s.es = esize(x->dtype);
    if (sl->rank != 1 || sl->dims[0] != s.nb)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                            "sequence_lens must be 1-D with %lld entries (the batch)",
                            (long long)s.nb);
    if ((st = qp_kt_set(p->out[0], x->dtype, x->rank, x->dims, p->err))) return st;
    return qp_ksave_state(p, &s, sizeof s);
}

enum qp_status qp_k_reverse_sequence_run(const struct qp_krun *r) {
    const struct revseq_state *s = r->state;
    const struct qp_kt *x = r->in[0], *sl = r->in[1];
    const unsigned char *src = x->data;
    unsigned char *dst = r->out[0]->data;
    for (int64_t b = 0; b < s->nb; b++) {
        int64_t len = qp_kt_get_i64(sl, (uint64_t)b);
        if (len < 0 || len > s->nt)
            return qp_error_set(r->err, QP_ERR_BAD_INPUT,
                                "sequence_lens[%lld] = %lld is outside [0, %lld]", (long long)b,
                                (long long)len, (long long)s->nt);
    }
    if (dst != src && x->nbytes) memcpy(dst, src, x->nbytes);
    int64_t inner = s->tstride < s->bstride ? s->tstride : s->bstride;
    for (int64_t b = 0; b < s->nb; b++) {
        int64_t len = qp_kt_get_i64(sl, (uint64_t)b);
        for (int64_t t = 0; t < len; t++) {
            size_t from = (size_t)(b * s->bstride + t * s->tstride) * s->es;
            size_t to = (size_t)(b * s->bstride + (len - 1 - t) * s->tstride) * s->es;
            memcpy(dst + to, src + from, (size_t)inner * s->es);
        }
    }
    return QP_OK;
}

/* ---- MaxUnpool (opset 9, 11) ----------------------------------------------------------------
 * Output zeros, then y[I[k]] = X[k] (I: flat indices into the output, as MaxPool's Indices).
 * Output shape: (in - 1) * stride - pads + kernel per spatial dim, or input 2 (a plan-time
 * value): then, as the ONNX reference and its test data have it, the indices still address
 * the default shape, and each value lands at the same coordinates of the larger output. */

struct unpool_state {
    size_t es;
    int rank, remap;
    int64_t ddims[QP_MAX_RANK]; /* the default output shape the indices refer to */
};

enum qp_status qp_k_maxunpool_prepare(struct qp_kprep *p) {
    enum qp_status st = data_and_indices(p, 0);
    if (st) return st;
    const struct qp_kt *x = p->in[0], *idx = p->in[1];
    if (x->rank < 3 || idx->rank != x->rank ||
        memcmp(idx->dims, x->dims, sizeof(int64_t) * (size_t)x->rank))
        return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                            "X (rank >= 3) and I must have the same shape");
    int nsp = x->rank - 2;
    int64_t od[QP_MAX_RANK];
    od[0] = x->dims[0];
    od[1] = x->dims[1];
    const int64_t *ks, *strides = NULL, *pads = NULL;
    if (qp_kattr_ints(p->node, "kernel_shape", &ks) != nsp)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "kernel_shape must have %d entries", nsp);
    int64_t n_st = qp_kattr_ints(p->node, "strides", &strides);
    int64_t n_pad = qp_kattr_ints(p->node, "pads", &pads);
    if ((n_st >= 0 && n_st != nsp) || (n_pad >= 0 && n_pad != 2 * nsp))
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "strides or pads have the wrong length");
    for (int i = 0; i < nsp; i++) {
        int64_t stv = strides ? strides[i] : 1;
        int64_t pb = pads ? pads[i] : 0, pe = pads ? pads[i + nsp] : 0;
        if (stv < 1 || ks[i] < 1 || pb < 0 || pe < 0 || stv > (1 << 20) || ks[i] > (1 << 20) ||
            x->dims[i + 2] > ((int64_t)1 << 40))
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "kernel_shape, strides or pads");
        od[i + 2] = (x->dims[i + 2] - 1) * stv - pb - pe + ks[i];
        if (od[i + 2] < 0) return qp_error_set(p->err, QP_ERR_BAD_INPUT, "negative output size");
    }
    struct unpool_state s;
    memset(&s, 0, sizeof s);
    s.es = esize(x->dtype);
    s.rank = x->rank;
    memcpy(s.ddims, od, sizeof(int64_t) * (size_t)x->rank);
    if (p->n_in > 2 && p->in[2]) {
        if ((st = qp_kneed_const(p, 2, "output_shape"))) return st;
        const struct qp_kt *os = p->in[2];
        if ((os->dtype != QP_DTYPE_INT64 && os->dtype != QP_DTYPE_INT32) || os->rank != 1 ||
            (int)os->numel != x->rank)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "output_shape must be %d int64 values",
                                x->rank);
        for (int i = 0; i < x->rank; i++) {
            int64_t v = qp_kt_get_i64(os, (uint64_t)i);
            if (i < 2 && v != x->dims[i])
                return qp_error_set(p->err, QP_ERR_BAD_INPUT, "output_shape[%d] = %lld, X has %lld",
                                    i, (long long)v, (long long)x->dims[i]);
            if (v < s.ddims[i])
                return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                                    "output_shape[%d] = %lld is below the default %lld", i,
                                    (long long)v, (long long)s.ddims[i]);
            od[i] = v;
            s.remap |= v != s.ddims[i];
        }
    }
    if ((st = qp_kt_set(p->out[0], x->dtype, x->rank, od, p->err))) return st;
    return qp_ksave_state(p, &s, sizeof s);
}

enum qp_status qp_k_maxunpool_run(const struct qp_krun *r) {
    const struct unpool_state *s = r->state;
    const struct qp_kt *x = r->in[0], *idx = r->in[1];
    struct qp_kt *y = r->out[0];
    if (y->nbytes) memset(y->data, 0, y->nbytes);
    uint64_t n_default = 1;
    for (int d = 0; d < s->rank; d++)
        n_default *= (uint64_t)s->ddims[d];
    for (uint64_t k = 0; k < x->numel; k++) {
        int64_t v = qp_kt_get_i64(idx, k);
        if (v < 0 || (uint64_t)v >= n_default)
            return qp_error_set(r->err, QP_ERR_BAD_INPUT,
                                "index %lld is out of range for an output of %llu elements",
                                (long long)v, (unsigned long long)n_default);
        if (s->remap) {
            int64_t rem = v, o = 0, mul = 1;
            for (int d = s->rank - 1; d >= 0; d--) {
                o += (rem % s->ddims[d]) * mul;
                rem /= s->ddims[d];
                mul *= y->dims[d];
            }
            v = o;
        }
        memcpy((unsigned char *)y->data + (size_t)v * s->es,
               (const unsigned char *)x->data + k * s->es, s->es);
    }
    return QP_OK;
}

/* ---- Unique (opset 11) ----------------------------------------------------------------------
 * Distinct elements (or slices along `axis`), sorted ascending (lexicographically for slices;
 * NaN after every number and equal to NaN) or in order of first occurrence when sorted=0.
 * Outputs Y, the first index of each, the inverse index of every input item, and the counts.
 * The input must be a plan-time value: the output size depends on it. */

struct unique_state {
    int64_t outer, n, inner; /* items along the axis: [outer, n, inner]; no axis: [1, numel, 1] */
    int64_t n_unique;
    int sorted;
    size_t es;
};

/* Compares items i and j: -1, 0, 1. */
static int unique_cmp(const struct qp_kt *x, const struct unique_state *s, int64_t i, int64_t j) {
    int is_float = qp_dtype_traits(x->dtype)->is_float;
    for (int64_t o = 0; o < s->outer; o++)
        for (int64_t k = 0; k < s->inner; k++) {
            uint64_t a = (uint64_t)((o * s->n + i) * s->inner + k);
            uint64_t b = (uint64_t)((o * s->n + j) * s->inner + k);
            if (is_float) {
                double va = qp_kt_get_f64(x, a), vb = qp_kt_get_f64(x, b);
                int na = isnan(va), nb = isnan(vb);
                if (na || nb) {
                    if (na && nb) continue;
                    return na ? 1 : -1;
                }
                if (va != vb) return va < vb ? -1 : 1;
            } else if (x->dtype == QP_DTYPE_UINT64) {
                uint64_t va = (uint64_t)qp_kt_get_i64(x, a), vb = (uint64_t)qp_kt_get_i64(x, b);
                if (va != vb) return va < vb ? -1 : 1;
            } else {
                int64_t va = qp_kt_get_i64(x, a), vb = qp_kt_get_i64(x, b);
                if (va != vb) return va < vb ? -1 : 1;
            }
        }
    return 0;
}

/* Groups the items: work holds 4 * n int64. On return work[0, u) are the first indices of
 * the distinct items in output order and work[n + i] the output position of item i. */
static int64_t unique_groups(const struct qp_kt *x, const struct unique_state *s, int64_t *work) {
    int64_t n = s->n, *ord = work, *inv = work + n, *tmp = work + 2 * n, *pos = work + 3 * n;
    for (int64_t i = 0; i < n; i++)
        ord[i] = i;
    /* stable merge sort by value: ties keep index order */
    for (int64_t w = 1; w < n; w *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * w) {
            int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            int64_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                tmp[k++] = unique_cmp(x, s, ord[j], ord[i]) < 0 ? ord[j++] : ord[i++];
            while (i < mid)
                tmp[k++] = ord[i++];
            while (j < hi)
                tmp[k++] = ord[j++];
        }
        memcpy(ord, tmp, sizeof(int64_t) * (size_t)n);
    }
    /* groups in sorted order: tmp[g] = first index; inv[item] = group */
    int64_t u = 0;
    for (int64_t i = 0; i < n; i++) {
        if (i == 0 || unique_cmp(x, s, ord[i - 1], ord[i]) != 0) tmp[u++] = ord[i];
        inv[ord[i]] = u - 1;
    }
    if (s->sorted) {
        for (int64_t g = 0; g < u; g++)
            pos[g] = g;
    } else {
        /* order of first occurrence: walk the items, numbering groups as they appear */
        for (int64_t g = 0; g < u; g++)
            pos[g] = -1;
        int64_t next = 0;
        for (int64_t i = 0; i < n; i++)
            if (pos[inv[i]] < 0) pos[inv[i]] = next++;
    }
    for (int64_t g = 0; g < u; g++)
        ord[pos[g]] = tmp[g];
    for (int64_t i = 0; i < n; i++)
        inv[i] = pos[inv[i]];
    return u;
}

enum qp_status qp_k_unique_prepare(struct qp_kprep *p) {
    if (qp_kinputs_sane(p)) return QP_ERR_BAD_INPUT;
    enum qp_status st = qp_kneed_bytes(p, 0);
    if (!st) st = qp_kneed_const(p, 0, "X (the output size depends on its values)");
    if (st) return st;
    const struct qp_kt *x = p->in[0];
    if (x->dtype == QP_DTYPE_BOOL || qp_dtype_traits(x->dtype)->bits < 8)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "input dtype %s", qp_dtype_name(x->dtype));
    struct unique_state s;
    memset(&s, 0, sizeof s);
    s.sorted = qp_kattr_int(p->node, "sorted", 1) != 0;
    s.es = esize(x->dtype);
    int64_t axis = -1;
    if (qp_kattr(p->node, "axis")) {
        if ((st = qp_kaxis(qp_kattr_int(p->node, "axis", 0), x->rank, &axis, "axis", p->err)))
            return st;
        s.outer = s.inner = 1;
        for (int i = 0; i < axis; i++)
            s.outer *= x->dims[i];
        s.n = x->dims[axis];
        for (int i = (int)axis + 1; i < x->rank; i++)
            s.inner *= x->dims[i];
    } else {
        s.outer = s.inner = 1;
        s.n = (int64_t)x->numel;
    }
    if (!x->numel && s.n > 1)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED,
                            "%lld empty slices along the axis (zero-size input)", (long long)s.n);
    size_t n_work;
    if (!qp_size_mul((size_t)s.n, 4, &n_work) || !qp_size_add(n_work, 1, &n_work))
        return qp_error_set(p->err, QP_ERR_NOMEM, "too large");
    int64_t *work = qp_malloc_n(n_work, sizeof *work);
    if (!work) return qp_error_set(p->err, QP_ERR_NOMEM, "out of memory");
    s.n_unique = unique_groups(x, &s, work);
    free(work);
    int64_t od[QP_MAX_RANK];
    int orank = 1;
    od[0] = s.n_unique;
    if (axis >= 0) {
        orank = x->rank;
        memcpy(od, x->dims, sizeof(int64_t) * (size_t)x->rank);
        od[axis] = s.n_unique;
    }
    if ((st = qp_kt_set(p->out[0], x->dtype, orank, od, p->err))) return st;
    if (p->n_out > 1 && p->out[1] &&
        (st = qp_kt_set(p->out[1], QP_DTYPE_INT64, 1, &s.n_unique, p->err)))
        return st;
    if (p->n_out > 2 && p->out[2] && (st = qp_kt_set(p->out[2], QP_DTYPE_INT64, 1, &s.n, p->err)))
        return st;
    if (p->n_out > 3 && p->out[3] &&
        (st = qp_kt_set(p->out[3], QP_DTYPE_INT64, 1, &s.n_unique, p->err)))
        return st;
    p->scratch = n_work * sizeof *work; /* qp_malloc_n checked the product */
    return qp_ksave_state(p, &s, sizeof s);
}

enum qp_status qp_k_unique_run(const struct qp_krun *r) {
    const struct unique_state *s = r->state;
    const struct qp_kt *x = r->in[0];
    int64_t *work = r->scratch, *first = work, *inv = work + s->n;
    int64_t u = unique_groups(x, s, work);
    if (u != s->n_unique)
        return qp_error_set(r->err, QP_ERR_INTERNAL, "input changed since planning");
    const unsigned char *src = x->data;
    unsigned char *y = r->out[0]->data;
    size_t row = (size_t)s->inner * s->es;
    for (int64_t o = 0; o < s->outer; o++)
        for (int64_t g = 0; g < u; g++)
            memcpy(y + (size_t)(o * u + g) * row, src + (size_t)(o * s->n + first[g]) * row, row);
    if (r->n_out > 1 && r->out[1]) memcpy(r->out[1]->data, first, sizeof(int64_t) * (size_t)u);
    if (r->n_out > 2 && r->out[2]) memcpy(r->out[2]->data, inv, sizeof(int64_t) * (size_t)s->n);
    if (r->n_out > 3 && r->out[3]) {
        int64_t *cnt = r->out[3]->data;
        memset(cnt, 0, sizeof(int64_t) * (size_t)u);
        for (int64_t i = 0; i < s->n; i++)
            cnt[inv[i]]++;
    }
    return QP_OK;
}
