/* Unit tests of the trt placement policy: one small hand-built graph per rule, plus the
 * reference's worked examples (ResNet bottleneck, ViT block). Expected placements are written
 * out in full, one line per entry: "e TENSOR NODE INPUT REASON" / "w TENSOR NODE INPUT AXIS
 * REASON", edges first, each list in (topo position, input) order. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "quant/policy_trt.h"
#include "qgraph.h"

static char *dump(const struct qp_placement *p) {
    size_t cap = 1 << 16, n = 0;
    char *s = malloc(cap);
    assert_non_null(s);
    s[0] = '\0';
    for (size_t i = 0; i < p->n_edges; i++)
        n += (size_t)snprintf(s + n, cap - n, "e %s %s %d %s\n", p->edges[i].tensor,
                              p->edges[i].node, p->edges[i].input, p->edges[i].reason);
    for (size_t i = 0; i < p->n_weights; i++)
        n += (size_t)snprintf(s + n, cap - n, "w %s %s %d %d %s\n", p->weights[i].tensor,
                              p->weights[i].node, p->weights[i].input, p->weights[i].axis,
                              p->weights[i].reason);
    assert_true(n < cap);
    return s;
}

static struct qp_placement *run_opts(struct qp_model *m, const struct qp_policy_options *o,
                                     const char **notes) {
    struct qp_error err = {0};
    struct qp_placement *p = qp_placement_create();
    assert_non_null(p);
    enum qp_status st = qp_policy_trt(m->graph, o, p, notes, &err);
    if (st != QP_OK) fail_msg("policy failed: %s", err.msg);
    return p;
}

static void expect(struct qp_model *m, const struct qp_policy_options *o, const char *want) {
    struct qp_placement *p = run_opts(m, o, NULL);
    char *got = dump(p);
    if (strcmp(got, want) != 0)
        fail_msg("placement differs.\n--- got:\n%s--- want:\n%s", got, want);
    /* Deterministic: a second run gives the same placement. */
    struct qp_placement *q = run_opts(m, o, NULL);
    char *again = dump(q);
    assert_string_equal(got, again);
    free(got);
    free(again);
    qp_placement_free(p);
    qp_placement_free(q);
}

static const struct qp_policy_options INT8 = {.mode = QP_QUANT_INT8};
static const struct qp_policy_options FP8 = {.mode = QP_QUANT_FP8};

/* Conv with an initializer weight [oc, ic, k, k]. */
static int conv(struct qp_model *m, const char *name, const char *in, const char *out, int64_t oc,
                int64_t ic, int64_t k) {
    char w[128], ins[300];
    snprintf(w, sizeof w, "%s.w", name);
    qg_init(m, w, 4, QG_DIMS(oc, ic, k, k));
    snprintf(ins, sizeof ins, "%s,%s", in, w);
    return qg_node(m, name, "Conv", ins, out);
}

static void bn(struct qp_model *m, const char *name, const char *in, const char *out, int64_t c) {
    char ins[600], t[4][128];
    const char *sfx[4] = {"s", "b", "m", "v"};
    for (int i = 0; i < 4; i++) {
        snprintf(t[i], sizeof t[i], "%s.%s", name, sfx[i]);
        qg_init(m, t[i], 1, QG_DIMS(c));
    }
    snprintf(ins, sizeof ins, "%s,%s,%s,%s,%s", in, t[0], t[1], t[2], t[3]);
    qg_node(m, name, "BatchNormalization", ins, out);
}

/* MatMul with an initializer weight [k, n], then a bias Add. */
static void linear(struct qp_model *m, const char *name, const char *in, const char *out, int64_t k,
                   int64_t n) {
    char w[128], b[128], ins[300], mid[128], nm[128];
    snprintf(w, sizeof w, "%s.w", name);
    snprintf(b, sizeof b, "%s.b", name);
    snprintf(mid, sizeof mid, "%s.mm", name);
    qg_init(m, w, 2, QG_DIMS(k, n));
    qg_init(m, b, 1, QG_DIMS(n));
    snprintf(ins, sizeof ins, "%s,%s", in, w);
    qg_node(m, name, "MatMul", ins, mid);
    snprintf(ins, sizeof ins, "%s,%s", mid, b);
    snprintf(nm, sizeof nm, "%s.bias", name);
    qg_node(m, nm, "Add", ins, out);
}

/* ---- worked example: ResNet bottleneck ----------------------------------------------------- */

