/* isa.c: the ISA level the float kernels run with. The mapping from oneDNN's ISA values and
 * the CPU flags on every level; the process's level against ONEDNN_MAX_CPU_ISA (this program
 * also runs as unit/kernels/isa@avx2 and @sse41, capped); the hand kernels' choices follow it
 * (gemm.c's tile, vecmath's AVX2 code). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cmocka.h>
#include <dnnl.h>

#include "kernels/gemm.h"
#include "kernels/isa.h"
#include "kernels/vecmath.h"

static void test_from_dnnl(void **state) {
    (void)state;
    static const struct {
        unsigned dnnl;
        int avx2, avx512;
        enum qp_isa want;
    } cases[] = {
        {dnnl_cpu_isa_sse41, 1, 1, QP_ISA_PORTABLE},
        {dnnl_cpu_isa_avx, 1, 1, QP_ISA_PORTABLE},
        {dnnl_cpu_isa_avx2, 1, 1, QP_ISA_AVX2},
        {dnnl_cpu_isa_avx2_vnni, 1, 1, QP_ISA_AVX2},
        {dnnl_cpu_isa_avx512_mic, 1, 1, QP_ISA_AVX2}, /* no avx512_core: not our AVX-512 */
        {dnnl_cpu_isa_avx512_core, 1, 1, QP_ISA_AVX512},
        {dnnl_cpu_isa_avx512_core_vnni, 1, 1, QP_ISA_AVX512},
        {dnnl_cpu_isa_avx512_core_bf16, 1, 1, QP_ISA_AVX512},
        {dnnl_cpu_isa_avx512_core_amx, 1, 1, QP_ISA_AVX512},
        /* never above the CPU's flags */
        {dnnl_cpu_isa_avx512_core, 1, 0, QP_ISA_AVX2},
        {dnnl_cpu_isa_avx512_core, 0, 1, QP_ISA_PORTABLE},
        {dnnl_cpu_isa_avx2, 0, 0, QP_ISA_PORTABLE},
        {~0u, 1, 1, QP_ISA_AVX512},
        {~0u, 1, 0, QP_ISA_AVX2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        enum qp_isa got = qp_isa_from_dnnl(cases[i].dnnl, cases[i].avx2, cases[i].avx512);
        if (got != cases[i].want) {
            fprintf(stderr, "case %zu: dnnl 0x%x avx2 %d avx512 %d: %s, want %s\n", i,
                    cases[i].dnnl, cases[i].avx2, cases[i].avx512, qp_isa_name(got),
                    qp_isa_name(cases[i].want));
            fail();
        }
    }
    assert_string_equal(qp_isa_name(QP_ISA_AVX512), "avx512");
    assert_string_equal(qp_isa_name(QP_ISA_AVX2), "avx2");
    assert_string_equal(qp_isa_name(QP_ISA_PORTABLE), "portable");
}

/* Every oneDNN level in words: VNNI named exactly where its bits are (AMX's level holds them: an
 * Intel Xeon with AMX once printed "AVX-512 AMX" and failed test_int8's path selection). */
static void test_describe(void **state) {
    (void)state;
    static const struct {
        unsigned dnnl;
        const char *want;
    } cases[] = {
        {dnnl_cpu_isa_sse41, "SSE4.1 / AVX"},
        {dnnl_cpu_isa_avx, "SSE4.1 / AVX"},
        {dnnl_cpu_isa_avx2, "AVX2"},
        {dnnl_cpu_isa_avx2_vnni, "AVX2 AVX-VNNI"},
        {dnnl_cpu_isa_avx512_core, "AVX-512"},
        {dnnl_cpu_isa_avx512_core_vnni, "AVX-512 VNNI"},
        {dnnl_cpu_isa_avx512_core_bf16, "AVX-512 VNNI BF16"},
        {dnnl_cpu_isa_avx512_core_amx, "AVX-512 VNNI BF16 AMX"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *got = qp_isa_describe_dnnl(cases[i].dnnl);
        assert_string_equal(got, cases[i].want);
        int vnni =
            (cases[i].dnnl & dnnl_cpu_isa_avx512_core_vnni) == dnnl_cpu_isa_avx512_core_vnni ||
            (cases[i].dnnl & dnnl_cpu_isa_avx2_vnni) == dnnl_cpu_isa_avx2_vnni;
        assert_int_equal(vnni, strstr(got, "VNNI") != NULL);
    }
    assert_string_equal(qp_isa_describe(),
                        qp_isa_describe_dnnl((unsigned)dnnl_get_effective_cpu_isa()));
}

/* The level ONEDNN_MAX_CPU_ISA asks for, as this test knows the names (NULL: none set). */
static int capped_level(enum qp_isa *out) {
    const char *e = getenv("ONEDNN_MAX_CPU_ISA");
    if (!e || !*e || !strcasecmp(e, "ALL")) return 0;
    if (!strcasecmp(e, "SSE41") || !strcasecmp(e, "AVX"))
        *out = QP_ISA_PORTABLE;
    else if (!strcasecmp(e, "AVX2") || !strcasecmp(e, "AVX2_VNNI"))
        *out = QP_ISA_AVX2;
    else
        *out = QP_ISA_AVX512;
    return 1;
}

static void test_process_level(void **state) {
    (void)state;
    enum qp_isa cpu = qp_cpu_isa(), isa = qp_kernel_isa(), cap = QP_ISA_AVX512;
    fprintf(stderr, "CPU %s, kernels %s, ONEDNN_MAX_CPU_ISA %s\n", qp_isa_name(cpu),
            qp_isa_name(isa), getenv("ONEDNN_MAX_CPU_ISA") ? getenv("ONEDNN_MAX_CPU_ISA") : "-");
    if (capped_level(&cap))
        assert_int_equal(isa, cap < cpu ? cap : cpu);
    else
        assert_int_equal(isa, cpu);
    /* oneDNN reports the same cap */
    assert_int_equal(isa, qp_isa_from_dnnl((unsigned)dnnl_get_effective_cpu_isa(),
                                           cpu >= QP_ISA_AVX2, cpu >= QP_ISA_AVX512));
    assert_int_equal(qp_kernel_isa(), isa); /* read once, stable */
}

/* The hand kernels choose by the same level. */
static void test_kernels_follow(void **state) {
    (void)state;
    enum qp_isa isa = qp_kernel_isa();
    assert_int_equal(qp_vf_have_avx2(), isa >= QP_ISA_AVX2);
    assert_int_equal(qp_gemm_available(), isa >= QP_ISA_AVX2);
    assert_int_equal(qp_gemm_isa(), isa);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_from_dnnl),
        cmocka_unit_test(test_describe),
        cmocka_unit_test(test_process_level),
        cmocka_unit_test(test_kernels_follow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
