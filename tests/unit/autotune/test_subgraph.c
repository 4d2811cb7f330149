/* Sub-models for region-local timing (autotune/subgraph.h): for every pattern of a ResNet-like
 * and a ViT-like model, the sub-model is a valid model that runs in the engine, its outputs
 * equal the whole model's tensors of those names when fed the whole model's values of its
 * inputs, and the trt placement restricted to it is written with every Q/DQ (border ones
 * included) and runs on the int8 path; qp_subgraph_write quantizes the outputs the whole model
 * reads quantized outside, with the placement's entries inside the sub-model or without them. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "autotune/region.h"
#include "autotune/subgraph.h"
#include "ir/ir.h"
#include "placement/diff.h"
#include "placement/placement.h"
#include "quant/policy_trt.h"
#include "quant/writer.h"
#include "qplace/model.h"
#include "qplace/session.h"
#include "runtime/bench.h"

#define MODELS QP_TEST_DATA_DIR "/../integration/quantize_models"
#define DEEP   QP_TEST_DATA_DIR "/../unit/autotune/data"

/* Every tensor of a whole-model run, by name (full copies). */
struct recorded {
    size_t n;
    char *names[4096];
    struct qp_array values[4096];
};

static int record(const char *tensor, const char *node, const struct qp_array *v, void *user) {
    (void)node;
    struct recorded *r = user;
    if (r->n >= 4096) return 1;
    struct qp_error err = {0};
    if (qp_array_alloc(&r->values[r->n], v->dtype, v->rank, v->dims, &err) != QP_OK) return 1;
    memcpy(r->values[r->n].data, v->data, v->nbytes);
    r->names[r->n++] = strdup(tensor);
    return 0;
}

static const struct qp_array *find(const struct recorded *r, const char *name) {
    for (size_t i = 0; i < r->n; i++)
        if (strcmp(r->names[i], name) == 0) return &r->values[i];
    return NULL;
}

static void record_free(struct recorded *r) {
    for (size_t i = 0; i < r->n; i++) {
        free(r->names[i]);
        qp_array_release(&r->values[i]);
    }
    free(r);
}

/* The whole model's run on bench inputs, every computed tensor and the inputs recorded. */
static struct recorded *run_whole(struct qp_model *m, struct qp_array **inputs_out, size_t *n_in) {
    struct qp_error err = {0};
    struct recorded *r = calloc(1, sizeof *r);
    struct qp_shape *sh = NULL;
    size_t n_sh = 0;
    assert_int_equal(qp_bench_input_shapes(m, 0, NULL, &sh, &n_sh, &err), QP_OK);
    struct qp_session *s = NULL;
    struct qp_session_options so = {.n_threads = 1, .lazy_plan = 1, .no_fusion = 1};
    assert_int_equal(qp_session_create(m, &so, n_sh, sh, &s, &err), QP_OK);
    qp_session_set_observer(s, record, r);
    assert_int_equal(qp_bench_inputs_create(s, n_sh, sh, inputs_out, &err), QP_OK);
    *n_in = qp_session_n_inputs(s);
    for (size_t i = 0; i < *n_in; i++) { /* the graph inputs, by name */
        struct qp_array *a = &r->values[r->n];
        assert_int_equal(qp_array_alloc(a, (*inputs_out)[i].dtype, (*inputs_out)[i].rank,
                                        (*inputs_out)[i].dims, &err),
                         QP_OK);
        memcpy(a->data, (*inputs_out)[i].data, a->nbytes);
        r->names[r->n++] = strdup(qp_session_input_name(s, i));
    }
    assert_int_equal(qp_session_run(s, *n_in, *inputs_out, &err), QP_OK);
    qp_session_free(s);
    free(sh);
    return r;
}

static int amax_one(void *user, const char *tensor, float *amax_out) {
    (void)user;
    (void)tensor;
    *amax_out = 4.0f;
    return 1;
}

