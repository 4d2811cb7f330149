#include "core/clones.h"
#include "qmath/qparams.h"
#include "qmath/qsimd.h"

#include <math.h>
#include <string.h>

float qp_round_half_even(float x) {
    if (!(fabsf(x) < 8388608.0f)) return x; /* NaN, Inf, or already an integer (>= 2^23) */
    float f = floorf(x);
    float d = x - f; /* exact for |x| < 2^23 */
    if (d > 0.5f) return f + 1.0f;
    if (d < 0.5f) return f;
    return fmodf(f, 2.0f) == 0.0f ? f : f + 1.0f;
}

int qp_qtype_int_range(enum qp_dtype dt, int64_t *lo, int64_t *hi) {
    switch (dt) {
    case QP_DTYPE_INT8:
        *lo = -128, *hi = 127;
        return 1;
    case QP_DTYPE_UINT8:
        *lo = 0, *hi = 255;
        return 1;
    case QP_DTYPE_INT16:
        *lo = -32768, *hi = 32767;
        return 1;
    case QP_DTYPE_UINT16:
        *lo = 0, *hi = 65535;
        return 1;
    case QP_DTYPE_INT32:
        *lo = INT32_MIN, *hi = INT32_MAX;
        return 1;
    case QP_DTYPE_INT4:
        *lo = -8, *hi = 7;
        return 1;
    case QP_DTYPE_UINT4:
        *lo = 0, *hi = 15;
        return 1;
    default:
        return 0;
    }
}

static int is_fp8(enum qp_dtype dt) {
    return dt == QP_DTYPE_FLOAT8E4M3FN || dt == QP_DTYPE_FLOAT8E4M3FNUZ ||
           dt == QP_DTYPE_FLOAT8E5M2 || dt == QP_DTYPE_FLOAT8E5M2FNUZ;
}

int qp_qtype_supported(enum qp_dtype dt) {
    int64_t lo, hi;
    return qp_qtype_int_range(dt, &lo, &hi) || is_fp8(dt);
}

float qp_qvalue_get(enum qp_dtype dt, const void *p, uint64_t i) {
    int64_t v;
    if (qp_elem_get_int(dt, p, i, &v)) return (float)v;
    return is_fp8(dt) ? qp_fp8_to_f32(dt, ((const uint8_t *)p)[i]) : 0.0f;
}

/* Integer value of element i (zero points, integer data); 0 for fp8. */
static int64_t qint_get(enum qp_dtype dt, const void *p, uint64_t i) {
    int64_t v = 0;
    return qp_elem_get_int(dt, p, i, &v) ? v : 0;
}

static void qint_set(enum qp_dtype dt, void *p, uint64_t i, int64_t v) {
    (void)qp_elem_set_int(dt, p, i, v);
}

struct qp_qspec qp_qspec_per_tensor(enum qp_dtype qtype, int64_t n, const float *scale,
                                    const void *zp) {
    struct qp_qspec q = {.qtype = qtype,
                         .saturate = 1,
                         .outer = 1,
                         .axis_len = 1,
                         .inner = n,
                         .n_params = 1,
                         .scale = scale,
                         .zero_point = zp};
    return q;
}

enum qp_status qp_qspec_check(const struct qp_qspec *s, struct qp_error *err) {
    if (!qp_qtype_supported(s->qtype))
        return qp_error_set(err, QP_ERR_UNSUPPORTED, "quantized type %s is not supported",
                            qp_dtype_name(s->qtype));
    if (s->outer < 0 || s->axis_len < 0 || s->inner < 0 || s->block < 0 || !s->scale)
        return qp_error_set(err, QP_ERR_BAD_INPUT, "invalid quantization geometry");
    int64_t want;
    if (s->block > 0) {
        int64_t nb = (s->axis_len + s->block - 1) / s->block;
        want = s->outer * nb * s->inner;
    } else if (s->n_params == 1) {
        want = 1;
    } else {
        want = s->axis_len;
    }
    if (s->n_params != want)
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "scale has %lld elements, expected %lld for this quantization axis "
                            "and block size",
                            (long long)s->n_params, (long long)want);
    return QP_OK;
}

