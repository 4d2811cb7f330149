/*
 * The `trt` placement policy. The steps follow ModelOpt's int8.py / partitioning.py as described
 * in shared/reference/modelopt-onnx-ptq.md §3 (section numbers below refer to it):
 *   1. constants, shape-computation values, per-node parents/children          (helpers)
 *   2. automatic and user exclusions                                           (§3.2, §3.1)
 *   3. non-quantizable patterns: LayerNorm, erf-GELU, masked attention core     (§3.3)
 *   4. residual Adds (non-residual input of each two-input Add)                 (§3.4)
 *   5. CASK partitions at Conv/ConvTranspose/Gemm/MatMul, then KGEN partitions  (§3.5)
 *   6. which nodes are quantized and which of their inputs are not              (§3.6)
 *   7. one placement entry per quantized input slot, with its reason
 */
#include "quant/policy_trt.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/size.h"
#include "ir/optraits.h"

/* ---- quantizable op types (modelopt ort_utils.configure_ort) ------------------------------ */
/* The op families the steps ask about (linear, copy, pointwise, pool, the ORT QDQ handlers that
 * take input 0 only, shape sources) are flags of the ONNX op traits table, ir/optraits.h. These
 * two stay here: they are the policy's defaults, which a user list of op types replaces. */

/* INT8 quantizable op types with no user list: ORT's QLinear/QDQ registries after ModelOpt's
 * removals, plus BatchNormalization, LayerNormalization, LRN, ConvTranspose and HardSwish. */
static const char *const INT8_TYPES[] = {"Add",
                                         "AveragePool",
                                         "BatchNormalization",
                                         "Clip",
                                         "Conv",
                                         "ConvTranspose",
                                         "Gemm",
                                         "GlobalAveragePool",
                                         "MatMul",
                                         "MaxPool",
                                         "Mul",
                                         "Resize",
                                         "LayerNormalization",
                                         "LRN",
                                         "HardSwish",
                                         NULL};
static const char *const FP8_TYPES[] = {"Conv", "Gemm", "MatMul", "Add", NULL};

static int in_list(const char *op, const char *const *list) {
    for (; *list; list++)
        if (strcmp(op, *list) == 0) return 1;
    return 0;
}

/* ---- context ---------------------------------------------------------------------------- */

struct ctx {
    struct qp_graph *g;
    const struct qp_policy_options *o;
    size_t nn, nv;
    size_t *pos;          /* node -> topo position (SIZE_MAX: dead) */
    unsigned char *cst;   /* value is constant (is_const_input) */
    unsigned char *shp;   /* value is computed from shapes only */
    int *par_start, *par; /* CSR: producers of each node's inputs, input order */
    int *chi_start, *chi; /* CSR: distinct consumers, topo order */
    unsigned char *excluded, *patterned, *shape_node, *quant;
    int *cask, *kgen;    /* partition id or -1 */
    int *nonres;         /* Add: non-residual input slot; -1 none; -2 not residual */
    uint64_t *noq;       /* per node: input slots that must stay unquantized */
    const char **note;   /* per node: decision identifier */
    const char **reason; /* per node: reason of its entries */
    unsigned *mark;      /* visit stamps for bounded searches */
    unsigned stamp;
    const char *const *qtypes; /* quantizable op types */
    const struct qp_select *sel;
    int n_cask;
    int *cask_last; /* partition id -> last node added */
    int *cask_head; /* partition id -> root */
};

static const struct qp_node *node(const struct ctx *c, int n) {
    return &c->g->nodes[n];
}

/* The op type every list and pattern of this policy matches: TensorRT's rules are about ONNX's
 * operators, so a node of another domain (a com.microsoft op named like an ONNX one) matches
 * none of them ("" is in no list) and is never quantized as that op. */
static const char *onnx_op(const struct qp_node *nd) {
    return qp_domain_is_onnx(nd->domain) ? nd->op_type : "";
}

static int nparents(const struct ctx *c, int n) {
    return c->par_start[n + 1] - c->par_start[n];
}
static int parent(const struct ctx *c, int n, int k) {
    return c->par[c->par_start[n] + k];
}
static int nchildren(const struct ctx *c, int n) {
    return c->chi_start[n + 1] - c->chi_start[n];
}
static int child(const struct ctx *c, int n, int k) {
    return c->chi[c->chi_start[n] + k];
}

static int has_const_input(const struct ctx *c, int n) {
    const struct qp_node *nd = node(c, n);
    for (int i = 0; i < nd->n_inputs; i++)
        if (nd->inputs[i] >= 0 && c->cst[nd->inputs[i]]) return 1;
    return 0;
}

static int n_var_inputs(const struct ctx *c, int n) {
    const struct qp_node *nd = node(c, n);
    int k = 0;
    for (int i = 0; i < nd->n_inputs; i++)
        if (nd->inputs[i] >= 0 && !c->cst[nd->inputs[i]]) k++;
    return k;
}

static int is_float_or_unknown(const struct qp_value *v) {
    return v->kind == QP_VALUE_TENSOR &&
           (v->dtype == QP_DTYPE_UNDEFINED || v->dtype == QP_DTYPE_FLOAT ||
            v->dtype == QP_DTYPE_FLOAT16 || v->dtype == QP_DTYPE_BFLOAT16 ||
            v->dtype == QP_DTYPE_DOUBLE);
}

/* A scalar: rank 0, or every dim known and their product 1. */
static int is_scalar(const struct qp_value *v) {
    if (v->rank == 0) return 1;
    if (v->rank < 0) return 0;
    for (int d = 0; d < v->rank; d++)
        if (v->dims[d].value != 1) return 0;
    return 1;
}

/* Dimension `d` (negative counts from the end) when known, else -1. */
static int64_t dim(const struct qp_value *v, int d) {
    if (v->rank <= 0) return -1;
    if (d < 0) d += v->rank;
    if (d < 0 || d >= v->rank) return -1;
    return v->dims[d].value;
}

/* ---- step 1: constants, shape values, adjacency ------------------------------------------- */

