/* Internal structures of sessions and plans (src/runtime only). */
#ifndef QP_RUNTIME_RUNTIME_H
#define QP_RUNTIME_RUNTIME_H

#include <string.h>

#include "ir/ir.h"
#include "kernels/kernel.h"
#include "qplace/session.h"

/* A float16 <-> float32 conversion around a kernel that computes in float32. */
struct rt_conv {
    struct qp_kt *src, *dst;
};

enum rt_step_kind {
    RT_STEP_NODE = 0, /* a kernel */
    RT_STEP_OVERLAY,  /* fake quantization of one consumer input (in[0] -> out[0]) */
    RT_STEP_IF        /* runs one of two branch plans, copies its outputs */
};

/* An If node's branches: a session per branch graph (made at create) and, in a plan, the
 * branch plans (NULL for a branch that cannot be taken, or not planned yet). */
struct rt_if {
    struct qp_session *sub[2]; /* [0]: else_branch, [1]: then_branch */
    struct rt_plan *plan[2];
};

/* An input of a node step that an overlay feeds: the consumer reads `fq` (the overlay's output)
 * or, when the overlay is bypassed, `orig` (the tensor itself). */
struct rt_ovin {
    int input, ov; /* a fused step's constant overlay: `input` indexes its recipe's inputs */
    int is_const;  /* `fq` was computed at plan time (an overlay on a constant) */
    struct qp_kt *orig, *fq;
};

/* A kernel preparation of a node step for one combination of its constant overlays (bit j of
 * `mask`: constant overlay input j is applied, not bypassed). A fused step's variant also has
 * its own bias tensor (`in2`, the step's input 2 while the variant is current: folding makes it
 * from the members' constants), owned by the variant when `own` is set (one block). */
struct rt_variant {
    unsigned mask;
    void *state;
    size_t scratch;
    struct qp_kt *in2;
    void *own;
};

/* What a fused step keeps to prepare itself again for other bypass flags of its members'
 * constant overlays (fuse.c; NULL when those flags are baked into the plan). */
struct rt_fuse_recipe;

enum { RT_LAYOUT_SRC = 1, RT_LAYOUT_RES = 2, RT_LAYOUT_DST = 4 };

/* Constant overlay inputs of one node beyond this many are planned for one combination only
 * (a bypass toggle among them drops the plans). */
#define RT_MAX_CONST_OVIN 8

struct rt_step {
    int kind;
    int node; /* the node; for an overlay step, the consumer node */
    const struct qp_kernel *k;
    void *state;
    int n_in, n_out;
    struct qp_kt **in, **out; /* kernel's views (float32 temps where converted) */
    struct qp_kt **val_out;   /* the graph values the step defines (for observers) */
    int n_conv_in, n_conv_out;
    struct rt_conv *conv_in, *conv_out;
    size_t scratch;
    /* Steps whose outputs this step reads (-1 entries for constants and graph inputs), for
     * partial re-execution. */
    int n_dep;
    int *dep;
    /* RT_STEP_OVERLAY: the overlay (index in the session's list) and the tensor's geometry
     * around the quantization axis. */
    int ov;
    int64_t outer, axis_len, inner;
    /* RT_STEP_IF */
    struct rt_if *rif;
    struct qp_kt *cond;
    /* A fused step (src/runtime/fuse.c): the nodes it computes, in order (NULL: just `node`).
     * val_out are the last node's outputs. */
    int n_nodes;
    int *nodes;
    struct rt_fuse_recipe *fuse; /* a fused step whose constant overlays switch per run */
    /* A oneDNN convolution step: what the layout pass keeps blocked (RT_LAYOUT_*). */
    unsigned char layout;
    /* Node steps reading overlays: which inputs, and (with constant overlays) the kernel
     * preparations made so far; `state` is that of var[cur_var]. */
    int n_ovin;
    struct rt_ovin *ovin;
    int n_var, cur_var;
    struct rt_variant *var;
};

/* The node whose outputs a step's val_out are. */
static inline int rt_step_onode(const struct rt_step *st) {
    return st->nodes ? st->nodes[st->n_nodes - 1] : st->node;
}

/* Node computations a step stands for (qp_session_nodes_executed). */
static inline size_t rt_step_count(const struct rt_step *st) {
    return st->kind == RT_STEP_OVERLAY ? 0 : st->nodes ? (size_t)st->n_nodes : 1;
}

