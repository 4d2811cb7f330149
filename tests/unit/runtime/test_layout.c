/* The layout pass (src/runtime/layout.c) on a small residual graph:
 *  - with an order-agnostic observer on every tensor (nothing fuses), convolution outputs and
 *    the Relu/Add/Mul steps between them stay blocked; the observer sees each tensor's values
 *    (as a multiset) and the outputs are bit-identical to the plain run's;
 *  - a reader that cannot take the layout (MaxPool) turns its tensor and, back through the
 *    elementwise steps, their inputs plain;
 *  - channels that do not fill the block (padding) keep elementwise steps, overlays and
 *    observers on plain tensors;
 *  - per-tensor overlays keep their edge blocked, per-channel ones do not; both equal the graph
 *    rewritten with real Q/DQ nodes bit for bit, in full and partial runs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ir/ir.h"
#include "kernels/dnnl_conv.h"
#include "kernels/dnnl_util.h"
#include "kernels/isa.h"
#include "qplace/session.h"
#include "runtime/runtime.h"

#include "rt_testmodel.h"

#define HW    8
#define MAXC  16
#define MAXNX (MAXC * HW * HW)

static void node(struct qp_graph *g, const char *name, const char *op, int ni, const char *a,
                 const char *b, const char *out) {
    const char *ins[2] = {a, b};
    struct qp_error err = {0};
    assert_int_equal(qp_graph_add_node(g, name, op, "", ni, ins, 1, &out, NULL, &err), QP_OK);
}

static void conv3(struct qp_model *m, const char *name, const char *x, const char *w,
                  const char *out) {
    const char *ins[2] = {x, w};
    struct qp_error err = {0};
    int id;
    assert_int_equal(qp_graph_add_node(m->graph, name, "Conv", "", 2, ins, 1, &out, &id, &err),
                     QP_OK);
    struct qp_attr *a = qp_node_add_attr(m->graph, id, "pads", QP_ATTR_INTS);
    assert_non_null(a);
    int64_t *pads = model_alloc(m, 4 * sizeof *pads);
    pads[0] = pads[1] = pads[2] = pads[3] = 1;
    a->ints = pads;
    a->n = 4;
}

static int n_ch;
static struct qp_dim x_dims[4] = {{1, NULL}, {MAXC, NULL}, {HW, NULL}, {HW, NULL}};

/* x -> c0 -> c0o -> r0 (Relu) -> r0o -> c1 -> c1o -> a1 = Add(c1o, r0o) -> r1 (Relu) -> r1o
 *   r1o -> c2 -> y0
 *   r1o -> m2 = Mul(r1o, k) -> m2o -> c3 -> y1
 *   (with_pool) r1o -> MaxPool -> y2
 * c channels throughout; c0 reads the plain input. */
static struct qp_model *res_model(int c, int with_pool) {
    n_ch = c;
    x_dims[1].value = c;
    rt_rng = 3;
    struct qp_model *m = model_with_x(4, x_dims);
    struct qp_graph *g = m->graph;
    struct qp_error err = {0};
    const int64_t w3[4] = {c, c, 3, 3};
    const char *ws[4] = {"w0", "w1", "w2", "w3"};
    for (int i = 0; i < 4; i++)
        rt_rand_init(m, ws[i], 4, w3, -0.25f, 0.25f);
    float k = 0.75f;
    graph_add_init(m, g, "k", QP_DTYPE_FLOAT, 0, NULL, &k, sizeof k);
    conv3(m, "c0", "x", "w0", "c0o");
    node(g, "r0", "Relu", 1, "c0o", NULL, "r0o");
    conv3(m, "c1", "r0o", "w1", "c1o");
    node(g, "a1", "Add", 2, "c1o", "r0o", "a1o");
    node(g, "r1", "Relu", 1, "a1o", NULL, "r1o");
    conv3(m, "c2", "r1o", "w2", "y0");
    node(g, "m2", "Mul", 2, "r1o", "k", "m2o");
    conv3(m, "c3", "m2o", "w3", "y1");
    const char *outs[3] = {"y0", "y1", "y2"};
    if (with_pool) {
        int id;
        const char *in = "r1o", *out = "y2";
        assert_int_equal(qp_graph_add_node(g, "p", "MaxPool", "", 1, &in, 1, &out, &id, &err),
                         QP_OK);
        struct qp_attr *a = qp_node_add_attr(g, id, "kernel_shape", QP_ATTR_INTS);
        assert_non_null(a);
        int64_t *ks = model_alloc(m, 2 * sizeof *ks);
        ks[0] = ks[1] = 2;
        a->ints = ks;
        a->n = 2;
    }
    for (int i = 0; i < 2 + with_pool; i++)
        assert_int_equal(qp_graph_add_output(g, qp_graph_value(g, outs[i]), &err), QP_OK);
    assert_int_equal(qp_graph_toposort(g, &err), QP_OK);
    return m;
}