static void find_constants_and_shapes(struct ctx *c) {
    struct qp_graph *g = c->g;
    for (size_t v = 0; v < c->nv; v++)
        c->cst[v] = g->values[v].initializer >= 0;
    for (size_t k = 0; k < g->n_topo; k++) {
        int n = g->topo[k];
        const struct qp_node *nd = node(c, n);
        int in0 = nd->n_inputs > 0 ? nd->inputs[0] : -1;
        int konst = 0;
        if (qp_node_is(nd, "Constant"))
            konst = 1;
        else if ((qp_node_is(nd, "Identity") || qp_node_is(nd, "Squeeze") ||
                  qp_node_is(nd, "Unsqueeze")) &&
                 in0 >= 0 && c->cst[in0])
            konst = 1;
        else if (qp_node_is(nd, "Exp") && in0 >= 0 && g->values[in0].producer >= 0) {
            const struct qp_node *p = node(c, g->values[in0].producer);
            konst = qp_node_is(p, "Clip") && p->n_inputs > 0 && p->inputs[0] >= 0 &&
                    c->cst[p->inputs[0]];
        }
        /* Shape computation: Shape/Size, or only shape values and constants in. */
        int shape = qp_op_is(nd, QP_OP_FLAG_SHAPE_SOURCE), any_shape = 0, all_ok = 1;
        for (int i = 0; i < nd->n_inputs; i++) {
            int v = nd->inputs[i];
            if (v < 0) continue;
            if (c->shp[v])
                any_shape = 1;
            else if (!c->cst[v])
                all_ok = 0;
        }
        shape = shape || (any_shape && all_ok);
        int n_out = 0;
        for (int o = 0; o < nd->n_outputs; o++) {
            int v = nd->outputs[o];
            if (v < 0) continue;
            n_out++;
            if (konst) c->cst[v] = 1;
            if (shape) c->shp[v] = 1;
        }
        c->shape_node[n] = shape && n_out > 0;
    }
}

static const size_t *cmp_pos_tab;
static int cmp_by_pos(const void *a, const void *b) {
    size_t x = cmp_pos_tab[*(const int *)a], y = cmp_pos_tab[*(const int *)b];
    return x < y ? -1 : x > y;
}

static int build_adjacency(struct ctx *c) {
    struct qp_graph *g = c->g;
    size_t np = 0, nc = 0;
    for (size_t n = 0; n < c->nn; n++) {
        const struct qp_node *nd = &g->nodes[n];
        if (nd->dead) continue;
        np += (size_t)nd->n_inputs;
        for (int o = 0; o < nd->n_outputs; o++)
            if (nd->outputs[o] >= 0) nc += g->values[nd->outputs[o]].n_uses;
    }
    c->par = malloc((np + 1) * sizeof *c->par);
    c->chi = malloc((nc + 1) * sizeof *c->chi);
    if (!c->par || !c->chi) return 0;
    int kp = 0, kc = 0;
    for (size_t n = 0; n < c->nn; n++) {
        const struct qp_node *nd = &g->nodes[n];
        c->par_start[n] = kp;
        c->chi_start[n] = kc;
        if (nd->dead) continue;
        for (int i = 0; i < nd->n_inputs; i++) {
            int v = nd->inputs[i];
            if (v >= 0 && g->values[v].producer >= 0) c->par[kp++] = g->values[v].producer;
        }
        int first = kc;
        for (int o = 0; o < nd->n_outputs; o++) {
            int v = nd->outputs[o];
            if (v < 0) continue;
            for (size_t u = 0; u < g->values[v].n_uses; u++) {
                int cn = g->values[v].uses[u].node;
                if (cn < 0 || (size_t)cn >= c->nn || g->nodes[cn].dead) continue;
                int dup = 0;
                for (int k = first; k < kc && !dup; k++)
                    dup = c->chi[k] == cn;
                if (!dup) c->chi[kc++] = cn;
            }
        }
        cmp_pos_tab = c->pos;
        qsort(c->chi + first, (size_t)(kc - first), sizeof *c->chi, cmp_by_pos);
    }
    c->par_start[c->nn] = kp;
    c->chi_start[c->nn] = kc;
    return 1;
}

/* ---- path matching (graph_utils.has_path_type) --------------------------------------------- */

struct path_query {
    const char *const *types; /* NULL-terminated */
    const char *const *wild;  /* NULL-terminated, may be NULL */
    unsigned wild_bits;       /* op traits that also match as wildcards (optraits.h) */
    int forward;
    int budget;    /* node visits left; a search that runs out fails */
    int path[64];  /* nodes of the match, in path order */
    int typed[64]; /* 1 where path[i] matched a type, 0 for a wildcard */
    int len;
};

/* "BiasAdd" / "ConstMul" for an Add / Mul with a constant input, else the op type. */
static const char *pseudo_type(const struct ctx *c, int n) {
    const struct qp_node *nd = node(c, n);
    if (qp_node_is(nd, "Add") && has_const_input(c, n)) return "BiasAdd";
    if (qp_node_is(nd, "Mul") && has_const_input(c, n)) return "ConstMul";
    return onnx_op(nd);
}

static int type_matches(const struct ctx *c, int n, const char *t) {
    const struct qp_node *nd = node(c, n);
    if (strcmp(t, "NonBiasAdd") == 0) return qp_node_is(nd, "Add") && !has_const_input(c, n);
    return strcmp(pseudo_type(c, n), t) == 0 || strcmp(onnx_op(nd), t) == 0;
}

static int path_rec(const struct ctx *c, struct path_query *q, int n, int ti, int sp) {
    const char *t = q->types[ti];
    if (!t) {
        q->len = sp;
        return 1;
    }
    if (--q->budget < 0 || sp >= 64) return 0;
    int match = type_matches(c, n, t);
    int wild = !match && ((q->wild && in_list(pseudo_type(c, n), q->wild)) ||
                          (qp_op_traits(node(c, n)) & q->wild_bits));
    if (!match && !wild) {
        /* BiasAdd and ConstMul are optional path elements. */
        if (strcmp(t, "BiasAdd") == 0 || strcmp(t, "ConstMul") == 0)
            return path_rec(c, q, n, ti + 1, sp);
        return 0;
    }
    q->path[sp] = n;
    q->typed[sp] = match;
    int next = match ? ti + 1 : ti;
    if (!q->types[next]) {
        q->len = sp + 1;
        return 1;
    }
    int cnt = q->forward ? nchildren(c, n) : nparents(c, n);
    for (int k = 0; k < cnt; k++) {
        int m = q->forward ? child(c, n, k) : parent(c, n, k);
        if (path_rec(c, q, m, next, sp + 1)) return 1;
    }
    return 0;
}

static int has_path(const struct ctx *c, int n, const char *const *types, const char *const *wild,
                    unsigned wild_bits, int forward, struct path_query *q) {
    q->types = types;
    q->wild = wild;
    q->wild_bits = wild_bits;
    q->forward = forward;
    q->budget = 20000;
    q->len = 0;
    return path_rec(c, q, n, 0, 0);
}