static struct qp_model *resnet(void) {
    struct qp_model *m = qp_model_create();
    qg_input(m, "x");
    conv(m, "conv0", "x", "c0", 64, 3, 7);
    bn(m, "bn0", "c0", "b0", 64);
    qg_node(m, "relu0", "Relu", "b0", "r0");
    qg_node(m, "pool0", "MaxPool", "r0", "p0");
    /* block 1, with a downsample branch */
    conv(m, "conv1", "p0", "c1", 64, 64, 1);
    bn(m, "bn1", "c1", "b1", 64);
    qg_node(m, "relu1", "Relu", "b1", "r1");
    conv(m, "conv2", "r1", "c2", 64, 64, 3);
    bn(m, "bn2", "c2", "b2", 64);
    qg_node(m, "relu2", "Relu", "b2", "r2");
    conv(m, "conv3", "r2", "c3", 256, 64, 1);
    bn(m, "bn3", "c3", "b3", 256);
    conv(m, "convd", "p0", "cd", 256, 64, 1);
    bn(m, "bnd", "cd", "bd", 256);
    qg_node(m, "add1", "Add", "b3,bd", "a1");
    qg_node(m, "relu3", "Relu", "a1", "r3");
    /* block 2, identity skip */
    conv(m, "conv4", "r3", "c4", 64, 256, 1);
    bn(m, "bn4", "c4", "b4", 64);
    qg_node(m, "relu4", "Relu", "b4", "r4");
    conv(m, "conv5", "r4", "c5", 64, 64, 3);
    bn(m, "bn5", "c5", "b5", 64);
    qg_node(m, "relu5", "Relu", "b5", "r5");
    conv(m, "conv6", "r5", "c6", 256, 64, 1);
    bn(m, "bn6", "c6", "b6", 256);
    qg_node(m, "add2", "Add", "b6,r3", "a2");
    qg_node(m, "relu6", "Relu", "a2", "r6");
    /* head */
    qg_node(m, "gap", "GlobalAveragePool", "r6", "g");
    qg_node(m, "flat", "Flatten", "g", "f");
    qg_init(m, "fc.w", 2, QG_DIMS(1000, 256));
    qg_init(m, "fc.b", 1, QG_DIMS(1000));
    int fc = qg_node(m, "fc", "Gemm", "f,fc.w,fc.b", "logits");
    qg_attr_i(m, fc, "transB", 1);
    qg_shape(m, "logits", QP_DTYPE_FLOAT, 2, QG_DIMS(-1, 1000));
    qg_output(m, "logits");
    qg_sort(m);
    return m;
}

static void test_resnet_bottleneck(void **state) {
    (void)state;
    struct qp_model *m = resnet();
    expect(m, &INT8,
           "e x conv0 0 trt.conv_input\n"
           "e p0 conv1 0 trt.conv_input\n"
           "e r1 conv2 0 trt.conv_input\n"
           "e r2 conv3 0 trt.conv_input\n"
           "e p0 convd 0 trt.conv_input\n"
           "e bd add1 1 trt.residual_skip\n"
           "e r3 conv4 0 trt.conv_input\n"
           "e r4 conv5 0 trt.conv_input\n"
           "e r5 conv6 0 trt.conv_input\n"
           "e r3 add2 1 trt.residual_skip\n"
           "e r6 gap 0 trt.pool_input\n"
           "e f fc 0 trt.gemm_input\n"
           "w conv0.w conv0 1 0 trt.conv_weight\n"
           "w conv1.w conv1 1 0 trt.conv_weight\n"
           "w conv2.w conv2 1 0 trt.conv_weight\n"
           "w conv3.w conv3 1 0 trt.conv_weight\n"
           "w convd.w convd 1 0 trt.conv_weight\n"
           "w conv4.w conv4 1 0 trt.conv_weight\n"
           "w conv5.w conv5 1 0 trt.conv_weight\n"
           "w conv6.w conv6 1 0 trt.conv_weight\n"
           "w fc.w fc 1 0 trt.gemm_weight\n");
    /* Notes for --explain. */
    const char **notes = calloc(m->graph->n_nodes, sizeof *notes);
    struct qp_placement *p = run_opts(m, &INT8, notes);
    struct qp_graph *g = m->graph;
    assert_string_equal(notes[qp_graph_find_node(g, "bn1")], "trt.fused");
    assert_string_equal(notes[qp_graph_find_node(g, "pool0")], "trt.fused");
    assert_string_equal(notes[qp_graph_find_node(g, "add1")], "trt.residual_add");
    assert_string_equal(notes[qp_graph_find_node(g, "conv1")], "trt.partition_root");
    free(notes);
    qp_placement_free(p);

    /* FP8: 7x7 stem excluded (kernel volume > 32), GAP is not an FP8 op type. */
    expect(m, &FP8,
           "e p0 conv1 0 trt.conv_input\n"
           "e r1 conv2 0 trt.conv_input\n"
           "e r2 conv3 0 trt.conv_input\n"
           "e p0 convd 0 trt.conv_input\n"
           "e bd add1 1 trt.residual_skip\n"
           "e r3 conv4 0 trt.conv_input\n"
           "e r4 conv5 0 trt.conv_input\n"
           "e r5 conv6 0 trt.conv_input\n"
           "e r3 add2 1 trt.residual_skip\n"
           "e f fc 0 trt.gemm_input\n"
           "w conv1.w conv1 1 0 trt.conv_weight\n"
           "w conv2.w conv2 1 0 trt.conv_weight\n"
           "w conv3.w conv3 1 0 trt.conv_weight\n"
           "w convd.w convd 1 0 trt.conv_weight\n"
           "w conv4.w conv4 1 0 trt.conv_weight\n"
           "w conv5.w conv5 1 0 trt.conv_weight\n"
           "w conv6.w conv6 1 0 trt.conv_weight\n"
           "w fc.w fc 1 0 trt.gemm_weight\n");
    qp_model_free(m);
}

