/* FP16 conversion of the non-quantized part of a model (f16.h). */
#include "quant/f16.h"

#include <stdint.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "core/size.h"
#include "ir/optraits.h"

#define F16_MAX 65504.0f

enum { WANT_ANY = 0, WANT_F16, WANT_F32 };

struct conv {
    struct qp_model *m;
    struct qp_graph *g;
    size_t cap;         /* entries of the arrays below (values, incl. the ones the pass adds) */
    size_t n_nodes0;    /* nodes before the pass */
    unsigned char *hi;  /* per node: kept fp32 */
    unsigned char *k32; /* per value: read implicitly by a subgraph, must stay fp32 */
    enum qp_dtype *dt;  /* per value: dtype before the pass (declared or inferred) */
    enum qp_dtype *act; /* per value: dtype after the pass */
    int *cast16, *cast32;
    struct qp_f16_stats *st;
    struct qp_error *err;
    const struct qp_f16_options *o;
    enum qp_dtype lo; /* QP_DTYPE_FLOAT16 or QP_DTYPE_BFLOAT16 */
    const char *sfx;  /* "fp16" or "bf16", in the names the pass adds */
};

static enum qp_status nomem(struct qp_error *err) {
    return qp_error_set(err, QP_ERR_NOMEM, "fp16: out of memory");
}

static int has_subgraph(const struct qp_node *n) {
    for (int a = 0; a < n->n_attrs; a++)
        if (n->attrs[a].type == QP_ATTR_GRAPH || n->attrs[a].type == QP_ATTR_GRAPHS) return 1;
    return 0;
}

/* 1 when op `op` is one of the options' keep_ops (exact, case-sensitive as ONNX). */
static int kept_by_user(const struct conv *c, const char *op) {
    for (size_t i = 0; i < c->o->n_keep_ops; i++)
        if (strcmp(c->o->keep_ops[i], op) == 0) return 1;
    return 0;
}

/* Ops kept in fp32: no fp16 (bf16) in their schema, a dtype attribute deciding the output type,
 * sequence/optional values whose element type lives in the type proto, or named by the caller. */
static int blocked_op(const struct conv *c, const struct qp_node *n) {
    if (!qp_domain_is_onnx(n->domain) || has_subgraph(n)) return 1;
    if (strncmp(n->op_type, "Sequence", 8) == 0) return 1;
    if (kept_by_user(c, n->op_type)) return 1;
    if (c->lo == QP_DTYPE_BFLOAT16 && !qp_op_is(n, QP_OP_FLAG_BF16)) return 1;
    return qp_op_is(n, QP_OP_FLAG_NO_FP16);
}

/* Input slots that take any dtype (no Cast needed) and slots fixed to float32 by the schema. */
static int slot_any(const struct qp_node *n, int i) {
    return (i == 0 && (qp_node_is(n, "Cast") || qp_node_is(n, "CastLike"))) ||
           qp_node_is(n, "Shape") || qp_node_is(n, "Size");
}
static int slot_f32(const struct qp_node *n, int i) {
    return i == 2 && qp_node_is(n, "Resize");
}
/* Output slots that stay float whatever the node computes in (LayerNormalization's stash). */
static int out_f32(const struct qp_node *n, int k) {
    return k >= 1 && qp_node_is(n, "LayerNormalization");
}

static enum qp_dtype in_dt(const struct conv *c, const struct qp_node *n, int i) {
    return i < n->n_inputs && n->inputs[i] >= 0 ? c->dt[n->inputs[i]] : QP_DTYPE_UNDEFINED;
}

static enum qp_dtype attr_dtype(const struct qp_node *n, const char *name, enum qp_dtype def) {
    const struct qp_attr *a = qp_node_attr(n, name);
    return a && a->type == QP_ATTR_INT && qp_dtype_valid((int)a->i) ? (enum qp_dtype)a->i : def;
}

