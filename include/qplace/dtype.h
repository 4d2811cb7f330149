/*
 * qplace/dtype.h — element types and their facts.
 *
 * Enum values are ONNX's TensorProto.DataType numbers, so a dtype read from a model is used as is
 * (after qp_dtype_valid). Per-type facts live in one traits table indexed by the enum:
 *
 *     const struct qp_dtype_traits *t = qp_dtype_traits(QP_DTYPE_FLOAT16);
 *     // t->name == "float16", t->bits == 16, t->is_float == 1
 *
 * Conversions between float32 and the narrow float types (fp16, bf16, the four FP8 types) are
 * here too because every module needs them; quantization math (scales, rounding of integer
 * quantization) lives in src/qmath/qparams.
 */
#ifndef QPLACE_DTYPE_H
#define QPLACE_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum qp_dtype {
    QP_DTYPE_UNDEFINED = 0,
    QP_DTYPE_FLOAT = 1,
    QP_DTYPE_UINT8 = 2,
    QP_DTYPE_INT8 = 3,
    QP_DTYPE_UINT16 = 4,
    QP_DTYPE_INT16 = 5,
    QP_DTYPE_INT32 = 6,
    QP_DTYPE_INT64 = 7,
    QP_DTYPE_STRING = 8,
    QP_DTYPE_BOOL = 9,
    QP_DTYPE_FLOAT16 = 10,
    QP_DTYPE_DOUBLE = 11,
    QP_DTYPE_UINT32 = 12,
    QP_DTYPE_UINT64 = 13,
    QP_DTYPE_COMPLEX64 = 14,
    QP_DTYPE_COMPLEX128 = 15,
    QP_DTYPE_BFLOAT16 = 16,
    QP_DTYPE_FLOAT8E4M3FN = 17,
    QP_DTYPE_FLOAT8E4M3FNUZ = 18,
    QP_DTYPE_FLOAT8E5M2 = 19,
    QP_DTYPE_FLOAT8E5M2FNUZ = 20,
    QP_DTYPE_UINT4 = 21,
    QP_DTYPE_INT4 = 22,
    QP_DTYPE_FLOAT4E2M1 = 23,
    QP_DTYPE_COUNT
};

struct qp_dtype_traits {
    const char *name; /* ONNX-style lower-case name: "float", "float8e4m3fn", "int4" */
    int bits;         /* storage bits per element: 4 for int4/uint4/float4, 0 for string */
    int is_float;     /* a floating-point type (including fp8/fp4) */
    int is_integer;   /* an integer type (bool excluded) */
    int is_signed;
};

/* 1 when `v` is a defined dtype number (1 .. QP_DTYPE_COUNT-1). */
int qp_dtype_valid(int v);
/* Traits of a dtype; for an invalid value, the UNDEFINED row (name "undefined"). Never NULL. */
const struct qp_dtype_traits *qp_dtype_traits(enum qp_dtype dt);
const char *qp_dtype_name(enum qp_dtype dt);

/* Bytes needed for `n` elements (sub-byte types packed two per byte, rounded up). Returns 0 and
 * sets *ok = 0 on overflow or for strings; *ok = 1 otherwise. */
size_t qp_dtype_nbytes(enum qp_dtype dt, uint64_t n, int *ok);

/* Narrow float conversions. From float32: round to nearest even. `saturate` (FP8 only, as ONNX's
 * `saturate` attribute) clamps out-of-range finite values to the largest finite value instead of
 * producing Inf/NaN. */
float qp_fp16_to_f32(uint16_t h);
uint16_t qp_f32_to_fp16(float f);
float qp_bf16_to_f32(uint16_t h);
uint16_t qp_f32_to_bf16(float f);
float qp_fp8_to_f32(enum qp_dtype dt, uint8_t v);
uint8_t qp_f32_to_fp8(enum qp_dtype dt, float f, int saturate);

#ifdef __cplusplus
}
#endif
#endif
