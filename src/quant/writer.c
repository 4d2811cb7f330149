/* The Q/DQ writer (writer.h): a placement plus calibrated ranges -> QuantizeLinear/
 * DequantizeLinear nodes in the graph. */
#include "quant/writer.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "core/size.h"
#include "ir/opset_convert.h"
#include "quant/f16.h"
#include "quant/qdq_to_dq.h"
#include "qmath/qparams.h"

#define QP_QDQ_MIN_OPSET 19

void qp_writer_options_default(struct qp_writer_options *o) {
    memset(o, 0, sizeof *o);
    o->qtype = QP_DTYPE_INT8;
    o->high_precision = QP_DTYPE_FLOAT;
}

static int is_qdq_op(const struct qp_node *n) {
    return strcmp(n->op_type, "QuantizeLinear") == 0 || strcmp(n->op_type, "DequantizeLinear") == 0;
}

int qp_model_has_qdq(const struct qp_model *m) {
    const struct qp_graph *g = m ? m->graph : NULL;
    if (!g) return 0;
    for (size_t i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && is_qdq_op(&g->nodes[i])) return 1;
    return 0;
}

char *qp_quant_default_output(const char *input) {
    size_t n = strlen(input);
    const char *suffix = ".quant.onnx";
    if (n >= 5 && strcmp(input + n - 5, ".onnx") == 0) n -= 5;
    char *out = malloc(n + strlen(suffix) + 1);
    if (!out) return NULL;
    memcpy(out, input, n);
    strcpy(out + n, suffix);
    return out;
}

/* A new initializer owning copies of `dims` and `data`. */
static enum qp_status add_init(struct qp_graph *g, const char *base, enum qp_dtype dt, int rank,
                               const int64_t *dims, const void *data, size_t nbytes, int *v_out,
                               struct qp_error *err) {
    struct qp_model *m = g->model;
    const char *name = qp_graph_unique_value_name(g, base);
    if (!name) return qp_error_set(err, QP_ERR_NOMEM, "quantize: out of memory");
    struct qp_tensor t = {0};
    t.name = name;
    t.dtype = dt;
    t.rank = rank;
    uint64_t numel = 1;
    if (rank > 0) {
        int64_t *d = qp_arena_calloc(m->arena, (size_t)rank, sizeof *d);
        if (!d) return qp_error_set(err, QP_ERR_NOMEM, "quantize: out of memory");
        for (int i = 0; i < rank; i++) {
            d[i] = dims[i];
            numel *= (uint64_t)dims[i];
        }
        t.dims = d;
    }
    t.numel = numel;
    void *buf = malloc(nbytes ? nbytes : 1);
    if (!buf) return qp_error_set(err, QP_ERR_NOMEM, "quantize: out of memory");
    memcpy(buf, data, nbytes);
    enum qp_status st = qp_model_own(m, buf, err);
    if (st != QP_OK) return st;
    t.data = buf;
    t.nbytes = nbytes;
    return qp_graph_add_initializer(g, &t, v_out, err);
}

/* Sets dtype and shape of a new value from another one. */
static void copy_type(struct qp_graph *g, int dst, int src, enum qp_dtype dt) {
    struct qp_value *d = &g->values[dst];
    const struct qp_value *s = &g->values[src];
    d->kind = QP_VALUE_TENSOR;
    d->dtype = dt;
    d->rank = s->rank;
    d->dims = s->dims;
}

/* Adds `base`_QuantizeLinear -> `base`_DequantizeLinear reading value `x`; *dq_out receives the
 * DQ output value. `axis` >= 0 adds the axis attribute (per channel). */
