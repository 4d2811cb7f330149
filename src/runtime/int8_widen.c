/*
 * float16 and bfloat16 computed as float32 on the integer path (runtime/int8.h,
 * rt_int8_widen): before the fusion passes, every narrow float tensor inside the graph becomes
 * float32 -- constants converted once, Casts to the narrow type cast to float32 instead, the
 * graph's own narrow inputs cast up on entry and its narrow outputs cast down on exit. The CPU
 * has no narrow float arithmetic: every kernel converts such tensors to float32 around its work
 * anyway, so widening removes two passes per node and nothing else changes but rounding (the
 * values are not rounded to fp16 between nodes: more accurate than the written model).
 */
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "qplace/dtype.h"
#include "runtime/int8.h"
#include "runtime/int8_graph.h"

static int narrow(enum qp_dtype dt) {
    return dt == QP_DTYPE_FLOAT16 || dt == QP_DTYPE_BFLOAT16;
}

/* Why the graph keeps its narrow types (NULL: it can be widened). */
static const char *widen_blocker(const struct qp_graph *g) {
    if (g->n_subgraphs) return "a node holds a subgraph";
    for (size_t i = 0; i < g->n_inputs; i++) {
        const struct qp_value *x = &g->values[g->inputs[i]];
        if (narrow(x->dtype) && x->initializer >= 0)
            return "a float16 initializer is also a graph input (the caller may replace it)";
    }
    for (size_t i = 0; i < g->n_outputs; i++) {
        const struct qp_value *x = &g->values[g->outputs[i]];
        if (narrow(x->dtype) && x->producer < 0 && !x->is_graph_input)
            return "a float16 constant is a graph output";
    }
    for (size_t k = 0; k < g->n_nodes; k++) {
        const struct qp_node *n = &g->nodes[k];
        if (n->dead) continue;
        const struct qp_attr *dt = qp_node_attr(n, "dtype");
        if (dt && dt->type == QP_ATTR_INT && narrow((enum qp_dtype)dt->i))
            return "an op makes a float16 tensor from its `dtype` attribute";
        if (qp_domain_is_onnx(n->domain)) continue;
        for (int i = 0; i < n->n_inputs + n->n_outputs; i++) {
            int v = i < n->n_inputs ? n->inputs[i] : n->outputs[i - n->n_inputs];
            if (v >= 0 && narrow(g->values[v].dtype)) return "a custom-domain op reads float16";
        }
    }
    return NULL;
}

/* A float32 copy of narrow tensor t on the model's arena (NULL: out of memory). */
static struct qp_tensor *widened(struct qp_graph *g, const struct qp_tensor *t) {
    struct qp_tensor *w = malloc(sizeof *w);
    float *f = malloc((size_t)(t->numel ? t->numel : 1) * sizeof *f);
    if (!w || !f || qp_model_own(g->model, w, NULL)) {
        free(f);
        return NULL;
    }
    if (qp_model_own(g->model, f, NULL)) return NULL;
    const uint16_t *h = t->data;
    if (t->dtype == QP_DTYPE_FLOAT16)
        qp_fp16_to_f32_n(h, f, (size_t)t->numel);
    else
        for (uint64_t i = 0; i < t->numel; i++)
            f[i] = qp_bf16_to_f32(h[i]);
    *w = *t;
    w->dtype = QP_DTYPE_FLOAT;
    w->data = f;
    w->nbytes = (size_t)t->numel * sizeof *f;
    w->origin = NULL;
    w->external_location = NULL;
    return w;
}

static int add_cast(struct qp_graph *g, const char *in, const char *out, enum qp_dtype to,
                    struct qp_error *err) {
    int nn;
    const char *name = qp_graph_unique_node_name(g, "qp_widen_cast");
    if (!name || qp_graph_add_node(g, name, "Cast", "", 1, &in, 1, &out, &nn, err)) return 0;
    return i8g_add_int(g, nn, "to", to);
}

/* Narrow graph input v: a Cast to float32 that every reader reads instead. */
static int widen_input(struct qp_graph *g, int v, struct qp_error *err) {
    int nn;
    if (qp_graph_insert_on_value(g, v, "Cast", "qp_widen_cast", 0, NULL, &nn, err) ||
        !i8g_add_int(g, nn, "to", QP_DTYPE_FLOAT))
        return 0;
    g->values[g->nodes[nn].outputs[0]].dtype = QP_DTYPE_FLOAT;
    return 1;
}

