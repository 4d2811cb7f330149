/* Opset conversion checked in qplace's own engine (the ONNX Runtime side is
 * tests/integration/opset_ort.mjs): every old-opset model under tests/data/opset/ gives the same
 * outputs before and after conversion to opset 19 and 21, on the inputs stored beside it
 * (<model>.inputs.json: {"name": {"dtype": "float32", "dims": [...], "data": [...]}}); and
 * models built in memory for the opset 18, 20 and 21 changes (Reduce* axes, Split num_outputs,
 * GridSample mode names, the nodes that make GroupNormalization's scale and bias per channel). */
#include <dirent.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "core/arena.h"
#include "ir/ir.h"
#include "ir/opset_convert.h"
#include "qplace/model.h"
#include "qplace/session.h"

#define DIR_OPSET QP_TEST_DATA_DIR "/opset/"
#define MAX_IO    16

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

/* Reads the inputs file into arrays; returns their count. */
static size_t read_inputs(const char *path, const char **names, struct qp_array *arrays) {
    char *text = slurp(path);
    if (!text) fail_msg("%s: cannot read", path);
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root) fail_msg("%s: not JSON", path);
    size_t n = 0;
    for (cJSON *it = root->child; it; it = it->next) {
        assert_true(n < MAX_IO);
        const char *dt = cJSON_GetObjectItem(it, "dtype")->valuestring;
        cJSON *dims = cJSON_GetObjectItem(it, "dims"), *data = cJSON_GetObjectItem(it, "data");
        int64_t d[QP_MAX_RANK];
        int rank = cJSON_GetArraySize(dims);
        for (int i = 0; i < rank; i++)
            d[i] = (int64_t)cJSON_GetArrayItem(dims, i)->valuedouble;
        enum qp_dtype t = !strcmp(dt, "float32") ? QP_DTYPE_FLOAT
                          : !strcmp(dt, "int64") ? QP_DTYPE_INT64
                          : !strcmp(dt, "bool")  ? QP_DTYPE_BOOL
                                                 : QP_DTYPE_UNDEFINED;
        if (t == QP_DTYPE_UNDEFINED) fail_msg("%s: dtype %s not handled by this test", path, dt);
        struct qp_error err = {0};
        assert_int_equal(qp_array_alloc(&arrays[n], t, rank, d, &err), QP_OK);
        int k = 0;
        for (cJSON *v = data->child; v; v = v->next, k++) {
            if (t == QP_DTYPE_FLOAT)
                ((float *)arrays[n].data)[k] = (float)v->valuedouble;
            else if (t == QP_DTYPE_INT64)
                ((int64_t *)arrays[n].data)[k] = (int64_t)v->valuedouble;
            else
                ((uint8_t *)arrays[n].data)[k] = cJSON_IsTrue(v) || v->valuedouble != 0;
        }
        names[n] = strdup(it->string);
        n++;
    }
    cJSON_Delete(root);
    return n;
}

/* Runs `m` on the inputs and copies its outputs into `outs` (owned). With `unsupported_ok`, a
 * model the engine does not support returns 0 outputs and its reason in `why`. */