/* One edge overlay, owned by the session (copies of the caller's arrays). */
struct rt_overlay {
    int node, input;
    enum qp_dtype qtype;
    int axis, saturate, bypass;
    size_t n_params;
    float *scale;
    void *zero_point; /* NULL: 0 */
    size_t zp_bytes;
};

/* 1 when a and b have the same dtype and dims. */
static inline int rt_same_shape(const struct qp_kt *a, const struct qp_kt *b) {
    return a->dtype == b->dtype && a->rank == b->rank &&
           memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->rank) == 0;
}

/* The index in ov[0..n) of the overlay on (node, input), or -1. */
static inline int rt_overlay_index(const struct rt_overlay *ov, size_t n, int node, int input) {
    for (size_t i = 0; i < n; i++)
        if (ov[i].node == node && ov[i].input == input) return (int)i;
    return -1;
}

/* Values of the reference run, for partial re-execution. */
struct rt_cache {
    size_t budget; /* 0: caching off */
    int valid;
    size_t n_inputs;
    struct qp_array *inputs; /* owned copies of the reference run's inputs */
    void **val;              /* per graph value: cached bytes (into buf) or NULL */
    unsigned char *lay;      /* per graph value: its plan's `blocked` flag when cached */
    void **home; /* per graph value: its arena bytes while a run points it at its cache slot
                    (a recording run writing it, a partial run restoring it), else NULL */
    unsigned char *buf;
    size_t buf_bytes, used;
    size_t n_ov;
    struct rt_overlay *ov; /* the overlays of the reference run */
    /* 1: inputs, ov, val, lay and buf are another session's (qp_session_borrow_cache); only
     * home is this session's. */
    int borrowed;
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
    size_t n_fused;         /* fused steps (tests) */
    unsigned char *blocked; /* per value: kept in a oneDNN blocked layout (rt_layout_apply) */
    size_t n_blocked;
    int stale; /* made for another observer setting: kept only for the last run's outputs */
    /* Per overlay of the session (n_ov when planned): RT_OV_PARAMS_BAKED when its parameters
     * were applied at plan time (an overlay on a constant), RT_OV_BYPASS_BAKED when its bypass
     * flag was (its consumer was evaluated at plan time, or has too many constant overlays). */
    unsigned char *ov_baked;
    /* Node steps with constant overlay inputs (their preparation depends on the bypass flags). */
    size_t n_cov_steps;
    int *cov_steps;
    /* A branch plan: values bound to the enclosing plans' tensors (data refreshed per run). */
    size_t n_outer;
    int *outer_v;
    struct qp_kt **outer_src;
};

struct qp_session {
    const struct qp_model *model;
    const struct qp_graph *g;
    int n_threads;
    int lane;                         /* qp_session_options.lane */
    int no_fusion;                    /* qp_session_options.no_fusion */
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
    /* Per value index: 1 when the observer reports it; NULL: every computed tensor. */
    unsigned char *observed;
    int observer_any_order; /* qp_session_set_observer_any_order */
    /* If nodes: per node index, the branch sessions (NULL for other nodes). */
    struct rt_if **ifs;
    /* A branch session: the enclosing session, and the plan being built or run there (what
     * outer values bind to). */
    struct qp_session *parent;
    struct rt_plan *parent_plan;
    size_t n_ov;
    struct rt_overlay *ov;
    struct rt_cache cache;
    size_t n_executed;    /* node steps computed by the last run */
    size_t n_plans_built; /* plans rt_plan_build made for this session (tests: no re-plan) */
    /* QP_INT8_AUTO: the rewritten copy the session runs (owned; `model` points at it; also the
     * float16 copy of narrow.h's rt_narrow_emulate), the decisions, and why the integer path
     * fell back (empty when it did not). */
    struct qp_model *int8_model;
    struct rt_int8_report *int8;
    char int8_fallback[QP_ERROR_MSG_SIZE];
    struct rt_profile *prof; /* QP_PROFILE (profile.h); NULL when off */
};

/* Fusion groups of a session's graph for its current overlays and observer (fuse.c). */
struct rt_fuse {
    int n_groups;
    int *order;   /* g->n_topo node indices: topological, each group gathered at its last node */
    int *grp;     /* per node: its group, or -1 */
    int *start;   /* per group: first member in members/role/aux */
    int *size;    /* per group: member count (the Conv first, the tail last) */
    int *members; /* node indices */
    int *role, *aux;
};

/* Finds the groups (none when QP_NO_FUSE is set, oneDNN is off, or the graph has If nodes or
 * is a branch). QP_ERR_NOMEM only. rt_fuse_free is NULL-safe on a zeroed struct. */