static enum qp_status add_qdq(struct qp_graph *g, int x, const char *base, int scale_v, int zp_v,
                              enum qp_dtype qtype, int axis, int *dq_out, struct qp_error *err) {
    struct qp_model *m = g->model;
    size_t bl = strlen(base);
    char *tmp = malloc(bl + 40);
    if (!tmp) return qp_error_set(err, QP_ERR_NOMEM, "quantize: out of memory");
    enum qp_status st = QP_OK;
    const char *qn, *qo, *dn, *dout;
    snprintf(tmp, bl + 40, "%s_QuantizeLinear", base);
    qn = qp_graph_unique_node_name(g, tmp);
    snprintf(tmp, bl + 40, "%s_QuantizeLinear_Output", base);
    qo = qp_graph_unique_value_name(g, tmp);
    snprintf(tmp, bl + 40, "%s_DequantizeLinear", base);
    dn = qp_graph_unique_node_name(g, tmp);
    snprintf(tmp, bl + 40, "%s_DequantizeLinear_Output", base);
    dout = qp_graph_unique_value_name(g, tmp);
    free(tmp);
    if (!qn || !qo || !dn || !dout)
        return qp_error_set(err, QP_ERR_NOMEM, "quantize: out of memory");
    /* The names are arena strings; copy the value names the adds below may invalidate. */
    const char *xs = g->values[x].name, *ss = g->values[scale_v].name, *zs = g->values[zp_v].name;
    const char *qin[3] = {xs, ss, zs}, *qout[1] = {qo};
    int qnode = -1, dnode = -1;
    if ((st = qp_graph_add_node(g, qn, "QuantizeLinear", "", 3, qin, 1, qout, &qnode, err)) !=
        QP_OK)
        return st;
    const char *din[3] = {qo, ss, zs}, *douts[1] = {dout};
    if ((st = qp_graph_add_node(g, dn, "DequantizeLinear", "", 3, din, 1, douts, &dnode, err)) !=
        QP_OK)
        return st;
    if (axis >= 0) {
        struct qp_attr *a = qp_node_add_attr(g, qnode, "axis", QP_ATTR_INT);
        if (!a) return qp_error_set(err, QP_ERR_NOMEM, "quantize: out of memory");
        a->i = axis;
        a = qp_node_add_attr(g, dnode, "axis", QP_ATTR_INT);
        if (!a) return qp_error_set(err, QP_ERR_NOMEM, "quantize: out of memory");
        a->i = axis;
    }
    int qv = qp_graph_find_value(g, qo), dv = qp_graph_find_value(g, dout);
    if (qv < 0 || dv < 0) return qp_error_set(err, QP_ERR_INTERNAL, "quantize: lost Q/DQ output");
    copy_type(g, qv, x, qtype);
    copy_type(g, dv, x, QP_DTYPE_FLOAT);
    (void)m;
    *dq_out = dv;
    return QP_OK;
}

static void count_op(struct qp_writer_stats *s, const char *op, int weight) {
    if (!s) return;
    size_t i = 0;
    for (; i < s->n_ops; i++)
        if (strncmp(s->by_op[i].op_type, op, sizeof s->by_op[i].op_type - 1) == 0) break;
    if (i == s->n_ops) {
        if (s->n_ops == QP_WRITER_MAX_OPS) return;
        snprintf(s->by_op[i].op_type, sizeof s->by_op[i].op_type, "%s", op);
        s->by_op[s->n_ops].n_edges = s->by_op[s->n_ops].n_weights = 0;
        s->n_ops++;
    }
    if (weight)
        s->by_op[i].n_weights++;
    else
        s->by_op[i].n_edges++;
}

/* Turns the Constant node producing value `v` into an initializer of the same name. */
static enum qp_status fold_constant(struct qp_graph *g, int v, struct qp_error *err) {
    const struct qp_tensor *t = qp_placement_weight_tensor(g, v);
    int prod = g->values[v].producer;
    if (!t || prod < 0) return QP_OK;
    struct qp_tensor copy = *t;
    copy.name = g->values[v].name;
    copy.origin = NULL;
    enum qp_status st = qp_graph_remove_node(g, prod, err);
    if (st != QP_OK) return st;
    return qp_graph_add_initializer(g, &copy, NULL, err);
}

/* Checks what the placement asks for before anything is edited. */
static enum qp_status precheck(const struct qp_graph *g, const struct qp_placement *p,
                               const struct qp_writer_options *o, struct qp_error *err) {
    for (size_t i = 0; i < p->n_edges; i++) {
        const struct qp_qedge *e = &p->edges[i];
        const struct qp_value *val = &g->values[e->value_index];
        if (val->dtype != QP_DTYPE_UNDEFINED && val->dtype != QP_DTYPE_FLOAT)
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "quantize: edge '%s' -> node '%s' input %d: tensor is %s, only "
                                "float tensors are quantized",
                                e->tensor, e->node, e->input, qp_dtype_name(val->dtype));
        float amax = 0;
        if (!o->amax || !o->amax(o->amax_user, e->tensor, &amax))
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "quantize: edge '%s' -> node '%s' input %d: no calibrated range "
                                "for tensor '%s'",
                                e->tensor, e->node, e->input, e->tensor);
        if (!isfinite(amax) || amax < 0)
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "quantize: tensor '%s': calibrated amax %g is not finite and >= 0",
                                e->tensor, (double)amax);
    }
    for (size_t i = 0; i < p->n_weights; i++) {
        const struct qp_qweight *w = &p->weights[i];
        const struct qp_tensor *t = qp_placement_weight_tensor(g, w->value_index);
        if (!t || t->dtype != QP_DTYPE_FLOAT || (!t->data && t->numel))
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "quantize: weight '%s' -> node '%s' input %d: not a float32 "
                                "constant with data",
                                w->tensor, w->node, w->input);
        if (w->axis >= t->rank)
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "quantize: weight '%s' -> node '%s': axis %d out of range for "
                                "rank %d",
                                w->tensor, w->node, w->axis, t->rank);
    }
    return QP_OK;
}

