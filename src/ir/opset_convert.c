/*
 * Opset conversion of default-domain nodes (see opset_convert.h and docs/opset-conversion.md).
 *
 * Two passes over every graph of the model: a dry pass that runs each node's converter in
 * "check only" mode (every converter validates everything before it edits), then the real pass.
 * So an unsupported node leaves the model untouched.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/size.h"
#include "core/arena.h"
#include "ir/ir.h"
#include "ir/opset_convert.h"
#include "ir/optraits.h"

#define V(v) (UINT32_C(1) << (v))

/* Longest attribute list turned into an initializer (axes, pads, starts: a few per rank). */
#define MAX_LIST ((size_t)1 << 20)

/* Every default-domain operator of ONNX up to opset 21 with the opsets at which a new version
 * of it was introduced. Rows up to opset 17 come from the schemas of onnx 1.12
 * (onnx.defs.get_all_schemas_with_history); 18..21 were checked one by one against ONNX's
 * operator changelog (docs/Changelog.md) and its per-opset registration lists. Sorted by name
 * (strcmp) for bsearch. */
struct op_versions {
    const char *op;
    uint32_t since;
};

static const struct op_versions op_table[] = {
    {"Abs", V(1) | V(6) | V(13)},
    {"Acos", V(7)},
    {"Acosh", V(9)},
    {"Add", V(1) | V(6) | V(7) | V(13) | V(14)},
    {"AffineGrid", V(20)},
    {"And", V(1) | V(7)},
    {"ArgMax", V(1) | V(11) | V(12) | V(13)},
    {"ArgMin", V(1) | V(11) | V(12) | V(13)},
    {"Asin", V(7)},
    {"Asinh", V(9)},
    {"Atan", V(7)},
    {"Atanh", V(9)},
    {"AveragePool", V(1) | V(7) | V(10) | V(11) | V(19)},
    {"BatchNormalization", V(1) | V(6) | V(7) | V(9) | V(14) | V(15)},
    {"Bernoulli", V(15)},
    {"BitShift", V(11)},
    {"BitwiseAnd", V(18)},
    {"BitwiseNot", V(18)},
    {"BitwiseOr", V(18)},
    {"BitwiseXor", V(18)},
    {"BlackmanWindow", V(17)},
    {"Cast", V(1) | V(6) | V(9) | V(13) | V(19) | V(21)},
    {"CastLike", V(15) | V(19) | V(21)},
    {"Ceil", V(1) | V(6) | V(13)},
    {"Celu", V(12)},
    {"CenterCropPad", V(18)},
    {"Clip", V(1) | V(6) | V(11) | V(12) | V(13)},
    {"Col2Im", V(18)},
    {"Compress", V(9) | V(11)},
    {"Concat", V(1) | V(4) | V(11) | V(13)},
    {"ConcatFromSequence", V(11)},
    {"Constant", V(1) | V(9) | V(11) | V(12) | V(13) | V(19) | V(21)},
    {"ConstantOfShape", V(9) | V(20) | V(21)},
    {"Conv", V(1) | V(11)},
    {"ConvInteger", V(10)},
    {"ConvTranspose", V(1) | V(11)},
    {"Cos", V(7)},
    {"Cosh", V(9)},
    {"CumSum", V(11) | V(14)},
    {"DFT", V(17) | V(20)},
    {"DeformConv", V(19)},
    {"DepthToSpace", V(1) | V(11) | V(13)},
    {"DequantizeLinear", V(10) | V(13) | V(19) | V(21)},
    {"Det", V(11)},
    {"Div", V(1) | V(6) | V(7) | V(13) | V(14)},
    {"Dropout", V(1) | V(6) | V(7) | V(10) | V(12) | V(13)},
    {"DynamicQuantizeLinear", V(11)},
    {"Einsum", V(12)},
    {"Elu", V(1) | V(6)},
    {"Equal", V(1) | V(7) | V(11) | V(13) | V(19)},
    {"Erf", V(9) | V(13)},
    {"Exp", V(1) | V(6) | V(13)},
    {"Expand", V(8) | V(13)},
    {"EyeLike", V(9)},
    {"Flatten", V(1) | V(9) | V(11) | V(13) | V(21)},
    {"Floor", V(1) | V(6) | V(13)},
    {"GRU", V(1) | V(3) | V(7) | V(14)},
    {"Gather", V(1) | V(11) | V(13)},
    {"GatherElements", V(11) | V(13)},
    {"GatherND", V(11) | V(12) | V(13)},
    {"Gelu", V(20)},
    {"Gemm", V(1) | V(6) | V(7) | V(9) | V(11) | V(13)},
    {"GlobalAveragePool", V(1)},
    {"GlobalLpPool", V(1) | V(2)},
    {"GlobalMaxPool", V(1)},
    {"Greater", V(1) | V(7) | V(9) | V(13)},
    {"GreaterOrEqual", V(12) | V(16)},
    {"GridSample", V(16) | V(20)},
    {"GroupNormalization", V(18) | V(21)},
    {"HammingWindow", V(17)},
    {"HannWindow", V(17)},
    {"HardSigmoid", V(1) | V(6)},
    {"HardSwish", V(14)},
    {"Hardmax", V(1) | V(11) | V(13)},
    {"Identity", V(1) | V(13) | V(14) | V(16) | V(19) | V(21)},
    {"If", V(1) | V(11) | V(13) | V(16) | V(19) | V(21)},
    {"ImageDecoder", V(20)},
    {"InstanceNormalization", V(1) | V(6)},
    {"IsInf", V(10) | V(20)},
    {"IsNaN", V(9) | V(13) | V(20)},
    {"LRN", V(1) | V(13)},
    {"LSTM", V(1) | V(7) | V(14)},
    {"LayerNormalization", V(17)},
    {"LeakyRelu", V(1) | V(6) | V(16)},
    {"Less", V(1) | V(7) | V(9) | V(13)},
    {"LessOrEqual", V(12) | V(16)},
    {"Log", V(1) | V(6) | V(13)},
    {"LogSoftmax", V(1) | V(11) | V(13)},
    {"Loop", V(1) | V(11) | V(13) | V(16) | V(19) | V(21)},
    {"LpNormalization", V(1)},
    {"LpPool", V(1) | V(2) | V(11) | V(18)},
    {"MatMul", V(1) | V(9) | V(13)},
    {"MatMulInteger", V(10)},
    {"Max", V(1) | V(6) | V(8) | V(12) | V(13)},
    {"MaxPool", V(1) | V(8) | V(10) | V(11) | V(12)},
    {"MaxRoiPool", V(1)},
    {"MaxUnpool", V(9) | V(11)},
    {"Mean", V(1) | V(6) | V(8) | V(13)},
    {"MeanVarianceNormalization", V(9) | V(13)},
    {"MelWeightMatrix", V(17)},
    {"Min", V(1) | V(6) | V(8) | V(12) | V(13)},
    {"Mish", V(18)},
    {"Mod", V(10) | V(13)},
    {"Mul", V(1) | V(6) | V(7) | V(13) | V(14)},
    {"Multinomial", V(7)},
    {"Neg", V(1) | V(6) | V(13)},
    {"NegativeLogLikelihoodLoss", V(12) | V(13)},
    {"NonMaxSuppression", V(10) | V(11)},
    {"NonZero", V(9) | V(13)},
    {"Not", V(1)},
    {"OneHot", V(9) | V(11)},
    {"Optional", V(15)},
    {"OptionalGetElement", V(15) | V(18)},
    {"OptionalHasElement", V(15) | V(18)},
    {"Or", V(1) | V(7)},
    {"PRelu", V(1) | V(6) | V(7) | V(9) | V(16)},
    {"Pad", V(1) | V(2) | V(11) | V(13) | V(18) | V(19) | V(21)},
    {"Pow", V(1) | V(7) | V(12) | V(13) | V(15)},
    {"QLinearConv", V(10)},
    {"QLinearMatMul", V(10) | V(21)},
    {"QuantizeLinear", V(10) | V(13) | V(19) | V(21)},
    {"RNN", V(1) | V(7) | V(14)},
    {"RandomNormal", V(1)},
    {"RandomNormalLike", V(1)},
    {"RandomUniform", V(1)},
    {"RandomUniformLike", V(1)},
    {"Range", V(11)},
    {"Reciprocal", V(1) | V(6) | V(13)},
    {"ReduceL1", V(1) | V(11) | V(13) | V(18)},
    {"ReduceL2", V(1) | V(11) | V(13) | V(18)},
    {"ReduceLogSum", V(1) | V(11) | V(13) | V(18)},
    {"ReduceLogSumExp", V(1) | V(11) | V(13) | V(18)},
    {"ReduceMax", V(1) | V(11) | V(12) | V(13) | V(18) | V(20)},
    {"ReduceMean", V(1) | V(11) | V(13) | V(18)},
    {"ReduceMin", V(1) | V(11) | V(12) | V(13) | V(18) | V(20)},
    {"ReduceProd", V(1) | V(11) | V(13) | V(18)},
    {"ReduceSum", V(1) | V(11) | V(13)},
    {"ReduceSumSquare", V(1) | V(11) | V(13) | V(18)},
    {"RegexFullMatch", V(20)},
    {"Relu", V(1) | V(6) | V(13) | V(14)},
    {"Reshape", V(1) | V(5) | V(13) | V(14) | V(19) | V(21)},
    {"Resize", V(10) | V(11) | V(13) | V(18) | V(19)},
    {"ReverseSequence", V(10)},
    {"RoiAlign", V(10) | V(16)},
    {"Round", V(11)},
    {"STFT", V(17)},
    {"Scan", V(8) | V(9) | V(11) | V(16) | V(19) | V(21)},
    {"Scatter", V(9) | V(11)},
    {"ScatterElements", V(11) | V(13) | V(16) | V(18)},
    {"ScatterND", V(11) | V(13) | V(16) | V(18)},
    {"Selu", V(1) | V(6)},
    {"SequenceAt", V(11)},
    {"SequenceConstruct", V(11)},
    {"SequenceEmpty", V(11)},
    {"SequenceErase", V(11)},
    {"SequenceInsert", V(11)},
    {"SequenceLength", V(11)},
    {"SequenceMap", V(17)},
    {"Shape", V(1) | V(13) | V(15) | V(19) | V(21)},
    {"Shrink", V(9)},
    {"Sigmoid", V(1) | V(6) | V(13)},
    {"Sign", V(9) | V(13)},
    {"Sin", V(7)},
    {"Sinh", V(9)},
    {"Size", V(1) | V(13) | V(19) | V(21)},
    {"Slice", V(1) | V(10) | V(11) | V(13)},
    {"Softmax", V(1) | V(11) | V(13)},
    {"SoftmaxCrossEntropyLoss", V(12) | V(13)},
    {"Softplus", V(1)},
    {"Softsign", V(1)},
    {"SpaceToDepth", V(1) | V(13)},
    {"Split", V(1) | V(2) | V(11) | V(13) | V(18)},
    {"SplitToSequence", V(11)},
    {"Sqrt", V(1) | V(6) | V(13)},
    {"Squeeze", V(1) | V(11) | V(13) | V(21)},
    {"StringConcat", V(20)},
    {"StringNormalizer", V(10)},
    {"StringSplit", V(20)},
    {"Sub", V(1) | V(6) | V(7) | V(13) | V(14)},
    {"Sum", V(1) | V(6) | V(8) | V(13)},
    {"Tan", V(7)},
    {"Tanh", V(1) | V(6) | V(13)},
    {"TfIdfVectorizer", V(9)},
    {"ThresholdedRelu", V(10)},
    {"Tile", V(1) | V(6) | V(13)},
    {"TopK", V(1) | V(10) | V(11)},
    {"Transpose", V(1) | V(13) | V(21)},
    {"Trilu", V(14)},
    {"Unique", V(11)},
    {"Unsqueeze", V(1) | V(11) | V(13) | V(21)},
    {"Upsample", V(1) | V(7) | V(9) | V(10)},
    {"Where", V(9) | V(16)},
    {"Xor", V(1) | V(7)},
};

