/*
 * The vecmath functions, written once over the operations below and included three times by
 * vecmath.c: with V = float (portable C), V = __m256 (AVX2+FMA) and V = __m512 (AVX-512F). No
 * include guard on purpose. The including file defines:
 *   V                     the value type
 *   VM_ATTR               function attributes (the instance's target)
 *   VM_NAME(n)            the name of function n in this instance
 *   VSET(c)               a constant in every lane
 *   VADD VSUB VMUL VDIV   IEEE operations
 *   VFMA(a, b, c)         a*b + c rounded once; VFNMA(a, b, c) c - a*b rounded once
 *   VMIN(a, b)            a < b ? a : b   VMAX(a, b)  a > b ? a : b   (so NaN in b passes)
 *   VABS(a)               |a|             VROUND(a)   to nearest even
 *   VLT(a, b)             mask of a < b   VNAN(a)     mask of NaN lanes
 *   VSEL(m, a, b)         m ? a : b       VSIGN(a)    the sign bit of a, other bits 0
 *   VXOR(a, b)            bitwise xor     VPOW2I(n)   2^n for integral n in [-126, 127]
 * Every step is one IEEE operation in every instance, hence identical results. The file
 * undefines the operation macros at its end.
 */

/* Polynomial coefficients: minimax-style fits (weighted least squares, Lawson iterations) in
 * double, rounded to float. */

/* erf(x) = x + x*A(x^2) for |x| < ERF_T. */
#define ERF_T  0.875f
#define ERF_A0 0.128379166f
#define ERF_A1 -0.376126349f
#define ERF_A2 0.112837367f
#define ERF_A3 -0.0268617738f
#define ERF_A4 0.0052072187f
#define ERF_A5 -0.000821653754f
#define ERF_A6 8.69892319e-05f
/* erfc(a) = exp(-a^2) * v * B(v - ERF_C), v = 1/a, for ERF_T <= a < 4 (erf rounds to 1 above). */
#define ERF_C  0.6964286f
#define ERF_B0 0.477286398f
#define ERF_B1 -0.1707744f
#define ERF_B2 0.0119397724f
#define ERF_B3 0.0522445776f
#define ERF_B4 -0.0612035356f
#define ERF_B5 0.043403782f
#define ERF_B6 -0.0191072896f
#define ERF_B7 -0.00561133353f
#define ERF_B8 0.0326318517f
#define ERF_B9 -0.0314674675f
/* exp(r) = 1 + r + r^2*E(r) for |r| <= ln2/2. */
#define EXP_E0 0.49999994f
#define EXP_E1 0.166665211f
#define EXP_E2 0.041668389f
#define EXP_E3 0.00836871192f
#define EXP_E4 0.00138146186f
/* tanh(x) = x (1 + x^2*T(x^2)) for |x| < TANH_T. */
#define TANH_T  0.55f
#define TANH_T0 -0.333333313f
#define TANH_T1 0.133332938f
#define TANH_T2 -0.0539596491f
#define TANH_T3 0.0217828229f
#define TANH_T4 -0.00841394812f
#define TANH_T5 0.00239581103f

/* exp(x) for non-NaN x (NaN lanes give garbage the callers replace). Range reduction
 * x = n*ln2 + r (ln2 in two parts), 2^n applied in two halves so that results down to the
 * smallest denormal and up to overflow round once. */
VM_ATTR static inline V VM_NAME(vm_exp)(V x) {
    x = VMAX(VSET(-104.0f), x);
    x = VMIN(VSET(89.0f), x);
    V n = VROUND(VMUL(x, VSET(1.44269502f)));
    V r = VFNMA(n, VSET(0.693359375f), x);
    r = VFNMA(n, VSET(-2.12194440e-4f), r);
    V p = VFMA(VSET(EXP_E4), r, VSET(EXP_E3));
    p = VFMA(p, r, VSET(EXP_E2));
    p = VFMA(p, r, VSET(EXP_E1));
    p = VFMA(p, r, VSET(EXP_E0));
    p = VFMA(p, VMUL(r, r), r);
    p = VADD(p, VSET(1.0f));
    V n1 = VROUND(VMUL(n, VSET(0.5f))); /* |n1|, |n - n1| <= 76 */
    return VMUL(VMUL(p, VPOW2I(n1)), VPOW2I(VSUB(n, n1)));
}