/* Dtype of a subgraph output (If/Loop/Scan results), or UNDEFINED. */
static enum qp_dtype branch_out(const struct qp_node *n, int k) {
    const struct qp_attr *a = qp_node_attr(n, "then_branch");
    if (!a) a = qp_node_attr(n, "body");
    if (!a || a->type != QP_ATTR_GRAPH || !a->g) return QP_DTYPE_UNDEFINED;
    const struct qp_graph *b = a->g;
    size_t idx = (size_t)k + (qp_node_is(n, "Loop") ? 1 : 0);
    if (idx >= b->n_outputs) return QP_DTYPE_UNDEFINED;
    return b->values[b->outputs[idx]].dtype;
}

/* The dtype of output `k` of node `n` from the op's type rules (ONNX schemas). */
static enum qp_dtype infer_out(const struct conv *c, const struct qp_node *n, int k) {
    if (!qp_domain_is_onnx(n->domain)) return QP_DTYPE_UNDEFINED;
    if (qp_node_is(n, "Constant")) {
        for (int a = 0; a < n->n_attrs; a++) {
            const struct qp_attr *at = &n->attrs[a];
            if (!strcmp(at->name, "value") && at->t) return at->t->dtype;
            if (!strcmp(at->name, "value_float") || !strcmp(at->name, "value_floats"))
                return QP_DTYPE_FLOAT;
            if (!strcmp(at->name, "value_int") || !strcmp(at->name, "value_ints"))
                return QP_DTYPE_INT64;
            if (!strcmp(at->name, "value_string") || !strcmp(at->name, "value_strings"))
                return QP_DTYPE_STRING;
        }
        return QP_DTYPE_UNDEFINED;
    }
    if (qp_node_is(n, "Cast")) return attr_dtype(n, "to", QP_DTYPE_UNDEFINED);
    if (qp_node_is(n, "CastLike")) return in_dt(c, n, 1);
    if (qp_op_is(n, QP_OP_FLAG_OUT_INT64)) return QP_DTYPE_INT64;
    if (qp_op_is(n, QP_OP_FLAG_OUT_BOOL)) return QP_DTYPE_BOOL;
    if (qp_node_is(n, "QuantizeLinear")) {
        enum qp_dtype zp = in_dt(c, n, 2);
        if (zp != QP_DTYPE_UNDEFINED) return zp;
        return attr_dtype(n, "output_dtype", QP_DTYPE_UINT8);
    }
    if (qp_node_is(n, "DequantizeLinear")) return in_dt(c, n, 1);
    if (qp_node_is(n, "ConstantOfShape")) {
        const struct qp_attr *a = qp_node_attr(n, "value");
        return a && a->t ? a->t->dtype : QP_DTYPE_FLOAT;
    }
    if ((qp_node_is(n, "TopK") || qp_node_is(n, "MaxPool")) && k == 1) return QP_DTYPE_INT64;
    if (qp_node_is(n, "Unique") && k >= 1) return QP_DTYPE_INT64;
    if (qp_node_is(n, "Dropout") && k == 1) return QP_DTYPE_BOOL;
    if (qp_node_is(n, "LayerNormalization") && k >= 1) return QP_DTYPE_FLOAT;
    if (qp_node_is(n, "Where")) return in_dt(c, n, 1);
    if (qp_node_is(n, "OneHot")) return in_dt(c, n, 2);
    if (qp_node_is(n, "RandomNormal") || qp_node_is(n, "RandomUniform"))
        return attr_dtype(n, "dtype", QP_DTYPE_FLOAT);
    if (qp_node_is(n, "RandomNormalLike") || qp_node_is(n, "RandomUniformLike") ||
        qp_node_is(n, "EyeLike") || qp_node_is(n, "Bernoulli"))
        return attr_dtype(n, "dtype", in_dt(c, n, 0));
    if (qp_node_is(n, "Multinomial")) return attr_dtype(n, "dtype", QP_DTYPE_INT32);
    if (qp_node_is(n, "HannWindow") || qp_node_is(n, "HammingWindow") ||
        qp_node_is(n, "BlackmanWindow") || qp_node_is(n, "MelWeightMatrix"))
        return attr_dtype(n, "output_datatype", QP_DTYPE_FLOAT);
    if (qp_node_is(n, "If") || qp_node_is(n, "Loop") || qp_node_is(n, "Scan"))
        return branch_out(n, k);
    if (qp_node_is(n, "TfIdfVectorizer")) return QP_DTYPE_FLOAT;
    if (qp_node_is(n, "DynamicQuantizeLinear")) return k == 1 ? QP_DTYPE_FLOAT : QP_DTYPE_UINT8;
    return in_dt(c, n, 0);
}