/* ---- worked example: ViT block ------------------------------------------------------------- */

static void ln(struct qp_model *m, const char *name, const char *in, const char *out) {
    char g[128], b[128], ins[300];
    snprintf(g, sizeof g, "%s.g", name);
    snprintf(b, sizeof b, "%s.b", name);
    qg_init(m, g, 1, QG_DIMS(768));
    qg_init(m, b, 1, QG_DIMS(768));
    snprintf(ins, sizeof ins, "%s,%s,%s", in, g, b);
    qg_node(m, name, "LayerNormalization", ins, out);
}

static struct qp_model *vit(int64_t seq) {
    struct qp_model *m = qp_model_create();
    qg_input(m, "tokens");
    qg_init(m, "pos", 3, QG_DIMS(1, seq, 768));
    qg_init(m, "shape4", 1, QG_DIMS(4));
    qg_init(m, "shape3", 1, QG_DIMS(3));
    qg_init(m, "scale", 0, NULL);
    qg_init(m, "sqrt2", 0, NULL);
    qg_init(m, "one", 0, NULL);
    qg_init(m, "half", 0, NULL);
    qg_node(m, "embed", "Add", "tokens,pos", "x");
    ln(m, "ln1", "x", "h1");
    const char *heads[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; i++) {
        char nm[64], a[64], r[64], t[64], ins[128];
        snprintf(nm, sizeof nm, "%s_proj", heads[i]);
        snprintf(a, sizeof a, "%s.a", heads[i]);
        linear(m, nm, "h1", a, 768, 768);
        snprintf(r, sizeof r, "%s.r", heads[i]);
        snprintf(ins, sizeof ins, "%s,shape4", a);
        snprintf(nm, sizeof nm, "%s_reshape", heads[i]);
        qg_node(m, nm, "Reshape", ins, r);
        snprintf(t, sizeof t, "%s.t", heads[i]);
        snprintf(nm, sizeof nm, "%s_transpose", heads[i]);
        qg_node(m, nm, "Transpose", r, t);
    }
    qg_shape(m, "k.t", QP_DTYPE_FLOAT, 4, QG_DIMS(1, 12, 64, seq));
    qg_node(m, "bmm1", "MatMul", "q.t,k.t", "scores");
    qg_node(m, "attn_scale", "Mul", "scores,scale", "scaled");
    qg_node(m, "softmax", "Softmax", "scaled", "probs");
    qg_node(m, "bmm2", "MatMul", "probs,v.t", "ctx");
    qg_node(m, "ctx_transpose", "Transpose", "ctx", "ctx.t");
    qg_node(m, "ctx_reshape", "Reshape", "ctx.t,shape3", "ctx.r");
    linear(m, "out_proj", "ctx.r", "attn_out", 768, 768);
    qg_node(m, "res1", "Add", "x,attn_out", "x1");
    ln(m, "ln2", "x1", "h2");
    linear(m, "fc1", "h2", "f1", 768, 3072);
    qg_node(m, "gelu_div", "Div", "f1,sqrt2", "gd");
    qg_node(m, "gelu_erf", "Erf", "gd", "ge");
    qg_node(m, "gelu_add", "Add", "ge,one", "ga");
    qg_node(m, "gelu_mul", "Mul", "f1,ga", "gm");
    qg_node(m, "gelu_half", "Mul", "gm,half", "gh");
    linear(m, "fc2", "gh", "f2", 3072, 768);
    qg_node(m, "res2", "Add", "x1,f2", "y");
    qg_output(m, "y");
    qg_sort(m);
    return m;
}

