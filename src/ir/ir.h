/*
 * The graph IR: the form every module after the loader works on. Kernels and passes never see
 * protobuf structs; the `origin` pointers below are opaque to them and exist only so the saver
 * can write back, bit for bit, what it did not change.
 *
 * Identity is by index: nodes, values and initializers are addressed by their index in their
 * graph's arrays, which stay valid across edits (removed nodes are marked dead, never moved).
 * Every string and small array hangs off the model's arena and lives as long as the model.
 *
 *     struct qp_graph *g = qp_model_graph(m);
 *     for (size_t k = 0; k < g->n_topo; k++) {
 *         const struct qp_node *n = &g->nodes[g->topo[k]];
 *         for (int i = 0; i < n->n_inputs; i++)
 *             if (n->inputs[i] >= 0) use(g->values[n->inputs[i]].name);
 *     }
 */
#ifndef QP_IR_IR_H
#define QP_IR_IR_H

#include <stddef.h>
#include <stdint.h>

#include "qplace/dtype.h"
#include "qplace/model.h"
#include "qplace/status.h"

struct qp_arena;
struct qp_graph;

/* ONNX AttributeProto.AttributeType numbers. */
enum qp_attr_type {
    QP_ATTR_UNDEFINED = 0,
    QP_ATTR_FLOAT = 1,
    QP_ATTR_INT = 2,
    QP_ATTR_STRING = 3,
    QP_ATTR_TENSOR = 4,
    QP_ATTR_GRAPH = 5,
    QP_ATTR_FLOATS = 6,
    QP_ATTR_INTS = 7,
    QP_ATTR_STRINGS = 8,
    QP_ATTR_TENSORS = 9,
    QP_ATTR_GRAPHS = 10,
    QP_ATTR_SPARSE_TENSOR = 11,
    QP_ATTR_SPARSE_TENSORS = 12,
    QP_ATTR_TYPE_PROTO = 13,
    QP_ATTR_TYPE_PROTOS = 14,
    QP_ATTR_TYPE_COUNT
};

struct qp_bytes {
    const uint8_t *data;
    size_t len;
};

/* A constant tensor: an initializer, a Constant's value, a tensor attribute. `data` is packed
 * little-endian in raw_data layout (bool one byte, int4 two per byte) and is either borrowed from
 * the loaded file's buffers (no copy) or owned by the model (converted typed fields, external
 * data read from disk, tensors made by qplace). */
struct qp_tensor {
    const char *name;
    const char *doc_string;
    enum qp_dtype dtype;
    int rank;
    const int64_t *dims;
    uint64_t numel;
    const void *data; /* NULL for STRING tensors and for unread external data */
    size_t nbytes;
    const struct qp_bytes *strings; /* STRING tensors: numel entries */
    /* External data as read (location relative to the model's folder), for info and saving. */
    const char *external_location;
    uint64_t external_offset, external_length;
    /* The TensorProto this came from, when unchanged; NULL for tensors qplace made. */
    const void *origin;
};

/* One dimension: value >= 0 is static; value < 0 is unknown, and `param` names it when it is a
 * symbolic dimension ("batch", "p2o.DynamicDimension.0"). */
struct qp_dim {
    int64_t value;
    const char *param;
};

struct qp_attr {
    const char *name;
    enum qp_attr_type type;
    const char *ref_attr_name; /* inside functions: refers to the caller's attribute */
    const char *doc_string;
    int64_t i;
    float f;
    struct qp_bytes s;
    struct qp_tensor *t;
    struct qp_graph *g;
    size_t n; /* element count of the list types below */
    const int64_t *ints;
    const float *floats;
    const struct qp_bytes *strings;
    struct qp_tensor **tensors;
    struct qp_graph **graphs;
    /* The AttributeProto this came from: sparse tensors and type protos live only there. */
    const void *origin;
};

/* A consumer of a value: node `node` reads it as input `input`. */
struct qp_use {
    int node;
    int input;
};

enum qp_value_kind {
    QP_VALUE_TENSOR = 0, /* a dense tensor (dtype/rank/dims may still be unknown) */
    QP_VALUE_OTHER       /* sequence, map, optional, sparse: type kept in `origin_type` only */
};

struct qp_value {
    const char *name;
    const char *doc_string;
    enum qp_value_kind kind;
    enum qp_dtype dtype; /* UNDEFINED when unknown */
    int rank;            /* -1 when unknown */
    struct qp_dim *dims; /* rank entries */
    int producer;        /* node index, or -1 (graph input, initializer, outer scope) */
    int producer_output; /* output slot of the producer */
    int initializer;     /* index into graph->inits, or -1 */
    unsigned is_graph_input : 1;
    unsigned is_graph_output : 1;
    unsigned is_outer : 1;      /* defined in an enclosing graph (subgraphs only) */
    unsigned in_value_info : 1; /* listed in graph.value_info */
    size_t n_uses, cap_uses;
    struct qp_use *uses;     /* malloc'd; in no particular order */
    const void *origin_type; /* TypeProto as read (denotations, non-tensor types) or NULL */
};