static float xin[MAXNX];

static void fill_x(uint32_t seed) {
    rt_rng = seed;
    for (int i = 0; i < MAXNX; i++)
        xin[i] = rt_frand();
}

static struct qp_session *session(const struct qp_model *m) {
    struct qp_session_options opts = {.n_threads = 2};
    struct qp_session *s = NULL;
    struct qp_error err = {0};
    assert_int_equal(qp_session_create(m, &opts, 0, NULL, &s, &err), QP_OK);
    return s;
}

/* Runs s (fully or partially); out gets outputs 0 and 1 (c * HW * HW floats each). */
static void run2(struct qp_session *s, int partial, float out[2][MAXNX]) {
    struct qp_error err = {0};
    struct qp_array in;
    int64_t dims[4] = {1, n_ch, HW, HW};
    size_t nx = (size_t)n_ch * HW * HW;
    assert_int_equal(qp_array_view(&in, QP_DTYPE_FLOAT, 4, dims, xin, nx * sizeof(float), &err),
                     QP_OK);
    if (partial)
        assert_int_equal(qp_session_run_partial(s, &err), QP_OK);
    else
        assert_int_equal(qp_session_run(s, 1, &in, &err), QP_OK);
    memset(out, 0, sizeof(float) * 2 * MAXNX);
    for (size_t o = 0; o < 2; o++) {
        struct qp_array a;
        assert_int_equal(qp_session_output(s, o, &a, &err), QP_OK);
        assert_int_equal(a.nbytes, nx * sizeof(float));
        memcpy(out[o], a.data, a.nbytes);
    }
}

/* 1 when the last plan keeps tensor `name` blocked. */
static int blocked(const struct qp_session *s, const char *name) {
    int v = qp_graph_find_value(s->g, name);
    assert_true(v >= 0);
    assert_non_null(s->last);
    return s->last->blocked[v];
}

/* 1 when the layout oneDNN picked for the output of convolution `name` in the last plan pads
 * its channels (nChw8c with 12 channels: AVX2's choice), 0 when it is dense (NHWC, AVX-512's
 * choice for convolutions on few channels); fails when the state advertises no layout. */
static int conv_dst_padded(const struct qp_session *s, const char *name) {
    for (size_t k = 0; k < s->last->n_steps; k++) {
        const struct rt_step *st = &s->last->steps[k];
        if (st->kind != RT_STEP_NODE || strcmp(s->g->nodes[st->node].name, name) != 0) continue;
        size_t bytes = 0;
        if (!qp_dnnl_conv_blocked_dst(st->state, &bytes)) fail_msg("%s: no blocked layout", name);
        return bytes > st->out[0]->numel * sizeof(float);
    }
    fail_msg("no step computes %s", name);
    return -1;
}