static size_t run_model(const struct qp_model *m, size_t n_in, const char **names,
                        const struct qp_array *ins, struct qp_array *outs, const char *what,
                        int unsupported_ok, char *why, size_t why_size) {
    struct qp_error err = {0};
    struct qp_shape shapes[MAX_IO];
    for (size_t i = 0; i < n_in; i++) {
        shapes[i].name = names[i];
        shapes[i].rank = ins[i].rank;
        memcpy(shapes[i].dims, ins[i].dims, sizeof shapes[i].dims);
    }
    struct qp_session *s = NULL;
    if (qp_session_create(m, NULL, n_in, shapes, &s, &err) != QP_OK) {
        if (unsupported_ok && err.status == QP_ERR_UNSUPPORTED) {
            snprintf(why, why_size, "%s", err.msg);
            return 0;
        }
        fail_msg("%s: %s", what, err.msg);
    }
    /* Feed in the session's input order. */
    struct qp_array ordered[MAX_IO];
    size_t n = qp_session_n_inputs(s);
    assert_int_equal(n, n_in);
    for (size_t i = 0; i < n; i++) {
        const char *name = qp_session_input_name(s, i);
        size_t k = 0;
        while (k < n_in && strcmp(names[k], name))
            k++;
        if (k == n_in) fail_msg("%s: no data for input '%s'", what, name);
        ordered[i] = ins[k];
    }
    if (qp_session_run(s, n, ordered, &err) != QP_OK) fail_msg("%s: %s", what, err.msg);
    size_t n_out = qp_session_n_outputs(s);
    assert_true(n_out <= MAX_IO);
    for (size_t i = 0; i < n_out; i++) {
        struct qp_array v;
        assert_int_equal(qp_session_output(s, i, &v, &err), QP_OK);
        assert_int_equal(qp_array_alloc(&outs[i], v.dtype, v.rank, v.dims, &err), QP_OK);
        memcpy(outs[i].data, v.data, v.nbytes);
    }
    qp_session_free(s);
    return n_out;
}

static void compare(const char *what, const struct qp_array *a, const struct qp_array *b) {
    assert_int_equal(a->dtype, b->dtype);
    assert_int_equal(a->rank, b->rank);
    assert_memory_equal(a->dims, b->dims, sizeof(int64_t) * (size_t)a->rank);
    if (a->dtype != QP_DTYPE_FLOAT) {
        if (memcmp(a->data, b->data, a->nbytes)) fail_msg("%s: integer outputs differ", what);
        return;
    }
    const float *x = a->data, *y = b->data;
    for (size_t i = 0; i < a->nbytes / 4; i++)
        if (!(fabsf(x[i] - y[i]) <= 1e-6f + 1e-5f * fabsf(y[i])) && !(isnan(x[i]) && isnan(y[i])))
            fail_msg("%s: element %zu: %.9g before conversion, %.9g after", what, i, y[i], x[i]);
}

static void test_every_model(void **state) {
    (void)state;
    DIR *d = opendir(DIR_OPSET);
    assert_non_null(d);
    int n_models = 0, n_skipped = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".onnx")) continue;
        char model[1024], inputs[1024];
        snprintf(model, sizeof model, DIR_OPSET "%s", e->d_name);
        snprintf(inputs, sizeof inputs, DIR_OPSET "%.*s.inputs.json", (int)(len - 5), e->d_name);
        const char *names[MAX_IO];
        struct qp_array ins[MAX_IO], want[MAX_IO], got[MAX_IO];
        size_t n_in = read_inputs(inputs, names, ins);
        struct qp_error err = {0};
        struct qp_model *m = NULL;
        if (qp_model_load_file(model, NULL, &m, &err) != QP_OK) fail_msg("%s", err.msg);
        char why[QP_ERROR_MSG_SIZE] = "";
        size_t n_out = run_model(m, n_in, names, ins, want, model, 1, why, sizeof why);
        qp_model_free(m);
        if (n_out == 0) {
            /* Not a conversion problem: the engine cannot run even the original (ONNX Runtime
             * still checks this model's conversion). */
            printf("not checked in the engine: %s\n", why);
            n_skipped++;
        }
        for (int target = 19; n_out > 0 && target <= 21; target += 2) {
            m = NULL;
            assert_int_equal(qp_model_load_file(model, NULL, &m, &err), QP_OK);
            if (qp_model_convert_opset(m, target, &err) != QP_OK)
                fail_msg("%s -> %d: %s", model, target, err.msg);
            char what[1100];
            snprintf(what, sizeof what, "%s at opset %d", e->d_name, target);
            assert_int_equal(run_model(m, n_in, names, ins, got, what, 0, NULL, 0), n_out);
            for (size_t i = 0; i < n_out; i++) {
                compare(what, &got[i], &want[i]);
                qp_array_release(&got[i]);
            }
            qp_model_free(m);
        }
        for (size_t i = 0; i < n_out; i++)
            qp_array_release(&want[i]);
        for (size_t i = 0; i < n_in; i++) {
            qp_array_release(&ins[i]);
            free((void *)names[i]);
        }
        n_models++;
    }
    closedir(d);
    /* Only models the engine cannot run at all may be left out, and few of them. */
    assert_true(n_models - n_skipped >= 10 && n_skipped <= 2);
    printf("opset conversion in the engine: %d of %d models checked at opsets 19 and 21\n",
           n_models - n_skipped, n_models);
}

