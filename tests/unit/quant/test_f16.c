/*
 * The fp16 conversion (quant/f16.h) and `--high_precision_dtype fp16`:
 *   - a Conv -> Relu -> Resize graph written with fp16 high precision: the dtype of every tensor,
 *     the graph input and output kept float32 (Casts), the input's Q kept fp32 with an fp16 scale
 *     copy for its DQ, Resize's scales kept fp32, the engine's result close to the fp32 model's,
 *     and `diff` against the placement only SAME;
 *   - an fp32-kept op (Celu, a custom-domain op) between fp16 ops: Casts on both sides, shared
 *     initializers duplicated, Constant nodes and Casts to float retargeted, int tensors untouched;
 *   - values beyond fp16 clamped and counted, scales that would round to zero raised;
 *   - a float slot of unknown dtype refused naming the tensor;
 *   - the CLI: fp16 is the default, fp32 on request, a bad value is a usage error; the written
 *     models diff SAME against their placement;
 *   - ONNX Runtime (tests/integration/quantize_f16_ort.js): the fp16 PaddleOCR cls and rec models
 *     load and run, close to the fp32 quantized models and to the engine on the same file.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "qgraph.h"

#include "core/arena.h"
#include "ir/ir.h"
#include "qplace/model.h"
#include "qplace/session.h"
#include "placement/diff.h"
#include "quant/f16.h"
#include "placement/placement.h"
#include "quant/writer.h"

#define SRC_ROOT   QP_TEST_DATA_DIR "/../.."
#define QPLACE_BIN QP_TEST_BINARY_DIR "/../qplace"

static int require_real(void) {
    const char *e = getenv("QP_REQUIRE_REAL_MODELS");
    return e && strcmp(e, "1") == 0;
}

static int file_exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

static int add_f32(struct qp_model *m, const char *name, int rank, const int64_t *d,
                   const float *data) {
    return qg_init_typed(m, name, rank, d, QP_DTYPE_FLOAT, data, 4);
}

static enum qp_dtype vdt(const struct qp_model *m, const char *name) {
    int v = qp_graph_find_value(m->graph, name);
    if (v < 0) fail_msg("no tensor '%s'", name);
    const struct qp_value *val = &m->graph->values[v];
    if (val->initializer >= 0)
        assert_int_equal(m->graph->inits[val->initializer].dtype, val->dtype);
    return val->dtype;
}

/* The live node reading `tensor` at input `input` with op `op`, or -1. */
static int reader(const struct qp_model *m, const char *tensor, const char *op) {
    const struct qp_graph *g = m->graph;
    int v = qp_graph_find_value(g, tensor);
    if (v < 0) return -1;
    for (size_t u = 0; u < g->values[v].n_uses; u++) {
        int n = g->values[v].uses[u].node;
        if (!g->nodes[n].dead && strcmp(g->nodes[n].op_type, op) == 0) return n;
    }
    return -1;
}

static const char *in_name(const struct qp_model *m, int node, int i) {
    const struct qp_node *n = &m->graph->nodes[node];
    assert_true(i < n->n_inputs && n->inputs[i] >= 0);
    return m->graph->values[n->inputs[i]].name;
}
static const char *out_name(const struct qp_model *m, int node) {
    return m->graph->values[m->graph->nodes[node].outputs[0]].name;
}
static enum qp_dtype in_dt(const struct qp_model *m, int node, int i) {
    return m->graph->values[m->graph->nodes[node].inputs[i]].dtype;
}

static size_t count_live(const struct qp_model *m, const char *op) {
    size_t n = 0;
    for (size_t i = 0; i < m->graph->n_nodes; i++)
        if (!m->graph->nodes[i].dead && strcmp(m->graph->nodes[i].op_type, op) == 0) n++;
    return n;
}

static int64_t cast_to(const struct qp_model *m, int node) {
    const struct qp_attr *a = qp_node_attr(&m->graph->nodes[node], "to");
    assert_non_null(a);
    return a->i;
}

/* Every tensor a node reads or writes has a known float dtype consistent with the op: the inputs
 * of a non-Cast, non-Q/DQ node that are float are all fp16 or all fp32. */
