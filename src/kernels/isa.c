/* isa.h: the float kernels' instruction set, as oneDNN's effective ISA says. */
#include "kernels/isa.h"

#include <oneapi/dnnl/dnnl.h>

/* oneDNN's ISA values are bit masks, each level holding the bits of the levels below it. */
#define ISA_BITS_AVX2       0x7u  /* dnnl_cpu_isa_avx2 */
#define ISA_BITS_AVX512CORE 0x27u /* dnnl_cpu_isa_avx512_core */

enum qp_isa qp_isa_from_dnnl(unsigned dnnl_isa, int cpu_avx2, int cpu_avx512) {
    if (!cpu_avx2) return QP_ISA_PORTABLE;
    if ((dnnl_isa & ISA_BITS_AVX512CORE) == ISA_BITS_AVX512CORE && cpu_avx512) return QP_ISA_AVX512;
    if ((dnnl_isa & ISA_BITS_AVX2) == ISA_BITS_AVX2) return QP_ISA_AVX2;
    return QP_ISA_PORTABLE;
}

static void cpu_flags(int *avx2, int *avx512) {
    *avx2 = *avx512 = 0;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    *avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    *avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
              __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#endif
}

enum qp_isa qp_kernel_isa(void) {
    /* Kernels call this from OpenMP threads: relaxed atomics, every writer stores the same. */
    static int isa = -1;
    int v = __atomic_load_n(&isa, __ATOMIC_RELAXED);
    if (v < 0) {
        int avx2, avx512;
        cpu_flags(&avx2, &avx512);
        v = (int)qp_isa_from_dnnl((unsigned)dnnl_get_effective_cpu_isa(), avx2, avx512);
        __atomic_store_n(&isa, v, __ATOMIC_RELAXED);
    }
    return (enum qp_isa)v;
}

enum qp_isa qp_cpu_isa(void) {
    int avx2, avx512;
    cpu_flags(&avx2, &avx512);
    return qp_isa_from_dnnl(~0u, avx2, avx512);
}

const char *qp_isa_name(enum qp_isa isa) {
    switch (isa) {
    case QP_ISA_AVX512:
        return "avx512";
    case QP_ISA_AVX2:
        return "avx2";
    default:
        return "portable";
    }
}

static int has_bits(dnnl_cpu_isa_t isa, dnnl_cpu_isa_t level) {
    return (isa & level) == level;
}

int qp_isa_has_vnni(void) {
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    return has_bits(isa, dnnl_cpu_isa_avx512_core_vnni) || has_bits(isa, dnnl_cpu_isa_avx2_vnni);
}

int qp_isa_has_amx(void) {
    return has_bits(dnnl_get_effective_cpu_isa(), dnnl_cpu_isa_avx512_core_amx);
}

const char *qp_isa_describe_dnnl(unsigned dnnl_isa) {
    dnnl_cpu_isa_t isa = (dnnl_cpu_isa_t)dnnl_isa;
    /* AMX's level holds VNNI's and BF16's bits: say all three, so that "has VNNI" reads the
     * same from the words as from the bits (test_int8's path selection checks that). */
    if (has_bits(isa, dnnl_cpu_isa_avx512_core_amx)) return "AVX-512 VNNI BF16 AMX";
    if (has_bits(isa, dnnl_cpu_isa_avx512_core_bf16)) return "AVX-512 VNNI BF16";
    if (has_bits(isa, dnnl_cpu_isa_avx512_core_vnni)) return "AVX-512 VNNI";
    if (has_bits(isa, dnnl_cpu_isa_avx512_core)) return "AVX-512";
    if (has_bits(isa, dnnl_cpu_isa_avx2_vnni)) return "AVX2 AVX-VNNI";
    if (has_bits(isa, dnnl_cpu_isa_avx2)) return "AVX2";
    return "SSE4.1 / AVX";
}

const char *qp_isa_describe(void) {
    return qp_isa_describe_dnnl((unsigned)dnnl_get_effective_cpu_isa());
}
