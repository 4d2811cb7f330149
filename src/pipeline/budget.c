/* The accuracy budget of `qplace quantize`: rank, then exclude until the goal holds (budget.h). */
#include "pipeline/budget.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "pipeline/sensitivity.h"

void qp_quantize_budget_release(struct qp_quantize_budget *b) {
    if (!b) return;
    for (size_t i = 0; b->excluded && i < b->n_excluded; i++)
        free(b->excluded[i]);
    free(b->excluded);
    memset(b, 0, sizeof *b);
}

static enum qp_status check_goal(const struct qp_sens_budget_goal *g, struct qp_error *err) {
    if (isnan(g->max_drift) || isnan(g->min_top1) || !qp_sens_goal_set(g))
        return qp_error_set(err, QP_ERR_USAGE,
                            "quantize: an accuracy budget needs max_output_drift >= 0 or "
                            "min_top1_agreement in (0, 1]");
    if (!isfinite(g->max_drift) || g->min_top1 > 1)
        return qp_error_set(err, QP_ERR_USAGE,
                            "quantize: max_output_drift must be finite and min_top1_agreement "
                            "at most 1");
    return QP_OK;
}

/* The outcome of the exclusions into *out: names, first and last steps. */
static enum qp_status record(const struct qp_sens_result *r, const struct qp_sens_ranking *k,
                             const struct qp_sens_exclusions *x, struct qp_quantize_budget *out,
                             struct qp_error *err) {
    out->met = x->budget_met;
    out->n_ranked = k->n_scored;
    out->before = x->steps[0];
    out->after = x->steps[x->n_budget_groups];
    if (!(out->excluded = calloc(x->n_excluded + 1, sizeof *out->excluded)))
        return qp_error_set(err, QP_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < x->n_excluded; i++) {
        if (!(out->excluded[i] = strdup(r->targets[x->excluded[i]].name)))
            return qp_error_set(err, QP_ERR_NOMEM, "out of memory");
        out->n_excluded = i + 1;
    }
    return QP_OK;
}

enum qp_status qp_quantize_budget_run(
    const struct qp_model *model, const struct qp_placement *pl, struct qp_provider *rank_data,
    struct qp_provider *budget_data, const struct qp_ranges *ranges, enum qp_quant_mode mode,
    int weight_clip_mse, int n_threads, const struct qp_sens_budget_goal *goal,
    struct qp_placement **placement_out, struct qp_quantize_budget *out, struct qp_error *err) {
    memset(out, 0, sizeof *out);
    *placement_out = NULL;
    enum qp_status st = check_goal(goal, err);
    if (st != QP_OK) return st;
    out->goal = *goal;
    double t0 = qp_clock_seconds();
    struct qp_sens_options so;
    qp_sens_options_default(&so);
    so.granularity = QP_SENS_NODE;
    so.qtype = mode == QP_QUANT_FP8 ? QP_DTYPE_FLOAT8E4M3FN : QP_DTYPE_INT8;
    so.weight_clip_mse = weight_clip_mse;
    so.n_threads = n_threads;
    struct qp_sens_result *r = NULL;
    struct qp_sens_ranking k = {0};
    struct qp_sens_exclusions x = {0};
    struct qp_pick_options po;
    qp_pick_options_default(&po);
    struct qp_provider *head = NULL;
    if ((st = qp_provider_head_create(rank_data, QP_BUDGET_RANK_SAMPLES, &head, err)) != QP_OK ||
        (st = qp_sens_score(model, pl, head, ranges, &so, &r, err)) != QP_OK ||
        (st = qp_sens_rank(r, &k, err)) != QP_OK)
        goto done;
    if ((st = qp_sens_exclude(model, pl, budget_data, ranges, &so, r, &k, &po, goal, &x, err)) !=
            QP_OK ||
        (st = qp_sens_exclusions_placement(pl, r, &x, placement_out, err)) != QP_OK)
        goto done;
    st = record(r, &k, &x, out, err);
    out->seconds = qp_clock_seconds() - t0;
done:
    if (st != QP_OK) {
        qp_quantize_budget_release(out);
        if (*placement_out) {
            qp_placement_free(*placement_out);
            *placement_out = NULL;
        }
    }
    qp_sens_exclusions_release(&x);
    qp_sens_ranking_release(&k);
    qp_sens_result_free(r);
    qp_provider_free(head);
    return st;
}