static void mark_outer(struct conv *c, const struct qp_graph *sub);

/* mark_outer for each subgraph (If/Loop/Scan bodies) held in an attribute of n. */
static void mark_subgraphs(struct conv *c, const struct qp_node *n) {
    for (int a = 0; a < n->n_attrs; a++) {
        const struct qp_attr *at = &n->attrs[a];
        if (at->type == QP_ATTR_GRAPH && at->g) mark_outer(c, at->g);
        if (at->type == QP_ATTR_GRAPHS)
            for (size_t j = 0; j < at->n; j++)
                if (at->graphs[j]) mark_outer(c, at->graphs[j]);
    }
}

/* Marks the top-level values read implicitly (outer scope) by subgraphs of `sub`. */
static void mark_outer(struct conv *c, const struct qp_graph *sub) {
    for (size_t v = 0; v < sub->n_values; v++) {
        if (!sub->values[v].is_outer) continue;
        int tv = qp_graph_find_value(c->g, sub->values[v].name);
        if (tv >= 0) c->k32[tv] = 1;
    }
    for (size_t i = 0; i < sub->n_nodes; i++) {
        mark_subgraphs(c, &sub->nodes[i]);
    }
}

static int is_constant_value(const struct conv *c, int v) {
    const struct qp_value *val = &c->g->values[v];
    if (val->initializer >= 0) return 1;
    return val->producer >= 0 && qp_node_is(&c->g->nodes[val->producer], "Constant");
}

/* What input `i` of node `ni` wants, given the node's class (WANT_ANY for non-float slots). */
static int slot_want(const struct conv *c, int ni, int i) {
    const struct qp_node *n = &c->g->nodes[ni];
    int v = n->inputs[i];
    if (v < 0 || c->dt[v] != QP_DTYPE_FLOAT || slot_any(n, i)) return WANT_ANY;
    return c->hi[ni] || slot_f32(n, i) ? WANT_F32 : WANT_F16;
}

/* fp16 (bf16 with `bf16`) bits of float32 data, clamped to the fp16 range; `scale` raises
 * non-zero values that would round to zero. */
static uint16_t *to_f16(const void *src, uint64_t n, int bf16, int scale, size_t *clamped,
                        size_t *under) {
    uint16_t *out = n > SIZE_MAX ? NULL : qp_malloc_n((size_t)n, sizeof *out);
    if (!out) return NULL;
    const unsigned char *b = src;
    for (uint64_t i = 0; i < n; i++) {
        float x;
        memcpy(&x, b + i * 4, 4);
        if (!bf16 && !isnan(x) && fabsf(x) > F16_MAX) {
            x = x > 0 ? F16_MAX : -F16_MAX;
            (*clamped)++;
        }
        uint16_t h = bf16 ? qp_f32_to_bf16(x) : qp_f32_to_fp16(x);
        if (scale && x != 0 && (h & 0x7fff) == 0) {
            h = (uint16_t)((h & 0x8000) | 1);
            (*under)++;
        }
        out[i] = h;
    }
    return out;
}