static void check_consistent(const struct qp_model *m) {
    const struct qp_graph *g = m->graph;
    for (size_t i = 0; i < g->n_nodes; i++) {
        const struct qp_node *n = &g->nodes[i];
        if (n->dead || !strcmp(n->op_type, "Cast") || !strcmp(n->op_type, "DequantizeLinear") ||
            !strcmp(n->op_type, "Resize") || strcmp(n->domain ? n->domain : "", ""))
            continue;
        int n16 = 0, n32 = 0;
        for (int k = 0; k < n->n_inputs; k++) {
            if (n->inputs[k] < 0) continue;
            enum qp_dtype dt = g->values[n->inputs[k]].dtype;
            n16 += dt == QP_DTYPE_FLOAT16;
            n32 += dt == QP_DTYPE_FLOAT;
        }
        if (n16 && n32) fail_msg("node '%s' (%s) mixes fp16 and fp32 inputs", n->name, n->op_type);
    }
}

static const float W[3 * 2] = {0.5f, -1.0f, 0.25f, 0.125f, -2.0f, 1.5f}; /* [3,2,1,1] */
static const float B[3] = {0.1f, -0.2f, 0.3f};
static const float SC[4] = {1, 1, 2, 2};

/* x[1,2,2,2] -> Conv(W, B) -> c -> Relu -> r -> Resize(scales SC) -> y (nearest, 4x4). */
static struct qp_model *conv_resize(void) {
    struct qp_model *m = qp_model_create();
    assert_non_null(m);
    qg_set_opset(m, 19);
    qg_shape(m, "x", QP_DTYPE_FLOAT, 4, QG_DIMS(1, 2, 2, 2));
    qg_input(m, "x");
    add_f32(m, "W", 4, QG_DIMS(3, 2, 1, 1), W);
    add_f32(m, "B", 1, QG_DIMS(3), B);
    add_f32(m, "sc", 1, QG_DIMS(4), SC);
    qg_node(m, "conv", "Conv", "x,W,B", "c");
    qg_node(m, "relu", "Relu", "c", "r");
    qg_node(m, "resize", "Resize", "r,,sc", "y");
    qg_shape(m, "y", QP_DTYPE_FLOAT, 4, QG_DIMS(1, 3, 4, 4));
    qg_output(m, "y");
    qg_sort(m);
    return m;
}

static int amax_x(void *user, const char *tensor, float *amax_out) {
    (void)user;
    if (strcmp(tensor, "x") != 0) return 0;
    *amax_out = 3.0f;
    return 1;
}

static struct qp_placement *conv_placement(void) {
    struct qp_error err = {0};
    struct qp_placement *p = qp_placement_create();
    assert_non_null(p);
    assert_int_equal(qp_placement_add_edge(p, "x", "conv", 0, "test", &err), QP_OK);
    assert_int_equal(qp_placement_add_weight(p, "W", "conv", 1, 0, "test", &err), QP_OK);
    return p;
}

static void run_conv_resize(struct qp_model *m, float out[48]) {
    struct qp_error err = {0};
    struct qp_session *s = NULL;
    assert_int_equal(qp_session_create(m, NULL, 0, NULL, &s, &err), QP_OK);
    struct qp_array in;
    assert_int_equal(qp_array_alloc(&in, QP_DTYPE_FLOAT, 4, QG_DIMS(1, 2, 2, 2), &err), QP_OK);
    const float xs[8] = {0.3f, -1.7f, 2.5f, 0.01f, -0.6f, 1.1f, 3.0f, -2.2f};
    memcpy(in.data, xs, sizeof xs);
    assert_int_equal(qp_session_run(s, 1, &in, &err), QP_OK);
    struct qp_array y;
    assert_int_equal(qp_session_output(s, 0, &y, &err), QP_OK);
    assert_int_equal(y.dtype, QP_DTYPE_FLOAT);
    assert_int_equal(y.nbytes, 48 * sizeof(float));
    memcpy(out, y.data, 48 * sizeof *out);
    qp_array_release(&in);
    qp_session_free(s);
}