struct qp_node {
    const char *name;
    const char *op_type;
    const char *domain; /* "" for the default ONNX domain */
    const char *doc_string;
    int n_inputs, n_outputs, n_attrs;
    int cap_attrs; /* capacity of `attrs` (arena-allocated, grown geometrically) */
    int *inputs;   /* value index, or -1 for an omitted optional input ("") */
    int *outputs;  /* value index, or -1 for an omitted optional output */
    struct qp_attr *attrs;
    int dead;           /* removed by an edit; skipped by topo order and the saver */
    const void *origin; /* NodeProto it came from (unknown fields), NULL if made by qplace */
};

struct qp_graph {
    struct qp_model *model;
    struct qp_graph *parent; /* enclosing graph of a subgraph; NULL at the top */
    const char *name;
    const char *doc_string;
    size_t n_nodes, cap_nodes;
    struct qp_node *nodes;
    size_t n_values, cap_values;
    struct qp_value *values;
    size_t n_inits, cap_inits;
    struct qp_tensor *inits; /* initializer i is value inits_value[i] */
    int *inits_value;
    size_t n_inputs, n_outputs, n_value_info;
    size_t cap_inputs, cap_outputs, cap_value_info;
    int *inputs, *outputs, *value_info; /* value indices, in file order */
    /* Topological order of live nodes (valid after qp_graph_toposort). */
    size_t n_topo;
    int *topo;
    /* Name -> index hashes (open addressing, -1 empty) for values and for node names. */
    size_t hash_cap, node_hash_cap, node_hash_n;
    int *hash, *node_hash;
    size_t n_subgraphs; /* subgraphs directly inside this graph's node attributes */
    const void *origin; /* GraphProto: sparse initializers, quantization annotations, unknowns */
};

struct qp_opset {
    const char *domain;
    int64_t version;
};

struct qp_kv {
    const char *key;
    const char *value;
};

struct qp_model {
    struct qp_arena *arena;
    int64_t ir_version;
    const char *producer_name, *producer_version, *domain, *doc_string;
    int64_t model_version;
    size_t n_opsets;
    struct qp_opset *opsets;
    size_t n_metadata;
    struct qp_kv *metadata;
    struct qp_graph *graph;
    size_t n_functions; /* model-local functions, kept as read (FunctionProto) */
    const void *const *functions;
    const char *path; /* file it was loaded from (absolute, real path) or NULL */
    const char *dir;  /* folder external data resolves against, or NULL */
    size_t n_external_files;
    const char **external_files; /* distinct locations, as written in the model */
    /* Owned storage released by qp_model_free: the unpacked ModelProto, and buffers the IR
     * owns (converted tensors, external data). */
    void *proto;
    void (*proto_free)(void *proto);
    size_t n_owned, cap_owned;
    void **owned;
    size_t n_graphs, cap_graphs; /* every graph of the model, for release */
    struct qp_graph **graphs;
};

/* ---- model ------------------------------------------------------------------------------- */

/* An empty model with an empty top-level graph. NULL when out of memory. */
struct qp_model *qp_model_create(void);
struct qp_graph *qp_model_graph(const struct qp_model *m);
/* Opset version imported for `domain` ("" or "ai.onnx" for ONNX), or 0 when not imported. */
int64_t qp_model_opset(const struct qp_model *m, const char *domain);
/* Hands a malloc'd buffer to the model, freed by qp_model_free. On failure frees `p`. */
enum qp_status qp_model_own(struct qp_model *m, void *p, struct qp_error *err);

/* ---- graph building (used by the loader and by passes) ------------------------------------ */

/* A new graph (top level when parent is NULL), allocated on the model's arena. */
struct qp_graph *qp_graph_create(struct qp_model *m, struct qp_graph *parent);
/* NULL-safe; frees the malloc'd arrays of the graph (not the arena strings). Called by
 * qp_model_free for every graph. */
void qp_graph_release(struct qp_graph *g);

/* Index of the value named `name`, or -1. */
int qp_graph_find_value(const struct qp_graph *g, const char *name);
/* Index of the value named `name`, created (kind tensor, dtype undefined, rank -1) when absent.
 * `name` is copied. Returns -1 when out of memory. */
int qp_graph_value(struct qp_graph *g, const char *name);
/* Index of the live node named `name` (the first, if names repeat), or -1. */
int qp_graph_find_node(const struct qp_graph *g, const char *name);

/* Appends a node. `inputs`/`outputs` are value names ("" or NULL for omitted optional slots);
 * the node's name, op_type and domain are copied. Producer and use indices are updated. A value
 * with a producer already is QP_ERR_BAD_INPUT ("tensor 'x' is produced by both 'a' and 'b'").
 * The new node's attributes are empty: add them with qp_node_add_attr. */