/* Converts tensor `t` (float32 with data) in place to fp16; `what` names it in messages. */
static enum qp_status convert_tensor(struct conv *c, struct qp_tensor *t, int scale,
                                     const char *what) {
    if (!t->data && t->numel)
        return qp_error_set(c->err, QP_ERR_UNSUPPORTED,
                            "fp16: %s '%s': data not loaded (external data), cannot convert", what,
                            t->name ? t->name : "");
    size_t want_bytes = 0;
    if (t->numel > SIZE_MAX || !qp_size_mul((size_t)t->numel, 4, &want_bytes) ||
        t->nbytes != want_bytes)
        return qp_error_set(c->err, QP_ERR_BAD_INPUT,
                            "fp16: %s '%s': %zu bytes for %llu float32 elements", what,
                            t->name ? t->name : "", t->nbytes, (unsigned long long)t->numel);
    size_t cl = 0, un = 0;
    uint16_t *h = to_f16(t->data, t->numel, c->lo == QP_DTYPE_BFLOAT16, scale, &cl, &un);
    if (!h) return nomem(c->err);
    enum qp_status st = qp_model_own(c->m, h, c->err);
    if (st != QP_OK) return st;
    if (cl)
        qp_log(QP_LOG_WARN, "fp16: %s '%s': %zu values beyond the fp16 range clamped to +-65504",
               what, t->name ? t->name : "", cl);
    if (un && c->lo == QP_DTYPE_BFLOAT16)
        qp_log(QP_LOG_WARN,
               "bf16: scale '%s': %zu non-zero values below bf16 raised to its smallest subnormal",
               t->name ? t->name : "", un);
    else if (un)
        qp_log(QP_LOG_WARN, "fp16: scale '%s': %zu non-zero values below fp16 raised to 2^-24",
               t->name ? t->name : "", un);
    c->st->n_clamped += cl;
    c->st->n_scale_underflow += un;
    t->dtype = c->lo;
    t->data = h;
    t->nbytes = (size_t)t->numel * 2;
    return QP_OK;
}

/* 1 when value `v` feeds the scale input of a QuantizeLinear/DequantizeLinear. */
static int feeds_scale(const struct conv *c, int v) {
    const struct qp_value *val = &c->g->values[v];
    for (size_t u = 0; u < val->n_uses; u++) {
        const struct qp_node *n = &c->g->nodes[val->uses[u].node];
        if (val->uses[u].input == 1 &&
            (qp_node_is(n, "QuantizeLinear") || qp_node_is(n, "DequantizeLinear")))
            return 1;
    }
    return 0;
}

/* A new value named from `base` typed like `like` with dtype `dt`. */
static int new_value(struct conv *c, const char *base, int like, enum qp_dtype dt) {
    const char *name = qp_graph_unique_value_name(c->g, base);
    if (!name) return -1;
    int v = qp_graph_value(c->g, name);
    if (v < 0 || (size_t)v >= c->cap) return -1;
    struct qp_value *d = &c->g->values[v];
    const struct qp_value *s = &c->g->values[like];
    d->kind = QP_VALUE_TENSOR;
    d->dtype = dt;
    d->rank = s->rank;
    d->dims = s->dims;
    c->dt[v] = dt;
    c->act[v] = dt;
    c->cast16[v] = c->cast32[v] = -1;
    return v;
}

/* Adds Cast(src) -> dst with `to`. */
static enum qp_status add_cast(struct conv *c, int src, int dst, enum qp_dtype to) {
    char base[600];
    snprintf(base, sizeof base, "%.500s_Cast", c->g->values[dst].name);
    const char *nn = qp_graph_unique_node_name(c->g, base);
    if (!nn) return nomem(c->err);
    const char *in[1] = {c->g->values[src].name}, *out[1] = {c->g->values[dst].name};
    int node = -1;
    enum qp_status st = qp_graph_add_node(c->g, nn, "Cast", "", 1, in, 1, out, &node, c->err);
    if (st != QP_OK) return st;
    struct qp_attr *a = qp_node_add_attr(c->g, node, "to", QP_ATTR_INT);
    if (!a) return nomem(c->err);
    a->i = to;
    c->st->n_casts++;
    return QP_OK;
}