/* Narrow graph output v made by node p: p writes a float32 value that
 * v's other readers read, and a Cast makes v from it. */
static int widen_output(struct qp_graph *g, int v, struct qp_error *err) {
    const char *base = qp_graph_unique_value_name(g, g->values[v].name);
    int w = base ? qp_graph_value(g, base) : -1;
    if (w < 0) return 0;
    struct qp_value *x = &g->values[v], *y = &g->values[w];
    int p = x->producer, slot = x->producer_output;
    y->rank = x->rank;
    y->dims = x->dims;
    y->dtype = QP_DTYPE_FLOAT;
    while (x->n_uses) {
        struct qp_use u = x->uses[0];
        if (qp_graph_set_input(g, u.node, u.input, w, err)) return 0;
        x = &g->values[v];
    }
    g->nodes[p].outputs[slot] = w;
    g->values[w].producer = p;
    g->values[w].producer_output = slot;
    g->values[v].producer = -1;
    g->values[v].producer_output = 0;
    enum qp_dtype to = g->values[v].dtype;
    return add_cast(g, g->values[w].name, g->values[v].name, to, err);
}

/* Constants held in node attributes (Constant, ConstantOfShape) and Casts to a narrow type. */
static int widen_nodes(struct qp_graph *g, size_t n_nodes, size_t *count) {
    for (size_t k = 0; k < n_nodes; k++) {
        struct qp_node *n = &g->nodes[k];
        if (n->dead) continue;
        for (int i = 0; i < n->n_attrs; i++) {
            struct qp_attr *a = &n->attrs[i];
            if (a->type == QP_ATTR_TENSOR && a->t && narrow(a->t->dtype) &&
                (a->t->data || !a->t->numel)) {
                if (!(a->t = widened(g, a->t))) return 0;
                ++*count;
            }
            if (a->type == QP_ATTR_INT && strcmp(a->name, "to") == 0 && qp_node_is(n, "Cast") &&
                narrow((enum qp_dtype)a->i) && n->n_outputs > 0 && n->outputs[0] >= 0 &&
                !g->values[n->outputs[0]].is_graph_output) {
                a->i = QP_DTYPE_FLOAT;
                ++*count;
            }
        }
    }
    return 1;
}

enum qp_status rt_int8_widen(struct qp_graph *g, const char **why, size_t *n_widened,
                             struct qp_error *err) {
    *why = NULL;
    *n_widened = 0;
    const char *e = getenv("QP_INT8_FP16_OUT");
    size_t n_narrow = 0;
    for (size_t v = 0; v < g->n_values; v++)
        n_narrow += narrow(g->values[v].dtype);
    if (!n_narrow) return QP_OK;
    if (e && strcmp(e, "1") == 0) {
        *why = "QP_INT8_FP16_OUT=1 keeps them";
        return QP_OK;
    }
    if ((*why = widen_blocker(g))) return QP_OK;
    size_t n_nodes = g->n_nodes, n_values = g->n_values;
    for (size_t i = 0; i < g->n_inputs; i++) {
        int v = g->inputs[i];
        if (narrow(g->values[v].dtype) && g->values[v].initializer < 0 && !widen_input(g, v, err))
            goto fail;
    }
    for (size_t i = 0; i < g->n_outputs; i++) {
        int v = g->outputs[i];
        const struct qp_value *x = &g->values[v];
        if (narrow(x->dtype) && x->producer >= 0 && !widen_output(g, v, err)) goto fail;
    }
    for (size_t i = 0; i < g->n_inits; i++) {
        int v = g->inits_value[i];
        if (!narrow(g->inits[i].dtype) || g->values[v].is_graph_output ||
            (!g->inits[i].data && g->inits[i].numel))
            continue;
        struct qp_tensor *t = widened(g, &g->inits[i]);
        if (!t) goto fail;
        g->inits[i] = *t;
        ++*n_widened;
    }
    if (!widen_nodes(g, n_nodes, n_widened)) goto fail;
    for (size_t v = 0; v < n_values; v++) {
        struct qp_value *x = &g->values[v];
        if (narrow(x->dtype) && !x->is_graph_output && !x->is_graph_input) {
            x->dtype = QP_DTYPE_FLOAT;
            ++*n_widened;
        }
    }
    return QP_OK;
fail:
    return err && err->status ? err->status
                              : qp_error_set(err, QP_ERR_NOMEM, "int8: out of memory");
}