static void test_conv_resize(void **state) {
    (void)state;
    float ref[48], got[48];
    struct qp_error err = {0};
    struct qp_writer_options o;
    qp_writer_options_default(&o);
    o.amax = amax_x;
    /* fp32 reference. */
    struct qp_model *m = conv_resize();
    struct qp_placement *p = conv_placement();
    assert_int_equal(qp_qdq_write(m, p, &o, NULL, &err), QP_OK);
    run_conv_resize(m, ref);
    qp_model_free(m);

    m = conv_resize();
    o.high_precision = QP_DTYPE_FLOAT16;
    struct qp_writer_stats st;
    assert_int_equal(qp_qdq_write(m, p, &o, &st, &err), QP_OK);
    assert_int_equal(st.high_precision, QP_DTYPE_FLOAT16);
    /* I/O float32; the output made by a Cast from the fp16 tensor. */
    assert_int_equal(vdt(m, "x"), QP_DTYPE_FLOAT);
    assert_int_equal(vdt(m, "y"), QP_DTYPE_FLOAT);
    int yv = qp_graph_find_value(m->graph, "y");
    int yc = m->graph->values[yv].producer;
    assert_true(yc >= 0);
    assert_string_equal(m->graph->nodes[yc].op_type, "Cast");
    assert_int_equal(cast_to(m, yc), QP_DTYPE_FLOAT);
    assert_string_equal(in_name(m, yc, 0), "y_fp16");
    assert_int_equal(vdt(m, "y_fp16"), QP_DTYPE_FLOAT16);
    int yp = m->graph->values[qp_graph_find_value(m->graph, "y_fp16")].producer;
    assert_true(yp >= 0);
    assert_string_equal(m->graph->nodes[yp].op_type, "Resize");
    /* x's Q reads x itself in fp32 with the fp32 scale; its DQ has an fp16 scale copy. */
    int q = reader(m, "x", "QuantizeLinear");
    assert_true(q >= 0);
    assert_int_equal(reader(m, "x", "Cast"), -1);
    assert_string_equal(in_name(m, q, 1), "x_scale");
    assert_int_equal(vdt(m, "x_scale"), QP_DTYPE_FLOAT);
    int dq = reader(m, out_name(m, q), "DequantizeLinear");
    assert_true(dq >= 0);
    assert_string_equal(in_name(m, dq, 1), "x_scale_fp16");
    assert_int_equal(vdt(m, "x_scale_fp16"), QP_DTYPE_FLOAT16);
    assert_int_equal(vdt(m, out_name(m, dq)), QP_DTYPE_FLOAT16);
    /* The fp16 scale is the fp32 one rounded. */
    const struct qp_tensor *s32 =
        &m->graph->inits[m->graph->values[qp_graph_find_value(m->graph, "x_scale")].initializer];
    const struct qp_tensor *s16 =
        &m->graph
             ->inits[m->graph->values[qp_graph_find_value(m->graph, "x_scale_fp16")].initializer];
    float f32;
    uint16_t h;
    memcpy(&f32, s32->data, 4);
    memcpy(&h, s16->data, 2);
    assert_int_equal(h, qp_f32_to_fp16(f32));
    assert_int_equal(s16->nbytes, 2);
    /* The weight, its scale, the bias: fp16 in place; the weight's Q and DQ in fp16. */
    assert_int_equal(vdt(m, "W"), QP_DTYPE_FLOAT16);
    assert_int_equal(vdt(m, "W_scale"), QP_DTYPE_FLOAT16);
    assert_int_equal(vdt(m, "B"), QP_DTYPE_FLOAT16);
    assert_int_equal(vdt(m, "W_zero_point"), QP_DTYPE_INT8);
    int wq = reader(m, "W", "QuantizeLinear");
    assert_true(wq >= 0);
    assert_int_equal(vdt(m, out_name(m, reader(m, out_name(m, wq), "DequantizeLinear"))),
                     QP_DTYPE_FLOAT16);
    /* Activations fp16; Resize's scales stay fp32 (schema: float only). */
    assert_int_equal(vdt(m, "c"), QP_DTYPE_FLOAT16);
    assert_int_equal(vdt(m, "r"), QP_DTYPE_FLOAT16);
    assert_int_equal(vdt(m, "sc"), QP_DTYPE_FLOAT);
    int rs = qp_graph_find_node(m->graph, "resize");
    assert_string_equal(in_name(m, rs, 2), "sc");
    /* Exactly one Cast (the output) and one fp32-kept node (x's Q). */
    assert_int_equal(count_live(m, "Cast"), 1);
    assert_int_equal(st.f16.n_casts, 1);
    assert_int_equal(st.f16.n_fp32_nodes, 1);
    assert_int_equal(st.f16.n_initializers, 4); /* W, W_scale, B, the copy x_scale_fp16 */
    assert_int_equal(st.f16.n_clamped, 0);
    check_consistent(m);
    /* The engine runs it: close to the fp32 model (fp16 rounding only). */
    run_conv_resize(m, got);
    double dot = 0, na = 0, nb = 0;
    for (int k = 0; k < 48; k++) {
        assert_true(fabsf(got[k] - ref[k]) <= 2e-2f + 2e-3f * fabsf(ref[k]));
        dot += (double)got[k] * ref[k];
        na += (double)got[k] * got[k];
        nb += (double)ref[k] * ref[k];
    }
    assert_true(dot / sqrt(na * nb) > 0.9999);
    /* diff against the placement: only SAME. */
    struct qp_qdq_slots *a = NULL, *b = NULL;
    assert_int_equal(qp_qdq_slots_from_model(m->graph, &a, &err), QP_OK);
    assert_int_equal(qp_qdq_slots_from_placement(p, m->graph, &b, &err), QP_OK);
    struct qp_qdq_diff d;
    assert_int_equal(qp_qdq_diff(a, b, &d, &err), QP_OK);
    assert_true(qp_qdq_diff_same(&d));
    assert_int_equal(d.same[0], 1);
    assert_int_equal(d.same[1], 1);
    qp_qdq_diff_release(&d);
    qp_qdq_slots_free(a);
    qp_qdq_slots_free(b);
    qp_placement_free(p);
    qp_model_free(m);
}

