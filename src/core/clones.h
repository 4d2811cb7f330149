/*
 * QP_CLONES: compile a hot loop for AVX-512, AVX2 and baseline x86-64, the copy picked by the
 * CPU at load time (GCC's target_clones). Only for code whose results do not depend on the
 * vector width (IEEE operations element by element, integer rounding): each copy gives the same
 * bits. Empty under clang and sanitizers (no ifunc resolvers there).
 */
#ifndef QP_CORE_CLONES_H
#define QP_CORE_CLONES_H

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) &&                             \
    !defined(__SANITIZE_ADDRESS__)
#define QP_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define QP_CLONES
#endif

#endif
