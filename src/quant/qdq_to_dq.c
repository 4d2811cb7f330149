/* Weight QuantizeLinear folding (qdq_to_dq.h). */
#include "quant/qdq_to_dq.h"

#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "placement/placement.h"
#include "qmath/qparams.h"

static const char *label(const struct qp_node *n) {
    return n->name ? n->name : "?";
}

/* 1 when every reader of value `v` is input 0 of a live DequantizeLinear (and there is one). */
static int only_dq_reads(const struct qp_graph *g, int v) {
    const struct qp_value *val = &g->values[v];
    if (val->n_uses == 0 || val->is_graph_output) return 0;
    for (size_t u = 0; u < val->n_uses; u++) {
        const struct qp_node *c = &g->nodes[val->uses[u].node];
        if (c->dead || strcmp(c->op_type, "DequantizeLinear") != 0 || val->uses[u].input != 0)
            return 0;
    }
    return 1;
}

/* Folds Q node `qi`. */
static enum qp_status fold_one(struct qp_graph *g, int qi, struct qp_error *err) {
    struct qp_model *m = g->model;
    const struct qp_node *q = &g->nodes[qi];
    int w = q->inputs[0], qo = q->outputs[0];
    int sv = q->n_inputs > 1 ? q->inputs[1] : -1, zv = q->n_inputs > 2 ? q->inputs[2] : -1;
    const struct qp_tensor *wt = qp_placement_weight_tensor(g, w);
    const struct qp_tensor *st = sv >= 0 ? qp_placement_weight_tensor(g, sv) : NULL;
    const struct qp_tensor *zt = zv >= 0 ? qp_placement_weight_tensor(g, zv) : NULL;
    if (!st || st->dtype != QP_DTYPE_FLOAT || !st->data || st->numel == 0)
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "qdq-to-dq: node '%s' (QuantizeLinear): the scale is not a float32 "
                            "constant",
                            label(q));
    if (zv >= 0 && !zt)
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "qdq-to-dq: node '%s' (QuantizeLinear): the zero point is not a "
                            "constant",
                            label(q));
    const struct qp_attr *ab = qp_node_attr(q, "block_size");
    if (ab && ab->i != 0)
        return qp_error_set(err, QP_ERR_UNSUPPORTED,
                            "qdq-to-dq: node '%s' (QuantizeLinear): blocked quantization is not "
                            "supported",
                            label(q));
    enum qp_dtype qtype = zt ? zt->dtype : QP_DTYPE_UINT8;
    const struct qp_attr *aod = qp_node_attr(q, "output_dtype");
    if (!zt && aod && aod->i) qtype = (enum qp_dtype)aod->i;
    if (!qp_qtype_supported(qtype) || qtype == QP_DTYPE_INT32)
        return qp_error_set(err, QP_ERR_UNSUPPORTED,
                            "qdq-to-dq: node '%s' (QuantizeLinear): quantized type %s is not "
                            "supported",
                            label(q), qp_dtype_name(qtype));
    if (zt && (zt->numel != st->numel || !zt->data))
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "qdq-to-dq: node '%s' (QuantizeLinear): zero point has %llu values, "
                            "scale %llu",
                            label(q), (unsigned long long)zt->numel, (unsigned long long)st->numel);
    struct qp_qspec spec = {.qtype = qtype,
                            .saturate = 1,
                            .outer = 1,
                            .axis_len = 1,
                            .inner = (int64_t)wt->numel,
                            .n_params = 1};
    const struct qp_attr *asat = qp_node_attr(q, "saturate");
    if (asat) spec.saturate = (int)asat->i;
    if (st->numel > 1) {
        const struct qp_attr *aa = qp_node_attr(q, "axis");
        int64_t axis = aa ? aa->i : 1;
        if (axis < 0) axis += wt->rank;
        if (axis < 0 || axis >= wt->rank || wt->dims[axis] != (int64_t)st->numel)
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "qdq-to-dq: node '%s' (QuantizeLinear): %llu scales do not match "
                                "axis %lld of weight '%s'",
                                label(q), (unsigned long long)st->numel, (long long)axis,
                                g->values[w].name);
        spec.outer = 1;
        for (int64_t d = 0; d < axis; d++)
            spec.outer *= wt->dims[d];
        spec.axis_len = wt->dims[axis];
        spec.inner = 1;
        for (int64_t d = axis + 1; d < wt->rank; d++)
            spec.inner *= wt->dims[d];
        spec.n_params = spec.axis_len;
    }
    enum qp_status s = QP_OK;
    int ok = 1;
    size_t qbytes = qp_dtype_nbytes(qtype, wt->numel, &ok);
    size_t fbytes = qp_dtype_nbytes(QP_DTYPE_FLOAT, wt->numel, &ok);
    size_t sbytes = qp_dtype_nbytes(QP_DTYPE_FLOAT, st->numel, &ok);
    if (!ok || wt->nbytes != fbytes || st->nbytes != sbytes)
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "qdq-to-dq: node '%s' (QuantizeLinear): weight or scale data has the "
                            "wrong size",
                            label(q));
    float *x = malloc(fbytes ? fbytes : 1), *scale = malloc(sbytes);
    void *qbuf = calloc(qbytes ? qbytes : 1, 1);
    if (!x || !scale || !qbuf) {
        s = qp_error_set(err, QP_ERR_NOMEM, "qdq-to-dq: out of memory");
        goto fail;
    }
    memcpy(x, wt->data, fbytes);
    memcpy(scale, st->data, sbytes);
    spec.scale = scale;
    spec.zero_point = zt ? zt->data : NULL;
    if ((s = qp_qspec_check(&spec, err)) != QP_OK) {
        qp_error_prefix(err, "qdq-to-dq: node '%s' (QuantizeLinear)", label(q));
        goto fail;
    }
    qp_quantize_f32(&spec, x, qbuf, 0, (int64_t)wt->numel);
    free(x);
    free(scale);
    x = scale = NULL;
    if ((s = qp_model_own(m, qbuf, err)) != QP_OK) return s;

    struct qp_tensor nt = *wt;
    nt.dtype = qtype;
    nt.data = qbuf;
    nt.nbytes = qbytes;
    nt.origin = NULL;
    nt.external_location = NULL;
    nt.external_offset = nt.external_length = 0;
    struct qp_value *wv = &g->values[w];
    int target = -1;
    if (wv->initializer >= 0 && wv->n_uses == 1 && !wv->is_graph_output && !wv->is_graph_input) {
        /* Only this Q reads the float weight: it becomes the quantized weight, same name. */
        nt.name = wv->name;
        g->inits[wv->initializer] = nt;
        wv->dtype = qtype;
        target = w;
    } else {
        size_t bl = strlen(wv->name);
        char *base = malloc(bl + sizeof QP_QUANTIZED_SUFFIX);
        if (!base) return qp_error_set(err, QP_ERR_NOMEM, "qdq-to-dq: out of memory");
        memcpy(base, wv->name, bl);
        memcpy(base + bl, QP_QUANTIZED_SUFFIX, sizeof QP_QUANTIZED_SUFFIX);
        nt.name = qp_graph_unique_value_name(g, base);
        free(base);
        if (!nt.name) return qp_error_set(err, QP_ERR_NOMEM, "qdq-to-dq: out of memory");
        if ((s = qp_graph_add_initializer(g, &nt, &target, err)) != QP_OK) return s;
    }
    /* Re-point every DQ reading the Q output, then drop the Q. */
    while (g->values[qo].n_uses > 0) {
        struct qp_use u = g->values[qo].uses[0];
        if ((s = qp_graph_set_input(g, u.node, u.input, target, err)) != QP_OK) return s;
    }
    if ((s = qp_graph_remove_node(g, qi, err)) != QP_OK) return s;
    int prod = g->values[w].producer;
    if (prod >= 0 && g->values[w].n_uses == 0 && !g->values[w].is_graph_output &&
        strcmp(g->nodes[prod].op_type, "Constant") == 0)
        s = qp_graph_remove_node(g, prod, err);
    return s;
fail:
    free(x);
    free(scale);
    free(qbuf);
    return s;
}

enum qp_status qp_qdq_to_dq(struct qp_model *m, size_t *n_converted_out, struct qp_error *err) {
    if (!m || !m->graph) return qp_error_set(err, QP_ERR_USAGE, "qdq-to-dq: NULL model");
    struct qp_graph *g = m->graph;
    size_t n = 0;
    enum qp_status st;
    for (size_t i = 0; i < g->n_nodes; i++) {
        const struct qp_node *q = &g->nodes[i];
        if (q->dead || strcmp(q->op_type, "QuantizeLinear") != 0) continue;
        if (q->n_inputs < 2 || q->inputs[0] < 0 || q->n_outputs < 1 || q->outputs[0] < 0) continue;
        const struct qp_tensor *wt = qp_placement_weight_tensor(g, q->inputs[0]);
        if (!wt || wt->dtype != QP_DTYPE_FLOAT || !wt->data) continue;
        if (!only_dq_reads(g, q->outputs[0])) continue;
        if ((st = fold_one(g, (int)i, err)) != QP_OK) return st;
        n++;
    }
    if (n_converted_out) *n_converted_out = n;
    return qp_graph_toposort(g, err);
}