int64_t qp_qspec_param(const struct qp_qspec *s, int64_t idx) {
    if (s->block > 0) {
        int64_t i = idx % s->inner;
        int64_t a = (idx / s->inner) % s->axis_len;
        int64_t o = idx / (s->inner * s->axis_len);
        int64_t nb = (s->axis_len + s->block - 1) / s->block;
        return (o * nb + a / s->block) * s->inner + i;
    }
    if (s->n_params == 1) return 0;
    return (idx / s->inner) % s->axis_len;
}

/* The quantized value of one element, as an integer (integer types) or fp8 bits. */
static int64_t quantize_one(const struct qp_qspec *s, float x, int64_t p, int64_t lo, int64_t hi) {
    float sc = s->scale[p];
    if (is_fp8(s->qtype)) {
        float zp =
            s->zero_point ? qp_fp8_to_f32(s->qtype, ((const uint8_t *)s->zero_point)[p]) : 0.0f;
        return qp_f32_to_fp8(s->qtype, x / sc + zp, s->saturate);
    }
    int64_t zp = s->zero_point ? qint_get(s->qtype, s->zero_point, (uint64_t)p) : 0;
    float r = qp_round_half_even(x / sc);
    /* Saturate in float first: r may be huge, Inf or NaN (NaN quantizes to the zero point's
     * clamp of 0, as ONNX Runtime does). */
    int64_t v;
    if (r >= 9.0e18f) return hi; /* beyond every type's range whatever the zero point */
    if (r <= -9.0e18f) return lo;
    if (r != r)
        v = 0;
    else
        v = (int64_t)r;
    v += zp;
    if (v < lo) v = lo;
    if (v > hi) v = hi;
    return v;
}

static float dequantize_one(const struct qp_qspec *s, const void *q, int64_t idx, int64_t p) {
    if (is_fp8(s->qtype)) {
        float zp =
            s->zero_point ? qp_fp8_to_f32(s->qtype, ((const uint8_t *)s->zero_point)[p]) : 0.0f;
        return (qp_fp8_to_f32(s->qtype, ((const uint8_t *)q)[idx]) - zp) * s->scale[p];
    }
    int64_t zp = s->zero_point ? qint_get(s->qtype, s->zero_point, (uint64_t)p) : 0;
    return (float)(qint_get(s->qtype, q, (uint64_t)idx) - zp) * s->scale[p];
}

/* round_half_even(q) for |q| < 2^23 without libm calls: truncation toward zero is exact there
 * and does not depend on the rounding mode, and so is q - trunc(q). */
static inline int32_t round_half_even_small(float q) {
    int32_t t = (int32_t)q;
    float d = q - (float)t;
    int32_t odd = t & 1;
    return t + ((d > 0.5f) | ((d == 0.5f) & odd)) - ((d < -0.5f) | ((d == -0.5f) & odd));
}

#define FQ_BLOCK 256
_Static_assert(FQ_BLOCK <= QP_QSIMD_BLOCK, "the SIMD blocks take whole blocks");

/* One run of elements sharing scale `sc` and zero point `zp`, for types of at most 16 bits: in
 * blocks whose |x / sc| are all below 2^23 (the usual case) every step is branch-free integer or
 * float arithmetic on int32 (no overflow: |round| <= 2^23, |zp| < 2^16), which compilers
 * vectorize; a block holding a larger value, an infinity or a NaN takes quantize_one per element.
 */
/* Compiled for AVX-512, AVX2 and baseline x86-64 (core/clones.h): IEEE division and integer
 * rounding give the same bits on each. */

