/* Small helpers to build graphs by hand in the quant tests (include after cmocka.h). */
#ifndef QP_TESTS_QGRAPH_H
#define QP_TESTS_QGRAPH_H

#include <string.h>

#include "core/arena.h"
#include "ir/ir.h"

/* Parses "a,b,,c" into names (empty for omitted inputs); returns the count. */
static inline int qg_split(const char *list, char buf[][128], const char **names, int max) {
    int n = 0;
    if (!list || !*list) return 0;
    const char *s = list;
    for (;;) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        assert_true(n < max && len < 128);
        memcpy(buf[n], s, len);
        buf[n][len] = '\0';
        names[n] = buf[n];
        n++;
        if (!e) break;
        s = e + 1;
    }
    return n;
}

/* Adds node `name` of `op` reading `ins` and writing `outs` (comma-separated value names). */
static inline int qg_node(struct qp_model *m, const char *name, const char *op, const char *ins,
                          const char *outs) {
    char ib[16][128], ob[8][128];
    const char *in[16], *out[8];
    int ni = qg_split(ins, ib, in, 16), no = qg_split(outs, ob, out, 8);
    struct qp_error err = {0};
    int node = -1;
    assert_int_equal(qp_graph_add_node(m->graph, name, op, "", ni, in, no, out, &node, &err),
                     QP_OK);
    return node;
}

static inline void qg_attr_i(struct qp_model *m, int node, const char *name, int64_t v) {
    struct qp_attr *a = qp_node_add_attr(m->graph, node, name, QP_ATTR_INT);
    assert_non_null(a);
    a->i = v;
}

#define QG_DIMS(...) ((const int64_t[]){__VA_ARGS__})

/* Sets dtype and dims of a value (-1 for an unknown dim; rank -1 for unknown rank). */
static inline int qg_shape(struct qp_model *m, const char *name, enum qp_dtype dt, int rank,
                           const int64_t *d) {
    int v = qp_graph_value(m->graph, name);
    assert_true(v >= 0);
    struct qp_value *val = &m->graph->values[v];
    val->dtype = dt;
    val->rank = rank;
    val->dims = NULL;
    if (rank > 0) {
        val->dims = qp_arena_calloc(m->arena, (size_t)rank, sizeof *val->dims);
        assert_non_null(val->dims);
        for (int i = 0; i < rank; i++)
            val->dims[i].value = d[i];
    }
    return v;
}

/* A float initializer of the given dims (no data: the policy never reads it). */
static inline int qg_init(struct qp_model *m, const char *name, int rank, const int64_t *d) {
    int64_t *dims = qp_arena_calloc(m->arena, (size_t)(rank ? rank : 1), sizeof *dims);
    assert_non_null(dims);
    uint64_t numel = 1;
    for (int i = 0; i < rank; i++) {
        dims[i] = d[i];
        numel *= (uint64_t)dims[i];
    }
    struct qp_tensor t = {
        .name = name, .dtype = QP_DTYPE_FLOAT, .rank = rank, .dims = dims, .numel = numel};
    struct qp_error err = {0};
    int v = -1;
    assert_int_equal(qp_graph_add_initializer(m->graph, &t, &v, &err), QP_OK);
    return v;
}

/* An initializer of `dt` with `data` (numel elements of esize bytes, copied into the model's
 * arena); returns its value index. */
static inline int qg_init_typed(struct qp_model *m, const char *name, int rank, const int64_t *d,
                                enum qp_dtype dt, const void *data, size_t esize) {
    int64_t *dims = qp_arena_calloc(m->arena, (size_t)(rank ? rank : 1), sizeof *dims);
    assert_non_null(dims);
    uint64_t numel = 1;
    for (int i = 0; i < rank; i++) {
        dims[i] = d[i];
        numel *= (uint64_t)d[i];
    }
    void *copy = qp_arena_calloc(m->arena, numel, esize);
    assert_non_null(copy);
    memcpy(copy, data, numel * esize);
    struct qp_tensor t = {.name = name,
                          .dtype = dt,
                          .rank = rank,
                          .dims = dims,
                          .numel = numel,
                          .data = copy,
                          .nbytes = numel * esize};
    struct qp_error err = {0};
    int v = -1;
    assert_int_equal(qp_graph_add_initializer(m->graph, &t, &v, &err), QP_OK);
    return v;
}

/* A float initializer with `data` (numel floats); returns its value index. */
static inline int qg_init_data(struct qp_model *m, const char *name, int rank, const int64_t *d,
                               const float *data) {
    return qg_init_typed(m, name, rank, d, QP_DTYPE_FLOAT, data, sizeof *data);
}

/* The default domain at opset `v`, IR version 9. */
static inline void qg_set_opset(struct qp_model *m, int64_t v) {
    m->opsets = qp_arena_calloc(m->arena, 1, sizeof *m->opsets);
    assert_non_null(m->opsets);
    m->opsets[0].domain = "";
    m->opsets[0].version = v;
    m->n_opsets = 1;
    m->ir_version = 9;
}

static inline void qg_input(struct qp_model *m, const char *name) {
    struct qp_error err = {0};
    assert_int_equal(qp_graph_add_input(m->graph, qp_graph_value(m->graph, name), &err), QP_OK);
}

static inline void qg_output(struct qp_model *m, const char *name) {
    struct qp_error err = {0};
    assert_int_equal(qp_graph_add_output(m->graph, qp_graph_value(m->graph, name), &err), QP_OK);
}

static inline void qg_sort(struct qp_model *m) {
    struct qp_error err = {0};
    assert_int_equal(qp_graph_toposort(m->graph, &err), QP_OK);
}

#endif
