/*
 * Bias correction (src/adjust/bias_correct.h) on hand-built layers whose weights round upward
 * when quantized (many small weights beside one large one in each channel), so the quantized
 * layer's output channels are shifted up: for Conv with and without a bias and with a bias two
 * Convs share, MatMul with and without a following Add, Gemm with a C read with beta 0.5 and
 * without C. Each case writes a clone of the model with the real writer and runs it in the
 * engine against the float model on the same data, before and after the correction: the mean
 * per-channel shift must fall below 1% of what it was. Biases stay float constants, shared
 * constants are copied rather than changed, and through qp_quantize_model the caller's model
 * stays byte for byte the same.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../quant/qgraph.h"
#include "adjust_data.h"

#include "adjust/bias_correct.h"
#include "core/arena.h"
#include "ir/ir.h"
#include "placement/placement.h"
#include "qplace/calib.h"
#include "qplace/model.h"
#include "qplace/quantize.h"
#include "qplace/session.h"
#include "quant/writer.h"

static struct qp_model *model_create(void) {
    struct qp_model *m = qp_model_create();
    assert_non_null(m);
    qg_set_opset(m, 19);
    return m;
}

/* n weights per channel, channel-major: one 1.0 (the absmax: scale 1/127) and the rest
 * 0.0123 * (1 + 0.1 c), which round up to 2/127 (c = 0) and so on: the channel's sum of weight
 * errors is positive, so is the output's mean shift on positive inputs. With `transposed`, the
 * layout is [n, n_ch] (MatMul's, Gemm's without transB) and the channel is the column. */
static void biased_weights(float *w, int n_ch, int n, int transposed) {
    for (int c = 0; c < n_ch; c++)
        for (int k = 0; k < n; k++) {
            float v = k == (c * 7) % n ? 1.0f : 0.0123f * (1.0f + 0.1f * (float)c);
            if (c % 2) v = k == (c * 7) % n ? -1.0f : v; /* a negative absmax changes nothing */
            w[transposed ? k * n_ch + c : c * n + k] = v;
        }
}

/* Per output and channel, |mean(quantized - float)| over the data: the largest and the mean
 * over all outputs' channels. `m` is written (a clone) with `pl`; `mf` is the float reference.
 * Channels are axis 1 when conv, else the last axis. */
static void shift_of(const struct qp_model *mf, const struct qp_model *m,
                     const struct qp_placement *pl, struct data *d, int conv, double *max_out,
                     double *mean_out) {
    struct qp_error err = {0};
    struct qp_model *w = NULL;
    assert_int_equal(qp_model_clone(m, &w, &err), QP_OK);
    struct qp_writer_options wo;
    writer_opts(&wo);
    if (qp_qdq_write(w, pl, &wo, NULL, &err) != QP_OK) fail_msg("write: %s", err.msg);
    struct qp_session *sf = NULL, *sq = NULL;
    assert_int_equal(qp_session_create(mf, NULL, 0, NULL, &sf, &err), QP_OK);
    assert_int_equal(qp_session_create(w, NULL, 0, NULL, &sq, &err), QP_OK);
    size_t n_out = qp_session_n_outputs(sf);
    assert_int_equal(n_out, qp_session_n_outputs(sq));
    static double sum[8][64];
    static uint64_t cnt[8];
    static int64_t n_ch[8];
    memset(sum, 0, sizeof sum);
    memset(cnt, 0, sizeof cnt);
    assert_true(n_out <= 8);
    for (int b = 0; b < NB; b++) {
        struct qp_array in;
        assert_int_equal(batch(d, (uint64_t)b, &in, &err), QP_OK);
        assert_int_equal(qp_session_run(sf, 1, &in, &err), QP_OK);
        if (qp_session_run(sq, 1, &in, &err) != QP_OK) fail_msg("run: %s", err.msg);
        for (size_t o = 0; o < n_out; o++) {
            struct qp_array a, q;
            assert_int_equal(qp_session_output(sf, o, &a, &err), QP_OK);
            assert_int_equal(qp_session_output(sq, o, &q, &err), QP_OK);
            assert_int_equal(a.nbytes, q.nbytes);
            assert_int_equal(a.dtype, QP_DTYPE_FLOAT);
            int axis = conv ? 1 : a.rank - 1;
            uint64_t inner = 1, total = a.nbytes / 4;
            for (int k = axis + 1; k < a.rank; k++)
                inner *= (uint64_t)a.dims[k];
            n_ch[o] = a.dims[axis];
            assert_true(n_ch[o] <= 64);
            const float *x = a.data, *y = q.data;
            for (uint64_t i = 0; i < total; i++)
                sum[o][(i / inner) % (uint64_t)n_ch[o]] += (double)y[i] - (double)x[i];
            cnt[o] += total / (uint64_t)n_ch[o];
        }
    }
    double mx = 0, mean = 0;
    size_t n = 0;
    for (size_t o = 0; o < n_out; o++)
        for (int64_t c = 0; c < n_ch[o]; c++, n++) {
            double s = fabs(sum[o][c] / (double)cnt[o]);
            mx = fmax(mx, s);
            mean += s;
        }
    *max_out = mx;
    *mean_out = mean / (double)n;
    qp_session_free(sq);
    qp_session_free(sf);
    qp_model_free(w);
}