/* erfc(a) for a >= 0 (non-NaN): exp(-a^2) v B(v - c), with a^2 split into hi + lo so that the
 * rounding of a^2 does not reach the result; 0 from a = 4 (erf is then 1 in float). Only lanes
 * with a >= ERF_T are meaningful. */
VM_ATTR static inline V VM_NAME(vm_erfc_big)(V a) {
    V ac = VMIN(VSET(4.0f), VMAX(VSET(ERF_T), a));
    V hi = VMUL(ac, ac);
    V lo = VFMA(ac, ac, VSUB(VSET(0.0f), hi)); /* a^2 - hi, exactly */
    V v = VDIV(VSET(1.0f), ac);
    V t = VSUB(v, VSET(ERF_C));
    V p = VFMA(VSET(ERF_B9), t, VSET(ERF_B8));
    p = VFMA(p, t, VSET(ERF_B7));
    p = VFMA(p, t, VSET(ERF_B6));
    p = VFMA(p, t, VSET(ERF_B5));
    p = VFMA(p, t, VSET(ERF_B4));
    p = VFMA(p, t, VSET(ERF_B3));
    p = VFMA(p, t, VSET(ERF_B2));
    p = VFMA(p, t, VSET(ERF_B1));
    p = VFMA(p, t, VSET(ERF_B0));
    V e = VM_NAME(vm_exp)(VSUB(VSET(0.0f), hi));
    p = VFNMA(p, lo, p); /* * exp(-lo) ~ 1 - lo */
    V q = VMUL(VMUL(e, v), p);
    return VSEL(VLT(a, VSET(4.0f)), q, VSET(0.0f));
}

/* erf(x) - x for |x| < ERF_T, as x*A(x^2). */
VM_ATTR static inline V VM_NAME(vm_erf_small)(V x) {
    V z = VMUL(x, x);
    V p = VFMA(VSET(ERF_A6), z, VSET(ERF_A5));
    p = VFMA(p, z, VSET(ERF_A4));
    p = VFMA(p, z, VSET(ERF_A3));
    p = VFMA(p, z, VSET(ERF_A2));
    p = VFMA(p, z, VSET(ERF_A1));
    p = VFMA(p, z, VSET(ERF_A0));
    return p;
}

VM_ATTR static inline V VM_NAME(vm_erf)(V x) {
    V a = VABS(x);
    V small = VFMA(x, VM_NAME(vm_erf_small)(x), x);
    V big = VXOR(VSUB(VSET(1.0f), VM_NAME(vm_erfc_big)(a)), VSIGN(x));
    V y = VSEL(VLT(a, VSET(ERF_T)), small, big);
    return VSEL(VNAN(x), VADD(x, x), y);
}

/* 0.5 x (1 + erf(u)), u = x / sqrt 2. 1 + erf(u) for u <= -ERF_T is erfc(|u|), computed
 * directly rather than by cancellation. */
VM_ATTR static inline V VM_NAME(vm_gelu)(V x) {
    V u = VMUL(x, VSET(0.70710678118654752f));
    V a = VABS(u);
    V small = VADD(VSET(1.0f), VFMA(u, VM_NAME(vm_erf_small)(u), u));
    V q = VM_NAME(vm_erfc_big)(a);
    V big = VSEL(VLT(u, VSET(0.0f)), q, VSUB(VSET(2.0f), q));
    V e1 = VSEL(VLT(a, VSET(ERF_T)), small, big);
    V y = VMUL(VMUL(VSET(0.5f), x), e1);
    return VSEL(VNAN(x), VADD(x, x), y);
}