/* x -> Add(k) -> a -> Celu -> e -> Mul(kc) -> m1 -> Cast(to float) -> cf -> Sub(k) -> y ;
 * a -> Shape -> sh (int64 output) ; k also read by a custom-domain op `Foo` -> z (float output
 * declared). kc is a Constant node. */
static struct qp_model *mixed_graph(void) {
    struct qp_model *m = qp_model_create();
    assert_non_null(m);
    qg_set_opset(m, 19);
    qg_shape(m, "x", QP_DTYPE_FLOAT, 2, QG_DIMS(2, 3));
    qg_input(m, "x");
    const float k[3] = {1.5f, -2.0f, 0.25f};
    add_f32(m, "k", 1, QG_DIMS(3), k);
    qg_node(m, "add", "Add", "x,k", "a");
    qg_node(m, "celu", "Celu", "a", "e");
    int kc = qg_node(m, "kc_const", "Constant", "", "kc");
    struct qp_attr *at = qp_node_add_attr(m->graph, kc, "value", QP_ATTR_TENSOR);
    assert_non_null(at);
    at->t = qp_arena_calloc(m->arena, 1, sizeof *at->t);
    float *data = qp_arena_calloc(m->arena, 1, sizeof *data);
    *data = 3.0f;
    *at->t = (struct qp_tensor){
        .name = "", .dtype = QP_DTYPE_FLOAT, .rank = 0, .numel = 1, .data = data, .nbytes = 4};
    qg_node(m, "mul", "Mul", "e,kc", "m1");
    int cast = qg_node(m, "cast", "Cast", "m1", "cf");
    qg_attr_i(m, cast, "to", QP_DTYPE_FLOAT);
    qg_node(m, "sub", "Sub", "cf,k", "y");
    qg_node(m, "shape", "Shape", "a", "sh");
    int foo = -1;
    const char *fin[1] = {"k"}, *fout[1] = {"z"};
    struct qp_error err = {0};
    assert_int_equal(
        qp_graph_add_node(m->graph, "foo", "Foo", "com.example", 1, fin, 1, fout, &foo, &err),
        QP_OK);
    qg_shape(m, "z", QP_DTYPE_FLOAT, 1, QG_DIMS(3));
    qg_output(m, "y");
    qg_output(m, "sh");
    qg_output(m, "z");
    qg_sort(m);
    return m;
}