/* Every observed tensor's values, sorted (the order depends on the layout; the multiset not). */
#define N_SEEN 32
struct seen {
    int n;
    char name[N_SEEN][8];
    size_t count[N_SEEN];
    float *vals[N_SEEN];
};

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static int observer(const char *tensor, const char *node_name, const struct qp_array *v,
                    void *user) {
    (void)node_name;
    struct seen *s = user;
    assert_true(s->n < N_SEEN);
    if (v->dtype != QP_DTYPE_FLOAT) return 0; /* the Q/DQ graph's quantized tensors */
    size_t n = v->nbytes / sizeof(float), numel = 1;
    for (int i = 0; i < v->rank; i++)
        numel *= (size_t)v->dims[i];
    assert_int_equal(v->rank, 4);
    assert_int_equal(v->dims[1], n_ch); /* the logical shape, whatever the layout */
    assert_int_equal(n, numel);         /* no padding */
    snprintf(s->name[s->n], sizeof s->name[0], "%s", tensor);
    s->vals[s->n] = malloc(v->nbytes);
    assert_non_null(s->vals[s->n]);
    memcpy(s->vals[s->n], v->data, v->nbytes);
    qsort(s->vals[s->n], n, sizeof(float), cmp_float);
    s->count[s->n++] = n;
    return 0;
}

/* The recording observer on s, order-agnostic. */
static void observe_any(struct qp_session *s, struct seen *seen) {
    qp_session_set_observer(s, observer, seen);
    qp_session_set_observer_any_order(s, 1);
}

static void seen_free(struct seen *s) {
    for (int i = 0; i < s->n; i++)
        free(s->vals[i]);
    memset(s, 0, sizeof *s);
}

static float out_a[2][MAXNX], out_b[2][MAXNX];

/* Every tensor observed: nothing fuses. Order-agnostic: the chain stays blocked. */
static void test_layout_observer_any_order(void **state) {
    (void)state;
    if (!qp_dnnl_enabled()) skip();
    struct qp_model *m = res_model(MAXC, 0);
    fill_x(1);
    struct qp_session *plain = session(m), *any = session(m);
    struct seen sp = {0}, sa = {0};
    qp_session_set_observer(plain, observer, &sp);
    observe_any(any, &sa);
    run2(plain, 0, out_a);
    run2(any, 0, out_b);
    assert_int_equal(plain->last->n_fused, 0);
    assert_int_equal(any->last->n_fused, 0);
    assert_int_equal(plain->last->n_blocked, 0);
    /* c0o, r0o, c1o, a1o, r1o, m2o: between convolutions, through Relu, Add and Mul. */
    const char *chain[6] = {"c0o", "r0o", "c1o", "a1o", "r1o", "m2o"};
    for (int i = 0; i < 6; i++)
        if (!blocked(any, chain[i])) fail_msg("%s is not kept blocked", chain[i]);
    assert_false(blocked(any, "y0"));
    assert_memory_equal(out_a, out_b, sizeof out_a);
    /* The layout changed what the observer got (element order), not the values. */
    assert_int_equal(sa.n, sp.n);
    assert_int_equal(sa.n, 8);
    for (int i = 0; i < sa.n; i++) {
        assert_string_equal(sa.name[i], sp.name[i]);
        assert_int_equal(sa.count[i], sp.count[i]);
        assert_memory_equal(sa.vals[i], sp.vals[i], sa.count[i] * sizeof(float));
    }
    /* Turning it off re-plans plain. */
    seen_free(&sa);
    qp_session_set_observer_any_order(any, 0);
    run2(any, 0, out_b);
    assert_int_equal(any->last->n_blocked, 0);
    assert_memory_equal(out_a, out_b, sizeof out_a);
    seen_free(&sp);
    seen_free(&sa);
    qp_session_free(plain);
    qp_session_free(any);
    qp_model_free(m);
}

/* A MaxPool reader: r1o plain, and through the elementwise steps a1o, r0o, c0o too (an
 * elementwise step reads and writes one layout); c1o is read by a1 only, so plain as well.
 * m2o (Mul -> Conv) cannot be blocked either: its input is plain. */
