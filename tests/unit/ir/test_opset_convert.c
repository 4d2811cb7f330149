/* Unit tests of the opset converter on hand-built graphs: each conversion's rewritten structure,
 * the initializers it adds, subgraphs, and the errors (which must leave the model unchanged).
 * Semantic equivalence in ONNX Runtime is checked by tests/opset/. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "core/arena.h"
#include "ir/ir.h"
#include "ir/opset_convert.h"

static struct qp_model *model_at(int64_t opset) {
    struct qp_model *m = qp_model_create();
    assert_non_null(m);
    m->ir_version = 4;
    m->n_opsets = 2;
    m->opsets = qp_arena_calloc(m->arena, 2, sizeof *m->opsets);
    assert_non_null(m->opsets);
    m->opsets[0].domain = "";
    m->opsets[0].version = opset;
    m->opsets[1].domain = "com.example";
    m->opsets[1].version = 1;
    return m;
}

static int input(struct qp_graph *g, const char *name, enum qp_dtype dt, int rank) {
    struct qp_error err = {0};
    int v = qp_graph_value(g, name);
    assert_true(v >= 0);
    g->values[v].dtype = dt;
    g->values[v].rank = rank;
    if (rank > 0) {
        g->values[v].dims = qp_arena_calloc(g->model->arena, (size_t)rank, sizeof(struct qp_dim));
        for (int i = 0; i < rank; i++)
            g->values[v].dims[i].value = -1;
    }
    assert_int_equal(qp_graph_add_input(g, v, &err), QP_OK);
    return v;
}

static void output(struct qp_graph *g, const char *name) {
    struct qp_error err = {0};
    assert_int_equal(qp_graph_add_output(g, qp_graph_value(g, name), &err), QP_OK);
}

/* A node with up to 4 inputs and outputs, given as "a,b" lists ("" parts omitted slots). */
static int node(struct qp_graph *g, const char *name, const char *op, const char *ins,
                const char *outs) {
    char ibuf[256], obuf[256];
    const char *iv[8], *ov[8];
    int ni = 0, no = 0;
    snprintf(ibuf, sizeof ibuf, "%s", ins);
    snprintf(obuf, sizeof obuf, "%s", outs);
    for (char *p = ibuf, *q; *ins && p; p = q) {
        q = strchr(p, ',');
        if (q) *q++ = 0;
        iv[ni++] = p;
    }
    for (char *p = obuf, *q; p; p = q) {
        q = strchr(p, ',');
        if (q) *q++ = 0;
        ov[no++] = p;
    }
    int n = -1;
    struct qp_error err = {0};
    assert_int_equal(qp_graph_add_node(g, name, op, "", ni, iv, no, ov, &n, &err), QP_OK);
    return n;
}

static void attr_i(struct qp_graph *g, int n, const char *name, int64_t v) {
    struct qp_attr *a = qp_node_add_attr(g, n, name, QP_ATTR_INT);
    assert_non_null(a);
    a->i = v;
}

static void attr_f(struct qp_graph *g, int n, const char *name, float v) {
    struct qp_attr *a = qp_node_add_attr(g, n, name, QP_ATTR_FLOAT);
    assert_non_null(a);
    a->f = v;
}

static void attr_s(struct qp_graph *g, int n, const char *name, const char *s) {
    struct qp_attr *a = qp_node_add_attr(g, n, name, QP_ATTR_STRING);
    assert_non_null(a);
    a->s.data = (const uint8_t *)s;
    a->s.len = strlen(s);
}

static void attr_ints(struct qp_graph *g, int n, const char *name, const int64_t *v, size_t k) {
    struct qp_attr *a = qp_node_add_attr(g, n, name, QP_ATTR_INTS);
    assert_non_null(a);
    a->ints = v;
    a->n = k;
}

static void attr_floats(struct qp_graph *g, int n, const char *name, const float *v, size_t k) {
    struct qp_attr *a = qp_node_add_attr(g, n, name, QP_ATTR_FLOATS);
    assert_non_null(a);
    a->floats = v;
    a->n = k;
}

static enum qp_status convert(struct qp_model *m, int64_t to, struct qp_error *err) {
    memset(err, 0, sizeof *err);
    return qp_model_convert_opset(m, to, err);
}

static void convert_ok(struct qp_model *m, int64_t to) {
    struct qp_error err;
    enum qp_status st = convert(m, to, &err);
    if (st != QP_OK) fail_msg("convert to %lld: %s", (long long)to, err.msg);
    assert_int_equal(qp_model_opset(m, ""), to);
}

/* The initializer feeding input `i` of node `n`. */
static const struct qp_tensor *init_in(const struct qp_graph *g, int n, int i) {
    assert_true(i < g->nodes[n].n_inputs);
    int v = g->nodes[n].inputs[i];
    assert_true(v >= 0);
    assert_true(g->values[v].initializer >= 0);
    return &g->inits[g->values[v].initializer];
}

static void assert_i64s(const struct qp_tensor *t, const int64_t *want, size_t n) {
    assert_int_equal(t->dtype, QP_DTYPE_INT64);
    assert_int_equal(t->numel, n);
    assert_int_equal(t->nbytes, n * 8);
    assert_null(t->origin);
    assert_memory_equal(t->data, want, n * 8);
}

static float f32_of(const struct qp_tensor *t) {
    float f;
    assert_int_equal(t->dtype, QP_DTYPE_FLOAT);
    assert_int_equal(t->rank, 0);
    memcpy(&f, t->data, 4);
    return f;
}

static const char *str_attr(const struct qp_node *n, const char *name) {
    static char buf[128];
    const struct qp_attr *a = qp_node_attr(n, name);
    if (!a) return NULL;
    snprintf(buf, sizeof buf, "%.*s", (int)a->s.len, (const char *)a->s.data);
    return buf;
}

static const char *in_name(const struct qp_graph *g, int n, int i) {
    int v = g->nodes[n].inputs[i];
    return v >= 0 ? g->values[v].name : "";
}

static int live_nodes(const struct qp_graph *g) {
    int k = 0;
    for (size_t i = 0; i < g->n_nodes; i++)
        k += !g->nodes[i].dead;
    return k;
}

/* ---- pass-through and model-level ------------------------------------------------------- */

static void test_pass_through(void **state) {
    (void)state;
    struct qp_model *m = model_at(9);
    struct qp_graph *g = m->graph;
    input(g, "x", QP_DTYPE_FLOAT, 4);
    input(g, "w", QP_DTYPE_FLOAT, 4);
    int conv = node(g, "conv", "Conv", "x,w", "c");
    int64_t pads[4] = {1, 1, 1, 1};
    attr_ints(g, conv, "pads", pads, 4);
    node(g, "relu", "Relu", "c", "r");
    node(g, "add", "Add", "r,x", "a");
    node(g, "gap", "GlobalAveragePool", "a", "p");
    int custom = node(g, "custom", "Clip", "p", "q");
    g->nodes[custom].domain = "com.example"; /* not ONNX: left alone even with attributes */
    attr_f(g, custom, "min", 0);
    output(g, "q");
    convert_ok(m, 19);
    assert_int_equal(g->n_nodes, 5);
    assert_int_equal(g->n_inits, 0);
    assert_int_equal(g->nodes[conv].n_attrs, 1);
    assert_int_equal(g->nodes[custom].n_inputs, 1);
    assert_int_equal(g->nodes[custom].n_attrs, 1);
    assert_int_equal(m->ir_version, 9);
    assert_int_equal(qp_model_opset(m, "com.example"), 1);
    convert_ok(m, 21); /* again, from 19 */
    assert_int_equal(m->ir_version, 10);
    qp_model_free(m);
}