static void test_mixed(void **state) {
    (void)state;
    struct qp_model *m = mixed_graph();
    struct qp_error err = {0};
    struct qp_f16_stats st;
    assert_int_equal(qp_model_convert_f16(m, &st, &err), QP_OK);
    /* x -> Cast fp16 -> Add. */
    int add = qp_graph_find_node(m->graph, "add");
    assert_string_equal(in_name(m, add, 0), "x_cast_fp16");
    assert_int_equal(vdt(m, "x_cast_fp16"), QP_DTYPE_FLOAT16);
    assert_int_equal(vdt(m, "x"), QP_DTYPE_FLOAT);
    /* k: kept fp32 for the custom op, an fp16 copy for Add and Sub. */
    assert_int_equal(vdt(m, "k"), QP_DTYPE_FLOAT);
    assert_string_equal(in_name(m, add, 1), "k_fp16");
    assert_int_equal(vdt(m, "k_fp16"), QP_DTYPE_FLOAT16);
    assert_string_equal(in_name(m, qp_graph_find_node(m->graph, "foo"), 0), "k");
    assert_string_equal(in_name(m, qp_graph_find_node(m->graph, "sub"), 1), "k_fp16");
    assert_int_equal(vdt(m, "a"), QP_DTYPE_FLOAT16);
    /* Celu kept fp32: a Cast to fp32 before, a Cast to fp16 after. */
    int celu = qp_graph_find_node(m->graph, "celu");
    assert_string_equal(in_name(m, celu, 0), "a_cast_fp32");
    assert_int_equal(in_dt(m, celu, 0), QP_DTYPE_FLOAT);
    assert_int_equal(vdt(m, "e"), QP_DTYPE_FLOAT);
    int mul = qp_graph_find_node(m->graph, "mul");
    assert_string_equal(in_name(m, mul, 0), "e_cast_fp16");
    /* The Constant converted; the Cast to float retargeted to fp16. */
    assert_string_equal(in_name(m, mul, 1), "kc");
    assert_int_equal(vdt(m, "kc"), QP_DTYPE_FLOAT16);
    const struct qp_attr *kv =
        qp_node_attr(&m->graph->nodes[qp_graph_find_node(m->graph, "kc_const")], "value");
    assert_int_equal(kv->t->dtype, QP_DTYPE_FLOAT16);
    uint16_t h;
    memcpy(&h, kv->t->data, 2);
    assert_true(qp_fp16_to_f32(h) == 3.0f);
    int cast = qp_graph_find_node(m->graph, "cast");
    assert_int_equal(cast_to(m, cast), QP_DTYPE_FLOAT16);
    assert_int_equal(vdt(m, "cf"), QP_DTYPE_FLOAT16);
    /* Outputs: y float32 through a Cast, sh int64 untouched, z (custom op) float32. */
    assert_int_equal(vdt(m, "y"), QP_DTYPE_FLOAT);
    assert_int_equal(vdt(m, "y_fp16"), QP_DTYPE_FLOAT16);
    assert_int_equal(vdt(m, "sh"), QP_DTYPE_INT64);
    assert_int_equal(vdt(m, "z"), QP_DTYPE_FLOAT);
    assert_int_equal(in_dt(m, qp_graph_find_node(m->graph, "shape"), 0), QP_DTYPE_FLOAT16);
    /* Casts: x, a -> fp32, e -> fp16, y -> fp32. */
    assert_int_equal(st.n_casts, 4);
    assert_int_equal(count_live(m, "Cast"), 5);
    assert_int_equal(st.n_fp32_nodes, 2); /* Celu, Foo */
    assert_int_equal(st.n_constants, 1);
    assert_int_equal(st.n_initializers, 1);
    check_consistent(m);
    qp_model_free(m);
}

/* Out of range values clamped and counted; tiny scales raised; fp32 model dtypes unchanged for
 * non-float tensors. */