static void test_layout_plain_reader(void **state) {
    (void)state;
    if (!qp_dnnl_enabled()) skip();
    struct qp_model *m = res_model(MAXC, 1);
    fill_x(2);
    struct qp_session *s = session(m);
    struct seen sa = {0};
    observe_any(s, &sa);
    struct qp_error err = {0};
    struct qp_array in;
    int64_t dims[4] = {1, MAXC, HW, HW};
    assert_int_equal(qp_array_view(&in, QP_DTYPE_FLOAT, 4, dims, xin, sizeof xin, &err), QP_OK);
    assert_int_equal(qp_session_run(s, 1, &in, &err), QP_OK);
    assert_int_equal(s->last->n_blocked, 0);
    seen_free(&sa);
    qp_session_free(s);
    qp_model_free(m);
}

/* 12 channels. Elementwise steps and observers need unpadded tensors: where the convolutions'
 * layout pads (nChw8c pads 12 channels to 16: AVX2), with every tensor observed nothing is
 * blocked; where it is dense (NHWC: AVX-512), the chain stays blocked as with 16 channels and the
 * observer sees the same values. Results equal plain ones either way. */
static void test_layout_padded(void **state) {
    (void)state;
    if (!qp_dnnl_enabled()) skip();
    struct qp_model *m = res_model(12, 0);
    fill_x(3);
    struct qp_session *plain = session(m), *any = session(m);
    struct seen sp = {0}, sa = {0};
    qp_session_set_observer(plain, observer, &sp);
    observe_any(any, &sa);
    run2(plain, 0, out_a);
    run2(any, 0, out_b);
    int padded = conv_dst_padded(any, "c0");
    printf("12 channels: the convolutions' layout %s\n", padded ? "pads" : "is dense");
    if (padded) {
        assert_int_equal(any->last->n_blocked, 0);
    } else {
        const char *chain[6] = {"c0o", "r0o", "c1o", "a1o", "r1o", "m2o"};
        for (int i = 0; i < 6; i++)
            if (!blocked(any, chain[i])) fail_msg("%s is not kept blocked", chain[i]);
    }
    assert_memory_equal(out_a, out_b, sizeof out_a);
    assert_int_equal(sa.n, sp.n);
    for (int i = 0; i < sa.n; i++) {
        assert_string_equal(sa.name[i], sp.name[i]);
        assert_int_equal(sa.count[i], sp.count[i]);
        assert_memory_equal(sa.vals[i], sp.vals[i], sa.count[i] * sizeof(float));
    }
    seen_free(&sp);
    seen_free(&sa);
    qp_session_free(plain);
    qp_session_free(any);
    qp_model_free(m);
}

struct ovp {
    struct qp_overlay ov;
    float scale[MAXC];
    int8_t zp[MAXC];
};

static void make_ov(struct ovp *o, const char *node_name, int input, size_t n_params, float scale) {
    memset(o, 0, sizeof *o);
    o->ov.node = node_name;
    o->ov.input = input;
    o->ov.qtype = QP_DTYPE_INT8;
    o->ov.saturate = 1;
    o->ov.axis = input == 1 ? 0 : 1; /* weights per output channel, activations per channel */
    o->ov.n_params = n_params;
    for (size_t i = 0; i < n_params; i++) {
        o->scale[i] = scale * (1.0f + 0.05f * (float)i);
        o->zp[i] = (int8_t)(i % 3) - 1;
    }
    o->ov.scale = o->scale;
    o->ov.zero_point = o->zp;
}

/* Sets overlays t[0..n) on s (a reference run done, its cache on) and runs it partially: 1 when
 * that equals, bit for bit, a full run of a fresh session of m with the same overlays (with the
 * recording order-agnostic observer too when `observed`). */
static int partial_equals_fresh(struct qp_session *s, const struct qp_model *m,
                                const struct qp_overlay *t, size_t n, int observed) {
    struct qp_error err = {0};
    assert_int_equal(qp_session_set_overlays(s, n, t, &err), QP_OK);
    run2(s, 1, out_a);
    struct qp_session *f = session(m);
    struct seen sf = {0};
    if (observed) observe_any(f, &sf);
    assert_int_equal(qp_session_set_overlays(f, n, t, &err), QP_OK);
    run2(f, 0, out_b);
    qp_session_free(f);
    seen_free(&sf);
    return memcmp(out_a, out_b, sizeof out_a) == 0;
}