/* Runs `sub` on the whole run's values of its inputs and compares its outputs with them. */
static void check_values(struct qp_model *sub, const struct recorded *whole) {
    struct qp_error err = {0};
    struct qp_graph *g = sub->graph;
    struct qp_shape *sh = calloc(g->n_inputs, sizeof *sh);
    for (size_t i = 0; i < g->n_inputs; i++) {
        const struct qp_array *a = find(whole, g->values[g->inputs[i]].name);
        if (!a) fail_msg("sub-model input '%s' not in the whole run", g->values[g->inputs[i]].name);
        sh[i].name = g->values[g->inputs[i]].name;
        sh[i].rank = a->rank;
        memcpy(sh[i].dims, a->dims, sizeof sh[i].dims);
    }
    struct qp_session *s = NULL;
    struct qp_session_options so = {.n_threads = 1, .no_fusion = 1};
    assert_int_equal(qp_session_create(sub, &so, g->n_inputs, sh, &s, &err), QP_OK);
    size_t n_in = qp_session_n_inputs(s);
    struct qp_array *in = calloc(n_in ? n_in : 1, sizeof *in);
    for (size_t i = 0; i < n_in; i++)
        in[i] = *find(whole, qp_session_input_name(s, i)); /* borrowed */
    assert_int_equal(qp_session_run(s, n_in, in, &err), QP_OK);
    assert_true(g->n_outputs > 0);
    for (size_t o = 0; o < g->n_outputs; o++) {
        struct qp_array view;
        assert_int_equal(qp_session_output(s, o, &view, &err), QP_OK);
        const struct qp_array *out = &view;
        const struct qp_array *want = find(whole, g->values[g->outputs[o]].name);
        assert_non_null(want);
        assert_int_equal(out->nbytes, want->nbytes);
        assert_int_equal(out->dtype, QP_DTYPE_FLOAT);
        const float *a = out->data, *b = want->data;
        for (size_t k = 0; k < out->nbytes / sizeof(float); k++)
            if (!(fabsf(a[k] - b[k]) <= 1e-5f + 1e-4f * fabsf(b[k])))
                fail_msg("output '%s'[%zu]: %g, whole model %g", g->values[g->outputs[o]].name, k,
                         a[k], b[k]);
    }
    qp_session_free(s);
    free(in);
    free(sh);
}

/* The trt placement restricted to `sub`, written: every entry becomes a Q/DQ (diff SAME), one at
 * least on a sub-model graph input (a border), and the model runs on the int8 path. Returns the
 * number of border edges. */
static size_t check_qdq(struct qp_model *whole, struct qp_model *sub) {
    struct qp_error err = {0};
    struct qp_placement *p = NULL, *ps = NULL;
    struct qp_trt_options trt = {.quantize_mode = QP_QUANT_INT8};
    assert_int_equal(qp_placement_trt(whole, &trt, &p, &err), QP_OK);
    assert_int_equal(qp_subgraph_placement(p, sub, &ps, &err), QP_OK);
    size_t in_sub = 0, border = 0;
    for (size_t i = 0; i < p->n_edges; i++)
        if (qp_graph_find_node(sub->graph, p->edges[i].node) >= 0) in_sub++;
    for (size_t i = 0; i < p->n_weights; i++)
        if (qp_graph_find_node(sub->graph, p->weights[i].node) >= 0) in_sub++;
    assert_int_equal(ps->n_edges + ps->n_weights, in_sub);
    for (size_t i = 0; i < ps->n_edges; i++) {
        int v = qp_graph_find_value(sub->graph, ps->edges[i].tensor);
        if (v >= 0 && sub->graph->values[v].is_graph_input) border++;
    }
    struct qp_model *q = NULL;
    assert_int_equal(qp_model_clone(sub, &q, &err), QP_OK);
    struct qp_writer_options wo;
    qp_writer_options_default(&wo);
    wo.amax = amax_one;
    assert_int_equal(qp_qdq_write(q, ps, &wo, NULL, &err), QP_OK);
    struct qp_qdq_slots *slots = NULL;
    assert_int_equal(qp_qdq_slots_from_model(q->graph, &slots, &err), QP_OK);
    assert_int_equal(slots->n, in_sub);
    qp_qdq_slots_free(slots);
    struct qp_shape *sh = NULL;
    size_t n_sh = 0;
    assert_int_equal(qp_bench_input_shapes(q, 0, NULL, &sh, &n_sh, &err), QP_OK);
    struct qp_bench_options bo = {.warmup = 1, .iterations = 2, .n_threads = 1};
    struct qp_bench_result br = {0};
    assert_int_equal(qp_bench_measure(q, n_sh, sh, &bo, &br, &err), QP_OK);
    assert_true(br.median_ms > 0);
    qp_bench_result_release(&br);
    free(sh);
    qp_model_free(q);
    qp_placement_free(ps);
    qp_placement_free(p);
    return border;
}