static void test_clamp(void **state) {
    (void)state;
    struct qp_model *m = qp_model_create();
    assert_non_null(m);
    qg_set_opset(m, 19);
    qg_shape(m, "x", QP_DTYPE_FLOAT, 1, QG_DIMS(4));
    qg_input(m, "x");
    const float big[4] = {1e6f, -INFINITY, 65504.0f, 1.0f};
    add_f32(m, "big", 1, QG_DIMS(4), big);
    const float tiny = 1e-9f;
    add_f32(m, "s", 0, NULL, &tiny);
    const int8_t zp = 0;
    qg_init_typed(m, "zp", 0, NULL, QP_DTYPE_INT8, &zp, 1);
    qg_node(m, "add", "Add", "x,big", "a");
    qg_node(m, "q", "QuantizeLinear", "a,s,zp", "aq");
    qg_node(m, "dq", "DequantizeLinear", "aq,s,zp", "ad");
    qg_node(m, "relu", "Relu", "ad", "y");
    qg_output(m, "y");
    qg_sort(m);
    struct qp_error err = {0};
    struct qp_f16_stats st;
    assert_int_equal(qp_model_convert_f16(m, &st, &err), QP_OK);
    assert_int_equal(st.n_clamped, 2);
    assert_int_equal(st.n_scale_underflow, 1);
    const struct qp_tensor *t =
        &m->graph->inits[m->graph->values[qp_graph_find_value(m->graph, "big")].initializer];
    assert_int_equal(t->dtype, QP_DTYPE_FLOAT16);
    const uint16_t *hv = t->data;
    assert_true(qp_fp16_to_f32(hv[0]) == 65504.0f);
    assert_true(qp_fp16_to_f32(hv[1]) == -65504.0f);
    assert_true(qp_fp16_to_f32(hv[2]) == 65504.0f);
    assert_true(qp_fp16_to_f32(hv[3]) == 1.0f);
    t = &m->graph->inits[m->graph->values[qp_graph_find_value(m->graph, "s")].initializer];
    assert_int_equal(t->dtype, QP_DTYPE_FLOAT16);
    uint16_t hs;
    memcpy(&hs, t->data, 2);
    assert_int_equal(hs, 1); /* 2^-24 */
    assert_int_equal(vdt(m, "zp"), QP_DTYPE_INT8);
    assert_int_equal(vdt(m, "aq"), QP_DTYPE_INT8);
    assert_int_equal(vdt(m, "ad"), QP_DTYPE_FLOAT16);
    assert_int_equal(vdt(m, "y"), QP_DTYPE_FLOAT);
    qp_model_free(m);
}

/* bf16 with a kept op type and without keep_io_types (--high_precision_dtype bf16
 * --op_types_to_exclude_fp16 Relu --direct_io_types): Add in bf16 from a bf16 graph input,
 * nothing clamped, Relu and the DQ feeding only it in float32, Conv (no bf16 in its schema) in
 * float32. */
static void test_options(void **state) {
    (void)state;
    struct qp_model *m = qp_model_create();
    assert_non_null(m);
    qg_set_opset(m, 19);
    qg_shape(m, "x", QP_DTYPE_FLOAT, 4, QG_DIMS(1, 1, 2, 2));
    qg_input(m, "x");
    const float big[1] = {1e6f};
    add_f32(m, "big", 0, NULL, big);
    const float s1 = 0.5f, w[1] = {2.0f};
    add_f32(m, "s", 0, NULL, &s1);
    add_f32(m, "w", 4, QG_DIMS(1, 1, 1, 1), w);
    const int8_t zp = 0;
    qg_init_typed(m, "zp", 0, NULL, QP_DTYPE_INT8, &zp, 1);
    qg_node(m, "add", "Add", "x,big", "a");
    qg_node(m, "q", "QuantizeLinear", "a,s,zp", "aq");
    qg_node(m, "dq", "DequantizeLinear", "aq,s,zp", "ad");
    qg_node(m, "relu", "Relu", "ad", "r");
    qg_node(m, "conv", "Conv", "r,w", "y");
    qg_output(m, "y");
    qg_sort(m);
    struct qp_error err = {0};
    struct qp_f16_stats st;
    struct qp_f16_options o;
    qp_f16_options_default(&o);
    assert_int_equal(o.dtype, QP_DTYPE_FLOAT16);
    assert_int_equal(o.keep_io_types, 1);
    const char *keep[1] = {"Relu"};
    o.dtype = QP_DTYPE_BFLOAT16;
    o.keep_ops = keep;
    o.n_keep_ops = 1;
    o.keep_io_types = 0;
    assert_int_equal(qp_model_convert_low(m, &o, &st, &err), QP_OK);
    assert_int_equal(vdt(m, "x"), QP_DTYPE_BFLOAT16);
    assert_int_equal(in_dt(m, qp_graph_find_node(m->graph, "add"), 0), QP_DTYPE_BFLOAT16);
    assert_int_equal(vdt(m, "a"), QP_DTYPE_BFLOAT16);
    const struct qp_tensor *t =
        &m->graph->inits[m->graph->values[qp_graph_find_value(m->graph, "big")].initializer];
    assert_int_equal(t->dtype, QP_DTYPE_BFLOAT16);
    uint16_t h;
    memcpy(&h, t->data, 2);
    assert_true(qp_bf16_to_f32(h) > 9.9e5f); /* not clamped to 65504 */
    assert_int_equal(st.n_clamped, 0);
    assert_int_equal(vdt(m, "ad"), QP_DTYPE_FLOAT);
    assert_int_equal(vdt(m, "r"), QP_DTYPE_FLOAT);
    assert_int_equal(vdt(m, "y"), QP_DTYPE_FLOAT);
    assert_int_equal(vdt(m, "w"), QP_DTYPE_FLOAT);
    assert_int_equal(st.n_fp32_nodes, 3); /* dq, relu, conv */
    check_consistent(m);
    /* Refused: a target other than float16/bfloat16. */
    o.dtype = QP_DTYPE_DOUBLE;
    assert_int_equal(qp_model_convert_low(m, &o, NULL, &err), QP_ERR_USAGE);
    qp_model_free(m);
}