QP_CLONES
static void fake_quantize_run16(const struct qp_qspec *s, const float *x, float *y, int64_t i,
                                int64_t stop, int64_t p, float sc, int32_t zp, int32_t lo,
                                int32_t hi) {
    float q[FQ_BLOCK];
    while (i < stop) {
        int64_t n = stop - i < FQ_BLOCK ? stop - i : FQ_BLOCK;
        if (qp_qsimd_fake_quantize(x + i, y + i, n, sc, (float)zp, (float)lo, (float)hi)) {
            i += n;
            continue;
        }
        int ok = 1;
        for (int64_t k = 0; k < n; k++) {
            q[k] = x[i + k] / sc;
            ok &= fabsf(q[k]) < 8388608.0f;
        }
        if (ok) {
            for (int64_t k = 0; k < n; k++) {
                int32_t v = round_half_even_small(q[k]) + zp;
                v = v < lo ? lo : v;
                v = v > hi ? hi : v;
                y[i + k] = (float)(v - zp) * sc;
            }
        } else {
            for (int64_t k = 0; k < n; k++)
                y[i + k] = (float)(quantize_one(s, x[i + k], p, lo, hi) - zp) * sc;
        }
        i += n;
    }
}

/* The end of the run of elements from i (below `end`) that share element i's scale and zero
 * point: `end` per tensor, the next multiple of `inner` per axis (no blocks). */
static inline int64_t run_end(const struct qp_qspec *s, int64_t i, int64_t end) {
    if (s->n_params != 1 && s->inner > 0 && (i / s->inner + 1) * s->inner < end)
        return (i / s->inner + 1) * s->inner;
    return end;
}

/* Integer qtypes without blocks: scale and zero point are constant over runs of `inner`
 * elements (the whole range per tensor), so they are read once per run, and the common case
 * (|x / scale| < 2^23) rounds inline; anything else goes through quantize_one. Same values as
 * quantize_one then dequantize_one, element by element (sensitivity probes fake-quantize large
 * activations once per probe; the generic loop took 12-17 ns per element). */
static void fake_quantize_int(const struct qp_qspec *s, const float *x, float *y, int64_t begin,
                              int64_t end, int64_t lo, int64_t hi) {
    int64_t i = begin;
    int narrow = lo >= -65536 && hi <= 65536;
    while (i < end) {
        int64_t p = qp_qspec_param(s, i), stop = run_end(s, i, end);
        float sc = s->scale[p];
        int64_t zp = s->zero_point ? qint_get(s->qtype, s->zero_point, (uint64_t)p) : 0;
        if (narrow) {
            fake_quantize_run16(s, x, y, i, stop, p, sc, (int32_t)zp, (int32_t)lo, (int32_t)hi);
            i = stop;
            continue;
        }
        for (; i < stop; i++) {
            float q = x[i] / sc;
            int64_t v;
            if (fabsf(q) < 8388608.0f) {
                v = round_half_even_small(q) + zp;
                v = v < lo ? lo : v > hi ? hi : v;
            } else {
                v = quantize_one(s, x[i], p, lo, hi);
            }
            y[i] = (float)(v - zp) * sc;
        }
    }
}

void qp_fake_quantize_f32(const struct qp_qspec *s, const float *x, float *y, int64_t begin,
                          int64_t end) {
    int64_t lo = 0, hi = 0;
    qp_qtype_int_range(s->qtype, &lo, &hi);
    int fp8 = is_fp8(s->qtype);
    if (!fp8 && s->block <= 0) {
        fake_quantize_int(s, x, y, begin, end, lo, hi);
        return;
    }
    for (int64_t i = begin; i < end; i++) {
        int64_t p = qp_qspec_param(s, i);
        int64_t v = quantize_one(s, x[i], p, lo, hi);
        /* Same arithmetic as dequantize_one on the stored value. */
        uint8_t byte = (uint8_t)v;
        if (fp8) {
            float zp =
                s->zero_point ? qp_fp8_to_f32(s->qtype, ((const uint8_t *)s->zero_point)[p]) : 0.0f;
            y[i] = (qp_fp8_to_f32(s->qtype, byte) - zp) * s->scale[p];
        } else {
            int64_t zp = s->zero_point ? qint_get(s->qtype, s->zero_point, (uint64_t)p) : 0;
            y[i] = (float)(v - zp) * s->scale[p];
        }
    }
}