static void test_bad_targets(void **state) {
    (void)state;
    struct qp_model *m = model_at(11);
    struct qp_error err;
    input(m->graph, "x", QP_DTYPE_FLOAT, 2);
    node(m->graph, "r", "Relu", "x", "y");
    assert_int_equal(convert(m, 9, &err), QP_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "down from opset 11 to 9"));
    assert_int_equal(convert(m, 22, &err), QP_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "22"));
    assert_int_equal(convert(m, 11, &err), QP_OK);
    assert_int_equal(convert(NULL, 19, &err), QP_ERR_USAGE);
    m->opsets[0].version = 6;
    assert_int_equal(convert(m, 19, &err), QP_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "opset 6"));
    m->n_opsets = 0;
    assert_int_equal(convert(m, 19, &err), QP_ERR_UNSUPPORTED);
    qp_model_free(m);
}

static void test_unknown_and_undefined_ops(void **state) {
    (void)state;
    struct qp_model *m = model_at(11);
    struct qp_error err;
    input(m->graph, "x", QP_DTYPE_FLOAT, 2);
    node(m->graph, "weird", "FooBar", "x", "y");
    assert_int_equal(convert(m, 19, &err), QP_ERR_UNSUPPORTED);
    assert_string_equal(err.msg, "opset: node 'weird' (FooBar, opset 11 -> 19): not an ONNX "
                                 "operator up to opset 21");
    assert_int_equal(qp_model_opset(m, ""), 11);
    qp_model_free(m);

    m = model_at(11);
    input(m->graph, "x", QP_DTYPE_FLOAT, 2);
    node(m->graph, "ln", "LayerNormalization", "x", "y");
    assert_int_equal(convert(m, 19, &err), QP_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "'ln' (LayerNormalization, opset 11 -> 19)"));
    assert_non_null(strstr(err.msg, "not defined at opset 11"));
    qp_model_free(m);
}

static void test_unhandled_change_is_unsupported(void **state) {
    (void)state;
    struct qp_model *m = model_at(10);
    struct qp_error err;
    input(m->graph, "x", QP_DTYPE_FLOAT, 4);
    input(m->graph, "rois", QP_DTYPE_FLOAT, 2);
    input(m->graph, "idx", QP_DTYPE_INT64, 1);
    node(m->graph, "relu", "Relu", "x", "r");
    int64_t axes[1] = {1};
    int rm = node(m->graph, "rm", "ReduceMean", "r", "m");
    attr_ints(m->graph, rm, "axes", axes, 1);
    node(m->graph, "ra", "RoiAlign", "x,rois,idx", "y");
    /* 10 -> 15 crosses nothing RoiAlign cares about */
    convert_ok(m, 15);
    assert_int_equal(m->graph->nodes[rm].n_inputs, 1);
    /* 15 -> 19 does (its default coordinate mode changed at 16): refused, and the model is left
     * as it was (the ReduceMean, convertible at 18, too) */
    size_t n_nodes = m->graph->n_nodes, n_inits = m->graph->n_inits;
    assert_int_equal(convert(m, 19, &err), QP_ERR_UNSUPPORTED);
    assert_string_equal(err.msg, "opset: node 'ra' (RoiAlign, opset 15 -> 19): its definition "
                                 "changed at opset 16 and qplace does not convert it");
    assert_int_equal(m->graph->n_nodes, n_nodes);
    assert_int_equal(m->graph->n_inits, n_inits);
    assert_int_equal(m->graph->nodes[rm].n_inputs, 1);
    assert_int_equal(qp_model_opset(m, ""), 15);
    qp_model_free(m);
}

/* ---- Clip ----------------------------------------------------------------------------- */

static void test_clip_attrs_to_inputs(void **state) {
    (void)state;
    struct qp_model *m = model_at(9);
    struct qp_graph *g = m->graph;
    input(g, "x", QP_DTYPE_FLOAT, 4);
    int c = node(g, "clip", "Clip", "x", "y");
    attr_f(g, c, "min", 0);
    attr_f(g, c, "max", 6);
    int c2 = node(g, "clip_max", "Clip", "y", "z");
    attr_f(g, c2, "max", 1.5f);
    int c3 = node(g, "clip_none", "Clip", "z", "w");
    output(g, "w");
    convert_ok(m, 19);
    assert_int_equal(g->nodes[c].n_inputs, 3);
    assert_int_equal(g->nodes[c].n_attrs, 0);
    assert_string_equal(in_name(g, c, 1), "clip_min");
    assert_string_equal(in_name(g, c, 2), "clip_max");
    assert_true(f32_of(init_in(g, c, 1)) == 0.0f);
    assert_true(f32_of(init_in(g, c, 2)) == 6.0f);
    assert_int_equal(g->nodes[c2].n_inputs, 3);
    assert_int_equal(g->nodes[c2].inputs[1], -1);
    /* named after the node: "clip_max" + "_max" */
    assert_string_equal(in_name(g, c2, 2), "clip_max_max");
    assert_true(f32_of(init_in(g, c2, 2)) == 1.5f);
    assert_int_equal(g->nodes[c3].n_inputs, 1);
    assert_int_equal(g->n_inits, 3);
    assert_int_equal(g->n_topo, 3);
    qp_model_free(m);
}

static void test_clip_dtype_followed_back(void **state) {
    (void)state;
    struct qp_model *m = model_at(9);
    struct qp_graph *g = m->graph;
    input(g, "x", QP_DTYPE_FLOAT16, 4);
    node(g, "relu", "Relu", "x", "r"); /* r has no declared type */
    int c = node(g, "clip", "Clip", "r", "y");
    attr_f(g, c, "min", -1);
    convert_ok(m, 13);
    const struct qp_tensor *t = init_in(g, c, 1);
    assert_int_equal(t->dtype, QP_DTYPE_FLOAT16);
    assert_int_equal(t->nbytes, 2);
    assert_int_equal(*(const uint16_t *)t->data, 0xbc00); /* -1.0 in fp16 */
    assert_int_equal(g->nodes[c].n_inputs, 2);
    qp_model_free(m);
}