/* 1 / (1 + exp(-x)) for x >= 0, e / (1 + e) with e = exp(x) below: exp never overflows. */
VM_ATTR static inline V VM_NAME(vm_sigmoid)(V x) {
    V e = VM_NAME(vm_exp)(VSUB(VSET(0.0f), VABS(x)));
    V num = VSEL(VLT(x, VSET(0.0f)), e, VSET(1.0f));
    V y = VDIV(num, VADD(VSET(1.0f), e));
    return VSEL(VNAN(x), VADD(x, x), y);
}

/* x (1 + tanh(w)) / 2 = x / (1 + exp(-2w)), w = sqrt(2/pi) (x + 0.044715 x^3) evaluated as the
 * reference kernel does. */
VM_ATTR static inline V VM_NAME(vm_gelu_tanh)(V x) {
    V x3 = VMUL(VMUL(VMUL(VSET(0.044715f), x), x), x);
    V w = VMUL(VSET(0.79788456080286536f), VADD(x, x3));
    V m2w = VMUL(VSET(-2.0f), w);
    /* exp of a NaN lane (x = +-inf gives w = inf, -2w = -inf: fine; NaN only from NaN x) */
    V y = VDIV(x, VADD(VSET(1.0f), VM_NAME(vm_exp)(m2w)));
    return VSEL(VNAN(x), VADD(x, x), y);
}

/* x (1 + x^2 T(x^2)) below TANH_T; 1 - 2 / (exp(2|x|) + 1) with the sign of x above (1 from
 * |x| = 9.5: tanh rounds to 1 there). */
VM_ATTR static inline V VM_NAME(vm_tanh)(V x) {
    V a = VABS(x);
    V z = VMUL(x, x);
    V p = VFMA(VSET(TANH_T5), z, VSET(TANH_T4));
    p = VFMA(p, z, VSET(TANH_T3));
    p = VFMA(p, z, VSET(TANH_T2));
    p = VFMA(p, z, VSET(TANH_T1));
    p = VFMA(p, z, VSET(TANH_T0));
    V small = VMUL(x, VFMA(z, p, VSET(1.0f))); /* a product keeps tanh(-0) = -0 */
    V ac = VMIN(VSET(9.5f), a);
    V e = VM_NAME(vm_exp)(VADD(ac, ac));
    V t = VSUB(VSET(1.0f), VDIV(VSET(2.0f), VADD(e, VSET(1.0f))));
    V big = VXOR(t, VSIGN(x));
    V y = VSEL(VLT(a, VSET(TANH_T)), small, big);
    return VSEL(VNAN(x), VADD(x, x), y);
}

VM_ATTR static inline V VM_NAME(vm_expf)(V x) {
    V y = VM_NAME(vm_exp)(x);
    return VSEL(VNAN(x), VADD(x, x), y);
}

VM_ATTR static inline V VM_NAME(vm_eval)(enum qp_vfn f, V x) {
    switch (f) {
    case QP_VF_EXP:
        return VM_NAME(vm_expf)(x);
    case QP_VF_ERF:
        return VM_NAME(vm_erf)(x);
    case QP_VF_TANH:
        return VM_NAME(vm_tanh)(x);
    case QP_VF_SIGMOID:
        return VM_NAME(vm_sigmoid)(x);
    case QP_VF_GELU:
        return VM_NAME(vm_gelu)(x);
    case QP_VF_GELU_TANH:
        return VM_NAME(vm_gelu_tanh)(x);
    default:
        return x;
    }
}

/* The operations are the including instance's: undefined here, so that the next instance
 * defines its own (V, VM_ATTR and VM_NAME stay for the instance's other functions). */
#undef VSET
#undef VADD
#undef VSUB
#undef VMUL
#undef VDIV
#undef VFMA
#undef VFNMA
#undef VMIN
#undef VMAX
#undef VABS
#undef VROUND
#undef VLT
#undef VNAN
#undef VSEL
#undef VSIGN
#undef VXOR
#undef VPOW2I