enum qp_status rt_fuse_find(const struct qp_session *s, struct rt_fuse *out, struct qp_error *err);
void rt_fuse_free(struct rt_fuse *f);
/* Prepares node `node` with row `kr` (pr as the row's prepare takes it). The first node of a
 * group, a Conv or ConvTranspose on oneDNN, gets a deferred state instead (geometry only):
 * rt_fuse_apply fuses it, or rt_fuse_settle, which the plan calls once every node has its step,
 * prepares it plainly. */
enum qp_status rt_fuse_prepare(const struct rt_fuse *f, int node, const struct qp_kernel *kr,
                               struct qp_kprep *pr);
/* Replaces every deferred state left in p by the row's prepare (updating the step's and the
 * plan's scratch). QP_ERR_NOMEM only. */
enum qp_status rt_fuse_settle(const struct qp_session *s, struct rt_plan *p, struct qp_error *err);
/* 1 when the environment variable QP_NO_FUSE is set (non-empty, not "0"). */
int rt_fuse_disabled(void);
/* 1 when node n's op type is one a Conv chain of the fusion may take (any role of fuse.c's
 * grow, whatever its inputs): what the exact path (runtime/int8.h) must leave to the fusion. */
int rt_fuse_chain_op(const struct qp_node *n);
/* Called after group tail `tail` got its step: replaces the steps of the longest prefix of the
 * group (from `first`, where the group's first node started) that passes every check by one
 * fused step (none: the plan stays as it is). Updates p->n_steps and node_step. QP_ERR_NOMEM
 * only. */
enum qp_status rt_fuse_apply(const struct qp_session *s, struct rt_plan *p, const struct rt_fuse *f,
                             int tail, size_t first, int *node_step, struct qp_error *err);
/* After fusion (layout.c): keeps convolution outputs, and what elementwise steps compute from
 * them, in the primitives' blocked layouts where every reader takes them so (see layout.c),
 * growing a tensor's bytes to the padded size where only convolutions read it. QP_ERR_NOMEM
 * only. */
enum qp_status rt_layout_apply(const struct qp_session *s, struct rt_plan *p, const int *node_step,
                               struct qp_error *err);
/* Prepares fused step `st` (st->fuse set) again with its constant overlays applied per `mask`
 * (same convention as rt_variant), into *var_out (its state, scratch, bias and owned block;
 * the caller applies the step's blocked layouts, rt_layout_state). Allocates. */
enum qp_status rt_fuse_prepare_variant(const struct qp_session *s, const struct rt_plan *p,
                                       const struct rt_step *st, unsigned mask,
                                       struct rt_variant *var_out, struct qp_error *err);
void rt_fuse_recipe_free(struct rt_fuse_recipe *r);
/* Marks a oneDNN convolution state made after planning (a variant of step `st`) with the blocked
 * layouts the layout pass chose for the step (st->layout). */
void rt_layout_state(const struct rt_step *st, void *state);
/* Plan-owned memory (freed with the plan) and a plan temp (NULL when none is left). */
enum qp_status rt_plan_own(struct rt_plan *p, size_t bytes, void **out, struct qp_error *err);
struct qp_kt *rt_plan_temp(struct rt_plan *p);

/* Builds a plan. `inputs` (may be NULL) supplies the values of keyed inputs. On failure
 * *retry_out is 1 when new inputs were found to need value keying (build again), 2 when keyed
 * inputs' values are needed but `inputs` is NULL (plan at run time). */
enum qp_status rt_plan_build(struct qp_session *s, const int *ranks,
                             const int64_t (*dims)[QP_MAX_RANK], const struct qp_array *inputs,
                             struct rt_plan **plan_out, int *retry_out, struct qp_error *err);
void rt_plan_free(struct rt_plan *p, size_t n_inputs);
enum { RT_OV_PARAMS_BAKED = 1, RT_OV_BYPASS_BAKED = 2 };
/* Brings the node steps with constant overlay inputs to the session's current bypass flags,
 * preparing a kernel for a combination not seen before (allocates then). */
enum qp_status rt_plan_sync_overlays(const struct qp_session *s, struct rt_plan *p,
                                     struct qp_error *err);
/* Runs the steps of `p` in order (a branch plan run by an If step). */
enum qp_status rt_plan_run_all(const struct qp_session *s, struct rt_plan *p, struct qp_error *err);
enum qp_status rt_step_run(const struct qp_session *s, struct rt_plan *p, struct rt_step *st,
                           void *scratch, struct qp_error *err);

#endif