/* ---- step 4 helpers: Conv backbones (partitioning.get_fusible_backbone) --------------------- */

static int backbone_search(struct ctx *c, int n, int depth) {
    const struct qp_node *nd = node(c, n);
    if (qp_node_is(nd, "Conv") || qp_node_is(nd, "ConvTranspose")) return n;
    if (c->mark[n] == c->stamp || depth > 4096) return -1;
    c->mark[n] = c->stamp;
    for (int i = 0; i < nd->n_inputs; i++) {
        int v = nd->inputs[i];
        if (v < 0 || c->cst[v] || c->g->values[v].producer < 0) continue;
        int b = backbone_search(c, c->g->values[v].producer, depth + 1);
        if (b >= 0) return b;
    }
    return -1;
}

static int fusible_backbone(struct ctx *c, int n) {
    static const char *const pats[6][6] = {
        {"BiasAdd", "ConstMul", "Conv", NULL},
        {"Relu", "BiasAdd", "ConstMul", "Conv", NULL},
        {"BatchNormalization", "BiasAdd", "Conv", NULL},
        {"Relu", "BatchNormalization", "BiasAdd", "Conv", NULL},
        {"MaxPool", "Relu", "BatchNormalization", "BiasAdd", "Conv", NULL},
        {"Mul", "Sigmoid", "BatchNormalization", "Conv", NULL},
    };
    struct path_query q;
    for (int conv_t = 0; conv_t < 2; conv_t++) {
        for (int k = 0; k < 6; k++) {
            const char *t[6];
            for (int j = 0; j < 6; j++)
                t[j] = pats[k][j] && conv_t && strcmp(pats[k][j], "Conv") == 0 ? "ConvTranspose"
                                                                               : pats[k][j];
            if (has_path(c, n, t, NULL, QP_OP_BIT(QP_OP_FLAG_COPY), 0, &q)) {
                c->stamp++;
                return backbone_search(c, n, 0);
            }
        }
    }
    return -1;
}

/* ---- step 2: exclusions (§3.2) ---------------------------------------------------------- */

static void exclude(struct ctx *c, int n, const char *why) {
    if (!c->excluded[n]) c->note[n] = why;
    c->excluded[n] = 1;
}

/* §3.2.1: GEMV and small GEMM (MatMul and Gemm). Unknown dims never exclude. */
static void check_gemm(struct ctx *c, int n) {
    const struct qp_node *nd = node(c, n);
    if (nd->n_inputs < 2 || nd->n_outputs < 1 || nd->outputs[0] < 0) return;
    const struct qp_value *out = &c->g->values[nd->outputs[0]];
    int a = nd->inputs[0], b = nd->inputs[1];
    if (a < 0 || b < 0) return;
    int const_in = c->cst[a] || c->cst[b];
    if (!const_in) {
        if ((out->rank >= 0 && out->rank < 2) || dim(out, -1) == 1 || dim(out, -2) == 1)
            return exclude(c, n, "trt.excluded.gemv");
    } else if (out->rank >= 0 && out->rank < 3) {
        for (int d = 0; d < out->rank; d++)
            if (out->dims[d].value == 1) return exclude(c, n, "trt.excluded.gemv");
    }
    int64_t N = dim(out, -1);
    const struct qp_attr *tb = qp_node_attr(nd, "transB");
    int64_t K = dim(&c->g->values[b], qp_node_is(nd, "Gemm") && tb && tb->i ? -1 : -2);
    if ((N > 0 && N < 16) || (K > 0 && K < 16)) exclude(c, n, "trt.excluded.small_gemm");
}

/* §3.2.2: Conv channel and kernel rules. */
static void check_conv(struct ctx *c, int n) {
    const struct qp_node *nd = node(c, n);
    if (nd->n_inputs < 2 || nd->inputs[1] < 0 || !c->cst[nd->inputs[1]])
        return exclude(c, n, "trt.excluded.nonconst_weight");
    const struct qp_value *w = &c->g->values[nd->inputs[1]];
    if (w->rank < 3) return;
    for (int d = 0; d < w->rank; d++)
        if (w->dims[d].value < 0) return;
    int64_t oc = w->dims[0].value, ic = w->dims[1].value, vol = 1;
    int equal = 1, all_ge3 = 1;
    for (int d = 2; d < w->rank; d++) {
        int64_t k = w->dims[d].value;
        vol = vol > INT32_MAX ? vol : vol * k;
        equal = equal && k == w->dims[2].value;
        all_ge3 = all_ge3 && k >= 3;
    }
    const struct qp_attr *ga = qp_node_attr(nd, "group");
    int64_t group = ga ? ga->i : 1;
    int x = nd->inputs[0];
    int graph_in = x >= 0 && c->g->values[x].is_graph_input;
    if (c->o->mode == QP_QUANT_FP8) {
        if (vol > 32) return exclude(c, n, "trt.excluded.fp8_conv_kernel");
        if (oc <= 16 || ic <= 16) return exclude(c, n, "trt.excluded.small_conv");
        return;
    }
    if (oc >= 16 && ic >= 16) return;
    int keep = (group == 1 && (oc % 8 == 0 || ic % 8 == 0) && (graph_in || oc >= 16 || ic >= 16) &&
                equal) ||
               (group > 1 && oc % 8 == 0 && all_ge3);
    if (!keep) exclude(c, n, "trt.excluded.small_conv");
}

