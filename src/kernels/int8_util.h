/*
 * What the integer path's fused kernels (QConv: int8_conv.c, QMatMul: int8_matmul.c) share:
 * the quantization of their input, output and residual, their post-operations, and the
 * epilogue arithmetic. Inputs by position, the same for both ops:
 *   0 x   1 x_scale   2 x_zero_point   3 w   4 w_scale   5 w_zero_point   6 bias
 *   7 y_scale   8 y_zero_point (absent: float output, attribute out_dtype)
 *   9 residual   10 r_scale   11 r_zero_point (int8 residual; absent for a float one)
 * Attributes `post`, `post_alpha`, `post_beta`: enum qp_conv_post_kind in order, SUM where the
 * residual is added.
 */
#ifndef QP_KERNELS_INT8_UTIL_H
#define QP_KERNELS_INT8_UTIL_H

#include <oneapi/dnnl/dnnl.h>

#include "kernels/dnnl_conv.h"
#include "kernels/kernel.h"
#include "qplace/dtype.h"

struct qp_i8_io {
    enum qp_dtype xdt, ydt, rdt;
    float xs, ys, rs;
    int32_t xzp, yzp, rzp;
    int y_int8, has_res;
    int n_post;
    struct qp_conv_post post[QP_CONV_MAX_POST];
    /* Set by qp_i8_key_posts for a oneDNN primitive: */
    int dst_f32;      /* the primitive writes float; the epilogue stores (and requantizes) */
    int res_in_dst;   /* the int8 residual is copied into the destination; SUM dequantizes it */
    float oscale_mul; /* the primitive's output scales are x_scale * w_scale * this */
};

/* Post-operations of a primitive key: kinds, alphas and betas (QP_CONV_MAX_POST each) and the
 * SUM's parameters. */
struct qp_i8_posts {
    int32_t n, kind[QP_CONV_MAX_POST];
    float alpha[QP_CONV_MAX_POST], beta[QP_CONV_MAX_POST];
    int32_t sum_dt, sum_zp;
    float sum_scale;
};

static inline int qp_i8_is_q8(enum qp_dtype dt) {
    return dt == QP_DTYPE_INT8 || dt == QP_DTYPE_UINT8;
}

static inline const struct qp_kt *qp_i8_in(const struct qp_kprep *p, int i) {
    return i < p->n_in ? p->in[i] : NULL;
}

/* Reads inputs 0-2 and 7-11 and the post attributes into *io (x must be int8/uint8). */
enum qp_status qp_i8_read_io(struct qp_kprep *p, struct qp_i8_io *io);

/* One constant float of input i (positive). */
enum qp_status qp_i8_const_scale(const struct qp_kprep *p, int i, float *out, const char *what);

/* Fills io->dst_f32 / res_in_dst / oscale_mul and the key's post-operations for a primitive on
 * the integer path (`int8`: int8 compute; else float compute on dequantized values). When the
 * requantization folds (an int8 output of zero point 0 after Relu, Clip and the residual sum
 * only), 1 / y_scale joins the output scales, Clip's bounds and the SUM's scale and the
 * primitive stores int8 itself. Other chains ending in an int8 output (hard-swish and linear
 * maps, as PaddleOCR's blocks) get a last linear post-op (1 / y_scale, + zero point) and the
 * primitive stores int8 too (rounding as oneDNN rounds: within one step of the reference),
 * except after HardSigmoid's linear-then-clip pair or with a residual sum (oneDNN 2.6's int8
 * convolution got HardSigmoid followed by a requantizing linear post-op wrong) or under
 * QP_INT8_TAIL=0; those write float and the epilogue requantizes. */
void qp_i8_key_posts(struct qp_i8_io *io, int int8, struct qp_i8_posts *k);

/* The key's post-operations on `attr`; 0 on failure. */
int qp_i8_attr_posts(dnnl_primitive_attr_t attr, const struct qp_i8_posts *k);

/* The bias in accumulator units for a oneDNN int8 primitive, which adds it to the int32
 * accumulator before the output scale *osc: bias / *osc, with |*osc| first raised to
 * |bias| * 2^-100 where it is smaller (a channel of all-zero weights has a w_scale near 0, and
 * bias / osc would overflow to inf; the raised scale keeps that channel's products far below
 * the bias's rounding, so the output is still the bias within float rounding). */
float qp_i8_acc_bias(float bias, float *osc);

/* FNV-1a of v[0..n), for cache keys of primitives with baked-in scales. */
uint64_t qp_i8_hash(const float *v, int64_t n);

static inline float qp_i8_q8_at(const void *d, enum qp_dtype dt, int64_t i) {
    return dt == QP_DTYPE_INT8 ? (float)((const int8_t *)d)[i] : (float)((const uint8_t *)d)[i];
}

/* Element i of a residual (float, fp16 or int8 with scale/zp) as a real value. */
float qp_i8_real_at(const struct qp_kt *t, int64_t i, float scale, int32_t zp);

/* Stores real value v as element i of the output: float, fp16, or requantized to int8. */
void qp_i8_store(const struct qp_i8_io *io, void *y, int64_t i, float v);
/* The same for v[0..n) into elements at..at+n (one dtype branch per row, vectorizable). */
void qp_i8_store_row(const struct qp_i8_io *io, void *y, int64_t at, const float *v, int64_t n);
/* Elements 0..n of v into y, split over threads. */
void qp_i8_store_n(const struct qp_i8_io *io, void *y, const float *v, int64_t n, int nthr);

/* The real-valued post-operations on v (residual value rv for SUM). */
float qp_i8_posts_ref(const struct qp_i8_io *io, float v, float rv);

#endif