static void test_vit_block(void **state) {
    (void)state;
    struct qp_model *m = vit(197);
    expect(m, &INT8,
           "e h1 q_proj 0 trt.matmul_input\n"
           "e h1 k_proj 0 trt.matmul_input\n"
           "e h1 v_proj 0 trt.matmul_input\n"
           "e q.t bmm1 0 trt.matmul_input\n"
           "e k.t bmm1 1 trt.matmul_input\n"
           "e probs bmm2 0 trt.matmul_input\n"
           "e v.t bmm2 1 trt.matmul_input\n"
           "e ctx.r out_proj 0 trt.matmul_input\n"
           "e attn_out res1 1 trt.kgen_input\n"
           "e h2 fc1 0 trt.matmul_input\n"
           "e gh fc2 0 trt.matmul_input\n"
           "e f2 res2 1 trt.kgen_input\n"
           "w q_proj.w q_proj 1 1 trt.matmul_weight\n"
           "w k_proj.w k_proj 1 1 trt.matmul_weight\n"
           "w v_proj.w v_proj 1 1 trt.matmul_weight\n"
           "w out_proj.w out_proj 1 1 trt.matmul_weight\n"
           "w fc1.w fc1 1 1 trt.matmul_weight\n"
           "w fc2.w fc2 1 1 trt.matmul_weight\n");
    const char **notes = calloc(m->graph->n_nodes, sizeof *notes);
    qp_placement_free(run_opts(m, &INT8, notes));
    struct qp_graph *g = m->graph;
    assert_string_equal(notes[qp_graph_find_node(g, "ln1")], "trt.pattern.layernorm");
    assert_string_equal(notes[qp_graph_find_node(g, "gelu_erf")], "trt.pattern.gelu");
    assert_string_equal(notes[qp_graph_find_node(g, "gelu_half")], "trt.pattern.gelu");
    assert_string_equal(notes[qp_graph_find_node(g, "softmax")], "trt.fused");
    free(notes);
    qp_model_free(m);

    /* Sequence length > 512: both attention BMMs stay float. */
    m = vit(1024);
    struct qp_placement *p = run_opts(m, &INT8, NULL);
    assert_false(qp_placement_find(p, "bmm1", 0, NULL, NULL));
    assert_false(qp_placement_find(p, "bmm1", 1, NULL, NULL));
    assert_false(qp_placement_find(p, "bmm2", 0, NULL, NULL));
    assert_true(qp_placement_find(p, "q_proj", 0, NULL, NULL));
    qp_placement_free(p);
    qp_model_free(m);

    /* --disable_mha_qdq. */
    m = vit(197);
    struct qp_policy_options o = {.mode = QP_QUANT_INT8, .disable_mha_qdq = 1};
    const char **n2 = calloc(m->graph->n_nodes, sizeof *n2);
    p = run_opts(m, &o, n2);
    assert_false(qp_placement_find(p, "bmm1", 0, NULL, NULL));
    assert_false(qp_placement_find(p, "bmm2", 1, NULL, NULL));
    assert_int_equal(p->n_edges, 8);
    assert_string_equal(n2[qp_graph_find_node(m->graph, "bmm2")], "user.disable_mha_qdq");
    free(n2);
    qp_placement_free(p);
    qp_model_free(m);
}

/* ---- §3.3 masked attention core ------------------------------------------------------------ */

static void test_masked_mha_core(void **state) {
    (void)state;
    struct qp_model *m = qp_model_create();
    qg_input(m, "q");
    qg_input(m, "k");
    qg_input(m, "v");
    qg_input(m, "mask");
    qg_node(m, "bmm1", "MatMul", "q,k", "s");
    qg_node(m, "mask_add", "Add", "s,mask", "sm");
    qg_node(m, "softmax", "Softmax", "sm", "p");
    qg_node(m, "bmm2", "MatMul", "p,v", "o");
    qg_node(m, "relu", "Relu", "o", "y");
    qg_output(m, "y");
    qg_sort(m);
    expect(m, &INT8, "");
    qp_model_free(m);
}

/* ---- §3.6.4 Conv -> LayerNorm -------------------------------------------------------------- */

/* x -> conv (of `domain`) -> Reshape -> LayerNormalization -> Relu. */
static struct qp_model *conv_ln_model(const char *domain) {
    struct qp_model *m = qp_model_create();
    qg_input(m, "x");
    conv(m, "conv", "x", "c", 32, 32, 3);
    qg_node(m, "reshape", "Reshape", "c,shp", "cr");
    qg_init(m, "shp", 1, QG_DIMS(3));
    qg_init(m, "g", 1, QG_DIMS(32));
    qg_node(m, "ln", "LayerNormalization", "cr,g", "l");
    qg_node(m, "relu", "Relu", "l", "y");
    qg_output(m, "y");
    qg_sort(m);
    m->graph->nodes[qp_graph_find_node(m->graph, "conv")].domain = domain;
    return m;
}

static void test_conv_layernorm(void **state) {
    (void)state;
    struct qp_model *m = conv_ln_model("");
    expect(m, &INT8,
           "e x conv 0 trt.conv_input\n"
           "e cr ln 0 trt.layernorm_input\n"
           "w conv.w conv 1 0 trt.conv_weight\n");
    /* FP8 does not quantize LayerNormalization. */
    expect(m, &FP8, "e x conv 0 trt.conv_input\nw conv.w conv 1 0 trt.conv_weight\n");
    qp_model_free(m);
}

/* A com.microsoft node named like an ONNX op is not that op: the policy leaves its input and
 * weights alone, and the LayerNormalization after it is no longer "Conv -> LayerNormalization"
 * (test_conv_layernorm, the same graph with an ONNX Conv), so nothing is quantized. */
static void test_foreign_domain_conv(void **state) {
    (void)state;
    struct qp_model *m = conv_ln_model("com.microsoft");
    expect(m, &INT8, "");
    qp_model_free(m);
}

/* conv0 -> Relu -> MaxPool -> conv1, with the Relu and the MaxPool in `domain`. */
static struct qp_model *conv_pool_model(const char *domain) {
    struct qp_model *m = qp_model_create();
    qg_input(m, "x");
    conv(m, "conv0", "x", "c0", 32, 32, 3);
    qg_node(m, "relu", "Relu", "c0", "r");
    qg_node(m, "pool", "MaxPool", "r", "p");
    conv(m, "conv1", "p", "y", 32, 32, 3);
    qg_output(m, "y");
    qg_sort(m);
    struct qp_graph *g = m->graph;
    g->nodes[qp_graph_find_node(g, "relu")].domain = domain;
    g->nodes[qp_graph_find_node(g, "pool")].domain = domain;
    return m;
}