/* int8/uint8 without blocks, run by run of one scale and zero point: blocks whose |x / scale|
 * are all below 2^23 round inline (vectorized), anything else goes through quantize_one. The
 * same values as quantize_one element by element (QuantizeLinear of every Q/DQ model runs
 * here: the generic loop took 10-15 ns per element). */
QP_CLONES
static void quantize_q8(const struct qp_qspec *s, const float *x, void *out, int64_t begin,
                        int64_t end, int32_t lo, int32_t hi) {
    int sgn = s->qtype == QP_DTYPE_INT8;
    float q[FQ_BLOCK];
    for (int64_t i = begin; i < end;) {
        int64_t p = qp_qspec_param(s, i), stop = run_end(s, i, end);
        float sc = s->scale[p];
        int32_t zp = s->zero_point ? (int32_t)qint_get(s->qtype, s->zero_point, (uint64_t)p) : 0;
        while (i < stop) {
            int64_t n = stop - i < FQ_BLOCK ? stop - i : FQ_BLOCK;
            if (qp_qsimd_quantize_q8(x + i, (char *)out + i, sgn, n, sc, (float)zp, (float)lo,
                                     (float)hi)) {
                i += n;
                continue;
            }
            int ok = 1;
            for (int64_t k = 0; k < n; k++) {
                q[k] = x[i + k] / sc;
                ok &= fabsf(q[k]) < 8388608.0f;
            }
            int32_t v[FQ_BLOCK];
            if (ok)
                for (int64_t k = 0; k < n; k++) {
                    int32_t t = round_half_even_small(q[k]) + zp;
                    v[k] = t < lo ? lo : t > hi ? hi : t;
                }
            else
                for (int64_t k = 0; k < n; k++)
                    v[k] = (int32_t)quantize_one(s, x[i + k], p, lo, hi);
            if (sgn)
                for (int64_t k = 0; k < n; k++)
                    ((int8_t *)out)[i + k] = (int8_t)v[k];
            else
                for (int64_t k = 0; k < n; k++)
                    ((uint8_t *)out)[i + k] = (uint8_t)v[k];
            i += n;
        }
    }
}

void qp_quantize_f32(const struct qp_qspec *s, const float *x, void *q, int64_t begin,
                     int64_t end) {
    int64_t lo = 0, hi = 0;
    qp_qtype_int_range(s->qtype, &lo, &hi);
    if ((s->qtype == QP_DTYPE_INT8 || s->qtype == QP_DTYPE_UINT8) && s->block <= 0) {
        quantize_q8(s, x, q, begin, end, (int32_t)lo, (int32_t)hi);
        return;
    }
    int fp8 = is_fp8(s->qtype);
    for (int64_t i = begin; i < end; i++) {
        int64_t v = quantize_one(s, x[i], qp_qspec_param(s, i), lo, hi);
        if (fp8)
            ((uint8_t *)q)[i] = (uint8_t)v;
        else
            qint_set(s->qtype, q, (uint64_t)i, v);
    }
}

QP_CLONES
static void dequantize_q8(int sgn, const void *q, float *y, int64_t i, int64_t stop, float sc,
                          int32_t zp) {
    if (sgn)
        for (; i < stop; i++)
            y[i] = (float)((int32_t)((const int8_t *)q)[i] - zp) * sc;
    else
        for (; i < stop; i++)
            y[i] = (float)((int32_t)((const uint8_t *)q)[i] - zp) * sc;
}

