/*
 * Narrow float tensors (float16, bfloat16) held as float32 (narrow.h): widened for the integer
 * path, widened and rounded back to float16 after every node for the written model's run.
 */
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "qplace/dtype.h"
#include "kernels/int8_conv.h"
#include "runtime/int8_graph.h"
#include "runtime/narrow.h"

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

/* Node p's output `slot` (value v) becomes a new float32 value the node writes instead; v keeps
 * its name and readers and loses its producer. Returns the new value, or -1 (out of memory). */
static int redirect_output(struct qp_graph *g, int p, int slot) {
    int v = g->nodes[p].outputs[slot];
    const char *base = qp_graph_unique_value_name(g, g->values[v].name);
    int w = base ? qp_graph_value(g, base) : -1;
    if (w < 0) return -1;
    struct qp_value *x = &g->values[v], *y = &g->values[w];
    y->rank = x->rank;
    y->dims = x->dims;
    y->dtype = QP_DTYPE_FLOAT;
    y->producer = p;
    y->producer_output = slot;
    x->producer = -1;
    x->producer_output = 0;
    g->nodes[p].outputs[slot] = w;
    return w;
}

/* Narrow graph output v made by node p: p writes a float32 value that
 * v's other readers read, and a Cast makes v from it. */
static int widen_output(struct qp_graph *g, int v, struct qp_error *err) {
    int w = redirect_output(g, g->values[v].producer, g->values[v].producer_output);
    if (w < 0) return 0;
    while (g->values[v].n_uses) {
        struct qp_use u = g->values[v].uses[0];
        if (qp_graph_set_input(g, u.node, u.input, w, err)) return 0;
    }
    return add_cast(g, g->values[w].name, g->values[v].name, g->values[v].dtype, err);
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

enum qp_status rt_narrow_widen(struct qp_graph *g, const char **why, size_t *n_widened,
                               struct qp_error *err) {
    *why = NULL;
    *n_widened = 0;
    size_t n_narrow = 0;
    for (size_t v = 0; v < g->n_values; v++)
        n_narrow += narrow(g->values[v].dtype);
    if (!n_narrow) return QP_OK;
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

int rt_narrow_emulates(const struct qp_graph *g) {
    const char *e = getenv("QP_FP16_STORAGE");
    if (e && strcmp(e, "1") == 0) return 0;
    for (size_t v = 0; v < g->n_values; v++)
        if (g->values[v].dtype == QP_DTYPE_FLOAT16) return 1;
    for (size_t k = 0; k < g->n_nodes; k++) {
        const struct qp_node *n = &g->nodes[k];
        for (int i = 0; !n->dead && i < n->n_attrs; i++) {
            const struct qp_attr *a = &n->attrs[i];
            if ((a->type == QP_ATTR_TENSOR && a->t && a->t->dtype == QP_DTYPE_FLOAT16) ||
                (a->type == QP_ATTR_INT && a->i == QP_DTYPE_FLOAT16 &&
                 (strcmp(a->name, "to") == 0 || strcmp(a->name, "output_dtype") == 0)))
                return 1;
        }
    }
    return 0;
}

/* 1 when n's op is one of ops[0..n_ops). */
static int op_in(const struct qp_node *n, const char *const *ops, size_t n_ops) {
    for (size_t i = 0; i < n_ops; i++)
        if (strcmp(n->op_type, ops[i]) == 0) return 1;
    return 0;
}

/* Ops whose outputs are elements of their float inputs, moved: float16 values stay float16
 * values without rounding. (Pad and Clip are not: an opset's attribute may hold a float32.) */
static int moves_values(const struct qp_node *n) {
    static const char *const ops[] = {
        "Reshape", "Flatten", "Squeeze", "Unsqueeze",    "Identity",       "Transpose",
        "Concat",  "Split",   "Slice",   "Gather",       "GatherElements", "GatherND",
        "Expand",  "Tile",    "MaxPool", "DepthToSpace", "SpaceToDepth",   "Relu"};
    return qp_domain_is_onnx(n->domain) && op_in(n, ops, sizeof ops / sizeof *ops);
}

/* The dtype of input i of n (UNDEFINED when absent or unknown). */
static enum qp_dtype in_dt(const enum qp_dtype *dt, const struct qp_node *n, int i) {
    return i < n->n_inputs && n->inputs[i] >= 0 ? dt[n->inputs[i]] : QP_DTYPE_UNDEFINED;
}

/* The dtype output `slot` of ONNX node n has given its inputs' (UNDEFINED: unknown). Only
 * whether it is float16 matters here: an op whose float outputs take another input's type or
 * an attribute's is listed, every other op's outputs take input 0's. */
static enum qp_dtype out_dt(const enum qp_dtype *dt, const struct qp_node *n, int slot) {
    static const char *const to_bool[] = {
        "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "IsNaN", "IsInf",
        "Not",   "And",  "Or",      "Xor"};
    static const char *const to_int[] = {"Shape",
                                         "Size",
                                         "NonZero",
                                         "ArgMax",
                                         "ArgMin",
                                         "QuantizeLinear",
                                         "MatMulInteger",
                                         "ConvInteger",
                                         "QLinearConv",
                                         "QLinearMatMul",
                                         "DynamicQuantizeLinear"};
    static const char *const first_only[] = {"TopK", "MaxPool", "Unique", "Dropout",
                                             "LayerNormalization"};
    const struct qp_attr *a = qp_node_attr(n, "to");
    if (strcmp(n->op_type, "Cast") == 0) return a ? (enum qp_dtype)a->i : QP_DTYPE_UNDEFINED;
    if (strcmp(n->op_type, "CastLike") == 0) return in_dt(dt, n, 1);
    if (op_in(n, to_bool, sizeof to_bool / sizeof *to_bool)) return QP_DTYPE_BOOL;
    if (op_in(n, to_int, sizeof to_int / sizeof *to_int)) return QP_DTYPE_INT64; /* not float */
    if (slot > 0 && op_in(n, first_only, sizeof first_only / sizeof *first_only))
        return QP_DTYPE_INT64; /* indices, masks, or LayerNormalization's float32 statistics */
    if ((a = qp_node_attr(n, "output_dtype")) && a->i) return (enum qp_dtype)a->i;
    if ((a = qp_node_attr(n, "dtype")) && a->type == QP_ATTR_INT) return (enum qp_dtype)a->i;
    if (strcmp(n->op_type, "DequantizeLinear") == 0 || strcmp(n->op_type, "Where") == 0)
        return in_dt(dt, n, 1);
    if (strcmp(n->op_type, "OneHot") == 0) return in_dt(dt, n, 2);
    if ((strcmp(n->op_type, "Constant") == 0 || strcmp(n->op_type, "ConstantOfShape") == 0)) {
        for (int i = 0; i < n->n_attrs; i++)
            if (n->attrs[i].type == QP_ATTR_TENSOR && n->attrs[i].t) return n->attrs[i].t->dtype;
        return strcmp(n->op_type, "Constant") == 0 ? QP_DTYPE_UNDEFINED : QP_DTYPE_FLOAT;
    }
    return in_dt(dt, n, 0);
}

/* Per value, its dtype: declared, or inferred in topological order. 0: out of memory, or a
 * value whose type cannot be told comes from a float16 input (*why set then). */
static int infer_dtypes(const struct qp_graph *g, enum qp_dtype *dt, const char **why) {
    for (size_t v = 0; v < g->n_values; v++)
        dt[v] = g->values[v].dtype;
    for (size_t t = 0; t < g->n_topo; t++) {
        const struct qp_node *n = &g->nodes[g->topo[t]];
        int narrow_in = 0;
        for (int i = 0; i < n->n_inputs; i++)
            narrow_in |= n->inputs[i] >= 0 && dt[n->inputs[i]] == QP_DTYPE_FLOAT16;
        for (int j = 0; j < n->n_outputs; j++) {
            int v = n->outputs[j];
            if (v < 0 || dt[v] != QP_DTYPE_UNDEFINED) continue;
            dt[v] = qp_domain_is_onnx(n->domain) ? out_dt(dt, n, j) : QP_DTYPE_UNDEFINED;
            if (dt[v] == QP_DTYPE_UNDEFINED && narrow_in) {
                *why = "a value's type made from float16 inputs could not be told";
                return 0;
            }
        }
    }
    return 1;
}

/* Output `slot` of node `k` (a float32 value now): the node writes a new value and a
 * RoundFloat16 node makes the original one from it. 0: out of memory or an edit's error. */
static int round_output(struct qp_graph *g, int k, int slot, struct qp_error *err) {
    int v = g->nodes[k].outputs[slot], u = redirect_output(g, k, slot);
    const char *name = u >= 0 ? qp_graph_unique_node_name(g, "qp_round_f16") : NULL;
    if (!name) return 0;
    const char *in = g->values[u].name, *out = g->values[v].name;
    int nn;
    return qp_graph_add_node(g, name, "RoundFloat16", QP_INT8_DOMAIN, 1, &in, 1, &out, &nn, err) ==
           QP_OK;
}

/* 1 when v's only reader is a Cast to float16 (what rt_narrow_widen puts before a float16
 * graph output): converting rounds as a rounding node would. */
static int only_cast_down(const struct qp_graph *g, int v) {
    const struct qp_value *x = &g->values[v];
    if (x->n_uses != 1) return 0;
    const struct qp_node *c = &g->nodes[x->uses[0].node];
    const struct qp_attr *to = qp_node_attr(c, "to");
    return qp_domain_is_onnx(c->domain) && strcmp(c->op_type, "Cast") == 0 && to &&
           to->i == QP_DTYPE_FLOAT16;
}

enum qp_status rt_narrow_emulate(struct qp_graph *g, const char **why, size_t *n_rounds,
                                 struct qp_error *err) {
    *why = NULL;
    *n_rounds = 0;
    if (g->n_nodes && !g->n_topo) {
        *why = "the graph is not sorted";
        return QP_OK;
    }
    /* The outputs to round, as (node, slot) pairs, before widening retypes them. */
    enum qp_dtype *dt = malloc((g->n_values ? g->n_values : 1) * sizeof *dt);
    if (!dt) return qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
    int ok = infer_dtypes(g, dt, why);
    for (size_t v = 0; ok && v < g->n_values; v++)
        if (dt[v] == QP_DTYPE_BFLOAT16) {
            *why = "a bfloat16 tensor (only float16 is rounded)";
            ok = 0;
        }
    if (!ok) {
        free(dt);
        return *why ? QP_OK : qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
    }
    size_t n = 0, cap = 0;
    int(*pairs)[2] = NULL;
    for (size_t k = 0; k < g->n_nodes; k++) {
        const struct qp_node *nd = &g->nodes[k];
        if (nd->dead || moves_values(nd)) continue;
        for (int j = 0; j < nd->n_outputs; j++) {
            int v = nd->outputs[j];
            if (v < 0 || dt[v] != QP_DTYPE_FLOAT16) continue;
            if (n == cap) {
                cap = cap ? 2 * cap : 64;
                void *p = realloc(pairs, cap * sizeof *pairs);
                if (!p) {
                    free(pairs);
                    free(dt);
                    return qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
                }
                pairs = p;
            }
            pairs[n][0] = (int)k;
            pairs[n][1] = j;
            n++;
        }
    }
    free(dt);
    size_t n_widened = 0;
    enum qp_status st = rt_narrow_widen(g, why, &n_widened, err);
    for (size_t i = 0; st == QP_OK && !*why && i < n; i++) {
        int v = g->nodes[pairs[i][0]].outputs[pairs[i][1]];
        /* A Cast to float16 that makes a graph output keeps its type: it rounds. So does the
         * Cast down to a float16 graph output that is all that reads v. */
        if (g->values[v].dtype == QP_DTYPE_FLOAT16 || g->values[v].is_graph_output ||
            only_cast_down(g, v))
            continue;
        if (!round_output(g, pairs[i][0], pairs[i][1], err))
            st = err && err->status ? err->status
                                    : qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
        else
            ++*n_rounds;
    }
    free(pairs);
    if (st == QP_OK && !*why) st = qp_graph_toposort(g, err);
    return st;
}