static void test_clip_unknown_dtype(void **state) {
    (void)state;
    struct qp_model *m = model_at(9);
    struct qp_graph *g = m->graph;
    struct qp_error err;
    input(g, "x", QP_DTYPE_UNDEFINED, -1);
    int c = node(g, "clip", "Clip", "x", "y");
    attr_f(g, c, "min", 0);
    attr_f(g, c, "max", 6);
    /* Before CastLike (15) the type must be known. */
    assert_int_equal(convert(m, 13, &err), QP_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "opset: node 'clip' (Clip, opset 9 -> 13): cannot tell"));
    assert_int_equal(g->nodes[c].n_inputs, 1);
    assert_int_equal(g->nodes[c].n_attrs, 2);
    /* From 15 on: float constants cast like the input. */
    convert_ok(m, 19);
    int cl = g->nodes[c].inputs[1];
    int p = g->values[cl].producer;
    assert_true(p >= 0);
    assert_string_equal(g->nodes[p].op_type, "CastLike");
    assert_string_equal(in_name(g, p, 1), "x");
    assert_true(f32_of(init_in(g, p, 0)) == 0.0f);
    /* CastLike nodes come before the Clip in topological order */
    assert_int_equal(g->n_topo, 3);
    assert_int_equal(g->topo[2], c);
    qp_model_free(m);
}

/* ---- Softmax family ------------------------------------------------------------------- */

static void test_softmax_last_axis(void **state) {
    (void)state;
    struct qp_model *m = model_at(11);
    struct qp_graph *g = m->graph;
    input(g, "x", QP_DTYPE_FLOAT, 2);
    input(g, "u", QP_DTYPE_FLOAT, -1);
    input(g, "v", QP_DTYPE_FLOAT, 3);
    int s1 = node(g, "s1", "Softmax", "x", "y1"); /* default axis 1 == last of rank 2 */
    int s2 = node(g, "s2", "LogSoftmax", "u", "y2");
    attr_i(g, s2, "axis", -1); /* last whatever the rank */
    int s3 = node(g, "s3", "Softmax", "v", "y3");
    attr_i(g, s3, "axis", 2);
    convert_ok(m, 13);
    assert_int_equal(g->n_nodes, 3);
    assert_int_equal(qp_node_attr(&g->nodes[s1], "axis")->i, 1);
    assert_int_equal(qp_node_attr(&g->nodes[s2], "axis")->i, -1);
    assert_int_equal(qp_node_attr(&g->nodes[s3], "axis")->i, 2);
    qp_model_free(m);
}

static void test_softmax_inner_axis_rewrite(void **state) {
    (void)state;
    struct qp_model *m = model_at(9);
    struct qp_graph *g = m->graph;
    input(g, "x", QP_DTYPE_FLOAT, 4);
    int s = node(g, "sm", "Softmax", "x", "y"); /* axis 1 of rank 4: coerced [N, C*H*W] */
    node(g, "after", "Relu", "y", "z");
    output(g, "y");
    output(g, "z");
    convert_ok(m, 19);
    assert_int_equal(live_nodes(g), 5);
    /* the Softmax keeps its name, reads Flatten(x, axis=1) and works along axis 1 */
    assert_string_equal(g->nodes[s].name, "sm");
    assert_string_equal(g->nodes[s].op_type, "Softmax");
    assert_int_equal(qp_node_attr(&g->nodes[s], "axis")->i, 1);
    int f = g->values[g->nodes[s].inputs[0]].producer;
    assert_string_equal(g->nodes[f].op_type, "Flatten");
    assert_string_equal(in_name(g, f, 0), "x");
    assert_int_equal(qp_node_attr(&g->nodes[f], "axis")->i, 1);
    /* "y" is now written by Reshape(softmax_out, Shape(x)), still a graph output */
    int y = qp_graph_find_value(g, "y");
    int r = g->values[y].producer;
    assert_string_equal(g->nodes[r].op_type, "Reshape");
    assert_int_equal(g->values[g->nodes[r].inputs[0]].producer, s);
    int sh = g->values[g->nodes[r].inputs[1]].producer;
    assert_string_equal(g->nodes[sh].op_type, "Shape");
    assert_string_equal(in_name(g, sh, 0), "x");
    assert_int_equal(qp_node_attr(&g->nodes[r], "allowzero")->i, 1);
    assert_true(g->values[y].is_graph_output);
    assert_string_equal(g->values[g->outputs[0]].name, "y");
    assert_int_equal(g->values[y].n_uses, 1);
    /* order: Reshape after Softmax, consumer after Reshape */
    int pos[16] = {0};
    for (size_t k = 0; k < g->n_topo; k++)
        pos[g->topo[k]] = (int)k;
    assert_true(pos[f] < pos[s] && pos[s] < pos[r] && pos[sh] < pos[r]);
    assert_true(pos[r] < pos[g->values[y].uses[0].node]);
    qp_model_free(m);
}

static void test_softmax_unknown_rank_rewrites(void **state) {
    (void)state;
    struct qp_model *m = model_at(11);
    struct qp_graph *g = m->graph;
    input(g, "x", QP_DTYPE_FLOAT, -1);
    int s = node(g, "h", "Hardmax", "x", "y");
    attr_i(g, s, "axis", 2);
    convert_ok(m, 13);
    assert_int_equal(live_nodes(g), 4);
    int r = g->values[qp_graph_find_value(g, "y")].producer;
    assert_string_equal(g->nodes[r].op_type, "Reshape");
    assert_null(qp_node_attr(&g->nodes[r], "allowzero")); /* Reshape-13 has none */
    qp_model_free(m);
}

static void test_softmax_rank_followed_back(void **state) {
    (void)state;
    /* attention: Softmax(MatMul(Transpose(Squeeze(x5)), k) * scale, axis=3), no declared
     * shapes in between: the rank (4) is followed back, so axis 3 is the last, no rewrite */
    struct qp_model *m = model_at(9);
    struct qp_graph *g = m->graph;
    input(g, "x5", QP_DTYPE_FLOAT, 5);
    input(g, "k", QP_DTYPE_FLOAT, 4);
    input(g, "scale", QP_DTYPE_FLOAT, 0);
    static const int64_t ax[1] = {0}, perm[4] = {0, 2, 1, 3};
    int sq = node(g, "sq", "Squeeze", "x5", "q");
    attr_ints(g, sq, "axes", ax, 1);
    int tr = node(g, "tr", "Transpose", "q", "qt");
    attr_ints(g, tr, "perm", perm, 4);
    node(g, "mm", "MatMul", "qt,k", "att");
    node(g, "mul", "Mul", "att,scale", "atts");
    int s = node(g, "sm", "Softmax", "atts", "p");
    attr_i(g, s, "axis", 3);
    int s2 = node(g, "sm2", "Softmax", "atts", "p2");
    attr_i(g, s2, "axis", 2);
    convert_ok(m, 19);
    assert_int_equal(live_nodes(g), 6 + 3);
    assert_string_equal(in_name(g, s, 0), "atts");
    assert_string_equal(g->nodes[g->values[g->nodes[s2].inputs[0]].producer].op_type, "Flatten");
    qp_model_free(m);
}

/* ---- attributes that became inputs --------------------------------------------------- */