/* A float slot fed by a tensor whose dtype cannot be known: refused, naming it. */
static void test_unknown_dtype(void **state) {
    (void)state;
    struct qp_model *m = qp_model_create();
    assert_non_null(m);
    qg_set_opset(m, 19);
    qg_shape(m, "x", QP_DTYPE_FLOAT, 1, QG_DIMS(4));
    qg_input(m, "x");
    int foo = -1;
    const char *fin[1] = {"x"}, *fout[1] = {"mystery"};
    struct qp_error err = {0};
    assert_int_equal(
        qp_graph_add_node(m->graph, "foo", "Foo", "com.example", 1, fin, 1, fout, &foo, &err),
        QP_OK);
    qg_node(m, "relu", "Relu", "mystery", "y");
    qg_output(m, "y");
    qg_sort(m);
    assert_int_equal(qp_model_convert_f16(m, NULL, &err), QP_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "'mystery'"));
    assert_non_null(strstr(err.msg, "fp32"));
    qp_model_free(m);
}

/* ---- the command line ---------------------------------------------------------------------- */

static int qplace(const char *dir, const char *fmt, ...) {
    char args[4096], cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "'%s' %s > '%s/out.txt' 2>&1", QPLACE_BIN, args, dir);
    int rc = system(cmd);
    assert_true(WIFEXITED(rc));
    return WEXITSTATUS(rc);
}

static int output_has(const char *dir, const char *needle) {
    char path[700];
    snprintf(path, sizeof path, "%s/out.txt", dir);
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    int found = strstr(buf, needle) != NULL;
    if (!found) printf("output without '%s':\n%s\n", needle, buf);
    return found;
}

