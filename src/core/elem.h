/*
 * Integer elements of a typed buffer by dtype: the one switch over the integer storage types
 * (int4/uint4 packed two per byte, element 0 in the low nibble). Kernels (src/kernels/kutil.c)
 * and the quantization math (src/qmath/qparams.c) both read and write zero points and integer
 * data through it.
 */
#ifndef QP_CORE_ELEM_H
#define QP_CORE_ELEM_H

#include <stdint.h>

#include "qplace/dtype.h"

/* Element `i` of a packed 4-bit buffer, sign-extended when `is_signed`. */
static inline int qp_int4_get(const uint8_t *p, uint64_t i, int is_signed) {
    int v = (p[i >> 1] >> ((i & 1) * 4)) & 0xF;
    return is_signed && v >= 8 ? v - 16 : v;
}

/* Stores the low 4 bits of `v` as element `i`; the other nibble of the byte is kept. */
static inline void qp_int4_set(uint8_t *p, uint64_t i, int v) {
    unsigned sh = (unsigned)(i & 1) * 4;
    p[i >> 1] = (uint8_t)((p[i >> 1] & ~(0xFu << sh)) | ((unsigned)(v & 0xF) << sh));
}

/* 1 and *v = element `i` when `dt` is an integer or bool type (uint64 wraps to int64), else 0. */
static inline int qp_elem_get_int(enum qp_dtype dt, const void *p, uint64_t i, int64_t *v) {
    switch (dt) {
    case QP_DTYPE_INT8:
        *v = ((const int8_t *)p)[i];
        return 1;
    case QP_DTYPE_UINT8:
    case QP_DTYPE_BOOL:
        *v = ((const uint8_t *)p)[i];
        return 1;
    case QP_DTYPE_INT16:
        *v = ((const int16_t *)p)[i];
        return 1;
    case QP_DTYPE_UINT16:
        *v = ((const uint16_t *)p)[i];
        return 1;
    case QP_DTYPE_INT32:
        *v = ((const int32_t *)p)[i];
        return 1;
    case QP_DTYPE_UINT32:
        *v = ((const uint32_t *)p)[i];
        return 1;
    case QP_DTYPE_INT64:
        *v = ((const int64_t *)p)[i];
        return 1;
    case QP_DTYPE_UINT64:
        *v = (int64_t)((const uint64_t *)p)[i];
        return 1;
    case QP_DTYPE_INT4:
        *v = qp_int4_get(p, i, 1);
        return 1;
    case QP_DTYPE_UINT4:
        *v = qp_int4_get(p, i, 0);
        return 1;
    default:
        return 0;
    }
}

/* Stores `v` (truncated to the type; bool: v != 0) as element `i` when `dt` is an integer or
 * bool type and returns 1, else returns 0 and stores nothing. */
static inline int qp_elem_set_int(enum qp_dtype dt, void *p, uint64_t i, int64_t v) {
    switch (dt) {
    case QP_DTYPE_INT8:
        ((int8_t *)p)[i] = (int8_t)v;
        return 1;
    case QP_DTYPE_UINT8:
        ((uint8_t *)p)[i] = (uint8_t)v;
        return 1;
    case QP_DTYPE_BOOL:
        ((uint8_t *)p)[i] = v != 0;
        return 1;
    case QP_DTYPE_INT16:
        ((int16_t *)p)[i] = (int16_t)v;
        return 1;
    case QP_DTYPE_UINT16:
        ((uint16_t *)p)[i] = (uint16_t)v;
        return 1;
    case QP_DTYPE_INT32:
        ((int32_t *)p)[i] = (int32_t)v;
        return 1;
    case QP_DTYPE_UINT32:
        ((uint32_t *)p)[i] = (uint32_t)v;
        return 1;
    case QP_DTYPE_INT64:
        ((int64_t *)p)[i] = v;
        return 1;
    case QP_DTYPE_UINT64:
        ((uint64_t *)p)[i] = (uint64_t)v;
        return 1;
    case QP_DTYPE_INT4:
    case QP_DTYPE_UINT4:
        qp_int4_set(p, i, (int)v);
        return 1;
    default:
        return 0;
    }
}

#endif