static enum qp_status check_precision(const struct qp_writer_options *o, struct qp_error *err) {
    if (o->high_precision != QP_DTYPE_FLOAT && o->high_precision != QP_DTYPE_FLOAT16 &&
        o->high_precision != QP_DTYPE_BFLOAT16)
        return qp_error_set(err, QP_ERR_UNSUPPORTED,
                            "quantize: high precision dtype %s is not supported (float, float16, "
                            "bfloat16)",
                            qp_dtype_name(o->high_precision));
    return QP_OK;
}

/* 1 when graph input `v` is read only by QuantizeLinear nodes with one zero-point dtype, which
 * goes to *zp_out. */
static int input_only_quantized(const struct qp_graph *g, int v, enum qp_dtype *zp_out) {
    const struct qp_value *val = &g->values[v];
    *zp_out = QP_DTYPE_UNDEFINED;
    if (!val->n_uses || val->initializer >= 0 || val->is_graph_output) return 0;
    for (size_t u = 0; u < val->n_uses; u++) {
        const struct qp_node *n = &g->nodes[val->uses[u].node];
        if (!qp_node_is(n, "QuantizeLinear") || val->uses[u].input != 0 || n->n_inputs < 3 ||
            n->inputs[2] < 0)
            return 0;
        enum qp_dtype zp = g->values[n->inputs[2]].dtype;
        if (*zp_out != QP_DTYPE_UNDEFINED && zp != *zp_out) return 0;
        *zp_out = zp;
    }
    return *zp_out != QP_DTYPE_UNDEFINED;
}

/* ModelOpt's remove_graph_input_q: the DequantizeLinear nodes of a graph input's Q read the
 * input itself, which takes the zero point's dtype (the caller feeds quantized data). */
static enum qp_status remove_input_q(struct qp_graph *g, size_t *n_removed, struct qp_error *err) {
    enum qp_status st;
    for (size_t i = 0; i < g->n_inputs; i++) {
        int v = g->inputs[i];
        enum qp_dtype zp;
        if (!input_only_quantized(g, v, &zp)) continue;
        /* The DQ nodes become readers of v too: take the Q readers until none is left. */
        for (;;) {
            int q = -1;
            for (size_t u = 0; u < g->values[v].n_uses && q < 0; u++)
                if (qp_node_is(&g->nodes[g->values[v].uses[u].node], "QuantizeLinear"))
                    q = g->values[v].uses[u].node;
            if (q < 0) break;
            int qo = g->nodes[q].outputs[0];
            while (qo >= 0 && g->values[qo].n_uses) {
                struct qp_use u = g->values[qo].uses[0];
                if ((st = qp_graph_set_input(g, u.node, u.input, v, err)) != QP_OK) return st;
            }
            if ((st = qp_graph_remove_node(g, q, err)) != QP_OK) return st;
            (*n_removed)++;
        }
        g->values[v].dtype = zp;
    }
    return qp_graph_toposort(g, err);
}

