/*
 * The Pointwise kernel's state, shared by its two files: int8_pw.c (prepare, tiles, the exact
 * program) and int8_pw_fast.c (the fast program of the integer path, below). Not a module
 * interface: kernels/int8_pw.h is.
 *
 * The fast program. On the integer path (attribute pw_fast = 1; the exact path never sets it)
 * the node's program is compiled once more, holding each value as d * clamp(c, lo, hi) + e: a
 * content c that instructions compute, and a scale d > 0, an offset e and bounds known when the
 * plan is built. Multiplying or dividing by a positive constant, adding one, Clip and Relu then
 * cost no instruction; a FakeQuant becomes one level step clamp(rint(c * d/s + e/s), lo', hi')
 * whose result is content with d = s (its bounds are those a Clip before it implies: rounding
 * and a positive product are monotone, so a clamp passes through them exactly), so the product
 * of two fake-quantized values multiplies their levels; a QuantizeLinear output stores
 * clamp(rint(c * d/s + e/s + z)). PaddleOCR's LearnableAffineBlock + decomposed HardSwish chain,
 * nine instructions and a store with five divisions, becomes four instructions and a store. The
 * values are those of the exact program up to float rounding (a level may move by one where the
 * exact quotient lies within rounding of a half), which the integer path's tolerance allows.
 * A tile whose float inputs are not all finite and at most PW_TAME in magnitude runs the exact
 * program (inputs the plan marks tame, attribute pw_in_tame, are not checked), so infinities and
 * NaNs propagate as the model's ops say; bounds computed at compile time keep every value of the
 * fast program far from overflow for the others.
 */
#ifndef QP_KERNELS_INT8_PW_IMPL_H
#define QP_KERNELS_INT8_PW_IMPL_H

#include <stdint.h>

#include "kernels/int8_pw.h"
#include "kernels/kernel.h"

/* Operations of the fast program only (never read from pw_prog). */
enum {
    PW_FQL = QP_PW_OP_COUNT, /* clamp(rint(a * p0 [+ p1]), p2, p3): a level, as a float */
    PW_AFFINE,               /* clamp(a, p2, p3) * p0 [+ p1] */
    PW_ADDS,                 /* a + b * p0 */
};

#define PW_TAME QP_PW_TAME

enum in_kind { IN_FULL = 0, IN_SCALAR, IN_ROW, IN_COL, IN_GEN };

struct pw_input {
    enum in_kind kind;
    enum qp_dtype dt;
    float scale;                 /* int8/uint8: dequantized as read */
    int tame;                    /* float, known finite and within PW_TAME (pw_in_tame) */
    uint8_t zp;                  /* raw byte of the zero point (its dtype is dt) */
    int rank;                    /* aligned to the main rank */
    int64_t stride[QP_MAX_RANK]; /* in the main shape's coordinates; 0 where broadcast */
};

struct pw_output {
    enum qp_dtype dt;
    int reg, quant;
    float scale, z, lo, hi; /* quantized: scale, zero point and range as floats (qsimd.h) */
    uint8_t zp;
    int full;                    /* its shape is the main shape */
    int64_t stride[QP_MAX_RANK]; /* main coordinates -> its index; 0 where broadcast */
    /* the fast program: the operand stored, and for `affine` (a full quantized output) the
     * level clamp(rint(x * fm + fo), flo, fhi) stored as the integer */
    int fop, affine;
    float fm, fo, flo, fhi;
};

struct pw_instr {
    int op, dst, a, b;
    float p[4];
    uint8_t fq_zp;
    enum qp_dtype fq_dt;
    float fq_z, fq_lo, fq_hi; /* the zero point and the type's range as floats (qsimd.h) */
};

struct pw_state {
    int n_in, n_out, n_instr, n_regs, rank, split, general, max_threads;
    int coords;       /* some input or output reads the tile's coordinates (tile_coords) */
    int nhwc;         /* the main shape is channels last (attribute nhwc) */
    int fast, n_fast; /* a fast program, of n_fast instructions at ins[n_instr ...] */
    int64_t main[QP_MAX_RANK], rows, inner;
    struct pw_input in[QP_PW_MAX_IN];
    struct pw_output out[QP_PW_MAX_OUT];
    struct pw_instr ins[]; /* n_instr, then room for PW_FAST_CAP(n_instr) */
};

/* Room for a fast program: each instruction may need its operands made plain first. */
#define PW_FAST_CAP(n) (3 * (n) + QP_PW_MAX_OUT)

struct tile_bufs {
    float reg[QP_PW_MAX_REGS][QP_PW_TILE];
    float in[QP_PW_MAX_IN][QP_PW_TILE];
    float tmp[QP_PW_TILE]; /* a scalar output spread for its store */
};

static inline int pw_binary(int op) {
    return op <= QP_PW_DIV || op == PW_ADDS;
}

/* Element i of input x's data as float (dequantized). */
float pw_read_one(const struct pw_input *x, const void *d, int64_t i);

/* Compiles s's program into the fast program (s->fast; 0 when it cannot), p's constant
 * scalar inputs folded in. */
void pw_fast_compile(struct pw_state *s, const struct qp_kprep *p);

/* d = op(x) for the fast program's own operations (PW_FQL, PW_AFFINE); x may be d. */
void pw_fast_unary(const struct pw_instr *in, const float *x, float *d, int64_t n);

/* d = a + b * p (PW_ADDS); a NULL operand is the scalar as / bs. */
void pw_fast_adds(const float *a, float as, const float *b, float bs, float p, float *d, int64_t n);

/* clamp(rint(v * m [+ o]), lo, hi), as the SIMD blocks compute it (qmath/qsimd.h). */
float pw_level_of(float v, float m, float o, float lo, float hi);

/* 1 when every one of the n values is finite and at most PW_TAME in magnitude. */
int pw_tame(const float *v, int64_t n);

#endif