/* Overlays on blocked edges: per tensor on c1's input (r0o) and on the residual a1 reads
 * (r0o again), and (second round) per channel on c3's input (m2o). Every tensor is observed
 * (order-agnostic) so the unfused steps run, then nothing is (fused). Overlay runs equal the
 * Q/DQ graph bit for bit; the per-tensor overlays keep the chain blocked, the per-channel one
 * makes m2o plain and with it (through m2, r1, a1 and r0) the whole chain; partial runs after
 * toggles equal full runs. */
static void test_layout_overlays(void **state) {
    (void)state;
    if (!qp_dnnl_enabled()) skip();
    struct ovp o[3];
    make_ov(&o[0], "c1", 0, 1, 0.01f);
    make_ov(&o[1], "a1", 1, 1, 0.012f);
    make_ov(&o[2], "c3", 0, MAXC, 0.008f);
    struct qp_overlay ov[3] = {o[0].ov, o[1].ov, o[2].ov};
    struct qp_error err = {0};
    for (int n_ov = 2; n_ov <= 3; n_ov++) {
        struct qp_model *m = res_model(MAXC, 0), *mq = res_model(MAXC, 0);
        for (int i = 0; i < n_ov; i++)
            insert_qdq(mq, &o[i].ov, i);
        assert_int_equal(qp_graph_toposort(mq->graph, &err), QP_OK);
        for (int observed = 0; observed <= 1; observed++) {
            fill_x(4 + (uint32_t)observed);
            struct qp_session *s = session(m), *q = session(mq);
            struct seen sa = {0}, sq = {0};
            if (observed) {
                observe_any(s, &sa);
                observe_any(q, &sq);
            }
            assert_int_equal(qp_session_set_overlays(s, (size_t)n_ov, ov, &err), QP_OK);
            run2(s, 0, out_a);
            run2(q, 0, out_b);
            assert_memory_equal(out_a, out_b, sizeof out_a);
            if (observed && n_ov == 2) {
                const char *chain[6] = {"c0o", "r0o", "c1o", "a1o", "r1o", "m2o"};
                for (int i = 0; i < 6; i++)
                    if (!blocked(s, chain[i])) fail_msg("%s is not kept blocked", chain[i]);
            } else if (observed) {
                assert_int_equal(s->last->n_blocked, 0);
            }
            seen_free(&sa);
            seen_free(&sq);
            /* Partial runs: reference with everything bypassed, then each overlay alone. */
            qp_session_set_cache(s, (size_t)16 << 20);
            struct qp_overlay t[3] = {ov[0], ov[1], ov[2]};
            for (int i = 0; i < n_ov; i++)
                t[i].bypass = 1;
            assert_int_equal(qp_session_set_overlays(s, (size_t)n_ov, t, &err), QP_OK);
            run2(s, 0, out_a);
            for (int k = 0; k < n_ov; k++) {
                for (int i = 0; i < n_ov; i++)
                    t[i].bypass = i != k;
                int same = partial_equals_fresh(s, m, t, (size_t)n_ov, observed);
                seen_free(&sa);
                if (!same)
                    fail_msg("%d overlays, observed %d, overlay %d alone: partial run differs "
                             "from a full one",
                             n_ov, observed, k);
            }
            qp_session_free(s);
            qp_session_free(q);
        }
        qp_model_free(m);
        qp_model_free(mq);
    }
}

/* Weight overlays toggled next to blocked activations: a convolution whose weights switch to
 * another variant (a state prepared after planning, fused or not) reads and writes the layouts
 * the layout pass chose. Every bypass pattern, in partial runs, equals a fresh plan. */
