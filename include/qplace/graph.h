/*
 * qplace/graph.h — read-only access to a loaded model's graph.
 *
 * What a caller needs to look at a model before it decides what to quantize: the nodes in
 * topological order (name, op type, domain, inputs, outputs, attributes), every tensor's element
 * type and shape, the initializers (as array views) and the consumers of a tensor. Everything is
 * addressed by name or by a node's position in topological order (0 <= i < qp_model_n_nodes),
 * and only the top-level graph is shown (subgraphs of If/Loop are attributes of type GRAPH).
 *
 *     struct qp_error err = {0};
 *     for (size_t i = 0; i < qp_model_n_nodes(m); i++) {
 *         struct qp_node_info n;
 *         qp_model_node(m, i, &n, &err);
 *         printf("%s (%s): %s -> %s\n", n.name, n.op_type, qp_model_node_input(m, i, 0),
 *                qp_model_node_output(m, i, 0));
 *     }
 *     struct qp_value_info v;
 *     if (qp_model_value(m, "conv1_out", &v, &err) == QP_OK && v.rank == 4) ... v.dims[1] ...
 *     struct qp_consumer use[16];
 *     size_t n_use;
 *     qp_model_consumers(m, "conv1_out", use, 16, &n_use, &err);    // who reads it
 *     struct qp_array w;
 *     qp_model_initializer(m, "conv1.weight", &w, &err);             // a view, read-only
 *
 * Ownership: every string and array handed out is borrowed from the model and stays valid until
 * the model is changed (quantized, converted) or freed; never write through an initializer view.
 * These functions do not change the model, so several threads may read one model at once.
 */
#ifndef QPLACE_GRAPH_H
#define QPLACE_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "qplace/array.h"
#include "qplace/dtype.h"
#include "qplace/model.h"
#include "qplace/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- nodes ---------------------------------------------------------------------------------- */

/* Live nodes of the top-level graph, in topological order. */
size_t qp_model_n_nodes(const struct qp_model *m);

struct qp_node_info {
    const char *name;    /* "" when the file gives none */
    const char *op_type; /* as written ("Conv") */
    const char *domain;  /* "" for the default ONNX domain */
    size_t n_inputs, n_outputs, n_attrs;
};

/* Node i (topological position). QP_ERR_USAGE for an index out of range or NULL arguments. */
enum qp_status qp_model_node(const struct qp_model *m, size_t i, struct qp_node_info *out,
                             struct qp_error *err);
/* The tensor name of input / output k of node i: "" for an omitted optional one, NULL for an
 * index out of range. */
const char *qp_model_node_input(const struct qp_model *m, size_t i, size_t k);
const char *qp_model_node_output(const struct qp_model *m, size_t i, size_t k);
/* The position of the node named `name`: returns 1 and sets *index_out (may be NULL), or 0 when
 * no live node has that name. */
int qp_model_find_node(const struct qp_model *m, const char *name, size_t *index_out);
/* 1 when node i is ONNX op `op_type` (domain "" or "ai.onnx"): a com.microsoft node with an ONNX
 * op's name is not the ONNX op. 0 otherwise and for an index out of range. */
int qp_model_node_is(const struct qp_model *m, size_t i, const char *op_type);

/* ONNX AttributeProto.AttributeType numbers. */
enum qp_attribute_type {
    QP_ATTRIBUTE_UNDEFINED = 0,
    QP_ATTRIBUTE_FLOAT = 1,
    QP_ATTRIBUTE_INT = 2,
    QP_ATTRIBUTE_STRING = 3,
    QP_ATTRIBUTE_TENSOR = 4,
    QP_ATTRIBUTE_GRAPH = 5,
    QP_ATTRIBUTE_FLOATS = 6,
    QP_ATTRIBUTE_INTS = 7,
    QP_ATTRIBUTE_STRINGS = 8,
    QP_ATTRIBUTE_TENSORS = 9,
    QP_ATTRIBUTE_GRAPHS = 10,
    QP_ATTRIBUTE_SPARSE_TENSOR = 11,
    QP_ATTRIBUTE_SPARSE_TENSORS = 12,
    QP_ATTRIBUTE_TYPE_PROTO = 13,
    QP_ATTRIBUTE_TYPE_PROTOS = 14,
    QP_ATTRIBUTE_TYPE_COUNT
};