static void test_reduce_axes(void **state) {
    (void)state;
    struct qp_model *m = model_at(11);
    struct qp_graph *g = m->graph;
    input(g, "x", QP_DTYPE_FLOAT, 4);
    static const int64_t axes[2] = {2, 3};
    int rm = node(g, "rm", "ReduceMean", "x", "a");
    attr_ints(g, rm, "axes", axes, 2);
    attr_i(g, rm, "keepdims", 1);
    int rs = node(g, "rs", "ReduceSum", "x", "b");
    attr_ints(g, rs, "axes", axes, 1);
    int rall = node(g, "rall", "ReduceMax", "x", "c"); /* no axes: all */
    convert_ok(m, 17);
    /* ReduceSum changed at 13, the others only at 18 */
    assert_int_equal(g->nodes[rm].n_inputs, 1);
    assert_int_equal(g->nodes[rs].n_inputs, 2);
    assert_i64s(init_in(g, rs, 1), axes, 1);
    assert_null(qp_node_attr(&g->nodes[rs], "axes"));
    convert_ok(m, 18);
    assert_int_equal(g->nodes[rm].n_inputs, 2);
    assert_string_equal(in_name(g, rm, 1), "rm_axes");
    assert_i64s(init_in(g, rm, 1), axes, 2);
    assert_null(qp_node_attr(&g->nodes[rm], "axes"));
    assert_int_equal(qp_node_attr(&g->nodes[rm], "keepdims")->i, 1);
    assert_int_equal(g->nodes[rall].n_inputs, 1);
    qp_model_free(m);
}

/* Every Reduce* whose axes became an input at 18 (ReduceSum: 13, above). */
static void test_reduce_axes_18(void **state) {
    (void)state;
    static const char *const ops[] = {"ReduceL1",        "ReduceL2",   "ReduceLogSum",
                                      "ReduceLogSumExp", "ReduceMax",  "ReduceMean",
                                      "ReduceMin",       "ReduceProd", "ReduceSumSquare"};
    enum { N = sizeof ops / sizeof ops[0] };
    static const int64_t axes[2] = {0, -1};
    struct qp_model *m = model_at(17);
    struct qp_graph *g = m->graph;
    input(g, "x", QP_DTYPE_FLOAT, 3);
    int n[N];
    for (int i = 0; i < N; i++) {
        char name[32], out[32];
        snprintf(name, sizeof name, "r%d", i);
        snprintf(out, sizeof out, "y%d", i);
        n[i] = node(g, name, ops[i], "x", out);
        attr_ints(g, n[i], "axes", axes, 1 + (size_t)(i % 2));
        attr_i(g, n[i], "keepdims", i % 2);
    }
    int all = node(g, "all", "ReduceL2", "x", "z"); /* no axes: all, before and after */
    convert_ok(m, 21);
    for (int i = 0; i < N; i++) {
        assert_int_equal(g->nodes[n[i]].n_inputs, 2);
        assert_i64s(init_in(g, n[i], 1), axes, 1 + (size_t)(i % 2));
        assert_null(qp_node_attr(&g->nodes[n[i]], "axes"));
        assert_int_equal(qp_node_attr(&g->nodes[n[i]], "keepdims")->i, i % 2);
        assert_null(qp_node_attr(&g->nodes[n[i]], "noop_with_empty_axes"));
    }
    assert_int_equal(g->nodes[all].n_inputs, 1);
    assert_int_equal(g->n_inits, N);
    qp_model_free(m);
}

static void test_squeeze_unsqueeze(void **state) {
    (void)state;
    struct qp_model *m = model_at(11);
    struct qp_graph *g = m->graph;
    struct qp_error err;
    input(g, "x", QP_DTYPE_FLOAT, 3);
    static const int64_t ax[1] = {0};
    int u = node(g, "u", "Unsqueeze", "x", "a");
    attr_ints(g, u, "axes", ax, 1);
    int s = node(g, "s", "Squeeze", "a", "b");
    attr_ints(g, s, "axes", ax, 1);
    int s2 = node(g, "s2", "Squeeze", "b", "c");
    int u2 = node(g, "u2", "Unsqueeze", "c", "d"); /* malformed: axes required */
    assert_int_equal(convert(m, 13, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "'u2' (Unsqueeze, opset 11 -> 13): required attribute"));
    attr_ints(g, u2, "axes", ax, 1);
    convert_ok(m, 13);
    assert_i64s(init_in(g, u, 1), ax, 1);
    assert_i64s(init_in(g, s, 1), ax, 1);
    assert_int_equal(g->nodes[s2].n_inputs, 1);
    qp_model_free(m);
}

static void test_split(void **state) {
    (void)state;
    struct qp_model *m = model_at(11);
    struct qp_graph *g = m->graph;
    input(g, "x", QP_DTYPE_FLOAT, 2);
    static const int64_t sizes[2] = {1, 3};
    int a = node(g, "a", "Split", "x", "a0,a1");
    attr_ints(g, a, "split", sizes, 2);
    attr_i(g, a, "axis", 1);
    int b = node(g, "b", "Split", "x", "b0,b1");
    convert_ok(m, 13);
    assert_i64s(init_in(g, a, 1), sizes, 2);
    assert_int_equal(g->nodes[b].n_inputs, 1);
    assert_null(qp_node_attr(&g->nodes[b], "num_outputs"));
    convert_ok(m, 18);
    assert_null(qp_node_attr(&g->nodes[a], "num_outputs"));
    assert_int_equal(qp_node_attr(&g->nodes[b], "num_outputs")->i, 2);
    assert_int_equal(g->nodes[a].n_outputs, 2);
    qp_model_free(m);
}

static void test_slice_topk(void **state) {
    (void)state;
    struct qp_model *m = model_at(9);
    struct qp_graph *g = m->graph;
    input(g, "x", QP_DTYPE_FLOAT, 3);
    static const int64_t starts[2] = {0, 1}, ends[2] = {INT64_MAX, -1}, axes[2] = {0, 2};
    int s = node(g, "s", "Slice", "x", "y");
    attr_ints(g, s, "starts", starts, 2);
    attr_ints(g, s, "ends", ends, 2);
    int s2 = node(g, "s2", "Slice", "x", "y2");
    attr_ints(g, s2, "starts", starts, 2);
    attr_ints(g, s2, "ends", ends, 2);
    attr_ints(g, s2, "axes", axes, 2);
    int t = node(g, "t", "TopK", "y", "vals,idx");
    attr_i(g, t, "k", 3);
    attr_i(g, t, "axis", 1);
    convert_ok(m, 10);
    assert_int_equal(g->nodes[s].n_inputs, 3);
    assert_i64s(init_in(g, s, 1), starts, 2);
    assert_i64s(init_in(g, s, 2), ends, 2);
    assert_int_equal(g->nodes[s].n_attrs, 0);
    assert_int_equal(g->nodes[s2].n_inputs, 4);
    assert_i64s(init_in(g, s2, 3), axes, 2);
    static const int64_t k[1] = {3};
    assert_int_equal(g->nodes[t].n_inputs, 2);
    assert_i64s(init_in(g, t, 1), k, 1);
    assert_int_equal(init_in(g, t, 1)->rank, 1);
    assert_int_equal(g->nodes[t].n_attrs, 1);
    assert_int_equal(g->nodes[t].n_outputs, 2);
    qp_model_free(m);
}