/* ---- models built in memory: the opset 18 and 20 conversions the data models do not reach -- */

static struct qp_model *built_model(int64_t opset) {
    struct qp_model *m = qp_model_create();
    assert_non_null(m);
    m->ir_version = 8;
    m->n_opsets = 1;
    m->opsets = qp_arena_calloc(m->arena, 1, sizeof *m->opsets);
    assert_non_null(m->opsets);
    m->opsets[0].domain = "";
    m->opsets[0].version = opset;
    return m;
}

static void built_input(struct qp_graph *g, const char *name, int rank, const int64_t *dims) {
    struct qp_error err = {0};
    int v = qp_graph_value(g, name);
    assert_true(v >= 0);
    g->values[v].dtype = QP_DTYPE_FLOAT;
    g->values[v].rank = rank;
    g->values[v].dims = qp_arena_calloc(g->model->arena, (size_t)rank, sizeof(struct qp_dim));
    assert_non_null(g->values[v].dims);
    for (int i = 0; i < rank; i++)
        g->values[v].dims[i].value = dims[i];
    assert_int_equal(qp_graph_add_input(g, v, &err), QP_OK);
}

/* A node reading `ins` and writing `out`, which becomes a graph output. */
static int built_node(struct qp_graph *g, const char *op, int n_in, const char *const *ins,
                      const char *out) {
    struct qp_error err = {0};
    int n = -1;
    assert_int_equal(qp_graph_add_node(g, out, op, "", n_in, ins, 1, &out, &n, &err), QP_OK);
    assert_int_equal(qp_graph_add_output(g, qp_graph_value(g, out), &err), QP_OK);
    return n;
}

static void built_ints(struct qp_graph *g, int n, const char *name, const int64_t *v, size_t k) {
    struct qp_attr *a = qp_node_add_attr(g, n, name, QP_ATTR_INTS);
    assert_non_null(a);
    a->ints = v;
    a->n = k;
}

static void built_int(struct qp_graph *g, int n, const char *name, int64_t v) {
    struct qp_attr *a = qp_node_add_attr(g, n, name, QP_ATTR_INT);
    assert_non_null(a);
    a->i = v;
}

static void built_str(struct qp_graph *g, int n, const char *name, const char *s) {
    struct qp_attr *a = qp_node_add_attr(g, n, name, QP_ATTR_STRING);
    assert_non_null(a);
    a->s.data = (const uint8_t *)s;
    a->s.len = strlen(s);
}

/* Fills input arrays with a deterministic pattern in [lo, hi). */
static void fill(struct qp_array *a, float lo, float hi, uint32_t seed) {
    float *f = a->data;
    for (size_t i = 0; i < a->nbytes / 4; i++) {
        seed = seed * 1664525u + 1013904223u;
        f[i] = lo + (hi - lo) * (float)(seed >> 8) / 16777216.0f;
    }
}

/* Runs `m` (built by `build`) at its opset, converts it to each later target in `targets` (from
 * a fresh build each time) and compares every output with the original's. */
static void check_built(struct qp_model *(*build)(void), size_t n_in, const char **names,
                        struct qp_array *ins, const int64_t *targets, size_t n_targets) {
    struct qp_array want[MAX_IO], got[MAX_IO];
    struct qp_error err = {0};
    struct qp_model *m = build();
    int64_t from = qp_model_opset(m, "");
    size_t n_out = run_model(m, n_in, names, ins, want, "built model", 0, NULL, 0);
    assert_true(n_out > 0);
    qp_model_free(m);
    for (size_t t = 0; t < n_targets; t++) {
        m = build();
        if (qp_model_convert_opset(m, targets[t], &err) != QP_OK)
            fail_msg("%lld -> %lld: %s", (long long)from, (long long)targets[t], err.msg);
        char what[64];
        snprintf(what, sizeof what, "opset %lld -> %lld", (long long)from, (long long)targets[t]);
        assert_int_equal(run_model(m, n_in, names, ins, got, what, 0, NULL, 0), n_out);
        for (size_t i = 0; i < n_out; i++) {
            compare(what, &got[i], &want[i]);
            qp_array_release(&got[i]);
        }
        qp_model_free(m);
    }
    for (size_t i = 0; i < n_out; i++)
        qp_array_release(&want[i]);
}