/* §3.2.3: attention BMM pairs. */
static void check_mha(struct ctx *c, int n) {
    /* The wildcards here, in the fMHA check below and at the mask Add are part of ModelOpt's
     * patterns (pseudo types such as ConstMul included), not op facts (ir/optraits.h). */
    static const char *const pat[] = {"MatMul", "Softmax", "MatMul", NULL};
    static const char *const wild[] = {"Div",     "Mul",       "ConstMul", "Add",  "BiasAdd",
                                       "Reshape", "Transpose", "Flatten",  "Cast", NULL};
    struct path_query q;
    if (!has_path(c, n, pat, wild, 0, 1, &q)) return;
    int bmm2 = q.path[q.len - 1];
    const struct qp_node *nd = node(c, n);
    const char *why = NULL;
    if (c->o->disable_mha_qdq) {
        why = "user.disable_mha_qdq";
    } else if (nd->n_inputs >= 2 && nd->inputs[1] >= 0) {
        const struct qp_value *k = &c->g->values[nd->inputs[1]];
        int64_t head = dim(k, -2), seq = dim(k, -1);
        if (c->o->mode == QP_QUANT_INT8) {
            if (seq > 512) why = "trt.excluded.mha_seq_len";
        } else {
            if (head > 256 || (head >= 0 && head <= 8))
                why = "trt.excluded.mha_head_size";
            else {
                /* fMHA v2: BMM1 -> [Mul|Div] -> [Add] -> Softmax -> BMM2. */
                static const char *const fw[] = {"Reshape", "Transpose", "Flatten", "Cast", NULL};
                static const char *const opt1[] = {NULL, "Mul", "Div"};
                static const char *const opt2[] = {NULL, "Add"};
                int ok = 0;
                for (int i = 0; i < 3 && !ok; i++) {
                    for (int j = 0; j < 2 && !ok; j++) {
                        const char *t[6];
                        int k2 = 0;
                        t[k2++] = "MatMul";
                        if (opt1[i]) t[k2++] = opt1[i];
                        if (opt2[j]) t[k2++] = opt2[j];
                        t[k2++] = "Softmax";
                        t[k2++] = "MatMul";
                        t[k2] = NULL;
                        struct path_query q2;
                        ok = has_path(c, n, t, fw, 0, 1, &q2) && q2.path[q2.len - 1] == bmm2;
                    }
                }
                if (!ok) why = "trt.excluded.fp8_mha_pattern";
            }
        }
    }
    if (why) {
        exclude(c, n, why);
        exclude(c, bmm2, why);
    }
}

/* ---- step 3: non-quantizable patterns (§3.3) --------------------------------------------- */

static void mark_pattern(struct ctx *c, int n, const char *const *types, const char *const *wild,
                         const char *why) {
    struct path_query q;
    if (!has_path(c, n, types, wild, 0, 1, &q)) return;
    for (int i = 0; i < q.len; i++) {
        if (!c->patterned[q.path[i]] && !c->excluded[q.path[i]]) c->note[q.path[i]] = why;
        c->patterned[q.path[i]] = 1;
    }
}

static void find_patterns(struct ctx *c) {
    static const char *const gelu[] = {"Div", "Erf", "Add", "Mul", "Mul", NULL};
    static const char *const ln9[] = {"ReduceMean", "Sub", "Pow", "ReduceMean", "Add",
                                      "Sqrt",       "Div", "Mul", "Add",        NULL};
    static const char *const ln7[] = {"ReduceMean", "Sub",  "Pow", "ReduceMean",
                                      "Add",        "Sqrt", "Div", NULL};
    static const char *const cast[] = {"Cast", NULL};
    static const char *const mha[] = {"MatMul", "NonBiasAdd", "Softmax", "MatMul", NULL};
    for (size_t k = 0; k < c->g->n_topo; k++) {
        int n = c->g->topo[k];
        const struct qp_node *nd = node(c, n);
        if (qp_node_is(nd, "LayerNormalization")) {
            if (!c->patterned[n] && !c->excluded[n]) c->note[n] = "trt.pattern.layernorm";
            c->patterned[n] = 1;
        } else if (qp_node_is(nd, "Div")) {
            mark_pattern(c, n, gelu, NULL, "trt.pattern.gelu");
        } else if (qp_node_is(nd, "ReduceMean")) {
            mark_pattern(c, n, ln9, cast, "trt.pattern.layernorm");
            mark_pattern(c, n, ln7, cast, "trt.pattern.layernorm");
        } else if (qp_node_is(nd, "MatMul")) {
            mark_pattern(c, n, mha, NULL, "trt.pattern.masked_mha");
        }
    }
}

/* ---- step 4: residual Adds (§3.4) ---------------------------------------------------------- */

/* BFS distances over parents from `start` into dist (-1 unreached). */
static int ancestor_distances(const struct ctx *c, int start, int *dist, int *queue) {
    for (size_t i = 0; i < c->nn; i++)
        dist[i] = -1;
    int head = 0, tail = 0;
    dist[start] = 0;
    queue[tail++] = start;
    while (head < tail) {
        int n = queue[head++];
        for (int k = 0; k < nparents(c, n); k++) {
            int p = parent(c, n, k);
            if (dist[p] < 0) {
                dist[p] = dist[n] + 1;
                queue[tail++] = p;
            }
        }
    }
    return 1;
}

static int find_residual_adds(struct ctx *c) {
    int *d1 = qp_malloc_n(c->nn, sizeof *d1), *d2 = qp_malloc_n(c->nn, sizeof *d2);
    int *queue = qp_malloc_n(c->nn, sizeof *queue);
    int ok = d1 && d2 && queue;
    for (size_t k = 0; ok && k < c->g->n_topo; k++) {
        int n = c->g->topo[k];
        const struct qp_node *nd = node(c, n);
        if (!qp_node_is(nd, "Add") || nd->n_inputs != 2) continue;
        int a = nd->inputs[0], b = nd->inputs[1];
        if (a < 0 || b < 0 || c->cst[a] || c->cst[b]) continue;
        int p1 = c->g->values[a].producer, p2 = c->g->values[b].producer;
        if (p1 < 0 || p2 < 0) continue;
        int b1 = fusible_backbone(c, p1), b2 = fusible_backbone(c, p2);
        if (b1 < 0 && b2 < 0) continue;
        ancestor_distances(c, p1, d1, queue);
        ancestor_distances(c, p2, d2, queue);
        /* Lowest common ancestor: the common ancestor nearest to producer 1 (first in topo
         * order among equals, for determinism). */
        int lca = -1;
        for (size_t t = 0; t < c->g->n_topo; t++) {
            int m = c->g->topo[t];
            if (d1[m] >= 0 && d2[m] >= 0 && (lca < 0 || d1[m] < d1[lca])) lca = m;
        }
        if (b1 >= 0 && b2 >= 0) {
            if (b1 == b2)
                c->nonres[n] = -1;
            else if (lca >= 0)
                c->nonres[n] = d1[lca] > d2[lca] ? 0 : 1;
            else
                c->nonres[n] = -1;
        } else if (b1 >= 0) {
            c->nonres[n] = lca == b1 ? -1 : 0;
        } else {
            c->nonres[n] = lca == b2 ? -1 : 1;
        }
    }
    free(d1);
    free(d2);
    free(queue);
    return ok;
}

/* ---- step 5: partitions (§3.5) ------------------------------------------------------------ */