/* How the whole model reads sub-model output `name` outside `sub` under placement p. */
static void reads_outside(const struct qp_graph *whole, const struct qp_graph *sub,
                          const struct qp_placement *p, const char *name, int *quant, int *flt) {
    const struct qp_value *val = &whole->values[qp_graph_find_value(whole, name)];
    *quant = 0;
    *flt = val->is_graph_output;
    for (size_t u = 0; u < val->n_uses; u++) {
        const char *c = whole->nodes[val->uses[u].node].name;
        if (qp_graph_find_node(sub, c) >= 0) continue;
        int w = 0;
        if (qp_placement_find(p, c, val->uses[u].input, &w, NULL) && !w)
            *quant = 1;
        else
            *flt = 1;
    }
}

/* qp_subgraph_write with placement p: every output of `sub` the whole model reads quantized
 * outside is, in the written model, the input of a QuantizeLinear whose int8 output is a graph
 * output, and stays a float graph output only when read unquantized outside; every input the
 * whole model reads only quantized (not a graph input there) is replaced by the int8 tensor its
 * DequantizeLinear reads (counted in *inputs_q); the model runs on the int8 path. Returns the
 * number of outputs written quantized. */
static size_t check_write(struct qp_model *whole, struct qp_model *sub,
                          const struct qp_placement *p, enum qp_dtype high, size_t *inputs_q) {
    struct qp_error err = {0};
    struct qp_writer_options wo;
    qp_writer_options_default(&wo);
    wo.amax = amax_one;
    wo.high_precision = high;
    struct qp_model *w = NULL;
    if (qp_subgraph_write(sub, whole->graph, p, &wo, &w, &err) != QP_OK) fail_msg("%s", err.msg);
    const struct qp_graph *g = w->graph;
    size_t quantized = 0;
    for (size_t i = 0; i < sub->graph->n_outputs; i++) {
        const char *name = sub->graph->values[sub->graph->outputs[i]].name;
        int quant = 0, flt = 0;
        reads_outside(whole->graph, sub->graph, p, name, &quant, &flt);
        int v = qp_graph_find_value(g, name);
        assert_true(v >= 0);
        if (g->values[v].is_graph_output != flt)
            fail_msg("'%s': graph output %d, read unquantized outside %d", name,
                     g->values[v].is_graph_output, flt);
        int q_out = 0; /* its quantizer (scale `<t>_scale`, the writer's name; behind a Cast in
                          fp16) writes a graph output */
        char scale[256];
        snprintf(scale, sizeof scale, "%s_scale", name);
        for (size_t k = 0; k < g->n_nodes; k++) {
            const struct qp_node *c = &g->nodes[k];
            if (!c->dead && qp_node_is(c, "QuantizeLinear") &&
                strcmp(g->values[c->inputs[1]].name, scale) == 0 &&
                g->values[c->outputs[0]].is_graph_output)
                q_out = 1;
        }
        if (q_out != quant)
            fail_msg("'%s': quantized output %d, read quantized %d", name, q_out, quant);
        quantized += (size_t)quant;
    }
    for (size_t i = 0; i < sub->graph->n_inputs; i++) { /* int8 where only quantized readers */
        const char *name = sub->graph->values[sub->graph->inputs[i]].name;
        const struct qp_value *wv = &whole->graph->values[qp_graph_find_value(whole->graph, name)];
        int only_q = !wv->is_graph_input && !wv->is_graph_output && wv->n_uses > 0;
        for (size_t u = 0; u < wv->n_uses && only_q; u++) {
            int is_w = 0;
            only_q = qp_placement_find(p, whole->graph->nodes[wv->uses[u].node].name,
                                       wv->uses[u].input, &is_w, NULL) &&
                     !is_w;
        }
        int v = qp_graph_find_value(g, name);
        int still = v >= 0 && g->values[v].is_graph_input;
        if (still == only_q)
            fail_msg("input '%s': float %d, read quantized only %d", name, still, only_q);
        if (!only_q) continue;
        int found = 0; /* the int8 tensor of its quantizer is an input read by a DequantizeLinear */
        for (size_t k = 0; k < g->n_inputs; k++) {
            const struct qp_value *iv = &g->values[g->inputs[k]];
            if (iv->dtype != QP_DTYPE_INT8 || !iv->n_uses) continue;
            const struct qp_node *dq = &g->nodes[iv->uses[0].node];
            const char *sc = g->values[dq->inputs[1]].name;
            found |= qp_node_is(dq, "DequantizeLinear") && strncmp(sc, name, strlen(name)) == 0;
        }
        if (!found) fail_msg("input '%s': no int8 graph input feeds its DequantizeLinear", name);
        (*inputs_q)++;
    }
    for (size_t k = 0; k < g->n_nodes; k++)
        assert_true(g->nodes[k].dead || !qp_node_is(&g->nodes[k], "Identity") ||
                    strncmp(g->nodes[k].name, "qp_border", 9) != 0);
    struct qp_shape *sh = NULL;
    size_t n_sh = 0;
    assert_int_equal(qp_bench_input_shapes(w, 0, NULL, &sh, &n_sh, &err), QP_OK);
    struct qp_bench_options bo = {.warmup = 1, .iterations = 1, .n_threads = 1};
    struct qp_bench_result br = {0};
    assert_int_equal(qp_bench_measure(w, n_sh, sh, &bo, &br, &err), QP_OK);
    qp_bench_result_release(&br);
    free(sh);
    qp_model_free(w);
    return quantized;
}

