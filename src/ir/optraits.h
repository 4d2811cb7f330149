/*
 * Facts about ONNX operators, one table for every pass: a row per op name with the flags below.
 * A pass asks the table ("does this node only move values?") instead of keeping its own list of
 * op names, so two passes that mean the same set cannot drift apart.
 *
 *     if (qp_op_is(node, QP_OP_FLAG_SAME_VALUES)) ...   // Identity, Reshape, Flatten, ...
 *     unsigned f = qp_op_traits(node);                  // all flags at once, 0 for unknown ops
 *
 * The flags are ONNX's: a node outside the ONNX domains (a com.microsoft op named like an ONNX
 * op) has no traits at all. Where two passes' lists differ they are two flags, each the exact set
 * its pass used (several follow TensorRT / ModelOpt / ONNX Runtime lists, named in the comment).
 */
#ifndef QP_IR_OPTRAITS_H
#define QP_IR_OPTRAITS_H

#include <stddef.h>

#include "ir/ir.h"

enum qp_op_flag {
    QP_OP_FLAG_SAME_TYPE,     /* output 0 has the element type of input 0 */
    QP_OP_FLAG_SAME_RANK,     /* output 0 has the rank of input 0 */
    QP_OP_FLAG_BROADCAST,     /* elementwise with multidirectional broadcast: rank = max rank */
    QP_OP_FLAG_SAME_CHANNELS, /* output 0 keeps dimension 1 (channels) of input 0 */
    QP_OP_FLAG_SAME_VALUES,   /* output 0 holds exactly input 0's values (moved, not changed) */
    QP_OP_FLAG_LINEAR,        /* Conv / ConvTranspose / Gemm / MatMul: TensorRT CASK kernels */
    QP_OP_FLAG_COPY,          /* ModelOpt's copy ops: data movement, gathers and scatters */
    QP_OP_FLAG_POINTWISE,     /* ModelOpt's pointwise ops (TensorRT KGEN partitions) */
    QP_OP_FLAG_POOL,          /* ModelOpt's pooling ops (window generators included, as there) */
    QP_OP_FLAG_QDQ_INPUT0,    /* ONNX Runtime's QDQ handler quantizes input 0 only */
    QP_OP_FLAG_SHAPE_SOURCE,  /* output computed from the input's shape only (Shape, Size) */
    QP_OP_FLAG_NO_FP16,       /* kept in float32 by fp16 conversion (no float16 in its schema) */
    QP_OP_FLAG_OUT_INT64,     /* output 0 is int64 whatever the inputs */
    QP_OP_FLAG_OUT_BOOL,      /* output 0 is bool whatever the inputs */
    QP_OP_FLAG_BF16,          /* every float input and output takes bfloat16 at opset 19 */
    QP_OP_FLAG_COUNT
};
_Static_assert(QP_OP_FLAG_COUNT <= 32, "op flags are bits of an unsigned");

/* The bit of flag f in a traits mask. */
#define QP_OP_BIT(f) (1u << (f))

/* One row of the table: an ONNX op name and its flag bits. */
struct qp_op_row {
    const char *op;
    unsigned flags;
};

/* Flags of ONNX op `op` (a bare name, the caller has checked the domain); 0 for an op not in the
 * table and for NULL. */
unsigned qp_op_traits_of(const char *op);
/* Flags of node n: 0 when its domain is not ONNX's or its op is not in the table. */
unsigned qp_op_traits(const struct qp_node *n);
/* 1 when node n (of an ONNX domain) has flag f. */
int qp_op_is(const struct qp_node *n, enum qp_op_flag f);

/* The flag's name ("same_values"), or NULL for a value out of range. */
const char *qp_op_flag_name(enum qp_op_flag f);
/* The whole table (sorted by strcmp, one row per op), for tests and listings. */
const struct qp_op_row *qp_op_rows(size_t *n_out);

#endif