/* Corrects `m` on the data and checks the shift measured as the final write would see it:
 * before, a clear shift; after, below 1% of it. Returns the stats. */
static struct qp_bias_correct_stats
correct_and_check(struct qp_model *m, const struct qp_placement *pl, struct data *d, int conv) {
    struct qp_error err = {0};
    struct qp_model *mf = NULL;
    assert_int_equal(qp_model_clone(m, &mf, &err), QP_OK);
    double before_max, before_mean, after_max, after_mean;
    shift_of(mf, m, pl, d, conv, &before_max, &before_mean);
    struct qp_writer_options wo;
    writer_opts(&wo);
    struct qp_bias_correct_options bo = {.verify = 1, .writer = &wo};
    struct qp_bias_correct_stats st;
    struct qp_provider *p = provider(d);
    if (qp_bias_correct(m, pl, p, &bo, &st, &err) != QP_OK) fail_msg("correct: %s", err.msg);
    qp_provider_free(p);
    shift_of(mf, m, pl, d, conv, &after_max, &after_mean);
    print_message("shift: max %.3g mean %.3g before, max %.3g mean %.3g after; passes %.3g %.3g "
                  "%.3g\n",
                  before_max, before_mean, after_max, after_mean, st.shift[0], st.shift[1],
                  st.shift[2]);
    assert_true(before_mean > 0.01);
    if (!(after_max < 0.01 * before_mean))
        fail_msg("shift after %g, before %g", after_max, before_mean);
    assert_int_equal(st.n_rounds, 2);
    assert_int_equal(st.n_passes, 3);
    assert_int_equal(st.n_batches, NB);
    assert_true(st.shift_after < 0.01 * st.shift_before);
    qp_model_free(mf);
    return st;
}

/* Input `slot` of node `node` is a float initializer of n elements, read by that node alone. */
static const struct qp_tensor *float_bias(const struct qp_model *m, const char *node, int slot,
                                          uint64_t n) {
    const struct qp_graph *g = m->graph;
    int ni = qp_graph_find_node(g, node);
    assert_true(ni >= 0);
    assert_true(g->nodes[ni].n_inputs > slot);
    int v = g->nodes[ni].inputs[slot];
    assert_true(v >= 0);
    assert_true(g->values[v].initializer >= 0);
    assert_int_equal(g->values[v].n_uses, 1);
    const struct qp_tensor *t = &g->inits[g->values[v].initializer];
    assert_int_equal(t->dtype, QP_DTYPE_FLOAT);
    assert_int_equal(t->numel, n);
    return t;
}

static float f32_at(const void *p, size_t i) {
    float f;
    memcpy(&f, (const char *)p + 4 * i, 4);
    return f;
}

/* x[1,8,4,4] -> conv1(W1, B) -> y1, conv2(W2, B) -> y2 (B shared), conv3(W3) -> y3 (no bias). */
static struct qp_model *convs(void) {
    enum { CI = 8, CO = 4, K = 3 };
    static float w[3][CO * CI * K * K];
    for (int i = 0; i < 3; i++)
        biased_weights(w[i], CO, CI * K * K, 0);
    static const float b[CO] = {0.5f, -0.25f, 0.125f, 1.0f};
    struct qp_model *m = model_create();
    qg_shape(m, "x", QP_DTYPE_FLOAT, 4, QG_DIMS(1, CI, 4, 4));
    qg_input(m, "x");
    qg_init_data(m, "W1", 4, QG_DIMS(CO, CI, K, K), w[0]);
    qg_init_data(m, "W2", 4, QG_DIMS(CO, CI, K, K), w[1]);
    qg_init_data(m, "W3", 4, QG_DIMS(CO, CI, K, K), w[2]);
    qg_init_data(m, "B", 1, QG_DIMS(CO), b);
    const char *y[3] = {"y1", "y2", "y3"};
    const char *ins[3] = {"x,W1,B", "x,W2,B", "x,W3"};
    const char *names[3] = {"conv1", "conv2", "conv3"};
    for (int i = 0; i < 3; i++) {
        int n = qg_node(m, names[i], "Conv", ins[i], y[i]);
        struct qp_attr *a = qp_node_add_attr(m->graph, n, "pads", QP_ATTR_INTS);
        static const int64_t pads[4] = {1, 1, 1, 1};
        a->ints = pads;
        a->n = 4;
        qg_shape(m, y[i], QP_DTYPE_FLOAT, 4, QG_DIMS(1, CO, 4, 4));
        qg_output(m, y[i]);
    }
    qg_sort(m);
    return m;
}