/* check_write with the trt placement (fp32 and fp16 high precision, where Casts stand between
 * the graph's inputs and outputs and the Q/DQ) and with the trt placement less every entry
 * inside `sub` (the border's quantization comes from outside alone). */
static size_t check_writes(struct qp_model *whole, struct qp_model *sub, size_t *inputs_q) {
    struct qp_error err = {0};
    struct qp_placement *p = NULL, *outside = NULL;
    struct qp_trt_options trt = {.quantize_mode = QP_QUANT_INT8};
    assert_int_equal(qp_placement_trt(whole, &trt, &p, &err), QP_OK);
    assert_int_equal(qp_placement_copy(p, &outside, &err), QP_OK);
    for (size_t i = 0; i < p->n_edges; i++)
        if (qp_graph_find_node(sub->graph, p->edges[i].node) >= 0)
            qp_placement_remove(outside, p->edges[i].node, p->edges[i].input);
    size_t before = *inputs_q, none = 0, in16 = 0;
    size_t n = check_write(whole, sub, p, QP_DTYPE_FLOAT, inputs_q);
    assert_int_equal(check_write(whole, sub, p, QP_DTYPE_FLOAT16, &in16), n); /* through Casts */
    assert_int_equal(in16, *inputs_q - before);
    assert_int_equal(check_write(whole, sub, outside, QP_DTYPE_FLOAT, &none), n);
    assert_int_equal(none, 0); /* no reader inside is quantized, so no input is int8 */
    qp_placement_free(outside);
    qp_placement_free(p);
    return n;
}

/* No kept node's output is an intermediate of a step the engine fuses: where a kept node's single
 * output has one reader that runs as its post-operation (Relu, Clip, BatchNormalization, ...),
 * that reader is kept too, so the sub-model writes what the whole model's fused step writes.
 * Returns how many such readers the set holds (the closure's additions and instances' own). */