static void test_pad(void **state) {
    (void)state;
    struct qp_model *m = model_at(9);
    struct qp_graph *g = m->graph;
    input(g, "x", QP_DTYPE_DOUBLE, 2);
    static const int64_t pads[4] = {0, 1, 0, 2};
    int p = node(g, "p", "Pad", "x", "y");
    attr_ints(g, p, "pads", pads, 4);
    attr_f(g, p, "value", 1.5f);
    int q = node(g, "q", "Pad", "y", "z");
    attr_ints(g, q, "pads", pads, 4);
    attr_s(g, q, "mode", "reflect");
    convert_ok(m, 11);
    assert_int_equal(g->nodes[p].n_inputs, 3);
    assert_i64s(init_in(g, p, 1), pads, 4);
    const struct qp_tensor *cv = init_in(g, p, 2);
    assert_int_equal(cv->dtype, QP_DTYPE_DOUBLE);
    assert_true(*(const double *)cv->data == 1.5);
    assert_int_equal(g->nodes[p].n_attrs, 0);
    assert_int_equal(g->nodes[q].n_inputs, 2);
    assert_string_equal(str_attr(&g->nodes[q], "mode"), "reflect");
    qp_model_free(m);
}

/* ---- BatchNormalization, Dropout ------------------------------------------------------ */

static void test_batchnorm(void **state) {
    (void)state;
    struct qp_model *m = model_at(7);
    struct qp_graph *g = m->graph;
    struct qp_error err;
    input(g, "x", QP_DTYPE_FLOAT, 4);
    int bn = node(g, "bn", "BatchNormalization", "x,s,b,mean,var", "y,rm,rv");
    attr_i(g, bn, "spatial", 0);
    attr_f(g, bn, "momentum", 0.9f);
    for (int i = 0; i < 4; i++)
        input(g, (const char *[]){"s", "b", "mean", "var"}[i], QP_DTYPE_FLOAT, 1);
    assert_int_equal(convert(m, 19, &err), QP_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "'bn' (BatchNormalization, opset 7 -> 19): spatial=0"));
    g->nodes[bn].attrs[0].i = 1;
    node(g, "use", "Relu", "rm", "z");
    assert_int_equal(convert(m, 19, &err), QP_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "output 1 ('rm'"));
    /* up to 13 the statistics outputs keep their meaning */
    convert_ok(m, 13);
    assert_null(qp_node_attr(&g->nodes[bn], "spatial"));
    assert_int_equal(g->nodes[bn].n_outputs, 3);
    qp_model_free(m);

    m = model_at(9);
    g = m->graph;
    input(g, "x", QP_DTYPE_FLOAT, 4);
    bn = node(g, "bn", "BatchNormalization", "x,s,b,mean,var", "y,rm,rv");
    attr_f(g, bn, "momentum", 0.9f);
    for (int i = 0; i < 4; i++)
        input(g, (const char *[]){"s", "b", "mean", "var"}[i], QP_DTYPE_FLOAT, 1);
    output(g, "y");
    convert_ok(m, 19);
    assert_int_equal(g->nodes[bn].n_outputs, 1);
    assert_int_equal(g->values[qp_graph_find_value(g, "rm")].producer, -1);
    assert_non_null(qp_node_attr(&g->nodes[bn], "momentum"));
    qp_model_free(m);
}

static void test_dropout(void **state) {
    (void)state;
    struct qp_model *m = model_at(9);
    struct qp_graph *g = m->graph;
    struct qp_error err;
    input(g, "x", QP_DTYPE_FLOAT, 2);
    int d = node(g, "d", "Dropout", "x", "y,mask");
    attr_f(g, d, "ratio", 0.25f);
    output(g, "mask");
    assert_int_equal(convert(m, 19, &err), QP_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "mask output is read"));
    g->n_outputs = 0;
    g->values[qp_graph_find_value(g, "mask")].is_graph_output = 0;
    output(g, "y");
    convert_ok(m, 19);
    assert_int_equal(g->nodes[d].n_outputs, 1);
    assert_int_equal(g->nodes[d].n_inputs, 2);
    assert_true(f32_of(init_in(g, d, 1)) == 0.25f);
    assert_int_equal(g->nodes[d].n_attrs, 0);
    qp_model_free(m);
}

/* ---- Resize, Upsample --------------------------------------------------------------- */

static void test_resize_10(void **state) {
    (void)state;
    for (int to = 11; to <= 13; to += 2) {
        struct qp_model *m = model_at(10);
        struct qp_graph *g = m->graph;
        input(g, "x", QP_DTYPE_FLOAT, 4);
        input(g, "scales", QP_DTYPE_FLOAT, 1);
        int r = node(g, "r", "Resize", "x,scales", "y");
        int l = node(g, "l", "Resize", "x,scales", "z");
        attr_s(g, l, "mode", "linear");
        convert_ok(m, to);
        assert_int_equal(g->nodes[r].n_inputs, 3);
        assert_string_equal(in_name(g, r, 2), "scales");
        if (to == 11) {
            const struct qp_tensor *roi = init_in(g, r, 1);
            assert_int_equal(roi->dtype, QP_DTYPE_FLOAT);
            assert_int_equal(roi->rank, 1);
            assert_int_equal(roi->numel, 0);
            assert_non_null(roi->data);
        } else {
            assert_int_equal(g->nodes[r].inputs[1], -1);
        }
        assert_string_equal(str_attr(&g->nodes[r], "coordinate_transformation_mode"), "asymmetric");
        assert_string_equal(str_attr(&g->nodes[r], "nearest_mode"), "floor");
        assert_string_equal(str_attr(&g->nodes[l], "coordinate_transformation_mode"), "asymmetric");
        assert_null(qp_node_attr(&g->nodes[l], "nearest_mode"));
        qp_model_free(m);
    }
}

static void test_resize_tf_half_pixel(void **state) {
    (void)state;
    struct qp_model *m = model_at(11);
    struct qp_graph *g = m->graph;
    struct qp_error err;
    input(g, "x", QP_DTYPE_FLOAT, 4);
    input(g, "roi", QP_DTYPE_FLOAT, 1);
    input(g, "scales", QP_DTYPE_FLOAT, 1);
    int r = node(g, "r", "Resize", "x,roi,scales", "y");
    attr_s(g, r, "coordinate_transformation_mode", "tf_half_pixel_for_nn");
    convert_ok(m, 12); /* still there at 12 */
    assert_int_equal(convert(m, 13, &err), QP_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "tf_half_pixel_for_nn"));
    attr_s(g, r, "nearest_mode", "floor");
    convert_ok(m, 13);
    assert_string_equal(str_attr(&g->nodes[r], "coordinate_transformation_mode"), "half_pixel");
    assert_string_equal(str_attr(&g->nodes[r], "nearest_mode"), "round_prefer_ceil");
    qp_model_free(m);
}

