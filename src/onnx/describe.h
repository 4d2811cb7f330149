/*
 * What `qplace info` shows of the parts of a model the IR keeps only as read (src/onnx's
 * protobuf structs, which nothing outside src/onnx sees): the types of values that are not plain
 * tensors and the model-local functions.
 */
#ifndef QP_ONNX_DESCRIBE_H
#define QP_ONNX_DESCRIBE_H

#include <stddef.h>

/* Writes "sequence(tensor(float))", "map(int64,tensor(float))", "optional(...)" ... for a value's
 * origin_type (struct qp_value: the TypeProto as read; "?" when NULL or unknown) into buf (size
 * bytes, always terminated, truncated when short). Borrowed for the call. */
void qp_onnx_describe_type(const void *origin_type, char *buf, size_t size);

/* The domain, name and node count of one of struct qp_model's `functions` (a FunctionProto as
 * read). The strings are borrowed for the model's lifetime. Returns 0 (outputs untouched) for
 * NULL. */
int qp_onnx_function_info(const void *function, const char **domain_out, const char **name_out,
                          size_t *n_nodes_out);

#endif