static size_t check_fused_closure(const struct qp_graph *g, const unsigned char *keep) {
    static const char *const post[] = {"Relu",        "Clip",      "LeakyRelu",         "Sigmoid",
                                       "HardSigmoid", "HardSwish", "BatchNormalization"};
    size_t held = 0;
    for (size_t n = 0; n < g->n_nodes; n++) {
        const struct qp_node *nd = &g->nodes[n];
        if (!keep[n] || nd->dead || nd->n_outputs != 1 || nd->outputs[0] < 0) continue;
        const struct qp_value *v = &g->values[nd->outputs[0]];
        if (v->n_uses != 1 || v->is_graph_output) continue;
        int c = v->uses[0].node;
        int fuses = 0;
        for (size_t k = 0; k < sizeof post / sizeof post[0]; k++)
            fuses |= qp_node_is(&g->nodes[c], post[k]);
        if (!fuses || g->nodes[c].dead) continue;
        if (!keep[c])
            fail_msg("node '%s' is kept but '%s', which fuses after it, is not", nd->name,
                     g->nodes[c].name);
        held++;
    }
    return held;
}

/* A model with its regions and a recorded whole-model run (open_model / close_model). */
struct opened {
    struct qp_model *m;
    struct qp_regions *rs;
    struct qp_array *inputs;
    size_t n_in;
    struct recorded *whole;
};

static void open_model(const char *path, struct opened *o) {
    struct qp_error err = {0};
    memset(o, 0, sizeof *o);
    assert_int_equal(qp_model_load_file(path, NULL, &o->m, &err), QP_OK);
    assert_int_equal(qp_regions_build(o->m->graph, &o->rs, &err), QP_OK);
    o->whole = run_whole(o->m, &o->inputs, &o->n_in);
}

static void close_model(struct opened *o) {
    qp_bench_inputs_free(o->inputs, o->n_in);
    record_free(o->whole);
    qp_regions_free(o->rs);
    qp_model_free(o->m);
}

static void check_model(const char *path) {
    struct qp_error err = {0};
    struct opened o;
    open_model(path, &o);
    struct qp_model *m = o.m;
    struct qp_regions *rs = o.rs;
    struct recorded *whole = o.whole;
    struct qp_graph *g = m->graph;
    int *vals = NULL;
    size_t n = 0, cap = 0, borders = 0, checked = 0, quantized_outputs = 0, quantized_inputs = 0;
    unsigned char **keep = calloc(rs->n_patterns, sizeof *keep);
    for (size_t p = 0; p < rs->n_patterns; p++) {
        keep[p] = calloc(g->n_nodes, 1);
        size_t marked = qp_subgraph_nodes(rs, p, NULL, keep[p]);
        size_t own = 0;
        for (size_t r = 0; r < rs->n_regions; r++)
            if (rs->regions[r].pattern == (int)p) own += rs->regions[r].n_nodes;
        assert_true(marked >= own);
        check_fused_closure(g, keep[p]);
        assert_int_equal(qp_subgraph_border(g, keep[p], &vals, &n, &cap, &err), QP_OK);
    }
    struct qp_subgraph_capture *c = NULL;
    assert_int_equal(qp_subgraph_capture(m, NULL, vals, n, 1, &c, &err), QP_OK);
    for (size_t p = 0; p < rs->n_patterns; p++) {
        struct qp_model *sub = NULL;
        if (qp_subgraph_extract(m, keep[p], c, &sub, &err) != QP_OK)
            fail_msg("pattern %zu: %s", p, err.msg);
        size_t live = 0;
        for (size_t k = 0; k < sub->graph->n_nodes; k++)
            live += !sub->graph->nodes[k].dead;
        size_t want = 0;
        for (size_t k = 0; k < g->n_nodes; k++)
            want += keep[p][k] && !g->nodes[k].dead;
        assert_int_equal(live, want);
        assert_true(sub->graph->n_inits <= g->n_inits + n);
        check_values(sub, whole);
        borders += check_qdq(m, sub);
        quantized_outputs += check_writes(m, sub, &quantized_inputs);
        checked++;
        qp_model_free(sub);
        free(keep[p]);
    }
    assert_true(checked >= 2);
    assert_true(borders > 0);
    assert_true(quantized_outputs > 0);
    assert_true(quantized_inputs > 0);
    free(keep);
    free(vals);
    qp_subgraph_capture_free(c);
    close_model(&o);
}

static void test_resnet_like(void **state) {
    (void)state;
    check_model(MODELS "/resnet_like.onnx");
}

static void test_resnet_deep(void **state) {
    (void)state;
    check_model(DEEP "/resnet_deep.onnx");
}