static void test_layout_weight_variants(void **state) {
    (void)state;
    if (!qp_dnnl_enabled()) skip();
    struct ovp o[5];
    make_ov(&o[0], "c1", 0, 1, 0.01f);
    make_ov(&o[1], "c1", 1, MAXC, 0.002f);
    make_ov(&o[2], "a1", 1, 1, 0.012f);
    make_ov(&o[3], "c2", 1, MAXC, 0.002f);
    make_ov(&o[4], "c3", 1, MAXC, 0.002f);
    struct qp_model *m = res_model(MAXC, 0);
    struct qp_error err = {0};
    for (int observed = 0; observed <= 1; observed++) {
        fill_x(9 + (uint32_t)observed);
        struct qp_session *s = session(m);
        struct seen sa = {0};
        if (observed) {
            observe_any(s, &sa);
        }
        qp_session_set_cache(s, (size_t)16 << 20);
        struct qp_overlay t[5];
        for (int i = 0; i < 5; i++) {
            t[i] = o[i].ov;
            t[i].bypass = 1;
        }
        assert_int_equal(qp_session_set_overlays(s, 5, t, &err), QP_OK);
        run2(s, 0, out_a);
        assert_true(s->last->n_blocked > 0);
        size_t plans = s->n_plans_built;
        for (int mask = 1; mask < 32; mask++) {
            for (int i = 0; i < 5; i++)
                t[i].bypass = !(mask >> i & 1);
            int same = partial_equals_fresh(s, m, t, 5, observed);
            seen_free(&sa);
            if (!same)
                fail_msg("observed %d, bypass mask 0x%x: partial run differs from a fresh plan",
                         observed, mask);
        }
        assert_int_equal(s->n_plans_built, plans); /* variants switched, no re-plan */
        qp_session_free(s);
    }
    qp_model_free(m);
}

/* ResNet's stem shape: x -> c0 -> Relu -> MaxPool (3x3, stride 2, pads 1) -> c1 -> y. Where
 * the convolutions exchange channels-last tensors (AVX-512's NHWC on 16 channels) the Relu's
 * and the pool's outputs stay so and the pool runs channels last; on a padded or blocked
 * layout (AVX2's nChw8c) the pool reads plain tensors. Either way the output is bit for bit
 * that of a session whose pool stays plain (QP_LAYOUT_POOL=0), over several inputs (NaN among
 * them, which a max meets first or later in its window as the plain loop does). */
static void test_layout_maxpool_nhwc(void **state) {
    (void)state;
    if (!qp_dnnl_enabled()) skip();
    n_ch = MAXC;
    x_dims[1].value = MAXC;
    rt_rng = 5;
    struct qp_model *m = model_with_x(4, x_dims);
    struct qp_graph *g = m->graph;
    struct qp_error err = {0};
    const int64_t w3[4] = {MAXC, MAXC, 3, 3};
    rt_rand_init(m, "w0", 4, w3, -0.25f, 0.25f);
    rt_rand_init(m, "w1", 4, w3, -0.25f, 0.25f);
    conv3(m, "c0", "x", "w0", "c0o");
    node(g, "r0", "Relu", 1, "c0o", NULL, "r0o");
    int id;
    const char *in = "r0o", *out = "po";
    assert_int_equal(qp_graph_add_node(g, "p", "MaxPool", "", 1, &in, 1, &out, &id, &err), QP_OK);
    static const int64_t ks[2] = {3, 3}, st[2] = {2, 2}, pads[4] = {1, 1, 1, 1};
    const char *names[3] = {"kernel_shape", "strides", "pads"};
    const int64_t *vals[3] = {ks, st, pads};
    for (int i = 0; i < 3; i++) {
        struct qp_attr *a = qp_node_add_attr(g, id, names[i], QP_ATTR_INTS);
        assert_non_null(a);
        a->ints = vals[i];
        a->n = i == 2 ? 4 : 2;
    }
    conv3(m, "c1", "po", "w1", "y");
    assert_int_equal(qp_graph_add_output(g, qp_graph_value(g, "y"), &err), QP_OK);
    assert_int_equal(qp_graph_toposort(g, &err), QP_OK);
    setenv("QP_LAYOUT_POOL", "0", 1);
    struct qp_session *plain = session(m);
    unsetenv("QP_LAYOUT_POOL");
    struct qp_session *s = session(m);
    size_t ny = (size_t)MAXC * 4 * 4;
    for (uint32_t seed = 1; seed <= 3; seed++) {
        fill_x(seed);
        if (seed == 3) xin[5] = xin[77] = NAN;
        struct qp_array xa, ya, yb;
        int64_t dims[4] = {1, MAXC, HW, HW};
        assert_int_equal(qp_array_view(&xa, QP_DTYPE_FLOAT, 4, dims, xin,
                                       (size_t)MAXC * HW * HW * sizeof(float), &err),
                         QP_OK);
        assert_int_equal(qp_session_run(s, 1, &xa, &err), QP_OK);
        assert_int_equal(qp_session_run(plain, 1, &xa, &err), QP_OK);
        assert_int_equal(qp_session_output(s, 0, &ya, &err), QP_OK);
        assert_int_equal(qp_session_output(plain, 0, &yb, &err), QP_OK);
        assert_int_equal(ya.nbytes, ny * sizeof(float));
        assert_memory_equal(ya.data, yb.data, ya.nbytes);
    }
    assert_false(blocked(plain, "po"));
    int nhwc = !conv_dst_padded(s, "c0") && blocked(s, "c0o");
    print_message("c0's output %s; the pool's %s\n", blocked(s, "r0o") ? "blocked" : "plain",
                  blocked(s, "po") ? "channels last" : "plain");
    if (nhwc) {
        assert_true(blocked(s, "r0o"));
        assert_true(blocked(s, "po"));
    }
    qp_session_free(plain);
    qp_session_free(s);
    qp_model_free(m);
}