static int fusible_mul(const struct ctx *c, int n) {
    static const char *const a1[] = {"Mul", "Sigmoid", "Conv", NULL};
    static const char *const a2[] = {"Mul", "Sigmoid", "BatchNormalization", "Conv", NULL};
    static const char *const a3[] = {"Mul", "Sigmoid", "Add", NULL};
    static const char *const r1[] = {"Mul", "Sigmoid", NULL};
    static const char *const r2[] = {"Mul", "HardSigmoid", NULL};
    struct path_query q;
    if (n_var_inputs(c, n) < 2) return 1;
    if (has_path(c, n, a1, NULL, 0, 0, &q) || has_path(c, n, a2, NULL, 0, 0, &q) ||
        has_path(c, n, a3, NULL, 0, 0, &q))
        return 1;
    if (has_path(c, n, r1, NULL, 0, 0, &q) || has_path(c, n, r2, NULL, 0, 0, &q)) return 0;
    return 1;
}

/* May consumer `m` of partition member `cur` join partition `pid` (ids in `part`)? */
static int joins(struct ctx *c, int *part, int pid, int cur, int m) {
    const struct qp_node *nd = node(c, m);
    if (c->excluded[m] || c->patterned[m] || c->shape_node[m] || c->cask[m] >= 0 || c->kgen[m] >= 0)
        return 0;
    int ok = 0;
    if (qp_op_is(nd, QP_OP_FLAG_COPY) || qp_op_is(nd, QP_OP_FLAG_POINTWISE)) {
        ok = 1;
        for (int i = 0; i < nd->n_inputs && ok; i++) {
            int v = nd->inputs[i];
            if (v < 0 || c->cst[v]) continue;
            int p = c->g->values[v].producer;
            ok = p >= 0 && part[p] == pid;
        }
    }
    if (!ok && (qp_node_is(nd, "BatchNormalization") || qp_node_is(nd, "Relu") ||
                qp_node_is(nd, "MaxPool")))
        ok = fusible_backbone(c, m) >= 0;
    if (!ok && qp_node_is(nd, "Add") && c->nonres[m] >= 0) {
        const struct qp_node *cn = node(c, cur);
        ok = cn->n_outputs > 0 && nd->inputs[c->nonres[m]] == cn->outputs[0];
    }
    if (ok && qp_node_is(nd, "Mul") && !fusible_mul(c, m)) ok = 0;
    return ok;
}

/* DFS from `root` in consumer order, as the recursive partitioner does. */
static int grow_partition(struct ctx *c, int *part, int pid, int root, int *last) {
    size_t cap = 64, sp = 0;
    struct frame {
        int n, k;
    } *st = qp_malloc_n(cap, sizeof *st);
    if (!st) return 0;
    part[root] = pid;
    *last = root;
    st[sp++] = (struct frame){root, 0};
    while (sp) {
        struct frame *f = &st[sp - 1];
        /* A residual Add ends the partition: nothing after it joins. */
        const struct qp_node *fn = node(c, f->n);
        if (f->n != root && qp_node_is(fn, "Add") && c->nonres[f->n] >= 0) {
            sp--;
            continue;
        }
        if (f->k >= nchildren(c, f->n)) {
            sp--;
            continue;
        }
        int m = child(c, f->n, f->k++);
        if (part[m] >= 0 || !joins(c, part, pid, f->n, m)) continue;
        part[m] = pid;
        *last = m;
        if (sp == cap) {
            void *q = qp_realloc_n(st, cap * 2, sizeof *st);
            if (!q) {
                free(st);
                return 0;
            }
            st = q;
            cap *= 2;
        }
        st[sp++] = (struct frame){m, 0};
    }
    free(st);
    return 1;
}

/* Reached backward from a CASK partition through copy ops only (depth <= 10). */
static int follows_cask(const struct ctx *c, int n, int depth) {
    if (c->cask[n] >= 0) return 1;
    if (depth >= 10 || !qp_op_is(node(c, n), QP_OP_FLAG_COPY) || nparents(c, n) == 0) return 0;
    for (int k = 0; k < nparents(c, n); k++)
        if (!follows_cask(c, parent(c, n, k), depth + 1)) return 0;
    return 1;
}

/* ---- step 6/7: decisions and entries ------------------------------------------------------- */

static void set_quant(struct ctx *c, int n, const char *reason, const char *note) {
    c->quant[n] = 1;
    c->reason[n] = reason;
    c->note[n] = note;
}

static int is_quantized_neighbour(const struct ctx *c, int n, int forward, int depth) {
    int cnt = forward ? nchildren(c, n) : nparents(c, n);
    for (int k = 0; k < cnt; k++) {
        int m = forward ? child(c, n, k) : parent(c, n, k);
        if (c->quant[m]) return 1;
        const char *op = onnx_op(node(c, m));
        int through =
            qp_op_is(node(c, m), QP_OP_FLAG_COPY) || (!forward && strcmp(op, "Cast") == 0);
        if (through && depth < 10 && is_quantized_neighbour(c, m, forward, depth + 1)) return 1;
    }
    return 0;
}

static const char *linear_reason(const struct qp_node *nd, int weight) {
    if (qp_node_is(nd, "Conv") || qp_node_is(nd, "ConvTranspose"))
        return weight ? "trt.conv_weight" : "trt.conv_input";
    if (qp_node_is(nd, "Gemm")) return weight ? "trt.gemm_weight" : "trt.gemm_input";
    return weight ? "trt.matmul_weight" : "trt.matmul_input";
}

const char *const *qp_policy_trt_op_types(enum qp_quant_mode mode) {
    return mode == QP_QUANT_FP8 ? FP8_TYPES : INT8_TYPES;
}

/* Input slots ORT's handler for this op quantizes: bit i for input i. */
uint64_t qp_policy_trt_op_slots(const struct qp_node *nd) {
    if (qp_op_is(nd, QP_OP_FLAG_LINEAR)) return 3;
    if (qp_op_is(nd, QP_OP_FLAG_QDQ_INPUT0)) return 1;
    if (qp_node_is(nd, "Where")) return 6;
    return nd->n_inputs >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << nd->n_inputs) - 1);
}