static struct qp_placement *place(const char *const *nodes, const char *const *weights,
                                  const int *axes, int n) {
    struct qp_placement *p = qp_placement_create();
    struct qp_error err = {0};
    assert_non_null(p);
    for (int i = 0; i < n; i++) {
        assert_int_equal(qp_placement_add_edge(p, "x", nodes[i], 0, "test", &err), QP_OK);
        assert_int_equal(qp_placement_add_weight(p, weights[i], nodes[i], 1, axes[i], "test", &err),
                         QP_OK);
    }
    return p;
}

static void test_conv(void **state) {
    (void)state;
    static struct data d;
    data_init(&d, 4, QG_DIMS(1, 8, 4, 4));
    struct qp_model *m = convs();
    const char *nodes[3] = {"conv1", "conv2", "conv3"}, *ws[3] = {"W1", "W2", "W3"};
    struct qp_placement *pl = place(nodes, ws, (const int[]){0, 0, 0}, 3);
    struct qp_bias_correct_stats st = correct_and_check(m, pl, &d, 1);
    assert_int_equal(st.n_layers, 3);
    assert_int_equal(st.n_channels, 12);
    assert_int_equal(st.n_biases_added, 1); /* conv3 */
    /* B, shared, is copied for conv1 (the first corrected); conv2 then reads it alone, so
     * it is corrected in place. Each Conv reads a float bias of its own, each channel moved. */
    assert_int_equal(st.n_copied, 1);
    const struct qp_graph *g = m->graph;
    static const float b0[4] = {0.5f, -0.25f, 0.125f, 1.0f};
    const struct qp_tensor *b1 = float_bias(m, "conv1", 2, 4), *b2 = float_bias(m, "conv2", 2, 4),
                           *b3 = float_bias(m, "conv3", 2, 4);
    assert_string_equal(b1->name, "B_corrected");
    assert_string_equal(b2->name, "B");
    assert_int_equal(g->values[qp_graph_find_value(g, "B")].n_uses, 1);
    for (int c = 0; c < 4; c++) {
        assert_true(fabsf(f32_at(b1->data, (size_t)c) - b0[c]) > 1e-4f);
        assert_true(fabsf(f32_at(b2->data, (size_t)c) - b0[c]) > 1e-4f);
        assert_true(fabsf(f32_at(b3->data, (size_t)c)) > 1e-4f);
    }
    qp_placement_free(pl);
    qp_model_free(m);
}

/* A Conv bias whose size is not the channel count is bad input naming the node. */
static void test_errors(void **state) {
    (void)state;
    static struct data d;
    data_init(&d, 4, QG_DIMS(1, 8, 4, 4));
    struct qp_model *m = convs();
    static const float bad[3] = {0};
    qg_init_data(m, "Bbad", 1, QG_DIMS(3), bad);
    struct qp_error err = {0};
    int n = qp_graph_find_node(m->graph, "conv3");
    int v = qp_graph_find_value(m->graph, "Bbad");
    struct qp_node *node = &m->graph->nodes[n];
    int *in = qp_arena_calloc(m->arena, 3, sizeof *in);
    in[0] = node->inputs[0];
    in[1] = node->inputs[1];
    in[2] = -1;
    node->inputs = in;
    node->n_inputs = 3;
    assert_int_equal(qp_graph_set_input(m->graph, n, 2, v, &err), QP_OK);
    const char *nodes[1] = {"conv3"}, *ws[1] = {"W3"};
    struct qp_placement *pl = place(nodes, ws, (const int[]){0}, 1);
    struct qp_writer_options wo;
    writer_opts(&wo);
    struct qp_bias_correct_options bo = {.writer = &wo};
    struct qp_provider *p = provider(&d);
    assert_int_equal(qp_bias_correct(m, pl, p, &bo, NULL, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "'conv3'"));
    assert_non_null(strstr(err.msg, "'Bbad'"));
    bo.n_rounds = QP_BIAS_CORRECT_MAX_ROUNDS + 1;
    assert_int_equal(qp_bias_correct(m, pl, p, &bo, NULL, &err), QP_ERR_USAGE);
    qp_provider_free(p);
    qp_placement_free(pl);
    qp_model_free(m);
}