static void test_cli(void **state) {
    (void)state;
    if (!file_exists(QPLACE_BIN)) fail_msg("%s not built", QPLACE_BIN);
    static const char *const models[] = {"resnet_like", "vit_like"};
    char dir[512], q[700], pl[700];
    snprintf(dir, sizeof dir, "%s/quantize-f16-cli", QP_TEST_BINARY_DIR);
    mkdir(dir, 0755);
    for (size_t k = 0; k < 2; k++) {
        char model[600];
        snprintf(model, sizeof model, "%s/tests/integration/quantize_models/%s.onnx", SRC_ROOT,
                 models[k]);
        snprintf(q, sizeof q, "%s/%s.f16.onnx", dir, models[k]);
        snprintf(pl, sizeof pl, "%s/%s.placement.json", dir, models[k]);
        unlink(q);
        /* fp16 by default; the interface stays float32; the placement is preserved. */
        assert_int_equal(qplace(dir,
                                "quantize --onnx_path '%s' --output_path '%s' --placement_out "
                                "'%s' --calibration_method max",
                                model, q, pl),
                         0);
        assert_true(output_has(dir, "high precision fp16"));
        assert_true(output_has(dir, "cosine"));
        struct qp_model *m = NULL;
        struct qp_error err = {0};
        assert_int_equal(qp_model_load_file(q, NULL, &m, &err), QP_OK);
        for (size_t i = 0; i < m->graph->n_inputs; i++)
            assert_int_equal(m->graph->values[m->graph->inputs[i]].dtype, QP_DTYPE_FLOAT);
        for (size_t i = 0; i < m->graph->n_outputs; i++)
            assert_int_equal(m->graph->values[m->graph->outputs[i]].dtype, QP_DTYPE_FLOAT);
        size_t n16 = 0, n32 = 0;
        for (size_t i = 0; i < m->graph->n_inits; i++) {
            n16 += m->graph->inits[i].dtype == QP_DTYPE_FLOAT16;
            n32 += m->graph->inits[i].dtype == QP_DTYPE_FLOAT;
        }
        assert_true(n16 > 0);
        assert_true(n32 <= 2); /* at most a graph input's Q scale (and a Resize scales) */
        check_consistent(m);
        qp_model_free(m);
        assert_int_equal(qplace(dir, "diff '%s' '%s'", q, pl), 0);
        assert_true(output_has(dir, "result: SAME"));
        /* The same with weights stored quantized. */
        assert_int_equal(qplace(dir,
                                "quantize --onnx_path '%s' --output_path '%s' --placement_in "
                                "'%s' --calibration_method max --dq_only",
                                model, q, pl),
                         0);
        assert_int_equal(qplace(dir, "diff '%s' '%s'", q, pl), 0);
        assert_true(output_has(dir, "result: SAME"));
    }
    /* fp32 on request. */
    char model[600];
    snprintf(model, sizeof model, "%s/tests/integration/quantize_models/resnet_like.onnx",
             SRC_ROOT);
    assert_int_equal(qplace(dir,
                            "quantize --onnx_path '%s' --output_path '%s' "
                            "--high-precision-dtype fp32 --calibration_method max",
                            model, q),
                     0);
    assert_true(output_has(dir, "high precision fp32"));
    struct qp_model *m = NULL;
    struct qp_error err = {0};
    assert_int_equal(qp_model_load_file(q, NULL, &m, &err), QP_OK);
    for (size_t i = 0; i < m->graph->n_inits; i++)
        assert_int_not_equal(m->graph->inits[i].dtype, QP_DTYPE_FLOAT16);
    qp_model_free(m);
    /* A bad value: usage error, nothing written. */
    unlink(q);
    assert_int_equal(
        qplace(dir, "quantize --onnx_path '%s' --output_path '%s' --high_precision_dtype fp64",
               model, q),
        1);
    assert_true(output_has(dir, "--high_precision_dtype 'fp64'"));
    assert_false(file_exists(q));
}

/* ONNX Runtime on the fp16 PaddleOCR cls and rec models (rec skipped under ASan: time). */
static void test_ort(void **state) {
    (void)state;
    if (system("command -v node > /dev/null 2>&1") != 0) {
        if (require_real()) fail_msg("node not found (QP_REQUIRE_REAL_MODELS=1)");
        printf("skip ORT check: node not found\n");
        return;
    }
#if defined(__SANITIZE_ADDRESS__)
    const char *kinds = "cls";
#else
    const char *kinds = "cls,rec";
#endif
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "node '%s/tests/integration/quantize_f16_ort.js' --npm '%s/.cache/npm' --models "
             "'%s/.cache/models' --qplace '%s' --tmp '%s/quantize-f16-ort' --kinds %s 2>/dev/null",
             SRC_ROOT, SRC_ROOT, SRC_ROOT, QPLACE_BIN, QP_TEST_BINARY_DIR, kinds);
    fflush(stdout);
    int rc = system(cmd);
    assert_true(WIFEXITED(rc));
    int code = WEXITSTATUS(rc);
    if (code == 77 && !require_real()) return;
    assert_int_equal(code, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv_resize),   cmocka_unit_test(test_mixed),
        cmocka_unit_test(test_clamp),         cmocka_unit_test(test_options),
        cmocka_unit_test(test_unknown_dtype), cmocka_unit_test(test_cli),
        cmocka_unit_test(test_ort),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