static const int64_t dims_x3[3] = {2, 3, 4};

/* Opset 17: every Reduce* whose axes became an input at 18, and Split, which gained num_outputs. */
static struct qp_model *build_reduce_split_17(void) {
    struct qp_model *m = built_model(17);
    struct qp_graph *g = m->graph;
    struct qp_error err = {0};
    built_input(g, "x", 3, dims_x3);
    const char *x = "x";
    static const int64_t a1[1] = {1}, a2[1] = {2}, a02[2] = {0, 2}, am1[1] = {-1}, a12[2] = {1, 2};
    static const struct {
        const char *op, *out;
        const int64_t *axes;
        size_t n_axes;
        int keepdims;
    } red[] = {
        {"ReduceProd", "prod", a1, 1, 0},      {"ReduceLogSumExp", "lse", a2, 1, 1},
        {"ReduceSumSquare", "ssq", a02, 2, 1}, {"ReduceLogSum", "ls", NULL, 0, 0},
        {"ReduceMax", "max", am1, 1, 0},       {"ReduceMin", "min", a1, 1, 1},
        {"ReduceMean", "mean", a12, 2, 0},
    };
    for (size_t i = 0; i < sizeof red / sizeof red[0]; i++) {
        int n = built_node(g, red[i].op, 1, &x, red[i].out);
        if (red[i].axes) built_ints(g, n, "axes", red[i].axes, red[i].n_axes);
        built_int(g, n, "keepdims", red[i].keepdims);
    }
    /* Split-13 into equal parts (no split input): num_outputs from 18 on */
    const char *outs[2] = {"half0", "half1"};
    int n = -1;
    assert_int_equal(qp_graph_add_node(g, "halves", "Split", "", 1, &x, 2, outs, &n, &err), QP_OK);
    built_int(g, n, "axis", 2);
    for (int i = 0; i < 2; i++)
        assert_int_equal(qp_graph_add_output(g, qp_graph_value(g, outs[i]), &err), QP_OK);
    assert_int_equal(qp_graph_toposort(g, &err), QP_OK);
    return m;
}

static const int64_t dims_img[4] = {1, 2, 3, 4}, dims_grid[4] = {1, 3, 2, 2};

/* Opset 16: GridSample in every mode (renamed at 20) and with the default mode. */
static struct qp_model *build_gridsample_16(void) {
    struct qp_model *m = built_model(16);
    struct qp_graph *g = m->graph;
    struct qp_error err = {0};
    built_input(g, "x", 4, dims_img);
    built_input(g, "grid", 4, dims_grid);
    const char *ins[2] = {"x", "grid"};
    int n = built_node(g, "GridSample", 2, ins, "bilinear");
    built_str(g, n, "mode", "bilinear");
    n = built_node(g, "GridSample", 2, ins, "bicubic");
    built_str(g, n, "mode", "bicubic");
    built_int(g, n, "align_corners", 1);
    built_str(g, n, "padding_mode", "border");
    n = built_node(g, "GridSample", 2, ins, "nearest");
    built_str(g, n, "mode", "nearest");
    built_str(g, n, "padding_mode", "reflection");
    built_node(g, "GridSample", 2, ins, "default");
    assert_int_equal(qp_graph_toposort(g, &err), QP_OK);
    return m;
}