static void test_vit_like(void **state) {
    (void)state;
    check_model(MODELS "/vit_like.onnx");
}

static void test_vit_deep(void **state) {
    (void)state;
    check_model(DEEP "/vit_deep.onnx");
}

/* A whole model's unused initializers do not follow into a sub-model. */
static void test_initializers_pruned(void **state) {
    (void)state;
    struct qp_error err = {0};
    struct qp_model *m = NULL;
    assert_int_equal(qp_model_load_file(DEEP "/resnet_deep.onnx", NULL, &m, &err), QP_OK);
    struct qp_regions *rs = NULL;
    assert_int_equal(qp_regions_build(m->graph, &rs, &err), QP_OK);
    unsigned char *keep = calloc(m->graph->n_nodes, 1);
    qp_subgraph_nodes(rs, rs->regions[rs->n_regions - 1].pattern, NULL, keep);
    int *vals = NULL;
    size_t n = 0, cap = 0;
    assert_int_equal(qp_subgraph_border(m->graph, keep, &vals, &n, &cap, &err), QP_OK);
    assert_true(n > 0);
    struct qp_subgraph_capture *c = NULL;
    assert_int_equal(qp_subgraph_capture(m, NULL, vals, n, 1, &c, &err), QP_OK);
    struct qp_model *sub = NULL;
    assert_int_equal(qp_subgraph_extract(m, keep, c, &sub, &err), QP_OK);
    assert_true(sub->graph->n_inits < m->graph->n_inits);
    for (size_t i = 0; i < sub->graph->n_inits; i++)
        assert_true(sub->graph->values[sub->graph->inits_value[i]].n_uses > 0);
    /* a tensor entering the set but missing from the capture is bad input */
    struct qp_subgraph_capture empty = {0};
    struct qp_model *bad = NULL;
    assert_int_equal(qp_subgraph_extract(m, keep, &empty, &bad, &err), QP_ERR_BAD_INPUT);
    assert_null(bad);
    assert_non_null(strstr(err.msg, "not captured"));
    qp_model_free(sub);
    qp_subgraph_capture_free(c);
    free(vals);
    free(keep);
    qp_regions_free(rs);
    qp_model_free(m);
}

/* Instances of pattern p marked in `in` (NULL: all), counted. */
static size_t count_instances(const struct qp_regions *rs, size_t p, const unsigned char *in) {
    size_t n = 0;
    for (size_t r = 0; r < rs->n_regions; r++)
        n += rs->regions[r].pattern == (int)p && (!in || in[r]);
    return n;
}

/* Representatives (qp_subgraph_representatives) of every pattern of the model at `path`: a
 * capture of what qp_subgraph_instance_border lists is enough to cut their sub-model, which
 * gives the whole model's values and is written and run on the int8 path; the first instance
 * is always chosen, the choice is the same twice, and alike instances are left out. Returns
 * the largest pattern's (most instances) instance and representative counts. */