enum qp_status qp_graph_add_node(struct qp_graph *g, const char *name, const char *op_type,
                                 const char *domain, int n_inputs, const char *const *inputs,
                                 int n_outputs, const char *const *outputs, int *node_out,
                                 struct qp_error *err);
/* Appends a zeroed attribute to node `node` and returns it (NULL when out of memory). Invalidates
 * earlier attribute pointers of that node. */
struct qp_attr *qp_node_add_attr(struct qp_graph *g, int node, const char *name,
                                 enum qp_attr_type type);
/* Attribute lookup by name, or NULL. */
const struct qp_attr *qp_node_attr(const struct qp_node *n, const char *name);

/* 1 for ONNX's default domain: NULL, "" or "ai.onnx". */
int qp_domain_is_onnx(const char *domain);

/* 1 when n is ONNX's operator `op`: its op_type is op and its domain ONNX's (a com.microsoft node
 * named like an ONNX op is not that op). The one answer to "is this node op X" for every pass. */
int qp_node_is(const struct qp_node *n, const char *op);

/* Adds an initializer named t->name (the tensor struct is copied; its arrays are borrowed for the
 * model's lifetime). An existing initializer of that name is QP_ERR_BAD_INPUT. */
enum qp_status qp_graph_add_initializer(struct qp_graph *g, const struct qp_tensor *t,
                                        int *value_out, struct qp_error *err);
/* Marks value `v` as a graph input / output (appended in call order). */
enum qp_status qp_graph_add_input(struct qp_graph *g, int v, struct qp_error *err);
enum qp_status qp_graph_add_output(struct qp_graph *g, int v, struct qp_error *err);
enum qp_status qp_graph_add_value_info(struct qp_graph *g, int v, struct qp_error *err);

/* ---- checks and order -------------------------------------------------------------------- */

/* Computes g->topo (stable: file order among ready nodes; subgraph reads of outer values count
 * as inputs of the node that holds the subgraph). A cycle is QP_ERR_BAD_INPUT naming a node on
 * it. A node input that nothing defines (no producer, initializer, graph input or outer value)
 * is QP_ERR_BAD_INPUT naming node and input. */
enum qp_status qp_graph_toposort(struct qp_graph *g, struct qp_error *err);

/* Marks in `mark` (a byte per node index) every node downstream of the `n` nodes on `stack`,
 * which the caller has marked already: the readers of their outputs through the use lists,
 * recursively. `stack` needs room for g->n_nodes entries. Returns the nodes visited, the seeds
 * included (each once). */
size_t qp_graph_mark_downstream(const struct qp_graph *g, unsigned char *mark, int *stack,
                                size_t n);

/* Gives every unnamed node the name `<OpType>_<k>` (k starts at the number of distinct existing
 * node names and is bumped past collisions, as ModelOpt does) and makes duplicate names unique
 * by appending `_<n>`. Recurses into subgraphs; names are unique across the whole model. */
enum qp_status qp_graph_name_nodes(struct qp_graph *g, struct qp_error *err);

/* ---- edits ------------------------------------------------------------------------------- */

/* A value name not used by any value in the model that starts with `base` (`base`, `base_1`,
 * ...). Allocated on the model's arena; NULL when out of memory. */
const char *qp_graph_unique_value_name(struct qp_graph *g, const char *base);
/* Likewise for node names. */
const char *qp_graph_unique_node_name(struct qp_graph *g, const char *base);

/* Points input `input` of node `node` at value `v` (-1 to omit it), keeping use lists right. */
enum qp_status qp_graph_set_input(struct qp_graph *g, int node, int input, int v,
                                  struct qp_error *err);

/* Inserts a node of `op_type` on the edge that feeds input `input` of node `consumer`: the new
 * node reads the edge's tensor as its input 0 (then `extra_inputs`, value names, may be NULL or
 * "" for omitted slots), writes a new uniquely named tensor (dtype copied from the original),
 * and the consumer reads that instead. Node and output names derive from `name_base`.
 * *node_out receives the new node's index (may be NULL). */
enum qp_status qp_graph_insert_on_edge(struct qp_graph *g, int consumer, int input,
                                       const char *op_type, const char *name_base,
                                       int n_extra_inputs, const char *const *extra_inputs,
                                       int *node_out, struct qp_error *err);
/* Inserts one such node on value `v` and moves every consumer of `v` to read the new tensor. A
 * graph output that is `v` keeps naming `v` (the model's interface does not change). */
enum qp_status qp_graph_insert_on_value(struct qp_graph *g, int v, const char *op_type,
                                        const char *name_base, int n_extra_inputs,
                                        const char *const *extra_inputs, int *node_out,
                                        struct qp_error *err);
/* Marks node `node` dead and drops its uses; its outputs lose their producer.
 * Every edit leaves g->topo stale: call qp_graph_toposort before walking it again. */
enum qp_status qp_graph_remove_node(struct qp_graph *g, int node, struct qp_error *err);

#endif
