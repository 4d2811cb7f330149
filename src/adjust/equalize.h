/*
 * Equalization folded into the weights (docs/quantize.md, "Equalization"): training-free
 * rescalings of float initializers that leave the float model's function unchanged (up to float
 * rounding) and its graph untouched (same nodes, same edges, so TensorRT's fusions stay), but
 * make its tensors easier to quantize.
 *
 * - Cross-layer equalization (CLE, data-free): Conv1 -> [BatchNormalization] -> [act] -> Conv2,
 *   where act is positively homogeneous (Relu, LeakyRelu, PRelu, Identity, Clip with min 0 and
 *   no max) and Conv1's output (and act's) has no other reader. Per channel c,
 *   s_c = sqrt(r1_c / r2_c), with r1_c the absmax of Conv1's output-channel c weights (times
 *   |BN scale_c / sqrt(var_c + eps)| when a BN sits between) and r2_c the absmax of the Conv2
 *   weights reading input channel c (groups and depthwise included). Conv1's row c and bias (or
 *   the BN's scale and bias) are divided by s_c, Conv2's input channel c multiplied by s_c: both
 *   ranges become sqrt(r1_c r2_c). Passes over all pairs repeat until the scales settle (chains
 *   Conv -> Conv -> Conv converge over passes). A pair with an activation that does not commute
 *   with a positive per-channel scale (Clip with a max, HardSwish, Sigmoid, Gelu, ...) is skipped
 *   and reported with the op and the reason.
 * - SmoothQuant: LayerNormalization (or the decomposed ReduceMean/Sub/Pow/Sqrt/Div -> Mul(gamma)
 *   [-> Add(beta)] form) whose output feeds only MatMul / Gemm nodes with constant weights. Per
 *   channel j, s_j = max|X_j|^alpha / max|W_j|^(1 - alpha), with X the LN output observed on the
 *   calibration data and W_j the largest |weight| of row j over all consumers; gamma_j and beta_j
 *   are divided by s_j, every consumer's row j multiplied by s_j. An LN whose output feeds
 *   anything else (a residual Add) is skipped with the reason.
 *
 * Two steps, so that one plan can be applied to several copies of a model (quantize's float
 * reference and the model it writes):
 *
 *     struct qp_equalize_options o;
 *     qp_equalize_options_default(&o);
 *     o.methods = QP_EQUALIZE_ALL;
 *     struct qp_equalize_plan *plan = NULL;
 *     struct qp_equalize_report *rep = NULL;
 *     if (qp_equalize_plan(mf, data, &o, &plan, &rep, &err) != QP_OK) goto fail;
 *     if (qp_equalize_apply(plan, mf, &err) != QP_OK || qp_equalize_apply(plan, mq, &err) != QP_OK)
 *         goto fail;
 *     ... rep->n_cle_pairs, rep->skips[i].reason ...
 *     qp_equalize_plan_free(plan);
 *     qp_equalize_report_free(rep);
 */
#ifndef QP_ADJUST_EQUALIZE_H
#define QP_ADJUST_EQUALIZE_H

#include <stddef.h>

#include "qplace/calib.h"
#include "qplace/model.h"
#include "qplace/quantize.h"
#include "qplace/status.h"

struct qp_equalize_options {
    unsigned methods; /* enum qp_equalization bits: QP_EQUALIZE_CLE | QP_EQUALIZE_SMOOTHQUANT */
    double alpha;     /* SmoothQuant's migration strength, in [0, 1]; default 0.5 */
    int cle_passes;   /* most CLE passes over all pairs (>= 1); default 8 */
    int n_threads;    /* SmoothQuant's observing session; 0: all cores */
};

void qp_equalize_options_default(struct qp_equalize_options *o);

/* One pair left alone, and why. */
struct qp_equalize_skip {
    const char *method; /* "cle" or "smoothquant" (static) */
    char node[128];     /* the first node of the pair (Conv1, the LayerNormalization / Div) */
    char reason[256];   /* "'hswish' (HardSwish) between does not commute with ..." */
};

struct qp_equalize_report {
    size_t n_cle_pairs, n_cle_skipped;
    size_t n_smoothquant_pairs, n_smoothquant_skipped;
    int cle_passes;         /* passes CLE ran */
    double cle_last_change; /* largest |log s_c| of the last pass (0: converged) */
    size_t n_skips;
    struct qp_equalize_skip *skips; /* every skip, in graph order, CLE first */
};

struct qp_equalize_plan;
struct qp_graph;

/* Finds the pairs of `model` (borrowed for the call; a sorted top-level graph, not modified) and
 * computes their scales. `data` (borrowed; may be NULL when SmoothQuant is not asked for) is read
 * once from its start for SmoothQuant's activation maxima; it is reset before and after. On
 * success *plan_out and *report_out (may be NULL) own new objects. Returns QP_ERR_USAGE (NULL
 * arguments, alpha outside [0, 1], no data with SmoothQuant, unknown method bits), the statuses
 * of the engine and the data (QP_ERR_BAD_INPUT, QP_ERR_UNSUPPORTED), QP_ERR_NOMEM. */
enum qp_status qp_equalize_plan(const struct qp_model *model, struct qp_provider *data,
                                const struct qp_equalize_options *o,
                                struct qp_equalize_plan **plan_out,
                                struct qp_equalize_report **report_out, struct qp_error *err);

/* Rescales the initializers (and Constant values) of `m`, a model with the graph the plan was
 * made on (nodes found by name; another opset of the same model is fine): new bytes owned by
 * `m`, no node added or removed. A weight also read by a node outside its pair is first copied
 * to a new initializer for the pair's node (the other readers keep the original). Returns
 * QP_ERR_BAD_INPUT naming the node when `m` does not hold what the plan expects (a missing node,
 * another weight shape), QP_ERR_NOMEM; on failure `m` may be partly rescaled. */
enum qp_status qp_equalize_apply(const struct qp_equalize_plan *plan, struct qp_model *m,
                                 struct qp_error *err);

/* Marks in changed[v] (g->n_values bytes, all set here) the values of `g` (a sorted graph of the
 * model the plan was made on, or of a copy with the same node names) whose float values the plan
 * changes: the outputs of the nodes whose constants it divides (Conv1 or the BatchNormalization
 * of a CLE pair, SmoothQuant's gamma and beta) and whatever those feed, up to the nodes whose
 * weights it multiplies back (Conv2, the MatMul / Gemm readers): their outputs compute the same
 * function as before, so they and everything after them differ only by float rounding (as do
 * the outputs of Shape and Size, which read dims only).
 * quantize calibrates only the marked tensors again after equalization. Returns
 * QP_ERR_BAD_INPUT naming a plan node `g` lacks, QP_ERR_USAGE for NULL arguments, QP_ERR_NOMEM. */
enum qp_status qp_equalize_changed(const struct qp_equalize_plan *plan, const struct qp_graph *g,
                                   unsigned char *changed, struct qp_error *err);

/* NULL-safe. */
void qp_equalize_plan_free(struct qp_equalize_plan *p);
void qp_equalize_report_free(struct qp_equalize_report *r);

#endif