static void test_upsample(void **state) {
    (void)state;
    static const float scales[4] = {1, 1, 2, 3};
    /* opset 7: scales attribute; to 9 it stays an Upsample with a scales input */
    struct qp_model *m = model_at(7);
    struct qp_graph *g = m->graph;
    input(g, "x", QP_DTYPE_FLOAT, 4);
    int u = node(g, "up", "Upsample", "x", "y");
    attr_floats(g, u, "scales", scales, 4);
    convert_ok(m, 9);
    assert_string_equal(g->nodes[u].op_type, "Upsample");
    const struct qp_tensor *t = init_in(g, u, 1);
    assert_int_equal(t->dtype, QP_DTYPE_FLOAT);
    assert_int_equal(t->numel, 4);
    assert_memory_equal(t->data, scales, sizeof scales);
    assert_null(qp_node_attr(&g->nodes[u], "scales"));
    /* then 9 -> 11: a Resize with an empty roi */
    convert_ok(m, 11);
    assert_string_equal(g->nodes[u].op_type, "Resize");
    assert_int_equal(g->nodes[u].n_inputs, 3);
    assert_int_equal(init_in(g, u, 1)->numel, 0);
    assert_memory_equal(init_in(g, u, 2)->data, scales, sizeof scales);
    assert_string_equal(str_attr(&g->nodes[u], "mode"), "nearest");
    assert_string_equal(str_attr(&g->nodes[u], "nearest_mode"), "floor");
    qp_model_free(m);

    /* opset 7 straight to 19, linear */
    m = model_at(7);
    g = m->graph;
    input(g, "x", QP_DTYPE_FLOAT, 4);
    u = node(g, "up", "Upsample", "x", "y");
    attr_floats(g, u, "scales", scales, 4);
    attr_s(g, u, "mode", "bilinear");
    convert_ok(m, 19);
    assert_string_equal(g->nodes[u].op_type, "Resize");
    assert_int_equal(g->nodes[u].inputs[1], -1);
    assert_memory_equal(init_in(g, u, 2)->data, scales, sizeof scales);
    assert_string_equal(str_attr(&g->nodes[u], "mode"), "linear");
    assert_string_equal(str_attr(&g->nodes[u], "coordinate_transformation_mode"), "asymmetric");
    assert_null(qp_node_attr(&g->nodes[u], "nearest_mode"));
    qp_model_free(m);

    /* opset 9, scales input, to 10: Resize-10 (X, scales) */
    m = model_at(9);
    g = m->graph;
    input(g, "x", QP_DTYPE_FLOAT, 4);
    input(g, "sc", QP_DTYPE_FLOAT, 1);
    u = node(g, "up", "Upsample", "x,sc", "y");
    convert_ok(m, 10);
    assert_string_equal(g->nodes[u].op_type, "Resize");
    assert_int_equal(g->nodes[u].n_inputs, 2);
    assert_null(qp_node_attr(&g->nodes[u], "coordinate_transformation_mode"));
    qp_model_free(m);
}

static void test_scatter_renamed(void **state) {
    (void)state;
    struct qp_model *m = model_at(9);
    struct qp_graph *g = m->graph;
    input(g, "x", QP_DTYPE_FLOAT, 2);
    input(g, "i", QP_DTYPE_INT64, 2);
    int s = node(g, "sc", "Scatter", "x,i,x", "y");
    convert_ok(m, 19);
    assert_string_equal(g->nodes[s].op_type, "ScatterElements");
    qp_model_free(m);
}

/* ---- subgraphs -------------------------------------------------------------------------- */

static void test_subgraph(void **state) {
    (void)state;
    struct qp_model *m = model_at(9);
    struct qp_graph *g = m->graph;
    struct qp_error err = {0};
    input(g, "x", QP_DTYPE_FLOAT, 2);
    input(g, "cond", QP_DTYPE_BOOL, 0);
    int iff = node(g, "if", "If", "cond", "out");
    struct qp_graph *then_g = qp_graph_create(m, g), *else_g = qp_graph_create(m, g);
    assert_non_null(then_g);
    assert_non_null(else_g);
    static const int64_t ax[1] = {0};
    int xv = qp_graph_value(then_g, "x");
    then_g->values[xv].is_outer = 1;
    int u = node(then_g, "then_unsq", "Unsqueeze", "x", "t");
    attr_ints(then_g, u, "axes", ax, 1);
    output(then_g, "t");
    xv = qp_graph_value(else_g, "x");
    else_g->values[xv].is_outer = 1;
    int c = node(else_g, "else_clip", "Clip", "x", "e0");
    attr_f(else_g, c, "max", 2);
    int u2 = node(else_g, "else_unsq", "Unsqueeze", "e0", "e");
    attr_ints(else_g, u2, "axes", ax, 1);
    output(else_g, "e");
    struct qp_attr *a = qp_node_add_attr(g, iff, "then_branch", QP_ATTR_GRAPH);
    a->g = then_g;
    a = qp_node_add_attr(g, iff, "else_branch", QP_ATTR_GRAPH);
    a->g = else_g;
    assert_int_equal(qp_graph_toposort(g, &err), QP_OK);
    convert_ok(m, 19);
    assert_int_equal(then_g->nodes[u].n_inputs, 2);
    assert_string_equal(in_name(then_g, u, 1), "then_unsq_axes");
    assert_int_equal(then_g->n_inits, 1);
    /* the outer tensor's type is followed into the enclosing graph */
    assert_int_equal(init_in(else_g, c, 2)->dtype, QP_DTYPE_FLOAT);
    assert_int_equal(else_g->n_inits, 2);
    assert_int_equal(g->n_inits, 0);
    assert_int_equal(else_g->n_topo, 2);
    qp_model_free(m);
}

/* ---- opset 20 and 21 changes ------------------------------------------------------------ */

/* A constant float initializer `name` of shape [n] (data borrowed: static in the tests). */
static void init_f32(struct qp_graph *g, const char *name, const float *v, int64_t n) {
    struct qp_error err = {0};
    int64_t *d = qp_arena_calloc(g->model->arena, 1, sizeof *d);
    assert_non_null(d);
    d[0] = n;
    struct qp_tensor t = {0};
    t.name = name;
    t.dtype = QP_DTYPE_FLOAT;
    t.rank = 1;
    t.dims = d;
    t.numel = (uint64_t)n;
    t.data = v;
    t.nbytes = (size_t)n * 4;
    int out;
    assert_int_equal(qp_graph_add_initializer(g, &t, &out, &err), QP_OK);
}

static void assert_f32s(const struct qp_tensor *t, const float *want, size_t n) {
    assert_int_equal(t->dtype, QP_DTYPE_FLOAT);
    assert_int_equal(t->rank, 1);
    assert_int_equal(t->dims[0], (int64_t)n);
    assert_int_equal(t->numel, n);
    assert_int_equal(t->nbytes, n * 4);
    assert_null(t->origin);
    assert_memory_equal(t->data, want, n * 4);
}