/* The pool rules (a MaxPool between quantized convs takes a Q/DQ on its input) are ONNX's: a
 * com.microsoft "MaxPool" / "Relu" gets none of the op traits, so only the convs are quantized. */
static void test_foreign_domain_pool(void **state) {
    (void)state;
    struct qp_model *m = conv_pool_model("");
    expect(m, &INT8,
           "e x conv0 0 trt.conv_input\n"
           "e r pool 0 trt.pool_input\n"
           "e p conv1 0 trt.conv_input\n"
           "w conv0.w conv0 1 0 trt.conv_weight\n"
           "w conv1.w conv1 1 0 trt.conv_weight\n");
    qp_model_free(m);
    m = conv_pool_model("com.microsoft");
    expect(m, &INT8,
           "e x conv0 0 trt.conv_input\n"
           "e p conv1 0 trt.conv_input\n"
           "w conv0.w conv0 1 0 trt.conv_weight\n"
           "w conv1.w conv1 1 0 trt.conv_weight\n");
    qp_model_free(m);
}

/* ---- SE block: Mul(feature, Sigmoid(conv(...))) --------------------------------------------- */

static void test_se_block_mul(void **state) {
    (void)state;
    struct qp_model *m = qp_model_create();
    qg_input(m, "x");
    conv(m, "conv0", "x", "c0", 64, 64, 3);
    qg_node(m, "silu_sig", "Sigmoid", "c0", "s0");
    qg_node(m, "silu_mul", "Mul", "c0,s0", "feat");
    qg_node(m, "gap", "GlobalAveragePool", "feat", "g");
    conv(m, "se_reduce", "g", "r", 16, 64, 1);
    qg_node(m, "se_relu", "Relu", "r", "rr");
    conv(m, "se_expand", "rr", "e", 64, 16, 1);
    qg_node(m, "se_sig", "Sigmoid", "e", "es");
    qg_node(m, "se_mul", "Mul", "feat,es", "scaled");
    conv(m, "conv_out", "scaled", "y", 64, 64, 1);
    qg_output(m, "y");
    qg_sort(m);
    /* SiLU is fused into conv0 (Mul <- Sigmoid <- Conv); the SE Mul is a KGEN head with both
     * inputs from conv partitions, so both are quantized; the GAP feeds a quantized conv. */
    expect(m, &INT8,
           "e x conv0 0 trt.conv_input\n"
           "e feat gap 0 trt.pool_input\n"
           "e g se_reduce 0 trt.conv_input\n"
           "e rr se_expand 0 trt.conv_input\n"
           "e feat se_mul 0 trt.kgen_input\n"
           "e es se_mul 1 trt.kgen_input\n"
           "e scaled conv_out 0 trt.conv_input\n"
           "w conv0.w conv0 1 0 trt.conv_weight\n"
           "w se_reduce.w se_reduce 1 0 trt.conv_weight\n"
           "w se_expand.w se_expand 1 0 trt.conv_weight\n"
           "w conv_out.w conv_out 1 0 trt.conv_weight\n");
    qp_model_free(m);
}

/* ---- Concat of two conv branches ------------------------------------------------------------ */

static void test_concat(void **state) {
    (void)state;
    struct qp_model *m = qp_model_create();
    qg_input(m, "x");
    conv(m, "ca", "x", "a", 32, 16, 3);
    conv(m, "cb", "x", "b", 32, 16, 3);
    qg_node(m, "cat", "Concat", "a,b", "c");
    conv(m, "cc", "c", "y", 64, 64, 1);
    qg_output(m, "y");
    qg_sort(m);
    /* The Concat itself carries no quantizer; its output is quantized for cc only. */
    expect(m, &INT8,
           "e x ca 0 trt.conv_input\n"
           "e x cb 0 trt.conv_input\n"
           "e c cc 0 trt.conv_input\n"
           "w ca.w ca 1 0 trt.conv_weight\n"
           "w cb.w cb 1 0 trt.conv_weight\n"
           "w cc.w cc 1 0 trt.conv_weight\n");
    qp_model_free(m);
}

/* ---- weights stored as Constant nodes (Paddle2ONNX) are weights too ------------------------ */

static void test_constant_node_weight(void **state) {
    (void)state;
    struct qp_model *m = qp_model_create();
    qg_input(m, "x");
    int k = qg_node(m, "wconst", "Constant", "", "w");
    struct qp_attr *a = qp_node_add_attr(m->graph, k, "value", QP_ATTR_TENSOR);
    struct qp_tensor *t = qp_arena_calloc(m->arena, 1, sizeof *t);
    int64_t *dims = qp_arena_calloc(m->arena, 4, sizeof *dims);
    dims[0] = dims[1] = 32;
    dims[2] = dims[3] = 3;
    *t = (struct qp_tensor){
        .name = "w", .dtype = QP_DTYPE_FLOAT, .rank = 4, .dims = dims, .numel = 32 * 32 * 9};
    a->t = t;
    qg_node(m, "conv", "Conv", "x,w", "y");
    qg_output(m, "y");
    qg_sort(m);
    expect(m, &INT8, "e x conv 0 trt.conv_input\nw w conv 1 0 trt.conv_weight\n");
    qp_model_free(m);
}

