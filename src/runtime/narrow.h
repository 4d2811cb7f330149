/*
 * Narrow float tensors (float16, bfloat16) held as float32. This CPU has no narrow float
 * arithmetic: a kernel given a float16 tensor converts it to float32 around its work (the
 * registry's QP_KF_F16_VIA_F32 rows), two extra passes per input and one per output, on plain
 * layouts only. Two rewrites of a graph copy avoid that:
 *
 *   - rt_narrow_widen (the integer path, runtime/int8.h): every narrow tensor inside the graph
 *     becomes float32 and stays unrounded -- more accurate than the written model;
 *   - rt_narrow_emulate (every session on a float16 model, runtime.h): widened as above, then a
 *     QP_INT8_DOMAIN "RoundFloat16" node after every node that computed a float16 value rounds
 *     it to float16 and back (kernels: cast.c). A kernel then reads the float32 values that
 *     converting the float16 tensor would have given it and computes in float32 as before, so
 *     the results are those of the model as written; only the order in which a kernel on a
 *     blocked layout sums can differ, within float32 rounding before the float16 rounding.
 *     Nodes that only move values (Reshape, Transpose, Concat, Slice, Gather, MaxPool, Relu,
 *     ...) need no rounding: their inputs already hold float16 values.
 *
 * Both keep the graph's interface: narrow graph inputs get a Cast up, narrow graph outputs a
 * Cast down, and every value keeps its name (a rounded value is the one the name names).
 */
#ifndef QP_RUNTIME_NARROW_H
#define QP_RUNTIME_NARROW_H

#include <stddef.h>

#include "ir/ir.h"

/* float16/bfloat16 values of `g` that are not graph inputs or outputs become float32: narrow
 * initializers and node-attribute constants are converted, Casts to a narrow type cast to
 * float32, narrow graph inputs get a Cast up and narrow graph outputs a Cast down. Declines
 * (sets *why, changes nothing) for subgraphs, custom-domain ops on narrow tensors, `dtype`
 * attributes naming a narrow type, narrow initializers that are graph inputs. *n_widened:
 * constants converted, Casts retargeted and declared value types changed. QP_ERR_NOMEM or an
 * edit's error: the graph is unusable. */
enum qp_status rt_narrow_widen(struct qp_graph *g, const char **why, size_t *n_widened,
                               struct qp_error *err);

/* 1 when a live node of `g` computes a float16 value (a session on it would convert around
 * kernels) and QP_FP16_STORAGE=1 (the float16 storage kept, for comparisons) is not set. */
int rt_narrow_emulates(const struct qp_graph *g);

/* rt_narrow_widen, then a RoundFloat16 node after each node that computed a float16 value
 * (except those that only move values, and values only the Cast down to a float16 graph output
 * reads), the node writing a new value and the rounding node the original one. Declines (sets *why,
 * changes nothing) as rt_narrow_widen does and for bfloat16 values. *n_rounds: rounding nodes
 * added. Errors leave the graph unusable. */
enum qp_status rt_narrow_emulate(struct qp_graph *g, const char **why, size_t *n_rounds,
                                 struct qp_error *err);

#endif