static void test_dft_axis_to_input(void **state) {
    (void)state;
    struct qp_model *m = model_at(17);
    struct qp_graph *g = m->graph;
    struct qp_error err;
    input(g, "x", QP_DTYPE_FLOAT, 3);
    input(g, "len", QP_DTYPE_INT64, 0);
    int d1 = node(g, "d1", "DFT", "x", "y1"); /* axis defaulted to 1 */
    int d2 = node(g, "d2", "DFT", "x,len", "y2");
    attr_i(g, d2, "axis", -3);
    attr_i(g, d2, "inverse", 1);
    output(g, "y1");
    output(g, "y2");
    convert_ok(m, 19); /* 17 -> 19 crosses nothing DFT cares about */
    assert_int_equal(g->nodes[d2].n_inputs, 2);
    assert_int_equal(qp_node_attr(&g->nodes[d2], "axis")->i, -3);
    assert_int_equal(g->n_inits, 0);
    convert_ok(m, 20);
    /* input 2 = the axis as an int64 scalar; the new default (-2) must not apply */
    assert_int_equal(g->nodes[d1].n_inputs, 3);
    assert_string_equal(in_name(g, d1, 1), "");
    assert_string_equal(in_name(g, d1, 2), "d1_axis");
    const struct qp_tensor *t = init_in(g, d1, 2);
    assert_int_equal(t->dtype, QP_DTYPE_INT64);
    assert_int_equal(t->rank, 0);
    assert_int_equal(t->numel, 1);
    assert_int_equal(*(const int64_t *)t->data, 1);
    assert_null(qp_node_attr(&g->nodes[d1], "axis"));
    assert_int_equal(g->nodes[d2].n_inputs, 3);
    assert_string_equal(in_name(g, d2, 1), "len");
    assert_int_equal(*(const int64_t *)init_in(g, d2, 2)->data, -3);
    assert_null(qp_node_attr(&g->nodes[d2], "axis"));
    assert_int_equal(qp_node_attr(&g->nodes[d2], "inverse")->i, 1);
    qp_model_free(m);

    m = model_at(17);
    input(m->graph, "x", QP_DTYPE_FLOAT, 3);
    attr_f(m->graph, node(m->graph, "d", "DFT", "x", "y"), "axis", 1);
    assert_int_equal(convert(m, 20, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "'d' (DFT, opset 17 -> 20): attribute 'axis' has type"));
    qp_model_free(m);
}

static void test_gridsample_modes(void **state) {
    (void)state;
    struct qp_model *m = model_at(16);
    struct qp_graph *g = m->graph;
    struct qp_error err;
    input(g, "x", QP_DTYPE_FLOAT, 4);
    input(g, "grid", QP_DTYPE_FLOAT, 4);
    int bl = node(g, "bl", "GridSample", "x,grid", "a");
    attr_s(g, bl, "mode", "bilinear");
    attr_i(g, bl, "align_corners", 1);
    int bc = node(g, "bc", "GridSample", "x,grid", "b");
    attr_s(g, bc, "mode", "bicubic");
    int nn = node(g, "nn", "GridSample", "x,grid", "c");
    attr_s(g, nn, "mode", "nearest");
    int df = node(g, "df", "GridSample", "x,grid", "d"); /* default: bilinear, then linear */
    int bad = node(g, "bad", "GridSample", "x,grid", "e");
    attr_s(g, bad, "mode", "trilinear");
    convert_ok(m, 19); /* not crossing 20: even a bad mode is not looked at */
    assert_string_equal(str_attr(&g->nodes[bl], "mode"), "bilinear");
    assert_int_equal(convert(m, 21, &err), QP_ERR_BAD_INPUT);
    assert_string_equal(err.msg, "opset: node 'bad' (GridSample, opset 19 -> 21): mode "
                                 "'trilinear' is not bilinear, nearest or bicubic");
    assert_string_equal(str_attr(&g->nodes[bl], "mode"), "bilinear"); /* all or nothing */
    assert_int_equal(qp_model_opset(m, ""), 19);
    g->nodes[bad].dead = 1;
    convert_ok(m, 21);
    assert_string_equal(str_attr(&g->nodes[bl], "mode"), "linear");
    assert_int_equal(qp_node_attr(&g->nodes[bl], "align_corners")->i, 1);
    assert_string_equal(str_attr(&g->nodes[bc], "mode"), "cubic");
    assert_string_equal(str_attr(&g->nodes[nn], "mode"), "nearest");
    assert_null(qp_node_attr(&g->nodes[df], "mode"));
    for (int n = bl; n <= df; n++)
        assert_int_equal(g->nodes[n].n_attrs, n == bl ? 2 : n == df ? 0 : 1);
    qp_model_free(m);
}

static void test_groupnorm_per_channel(void **state) {
    (void)state;
    struct qp_model *m = model_at(18);
    struct qp_graph *g = m->graph;
    int x = input(g, "x", QP_DTYPE_FLOAT, 4);
    g->values[x].dims[1].value = 6;
    static const float scale[3] = {1, 2, 3}, bias[3] = {-1, 0, 0.5f};
    init_f32(g, "s", scale, 3);
    /* the bias comes from a Constant node */
    int cn = node(g, "bias_const", "Constant", "", "b");
    struct qp_attr *a = qp_node_add_attr(g, cn, "value", QP_ATTR_TENSOR);
    a->t = qp_arena_calloc(m->arena, 1, sizeof *a->t);
    static const int64_t three[1] = {3};
    *a->t = (struct qp_tensor){.dtype = QP_DTYPE_FLOAT,
                               .rank = 1,
                               .dims = three,
                               .numel = 3,
                               .data = bias,
                               .nbytes = sizeof bias};
    int gn = node(g, "gn", "GroupNormalization", "x,s,b", "y");
    attr_i(g, gn, "num_groups", 3);
    attr_f(g, gn, "epsilon", 1e-3f);
    /* a second one whose channel count comes from the Conv (weights [4, 6, 1, 1]) through Relu */
    static const float w[24] = {0};
    static const int64_t wd[4] = {4, 6, 1, 1};
    struct qp_tensor wt = {.name = "w",
                           .dtype = QP_DTYPE_FLOAT,
                           .rank = 4,
                           .dims = wd,
                           .numel = 24,
                           .data = w,
                           .nbytes = sizeof w};
    struct qp_error err = {0};
    int wv;
    assert_int_equal(qp_graph_add_initializer(g, &wt, &wv, &err), QP_OK);
    node(g, "conv", "Conv", "y,w", "c");
    node(g, "relu", "Relu", "c", "r");
    static const float s2[2] = {0.5f, 4}, b2[2] = {1, 2};
    init_f32(g, "s2", s2, 2);
    init_f32(g, "b2", b2, 2);
    int gn2 = node(g, "gn2", "GroupNormalization", "r,s2,b2", "z");
    attr_i(g, gn2, "num_groups", 2);
    output(g, "z");
    convert_ok(m, 20); /* 18 -> 20: unchanged */
    assert_string_equal(in_name(g, gn, 1), "s");
    convert_ok(m, 21);
    static const float want_s[6] = {1, 1, 2, 2, 3, 3}, want_b[6] = {-1, -1, 0, 0, 0.5f, 0.5f};
    assert_string_equal(in_name(g, gn, 1), "gn_scale");
    assert_string_equal(in_name(g, gn, 2), "gn_bias");
    assert_f32s(init_in(g, gn, 1), want_s, 6);
    assert_f32s(init_in(g, gn, 2), want_b, 6);
    static const float want_s2[4] = {0.5f, 0.5f, 4, 4}, want_b2[4] = {1, 1, 2, 2};
    assert_f32s(init_in(g, gn2, 1), want_s2, 4);
    assert_f32s(init_in(g, gn2, 2), want_b2, 4);
    assert_int_equal(qp_node_attr(&g->nodes[gn], "num_groups")->i, 3);
    assert_true(qp_node_attr(&g->nodes[gn], "epsilon")->f == 1e-3f);
    assert_int_equal(m->ir_version, 10);
    qp_model_free(m);
}