/* ---- Resize: after a conv partition it stays float; elsewhere it is quantized ---------------- */

static void test_resize(void **state) {
    (void)state;
    struct qp_model *m = qp_model_create();
    qg_input(m, "x");
    qg_input(m, "z");
    qg_init(m, "scales", 1, QG_DIMS(4));
    conv(m, "conv", "x", "c", 32, 32, 3);
    qg_node(m, "up1", "Resize", "c,,scales", "u1");
    conv(m, "conv2", "u1", "y1", 32, 32, 3);
    qg_node(m, "up2", "Resize", "z,,scales", "u2");
    conv(m, "conv3", "u2", "y2", 32, 32, 3);
    qg_output(m, "y1");
    qg_output(m, "y2");
    qg_sort(m);
    expect(m, &INT8,
           "e x conv 0 trt.conv_input\n"
           "e u1 conv2 0 trt.conv_input\n"
           "e z up2 0 trt.op_input\n"
           "e u2 conv3 0 trt.conv_input\n"
           "w conv.w conv 1 0 trt.conv_weight\n"
           "w conv2.w conv2 1 0 trt.conv_weight\n"
           "w conv3.w conv3 1 0 trt.conv_weight\n");
    qp_model_free(m);
}

/* ---- §3.2 automatic exclusions -------------------------------------------------------------- */

static void test_small_and_nonconst_convs(void **state) {
    (void)state;
    struct qp_model *m = qp_model_create();
    qg_input(m, "x");
    qg_input(m, "wact");
    qg_node(m, "pre", "Relu", "x", "px");
    conv(m, "tiny", "px", "t", 8, 4, 3);         /* OC, IC < 16, not on a graph input */
    conv(m, "stem", "x", "s", 8, 3, 3);          /* small but on a graph input, OC % 8 == 0 */
    int dw = conv(m, "dw", "px", "d", 32, 1, 3); /* depthwise, OC % 8 == 0, 3x3 */
    qg_attr_i(m, dw, "group", 32);
    int dw5 = conv(m, "dw_odd", "px", "d5", 36, 1, 3); /* depthwise, OC % 8 != 0 */
    qg_attr_i(m, dw5, "group", 36);
    qg_node(m, "dyn", "Conv", "px,wact", "dy"); /* non-constant weight */
    qg_node(m, "sum", "Sum", "t,s,d,d5,dy", "y");
    qg_output(m, "y");
    qg_sort(m);
    const char **notes = calloc(m->graph->n_nodes, sizeof *notes);
    struct qp_placement *p = run_opts(m, &INT8, notes);
    char *got = dump(p);
    assert_string_equal(got, "e x stem 0 trt.conv_input\n"
                             "e px dw 0 trt.conv_input\n"
                             "w stem.w stem 1 0 trt.conv_weight\n"
                             "w dw.w dw 1 0 trt.conv_weight\n");
    struct qp_graph *g = m->graph;
    assert_string_equal(notes[qp_graph_find_node(g, "tiny")], "trt.excluded.small_conv");
    assert_string_equal(notes[qp_graph_find_node(g, "dw_odd")], "trt.excluded.small_conv");
    assert_string_equal(notes[qp_graph_find_node(g, "dyn")], "trt.excluded.nonconst_weight");
    free(got);
    free(notes);
    qp_placement_free(p);
    /* Autotune-style: no automatic exclusions except the non-constant weight... which is an
     * automatic exclusion too, so everything with a constant weight is quantized. */
    struct qp_policy_options o = {.mode = QP_QUANT_INT8, .no_auto_exclusions = 1};
    p = run_opts(m, &o, NULL);
    assert_int_equal(p->n_weights, 4);
    assert_true(qp_placement_find(p, "dyn", 1, NULL, NULL)); /* activation weight: an edge */
    qp_placement_free(p);
    qp_model_free(m);
}

