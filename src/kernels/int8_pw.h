/*
 * Pointwise: the integer path's fused elementwise kernel (QP_INT8_DOMAIN "Pointwise"). The
 * runtime's rewrite (src/runtime/int8_pw.c) turns a connected group of elementwise nodes of a
 * Q/DQ model -- DequantizeLinear of an int8 tensor, Add/Sub/Mul/Div, Clip, Relu, LeakyRelu,
 * Sigmoid, HardSigmoid, HardSwish, Tanh, Erf, Pow by 2, the FakeQuant of a Q/DQ pair, and the
 * QuantizeLinear that ends it -- into one node that reads each input once and writes each
 * output once, so the chain a Conv's output goes through (PaddleOCR's LearnableAffineBlock and
 * decomposed HardSwish, with Q/DQ between them) costs one pass instead of one per node.
 *
 * The node is a small program over registers of one "main" shape, the broadcast of all its
 * inputs' shapes; every intermediate value is computed at that shape. Attributes:
 *   pw_prog    ints, 5 per instruction: op (enum qp_pw_op), dst register, operand a, operand b,
 *              parameter index (into pw_params; -1: none). An operand >= 0 is a register, < 0
 *              is node input -1 - operand (a constant or a computed tensor, broadcast).
 *   pw_params  floats: parameters (Clip bounds, LeakyRelu alpha, HardSigmoid alpha/beta,
 *              FakeQuant scale/zero point/qmin/qmax, an input's or output's scale/zero point).
 *   pw_regs    int: number of registers.
 *   pw_in_q    ints per input: -1 (float or float16, read as float) or the parameter index of
 *              (scale, zero point) for an int8/uint8 input, dequantized as it is read.
 *   pw_out     ints per output: the register it stores.
 *   pw_out_q   ints per output: -1 (a float output of dtype pw_out_dt) or the parameter index of
 *              (scale, zero point): quantized (round half to even, saturated) to pw_out_dt.
 *   pw_out_dt  ints per output: ONNX dtype (1 float, 10 float16, 3 int8, 2 uint8).
 *   pw_in_tame ints per input (optional): 1 for a float input the plan knows to be finite and
 *              at most QP_PW_TAME in magnitude (runtime/int8_graph.h i8g_magnitude_bound), which
 *              the fast program then takes without checking each tile (a pass over the input
 *              that cost PaddleOCR cls's integer path 0.1 ms of 0.9); NaN or larger values there
 *              are the plan's error, not the kernel's.
 *   pw_fast    int (optional): 1 lets the kernel compile the program once more into a fast
 *              program (kernels/int8_pw_impl.h): scalings by constants, Clips and the
 *              FakeQuants' divisions folded into multipliers, values within float rounding of
 *              the exact program's (a level moves by one where a quotient lies within rounding
 *              of a half). The integer path sets it, the exact path never; QP_PW_FAST=0 in the
 *              environment ignores it.
 * Each output's shape is the broadcast of the inputs it depends on (not always the main shape).
 *   nhwc       int (optional): 1 computes in channels-last order: the main shape (N, C, D1..Dk)
 *              is walked as (N, D1..Dk, C), so tensors the integer path keeps channels last
 *              (between QConv nodes, src/runtime/int8.c) are read and written without a
 *              transposition. Then pw_in_nhwc and pw_out_nhwc (ints, one per input / output)
 *              say which are stored channels last (those must have the main rank); the others
 *              are stored as their shape says and read through their strides (a constant
 *              [1,C,1,1] or an SE gate [N,C,1,1] as fast as before, anything else gathered).
 *
 * Arithmetic is float32 whatever the model's float type: on the integer path an fp16 model's
 * intermediate values are not rounded to fp16 between nodes (more accurate than the written
 * model; outputs within fp16 rounding of it). On the exact path (runtime/int8.h,
 * rt_int8_exact_rewrite) the RoundFloat16 nodes of the emulated fp16 graph are members
 * (QP_PW_ROUND16), so every value is rounded where the written model rounds it. Add, Sub, Mul,
 * Div, Clip, Relu, LeakyRelu, the FakeQuant (qmath's) and the rounding compute what the engine's
 * own kernels compute on float32, bit for bit; HardSwish (x / 6 here, x * (1/6) in the kernel),
 * HardSigmoid, Sigmoid, Tanh, Erf and Pow may differ in the last bit, which the integer path's
 * tolerance allows and the exact path avoids by leaving them out.
 *
 * Run: the main shape is split at one axis into rows x inner, so that each input is full,
 * scalar, constant within a row (e.g. per channel over NCHW, or an SE gate [N,C,1,1]) or the
 * same for every row (e.g. an affine [C] over [N,T,C]); the rows are processed in tiles of up to
 * QP_PW_TILE elements, threads over tiles. Other broadcasts, and outputs smaller than the main
 * shape, run through an index-gathering path that is slower and equally exact.
 */
#ifndef QP_KERNELS_INT8_PW_H
#define QP_KERNELS_INT8_PW_H

enum qp_pw_op {
    QP_PW_ADD = 0,
    QP_PW_SUB,
    QP_PW_MUL,
    QP_PW_DIV,
    QP_PW_CLIP, /* params: lo, hi */
    QP_PW_RELU,
    QP_PW_LEAKY, /* params: alpha */
    QP_PW_SIGMOID,
    QP_PW_HSIGMOID, /* params: alpha, beta */
    QP_PW_HSWISH,
    QP_PW_TANH,
    QP_PW_ERF,
    QP_PW_SQUARE,  /* Pow(x, 2) */
    QP_PW_FQ,      /* params: scale, zero point, qmin, qmax */
    QP_PW_COPY,    /* Identity */
    QP_PW_ROUND16, /* RoundFloat16 (runtime/narrow.h): to float16 and back, as qp_round_fp16_n */
    QP_PW_OP_COUNT
};

/* The magnitude up to which the fast program takes float inputs (pw_in_tame). */
#define QP_PW_TAME 4294967296.0f /* 2^32 */

/* How many pw_params an instruction of op reads from its parameter index (Clip and HardSigmoid
 * 2, LeakyRelu 1, FakeQuant 3: scale, zero point, dtype; the others 0). */
int qp_pw_n_params(int op);

#define QP_PW_TILE     1024
#define QP_PW_MAX_REGS 16
#define QP_PW_MAX_IN   16
#define QP_PW_MAX_OUT  8

#endif