static void test_built_models(void **state) {
    (void)state;
    struct qp_error err = {0};
    const char *names[2] = {"x", "grid"};
    struct qp_array ins[2];
    /* positive data: ReduceLogSum takes the log of a sum */
    assert_int_equal(qp_array_alloc(&ins[0], QP_DTYPE_FLOAT, 3, dims_x3, &err), QP_OK);
    fill(&ins[0], 0.25f, 2.0f, 7);
    static const int64_t to_18_21[3] = {18, 19, 21};
    check_built(build_reduce_split_17, 1, names, ins, to_18_21, 3);
    qp_array_release(&ins[0]);

    assert_int_equal(qp_array_alloc(&ins[0], QP_DTYPE_FLOAT, 4, dims_img, &err), QP_OK);
    assert_int_equal(qp_array_alloc(&ins[1], QP_DTYPE_FLOAT, 4, dims_grid, &err), QP_OK);
    fill(&ins[0], -3.0f, 3.0f, 11);
    fill(&ins[1], -1.3f, 1.3f, 13); /* some points outside, for the padding modes */
    static const int64_t to_20_21[2] = {20, 21};
    check_built(build_gridsample_16, 2, names, ins, to_20_21, 2);
    qp_array_release(&ins[0]);
    qp_array_release(&ins[1]);
}

/* GroupNormalization 18 -> 21 with per-group scale and bias that are graph inputs: the nodes
 * that make them per channel are run in the engine (which has no GroupNormalization kernel, so
 * the node itself is dropped after conversion and its new inputs become the outputs). */
static void test_groupnorm_nodes(void **state) {
    (void)state;
    struct qp_error err = {0};
    struct qp_model *m = built_model(18);
    struct qp_graph *g = m->graph;
    static const int64_t dx[4] = {2, 6, 1, 2}, dg[1] = {3};
    built_input(g, "x", 4, dx);
    g->values[qp_graph_find_value(g, "x")].dims[1].value = -1; /* channels unknown */
    built_input(g, "s", 1, dg);
    built_input(g, "b", 1, dg);
    const char *ins[3] = {"x", "s", "b"}, *out = "y";
    int gn = -1;
    assert_int_equal(
        qp_graph_add_node(g, "gn", "GroupNormalization", "", 3, ins, 1, &out, &gn, &err), QP_OK);
    built_int(g, gn, "num_groups", 3);
    assert_int_equal(qp_model_convert_opset(m, 21, &err), QP_OK);
    g->nodes[gn].dead = 1;
    for (int k = 1; k <= 2; k++)
        assert_int_equal(qp_graph_add_output(g, g->nodes[gn].inputs[k], &err), QP_OK);
    assert_int_equal(qp_graph_toposort(g, &err), QP_OK);

    const char *names[3] = {"x", "s", "b"};
    struct qp_array in[3], got[MAX_IO];
    assert_int_equal(qp_array_alloc(&in[0], QP_DTYPE_FLOAT, 4, dx, &err), QP_OK);
    assert_int_equal(qp_array_alloc(&in[1], QP_DTYPE_FLOAT, 1, dg, &err), QP_OK);
    assert_int_equal(qp_array_alloc(&in[2], QP_DTYPE_FLOAT, 1, dg, &err), QP_OK);
    fill(&in[0], -1, 1, 3);
    static const float sv[3] = {0.5f, -2, 4}, bv[3] = {1, 0.25f, -3};
    memcpy(in[1].data, sv, sizeof sv);
    memcpy(in[2].data, bv, sizeof bv);
    assert_int_equal(run_model(m, 3, names, in, got, "GroupNormalization nodes", 0, NULL, 0), 2);
    static const float want_s[6] = {0.5f, 0.5f, -2, -2, 4, 4},
                       want_b[6] = {1, 1, 0.25f, 0.25f, -3, -3};
    for (int k = 0; k < 2; k++) {
        assert_int_equal(got[k].rank, 1);
        assert_int_equal(got[k].dims[0], 6);
        assert_memory_equal(got[k].data, k ? want_b : want_s, sizeof want_s);
        qp_array_release(&got[k]);
    }
    for (int i = 0; i < 3; i++)
        qp_array_release(&in[i]);
    qp_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_model),
        cmocka_unit_test(test_built_models),
        cmocka_unit_test(test_groupnorm_nodes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