static void test_gemv_and_small_gemm(void **state) {
    (void)state;
    struct qp_model *m = qp_model_create();
    qg_input(m, "a");
    qg_input(m, "b");
    qg_init(m, "w", 2, QG_DIMS(768, 1000));
    qg_init(m, "w8", 2, QG_DIMS(768, 8));
    qg_init(m, "wk", 2, QG_DIMS(8, 64));
    qg_node(m, "gemv", "MatMul", "a,w", "o1");
    qg_shape(m, "o1", QP_DTYPE_FLOAT, 2, QG_DIMS(1, 1000));
    qg_node(m, "narrow", "MatMul", "a,w8", "o2");
    qg_shape(m, "o2", QP_DTYPE_FLOAT, 3, QG_DIMS(4, 64, 8));
    qg_node(m, "shallow", "MatMul", "b,wk", "o3");
    qg_node(m, "unknown", "MatMul", "a,w", "o4"); /* unknown output shape: kept */
    qg_node(m, "bmm_vec", "MatMul", "a,b", "o5"); /* both variable, output [.., 1, n] */
    qg_shape(m, "o5", QP_DTYPE_FLOAT, 3, QG_DIMS(8, 1, 64));
    qg_node(m, "sum", "Sum", "o1,o2,o3,o4,o5", "y");
    qg_output(m, "y");
    qg_sort(m);
    const char **notes = calloc(m->graph->n_nodes, sizeof *notes);
    struct qp_placement *p = run_opts(m, &INT8, notes);
    char *got = dump(p);
    assert_string_equal(got, "e a unknown 0 trt.matmul_input\n"
                             "w w unknown 1 1 trt.matmul_weight\n");
    struct qp_graph *g = m->graph;
    assert_string_equal(notes[qp_graph_find_node(g, "gemv")], "trt.excluded.gemv");
    assert_string_equal(notes[qp_graph_find_node(g, "narrow")], "trt.excluded.small_gemm");
    assert_string_equal(notes[qp_graph_find_node(g, "shallow")], "trt.excluded.small_gemm");
    assert_string_equal(notes[qp_graph_find_node(g, "bmm_vec")], "trt.excluded.gemv");
    free(got);
    free(notes);
    qp_placement_free(p);
    qp_model_free(m);
}

/* ---- pooling, graph outputs, shapes, dtypes ------------------------------------------------- */

static void test_pool_and_graph_output(void **state) {
    (void)state;
    struct qp_model *m = qp_model_create();
    qg_input(m, "x");
    /* A MaxPool with no quantized neighbour stays float. */
    qg_node(m, "relu", "Relu", "x", "r");
    qg_node(m, "pool", "MaxPool", "r", "p");
    qg_node(m, "relu2", "Relu", "p", "q");
    /* A Clip producing a graph output is dropped (graph-output rule); a Conv is kept. */
    qg_init(m, "lo", 0, NULL);
    qg_init(m, "hi", 0, NULL);
    qg_node(m, "clip_out", "Clip", "q,lo,hi", "y1");
    qg_node(m, "clip_mid", "Clip", "q,lo,hi", "cm");
    conv(m, "conv_out", "cm", "y2", 32, 32, 3);
    qg_output(m, "y1");
    qg_output(m, "y2");
    qg_sort(m);
    const char **notes = calloc(m->graph->n_nodes, sizeof *notes);
    struct qp_placement *p = run_opts(m, &INT8, notes);
    char *got = dump(p);
    assert_string_equal(got, "e q clip_mid 0 trt.op_input\n"
                             "e cm conv_out 0 trt.conv_input\n"
                             "w conv_out.w conv_out 1 0 trt.conv_weight\n");
    struct qp_graph *g = m->graph;
    assert_string_equal(notes[qp_graph_find_node(g, "pool")], "trt.pool_no_quantized_neighbour");
    assert_string_equal(notes[qp_graph_find_node(g, "clip_out")], "trt.graph_output");
    free(got);
    free(notes);
    qp_placement_free(p);
    qp_model_free(m);
}

static void test_shapes_scalars_dtypes(void **state) {
    (void)state;
    struct qp_model *m = qp_model_create();
    qg_input(m, "x");
    qg_input(m, "ia");
    qg_input(m, "ib");
    qg_input(m, "sc");
    qg_shape(m, "ia", QP_DTYPE_INT32, 2, QG_DIMS(32, 32));
    qg_shape(m, "ib", QP_DTYPE_INT32, 2, QG_DIMS(32, 32));
    qg_shape(m, "sc", QP_DTYPE_FLOAT, 0, NULL);
    qg_init(m, "w", 2, QG_DIMS(64, 64));
    /* Shape computation: Shape -> Cast(float) -> Mul -> Cast -> Reshape's shape input. */
    qg_node(m, "shape", "Shape", "x", "s");
    qg_node(m, "cast", "Cast", "s", "sf");
    qg_node(m, "shape_mul", "Mul", "sf,sf", "sm");
    qg_node(m, "shape_mm", "MatMul", "sm,sm", "smm");
    qg_node(m, "cast2", "Cast", "smm", "si");
    qg_node(m, "reshape", "Reshape", "x,si", "xr");
    qg_node(m, "mm", "MatMul", "xr,w", "y");
    /* Integer MatMul: no float edge to quantize. */
    qg_node(m, "imm", "MatMul", "ia,ib", "iy");
    /* Scalar activation: never quantized. */
    qg_node(m, "smul", "MatMul", "y,sc", "ys");
    qg_output(m, "ys");
    qg_output(m, "iy");
    qg_sort(m);
    const char **notes = calloc(m->graph->n_nodes, sizeof *notes);
    struct qp_placement *p = run_opts(m, &INT8, notes);
    char *got = dump(p);
    assert_string_equal(got, "e xr mm 0 trt.matmul_input\n"
                             "e y smul 0 trt.matmul_input\n"
                             "w w mm 1 1 trt.matmul_weight\n");
    assert_string_equal(notes[qp_graph_find_node(m->graph, "shape_mm")], "trt.shape_subgraph");
    free(got);
    free(notes);
    qp_placement_free(p);
    qp_model_free(m);
}