/* The float data of initializer `name` of g. */
static const float *init_data(const struct qp_graph *g, const char *name) {
    for (size_t i = 0; i < g->n_inits; i++)
        if (strcmp(g->inits[i].name, name) == 0) return g->inits[i].data;
    fail_msg("no initializer %s", name);
    return NULL;
}

/* The state of the step computing node `name` in the last plan. */
static const void *step_state(const struct qp_session *s, const char *name) {
    for (size_t k = 0; k < s->last->n_steps; k++) {
        const struct rt_step *st = &s->last->steps[k];
        if (st->kind == RT_STEP_NODE && strcmp(s->g->nodes[st->node].name, name) == 0)
            return st->state;
    }
    fail_msg("no step computes %s", name);
    return NULL;
}

/* A 1x1 convolution with stride 2 (ResNet's projection) reading a convolution's blocked output:
 * on AVX-512 it gathers the strided pixels and runs a stride-1 primitive (dnnl_conv.c,
 * sub_prepare). Its output is bit for bit that of oneDNN's strided form (QP_CONV_SUBSAMPLE=0),
 * on 8x8 (even: oneDNN's right padding is -1) and 7x7 sources, with one thread and two, and
 * within rounding of the convolution summed in double here. */
static void test_layout_subsampled_1x1(void **state) {
    (void)state;
    if (!qp_dnnl_enabled()) skip();
    for (int hw = HW - 1; hw <= HW; hw++) {
        n_ch = MAXC;
        x_dims[1].value = MAXC;
        x_dims[2].value = x_dims[3].value = hw;
        rt_rng = 9;
        struct qp_model *m = model_with_x(4, x_dims);
        struct qp_graph *g = m->graph;
        struct qp_error err = {0};
        const int64_t w3[4] = {MAXC, MAXC, 3, 3}, wd1[4] = {2 * MAXC, MAXC, 1, 1};
        rt_rand_init(m, "w0", 4, w3, -0.25f, 0.25f);
        rt_rand_init(m, "w1", 4, wd1, -0.25f, 0.25f);
        conv3(m, "c0", "x", "w0", "c0o");
        node(g, "r0", "Relu", 1, "c0o", NULL, "r0o");
        int id;
        const char *ins[2] = {"r0o", "w1"}, *out = "y";
        assert_int_equal(qp_graph_add_node(g, "c1", "Conv", "", 2, ins, 1, &out, &id, &err), QP_OK);
        static const int64_t st[2] = {2, 2};
        struct qp_attr *a = qp_node_add_attr(g, id, "strides", QP_ATTR_INTS);
        assert_non_null(a);
        a->ints = st;
        a->n = 2;
        assert_int_equal(qp_graph_add_output(g, qp_graph_value(g, "y"), &err), QP_OK);
        assert_int_equal(qp_graph_toposort(g, &err), QP_OK);
        setenv("QP_CONV_SUBSAMPLE", "0", 1);
        struct qp_session *strided = session(m);
        unsetenv("QP_CONV_SUBSAMPLE");
        struct qp_session *s = session(m);
        int64_t oh = (hw + 1) / 2, dims[4] = {1, MAXC, hw, hw};
        size_t ny = (size_t)2 * MAXC * oh * oh;
        fill_x(11);
        struct qp_array xa, ya, yb;
        assert_int_equal(qp_array_view(&xa, QP_DTYPE_FLOAT, 4, dims, xin,
                                       (size_t)MAXC * hw * hw * sizeof(float), &err),
                         QP_OK);
        for (int nt = 1; nt <= 2; nt++) {
            qp_session_set_threads(s, nt);
            assert_int_equal(qp_session_run(s, 1, &xa, &err), QP_OK);
            assert_int_equal(qp_session_run(strided, 1, &xa, &err), QP_OK);
            assert_int_equal(qp_session_output(s, 0, &ya, &err), QP_OK);
            assert_int_equal(qp_session_output(strided, 0, &yb, &err), QP_OK);
            assert_int_equal(ya.nbytes, ny * sizeof(float));
            assert_memory_equal(ya.data, yb.data, ya.nbytes);
        }
        /* against the two convolutions summed in double */
        const float *w0 = init_data(g, "w0"), *w1 = init_data(g, "w1"), *yv = ya.data;
        static double r0[MAXNX];
        for (int64_t c = 0; c < MAXC; c++)
            for (int64_t p = 0; p < hw * hw; p++) {
                double sum = 0;
                for (int64_t i = 0; i < MAXC * 9; i++) {
                    int64_t y0 = p / hw + i % 9 / 3 - 1, x0 = p % hw + i % 3 - 1;
                    if (y0 >= 0 && y0 < hw && x0 >= 0 && x0 < hw)
                        sum += (double)w0[c * MAXC * 9 + i] * xin[(i / 9 * hw + y0) * hw + x0];
                }
                r0[c * hw * hw + p] = sum > 0 ? sum : 0;
            }
        for (int64_t o = 0; o < 2 * MAXC; o++)
            for (int64_t p = 0; p < oh * oh; p++) {
                double sum = 0;
                for (int64_t c = 0; c < MAXC; c++)
                    sum += (double)w1[o * MAXC + c] * r0[(c * hw + p / oh * 2) * hw + p % oh * 2];
                if (fabs(yv[o * oh * oh + p] - sum) > 1e-4 * (1 + fabs(sum)))
                    fail_msg("%dx%d: channel %lld pixel %lld: %g, want %g", hw, hw, (long long)o,
                             (long long)p, (double)yv[o * oh * oh + p], sum);
            }
        int want = qp_kernel_isa() >= QP_ISA_AVX512 && blocked(s, "r0o");
        print_message("%dx%d: source %s, subsampled %d\n", hw, hw,
                      blocked(s, "r0o") ? "blocked" : "plain",
                      qp_dnnl_conv_state_uses_subsample(step_state(s, "c1")));
        if (want) assert_true(qp_dnnl_conv_state_uses_subsample(step_state(s, "c1")));
        assert_false(qp_dnnl_conv_state_uses_subsample(step_state(strided, "c1")));
        qp_session_free(strided);
        qp_session_free(s);
        qp_model_free(m);
    }
    x_dims[2].value = x_dims[3].value = HW;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout_observer_any_order),
        cmocka_unit_test(test_layout_plain_reader),
        cmocka_unit_test(test_layout_padded),
        cmocka_unit_test(test_layout_overlays),
        cmocka_unit_test(test_layout_weight_variants),
        cmocka_unit_test(test_layout_maxpool_nhwc),
        cmocka_unit_test(test_layout_subsampled_1x1),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