enum qp_status qp_qdq_write_precision(struct qp_model *m, const struct qp_writer_options *o,
                                      struct qp_writer_stats *stats, struct qp_error *err) {
    if (!m || !o) return qp_error_set(err, QP_ERR_USAGE, "quantize: NULL argument");
    enum qp_status st = check_precision(o, err);
    if (st != QP_OK) return st;
    if (o->high_precision != QP_DTYPE_FLOAT) {
        struct qp_f16_options fo;
        qp_f16_options_default(&fo);
        fo.dtype = o->high_precision;
        fo.keep_ops = o->keep_fp32_ops;
        fo.n_keep_ops = o->n_keep_fp32_ops;
        fo.keep_io_types = !o->direct_io_types;
        if ((st = qp_model_convert_low(m, &fo, stats ? &stats->f16 : NULL, err)) != QP_OK)
            return qp_error_prefix(err, "quantize");
    }
    size_t n_removed = 0;
    if (o->direct_io_types && (st = remove_input_q(m->graph, &n_removed, err)) != QP_OK) return st;
    if (stats) {
        stats->high_precision = o->high_precision;
        stats->n_input_q_removed = n_removed;
    }
    return QP_OK;
}

/* The amax among ratios 1.0, 0.95, .. 0.5 of `amax`, then within 0.025 of the best in steps of
 * 0.005, whose quantization of the channel x[0..n) has the least squared error (ties: the
 * larger). */
static float least_error_amax(const float *x, float *y, int64_t n, enum qp_dtype qtype,
                              float amax) {
    if (!(amax > 0.0f) || n == 0) return amax;
    double best_r = 1.0, best = qp_symmetric_sq_error(qtype, amax, x, NULL, n, y);
    for (int pass = 0; pass < 2; pass++) {
        double from = pass ? best_r + 0.025 : 0.95, to = pass ? best_r - 0.025 : 0.5;
        for (double r = from; r >= to - 1e-9; r -= pass ? 0.005 : 0.05) {
            if (r > 1.0 + 1e-9 || r < 0.5 - 1e-9 || fabs(r - best_r) < 1e-9) continue;
            double e = qp_symmetric_sq_error(qtype, (float)(amax * r), x, NULL, n, y);
            if (e < best) {
                best = e;
                best_r = r;
            }
        }
    }
    return (float)(amax * best_r);
}

/* Below this many weights a tensor is clipped on one thread (waking threads costs more). */
#define QP_CLIP_PARALLEL_MIN 65536

/* weight_clip_mse: each channel's amax (amax[0..len)) lowered to the least-error one, channels
 * side by side on up to n_threads threads (each channel's result does not depend on them). */
static enum qp_status clip_channels(const struct qp_tensor *t, int64_t outer, int64_t len,
                                    int64_t inner, enum qp_dtype qtype, int n_threads, float *amax,
                                    struct qp_writer_stats *stats, struct qp_error *err) {
    int64_t per = outer * inner;
    int nt = n_threads > 1 && per * len >= QP_CLIP_PARALLEL_MIN ? n_threads : 1;
    if (nt > len) nt = len > 0 ? (int)len : 1;
    float *buf = qp_malloc_n((size_t)per * 2 * (size_t)nt, sizeof *buf);
    float *full = qp_malloc_n((size_t)len, sizeof *full);
    if (!buf || !full) {
        free(buf);
        free(full);
        return qp_error_set(err, QP_ERR_NOMEM, "quantize: out of memory");
    }
    memcpy(full, amax, (size_t)len * sizeof *full);
    const unsigned char *bytes = t->data;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 4) if (nt > 1)
    for (int64_t a = 0; a < len; a++) {
        float *x = buf + (size_t)omp_get_thread_num() * 2 * (size_t)per, *y = x + per;
        for (int64_t o = 0; o < outer; o++)
            memcpy(x + o * inner, bytes + (size_t)((o * len + a) * inner) * 4, (size_t)inner * 4);
        amax[a] = least_error_amax(x, y, per, qtype, full[a]);
    }
    for (int64_t a = 0; stats && a < len; a++) {
        stats->n_weight_channels++;
        stats->n_weight_channels_clipped += amax[a] < full[a];
        stats->weight_clip_mean_ratio += full[a] > 0.0f ? (double)amax[a] / full[a] : 1.0;
    }
    free(buf);
    free(full);
    return QP_OK;
}

/* Per-channel (or per-tensor, axis -1) symmetric scales of a float weight; with clip, each
 * channel's least-error clipping (clip_channels). */
