/* qp_placement_trt (qplace/placement.h): the trt policy for library callers, and the policy +
 * rules step it shares with the quantize pipeline. */
#include <stdlib.h>

#include "ir/ir.h"
#include "ir/opset_convert.h"
#include "placement/select.h"
#include "quant/policy_trt.h"
#include "quant/writer.h"

enum qp_status qp_policy_trt_place(struct qp_graph *g, const struct qp_policy_options *po,
                                   const char *rules_path, struct qp_placement *out,
                                   struct qp_error *err) {
    enum qp_status st = qp_policy_trt(g, po, out, NULL, err);
    if (st != QP_OK || !rules_path) return st;
    struct qp_rules *rules = NULL;
    if ((st = qp_rules_load_file(rules_path, &rules, err)) == QP_OK)
        st = qp_rules_apply(rules, g, out, err);
    qp_rules_free(rules);
    return st;
}

/* The four lists of `o` into a new selection. */
static enum qp_status select_of(const struct qp_trt_options *o, struct qp_select **out,
                                struct qp_error *err) {
    struct {
        enum qp_select_list list;
        size_t n;
        const char *const *args;
    } lists[] = {
        {QP_SELECT_OP_TYPES_TO_QUANTIZE, o->n_op_types_to_quantize, o->op_types_to_quantize},
        {QP_SELECT_OP_TYPES_TO_EXCLUDE, o->n_op_types_to_exclude, o->op_types_to_exclude},
        {QP_SELECT_NODES_TO_QUANTIZE, o->n_nodes_to_quantize, o->nodes_to_quantize},
        {QP_SELECT_NODES_TO_EXCLUDE, o->n_nodes_to_exclude, o->nodes_to_exclude},
    };
    _Static_assert(sizeof lists / sizeof lists[0] == QP_SELECT_LIST_COUNT, "a row per list");
    struct qp_select *s = qp_select_create();
    if (!s) return qp_error_set(err, QP_ERR_NOMEM, "placement: out of memory");
    enum qp_status st = QP_OK;
    for (size_t l = 0; st == QP_OK && l < QP_SELECT_LIST_COUNT; l++) {
        if (lists[l].n && !lists[l].args)
            st = qp_error_set(err, QP_ERR_USAGE, "placement: a list of %zu entries is NULL",
                              lists[l].n);
        for (size_t i = 0; st == QP_OK && i < lists[l].n; i++)
            st = qp_select_add(s, lists[l].list, lists[l].args[i], err);
    }
    if (st != QP_OK) {
        qp_select_free(s);
        return st;
    }
    *out = s;
    return QP_OK;
}

enum qp_status qp_placement_trt(struct qp_model *model, const struct qp_trt_options *o,
                                struct qp_placement **out, struct qp_error *err) {
    static const struct qp_trt_options defaults = {0};
    if (!model || !out) return qp_error_set(err, QP_ERR_USAGE, "placement: no model or output");
    if (!o) o = &defaults;
    if ((unsigned)o->quantize_mode >= QP_QUANT_MODE_COUNT)
        return qp_error_set(err, QP_ERR_USAGE, "placement: quantize_mode %d is not int8 or fp8",
                            (int)o->quantize_mode);
    if (qp_model_has_qdq(model))
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "placement: the model already holds QuantizeLinear/DequantizeLinear "
                            "nodes (already quantized); give the float model");
    struct qp_select *sel = NULL;
    struct qp_placement *p = NULL;
    enum qp_status st = select_of(o, &sel, err);
    if (st == QP_OK && qp_model_opset(model, "") < 19) st = qp_model_convert_opset(model, 19, err);
    if (st == QP_OK) st = qp_graph_toposort(model->graph, err);
    if (st == QP_OK && !(p = qp_placement_create()))
        st = qp_error_set(err, QP_ERR_NOMEM, "placement: out of memory");
    struct qp_policy_options po = {
        .mode = o->quantize_mode, .disable_mha_qdq = o->disable_mha_qdq, .select = sel};
    if (st == QP_OK) st = qp_policy_trt_place(model->graph, &po, o->rules_path, p, err);
    if (st == QP_OK) st = qp_placement_validate(p, model->graph, err);
    qp_select_free(sel);
    if (st != QP_OK) {
        qp_placement_free(p);
        return st;
    }
    *out = p;
    return QP_OK;
}