static int op_cmp(const void *key, const void *row) {
    return strcmp((const char *)key, ((const struct op_versions *)row)->op);
}

static const struct op_versions *op_lookup(const char *op) {
    return bsearch(op, op_table, sizeof op_table / sizeof op_table[0], sizeof op_table[0], op_cmp);
}

/* Versions introduced in (from, to]. */
static uint32_t bumps_between(uint32_t since, int64_t from, int64_t to) {
    uint32_t mask = 0;
    for (int64_t v = from + 1; v <= to && v < 32; v++)
        mask |= V(v);
    return since & mask;
}

/* ---- conversion context --------------------------------------------------------------------- */

struct conv {
    struct qp_model *m;
    struct qp_graph *g;
    int node;
    int64_t from, to;
    int dry;     /* check only: no edits */
    int changed; /* the current graph was edited */
    struct qp_error *err;
};

/* Node pointers are re-fetched after every edit: adding nodes may move g->nodes. */
static struct qp_node *cur(const struct conv *c) {
    return &c->g->nodes[c->node];
}

static enum qp_status fail(const struct conv *c, enum qp_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static enum qp_status fail(const struct conv *c, enum qp_status st, const char *fmt, ...) {
    char what[640];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    const struct qp_node *n = cur(c);
    return qp_error_set(c->err, st, "opset: node '%s' (%s, opset %lld -> %lld): %s",
                        n->name && *n->name ? n->name : "(unnamed)", n->op_type, (long long)c->from,
                        (long long)c->to, what);
}

static enum qp_status nomem(const struct conv *c) {
    return fail(c, QP_ERR_NOMEM, "out of memory");
}

/* 1 when the conversion crosses opset `v` (from < v <= to). */
static int crosses(const struct conv *c, int64_t v) {
    return c->from < v && v <= c->to;
}

/* ---- attributes ----------------------------------------------------------------------------- */

/* Reads an optional attribute of type `type`; a present attribute of another type is
 * QP_ERR_BAD_INPUT. *a_out is NULL when absent. */
static enum qp_status get_attr(const struct conv *c, const char *name, enum qp_attr_type type,
                               const struct qp_attr **a_out) {
    const struct qp_attr *a = qp_node_attr(cur(c), name);
    if (a && a->type != type)
        return fail(c, QP_ERR_BAD_INPUT, "attribute '%s' has type %d, expected %d", name,
                    (int)a->type, (int)type);
    *a_out = a;
    return QP_OK;
}

static enum qp_status get_int(const struct conv *c, const char *name, int64_t dflt, int64_t *out,
                              int *present) {
    const struct qp_attr *a = NULL;
    enum qp_status st = get_attr(c, name, QP_ATTR_INT, &a);
    if (st != QP_OK) return st;
    *out = a ? a->i : dflt;
    if (present) *present = a != NULL;
    return QP_OK;
}

/* String attribute compared as text (attributes hold bytes, not C strings). */
static int attr_str_is(const struct qp_attr *a, const char *s) {
    size_t n = strlen(s);
    return a && a->s.len == n && (n == 0 || memcmp(a->s.data, s, n) == 0);
}

/* Rebuilds the attribute list without the attributes named in `names` (arena). */
static enum qp_status drop_attrs(struct conv *c, int n_names, const char *const *names) {
    struct qp_node *n = cur(c);
    int keep = 0;
    for (int i = 0; i < n->n_attrs; i++) {
        int drop = 0;
        for (int k = 0; k < n_names; k++)
            drop |= !strcmp(n->attrs[i].name, names[k]);
        keep += !drop;
    }
    if (keep == n->n_attrs) return QP_OK;
    struct qp_attr *attrs = qp_arena_calloc(c->m->arena, (size_t)keep + 1, sizeof *attrs);
    if (!attrs) return nomem(c);
    int j = 0;
    for (int i = 0; i < n->n_attrs; i++) {
        int drop = 0;
        for (int k = 0; k < n_names; k++)
            drop |= !strcmp(n->attrs[i].name, names[k]);
        if (!drop) attrs[j++] = n->attrs[i];
    }
    /* A fresh array, so attribute pointers taken before the drop stay valid. */
    n->attrs = attrs;
    n->n_attrs = keep;
    n->cap_attrs = keep + 1;
    c->changed = 1;
    return QP_OK;
}

static enum qp_status drop_attr(struct conv *c, const char *name) {
    return drop_attrs(c, 1, &name);
}

/* Sets (replacing any existing) an INT attribute. */
static enum qp_status put_int(struct conv *c, const char *name, int64_t v) {
    enum qp_status st = drop_attr(c, name);
    if (st != QP_OK) return st;
    struct qp_attr *a = qp_node_add_attr(c->g, c->node, name, QP_ATTR_INT);
    if (!a) return nomem(c);
    a->i = v;
    c->changed = 1;
    return QP_OK;
}

static enum qp_status put_str(struct conv *c, const char *name, const char *s) {
    enum qp_status st = drop_attr(c, name);
    if (st != QP_OK) return st;
    struct qp_attr *a = qp_node_add_attr(c->g, c->node, name, QP_ATTR_STRING);
    char *copy = qp_arena_strdup(c->m->arena, s);
    if (!a || !copy) return nomem(c);
    a->s.data = (const uint8_t *)copy;
    a->s.len = strlen(copy);
    c->changed = 1;
    return QP_OK;
}

/* ---- inputs, outputs, constants ----------------------------------------------------------- */

/* Resizes the node's input list: new slots are omitted (-1); dropped slots lose their use. */
static enum qp_status set_n_inputs(struct conv *c, int n_new) {
    struct qp_node *n = cur(c);
    enum qp_status st;
    for (int i = n_new; i < n->n_inputs; i++)
        if ((st = qp_graph_set_input(c->g, c->node, i, -1, c->err)) != QP_OK) return st;
    if (n_new > n->n_inputs) {
        int *in = qp_arena_calloc(c->m->arena, (size_t)n_new, sizeof *in);
        if (!in) return nomem(c);
        for (int i = 0; i < n_new; i++)
            in[i] = i < n->n_inputs ? n->inputs[i] : -1;
        n->inputs = in;
    }
    n->n_inputs = n_new;
    c->changed = 1;
    return QP_OK;
}

static enum qp_status set_in(struct conv *c, int slot, int v) {
    c->changed = 1;
    return qp_graph_set_input(c->g, c->node, slot, v, c->err);
}

/* Reads of a value by name from subgraphs (outer values) are not in its use list. */
static int value_used(const struct conv *c, int v) {
    const struct qp_value *val = &c->g->values[v];
    if (val->n_uses || val->is_graph_output) return 1;
    for (size_t i = 0; i < c->m->n_graphs; i++) {
        const struct qp_graph *h = c->m->graphs[i];
        if (h == c->g) continue;
        int w = qp_graph_find_value(h, val->name);
        if (w >= 0 && h->values[w].is_outer &&
            (h->values[w].n_uses || h->values[w].is_graph_output))
            return 1;
    }
    return 0;
}

/* Drops output `slot` (the value keeps its name but no longer has a producer); trailing
 * omitted outputs are trimmed so the node lists exactly what it writes. */
static void drop_output(struct conv *c, int slot) {
    struct qp_node *n = cur(c);
    if (slot >= n->n_outputs || n->outputs[slot] < 0) return;
    struct qp_value *val = &c->g->values[n->outputs[slot]];
    if (val->producer == c->node) val->producer = -1;
    n->outputs[slot] = -1;
    while (n->n_outputs > 1 && n->outputs[n->n_outputs - 1] < 0)
        n->n_outputs--;
    c->changed = 1;
}

/* Makes output `slot` write a new value named after `suffix` and returns it; the old value is
 * left without a producer, for a new node to write. */
static enum qp_status redirect_output(struct conv *c, int slot, const char *suffix, int *v_out) {
    char base[512];
    snprintf(base, sizeof base, "%.400s_%.80s", cur(c)->name, suffix);
    const char *name = qp_graph_unique_value_name(c->g, base);
    if (!name) return nomem(c);
    int nv = qp_graph_value(c->g, name);
    if (nv < 0) return nomem(c);
    struct qp_node *n = cur(c);
    int old = n->outputs[slot];
    struct qp_value *o = &c->g->values[old], *w = &c->g->values[nv];
    w->kind = o->kind;
    w->dtype = o->dtype;
    w->producer = c->node;
    w->producer_output = slot;
    o->producer = -1;
    n->outputs[slot] = nv;
    c->changed = 1;
    *v_out = nv;
    return QP_OK;
}

/* Appends a node `op` named `<node>_<suffix>` reading `ins` and writing `out` (a value name) or,
 * when `out` is NULL, a new value `<node>_<suffix>_output`. */
static enum qp_status add_node(struct conv *c, const char *suffix, const char *op, int n_in,
                               const char *const *ins, const char *out, int *node_out,
                               int *value_out) {
    char base[512];
    snprintf(base, sizeof base, "%.400s_%.80s", cur(c)->name, suffix);
    const char *name = qp_graph_unique_node_name(c->g, base);
    if (!name) return nomem(c);
    if (!out) {
        char obase[560];
        snprintf(obase, sizeof obase, "%s_output", base);
        out = qp_graph_unique_value_name(c->g, obase);
        if (!out) return nomem(c);
    }
    int node;
    enum qp_status st = qp_graph_add_node(c->g, name, op, "", n_in, ins, 1, &out, &node, c->err);
    if (st != QP_OK) return st;
    c->changed = 1;
    if (node_out) *node_out = node;
    if (value_out) *value_out = c->g->nodes[node].outputs[0];
    return QP_OK;
}

/* Adds an initializer `<node>_<suffix>` holding a copy of `data` (owned by the model). */
static enum qp_status add_init(struct conv *c, const char *suffix, enum qp_dtype dt, int rank,
                               const int64_t *dims, const void *data, size_t nbytes, int *v_out) {
    char base[512];
    snprintf(base, sizeof base, "%.400s_%.80s", cur(c)->name, suffix);
    struct qp_tensor t = {0};
    t.name = qp_graph_unique_value_name(c->g, base);
    int64_t *d = qp_arena_calloc(c->m->arena, (size_t)rank + 1, sizeof *d);
    void *buf = malloc(nbytes ? nbytes : 1); /* never NULL: NULL data means "not read" */
    if (!t.name || !d || !buf) {
        free(buf);
        return nomem(c);
    }
    if (qp_model_own(c->m, buf, NULL) != QP_OK) return nomem(c);
    if (nbytes) memcpy(buf, data, nbytes);
    t.numel = 1;
    for (int i = 0; i < rank; i++) {
        d[i] = dims[i];
        t.numel *= (uint64_t)dims[i];
    }
    t.dtype = dt;
    t.rank = rank;
    t.dims = d;
    t.data = buf;
    t.nbytes = nbytes;
    c->changed = 1;
    return qp_graph_add_initializer(c->g, &t, v_out, c->err);
}

/* 1-D int64 initializer. `n` comes from an attribute list of the model, so its size is checked. */
static enum qp_status add_i64s(struct conv *c, const char *suffix, const int64_t *vals, size_t n,
                               int *v_out) {
    if (n > MAX_LIST) return fail(c, QP_ERR_BAD_INPUT, "'%s' has %zu entries", suffix, n);
    int64_t dim = (int64_t)n;
    return add_init(c, suffix, QP_DTYPE_INT64, 1, &dim, vals, n * sizeof *vals, v_out);
}

/* ---- element types ---------------------------------------------------------------------- */

/* Element type of value `v` of graph `g`: its declared type, else followed back through
 * producers that keep their input's type (models without value_info rarely declare the types of
 * intermediate tensors). UNDEFINED when it cannot be told. */
static enum qp_dtype value_dtype(const struct qp_graph *g, int v) {
    for (int steps = 0; steps < 4096 && g && v >= 0; steps++) {
        const struct qp_value *val = &g->values[v];
        if (val->dtype != QP_DTYPE_UNDEFINED) return val->dtype;
        if (val->producer < 0) {
            if (!val->is_outer) return QP_DTYPE_UNDEFINED;
            const char *name = val->name;
            for (g = g->parent; g; g = g->parent) {
                v = qp_graph_find_value(g, name);
                if (v >= 0) break;
            }
            continue;
        }
        const struct qp_node *p = &g->nodes[val->producer];
        const char *op = p->op_type;
        if (!qp_domain_is_onnx(p->domain)) return QP_DTYPE_UNDEFINED;
        if (!strcmp(op, "Cast")) {
            const struct qp_attr *to = qp_node_attr(p, "to");
            return to && to->type == QP_ATTR_INT && qp_dtype_valid((int)to->i)
                       ? (enum qp_dtype)to->i
                       : QP_DTYPE_UNDEFINED;
        }
        if (!strcmp(op, "Constant")) {
            const struct qp_attr *a = qp_node_attr(p, "value");
            if (a && a->type == QP_ATTR_TENSOR && a->t) return a->t->dtype;
            if (qp_node_attr(p, "value_float") || qp_node_attr(p, "value_floats"))
                return QP_DTYPE_FLOAT;
            return QP_DTYPE_UNDEFINED;
        }
        int from_input = -1;
        if (qp_op_is(p, QP_OP_FLAG_SAME_TYPE) && val->producer_output == 0) from_input = 0;
        if (!strcmp(op, "Split")) from_input = 0;
        if (!strcmp(op, "Where")) from_input = 1;
        if (from_input < 0 || from_input >= p->n_inputs) return QP_DTYPE_UNDEFINED;
        v = p->inputs[from_input];
    }
    return QP_DTYPE_UNDEFINED;
}

/* Little-endian bytes of `x` as a scalar of float type `dt`. 0 for other types. */
static size_t float_bytes(enum qp_dtype dt, double x, uint8_t out[8]) {
    switch (dt) {
    case QP_DTYPE_FLOAT: {
        float f = (float)x;
        memcpy(out, &f, 4);
        return 4;
    }
    case QP_DTYPE_DOUBLE:
        memcpy(out, &x, 8);
        return 8;
    case QP_DTYPE_FLOAT16: {
        uint16_t h = qp_f32_to_fp16((float)x);
        memcpy(out, &h, 2);
        return 2;
    }
    case QP_DTYPE_BFLOAT16: {
        uint16_t h = qp_f32_to_bf16((float)x);
        memcpy(out, &h, 2);
        return 2;
    }
    default:
        return 0;
    }
}

/* Checks that a scalar of input 0's float type can be made (see add_scalar_like). */
static enum qp_status check_scalar_like(const struct conv *c, const char *what) {
    const struct qp_node *n = cur(c);
    if (n->n_inputs < 1 || n->inputs[0] < 0) return fail(c, QP_ERR_BAD_INPUT, "input 0 is missing");
    enum qp_dtype dt = value_dtype(c->g, n->inputs[0]);
    uint8_t tmp[8];
    if (dt == QP_DTYPE_UNDEFINED) {
        if (c->to >= 15) return QP_OK;
        return fail(c, QP_ERR_UNSUPPORTED,
                    "cannot tell the element type of input 0 for the new '%s' input (declare "
                    "it in value_info, or convert to opset 15 or later)",
                    what);
    }
    if (!float_bytes(dt, 0, tmp))
        return fail(c, QP_ERR_UNSUPPORTED, "input 0 has element type %s, expected a float type",
                    qp_dtype_name(dt));
    return QP_OK;
}

/* A scalar `x` of input 0's element type: an initializer when the type is known, otherwise a
 * float initializer through CastLike (opset >= 15; check_scalar_like ran first). */
static enum qp_status add_scalar_like(struct conv *c, const char *suffix, double x, int *v_out) {
    enum qp_dtype dt = value_dtype(c->g, cur(c)->inputs[0]);
    uint8_t bytes[8];
    if (dt != QP_DTYPE_UNDEFINED) {
        size_t nb = float_bytes(dt, x, bytes);
        return add_init(c, suffix, dt, 0, NULL, bytes, nb, v_out);
    }
    int f;
    size_t nb = float_bytes(QP_DTYPE_FLOAT, x, bytes);
    enum qp_status st = add_init(c, suffix, QP_DTYPE_FLOAT, 0, NULL, bytes, nb, &f);
    if (st != QP_OK) return st;
    const char *ins[2] = {c->g->values[f].name, c->g->values[cur(c)->inputs[0]].name};
    char sfx[96];
    snprintf(sfx, sizeof sfx, "%.80s_CastLike", suffix);
    return add_node(c, sfx, "CastLike", 2, ins, NULL, NULL, v_out);
}

/* ---- converters --------------------------------------------------------------------------
 * Each one validates first, returns after validation in a dry run, then edits. Each is called
 * when the conversion crosses one of the opsets listed for it in `converters` below. */

/* Clip-11: min/max attributes became inputs 1 and 2. */
static enum qp_status cv_clip(struct conv *c) {
    const struct qp_attr *mn = NULL, *mx = NULL;
    enum qp_status st;
    if ((st = get_attr(c, "min", QP_ATTR_FLOAT, &mn)) != QP_OK) return st;
    if ((st = get_attr(c, "max", QP_ATTR_FLOAT, &mx)) != QP_OK) return st;
    if (cur(c)->n_inputs != 1) return fail(c, QP_ERR_BAD_INPUT, "expected 1 input before opset 11");
    if (!mn && !mx) return QP_OK;
    if ((st = check_scalar_like(c, mn ? "min" : "max")) != QP_OK) return st;
    if (c->dry) return QP_OK;
    float vmin = mn ? mn->f : 0, vmax = mx ? mx->f : 0;
    int has_min = mn != NULL, has_max = mx != NULL;
    static const char *const names[] = {"min", "max"};
    if ((st = drop_attrs(c, 2, names)) != QP_OK) return st;
    if ((st = set_n_inputs(c, has_max ? 3 : 2)) != QP_OK) return st;
    int v;
    if (has_min) {
        if ((st = add_scalar_like(c, "min", vmin, &v)) != QP_OK) return st;
        if ((st = set_in(c, 1, v)) != QP_OK) return st;
    }
    if (has_max) {
        if ((st = add_scalar_like(c, "max", vmax, &v)) != QP_OK) return st;
        if ((st = set_in(c, 2, v)) != QP_OK) return st;
    }
    return QP_OK;
}

/* Pad-11: pads and value attributes became inputs 1 and 2. */
static enum qp_status cv_pad(struct conv *c) {
    const struct qp_attr *pads = NULL, *value = NULL, *mode = NULL;
    enum qp_status st;
    if ((st = get_attr(c, "pads", QP_ATTR_INTS, &pads)) != QP_OK) return st;
    if ((st = get_attr(c, "value", QP_ATTR_FLOAT, &value)) != QP_OK) return st;
    if ((st = get_attr(c, "mode", QP_ATTR_STRING, &mode)) != QP_OK) return st;
    if (!pads) return fail(c, QP_ERR_BAD_INPUT, "required attribute 'pads' is missing");
    if (pads->n > MAX_LIST)
        return fail(c, QP_ERR_BAD_INPUT, "attribute 'pads' has %zu entries", pads->n);
    int need_value = value && value->f != 0 && (!mode || attr_str_is(mode, "constant"));
    if (need_value && (st = check_scalar_like(c, "constant_value")) != QP_OK) return st;
    if (c->dry) return QP_OK;
    const int64_t *pv = pads->ints;
    size_t np = pads->n;
    float fill = value ? value->f : 0;
    static const char *const names[] = {"pads", "value"};
    if ((st = drop_attrs(c, 2, names)) != QP_OK) return st;
    if ((st = set_n_inputs(c, need_value ? 3 : 2)) != QP_OK) return st;
    int v;
    if ((st = add_i64s(c, "pads", pv, np, &v)) != QP_OK) return st;
    if ((st = set_in(c, 1, v)) != QP_OK) return st;
    if (need_value) {
        if ((st = add_scalar_like(c, "constant_value", fill, &v)) != QP_OK) return st;
        if ((st = set_in(c, 2, v)) != QP_OK) return st;
    }
    return QP_OK;
}

/* Moves the INTS attributes `names[k]` to inputs first_input + k (int64 initializers). Absent
 * attributes leave their input omitted; trailing omitted inputs are not listed. */
static enum qp_status attrs_to_inputs(struct conv *c, int first_input, int n_names,
                                      const char *const *names, const int *required) {
    const struct qp_attr *a[4] = {NULL, NULL, NULL, NULL};
    enum qp_status st;
    if (n_names > 4) return fail(c, QP_ERR_INTERNAL, "too many attributes");
    int last = -1;
    for (int k = 0; k < n_names; k++) {
        if ((st = get_attr(c, names[k], QP_ATTR_INTS, &a[k])) != QP_OK) return st;
        if (!a[k] && required && required[k])
            return fail(c, QP_ERR_BAD_INPUT, "required attribute '%s' is missing", names[k]);
        if (a[k] && a[k]->n > MAX_LIST)
            return fail(c, QP_ERR_BAD_INPUT, "attribute '%s' has %zu entries", names[k], a[k]->n);
        if (a[k]) last = k;
    }
    if (cur(c)->n_inputs > first_input)
        return fail(c, QP_ERR_BAD_INPUT, "has %d inputs, expected %d", cur(c)->n_inputs,
                    first_input);
    if (c->dry || last < 0) return QP_OK;
    const int64_t *vals[4];
    size_t counts[4];
    for (int k = 0; k < n_names; k++) {
        vals[k] = a[k] ? a[k]->ints : NULL;
        counts[k] = a[k] ? a[k]->n : 0;
    }
    if ((st = drop_attrs(c, n_names, names)) != QP_OK) return st;
    if ((st = set_n_inputs(c, first_input + last + 1)) != QP_OK) return st;
    for (int k = 0; k <= last; k++) {
        if (!vals[k]) continue;
        int v;
        if ((st = add_i64s(c, names[k], vals[k], counts[k], &v)) != QP_OK) return st;
        if ((st = set_in(c, first_input + k, v)) != QP_OK) return st;
    }
    return QP_OK;
}

/* Slice-10: starts, ends, axes attributes became inputs 1..3. */
static enum qp_status cv_slice(struct conv *c) {
    static const char *const names[] = {"starts", "ends", "axes"};
    static const int required[] = {1, 1, 0};
    const struct qp_attr *s = NULL, *e = NULL, *ax = NULL;
    enum qp_status st;
    if ((st = get_attr(c, "starts", QP_ATTR_INTS, &s)) != QP_OK) return st;
    if ((st = get_attr(c, "ends", QP_ATTR_INTS, &e)) != QP_OK) return st;
    if ((st = get_attr(c, "axes", QP_ATTR_INTS, &ax)) != QP_OK) return st;
    if (s && e && (s->n != e->n || (ax && ax->n != s->n)))
        return fail(c, QP_ERR_BAD_INPUT, "starts, ends and axes differ in length");
    return attrs_to_inputs(c, 1, 3, names, required);
}

/* Squeeze-13 / Unsqueeze-13: axes attribute became input 1. */
static enum qp_status cv_squeeze(struct conv *c) {
    static const char *const names[] = {"axes"};
    static const int required[] = {1};
    int unsq = !strcmp(cur(c)->op_type, "Unsqueeze");
    return attrs_to_inputs(c, 1, 1, names, unsq ? required : NULL);
}

/* Reduce*: axes attribute became input 1 (ReduceSum at 13, the others at 18). */
static enum qp_status cv_reduce(struct conv *c) {
    int64_t at = !strcmp(cur(c)->op_type, "ReduceSum") ? 13 : 18;
    if (!crosses(c, at)) return QP_OK;
    static const char *const names[] = {"axes"};
    return attrs_to_inputs(c, 1, 1, names, NULL);
}

/* TopK-10: k attribute became input K (int64, shape [1]). */
static enum qp_status cv_topk(struct conv *c) {
    int64_t k;
    int present;
    enum qp_status st = get_int(c, "k", 0, &k, &present);
    if (st != QP_OK) return st;
    if (!present) return fail(c, QP_ERR_BAD_INPUT, "required attribute 'k' is missing");
    if (cur(c)->n_inputs != 1) return fail(c, QP_ERR_BAD_INPUT, "expected 1 input before opset 10");
    if (c->dry) return QP_OK;
    int v;
    if ((st = drop_attr(c, "k")) != QP_OK) return st;
    if ((st = set_n_inputs(c, 2)) != QP_OK) return st;
    if ((st = add_i64s(c, "k", &k, 1, &v)) != QP_OK) return st;
    return set_in(c, 1, v);
}

/* Split-13: split attribute became input 1. Split-18: without that input, num_outputs is
 * required (equal parts, which is what an old Split without `split` meant). */
static enum qp_status cv_split(struct conv *c) {
    enum qp_status st;
    if (crosses(c, 13)) {
        static const char *const names[] = {"split"};
        if ((st = attrs_to_inputs(c, 1, 1, names, NULL)) != QP_OK) return st;
    }
    if (!crosses(c, 18)) return QP_OK;
    const struct qp_node *n = cur(c);
    int has_split = n->n_inputs > 1 && n->inputs[1] >= 0;
    if (c->dry && c->from < 13) has_split = qp_node_attr(n, "split") != NULL;
    if (has_split || qp_node_attr(n, "num_outputs") || c->dry) return QP_OK;
    return put_int(c, "num_outputs", n->n_outputs);
}

/* ---- ranks ------------------------------------------------------------------------------
 * Exporters rarely declare the shapes of intermediate tensors, yet a Softmax whose axis is the
 * last one converts without a rewrite. So ranks are followed back through producers: enough
 * for attention blocks (MatMul, Transpose, Reshape by a constant, Squeeze, elementwise). */

struct rank_walk {
    const struct qp_graph *g;
    int *memo; /* -2 not computed, -3 in progress, -1 unknown, else the rank */
    int depth;
};

/* Element count of a 1-D constant (initializer or Constant node output), or -1. */
static int64_t const_len(const struct qp_graph *g, int v) {
    if (v < 0) return -1;
    const struct qp_value *val = &g->values[v];
    const struct qp_tensor *t = NULL;
    if (val->initializer >= 0) t = &g->inits[val->initializer];
    if (!t && val->producer >= 0 && !strcmp(g->nodes[val->producer].op_type, "Constant")) {
        const struct qp_attr *a = qp_node_attr(&g->nodes[val->producer], "value");
        if (a && a->type == QP_ATTR_TENSOR) t = a->t;
    }
    return t && t->rank == 1 ? t->dims[0] : -1;
}

/* Count of the axes a node lists (INTS attribute `axes`, or its constant input 1), or -1. */
static int64_t axes_count(const struct qp_graph *g, const struct qp_node *p) {
    const struct qp_attr *a = qp_node_attr(p, "axes");
    if (a && a->type == QP_ATTR_INTS) return (int64_t)a->n;
    return p->n_inputs > 1 ? const_len(g, p->inputs[1]) : -1;
}

static int attr_int_or(const struct qp_node *p, const char *name, int dflt) {
    const struct qp_attr *a = qp_node_attr(p, name);
    return a && a->type == QP_ATTR_INT ? (int)a->i : dflt;
}

static int rank_of(struct rank_walk *r, int v);

static int rank_of_node(struct rank_walk *r, const struct qp_node *p) {
    const struct qp_graph *g = r->g;
    const char *op = p->op_type;
    if (!qp_domain_is_onnx(p->domain)) return -1;
    int r0 = p->n_inputs > 0 ? rank_of(r, p->inputs[0]) : -1;
    if (qp_op_is(p, QP_OP_FLAG_SAME_RANK)) return r0;
    if (qp_op_is(p, QP_OP_FLAG_BROADCAST)) {
        int best = -1;
        for (int i = 0; i < p->n_inputs; i++) {
            int ri = rank_of(r, p->inputs[i]);
            if (ri < 0) return -1;
            if (ri > best) best = ri;
        }
        return best;
    }
    if (!strcmp(op, "MatMul")) {
        int r1 = p->n_inputs > 1 ? rank_of(r, p->inputs[1]) : -1;
        if (r0 < 1 || r1 < 1) return -1;
        if (r0 == 1 && r1 == 1) return 0;
        if (r0 == 1) return r1 - 1;
        if (r1 == 1) return r0 - 1;
        return r0 > r1 ? r0 : r1;
    }
    if (!strcmp(op, "Transpose")) {
        const struct qp_attr *perm = qp_node_attr(p, "perm");
        return perm && perm->type == QP_ATTR_INTS ? (int)perm->n : r0;
    }
    if (!strcmp(op, "Squeeze") || !strcmp(op, "Unsqueeze")) {
        int64_t n = axes_count(g, p);
        if (r0 < 0 || n < 0 || n > 64) return -1;
        int out = !strcmp(op, "Squeeze") ? r0 - (int)n : r0 + (int)n;
        return out >= 0 ? out : -1;
    }
    if (!strncmp(op, "Reduce", 6) || !strcmp(op, "ArgMax") || !strcmp(op, "ArgMin")) {
        if (attr_int_or(p, "keepdims", 1)) return r0;
        if (op[0] == 'A') return r0 > 0 ? r0 - 1 : -1;
        int64_t n = axes_count(g, p);
        if (n < 0 && !qp_node_attr(p, "axes") && p->n_inputs < 2) return 0; /* all axes */
        return r0 >= 0 && n >= 0 && n <= r0 ? r0 - (int)n : -1;
    }
    if (!strcmp(op, "Reshape")) {
        int64_t n = p->n_inputs > 1 ? const_len(g, p->inputs[1]) : -1;
        return n >= 0 && n <= 64 ? (int)n : -1;
    }
    if (!strcmp(op, "Gather")) {
        int r1 = p->n_inputs > 1 ? rank_of(r, p->inputs[1]) : -1;
        return r0 >= 1 && r1 >= 0 ? r0 + r1 - 1 : -1;
    }
    if (!strcmp(op, "Flatten") || !strcmp(op, "Gemm")) return 2;
    if (!strcmp(op, "Shape")) return 1;
    if (!strcmp(op, "Size")) return 0;
    if (!strcmp(op, "Constant")) {
        const struct qp_attr *a = qp_node_attr(p, "value");
        return a && a->type == QP_ATTR_TENSOR && a->t ? a->t->rank : -1;
    }
    return -1;
}

static int rank_of(struct rank_walk *r, int v) {
    if (v < 0) return -1;
    const struct qp_value *val = &r->g->values[v];
    if (val->rank >= 0) return val->rank;
    if (r->memo[v] != -2) return r->memo[v] == -3 ? -1 : r->memo[v];
    if (val->producer < 0 || r->depth >= 256) return -1;
    r->memo[v] = -3;
    r->depth++;
    int out = rank_of_node(r, &r->g->nodes[val->producer]);
    r->depth--;
    if (out > 64) out = -1;
    r->memo[v] = out;
    return out;
}

/* Rank of value `v` as declared or followed back through producers; -1 when unknown. */
static int value_rank(const struct conv *c, int v) {
    if (c->g->values[v].rank >= 0) return c->g->values[v].rank;
    int *memo = qp_malloc_n(c->g->n_values, sizeof *memo);
    if (!memo) return -1; /* only costs a rewrite that was not needed */
    for (size_t i = 0; i < c->g->n_values; i++)
        memo[i] = -2;
    struct rank_walk r = {c->g, memo, 0};
    int out = rank_of(&r, v);
    free(memo);
    return out;
}

/* Softmax, LogSoftmax, Hardmax before 13 coerce the input to 2-D [prod(d[0..axis)),
 * prod(d[axis..])] (axis default 1) and normalise each row; from 13 they work along one axis
 * (default -1). Equivalent when axis is the last dimension; otherwise the node becomes
 * Flatten(axis) -> op(axis=1) -> Reshape(Shape(x)). */
static enum qp_status cv_softmax(struct conv *c) {
    int64_t axis;
    int present;
    enum qp_status st = get_int(c, "axis", 1, &axis, &present);
    if (st != QP_OK) return st;
    const struct qp_node *n = cur(c);
    if (n->n_inputs != 1 || n->inputs[0] < 0 || n->n_outputs != 1 || n->outputs[0] < 0)
        return fail(c, QP_ERR_BAD_INPUT, "expected 1 input and 1 output");
    int rank = c->g->values[n->outputs[0]].rank;
    if (rank < 0) rank = value_rank(c, n->inputs[0]);
    if (rank >= 0 && (axis < -rank || axis >= (rank ? rank : 1)))
        return fail(c, QP_ERR_BAD_INPUT, "axis %lld is out of range for rank %d", (long long)axis,
                    rank);
    int last = axis == -1 || (rank >= 0 && (axis < 0 ? axis + rank : axis) >= rank - 1);
    if (c->dry) return QP_OK;
    if (last) return present ? QP_OK : put_int(c, "axis", axis);

    const char *x = c->g->values[n->inputs[0]].name;
    const char *y = c->g->values[n->outputs[0]].name;
    enum qp_dtype dt = c->g->values[n->inputs[0]].dtype;
    int flat_node = -1, flat = -1, shape = -1, t = -1, reshape_node = -1;
    if ((st = add_node(c, "flatten", "Flatten", 1, &x, NULL, &flat_node, &flat)) != QP_OK)
        return st;
    struct qp_attr *fa = qp_node_add_attr(c->g, flat_node, "axis", QP_ATTR_INT);
    if (!fa) return nomem(c);
    fa->i = axis;
    c->g->values[flat].dtype = dt;
    c->g->values[flat].rank = 2;
    if ((st = add_node(c, "shape", "Shape", 1, &x, NULL, NULL, &shape)) != QP_OK) return st;
    c->g->values[shape].dtype = QP_DTYPE_INT64;
    if ((st = set_in(c, 0, flat)) != QP_OK) return st;
    if ((st = put_int(c, "axis", 1)) != QP_OK) return st;
    if ((st = redirect_output(c, 0, "2d", &t)) != QP_OK) return st;
    c->g->values[t].rank = 2;
    const char *ins[2] = {c->g->values[t].name, c->g->values[shape].name};
    if ((st = add_node(c, "reshape", "Reshape", 2, ins, y, &reshape_node, NULL)) != QP_OK)
        return st;
    if (c->to >= 14) {
        /* Shape(x) may hold zeros (empty tensors); they are sizes, not "copy this dim". */
        struct qp_attr *ra = qp_node_add_attr(c->g, reshape_node, "allowzero", QP_ATTR_INT);
        if (!ra) return nomem(c);
        ra->i = 1;
    }
    return QP_OK;
}

/* Outputs other than 0 that something reads (graph output, node, subgraph): index or -1. */
static int used_extra_output(const struct conv *c) {
    const struct qp_node *n = cur(c);
    for (int i = 1; i < n->n_outputs; i++)
        if (n->outputs[i] >= 0 && value_used(c, n->outputs[i])) return i;
    return -1;
}

/* BatchNormalization: spatial went away at 9 (spatial=1 is the only meaning left); at 14 the
 * optional outputs became training-mode running statistics. Inference models do not read
 * them; unread ones are dropped. */
static enum qp_status cv_batchnorm(struct conv *c) {
    enum qp_status st;
    int64_t spatial;
    if ((st = get_int(c, "spatial", 1, &spatial, NULL)) != QP_OK) return st;
    if (crosses(c, 9) && spatial != 1)
        return fail(c, QP_ERR_UNSUPPORTED,
                    "spatial=%lld (per-activation statistics) has no equivalent after opset 9",
                    (long long)spatial);
    int used = crosses(c, 14) ? used_extra_output(c) : -1;
    if (used >= 0)
        return fail(c, QP_ERR_UNSUPPORTED,
                    "output %d ('%s', training statistics) is read; its meaning changed at "
                    "opset 14",
                    used, c->g->values[cur(c)->outputs[used]].name);
    if (c->dry) return QP_OK;
    static const char *const names[] = {"spatial", "is_test", "consumed_inputs"};
    if (crosses(c, 9) && (st = drop_attrs(c, 3, names)) != QP_OK) return st;
    if (crosses(c, 14))
        for (int i = cur(c)->n_outputs - 1; i >= 1; i--)
            drop_output(c, i);
    return QP_OK;
}

/* Dropout: the mask output became bool at 10; ratio became input 1 at 12. In inference both
 * versions pass the data through. */
static enum qp_status cv_dropout(struct conv *c) {
    enum qp_status st;
    const struct qp_attr *ratio = NULL;
    if ((st = get_attr(c, "ratio", QP_ATTR_FLOAT, &ratio)) != QP_OK) return st;
    if (crosses(c, 10) && used_extra_output(c) >= 0)
        return fail(c, QP_ERR_UNSUPPORTED,
                    "the mask output is read; its type changed to bool at opset 10");
    if (crosses(c, 12) && cur(c)->n_inputs != 1)
        return fail(c, QP_ERR_BAD_INPUT, "expected 1 input before opset 12");
    if (c->dry) return QP_OK;
    if (crosses(c, 10)) drop_output(c, 1);
    if ((st = drop_attr(c, "is_test")) != QP_OK) return st;
    if (crosses(c, 12) && ratio) {
        float r = ratio->f;
        int v;
        if ((st = drop_attr(c, "ratio")) != QP_OK) return st;
        if ((st = set_n_inputs(c, 2)) != QP_OK) return st;
        if ((st = add_init(c, "ratio", QP_DTYPE_FLOAT, 0, NULL, &r, sizeof r, &v)) != QP_OK)
            return st;
        if ((st = set_in(c, 1, v)) != QP_OK) return st;
    }
    return QP_OK;
}

/* After a Resize-10-style (X, scales) node became (X, roi, scales): the empty roi an opset 11
 * or 12 Resize requires, or an omitted one from 13 on. */
static enum qp_status resize_inputs_from_10(struct conv *c) {
    enum qp_status st;
    int scales = cur(c)->inputs[1];
    if ((st = set_n_inputs(c, 3)) != QP_OK) return st;
    if ((st = set_in(c, 1, -1)) != QP_OK) return st;
    if ((st = set_in(c, 2, scales)) != QP_OK) return st;
    if (c->to < 13) {
        int64_t zero = 0;
        int roi;
        if ((st = add_init(c, "roi", QP_DTYPE_FLOAT, 1, &zero, NULL, 0, &roi)) != QP_OK) return st;
        if ((st = set_in(c, 1, roi)) != QP_OK) return st;
    }
    return QP_OK;
}

/* Opset-10 Resize and Upsample sample at x_in = x_out / scale, nearest taking the floor (the
 * ONNX version converter's Resize 10->11 mapping). */
static enum qp_status resize_attrs_from_10(struct conv *c, int nearest) {
    enum qp_status st = put_str(c, "coordinate_transformation_mode", "asymmetric");
    if (st == QP_OK && nearest) st = put_str(c, "nearest_mode", "floor");
    return st;
}

/* Resize: (X, scales) became (X, roi, scales[, sizes]) with coordinate modes at 11;
 * tf_half_pixel_for_nn went away at 13. */
static enum qp_status cv_resize(struct conv *c) {
    enum qp_status st;
    const struct qp_attr *mode = NULL, *ctm = NULL, *nm = NULL;
    if ((st = get_attr(c, "mode", QP_ATTR_STRING, &mode)) != QP_OK) return st;
    if ((st = get_attr(c, "coordinate_transformation_mode", QP_ATTR_STRING, &ctm)) != QP_OK)
        return st;
    if ((st = get_attr(c, "nearest_mode", QP_ATTR_STRING, &nm)) != QP_OK) return st;
    int nearest = !mode || attr_str_is(mode, "nearest");
    if (c->from < 11 && cur(c)->n_inputs != 2)
        return fail(c, QP_ERR_BAD_INPUT, "expected 2 inputs (X, scales) before opset 11");
    int tf_nn = c->from >= 11 && crosses(c, 13) && attr_str_is(ctm, "tf_half_pixel_for_nn");
    if (tf_nn && !(nearest && attr_str_is(nm, "floor")))
        return fail(c, QP_ERR_UNSUPPORTED,
                    "coordinate_transformation_mode tf_half_pixel_for_nn was removed at opset 13; "
                    "only mode nearest with nearest_mode floor has an exact equivalent");
    if (c->dry) return QP_OK;
    if (crosses(c, 11)) {
        if ((st = resize_inputs_from_10(c)) != QP_OK) return st;
        return resize_attrs_from_10(c, nearest);
    }
    if (tf_nn) {
        /* floor((x + 0.5) / s) == round-half-up((x + 0.5) / s - 0.5) */
        if ((st = put_str(c, "coordinate_transformation_mode", "half_pixel")) != QP_OK) return st;
        return put_str(c, "nearest_mode", "round_prefer_ceil");
    }
    return QP_OK;
}

/* Upsample: scales attribute became input 1 at 9; deprecated at 10 in favour of Resize, which
 * it becomes whenever the target is 10 or later. */
static enum qp_status cv_upsample(struct conv *c) {
    enum qp_status st;
    const struct qp_attr *mode = NULL, *scales = NULL;
    if ((st = get_attr(c, "mode", QP_ATTR_STRING, &mode)) != QP_OK) return st;
    if ((st = get_attr(c, "scales", QP_ATTR_FLOATS, &scales)) != QP_OK) return st;
    int nearest = !mode || attr_str_is(mode, "nearest");
    if (!nearest && !attr_str_is(mode, "linear") && !attr_str_is(mode, "bilinear"))
        return fail(c, QP_ERR_UNSUPPORTED, "mode '%.*s' is not nearest or linear",
                    (int)(mode->s.len > 64 ? 64 : mode->s.len), (const char *)mode->s.data);
    int attr_scales = c->from < 9;
    if (attr_scales && !scales)
        return fail(c, QP_ERR_BAD_INPUT, "required attribute 'scales' is missing");
    if (attr_scales && scales->n > 64)
        return fail(c, QP_ERR_BAD_INPUT, "'scales' has %zu entries", scales->n);
    if (cur(c)->n_inputs != (attr_scales ? 1 : 2))
        return fail(c, QP_ERR_BAD_INPUT, "expected %d input(s)", attr_scales ? 1 : 2);
    if (c->dry) return QP_OK;
    if (attr_scales) {
        int64_t dim = (int64_t)scales->n;
        int v;
        if ((st = add_init(c, "scales", QP_DTYPE_FLOAT, 1, &dim, scales->floats,
                           scales->n * sizeof(float), &v)) != QP_OK)
            return st;
        if ((st = drop_attr(c, "scales")) != QP_OK) return st;
        if ((st = set_n_inputs(c, 2)) != QP_OK) return st;
        if ((st = set_in(c, 1, v)) != QP_OK) return st;
    }
    if (c->to < 10) return QP_OK;
    const char *resize = qp_arena_strdup(c->m->arena, "Resize");
    if (!resize) return nomem(c);
    cur(c)->op_type = resize;
    if ((st = put_str(c, "mode", nearest ? "nearest" : "linear")) != QP_OK) return st;
    if (c->to < 11) return QP_OK;
    if ((st = resize_inputs_from_10(c)) != QP_OK) return st;
    return resize_attrs_from_10(c, nearest);
}

/* Scatter was deprecated at 11 for ScatterElements, which means the same. */
static enum qp_status cv_scatter(struct conv *c) {
    if (c->dry) return QP_OK;
    const char *op = qp_arena_strdup(c->m->arena, "ScatterElements");
    if (!op) return nomem(c);
    cur(c)->op_type = op;
    c->changed = 1;
    return QP_OK;
}

/* DFT-20: the `axis` attribute (default 1) became optional input 2, an int64 scalar whose own
 * default is -2; so the axis is always written out. */
static enum qp_status cv_dft(struct conv *c) {
    int64_t axis;
    enum qp_status st = get_int(c, "axis", 1, &axis, NULL);
    if (st != QP_OK) return st;
    int n_in = cur(c)->n_inputs;
    if (n_in < 1 || n_in > 2 || cur(c)->inputs[0] < 0)
        return fail(c, QP_ERR_BAD_INPUT, "has %d inputs, expected (input[, dft_length])", n_in);
    if (c->dry) return QP_OK;
    int v;
    if ((st = drop_attr(c, "axis")) != QP_OK) return st;
    if ((st = set_n_inputs(c, 3)) != QP_OK) return st;
    if ((st = add_init(c, "axis", QP_DTYPE_INT64, 0, NULL, &axis, sizeof axis, &v)) != QP_OK)
        return st;
    return set_in(c, 2, v);
}

/* GridSample-20 renamed the modes bilinear -> linear and bicubic -> cubic (the default, absent
 * mode, is bilinear before and linear after: the same). */
static enum qp_status cv_gridsample(struct conv *c) {
    const struct qp_attr *mode = NULL;
    enum qp_status st = get_attr(c, "mode", QP_ATTR_STRING, &mode);
    if (st != QP_OK) return st;
    const char *to = NULL;
    if (attr_str_is(mode, "bilinear"))
        to = "linear";
    else if (attr_str_is(mode, "bicubic"))
        to = "cubic";
    else if (mode && !attr_str_is(mode, "nearest"))
        return fail(c, QP_ERR_BAD_INPUT, "mode '%.*s' is not bilinear, nearest or bicubic",
                    (int)(mode->s.len > 64 ? 64 : mode->s.len), (const char *)mode->s.data);
    if (c->dry || !to) return QP_OK;
    return put_str(c, "mode", to);
}

/* The tensor of a constant value: an initializer that is not also an (overridable) graph input,
 * or a Constant node's `value`. NULL otherwise. */
static const struct qp_tensor *const_tensor(const struct qp_graph *g, int v) {
    if (v < 0) return NULL;
    const struct qp_value *val = &g->values[v];
    if (val->initializer >= 0) return val->is_graph_input ? NULL : &g->inits[val->initializer];
    if (val->producer < 0) return NULL;
    const struct qp_node *p = &g->nodes[val->producer];
    if (strcmp(p->op_type, "Constant") || !qp_domain_is_onnx(p->domain)) return NULL;
    const struct qp_attr *a = qp_node_attr(p, "value");
    return a && a->type == QP_ATTR_TENSOR ? a->t : NULL;
}

/* Dimension 1 (channels) of value `v`: declared, else followed back through channel-keeping
 * operators to a Conv or ConvTranspose with constant weights. -1 when unknown. */
static int64_t channel_count(const struct qp_graph *g, int v) {
    for (int steps = 0; steps < 4096 && v >= 0; steps++) {
        const struct qp_value *val = &g->values[v];
        if (val->rank >= 2 && val->dims && val->dims[1].value >= 0) return val->dims[1].value;
        if (val->producer < 0 || val->producer_output != 0) return -1;
        const struct qp_node *p = &g->nodes[val->producer];
        if (!qp_domain_is_onnx(p->domain)) return -1;
        int conv = !strcmp(p->op_type, "Conv"), convt = !strcmp(p->op_type, "ConvTranspose");
        if (conv || convt) {
            const struct qp_tensor *w = p->n_inputs > 1 ? const_tensor(g, p->inputs[1]) : NULL;
            if (!w || w->rank < 2) return -1;
            if (conv) return w->dims[0];
            int64_t group = attr_int_or(p, "group", 1);
            return group >= 1 && w->dims[1] <= INT64_MAX / group ? w->dims[1] * group : -1;
        }
        if (!qp_op_is(p, QP_OP_FLAG_SAME_CHANNELS) || p->n_inputs < 1) return -1;
        v = p->inputs[0];
    }
    return -1;
}

/* Per-channel scale and bias computed in the graph from per-group ones (not constants, or the
 * channel count is unknown): Reshape(Expand(Unsqueeze(s, [1]), [G, C / G]), [-1]), with C read
 * by Shape(X, start=1, end=2). */
static enum qp_status groupnorm_nodes(struct conv *c, int64_t groups) {
    static const char *const role[2] = {"scale", "bias"};
    int64_t one = 1, minus_one = -1;
    int g_v, axes_v, flat_v, shape_node, shape_v, per_v, cat_node, gshape_v;
    enum qp_status st;
    if ((st = add_i64s(c, "groups", &groups, 1, &g_v)) != QP_OK) return st;
    if ((st = add_i64s(c, "unsqueeze_axes", &one, 1, &axes_v)) != QP_OK) return st;
    if ((st = add_i64s(c, "flat_shape", &minus_one, 1, &flat_v)) != QP_OK) return st;
    const char *x = c->g->values[cur(c)->inputs[0]].name;
    if ((st = add_node(c, "channels", "Shape", 1, &x, NULL, &shape_node, &shape_v)) != QP_OK)
        return st;
    struct qp_attr *a = qp_node_add_attr(c->g, shape_node, "start", QP_ATTR_INT);
    if (!a) return nomem(c);
    a->i = 1;
    if (!(a = qp_node_add_attr(c->g, shape_node, "end", QP_ATTR_INT))) return nomem(c);
    a->i = 2;
    const char *div_in[2] = {c->g->values[shape_v].name, c->g->values[g_v].name};
    if ((st = add_node(c, "per_group", "Div", 2, div_in, NULL, NULL, &per_v)) != QP_OK) return st;
    const char *cat_in[2] = {c->g->values[g_v].name, c->g->values[per_v].name};
    if ((st = add_node(c, "group_shape", "Concat", 2, cat_in, NULL, &cat_node, &gshape_v)) != QP_OK)
        return st;
    if (!(a = qp_node_add_attr(c->g, cat_node, "axis", QP_ATTR_INT))) return nomem(c);
    a->i = 0;
    c->g->values[shape_v].dtype = c->g->values[per_v].dtype = QP_DTYPE_INT64;
    c->g->values[gshape_v].dtype = QP_DTYPE_INT64;
    for (int k = 0; k < 2; k++) {
        int in = cur(c)->inputs[1 + k], u, e, r;
        enum qp_dtype dt = value_dtype(c->g, in);
        char sfx[32];
        const char *ins[2] = {c->g->values[in].name, c->g->values[axes_v].name};
        snprintf(sfx, sizeof sfx, "%s_unsqueeze", role[k]);
        if ((st = add_node(c, sfx, "Unsqueeze", 2, ins, NULL, NULL, &u)) != QP_OK) return st;
        ins[0] = c->g->values[u].name;
        ins[1] = c->g->values[gshape_v].name;
        snprintf(sfx, sizeof sfx, "%s_expand", role[k]);
        if ((st = add_node(c, sfx, "Expand", 2, ins, NULL, NULL, &e)) != QP_OK) return st;
        ins[0] = c->g->values[e].name;
        ins[1] = c->g->values[flat_v].name;
        snprintf(sfx, sizeof sfx, "%s_per_channel", role[k]);
        if ((st = add_node(c, sfx, "Reshape", 2, ins, NULL, NULL, &r)) != QP_OK) return st;
        c->g->values[u].dtype = c->g->values[e].dtype = c->g->values[r].dtype = dt;
        c->g->values[r].rank = 1;
        if ((st = set_in(c, 1 + k, r)) != QP_OK) return st;
    }
    return QP_OK;
}

/* GroupNormalization-21: scale and bias went from one value per group (shape [num_groups]) to
 * one per channel (shape [C]), channel c taking group c / (C / num_groups). Constant per-group
 * values become per-channel initializers when C is known (declared, or followed back by
 * channel_count); otherwise the expansion is done by nodes in the graph (groupnorm_nodes). */
static enum qp_status cv_groupnorm(struct conv *c) {
    int64_t groups;
    int present;
    enum qp_status st = get_int(c, "num_groups", 0, &groups, &present);
    if (st != QP_OK) return st;
    if (!present) return fail(c, QP_ERR_BAD_INPUT, "required attribute 'num_groups' is missing");
    const struct qp_node *n = cur(c);
    if (n->n_inputs != 3 || n->inputs[0] < 0 || n->inputs[1] < 0 || n->inputs[2] < 0)
        return fail(c, QP_ERR_BAD_INPUT, "expected 3 inputs (X, scale, bias)");
    if (groups < 1)
        return fail(c, QP_ERR_BAD_INPUT, "num_groups %lld is not positive", (long long)groups);
    int64_t ch = channel_count(c->g, n->inputs[0]);
    if (ch == 0 || (ch > 0 && ch % groups))
        return fail(c, QP_ERR_BAD_INPUT, "%lld channels cannot be split into num_groups %lld",
                    (long long)ch, (long long)groups);
    const struct qp_tensor *t[2];
    int constant = ch > 0 && ch <= (int64_t)MAX_LIST; /* else nodes: no huge initializers */
    for (int k = 0; k < 2; k++) {
        t[k] = const_tensor(c->g, n->inputs[1 + k]);
        if (!t[k]) {
            constant = 0;
            continue;
        }
        const struct qp_dtype_traits *tr = qp_dtype_traits(t[k]->dtype);
        if (!tr->is_float || tr->bits < 8 || tr->bits % 8 || !t[k]->data ||
            t[k]->numel != (uint64_t)groups || t[k]->nbytes != t[k]->numel * (size_t)(tr->bits / 8))
            return fail(c, QP_ERR_BAD_INPUT,
                        "input %d ('%s') is not a loaded float tensor of num_groups = %lld "
                        "elements",
                        1 + k, c->g->values[n->inputs[1 + k]].name, (long long)groups);
    }
    if (c->dry) return QP_OK;
    if (!constant) return groupnorm_nodes(c, groups);
    static const char *const suffix[2] = {"scale", "bias"};
    for (int k = 0; k < 2; k++) {
        size_t es = (size_t)(qp_dtype_traits(t[k]->dtype)->bits / 8);
        uint8_t *buf = qp_malloc_n((size_t)ch, es);
        if (!buf) return nomem(c);
        const uint8_t *src = t[k]->data;
        int64_t per = ch / groups;
        for (int64_t i = 0; i < ch; i++)
            memcpy(buf + (size_t)i * es, src + (size_t)(i / per) * es, es);
        int v;
        st = add_init(c, suffix[k], t[k]->dtype, 1, &ch, buf, (size_t)ch * es, &v);
        free(buf);
        if (st != QP_OK) return st;
        if ((st = set_in(c, 1 + k, v)) != QP_OK) return st;
    }
    return QP_OK;
}

/* Versions whose change could alter what an existing node means. Every other version bump of
 * an ONNX operator between 7 and 21 only adds types, or attributes and inputs whose defaults
 * keep the old behaviour, and passes through. A listed bump without a converter is
 * QP_ERR_UNSUPPORTED. */
struct converter {
    const char *op;
    uint32_t breaking;
    enum qp_status (*fn)(struct conv *c);
};

static const struct converter converters[] = {
    {"BatchNormalization", V(9) | V(14), cv_batchnorm},
    {"Clip", V(11), cv_clip},
    {"DFT", V(20), cv_dft},
    {"Dropout", V(10) | V(12), cv_dropout},
    {"GridSample", V(20), cv_gridsample},
    {"GroupNormalization", V(21), cv_groupnorm},
    {"Hardmax", V(13), cv_softmax},
    {"LogSoftmax", V(13), cv_softmax},
    {"Pad", V(11), cv_pad},
    {"ReduceL1", V(18), cv_reduce},
    {"ReduceL2", V(18), cv_reduce},
    {"ReduceLogSum", V(18), cv_reduce},
    {"ReduceLogSumExp", V(18), cv_reduce},
    {"ReduceMax", V(18), cv_reduce},
    {"ReduceMean", V(18), cv_reduce},
    {"ReduceMin", V(18), cv_reduce},
    {"ReduceProd", V(18), cv_reduce},
    {"ReduceSum", V(13), cv_reduce},
    {"ReduceSumSquare", V(18), cv_reduce},
    {"Resize", V(11) | V(13), cv_resize},
    {"RoiAlign", V(16), NULL}, /* coordinate_transformation_mode default is half_pixel */
    {"Scan", V(9), NULL},      /* batch axis and sequence_lens removed */
    {"Scatter", V(11), cv_scatter},
    {"Slice", V(10), cv_slice},
    {"Softmax", V(13), cv_softmax},
    {"Split", V(13) | V(18), cv_split},
    {"Squeeze", V(13), cv_squeeze},
    {"TopK", V(10), cv_topk},
    {"Unsqueeze", V(13), cv_squeeze},
    {"Upsample", V(9) | V(10), cv_upsample},
};

static const struct converter *converter_lookup(const char *op) {
    for (size_t i = 0; i < sizeof converters / sizeof converters[0]; i++)
        if (!strcmp(converters[i].op, op)) return &converters[i];
    return NULL;
}

static int lowest_bit(uint32_t x) {
    for (int i = 0; i < 32; i++)
        if (x & V(i)) return i;
    return -1;
}

static enum qp_status convert_node(struct conv *c) {
    const struct qp_node *n = cur(c);
    const struct op_versions *ov = op_lookup(n->op_type);
    if (!ov) return fail(c, QP_ERR_UNSUPPORTED, "not an ONNX operator up to opset 21");
    int first = lowest_bit(ov->since);
    if (first > c->from)
        return fail(c, QP_ERR_UNSUPPORTED, "operator is not defined at opset %lld (it came at %d)",
                    (long long)c->from, first);
    const struct converter *cv = converter_lookup(n->op_type);
    uint32_t breaking = cv ? bumps_between(ov->since, c->from, c->to) & cv->breaking : 0;
    /* An Upsample stays deprecated past 10 (no runtime has it): always make it a Resize. */
    if (cv && cv->fn == cv_upsample && c->to >= 10) breaking |= V(10);
    if (!breaking) return QP_OK;
    if (!cv->fn)
        return fail(c, QP_ERR_UNSUPPORTED,
                    "its definition changed at opset %d and qplace does not convert it",
                    lowest_bit(breaking));
    return cv->fn(c);
}

/* Lowest IR version that allows opset `v` (onnx/helper.py VERSION_TABLE). */
static int64_t min_ir_version(int64_t v) {
    if (v >= 21) return 10;
    if (v >= 19) return 9;
    if (v >= 15) return 8;
    if (v >= 12) return 7;
    if (v >= 11) return 6;
    if (v >= 10) return 5;
    if (v >= 9) return 4;
    return 3;
}

static enum qp_status run_pass(struct conv *c, int *changed_graphs) {
    for (size_t gi = 0; gi < c->m->n_graphs; gi++) {
        c->g = c->m->graphs[gi];
        c->changed = 0;
        size_t n_nodes = c->g->n_nodes; /* nodes added by converters are already converted */
        for (size_t i = 0; i < n_nodes; i++) {
            if (c->g->nodes[i].dead || !qp_domain_is_onnx(c->g->nodes[i].domain)) continue;
            c->node = (int)i;
            enum qp_status st = convert_node(c);
            if (st != QP_OK) return st;
        }
        if (changed_graphs && c->changed) changed_graphs[gi] = 1;
    }
    return QP_OK;
}

enum qp_status qp_model_convert_opset(struct qp_model *m, int64_t target, struct qp_error *err) {
    if (!m) return qp_error_set(err, QP_ERR_USAGE, "opset: no model");
    int64_t from = qp_model_opset(m, "");
    if (from == 0)
        return qp_error_set(err, QP_ERR_UNSUPPORTED, "opset: the model imports no ONNX opset");
    if (target < QP_OPSET_CONVERT_MIN || target > QP_OPSET_CONVERT_MAX)
        return qp_error_set(err, QP_ERR_UNSUPPORTED, "opset: target opset %lld is outside %d..%d",
                            (long long)target, QP_OPSET_CONVERT_MIN, QP_OPSET_CONVERT_MAX);
    if (from < QP_OPSET_CONVERT_MIN || from > QP_OPSET_CONVERT_MAX)
        return qp_error_set(err, QP_ERR_UNSUPPORTED,
                            "opset: the model's opset %lld is outside %d..%d", (long long)from,
                            QP_OPSET_CONVERT_MIN, QP_OPSET_CONVERT_MAX);
    if (target < from)
        return qp_error_set(err, QP_ERR_UNSUPPORTED,
                            "opset: converting down from opset %lld to %lld is not supported",
                            (long long)from, (long long)target);
    if (target == from) return QP_OK;

    struct conv c = {.m = m, .from = from, .to = target, .dry = 1, .err = err};
    enum qp_status st = run_pass(&c, NULL);
    if (st != QP_OK) return st;
    int *changed = calloc(m->n_graphs ? m->n_graphs : 1, sizeof *changed);
    if (!changed) return qp_error_set(err, QP_ERR_NOMEM, "opset: out of memory");
    size_t n_graphs = m->n_graphs;
    c.dry = 0;
    st = run_pass(&c, changed);
    for (size_t gi = 0; gi < n_graphs && st == QP_OK; gi++)
        if (changed[gi]) st = qp_graph_toposort(m->graphs[gi], err);
    free(changed);
    if (st != QP_OK) return st;
    for (size_t i = 0; i < m->n_opsets; i++)
        if (qp_domain_is_onnx(m->opsets[i].domain)) m->opsets[i].version = target;
    if (m->ir_version < min_ir_version(target)) m->ir_version = min_ir_version(target);
    return QP_OK;
}
