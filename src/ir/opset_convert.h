/*
 * Opset conversion: rewrites a model's default-domain (ONNX) operators from the opset it was
 * exported at to a newer one, keeping what every node computes. qplace writes Q/DQ models at
 * opset >= 19 (ModelOpt's choice), so models exported at opset 7..18 go through this first.
 *
 *     struct qp_error err = {0};
 *     if (qp_model_convert_opset(m, 19, &err) != QP_OK) { ...err.msg... }
 *
 * What is converted, and how, is in docs/opset-conversion.md. In short: operators whose schema
 * did not change between the two opsets, or changed only compatibly (new types, new attributes
 * whose defaults keep the old behaviour), pass through; attributes that became inputs become
 * int64/float initializers named `<node>_<attr>`; Softmax/LogSoftmax/Hardmax before 13 keep
 * their "coerce to 2-D at axis" meaning (a Flatten/Shape/Reshape rewrite when the axis is not
 * the last one); Upsample becomes Resize; DFT-20's axis becomes an input, GridSample-20's modes
 * are renamed, GroupNormalization-21's per-group scale and bias are made per channel. Node
 * names, output order and graph inputs/outputs never change.
 */
#ifndef QP_IR_OPSET_CONVERT_H
#define QP_IR_OPSET_CONVERT_H

#include <stdint.h>

#include "ir/ir.h"
#include "qplace/status.h"

/* Lowest and highest opsets qp_model_convert_opset converts from and to. */
#define QP_OPSET_CONVERT_MIN 7
#define QP_OPSET_CONVERT_MAX 21

/* Converts every default-domain node of every graph of `m` (subgraphs included) from the
 * model's "" / "ai.onnx" opset to `target`, then sets that opset import to `target` and raises
 * the model's ir_version to the lowest one that allows `target` (opset 19: IR 9, 21: IR 10).
 * Other domains are left alone. `m` is borrowed for the call and edited in place: new
 * initializers and nodes go into the graph of the node they serve; rewritten graphs are
 * re-sorted (qp_graph_toposort).
 *
 * The whole model is checked before anything is edited, so every error below except
 * QP_ERR_NOMEM leaves `m` unchanged. Returns QP_OK (also when the model already is at
 * `target`); QP_ERR_USAGE (NULL model); QP_ERR_UNSUPPORTED: an opset outside 7..21, a target
 * below the model's opset, an operator unknown to ONNX 21 or not defined at the model's opset,
 * or a node whose meaning changed in a way qplace does not convert (the message names node,
 * operator and both opsets, e.g. "opset: node 'bn' (BatchNormalization, opset 7 -> 19):
 * spatial=0 (per-activation statistics) has no equivalent after opset 9"); QP_ERR_BAD_INPUT:
 * a malformed node (an attribute of the wrong type, a required attribute missing);
 * QP_ERR_NOMEM (the model may then be half converted: free it). */
enum qp_status qp_model_convert_opset(struct qp_model *m, int64_t target, struct qp_error *err);

#endif
