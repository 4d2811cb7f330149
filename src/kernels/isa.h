/*
 * The instruction set the float kernels run with, one answer for the whole process.
 *
 * oneDNN dispatches to the highest ISA the CPU has, capped by ONEDNN_MAX_CPU_ISA (or
 * dnnl_set_max_cpu_isa); the hand-written kernels (gemm.c, winograd.c) and the choices between
 * them and oneDNN's primitives follow the same answer, so that `ONEDNN_MAX_CPU_ISA=AVX2` on an
 * AVX-512 machine runs what an AVX2-only machine runs (the @avx2 test variants and
 * `bench/engine.sh` rely on that).
 */
#ifndef QP_KERNELS_ISA_H
#define QP_KERNELS_ISA_H

/* Ordered: each level includes the ones below it. */
enum qp_isa {
    QP_ISA_PORTABLE = 0, /* no AVX2+FMA: plain C and oneDNN's SSE4.1/AVX kernels */
    QP_ISA_AVX2 = 1,     /* AVX2 and FMA */
    QP_ISA_AVX512 = 2    /* AVX-512 F, BW, VL and DQ (oneDNN's avx512_core) and FMA */
};

/* The level for a oneDNN dnnl_cpu_isa_t value (dnnl_get_effective_cpu_isa) and whether the CPU
 * has AVX2+FMA (cpu_avx2) and AVX-512F (cpu_avx512): avx512_core and its extensions give
 * QP_ISA_AVX512, AVX2 (with or without AVX2-VNNI) QP_ISA_AVX2, anything lower QP_ISA_PORTABLE,
 * never above what the CPU flags allow. Pure: tests call it with any values. */
enum qp_isa qp_isa_from_dnnl(unsigned dnnl_isa, int cpu_avx2, int cpu_avx512);

/* The process's level: qp_isa_from_dnnl on oneDNN's effective ISA and the CPU's flags, read
 * once (oneDNN itself fixes its ISA at its first dispatch). Thread-safe. */
enum qp_isa qp_kernel_isa(void);

/* The CPU's own level (its flags, no cap): what a library that dispatches on the CPU alone, such
 * as ONNX Runtime's MLAS, runs with. */
enum qp_isa qp_cpu_isa(void);

/* "avx512", "avx2" or "portable". */
const char *qp_isa_name(enum qp_isa isa);

/* 1 when oneDNN's effective ISA has VNNI (AVX-512 VNNI or AVX-VNNI): int8 dot products then
 * accumulate exactly in int32 (the integer path's kernel choice, kernels/int8_conv.h). */
int qp_isa_has_vnni(void);
/* 1 when oneDNN's effective ISA is AVX-512 with AMX (Intel Xeon from Sapphire Rapids on), so
 * capped by ONEDNN_MAX_CPU_ISA as the rest: a cap below AMX on such a CPU says 0. */
int qp_isa_has_amx(void);

/* A oneDNN dnnl_cpu_isa_t value in words, with its extensions ("AVX-512 VNNI BF16 AMX",
 * "AVX-512 VNNI BF16", "AVX2 AVX-VNNI", "AVX2", ...); the words hold "VNNI" exactly when the
 * value has AVX-512 VNNI or AVX-VNNI (AMX's level includes VNNI). Pure: tests call it with any
 * value. */
const char *qp_isa_describe_dnnl(unsigned dnnl_isa);

/* oneDNN's effective ISA in words (qp_isa_describe_dnnl): what every benchmark line prints. */
const char *qp_isa_describe(void);

#endif