/* One attribute. Only the fields of its type are set; the rest are zero. */
struct qp_attribute_info {
    const char *name;
    enum qp_attribute_type type;
    int64_t i;           /* INT */
    float f;             /* FLOAT */
    const char *s;       /* STRING: s_len bytes (not NUL-terminated in general) */
    size_t s_len;        /* STRING */
    size_t n;            /* element count of the list types */
    const int64_t *ints; /* INTS */
    const float *floats; /* FLOATS */
    struct qp_array t;   /* TENSOR (not STRING-typed): a read-only view */
};

/* Attribute k (file order) of node i. QP_ERR_USAGE for an index out of range. A TENSOR attribute
 * of STRING elements, or with external data that was not read, has t.data == NULL. */
enum qp_status qp_model_node_attribute(const struct qp_model *m, size_t i, size_t k,
                                       struct qp_attribute_info *out, struct qp_error *err);
/* The attribute named `name` of node i: 1 and *out filled, or 0 when the node has none. */
int qp_model_node_find_attribute(const struct qp_model *m, size_t i, const char *name,
                                 struct qp_attribute_info *out);

/* ---- tensors -------------------------------------------------------------------------------- */

/* A tensor of the graph: a graph input or output, an initializer, or a node output. */
struct qp_value_info {
    const char *name;
    enum qp_dtype dtype; /* QP_DTYPE_UNDEFINED when the file does not say */
    int rank;            /* -1 when unknown */
    /* The first min(rank, QP_MAX_RANK) dims: a static size, or -1 for a dynamic one, whose name
     * (the symbolic dim, "batch") is dim_params[k], NULL when it has none. */
    int64_t dims[QP_MAX_RANK];
    const char *dim_params[QP_MAX_RANK];
    int is_tensor;        /* 0: a sequence, map or optional (dtype and shape say nothing) */
    int is_input;         /* a graph input fed by the caller (not an initializer) */
    int is_output;        /* a graph output */
    int is_initializer;   /* a constant stored in the model */
    const char *producer; /* name of the node that computes it, NULL for inputs/initializers */
    size_t n_consumers;   /* node inputs reading it (see qp_model_consumers) */
};

/* The tensor named `name`. QP_ERR_BAD_INPUT naming it when the graph has no such tensor. */
enum qp_status qp_model_value(const struct qp_model *m, const char *name, struct qp_value_info *out,
                              struct qp_error *err);

/* Graph inputs the caller feeds (initializers listed as inputs excluded), and graph outputs, in
 * file order; NULL for an index out of range. */
size_t qp_model_n_inputs(const struct qp_model *m);
const char *qp_model_input_name(const struct qp_model *m, size_t i);
size_t qp_model_n_outputs(const struct qp_model *m);
const char *qp_model_output_name(const struct qp_model *m, size_t i);

/* A reader of a tensor: input `input` of the node at topological position `node`. */
struct qp_consumer {
    size_t node;
    size_t input;
    const char *node_name;
};

/* The consumers of tensor `name`, ordered by node position then input, into `out` (at most `cap`
 * entries; *n_out receives the total, which may exceed cap). QP_ERR_BAD_INPUT for an unknown
 * tensor, QP_ERR_USAGE for NULL arguments (out may be NULL when cap is 0). */
enum qp_status qp_model_consumers(const struct qp_model *m, const char *name,
                                  struct qp_consumer *out, size_t cap, size_t *n_out,
                                  struct qp_error *err);

/* ---- initializers --------------------------------------------------------------------------- */

size_t qp_model_n_initializers(const struct qp_model *m);
/* Name of initializer i (file order), NULL out of range. */
const char *qp_model_initializer_name(const struct qp_model *m, size_t i);
/* A read-only view of initializer `name` (owned = 0; never write through it). QP_ERR_BAD_INPUT
 * when there is no such initializer; QP_ERR_UNSUPPORTED for STRING tensors and for external data
 * the load did not read. */
enum qp_status qp_model_initializer(const struct qp_model *m, const char *name,
                                    struct qp_array *view_out, struct qp_error *err);

#ifdef __cplusplus
}
#endif
#endif
