/*
 * The one home of quantization math (DESIGN.md invariant 2): rounding half to even, saturation,
 * scale/zero-point application for per-tensor, per-axis and blocked quantization, int4 packing,
 * and scale/zero-point computation from a range. The engine's QuantizeLinear/DequantizeLinear
 * kernels, edge overlays (fake quantization), calibrators and the QDQ writer all call these, so
 * an overlay and a real Q/DQ pair give bit-identical results.
 *
 * FP8 conversion itself is qp_f32_to_fp8 / qp_fp8_to_f32 (include/qplace/dtype.h); this module
 * only decides what to convert.
 *
 * Depends on src/core only, so kernels may use it (docs/engine.md).
 *
 *     struct qp_qspec s = {.qtype = QP_DTYPE_INT8, .outer = 1, .axis_len = 1, .inner = n,
 *                          .scale = &scale, .n_params = 1};
 *     qp_quantize_f32(&s, x, q, 0, n);     // q: int8_t[n]
 *     qp_dequantize_f32(&s, q, y, 0, n);   // y == (q - 0) * scale
 */
#ifndef QP_QMATH_QPARAMS_H
#define QP_QMATH_QPARAMS_H

#include <stddef.h>
#include <stdint.h>

#include "core/elem.h" /* qp_int4_get / qp_int4_set */
#include "qplace/dtype.h"
#include "qplace/status.h"

/* Round to nearest, ties to even, independent of the FPU rounding mode. NaN and infinities pass
 * through. */
float qp_round_half_even(float x);

/* 1 when `dt` is a quantized type this module handles: int8, uint8, int16, uint16, int32
 * (dequantize only), int4, uint4, float8e4m3fn, float8e4m3fnuz, float8e5m2, float8e5m2fnuz. */
int qp_qtype_supported(enum qp_dtype dt);

/* Integer range of an integer quantized type (int4: -8..7, uint8: 0..255, ...). Returns 0 for a
 * non-integer type. */
int qp_qtype_int_range(enum qp_dtype dt, int64_t *lo, int64_t *hi);

/* Reads element `i` of a quantized buffer as float (integers exactly; fp8 decoded). */
float qp_qvalue_get(enum qp_dtype dt, const void *p, uint64_t i);

/*
 * How a tensor x is quantized. x is viewed as [outer, axis_len, inner] around the quantization
 * axis; scale and zero point hold n_params entries laid out as
 *   per tensor: n_params == 1 (outer = 1, axis_len = 1, inner = numel is the usual view);
 *   per axis:   n_params == axis_len, entry = a;
 *   blocked:    block > 0, n_params == outer * ceil(axis_len / block) * inner,
 *               entry = (o * ceil(axis_len / block) + a / block) * inner + i.
 * zero_point (may be NULL: 0) has dtype qtype and is packed like the data (int4: two per byte).
 */
struct qp_qspec {
    enum qp_dtype qtype;
    int saturate; /* FP8 only: clamp finite out-of-range values (ONNX `saturate`, default 1) */
    int64_t outer, axis_len, inner;
    int64_t block; /* 0: per tensor or per axis */
    int64_t n_params;
    const float *scale;
    const void *zero_point;
};

/* The spec of n elements quantized to qtype with one scale and zero point (zp may be NULL: 0),
 * FP8 saturating. */
struct qp_qspec qp_qspec_per_tensor(enum qp_dtype qtype, int64_t n, const float *scale,
                                    const void *zp);

/* Checks that spec's geometry and n_params agree; QP_ERR_BAD_INPUT with a message otherwise. */
enum qp_status qp_qspec_check(const struct qp_qspec *s, struct qp_error *err);

/* Parameter index of flat element `idx` of x. */
int64_t qp_qspec_param(const struct qp_qspec *s, int64_t idx);

/* y = saturate(round_half_even(x / scale) + zero_point) for elements [begin, end) of x (flat C
 * order). For FP8, y = fp8(x / scale + zero_point) with the spec's saturate. `q` is the whole
 * output buffer of dtype qtype (int4 packed; callers splitting work must split at even indices so
 * two threads never write one byte). */
void qp_quantize_f32(const struct qp_qspec *s, const float *x, void *q, int64_t begin, int64_t end);

/* y = (q - zero_point) * scale for elements [begin, end). int32 input is supported here. */
void qp_dequantize_f32(const struct qp_qspec *s, const void *q, float *y, int64_t begin,
                       int64_t end);

/* dequantize(quantize(x)) element-wise without the intermediate buffer; bit-identical to the two
 * calls above (what an edge overlay computes). `y` may alias `x`. */
void qp_fake_quantize_f32(const struct qp_qspec *s, const float *x, float *y, int64_t begin,
                          int64_t end);

/* Scale and zero point for the real range [lo, hi] (widened to include 0) of an integer qtype.
 * symmetric: zero point 0 (signed types) or the midpoint (unsigned), scale = max|.| / (qmax) —
 * as ONNX Runtime and ModelOpt do. Zero-width ranges give scale 1. FP8: scale = amax / max
 * finite value, zero point 0. Returns QP_ERR_BAD_INPUT for non-finite bounds, QP_ERR_UNSUPPORTED
 * for other types. */
enum qp_status qp_qparams_from_range(enum qp_dtype qtype, float lo, float hi, int symmetric,
                                     float *scale_out, int32_t *zero_point_out,
                                     struct qp_error *err);

/* The squared error of quantizing x[0..n) symmetrically to qtype with the range +-amax
 * (qp_qparams_from_range, then qp_fake_quantize_f32 into `scratch`, n floats), each element
 * weighted by weight[i] (NULL: 1; non-finite elements are left out): the score of a clipping
 * range (calibration's mse method, the writer's weight clipping). INFINITY when amax gives no
 * parameters. */
double qp_symmetric_sq_error(enum qp_dtype qtype, float amax, const float *x, const double *weight,
                             int64_t n, float *scratch);

#endif