/* The value holding `v` in dtype `want` (a shared Cast made on first use). */
static enum qp_status cast_of(struct conv *c, int v, int want, int *out) {
    int *slot = want == WANT_F16 ? &c->cast16[v] : &c->cast32[v];
    if (*slot >= 0) {
        *out = *slot;
        return QP_OK;
    }
    enum qp_dtype to = want == WANT_F16 ? c->lo : QP_DTYPE_FLOAT;
    char base[600];
    snprintf(base, sizeof base, "%.500s_cast_%s", c->g->values[v].name,
             want == WANT_F16 ? c->sfx : "fp32");
    int nv = new_value(c, base, v, to);
    if (nv < 0) return nomem(c->err);
    enum qp_status st = add_cast(c, v, nv, to);
    if (st != QP_OK) return st;
    slot = want == WANT_F16 ? &c->cast16[v] : &c->cast32[v];
    *slot = nv;
    *out = nv;
    return QP_OK;
}

/* Float initializers: converted in place when every consumer takes fp16, else an fp16 copy for
 * the fp16 consumers. */
static enum qp_status convert_inits(struct conv *c) {
    struct qp_graph *g = c->g;
    size_t n_inits = g->n_inits;
    for (size_t i = 0; i < n_inits; i++) {
        int v = g->inits_value[i];
        struct qp_value *val = &g->values[v];
        if (g->inits[i].dtype != QP_DTYPE_FLOAT || val->is_graph_input || val->is_graph_output ||
            c->k32[v])
            continue;
        int n16 = 0, n32 = 0;
        for (size_t u = 0; u < val->n_uses; u++) {
            int w = slot_want(c, val->uses[u].node, val->uses[u].input);
            n16 += w == WANT_F16;
            n32 += w == WANT_F32;
        }
        if (!n16) continue;
        int scale = feeds_scale(c, v);
        enum qp_status st;
        if (!n32) {
            if ((st = convert_tensor(c, &g->inits[i], scale, "initializer")) != QP_OK) return st;
            g->values[v].dtype = c->lo;
            c->act[v] = c->lo;
            c->st->n_initializers++;
            continue;
        }
        struct qp_tensor copy = g->inits[i];
        char base[600];
        snprintf(base, sizeof base, "%.500s_%s", val->name, c->sfx);
        copy.name = qp_graph_unique_value_name(g, base);
        if (!copy.name) return nomem(c->err);
        copy.origin = NULL;
        copy.doc_string = NULL;
        if ((st = convert_tensor(c, &copy, scale, "initializer")) != QP_OK) return st;
        int nv = -1;
        if ((st = qp_graph_add_initializer(g, &copy, &nv, c->err)) != QP_OK) return st;
        if ((size_t)nv >= c->cap) return qp_error_set(c->err, QP_ERR_INTERNAL, "fp16: overflow");
        g->values[nv].dtype = c->lo;
        c->dt[nv] = c->act[nv] = c->lo;
        c->cast16[nv] = c->cast32[nv] = -1;
        c->cast16[v] = nv; /* fp16 consumers read the copy */
        c->st->n_initializers++;
    }
    return QP_OK;
}

/* A graph output computed in fp16: its producer writes `<name>_fp16` and a Cast to float32
 * writes the output under its own name. */
static enum qp_status keep_output_f32(struct conv *c, int v) {
    struct qp_graph *g = c->g;
    int prod = g->values[v].producer, slot = g->values[v].producer_output;
    char base[600];
    snprintf(base, sizeof base, "%.500s_%s", g->values[v].name, c->sfx);
    int nv = new_value(c, base, v, c->lo);
    if (nv < 0) return nomem(c->err);
    g->nodes[prod].outputs[slot] = nv;
    g->values[nv].producer = prod;
    g->values[nv].producer_output = slot;
    g->values[v].producer = -1;
    /* Consumers inside the graph read the fp16 tensor (a Cast to fp32 is the output itself). */
    while (g->values[v].n_uses) {
        struct qp_use u = g->values[v].uses[g->values[v].n_uses - 1];
        enum qp_status st = qp_graph_set_input(g, u.node, u.input, nv, c->err);
        if (st != QP_OK) return st;
    }
    g->values[v].dtype = QP_DTYPE_FLOAT;
    c->act[v] = QP_DTYPE_FLOAT;
    c->cast32[nv] = v;
    return add_cast(c, nv, v, QP_DTYPE_FLOAT);
}