void qp_dequantize_f32(const struct qp_qspec *s, const void *q, float *y, int64_t begin,
                       int64_t end) {
    if ((s->qtype != QP_DTYPE_INT8 && s->qtype != QP_DTYPE_UINT8) || s->block > 0) {
        for (int64_t i = begin; i < end; i++)
            y[i] = dequantize_one(s, q, i, qp_qspec_param(s, i));
        return;
    }
    for (int64_t i = begin; i < end;) { /* int8/uint8: one scale and zero point per run */
        int64_t p = qp_qspec_param(s, i), stop = run_end(s, i, end);
        float sc = s->scale[p];
        int32_t zp = s->zero_point ? (int32_t)qint_get(s->qtype, s->zero_point, (uint64_t)p) : 0;
        dequantize_q8(s->qtype == QP_DTYPE_INT8, q, y, i, stop, sc, zp);
        i = stop;
    }
}

static float fp8_max(enum qp_dtype dt) {
    switch (dt) {
    case QP_DTYPE_FLOAT8E4M3FN:
        return 448.0f;
    case QP_DTYPE_FLOAT8E4M3FNUZ:
        return 240.0f;
    default:
        return 57344.0f;
    }
}

enum qp_status qp_qparams_from_range(enum qp_dtype qtype, float lo, float hi, int symmetric,
                                     float *scale_out, int32_t *zero_point_out,
                                     struct qp_error *err) {
    if (!isfinite(lo) || !isfinite(hi) || lo > hi)
        return qp_error_set(err, QP_ERR_BAD_INPUT, "qparams: invalid range [%g, %g]", (double)lo,
                            (double)hi);
    if (lo > 0.0f) lo = 0.0f;
    if (hi < 0.0f) hi = 0.0f;
    if (is_fp8(qtype)) {
        float amax = fmaxf(-lo, hi);
        *scale_out = amax > 0.0f ? amax / fp8_max(qtype) : 1.0f;
        *zero_point_out = 0;
        return QP_OK;
    }
    int64_t qlo, qhi;
    if (!qp_qtype_int_range(qtype, &qlo, &qhi) || qtype == QP_DTYPE_INT32)
        return qp_error_set(err, QP_ERR_UNSUPPORTED, "qparams: cannot quantize to %s",
                            qp_dtype_name(qtype));
    if (symmetric) {
        float amax = fmaxf(-lo, hi);
        if (qlo < 0) {
            *scale_out = amax > 0.0f ? amax / (float)qhi : 1.0f;
            *zero_point_out = 0;
        } else {
            *scale_out = amax > 0.0f ? 2.0f * amax / (float)(qhi - qlo) : 1.0f;
            *zero_point_out = (int32_t)((qhi - qlo + 1) / 2);
        }
        return QP_OK;
    }
    float sc = (hi - lo) / (float)(qhi - qlo);
    if (!(sc > 0.0f)) {
        *scale_out = 1.0f;
        *zero_point_out = qlo < 0 ? 0 : (int32_t)qlo;
        return QP_OK;
    }
    float zp = qp_round_half_even((float)qlo - lo / sc);
    if (zp < (float)qlo) zp = (float)qlo;
    if (zp > (float)qhi) zp = (float)qhi;
    *scale_out = sc;
    *zero_point_out = (int32_t)zp;
    return QP_OK;
}

double qp_symmetric_sq_error(enum qp_dtype qtype, float amax, const float *x, const double *weight,
                             int64_t n, float *scratch) {
    float scale;
    int32_t zp;
    if (qp_qparams_from_range(qtype, -amax, amax, 1, &scale, &zp, NULL) != QP_OK) return INFINITY;
    uint8_t zero[2] = {0, 0};
    struct qp_qspec q = qp_qspec_per_tensor(qtype, n, &scale, zero);
    qp_fake_quantize_f32(&q, x, scratch, 0, n);
    double e = 0.0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) continue;
        double d = (double)scratch[i] - (double)x[i];
        e += d * d * (weight ? weight[i] : 1.0);
    }
    return e;
}