static enum qp_status emit(struct ctx *c, struct qp_placement *out, int n, struct qp_error *err) {
    const struct qp_node *nd = node(c, n);
    uint64_t slots = qp_policy_trt_op_slots(nd) & ~c->noq[n];
    int linear = qp_op_is(nd, QP_OP_FLAG_LINEAR);
    if (qp_node_is(nd, "LayerNormalization")) slots &= 1;
    for (int i = 0; i < nd->n_inputs && i < 64; i++) {
        if (!(slots >> i & 1)) continue;
        int v = nd->inputs[i];
        if (v < 0) continue;
        const struct qp_value *val = &c->g->values[v];
        const struct qp_tensor *wt = qp_placement_weight_tensor(c->g, v);
        enum qp_status st;
        const char *r = c->reason[n];
        if (wt) {
            /* Constants (initializers and Constant outputs) are weights. */
            int f = wt->dtype == QP_DTYPE_FLOAT || wt->dtype == QP_DTYPE_FLOAT16 ||
                    wt->dtype == QP_DTYPE_BFLOAT16 || wt->dtype == QP_DTYPE_DOUBLE;
            if (!f || wt->rank == 0 || wt->numel == 1) continue;
            int axis = linear ? qp_weight_axis(nd, i, wt->rank) : -1;
            if (linear && strncmp(r, "trt.", 4) == 0) r = linear_reason(nd, 1);
            st = qp_placement_add_weight(out, val->name, nd->name, i, axis, r, err);
        } else {
            if (!is_float_or_unknown(val) || c->shp[v] || is_scalar(val)) continue;
            if (linear && strncmp(r, "trt.", 4) == 0) r = linear_reason(nd, 0);
            st = qp_placement_add_edge(out, val->name, nd->name, i, r, err);
        }
        if (st != QP_OK) return st;
    }
    return QP_OK;
}

/* CASK partitions rooted at linear ops, in topo order (§3.6.1). 0 when out of memory. */
static int grow_cask_partitions(struct ctx *c) {
    struct qp_graph *g = c->g;
    for (size_t k = 0; k < g->n_topo; k++) {
        int n = g->topo[k];
        const struct qp_node *nd = node(c, n);
        if (!qp_op_is(nd, QP_OP_FLAG_LINEAR) || c->cask[n] >= 0 || c->excluded[n] ||
            c->patterned[n] || c->shape_node[n])
            continue;
        int pid = c->n_cask++;
        c->cask_head[pid] = n;
        if (!grow_partition(c, c->cask, pid, n, &c->cask_last[pid])) return 0;
    }
    return 1;
}

/* KGEN partitions rooted at the remaining pointwise ops, then one-node ones for a Resize fed by
 * the last node of a CASK partition; their heads in kgen_head (room for every node). The count,
 * or -1 when out of memory. */
static int grow_kgen_partitions(struct ctx *c, int *kgen_head) {
    struct qp_graph *g = c->g;
    int n_kgen = 0;
    for (size_t k = 0; k < g->n_topo; k++) {
        int n = g->topo[k];
        const struct qp_node *nd = node(c, n);
        if (!qp_op_is(nd, QP_OP_FLAG_POINTWISE) || c->cask[n] >= 0 || c->kgen[n] >= 0 ||
            c->excluded[n] || c->patterned[n] || c->shape_node[n])
            continue;
        int last;
        kgen_head[n_kgen] = n;
        if (!grow_partition(c, c->kgen, n_kgen++, n, &last)) return -1;
    }
    for (size_t k = 0; k < g->n_topo; k++) {
        int n = g->topo[k];
        const struct qp_node *nd = node(c, n);
        if (!(qp_node_is(nd, "Resize") || qp_node_is(nd, "Upsample")) || c->cask[n] >= 0 ||
            c->kgen[n] >= 0 || c->excluded[n] || c->patterned[n] || nd->n_inputs < 1 ||
            nd->inputs[0] < 0)
            continue;
        int p = g->values[nd->inputs[0]].producer;
        if (p >= 0 && c->cask[p] >= 0 && c->cask_last[c->cask[p]] == p) {
            c->kgen[n] = n_kgen;
            kgen_head[n_kgen++] = n;
            c->note[n] = "trt.resize_after_partition";
        }
    }
    return n_kgen;
}

/* CASK classification (§3.6.1): a member with inputs from inside and outside its partition is a
 * residual Add (only the outside ones quantized), one with outside inputs only the root, the
 * rest fused. */
static void classify_cask(struct ctx *c) {
    struct qp_graph *g = c->g;
    for (size_t k = 0; k < g->n_topo; k++) {
        int n = g->topo[k];
        if (c->cask[n] < 0) continue;
        const struct qp_node *nd = node(c, n);
        int ext = 0, in = 0;
        for (int i = 0; i < nd->n_inputs; i++) {
            int v = nd->inputs[i];
            if (v < 0 || c->cst[v]) continue;
            int p = g->values[v].producer;
            if (p >= 0 && c->cask[p] == c->cask[n]) {
                in = 1;
                if (i < 64) c->noq[n] |= (uint64_t)1 << i;
            } else {
                ext = 1;
            }
        }
        if (ext && in)
            set_quant(c, n, "trt.residual_skip", "trt.residual_add");
        else if (ext)
            set_quant(c, n, "trt.root", "trt.partition_root");
        else
            c->note[n] = "trt.fused";
    }
}

/* The inputs of KGEN head n (§3.6.3): *has_q when one comes from a CASK partition (possibly
 * through copy ops) or a pooling/BN/Mul producer; the returned mask holds the inputs left raw —
 * those of a mask Add, and those no other quantizable head reads (qheads: the heads so far). */
static uint64_t kgen_raw_inputs(struct ctx *c, int n, int mask_add, const int *qheads, int n_qheads,
                                int *has_q) {
    struct qp_graph *g = c->g;
    const struct qp_node *nd = node(c, n);
    uint64_t noq = 0;
    *has_q = 0;
    for (int i = 0; i < nd->n_inputs && i < 64; i++) {
        int v = nd->inputs[i];
        if (v < 0) continue;
        int p = g->values[v].producer;
        if (p < 0) continue;
        const char *pop = onnx_op(node(c, p));
        if (follows_cask(c, p, 0) || strcmp(pop, "AveragePool") == 0 ||
            strcmp(pop, "BatchNormalization") == 0 || strcmp(pop, "GlobalAveragePool") == 0 ||
            strcmp(pop, "MaxPool") == 0 || strcmp(pop, "Mul") == 0) {
            if (mask_add)
                noq |= (uint64_t)1 << i;
            else
                *has_q = 1;
            continue;
        }
        /* Does another quantizable head (CASK root or KGEN head so far) read it? */
        int other = 0;
        const struct qp_value *val = &g->values[v];
        for (size_t u = 0; u < val->n_uses && !other; u++) {
            int m = val->uses[u].node;
            if (m == n) continue;
            if (c->cask[m] >= 0 && c->cask_head[c->cask[m]] == m) other = 1;
            for (int j = 0; j < n_qheads && !other; j++)
                other = qheads[j] == m;
        }
        if (!other) noq |= (uint64_t)1 << i;
    }
    return noq;
}

