/* Internal structures of sessions and plans (src/runtime only). */
#ifndef QP_RUNTIME_RUNTIME_H
#define QP_RUNTIME_RUNTIME_H

#include "ir/ir.h"
#include "kernels/kernel.h"
#include "qplace/session.h"

/* A float16 <-> float32 conversion around a kernel that computes in float32. */
struct rt_conv {
    struct qp_kt *src, *dst;
};

struct rt_step {
    int node;
    const struct qp_kernel *k;
    void *state;
    int n_in, n_out;
    struct qp_kt **in, **out; /* kernel's views (float32 temps where converted) */
    struct qp_kt **val_out;   /* the graph values the step defines (for observers) */
    int n_conv_in, n_conv_out;
    struct rt_conv *conv_in, *conv_out;
    size_t scratch;
};

struct rt_plan {
    const void **in_key; /* value-keyed inputs: the bytes this plan was built for (owned) */
    size_t *in_key_bytes;
    int *in_rank;
    int64_t (*in_dims)[QP_MAX_RANK];
    struct qp_kt *vals; /* one per graph value */
    size_t n_temps, cap_temps;
    struct qp_kt *temps;
    size_t n_steps;
    struct rt_step *steps;
    void *arena;
    size_t arena_bytes;
    void *scratch;
    size_t scratch_bytes;
    size_t n_owned, cap_owned;
    void **owned;
};

struct qp_session {
    const struct qp_model *model;
    const struct qp_graph *g;
    int n_threads;
    const struct qp_kernel **kernels; /* per node index; NULL for dead nodes */
    int *opsets;                      /* per node index */
    size_t n_inputs, n_outputs;
    int *inputs, *outputs;  /* value indices */
    struct qp_shape *fixed; /* per input: shape from create (rank -1: from the model) */
    /* Per input: 1 when its *value* feeds a shape computation (a Reshape's shape fed by the
     * caller), so plans are keyed by its bytes too. Found while planning. */
    unsigned char *keyed;
    size_t n_plans, cap_plans;
    struct rt_plan **plans;
    struct rt_plan *last;
    qp_observer_fn observer;
    void *observer_user;
};

/* Builds a plan. `inputs` (may be NULL) supplies the values of keyed inputs. On failure
 * *retry_out is 1 when new inputs were found to need value keying (build again), 2 when keyed
 * inputs' values are needed but `inputs` is NULL (plan at run time). */
enum qp_status rt_plan_build(struct qp_session *s, const int *ranks,
                             const int64_t (*dims)[QP_MAX_RANK], const struct qp_array *inputs,
                             struct rt_plan **plan_out, int *retry_out, struct qp_error *err);
void rt_plan_free(struct rt_plan *p, size_t n_inputs);
enum qp_status rt_step_run(const struct qp_session *s, struct rt_plan *p, struct rt_step *st,
                           void *scratch, struct qp_error *err);

#endif