static void test_existing_qdq_untouched(void **state) {
    (void)state;
    struct qp_model *m = qp_model_create();
    qg_input(m, "x");
    qg_init(m, "s", 0, NULL);
    qg_node(m, "q", "QuantizeLinear", "x,s", "xq");
    qg_node(m, "dq", "DequantizeLinear", "xq,s", "xd");
    conv(m, "conv", "xd", "y", 32, 32, 3);
    qg_output(m, "y");
    qg_sort(m);
    expect(m, &INT8, "");
    qp_model_free(m);
}

/* ---- user lists ----------------------------------------------------------------------------- */

static void test_user_lists(void **state) {
    (void)state;
    struct qp_error err = {0};
    struct qp_model *m = resnet();
    struct qp_select *s = qp_select_create();
    assert_int_equal(qp_select_add(s, QP_SELECT_NODES_TO_EXCLUDE, "conv[25]$", &err), QP_OK);
    assert_int_equal(qp_select_add(s, QP_SELECT_OP_TYPES_TO_EXCLUDE, "Gemm", &err), QP_OK);
    struct qp_policy_options o = {.mode = QP_QUANT_INT8, .select = s};
    const char **notes = calloc(m->graph->n_nodes, sizeof *notes);
    struct qp_placement *p = run_opts(m, &o, notes);
    assert_false(qp_placement_find(p, "conv2", 0, NULL, NULL));
    assert_false(qp_placement_find(p, "conv5", 1, NULL, NULL));
    assert_false(qp_placement_find(p, "fc", 0, NULL, NULL));
    assert_true(qp_placement_find(p, "conv1", 0, NULL, NULL));
    assert_string_equal(notes[qp_graph_find_node(m->graph, "conv2")], "user.exclude");
    /* The GAP no longer has a quantized consumer. */
    assert_false(qp_placement_find(p, "gap", 0, NULL, NULL));
    qp_placement_free(p);
    qp_select_free(s);

    /* nodes_to_quantize: exactly those nodes, every input ORT would quantize. */
    s = qp_select_create();
    assert_int_equal(qp_select_add(s, QP_SELECT_NODES_TO_QUANTIZE, "conv1", &err), QP_OK);
    assert_int_equal(qp_select_add(s, QP_SELECT_NODES_TO_QUANTIZE, "add2", &err), QP_OK);
    o.select = s;
    p = run_opts(m, &o, NULL);
    char *got = dump(p);
    assert_string_equal(got, "e p0 conv1 0 user.nodes_to_quantize\n"
                             "e b6 add2 0 user.nodes_to_quantize\n"
                             "e r3 add2 1 user.nodes_to_quantize\n"
                             "w conv1.w conv1 1 0 user.nodes_to_quantize\n");
    free(got);
    qp_placement_free(p);
    qp_select_free(s);

    /* op_types_to_quantize: every node of those types. */
    s = qp_select_create();
    assert_int_equal(
        qp_select_add(s, QP_SELECT_OP_TYPES_TO_QUANTIZE, "Add,GlobalAveragePool", &err), QP_OK);
    o.select = s;
    p = run_opts(m, &o, NULL);
    got = dump(p);
    assert_string_equal(got, "e b3 add1 0 user.op_types_to_quantize\n"
                             "e bd add1 1 user.op_types_to_quantize\n"
                             "e b6 add2 0 user.op_types_to_quantize\n"
                             "e r3 add2 1 user.op_types_to_quantize\n"
                             "e r6 gap 0 user.op_types_to_quantize\n");
    free(got);
    qp_placement_free(p);
    /* FP8 accepts only Conv, Gemm, MatMul, Add. */
    o.mode = QP_QUANT_FP8;
    struct qp_placement *q = qp_placement_create();
    assert_int_equal(qp_policy_trt(m->graph, &o, q, NULL, &err), QP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "'GlobalAveragePool'"));
    qp_placement_free(q);
    qp_select_free(s);
    free(notes);
    qp_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resnet_bottleneck),
        cmocka_unit_test(test_vit_block),
        cmocka_unit_test(test_masked_mha_core),
        cmocka_unit_test(test_conv_layernorm),
        cmocka_unit_test(test_foreign_domain_conv),
        cmocka_unit_test(test_se_block_mul),
        cmocka_unit_test(test_concat),
        cmocka_unit_test(test_resize),
        cmocka_unit_test(test_constant_node_weight),
        cmocka_unit_test(test_small_and_nonconst_convs),
        cmocka_unit_test(test_gemv_and_small_gemm),
        cmocka_unit_test(test_pool_and_graph_output),
        cmocka_unit_test(test_foreign_domain_pool),
        cmocka_unit_test(test_shapes_scalars_dtypes),
        cmocka_unit_test(test_existing_qdq_untouched),
        cmocka_unit_test(test_user_lists),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