/* KGEN heads (§3.6.3): members other than the head are fused; a quantizable head with a
 * quantized input gets its inputs quantized. 0 when out of memory. */
static int quantize_kgen_heads(struct ctx *c, const int *kgen_head, int n_kgen) {
    struct qp_graph *g = c->g;
    int *qheads = qp_malloc_n(c->nn + 1, sizeof *qheads);
    int n_qheads = 0;
    if (!qheads) return 0;
    for (int h = 0; h < n_kgen; h++) {
        int n = kgen_head[h];
        const struct qp_node *nd = node(c, n);
        for (size_t k = 0; k < g->n_topo; k++)
            if (c->kgen[g->topo[k]] == h && g->topo[k] != n) c->note[g->topo[k]] = "trt.fused";
        if (!in_list(onnx_op(nd), c->qtypes) || has_const_input(c, n)) {
            if (!c->note[n]) c->note[n] = "trt.kgen_not_quantizable";
            continue;
        }
        static const char *const mask_pat[] = {"Add", "Softmax", "MatMul", NULL};
        static const char *const mask_wild[] = {"Flatten", "Reshape", NULL};
        struct path_query q;
        int mask_add = qp_node_is(nd, "Add") && has_path(c, n, mask_pat, mask_wild, 0, 1, &q);
        int has_q;
        uint64_t noq = kgen_raw_inputs(c, n, mask_add, qheads, n_qheads, &has_q);
        if (!has_q) {
            c->note[n] = mask_add ? "trt.mask_add" : "trt.kgen_no_quantized_input";
            continue;
        }
        qheads[n_qheads++] = n;
        if (qp_node_is(nd, "Add")) c->noq[n] |= noq;
        set_quant(c, n, "trt.kgen_input", "trt.kgen_head");
    }
    free(qheads);
    return 1;
}

/* Conv -> LayerNormalization (§3.6.4). */
static void quantize_layernorm_after_cask(struct ctx *c) {
    struct qp_graph *g = c->g;
    for (size_t k = 0; k < g->n_topo; k++) {
        int n = g->topo[k];
        const struct qp_node *nd = node(c, n);
        if (!qp_node_is(nd, "LayerNormalization") || nd->n_inputs < 1 || nd->inputs[0] < 0)
            continue;
        int p = g->values[nd->inputs[0]].producer;
        if (p >= 0 && follows_cask(c, p, 0))
            set_quant(c, n, "trt.layernorm_input", "trt.layernorm_after_partition");
    }
}

/* Leftovers (§3.6.5); pooling in a second pass, once its neighbours are decided. */
static void quantize_leftovers(struct ctx *c) {
    struct qp_graph *g = c->g;
    for (int pass = 0; pass < 2; pass++) {
        for (size_t k = 0; k < g->n_topo; k++) {
            int n = g->topo[k];
            const struct qp_node *nd = node(c, n);
            if (c->cask[n] >= 0 || c->kgen[n] >= 0 || c->excluded[n] || c->patterned[n] ||
                c->shape_node[n] || c->quant[n] || !in_list(onnx_op(nd), c->qtypes))
                continue;
            if (qp_op_is(nd, QP_OP_FLAG_POINTWISE) && has_const_input(c, n)) continue;
            int pool = qp_op_is(nd, QP_OP_FLAG_POOL);
            if (pass == 0 && !pool) {
                set_quant(c, n, "trt.op_input", "trt.leftover");
            } else if (pass == 1 && pool) {
                if (is_quantized_neighbour(c, n, 1, 0) || is_quantized_neighbour(c, n, 0, 0))
                    set_quant(c, n, "trt.pool_input", "trt.pool");
                else
                    c->note[n] = "trt.pool_no_quantized_neighbour";
            }
        }
    }
}

/* Graph-output nodes (§3.6.6): dropped unless Conv/Gemm/MatMul or keeping some inputs raw. */
static void drop_graph_output_nodes(struct ctx *c) {
    struct qp_graph *g = c->g;
    for (size_t k = 0; k < g->n_topo; k++) {
        int n = g->topo[k];
        const struct qp_node *nd = node(c, n);
        if (!c->quant[n] || qp_node_is(nd, "Conv") || qp_node_is(nd, "Gemm") ||
            qp_node_is(nd, "MatMul") || c->noq[n])
            continue;
        for (int o = 0; o < nd->n_outputs; o++)
            if (nd->outputs[o] >= 0 && g->values[nd->outputs[o]].is_graph_output) {
                c->quant[n] = 0;
                c->note[n] = "trt.graph_output";
                break;
            }
    }
}

/* The partition policy (§3): partitions, then which of their nodes take Q/DQ. */
static void partition_policy(struct ctx *c, int *ok) {
    find_patterns(c);
    if (!find_residual_adds(c) || !grow_cask_partitions(c)) {
        *ok = 0;
        return;
    }
    int *kgen_head = qp_malloc_n(c->nn + 1, sizeof *kgen_head);
    int n_kgen = kgen_head ? grow_kgen_partitions(c, kgen_head) : -1;
    if (n_kgen < 0) {
        free(kgen_head);
        *ok = 0;
        return;
    }
    classify_cask(c);
    int heads_ok = quantize_kgen_heads(c, kgen_head, n_kgen);
    free(kgen_head);
    if (!heads_ok) {
        *ok = 0;
        return;
    }
    quantize_layernorm_after_cask(c);
    quantize_leftovers(c);
    drop_graph_output_nodes(c);
}

static int has_qdq(const struct qp_graph *g) {
    for (size_t k = 0; k < g->n_topo; k++) {
        const struct qp_node *nd = &g->nodes[g->topo[k]];
        if (qp_node_is(nd, "QuantizeLinear") || qp_node_is(nd, "DequantizeLinear")) return 1;
    }
    return 0;
}

