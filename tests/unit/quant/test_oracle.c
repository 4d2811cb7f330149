/* DESIGN.md invariant 3, the engine is the oracle: evaluating a placement with edge overlays on
 * the float model gives bit-identical outputs to running the Q/DQ model the writer wrote for that
 * placement. Scales for the overlays are read back from the written file's initializers
 * (`<tensor>_scale`, per-channel axis from the DequantizeLinear), so the test checks the whole
 * path: placement -> writer -> engine Q/DQ kernels versus placement -> overlays. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ir/ir.h"
#include "ir/opset_convert.h"
#include "qplace/model.h"
#include "qplace/session.h"
#include "placement/placement.h"
#include "quant/policy_trt.h"
#include "quant/writer.h"

#define MODELS QP_TEST_DATA_DIR "/../integration/quantize_models/"

static struct qp_model *load(const char *path) {
    struct qp_error err = {0};
    struct qp_model *m = NULL;
    if (qp_model_load_file(path, NULL, &m, &err) != QP_OK) fail_msg("%s", err.msg);
    return m;
}

/* Deterministic, distinct ranges: the test is about agreement, not about good ranges. */
static int fake_amax(void *user, const char *tensor, float *amax_out) {
    (void)user;
    uint32_t h = 2166136261u;
    for (const char *p = tensor; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    *amax_out = 0.5f + (float)(h % 97) / 16.0f;
    return 1;
}

/* The float32 scale initializer `<tensor>_scale` of the written model, and the axis of the
 * DequantizeLinear `<tensor>_DequantizeLinear` (-1 when per tensor). */
static const struct qp_tensor *scale_of(const struct qp_graph *g, const char *tensor, int *axis) {
    char name[512];
    snprintf(name, sizeof name, "%s_scale", tensor);
    int v = qp_graph_find_value(g, name);
    if (v < 0 || g->values[v].initializer < 0) fail_msg("no initializer '%s'", name);
    const struct qp_tensor *t = &g->inits[g->values[v].initializer];
    assert_int_equal(t->dtype, QP_DTYPE_FLOAT);
    snprintf(name, sizeof name, "%s_DequantizeLinear", tensor);
    int dq = qp_graph_find_node(g, name);
    if (dq < 0) fail_msg("no node '%s'", name);
    const struct qp_attr *a = qp_node_attr(&g->nodes[dq], "axis");
    *axis = t->numel > 1 ? (a ? (int)a->i : 1) : -1;
    return t;
}

static void run(struct qp_session *s, const struct qp_array *in, struct qp_array *out) {
    struct qp_error err = {0};
    if (qp_session_run(s, 1, in, &err) != QP_OK) fail_msg("run: %s", err.msg);
    if (qp_session_output(s, 0, out, &err) != QP_OK) fail_msg("output: %s", err.msg);
}

static void check_model(const char *file, int64_t c, int64_t h, int64_t w) {
    struct qp_error err = {0};
    struct qp_model *mf = load(file), *mq = load(file);
    /* The writer converts to opset 19; the float side gets the same conversion so node names
     * and semantics line up. */
    if (qp_model_opset(mf, "") < 19 && qp_model_convert_opset(mf, 19, &err) != QP_OK)
        fail_msg("%s", err.msg);
    struct qp_placement *p = qp_placement_create();
    struct qp_policy_options po = {.mode = QP_QUANT_INT8};
    if (qp_policy_trt(mf->graph, &po, p, NULL, &err) != QP_OK) fail_msg("%s", err.msg);
    if (qp_placement_validate(p, mf->graph, &err) != QP_OK) fail_msg("%s", err.msg);
    assert_true(p->n_edges > 0 && p->n_weights > 0);

    struct qp_writer_options wo;
    qp_writer_options_default(&wo);
    wo.high_precision = QP_DTYPE_FLOAT;
    wo.amax = fake_amax;
    struct qp_writer_stats ws;
    if (qp_qdq_write(mq, p, &wo, &ws, &err) != QP_OK) fail_msg("write: %s", err.msg);

    size_t n_ov = p->n_edges + p->n_weights;
    struct qp_overlay *ov = calloc(n_ov, sizeof *ov);
    assert_non_null(ov);
    for (size_t i = 0; i < p->n_edges; i++) {
        int axis;
        const struct qp_tensor *t = scale_of(mq->graph, p->edges[i].tensor, &axis);
        ov[i] = (struct qp_overlay){.node = p->edges[i].node,
                                    .input = p->edges[i].input,
                                    .qtype = QP_DTYPE_INT8,
                                    .axis = axis < 0 ? 0 : axis,
                                    .n_params = (size_t)t->numel,
                                    .scale = t->data};
    }
    for (size_t i = 0; i < p->n_weights; i++) {
        int axis;
        const struct qp_tensor *t = scale_of(mq->graph, p->weights[i].tensor, &axis);
        ov[p->n_edges + i] = (struct qp_overlay){.node = p->weights[i].node,
                                                 .input = p->weights[i].input,
                                                 .qtype = QP_DTYPE_INT8,
                                                 .axis = axis < 0 ? 0 : axis,
                                                 .n_params = (size_t)t->numel,
                                                 .scale = t->data};
    }

    int64_t dims[4] = {1, c, h, w};
    struct qp_shape shape = {.name = "x", .rank = 4, .dims = {1, c, h, w}};
    struct qp_session *sf = NULL, *sq = NULL;
    if (qp_session_create(mf, NULL, 1, &shape, &sf, &err) != QP_OK) fail_msg("%s", err.msg);
    if (qp_session_create(mq, NULL, 1, &shape, &sq, &err) != QP_OK) fail_msg("%s", err.msg);
    if (qp_session_set_overlays(sf, n_ov, ov, &err) != QP_OK) fail_msg("%s", err.msg);

    struct qp_array in;
    assert_int_equal(qp_array_alloc(&in, QP_DTYPE_FLOAT, 4, dims, &err), QP_OK);
    float *x = in.data;
    uint32_t r = 12345;
    for (int64_t i = 0; i < c * h * w; i++) {
        r = r * 1664525u + 1013904223u;
        x[i] = (float)(r >> 8) / (float)(1u << 24) * 4.0f - 2.0f;
    }
    struct qp_array yf, yq;
    run(sf, &in, &yf);
    run(sq, &in, &yq);
    assert_int_equal(yf.nbytes, yq.nbytes);
    assert_true(yf.nbytes > 0);
    if (memcmp(yf.data, yq.data, yf.nbytes) != 0) {
        const float *a = yf.data, *b = yq.data;
        for (size_t i = 0; i < yf.nbytes / 4; i++)
            if (memcmp(&a[i], &b[i], 4) != 0)
                fail_msg("%s: output element %zu: overlays %.9g, written model %.9g", file, i, a[i],
                         b[i]);
    }
    /* The comparison can fail: without the weight overlays the outputs differ. */
    if (qp_session_set_overlays(sf, p->n_edges, ov, &err) != QP_OK) fail_msg("%s", err.msg);
    struct qp_array y2;
    run(sf, &in, &y2);
    assert_true(memcmp(y2.data, yq.data, yq.nbytes) != 0);

    qp_array_release(&in);
    qp_session_free(sf);
    qp_session_free(sq);
    free(ov);
    qp_placement_free(p);
    qp_model_free(mf);
    qp_model_free(mq);
}

static void test_resnet_like(void **state) {
    (void)state;
    check_model(MODELS "resnet_like.onnx", 3, 32, 32);
}

static void test_vit_like(void **state) {
    (void)state;
    check_model(MODELS "vit_like.onnx", 3, 16, 16);
}

/* A real exported model: opset 9 (converted on both sides), weights held in Constant nodes
 * (folded by the writer), HardSwish written out as Mul/Clip. */
static void test_paddleocr_cls(void **state) {
    (void)state;
    const char *path = QP_TEST_DATA_DIR "/../../.cache/models/ch_ppocr_mobile_v2.0_cls_infer.onnx";
    FILE *f = fopen(path, "rb");
    if (!f) {
        const char *req = getenv("QP_REQUIRE_REAL_MODELS");
        if (req && strcmp(req, "1") == 0) fail_msg("%s is missing (run scripts/setup.sh)", path);
        skip();
    }
    fclose(f);
    check_model(path, 3, 48, 192);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resnet_like),
        cmocka_unit_test(test_vit_like),
        cmocka_unit_test(test_paddleocr_cls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
