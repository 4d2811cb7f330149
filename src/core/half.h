/* Bulk float16 <-> float32 conversion (core/dtype.c): the same bits as qp_fp16_to_f32 and
 * qp_f32_to_fp16 element by element (round to nearest even, NaN quieted with its top payload
 * bits), through F16C where the CPU has it. The engine converts every float16 tensor around
 * the kernels that compute in float32, so this runs on every fp16 model. */
#ifndef QP_CORE_HALF_H
#define QP_CORE_HALF_H

#include <stddef.h>
#include <stdint.h>

void qp_fp16_to_f32_n(const uint16_t *src, float *dst, size_t n);
void qp_f32_to_fp16_n(const float *src, uint16_t *dst, size_t n);
/* Each float rounded to fp16 and back: the bits of qp_fp16_to_f32(qp_f32_to_fp16(x)) (src and
 * dst may be the same array). */
void qp_round_fp16_n(const float *src, float *dst, size_t n);

#endif