enum qp_status qp_policy_trt(struct qp_graph *g, const struct qp_policy_options *opts,
                             struct qp_placement *out, const char **node_notes,
                             struct qp_error *err) {
    enum qp_status st = qp_graph_toposort(g, err);
    if (st != QP_OK) return st;
    if (out->n_edges || out->n_weights)
        return qp_error_set(err, QP_ERR_USAGE, "policy trt: the output placement is not empty");
    struct ctx c = {.g = g, .o = opts, .nn = g->n_nodes, .nv = g->n_values, .sel = opts->select};
    unsigned char *sel_flags = NULL;
    size_t nn1 = c.nn + 1, nv1 = c.nv + 1;
    c.pos = malloc(nn1 * sizeof *c.pos);
    c.cst = calloc(nv1, 1);
    c.shp = calloc(nv1, 1);
    c.par_start = malloc(nn1 * sizeof *c.par_start);
    c.chi_start = malloc(nn1 * sizeof *c.chi_start);
    c.excluded = calloc(nn1, 1);
    c.patterned = calloc(nn1, 1);
    c.shape_node = calloc(nn1, 1);
    c.quant = calloc(nn1, 1);
    c.cask = malloc(nn1 * sizeof *c.cask);
    c.kgen = malloc(nn1 * sizeof *c.kgen);
    c.nonres = malloc(nn1 * sizeof *c.nonres);
    c.noq = calloc(nn1, sizeof *c.noq);
    c.note = calloc(nn1, sizeof *c.note);
    c.reason = calloc(nn1, sizeof *c.reason);
    c.mark = calloc(nn1, sizeof *c.mark);
    c.cask_last = malloc(nn1 * sizeof *c.cask_last);
    c.cask_head = malloc(nn1 * sizeof *c.cask_head);
    sel_flags = calloc(nn1, 1);
    if (!c.pos || !c.cst || !c.shp || !c.par_start || !c.chi_start || !c.excluded || !c.patterned ||
        !c.shape_node || !c.quant || !c.cask || !c.kgen || !c.nonres || !c.noq || !c.note ||
        !c.reason || !c.mark || !c.cask_last || !c.cask_head || !sel_flags)
        goto nomem;
    for (size_t i = 0; i < c.nn; i++) {
        c.pos[i] = SIZE_MAX;
        c.cask[i] = c.kgen[i] = -1;
        c.nonres[i] = -2;
    }
    for (size_t k = 0; k < g->n_topo; k++)
        c.pos[g->topo[k]] = k;
    if (!build_adjacency(&c)) goto nomem;
    find_constants_and_shapes(&c);

    if (has_qdq(g)) {
        qp_log(QP_LOG_WARN, "policy trt: the model already contains QuantizeLinear/"
                            "DequantizeLinear nodes; nothing is placed");
        goto done;
    }

    /* Quantizable op types. */
    const struct qp_select *sel = opts->select;
    size_t n_user_types = qp_select_count(sel, QP_SELECT_OP_TYPES_TO_QUANTIZE);
    const char **user_types = NULL;
    if (n_user_types) {
        if (!(user_types = calloc(n_user_types + 1, sizeof *user_types))) goto nomem;
        for (size_t i = 0; i < n_user_types; i++) {
            user_types[i] = qp_select_entry(sel, QP_SELECT_OP_TYPES_TO_QUANTIZE, i);
            if (opts->mode == QP_QUANT_FP8 && !in_list(user_types[i], FP8_TYPES)) {
                st = qp_error_set(err, QP_ERR_USAGE,
                                  "policy trt: op type '%s' cannot be quantized to FP8 (allowed: "
                                  "Conv, Gemm, MatMul, Add)",
                                  user_types[i]);
                free(user_types);
                goto fail;
            }
        }
        c.qtypes = user_types;
    } else {
        c.qtypes = opts->mode == QP_QUANT_FP8 ? FP8_TYPES : INT8_TYPES;
    }

    /* Exclusions (§3.1 step 2, §3.2). Shape computation and subgraph holders never quantize. */
    if (sel) qp_select_match(sel, g, sel_flags, err);
    for (size_t k = 0; k < g->n_topo; k++) {
        int n = g->topo[k];
        const struct qp_node *nd = node(&c, n);
        if (c.shape_node[n]) exclude(&c, n, "trt.shape_subgraph");
        if (sel_flags[n] & QP_SEL_EXCLUDE) exclude(&c, n, "user.exclude");
        if (!opts->no_auto_exclusions) {
            if (qp_node_is(nd, "MatMul") || qp_node_is(nd, "Gemm")) check_gemm(&c, n);
            if (qp_node_is(nd, "Conv")) check_conv(&c, n);
        }
    }
    for (size_t k = 0; k < g->n_topo; k++) {
        int n = g->topo[k];
        if (qp_node_is(node(&c, n), "MatMul")) check_mha(&c, n);
    }

    /* Candidates (§3.1 step 3). */
    int any_node_sel = 0;
    for (size_t i = 0; i < c.nn; i++)
        any_node_sel |= sel_flags[i] & QP_SEL_NODE_QUANTIZE;
    int ok = 1;
    if (any_node_sel || n_user_types) {
        unsigned char bit = any_node_sel ? QP_SEL_NODE_QUANTIZE : QP_SEL_OP_QUANTIZE;
        const char *why = any_node_sel ? "user.nodes_to_quantize" : "user.op_types_to_quantize";
        for (size_t k = 0; k < g->n_topo; k++) {
            int n = g->topo[k];
            if (!(sel_flags[n] & bit)) continue;
            if (c.excluded[n]) continue;
            set_quant(&c, n, why, why);
        }
    } else {
        partition_policy(&c, &ok);
    }
    if (!ok) {
        free(user_types);
        goto nomem;
    }

    /* Excluded nodes and op types ORT would not quantize are removed last (§3.1 step 5). */
    for (size_t k = 0; k < g->n_topo && st == QP_OK; k++) {
        int n = g->topo[k];
        if (!c.quant[n]) continue;
        if (c.excluded[n]) continue;
        if (!in_list(onnx_op(node(&c, n)), c.qtypes)) {
            c.note[n] = "trt.op_type_not_quantizable";
            continue;
        }
        st = emit(&c, out, n, err);
    }
    free(user_types);
    if (st != QP_OK) goto fail;
    st = qp_placement_validate(out, g, err);
    if (st != QP_OK) goto fail;
    goto done;
nomem:
    st = qp_error_set(err, QP_ERR_NOMEM, "policy trt: out of memory");
    goto fail;
done:
fail:
    if (node_notes && c.note)
        for (size_t i = 0; i < c.nn; i++)
            node_notes[i] = c.note[i];
    free(c.pos);
    free(c.cst);
    free(c.shp);
    free(c.par_start);
    free(c.chi_start);
    free(c.par);
    free(c.chi);
    free(c.excluded);
    free(c.patterned);
    free(c.shape_node);
    free(c.quant);
    free(c.cask);
    free(c.kgen);
    free(c.nonres);
    free(c.noq);
    free(c.note);
    free(c.reason);
    free(c.mark);
    free(c.cask_last);
    free(c.cask_head);
    free(sel_flags);
    return st;
}