static enum qp_status convert_constant(struct conv *c, int ni) {
    struct qp_node *n = &c->g->nodes[ni];
    int v = n->n_outputs > 0 ? n->outputs[0] : -1;
    if (v < 0 || c->dt[v] != QP_DTYPE_FLOAT || c->k32[v] || c->g->values[v].is_graph_output)
        return QP_OK;
    struct qp_attr *a = NULL;
    for (int k = 0; k < n->n_attrs; k++)
        if (!strcmp(n->attrs[k].name, "value") && n->attrs[k].type == QP_ATTR_TENSOR &&
            n->attrs[k].t)
            a = &n->attrs[k];
    if (!a) return QP_OK; /* value_float(s): left float32, consumers get a Cast */
    const struct qp_value *val = &c->g->values[v];
    int n16 = 0;
    for (size_t u = 0; u < val->n_uses; u++)
        n16 += slot_want(c, val->uses[u].node, val->uses[u].input) == WANT_F16;
    if (!n16) return QP_OK;
    struct qp_tensor *t = qp_arena_alloc(c->m->arena, sizeof *t);
    if (!t) return nomem(c->err);
    *t = *a->t;
    t->origin = NULL;
    enum qp_status st = convert_tensor(c, t, feeds_scale(c, v), "Constant");
    if (st != QP_OK) return st;
    c->g->nodes[ni].attrs[a - n->attrs].t = t;
    c->g->values[v].dtype = c->lo;
    c->act[v] = c->lo;
    c->st->n_constants++;
    return QP_OK;
}