/* x[3,24] -> mm1(W1) -> t1 -> Add(t1, C1) -> y1; mm2(W2) -> y2 (no Add). */
static void test_matmul(void **state) {
    (void)state;
    enum { K = 24, N = 6 };
    static struct data d;
    data_init(&d, 2, QG_DIMS(3, K));
    static float w1[K * N], w2[K * N];
    biased_weights(w1, N, K, 1);
    biased_weights(w2, N, K, 1);
    static const float c1[N] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f};
    struct qp_model *m = model_create();
    qg_shape(m, "x", QP_DTYPE_FLOAT, 2, QG_DIMS(3, K));
    qg_input(m, "x");
    qg_init_data(m, "W1", 2, QG_DIMS(K, N), w1);
    qg_init_data(m, "W2", 2, QG_DIMS(K, N), w2);
    qg_init_data(m, "C1", 1, QG_DIMS(N), c1);
    qg_node(m, "mm1", "MatMul", "x,W1", "t1");
    qg_node(m, "add1", "Add", "C1,t1", "y1");
    qg_node(m, "mm2", "MatMul", "x,W2", "y2");
    qg_shape(m, "t1", QP_DTYPE_FLOAT, 2, QG_DIMS(3, N));
    qg_shape(m, "y1", QP_DTYPE_FLOAT, 2, QG_DIMS(3, N));
    qg_shape(m, "y2", QP_DTYPE_FLOAT, 2, QG_DIMS(3, N));
    qg_output(m, "y1");
    qg_output(m, "y2");
    qg_sort(m);
    const char *nodes[2] = {"mm1", "mm2"}, *ws[2] = {"W1", "W2"};
    struct qp_placement *pl = place(nodes, ws, (const int[]){1, 1}, 2);
    struct qp_bias_correct_stats st = correct_and_check(m, pl, &d, 0);
    assert_int_equal(st.n_layers, 2);
    assert_int_equal(st.n_biases_added, 1);
    assert_int_equal(st.n_copied, 0);
    /* add1's constant corrected in place (still C1, still [N], each channel moved). */
    const struct qp_tensor *c = float_bias(m, "add1", 0, N);
    assert_string_equal(c->name, "C1");
    for (int i = 0; i < N; i++)
        assert_true(fabsf(f32_at(c->data, (size_t)i) - c1[i]) > 1e-4f);
    /* mm2 now writes y2_matmul, read by an Add of a float [N] initializer writing y2. */
    const struct qp_graph *g = m->graph;
    int mm2 = qp_graph_find_node(g, "mm2");
    assert_string_equal(g->values[g->nodes[mm2].outputs[0]].name, "y2_matmul");
    int y2 = qp_graph_find_value(g, "y2");
    int add = g->values[y2].producer;
    assert_true(add >= 0);
    assert_string_equal(g->nodes[add].op_type, "Add");
    assert_true(g->values[y2].is_graph_output);
    float_bias(m, g->nodes[add].name, 1, N);
    /* The placement still validates on the edited graph. */
    struct qp_error err = {0};
    struct qp_placement *copy = NULL;
    assert_int_equal(qp_placement_copy(pl, &copy, &err), QP_OK);
    assert_int_equal(qp_placement_validate(copy, m->graph, &err), QP_OK);
    qp_placement_free(copy);
    qp_placement_free(pl);
    qp_model_free(m);
}