/* The producer of input `i` of node `n`, checked to be operator `op`. */
static int producer(const struct qp_graph *g, int n, int i, const char *op) {
    int v = g->nodes[n].inputs[i];
    assert_true(v >= 0);
    int p = g->values[v].producer;
    assert_true(p >= 0);
    assert_string_equal(g->nodes[p].op_type, op);
    return p;
}

static void test_groupnorm_in_graph(void **state) {
    (void)state;
    struct qp_error err;
    static const float s[2] = {1, 2};
    /* channel count unknown: the per-channel values are computed by nodes */
    struct qp_model *m = model_at(18);
    struct qp_graph *g = m->graph;
    input(g, "x", QP_DTYPE_FLOAT, 4);
    init_f32(g, "s", s, 2);
    int gn = node(g, "gn", "GroupNormalization", "x,s,s", "y");
    attr_i(g, gn, "num_groups", 2);
    output(g, "y");
    convert_ok(m, 21);
    static const int64_t two[1] = {2}, one[1] = {1}, minus_one[1] = {-1};
    for (int k = 1; k <= 2; k++) {
        int r = producer(g, gn, k, "Reshape");
        assert_string_equal(g->nodes[r].name,
                            k == 1 ? "gn_scale_per_channel" : "gn_bias_per_channel");
        assert_i64s(init_in(g, r, 1), minus_one, 1);
        int e = producer(g, r, 0, "Expand");
        int u = producer(g, e, 0, "Unsqueeze");
        assert_string_equal(in_name(g, u, 0), "s");
        assert_i64s(init_in(g, u, 1), one, 1);
        int cat = producer(g, e, 1, "Concat");
        assert_int_equal(qp_node_attr(&g->nodes[cat], "axis")->i, 0);
        assert_i64s(init_in(g, cat, 0), two, 1);
        int div = producer(g, cat, 1, "Div");
        assert_string_equal(in_name(g, div, 1), "gn_groups");
        int sh = producer(g, div, 0, "Shape");
        assert_string_equal(in_name(g, sh, 0), "x");
        assert_int_equal(qp_node_attr(&g->nodes[sh], "start")->i, 1);
        assert_int_equal(qp_node_attr(&g->nodes[sh], "end")->i, 2);
    }
    assert_int_equal(live_nodes(g), 10);
    assert_int_equal(g->n_topo, 10);
    assert_int_equal(g->n_inits, 4);
    qp_model_free(m);

    /* scale not a constant (a graph input): nodes too, the GridSample converted as well */
    m = model_at(18);
    g = m->graph;
    int x = input(g, "x", QP_DTYPE_FLOAT, 4);
    g->values[x].dims[1].value = 4;
    input(g, "grid", QP_DTYPE_FLOAT, 4);
    input(g, "sc", QP_DTYPE_FLOAT, 1);
    int gs = node(g, "gs", "GridSample", "x,grid", "t");
    attr_s(g, gs, "mode", "bicubic");
    init_f32(g, "b", s, 2);
    gn = node(g, "gn", "GroupNormalization", "x,sc,b", "y");
    attr_i(g, gn, "num_groups", 2);
    convert_ok(m, 21);
    assert_string_equal(str_attr(&g->nodes[gs], "mode"), "cubic");
    assert_string_equal(in_name(g,
                                producer(g, producer(g, producer(g, gn, 1, "Reshape"), 0, "Expand"),
                                         0, "Unsqueeze"),
                                0),
                        "sc");
    producer(g, gn, 2, "Reshape");
    qp_model_free(m);

    /* malformed: a per-group constant of the wrong length, channels not divisible */
    m = model_at(18);
    g = m->graph;
    x = input(g, "x", QP_DTYPE_FLOAT, 4);
    init_f32(g, "s", s, 2);
    gn = node(g, "gn", "GroupNormalization", "x,s,s", "y");
    attr_i(g, gn, "num_groups", 4);
    assert_int_equal(convert(m, 21, &err), QP_ERR_BAD_INPUT);
    assert_string_equal(err.msg, "opset: node 'gn' (GroupNormalization, opset 18 -> 21): input 1 "
                                 "('s') is not a loaded float tensor of num_groups = 4 elements");
    g->values[x].dims[1].value = 4;
    g->nodes[gn].attrs[0].i = 3;
    assert_int_equal(convert(m, 21, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "4 channels cannot be split into num_groups 3"));
    assert_int_equal(g->n_nodes, 1);
    assert_int_equal(g->n_inits, 1);
    assert_int_equal(qp_model_opset(m, ""), 18);
    qp_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pass_through),
        cmocka_unit_test(test_bad_targets),
        cmocka_unit_test(test_unknown_and_undefined_ops),
        cmocka_unit_test(test_unhandled_change_is_unsupported),
        cmocka_unit_test(test_clip_attrs_to_inputs),
        cmocka_unit_test(test_clip_dtype_followed_back),
        cmocka_unit_test(test_clip_unknown_dtype),
        cmocka_unit_test(test_softmax_last_axis),
        cmocka_unit_test(test_softmax_inner_axis_rewrite),
        cmocka_unit_test(test_softmax_unknown_rank_rewrites),
        cmocka_unit_test(test_softmax_rank_followed_back),
        cmocka_unit_test(test_reduce_axes),
        cmocka_unit_test(test_reduce_axes_18),
        cmocka_unit_test(test_squeeze_unsqueeze),
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_slice_topk),
        cmocka_unit_test(test_pad),
        cmocka_unit_test(test_batchnorm),
        cmocka_unit_test(test_dropout),
        cmocka_unit_test(test_resize_10),
        cmocka_unit_test(test_resize_tf_half_pixel),
        cmocka_unit_test(test_upsample),
        cmocka_unit_test(test_scatter_renamed),
        cmocka_unit_test(test_subgraph),
        cmocka_unit_test(test_dft_axis_to_input),
        cmocka_unit_test(test_gridsample_modes),
        cmocka_unit_test(test_groupnorm_per_channel),
        cmocka_unit_test(test_groupnorm_in_graph),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