static enum qp_status run(struct conv *c) {
    struct qp_graph *g = c->g;
    enum qp_status st;
    /* Values read by subgraphs stay fp32. */
    for (size_t i = 0; i < g->n_nodes; i++) {
        if (!g->nodes[i].dead) mark_subgraphs(c, &g->nodes[i]);
    }
    /* Dtypes before the pass, inferred where the model does not declare them. */
    for (size_t v = 0; v < g->n_values; v++) {
        c->dt[v] = g->values[v].kind == QP_VALUE_TENSOR ? g->values[v].dtype : QP_DTYPE_UNDEFINED;
        if (g->values[v].initializer >= 0) c->dt[v] = g->inits[g->values[v].initializer].dtype;
    }
    for (size_t k = 0; k < g->n_topo; k++) {
        const struct qp_node *n = &g->nodes[g->topo[k]];
        for (int o = 0; o < n->n_outputs; o++) {
            int v = n->outputs[o];
            if (v < 0 || g->values[v].kind != QP_VALUE_TENSOR) continue;
            if (c->dt[v] == QP_DTYPE_UNDEFINED) {
                c->dt[v] = infer_out(c, n, o);
                if (c->dt[v] != QP_DTYPE_UNDEFINED) g->values[v].dtype = c->dt[v];
            }
        }
    }
    memcpy(c->act, c->dt, g->n_values * sizeof *c->act);
    /* Without keep_io_types, float graph inputs arrive in the low precision (fp32 consumers get
     * a Cast, below). */
    for (size_t i = 0; i < g->n_inputs && !c->o->keep_io_types; i++) {
        int v = g->inputs[i];
        if (c->dt[v] != QP_DTYPE_FLOAT || g->values[v].initializer >= 0 || c->k32[v]) continue;
        c->act[v] = c->lo;
        g->values[v].dtype = c->lo;
    }
    /* Static classes. */
    for (size_t k = 0; k < g->n_topo; k++) {
        int ni = g->topo[k];
        const struct qp_node *n = &g->nodes[ni];
        int hi = blocked_op(c, n);
        for (int o = 0; o < n->n_outputs && !hi; o++)
            if (n->outputs[o] >= 0 && c->k32[n->outputs[o]]) hi = 1;
        c->hi[ni] = (unsigned char)hi;
    }
    /* Dynamic classes (Q follows its input, DQ its consumers) and output dtypes, in order. */
    for (size_t k = 0; k < g->n_topo; k++) {
        int ni = g->topo[k];
        struct qp_node *n = &g->nodes[ni];
        if (qp_node_is(n, "QuantizeLinear") && n->n_inputs > 0 && n->inputs[0] >= 0) {
            int x = n->inputs[0];
            if (!is_constant_value(c, x) && c->act[x] == QP_DTYPE_FLOAT) c->hi[ni] = 1;
        }
        if (qp_node_is(n, "DequantizeLinear") && n->n_outputs > 0 && n->outputs[0] >= 0) {
            const struct qp_value *val = &g->values[n->outputs[0]];
            int n32 = 0, n16 = 0;
            for (size_t u = 0; u < val->n_uses; u++) {
                const struct qp_node *cn = &g->nodes[val->uses[u].node];
                int w = c->hi[val->uses[u].node] || slot_f32(cn, val->uses[u].input);
                n32 += w;
                n16 += !w;
            }
            if (n32 && !n16 && !val->is_graph_output) c->hi[ni] = 1;
        }
        if (c->hi[ni]) {
            c->st->n_fp32_nodes++;
            continue;
        }
        c->st->n_fp16_nodes++;
        if (qp_node_is(n, "Constant")) continue; /* decided by its consumers, below */
        for (int i = 0; i < n->n_inputs; i++) {
            int v = n->inputs[i];
            if (v >= 0 && g->values[v].kind == QP_VALUE_TENSOR && c->dt[v] == QP_DTYPE_UNDEFINED &&
                !slot_any(n, i))
                return qp_error_set(c->err, QP_ERR_UNSUPPORTED,
                                    "fp16: node '%s' (%s) input %d: the dtype of tensor '%s' is "
                                    "unknown; use --high_precision_dtype fp32",
                                    n->name ? n->name : "", n->op_type, i, g->values[v].name);
        }
        if (qp_node_is(n, "Cast")) {
            const struct qp_attr *to = qp_node_attr(n, "to");
            if (to && to->type == QP_ATTR_INT && to->i == QP_DTYPE_FLOAT) {
                ((struct qp_attr *)to)->i = c->lo;
                if (n->outputs[0] >= 0) {
                    c->act[n->outputs[0]] = c->lo;
                    g->values[n->outputs[0]].dtype = c->lo;
                }
            }
            continue;
        }
        for (int o = 0; o < n->n_outputs; o++) {
            int v = n->outputs[o];
            if (v < 0 || c->dt[v] != QP_DTYPE_FLOAT || out_f32(n, o)) continue;
            c->act[v] = c->lo;
            g->values[v].dtype = c->lo;
        }
    }
    /* Constant nodes and initializers. */
    for (size_t k = 0; k < g->n_topo; k++) {
        int ni = g->topo[k];
        if (!c->hi[ni] && qp_node_is(&g->nodes[ni], "Constant") && (st = convert_constant(c, ni)))
            return st;
    }
    if ((st = convert_inits(c)) != QP_OK) return st;
    /* Graph outputs stay float32 (with keep_io_types). */
    for (size_t i = 0; i < g->n_outputs && c->o->keep_io_types; i++) {
        int v = g->outputs[i];
        if (c->act[v] == c->lo && c->dt[v] == QP_DTYPE_FLOAT && g->values[v].producer >= 0 &&
            (st = keep_output_f32(c, v)))
            return st;
    }
    /* Boundaries. */
    for (size_t ni = 0; ni < c->n_nodes0; ni++) {
        if (g->nodes[ni].dead) continue;
        for (int i = 0; i < g->nodes[ni].n_inputs; i++) {
            int v = g->nodes[ni].inputs[i];
            int w = slot_want(c, (int)ni, i);
            if (w == WANT_ANY) continue;
            enum qp_dtype need = w == WANT_F16 ? c->lo : QP_DTYPE_FLOAT;
            if (c->act[v] == need) continue;
            int nv = -1;
            if ((st = cast_of(c, v, w, &nv)) != QP_OK) return st;
            if ((st = qp_graph_set_input(g, (int)ni, i, nv, c->err)) != QP_OK) return st;
        }
    }
    return qp_graph_toposort(g, c->err);
}