/* x[3,24] -> Gemm(x, W1[N,K], C1, transB 1, beta 0.5) -> y1; Gemm(x, W2[K,N]) -> y2 (no C). */
static void test_gemm(void **state) {
    (void)state;
    enum { K = 24, N = 6 };
    static struct data d;
    data_init(&d, 2, QG_DIMS(3, K));
    static float w1[N * K], w2[K * N];
    biased_weights(w1, N, K, 0);
    biased_weights(w2, N, K, 1);
    static const float c1[N] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f};
    struct qp_model *m = model_create();
    qg_shape(m, "x", QP_DTYPE_FLOAT, 2, QG_DIMS(3, K));
    qg_input(m, "x");
    qg_init_data(m, "W1", 2, QG_DIMS(N, K), w1);
    qg_init_data(m, "W2", 2, QG_DIMS(K, N), w2);
    qg_init_data(m, "C1", 1, QG_DIMS(N), c1);
    int g1 = qg_node(m, "gemm1", "Gemm", "x,W1,C1", "y1");
    qg_attr_i(m, g1, "transB", 1);
    struct qp_attr *beta = qp_node_add_attr(m->graph, g1, "beta", QP_ATTR_FLOAT);
    beta->f = 0.5f;
    qg_node(m, "gemm2", "Gemm", "x,W2", "y2");
    qg_shape(m, "y1", QP_DTYPE_FLOAT, 2, QG_DIMS(3, N));
    qg_shape(m, "y2", QP_DTYPE_FLOAT, 2, QG_DIMS(3, N));
    qg_output(m, "y1");
    qg_output(m, "y2");
    qg_sort(m);
    const char *nodes[2] = {"gemm1", "gemm2"}, *ws[2] = {"W1", "W2"};
    struct qp_placement *pl = place(nodes, ws, (const int[]){0, 1}, 2);
    struct qp_bias_correct_stats st = correct_and_check(m, pl, &d, 0);
    assert_int_equal(st.n_layers, 2);
    assert_int_equal(st.n_biases_added, 1);
    float_bias(m, "gemm1", 2, N);
    float_bias(m, "gemm2", 2, N);
    qp_placement_free(pl);
    qp_model_free(m);
}

/* Through qp_quantize_model (fp16 high precision, the default): the caller's model is not
 * changed, the summary says what ran, and the corrected model drifts less than the model
 * written without the correction on the same samples. */
static void test_quantize_model(void **state) {
    (void)state;
    static struct data d;
    data_init(&d, 4, QG_DIMS(1, 8, 4, 4));
    struct qp_model *m = convs();
    struct qp_error err = {0};
    void *before = NULL, *after = NULL;
    size_t n_before = 0, n_after = 0;
    assert_int_equal(qp_model_save_buffer(m, &before, &n_before, &err), QP_OK);
    struct qp_quantize_config c;
    qp_quantize_config_default(&c);
    c.trt.op_types_to_quantize = (const char *[]){"Conv"};
    c.trt.n_op_types_to_quantize = 1;
    c.calibration_method = QP_CALIB_MAX;
    c.bias_correction = 1;
    struct qp_provider *p = provider(&d);
    struct qp_model *q = NULL;
    struct qp_quantize_summary *s = NULL;
    if (qp_quantize_model(m, p, &c, &q, &s, &err) != QP_OK) fail_msg("quantize: %s", err.msg);
    assert_int_equal(qp_model_save_buffer(m, &after, &n_after, &err), QP_OK);
    assert_int_equal(n_before, n_after);
    assert_memory_equal(before, after, n_before);
    assert_int_equal(s->bias_correction, 1);
    assert_int_equal(s->n_bias_layers, 3);
    assert_int_equal(s->n_biases_added, 1);
    assert_int_equal(s->bias_rounds, 2);
    assert_true(s->bias_shift_after < 0.1 * s->bias_shift_before);
    assert_non_null(s->outputs_uncorrected);
    assert_int_equal(s->n_outputs, 3);
    for (size_t i = 0; i < s->n_outputs; i++) {
        print_message("%s: cosine %.6f, without bias correction %.6f\n", s->outputs[i].name,
                      s->outputs[i].cosine, s->outputs_uncorrected[i].cosine);
        assert_string_equal(s->outputs[i].name, s->outputs_uncorrected[i].name);
        assert_true(s->outputs[i].cosine > s->outputs_uncorrected[i].cosine);
    }
    qp_quantize_summary_free(s);
    /* Off: nothing of it in the summary. */
    c.bias_correction = 0;
    qp_model_free(q);
    q = NULL;
    assert_int_equal(qp_quantize_model(m, p, &c, &q, &s, &err), QP_OK);
    assert_int_equal(s->bias_correction, 0);
    assert_null(s->outputs_uncorrected);
    assert_int_equal(s->n_bias_layers, 0);
    qp_quantize_summary_free(s);
    qp_model_free(q);
    qp_provider_free(p);
    free(before);
    free(after);
    qp_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv),           cmocka_unit_test(test_errors),
        cmocka_unit_test(test_matmul),         cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_quantize_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