static enum qp_status weight_scales(const struct qp_tensor *t, int axis, enum qp_dtype qtype,
                                    int clip, int n_threads, struct qp_writer_stats *stats,
                                    float **scales_out, int64_t *n_out, struct qp_error *err) {
    int64_t outer = 1, len = 1, inner = 1;
    for (int d = 0; d < t->rank; d++) {
        if (axis < 0)
            inner *= t->dims[d];
        else if (d < axis)
            outer *= t->dims[d];
        else if (d == axis)
            len = t->dims[d];
        else
            inner *= t->dims[d];
    }
    float *amax = calloc((size_t)len, sizeof *amax);
    if (!amax) return qp_error_set(err, QP_ERR_NOMEM, "quantize: out of memory");
    const unsigned char *bytes = t->data;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t a = 0; a < len; a++)
            for (int64_t i = 0; i < inner; i++) {
                float x;
                memcpy(&x, bytes + (size_t)(((o * len) + a) * inner + i) * 4, 4);
                float ax = fabsf(x);
                if (ax > amax[a] && isfinite(ax)) amax[a] = ax;
            }
    enum qp_status cst =
        clip ? clip_channels(t, outer, len, inner, qtype, n_threads, amax, stats, err) : QP_OK;
    if (cst != QP_OK) {
        free(amax);
        return cst;
    }
    for (int64_t a = 0; a < len; a++) {
        int32_t zp = 0;
        enum qp_status st = qp_qparams_from_range(qtype, -amax[a], amax[a], 1, &amax[a], &zp, err);
        if (st != QP_OK) {
            free(amax);
            return qp_error_prefix(err, "quantize: weight '%s'", t->name);
        }
    }
    *scales_out = amax;
    *n_out = len;
    return QP_OK;
}

enum qp_status qp_qdq_weight_scales(const struct qp_tensor *t, int axis, enum qp_dtype qtype,
                                    int clip_mse, float **scales_out, int64_t *n_out,
                                    struct qp_error *err) {
    return weight_scales(t, axis, qtype, clip_mse, 1, NULL, scales_out, n_out, err);
}