void qp_f16_options_default(struct qp_f16_options *o) {
    memset(o, 0, sizeof *o);
    o->dtype = QP_DTYPE_FLOAT16;
    o->keep_io_types = 1;
}

enum qp_status qp_model_convert_f16(struct qp_model *m, struct qp_f16_stats *stats,
                                    struct qp_error *err) {
    struct qp_f16_options o;
    qp_f16_options_default(&o);
    return qp_model_convert_low(m, &o, stats, err);
}

enum qp_status qp_model_convert_low(struct qp_model *m, const struct qp_f16_options *o,
                                    struct qp_f16_stats *stats, struct qp_error *err) {
    if (!m || !m->graph || !o) return qp_error_set(err, QP_ERR_USAGE, "fp16: NULL argument");
    if (o->dtype != QP_DTYPE_FLOAT16 && o->dtype != QP_DTYPE_BFLOAT16)
        return qp_error_set(err, QP_ERR_USAGE, "fp16: target dtype %s is not float16/bfloat16",
                            qp_dtype_name(o->dtype));
    if (o->n_keep_ops && !o->keep_ops)
        return qp_error_set(err, QP_ERR_USAGE, "fp16: NULL keep_ops");
    struct qp_f16_stats local;
    struct conv c;
    memset(&c, 0, sizeof c);
    memset(&local, 0, sizeof local);
    c.o = o;
    c.lo = o->dtype;
    c.sfx = o->dtype == QP_DTYPE_BFLOAT16 ? "bf16" : "fp16";
    c.m = m;
    c.g = m->graph;
    c.st = stats ? stats : &local;
    memset(c.st, 0, sizeof *c.st);
    c.err = err;
    enum qp_status st = qp_graph_toposort(c.g, err);
    if (st != QP_OK) return st;
    /* New values: one fp16 copy per initializer, two Casts per value, one per graph output. */
    size_t nv4, no2;
    if (!qp_size_mul(c.g->n_values, 4, &nv4) || !qp_size_mul(c.g->n_outputs, 2, &no2) ||
        !qp_size_add(nv4, no2, &c.cap) || !qp_size_add(c.cap, 16, &c.cap))
        return qp_error_set(err, QP_ERR_NOMEM, "fp16: graph too large");
    c.n_nodes0 = c.g->n_nodes;
    c.hi = calloc(c.n_nodes0 + 1, 1);
    c.k32 = calloc(c.cap, 1);
    c.dt = calloc(c.cap, sizeof *c.dt);
    c.act = calloc(c.cap, sizeof *c.act);
    c.cast16 = qp_malloc_n(c.cap, sizeof *c.cast16);
    c.cast32 = qp_malloc_n(c.cap, sizeof *c.cast32);
    if (!c.hi || !c.k32 || !c.dt || !c.act || !c.cast16 || !c.cast32) {
        st = nomem(err);
        goto done;
    }
    for (size_t i = 0; i < c.cap; i++)
        c.cast16[i] = c.cast32[i] = -1;
    st = run(&c);
done:
    free(c.hi);
    free(c.k32);
    free(c.dt);
    free(c.act);
    free(c.cast16);
    free(c.cast32);
    return st;
}
