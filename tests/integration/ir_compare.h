/*
 * Deep comparison of two loaded models' IRs, for round-trip tests (load -> save -> load) and the
 * model fuzzer. Compares everything a save is meant to keep: model fields, opsets, metadata,
 * functions (as serialized FunctionProtos), and recursively every graph: inputs, outputs,
 * value_info and their types and shapes, initializers (dtype, dims, bytes), nodes (names, op
 * types, domains, inputs, outputs) and every attribute including subgraphs, sparse tensors and
 * type protos.
 *
 * Deliberate leniencies: an absent string equals "" (ONNX reads both the same); where a
 * tensor's bytes live (inline or external data) is not compared, only the bytes; and a value
 * whose TypeProto is absent on one side only (a missing graph-input type filled in from its
 * initializer on save) is compared by its dtype, rank and dims alone.
 */
#ifndef QP_TESTS_IR_COMPARE_H
#define QP_TESTS_IR_COMPARE_H

#include <stddef.h>

struct qp_model;

/* Returns 0 when `a` and `b` are the same model. Otherwise returns 1 and writes where and what
 * the first difference is into `msg` (always NUL-terminated; `size` > 0). */
int qp_test_model_compare(const struct qp_model *a, const struct qp_model *b, char *msg,
                          size_t size);

#endif