static void check_representatives(const char *path, size_t *n_inst, size_t *n_rep) {
    struct qp_error err = {0};
    struct opened o;
    open_model(path, &o);
    struct qp_model *m = o.m;
    struct qp_regions *rs = o.rs;
    struct recorded *whole = o.whole;
    int *vals = NULL;
    size_t n = 0, cap = 0, qi = 0;
    for (size_t p = 0; p < rs->n_patterns; p++)
        assert_int_equal(qp_subgraph_instance_border(rs, p, &vals, &n, &cap, &err), QP_OK);
    struct qp_subgraph_capture *c = NULL;
    assert_int_equal(qp_subgraph_capture(m, NULL, vals, n, 1, &c, &err), QP_OK);
    unsigned char *chosen = calloc(rs->n_regions, 1), *again = calloc(rs->n_regions, 1);
    *n_inst = *n_rep = 0;
    for (size_t p = 0; p < rs->n_patterns; p++) {
        size_t k = qp_subgraph_representatives(rs, p, NULL, c, chosen);
        assert_int_equal(qp_subgraph_representatives(rs, p, NULL, c, again), k);
        assert_memory_equal(chosen, again, rs->n_regions);
        assert_int_equal(count_instances(rs, p, chosen), k);
        assert_true(k >= 1 && k <= rs->patterns[p].n_instances);
        size_t r0 = 0;
        while (rs->regions[r0].pattern != (int)p)
            r0++;
        assert_true(chosen[r0]);
        if (rs->patterns[p].n_instances > *n_inst) {
            *n_inst = rs->patterns[p].n_instances;
            *n_rep = k;
        }
        unsigned char *keep = calloc(m->graph->n_nodes, 1), *all = calloc(m->graph->n_nodes, 1);
        qp_subgraph_nodes(rs, p, chosen, keep);
        qp_subgraph_nodes(rs, p, NULL, all);
        size_t nk = 0, na = 0;
        for (size_t i = 0; i < m->graph->n_nodes; i++) {
            nk += keep[i];
            na += all[i];
            assert_true(!keep[i] || all[i]);
        }
        assert_true(k == rs->patterns[p].n_instances ? nk == na : nk < na);
        struct qp_model *sub = NULL;
        if (qp_subgraph_extract(m, keep, c, &sub, &err) != QP_OK)
            fail_msg("pattern %zu: %s", p, err.msg);
        check_values(sub, whole);
        check_writes(m, sub, &qi);
        qp_model_free(sub);
        free(keep);
        free(all);
    }
    free(chosen);
    free(again);
    free(vals);
    qp_subgraph_capture_free(c);
    close_model(&o);
}

/* One instance stands for alike ones: vit_deep's four blocks and resnet_deep's three identity
 * bottlenecks are each timed as one; resnet_stages' identity bottlenecks (two at 16 channels
 * 8x8, two at 32 channels 4x4) as two, one per shape, and as one when only the second stage's
 * are searched. */
static void test_representatives(void **state) {
    (void)state;
    size_t ni = 0, nr = 0;
    check_representatives(DEEP "/vit_deep.onnx", &ni, &nr);
    assert_true(ni >= 3 && nr == 1);
    check_representatives(DEEP "/resnet_deep.onnx", &ni, &nr);
    assert_true(ni == 3 && nr == 1);
    check_representatives(DEEP "/resnet_stages.onnx", &ni, &nr);
    assert_true(ni == 4 && nr == 2);
    check_representatives(MODELS "/resnet_like.onnx", &ni, &nr);
    assert_true(nr == ni);
    /* the searched subset: the second stage's instances only */
    struct qp_error err = {0};
    struct qp_model *m = NULL;
    assert_int_equal(qp_model_load_file(DEEP "/resnet_stages.onnx", NULL, &m, &err), QP_OK);
    struct qp_regions *rs = NULL;
    assert_int_equal(qp_regions_build(m->graph, &rs, &err), QP_OK);
    size_t p = 0;
    while (rs->patterns[p].n_instances != 4)
        p++;
    int *vals = NULL;
    size_t n = 0, cap = 0;
    assert_int_equal(qp_subgraph_instance_border(rs, p, &vals, &n, &cap, &err), QP_OK);
    struct qp_subgraph_capture *c = NULL;
    assert_int_equal(qp_subgraph_capture(m, NULL, vals, n, 1, &c, &err), QP_OK);
    unsigned char *in = calloc(rs->n_regions, 1), *chosen = calloc(rs->n_regions, 1);
    size_t seen = 0, second = 0;
    for (size_t r = 0; r < rs->n_regions; r++)
        if (rs->regions[r].pattern == (int)p && seen++ >= 2) {
            in[r] = 1;
            if (!second) second = r;
        }
    assert_int_equal(qp_subgraph_representatives(rs, p, in, c, chosen), 1);
    assert_true(chosen[second]);
    assert_int_equal(count_instances(rs, p, chosen), 1);
    free(in);
    free(chosen);
    free(vals);
    qp_subgraph_capture_free(c);
    qp_regions_free(rs);
    qp_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resnet_like),
        cmocka_unit_test(test_resnet_deep),
        cmocka_unit_test(test_vit_like),
        cmocka_unit_test(test_vit_deep),
        cmocka_unit_test(test_initializers_pruned),
        cmocka_unit_test(test_representatives),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