enum qp_status qp_qdq_write(struct qp_model *m, const struct qp_placement *p_in,
                            const struct qp_writer_options *o, struct qp_writer_stats *stats,
                            struct qp_error *err) {
    if (!m || !p_in || !o) return qp_error_set(err, QP_ERR_USAGE, "quantize: NULL argument");
    enum qp_status st;
    if (o->qtype != QP_DTYPE_INT8 && o->qtype != QP_DTYPE_FLOAT8E4M3FN)
        return qp_error_set(err, QP_ERR_UNSUPPORTED,
                            "quantize: quantized type %s is not supported (int8, float8e4m3fn)",
                            qp_dtype_name(o->qtype));
    if ((st = check_precision(o, err)) != QP_OK) return st;
    if (qp_model_has_qdq(m))
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "quantize: the model already holds QuantizeLinear/DequantizeLinear "
                            "nodes (already quantized); give the float model");
    if (stats) memset(stats, 0, sizeof *stats);
    struct qp_graph *g = m->graph;
    struct qp_placement *p = NULL;
    float *scales = NULL;
    int64_t opset = qp_model_opset(m, "");
    if (stats) stats->opset_from = stats->opset_to = opset;
    if (opset < QP_QDQ_MIN_OPSET) {
        if ((st = qp_model_convert_opset(m, QP_QDQ_MIN_OPSET, err)) != QP_OK)
            return qp_error_prefix(err, "quantize: converting to opset %d", QP_QDQ_MIN_OPSET);
        if (stats) stats->opset_to = QP_QDQ_MIN_OPSET;
    }
    if ((st = qp_graph_toposort(g, err)) != QP_OK) return st;
    if ((st = qp_placement_copy(p_in, &p, err)) != QP_OK) return st;
    if ((st = qp_placement_validate(p, g, err)) != QP_OK) {
        qp_error_prefix(err, "quantize: placement");
        goto done;
    }
    if ((st = precheck(g, p, o, err)) != QP_OK) goto done;

    /* Weights stored as Constant nodes become initializers (as ORT and TensorRT expect). */
    for (size_t i = 0; i < p->n_weights; i++) {
        int v = p->weights[i].value_index;
        if (g->values[v].initializer >= 0) continue;
        if ((st = fold_constant(g, v, err)) != QP_OK) goto done;
        if (stats) stats->n_folded_constants++;
    }

    unsigned char zero[1] = {0};
    /* Activation tensors: one pair per tensor, shared by its placed slots. */
    for (size_t i = 0; i < p->n_edges; i++) {
        int v = p->edges[i].value_index;
        int first = 1;
        for (size_t j = 0; j < i; j++)
            if (p->edges[j].value_index == v) first = 0;
        if (!first) continue;
        float amax = 0, scale = 1;
        int32_t zp = 0;
        o->amax(o->amax_user, p->edges[i].tensor, &amax);
        if ((st = qp_qparams_from_range(o->qtype, -amax, amax, 1, &scale, &zp, err)) != QP_OK) {
            qp_error_prefix(err, "quantize: tensor '%s'", p->edges[i].tensor);
            goto done;
        }
        const char *tname = g->values[v].name;
        char base[512];
        int sv = -1, zv = -1, dq = -1;
        snprintf(base, sizeof base, "%s_scale", tname);
        if ((st = add_init(g, base, QP_DTYPE_FLOAT, 0, NULL, &scale, 4, &sv, err)) != QP_OK)
            goto done;
        snprintf(base, sizeof base, "%s_zero_point", tname);
        if ((st = add_init(g, base, o->qtype, 0, NULL, zero, 1, &zv, err)) != QP_OK) goto done;
        if ((st = add_qdq(g, v, g->values[v].name, sv, zv, o->qtype, -1, &dq, err)) != QP_OK)
            goto done;
        if (stats) stats->n_tensors++;
        for (size_t j = i; j < p->n_edges; j++) {
            if (p->edges[j].value_index != v) continue;
            int node = p->edges[j].node_index;
            if ((st = qp_graph_set_input(g, node, p->edges[j].input, dq, err)) != QP_OK) goto done;
            if (stats) stats->n_edges++;
            count_op(stats, g->nodes[node].op_type, 0);
        }
    }

    /* Weights: one pair per (tensor, axis). */
    for (size_t i = 0; i < p->n_weights; i++) {
        int v = p->weights[i].value_index, axis = p->weights[i].axis;
        int first = 1;
        for (size_t j = 0; j < i; j++)
            if (p->weights[j].value_index == v && p->weights[j].axis == axis) first = 0;
        if (!first) continue;
        const struct qp_tensor *t = qp_placement_weight_tensor(g, v);
        if (!t) {
            st = qp_error_set(err, QP_ERR_INTERNAL, "quantize: weight '%s' vanished",
                              p->weights[i].tensor);
            goto done;
        }
        int64_t n = 0;
        if ((st = weight_scales(t, axis, o->qtype, o->weight_clip_mse, o->n_threads, stats, &scales,
                                &n, err)) != QP_OK)
            goto done;
        unsigned char *zeros = calloc((size_t)n, 1);
        if (!zeros) {
            st = qp_error_set(err, QP_ERR_NOMEM, "quantize: out of memory");
            goto done;
        }
        const char *tname = g->values[v].name;
        char base[512];
        int sv = -1, zv = -1, dq = -1;
        int rank = axis >= 0 ? 1 : 0;
        snprintf(base, sizeof base, "%s_scale", tname);
        st = add_init(g, base, QP_DTYPE_FLOAT, rank, &n, scales, (size_t)n * 4, &sv, err);
        snprintf(base, sizeof base, "%s_zero_point", tname);
        if (st == QP_OK) st = add_init(g, base, o->qtype, rank, &n, zeros, (size_t)n, &zv, err);
        free(zeros);
        free(scales);
        scales = NULL;
        if (st != QP_OK) goto done;
        if ((st = add_qdq(g, v, g->values[v].name, sv, zv, o->qtype, axis, &dq, err)) != QP_OK)
            goto done;
        if (stats) stats->n_weight_tensors++;
        for (size_t j = i; j < p->n_weights; j++) {
            if (p->weights[j].value_index != v || p->weights[j].axis != axis) continue;
            int node = p->weights[j].node_index;
            if ((st = qp_graph_set_input(g, node, p->weights[j].input, dq, err)) != QP_OK)
                goto done;
            if (stats) stats->n_weights++;
            count_op(stats, g->nodes[node].op_type, 1);
        }
    }
    if ((st = qp_graph_toposort(g, err)) != QP_OK) goto done;
    if (o->dq_only && (st = qp_qdq_to_dq(m, NULL, err)) != QP_OK) goto done;
    /* Last, so scales are computed in float32 and then stored as the Q/DQ nodes run them. */
    st = qp_qdq_write_precision(m, o, stats, err);
done:
    free(scales);
    qp_placement_free(p);
    if (stats && stats->n_weight_channels)
        stats->weight_clip_mean_ratio /= (double)stats->n_weight_channels;
    return st;
}
