/* Sessions: kernel resolution at creation, the plan cache, runs, outputs and observers. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/size.h"
#include "qmath/qparams.h"
#include "kernels/int8_conv.h"
#include "kernels/isa.h"
#include "qplace/model.h"
#include "runtime/int8.h"
#include "runtime/narrow.h"
#include "runtime/profile.h"
#include "runtime/runtime.h"

static const char *dom_name(const char *d) {
    return d && d[0] ? d : "ai.onnx";
}

/* The dtype a node's kernel row is keyed on, when the model declares it (for messages). */
static const char *declared_dtype(const struct qp_graph *g, const struct qp_node *n) {
    if (n->n_inputs > 0 && n->inputs[0] >= 0) {
        enum qp_dtype dt = g->values[n->inputs[0]].dtype;
        if (dt != QP_DTYPE_UNDEFINED) return qp_dtype_name(dt);
    }
    return "unknown";
}

static enum qp_status resolve(struct qp_session *s, struct qp_error *err) {
    const struct qp_graph *g = s->g;
    for (size_t k = 0; k < g->n_topo; k++) {
        int ni = g->topo[k];
        const struct qp_node *n = &g->nodes[ni];
        int64_t opset = qp_model_opset(s->model, n->domain ? n->domain : "");
        if (n->domain && strcmp(n->domain, QP_INT8_DOMAIN) == 0) opset = 1; /* runtime/int8.c */
        if (opset <= 0 && (!n->domain || !n->domain[0]))
            opset = qp_model_opset(s->model, "ai.onnx");
        if (opset <= 0)
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "session: node '%s' (%s): the model imports no opset for domain "
                                "'%s'",
                                n->name ? n->name : "", n->op_type, dom_name(n->domain));
        if (opset > 10000) opset = 10000;
        const struct qp_kernel *kr = qp_kernel_find(n->domain, n->op_type, (int)opset);
        if (!kr) {
            int known = qp_kernel_has_op(n->domain, n->op_type);
            return qp_error_set(err, QP_ERR_UNSUPPORTED,
                                "session: node '%s' (%s): %s for domain '%s' opset %lld (input "
                                "dtype %s)",
                                n->name ? n->name : "", n->op_type,
                                known ? "no kernel for this opset version" : "unsupported op",
                                dom_name(n->domain), (long long)opset, declared_dtype(g, n));
        }
        s->kernels[ni] = kr;
        s->opsets[ni] = (int)opset;
    }
    return QP_OK;
}

static void free_ifs(struct qp_session *s) {
    if (!s->ifs) return;
    for (size_t i = 0; i < s->g->n_nodes; i++) {
        if (!s->ifs[i]) continue;
        qp_session_free(s->ifs[i]->sub[0]);
        qp_session_free(s->ifs[i]->sub[1]);
        free(s->ifs[i]);
    }
    free(s->ifs);
    s->ifs = NULL;
}

static enum qp_status setup_ifs(struct qp_session *s, int depth, struct qp_error *err);

/* A session for one If branch: no inputs; its outer values bind to the enclosing plan. */
static enum qp_status sub_create(struct qp_session *parent, const struct qp_node *n,
                                 const struct qp_graph *g, int depth, struct qp_session **out,
                                 struct qp_error *err) {
    *out = NULL;
    if (g->n_inputs > 0)
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "session: node '%s' (If): branch '%s' declares %zu inputs, If "
                            "branches take none",
                            n->name ? n->name : "", g->name ? g->name : "", g->n_inputs);
    struct qp_session *s = calloc(1, sizeof *s);
    if (!s) return qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
    s->model = parent->model;
    s->g = g;
    s->parent = parent;
    s->n_threads = parent->n_threads;
    s->lane = parent->lane;
    size_t nn = g->n_nodes ? g->n_nodes : 1;
    s->kernels = calloc(nn, sizeof *s->kernels);
    s->opsets = calloc(nn, sizeof *s->opsets);
    s->inputs = calloc(1, sizeof *s->inputs);
    s->outputs = calloc(g->n_outputs + 1, sizeof *s->outputs);
    s->fixed = calloc(1, sizeof *s->fixed);
    s->keyed = calloc(1, 1);
    enum qp_status st = QP_OK;
    if (!s->kernels || !s->opsets || !s->inputs || !s->outputs || !s->fixed || !s->keyed) {
        st = qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
        goto fail;
    }
    for (size_t i = 0; i < g->n_outputs; i++) {
        const struct qp_value *val = &g->values[g->outputs[i]];
        if (val->kind != QP_VALUE_TENSOR) {
            st = qp_error_set(err, QP_ERR_UNSUPPORTED,
                              "session: node '%s' (If): branch output '%s' is not a tensor",
                              n->name ? n->name : "", val->name);
            goto fail;
        }
        s->outputs[s->n_outputs++] = g->outputs[i];
    }
    if ((st = resolve(s, err)) || (st = setup_ifs(s, depth + 1, err))) goto fail;
    *out = s;
    return QP_OK;
fail:
    qp_session_free(s);
    return st;
}

/* Branch sessions for every If node of s->g (nested ones too, up to a depth limit). */
static enum qp_status setup_ifs(struct qp_session *s, int depth, struct qp_error *err) {
    const struct qp_graph *g = s->g;
    for (size_t k = 0; k < g->n_topo; k++) {
        int ni = g->topo[k];
        const struct qp_node *n = &g->nodes[ni];
        if (strcmp(n->op_type, "If") != 0 || (n->domain && n->domain[0])) continue;
        if (depth >= 64)
            return qp_error_set(err, QP_ERR_UNSUPPORTED,
                                "session: node '%s' (If): subgraphs nested more than 64 deep",
                                n->name ? n->name : "");
        if (!s->ifs) {
            s->ifs = calloc(g->n_nodes, sizeof *s->ifs);
            if (!s->ifs) return qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
        }
        struct rt_if *rif = calloc(1, sizeof *rif);
        if (!rif) return qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
        s->ifs[ni] = rif;
        static const char *const names[2] = {"else_branch", "then_branch"};
        for (int b = 0; b < 2; b++) {
            const struct qp_attr *a = qp_node_attr(n, names[b]);
            if (!a || a->type != QP_ATTR_GRAPH || !a->g)
                return qp_error_set(err, QP_ERR_BAD_INPUT,
                                    "session: node '%s' (If): attribute '%s' is missing or not "
                                    "a graph",
                                    n->name ? n->name : "", names[b]);
            enum qp_status st = sub_create(s, n, a->g, depth, &rif->sub[b], err);
            if (st != QP_OK) return st;
        }
    }
    return QP_OK;
}

/* Shapes for a plan: from the caller when given, else the fixed (create-time) or model shape.
 * *complete = 0 when some dimension is still unknown. */
static enum qp_status input_shapes(const struct qp_session *s, size_t n_shapes,
                                   const struct qp_shape *shapes, int *ranks,
                                   int64_t (*dims)[QP_MAX_RANK], int *complete,
                                   struct qp_error *err) {
    *complete = 1;
    for (size_t j = 0; j < n_shapes; j++) {
        if (!shapes[j].name || qp_session_input_index(s, shapes[j].name) < 0)
            return qp_error_set(err, QP_ERR_BAD_INPUT, "session: no graph input named '%s'",
                                shapes[j].name ? shapes[j].name : "(null)");
    }
    for (size_t i = 0; i < s->n_inputs; i++) {
        const struct qp_value *v = &s->g->values[s->inputs[i]];
        const struct qp_shape *given = NULL;
        for (size_t j = 0; j < n_shapes; j++)
            if (strcmp(shapes[j].name, v->name) == 0) given = &shapes[j];
        if (!given && s->fixed[i].rank >= 0) given = &s->fixed[i];
        if (given) {
            if (given->rank < 0 || given->rank > QP_MAX_RANK)
                return qp_error_set(err, QP_ERR_BAD_INPUT, "session: input '%s': rank %d", v->name,
                                    given->rank);
            if (v->rank >= 0 && v->rank != given->rank)
                return qp_error_set(err, QP_ERR_BAD_INPUT,
                                    "session: input '%s' has rank %d in the model, given %d",
                                    v->name, v->rank, given->rank);
            ranks[i] = given->rank;
            for (int d = 0; d < given->rank; d++) {
                int64_t x = given->dims[d];
                if (x < 0)
                    return qp_error_set(err, QP_ERR_BAD_INPUT,
                                        "session: input '%s': dimension %d is negative", v->name,
                                        d);
                if (v->rank >= 0 && v->dims[d].value >= 0 && v->dims[d].value != x)
                    return qp_error_set(err, QP_ERR_BAD_INPUT,
                                        "session: input '%s': dimension %d is %lld in the model, "
                                        "given %lld",
                                        v->name, d, (long long)v->dims[d].value, (long long)x);
                dims[i][d] = x;
            }
            continue;
        }
        if (v->rank < 0 || v->rank > QP_MAX_RANK) {
            *complete = 0;
            ranks[i] = -1;
            continue;
        }
        ranks[i] = v->rank;
        for (int d = 0; d < v->rank; d++) {
            dims[i][d] = v->dims[d].value;
            if (dims[i][d] < 0) *complete = 0;
        }
    }
    return QP_OK;
}

static struct rt_plan *find_plan(const struct qp_session *s, const int *ranks,
                                 const int64_t (*dims)[QP_MAX_RANK],
                                 const struct qp_array *inputs) {
    for (size_t k = 0; k < s->n_plans; k++) {
        struct rt_plan *p = s->plans[k];
        size_t i;
        if (p->stale) continue;
        for (i = 0; i < s->n_inputs; i++) {
            if (p->in_rank[i] != ranks[i]) break;
            if (memcmp(p->in_dims[i], dims[i], sizeof(int64_t) * (size_t)ranks[i])) break;
            if (s->keyed[i]) {
                if (!inputs || !p->in_key[i] || p->in_key_bytes[i] != inputs[i].nbytes) break;
                if (p->in_key_bytes[i] && memcmp(p->in_key[i], inputs[i].data, p->in_key_bytes[i]))
                    break;
            }
        }
        if (i == s->n_inputs) return p;
    }
    return NULL;
}

/* Plans kept per session: value-keyed inputs could otherwise grow the cache without bound. */
#define MAX_PLANS 16

/* *out is NULL (and QP_OK returned) when the plan needs input values and `inputs` is NULL. */
static enum qp_status get_plan(struct qp_session *s, const int *ranks,
                               const int64_t (*dims)[QP_MAX_RANK], const struct qp_array *inputs,
                               struct rt_plan **out, struct qp_error *err) {
    *out = NULL;
    struct rt_plan *p = find_plan(s, ranks, dims, inputs);
    if (p) {
        *out = p;
        return QP_OK;
    }
    for (size_t k = 0; k < s->n_plans;) { /* stale plans nobody reads any more */
        if (s->plans[k]->stale && s->plans[k] != s->last) {
            rt_plan_free(s->plans[k], s->n_inputs);
            memmove(&s->plans[k], &s->plans[k + 1], (s->n_plans - k - 1) * sizeof *s->plans);
            s->n_plans--;
        } else {
            k++;
        }
    }
    if (s->n_plans >= MAX_PLANS) {
        /* Drop the oldest plan that is not the last run's. */
        size_t k = s->plans[0] == s->last ? 1 : 0;
        rt_plan_free(s->plans[k], s->n_inputs);
        memmove(&s->plans[k], &s->plans[k + 1], (s->n_plans - k - 1) * sizeof *s->plans);
        s->n_plans--;
    }
    if (s->n_plans == s->cap_plans) {
        size_t cap = s->cap_plans ? s->cap_plans * 2 : 4;
        struct rt_plan **np = qp_realloc_n(s->plans, cap, sizeof *np);
        if (!np) return qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
        s->plans = np;
        s->cap_plans = cap;
    }
    enum qp_status st;
    for (;;) {
        int retry = 0;
        struct qp_error e2 = {0};
        st = rt_plan_build(s, ranks, dims, inputs, &p, &retry, &e2);
        if (st == QP_OK) break;
        if (retry == 1) continue;
        if (retry == 2) return QP_OK; /* planned at the first run, when values are known */
        if (err) *err = e2;
        return st;
    }
    s->plans[s->n_plans++] = p;
    *out = p;
    return QP_OK;
}

static enum qp_status create_plain(const struct qp_model *model,
                                   const struct qp_session_options *opts, size_t n_shapes,
                                   const struct qp_shape *shapes, struct qp_session **session_out,
                                   struct qp_error *err);

/* QP_INT8_AUTO: a session on the rewritten copy, or (when that cannot be planned) on the model
 * as written, saying why. */
static enum qp_status create_int8(const struct qp_model *model,
                                  const struct qp_session_options *opts, size_t n_shapes,
                                  const struct qp_shape *shapes, struct qp_session **session_out,
                                  struct qp_error *err) {
    struct qp_session_options o = *opts;
    o.int8 = QP_INT8_OFF;
    struct qp_model *clone = NULL;
    struct qp_error e2 = {0};
    struct rt_int8_report *rep = calloc(1, sizeof *rep);
    if (!rep) return qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
    enum qp_status st = qp_model_clone_shared(model, &clone, &e2);
    if (!st) st = rt_int8_rewrite(qp_model_graph(clone), rep, &e2);
    struct qp_session *s = NULL;
    if (!st) st = create_plain(clone, &o, n_shapes, shapes, &s, &e2);
    if (!st) {
        s->int8_model = clone;
        s->int8 = rep;
        *session_out = s;
        return QP_OK;
    }
    rt_int8_report_free(rep);
    free(rep);
    qp_model_free(clone);
    if (st == QP_ERR_NOMEM) {
        if (err) *err = e2;
        return st;
    }
    st = qp_session_create(model, &o, n_shapes, shapes, session_out, err);
    if (st) return st;
    snprintf((*session_out)->int8_fallback, sizeof(*session_out)->int8_fallback, "%s",
             e2.msg[0] ? e2.msg : "the integer path failed");
    qp_log(QP_LOG_WARN, "session: the integer path is off for this model: %s",
           (*session_out)->int8_fallback);
    return QP_OK;
}

size_t qp_session_int8_decisions(const struct qp_session *s, const struct qp_int8_decision **out,
                                 const char **fallback_out) {
    if (fallback_out) *fallback_out = s ? s->int8_fallback : "";
    if (out) *out = s && s->int8 ? s->int8->d : NULL;
    return s && s->int8 ? s->int8->n : 0;
}

size_t qp_session_int8_widened(const struct qp_session *s, const char **why_out) {
    if (why_out) *why_out = s && s->int8 ? s->int8->widen_why : NULL;
    return s && s->int8 ? s->int8->n_widened : 0;
}

const char *qp_session_isa(void) {
    return qp_isa_describe();
}

/* The session on `model` as it is. */
static enum qp_status create_plain(const struct qp_model *model,
                                   const struct qp_session_options *opts, size_t n_shapes,
                                   const struct qp_shape *shapes, struct qp_session **session_out,
                                   struct qp_error *err) {
    enum qp_status st = QP_OK;
    int *ranks = NULL;
    int64_t(*dims)[QP_MAX_RANK] = NULL;
    if (!model || !session_out || (n_shapes && !shapes))
        return qp_error_set(err, QP_ERR_USAGE, "session: NULL argument");
    *session_out = NULL;
    const struct qp_graph *g = qp_model_graph(model);
    if (!g) return qp_error_set(err, QP_ERR_USAGE, "session: model has no graph");
    struct qp_session *s = calloc(1, sizeof *s);
    if (!s) return qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
    s->model = model;
    s->g = g;
    s->prof = rt_profile_new();
    qp_session_set_threads(s, opts ? opts->n_threads : 0);
    s->no_fusion = opts ? opts->no_fusion : 0;
    s->lane = opts ? opts->lane : 0;
    if (s->lane < 0 || s->lane >= QP_SESSION_MAX_LANES) {
        int lane = s->lane;
        free(s);
        return qp_error_set(err, QP_ERR_USAGE, "session: lane %d is not in 0..%d", lane,
                            QP_SESSION_MAX_LANES - 1);
    }
    size_t nn = g->n_nodes ? g->n_nodes : 1;
    s->kernels = calloc(nn, sizeof *s->kernels);
    s->opsets = calloc(nn, sizeof *s->opsets);
    s->inputs = calloc(g->n_inputs + 1, sizeof *s->inputs);
    s->outputs = calloc(g->n_outputs + 1, sizeof *s->outputs);
    s->fixed = calloc(g->n_inputs + 1, sizeof *s->fixed);
    s->keyed = calloc(g->n_inputs + 1, 1);
    ranks = calloc(g->n_inputs + 1, sizeof *ranks);
    dims = calloc(g->n_inputs + 1, sizeof *dims);
    if (!s->kernels || !s->opsets || !s->inputs || !s->outputs || !s->fixed || !s->keyed ||
        !ranks || !dims) {
        st = qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
        goto fail;
    }
    if (g->n_topo == 0 && g->n_nodes > 0) {
        st = qp_error_set(err, QP_ERR_USAGE, "session: graph is not topologically sorted");
        goto fail;
    }
    for (size_t i = 0; i < g->n_inputs; i++) {
        int v = g->inputs[i];
        const struct qp_value *val = &g->values[v];
        if (val->initializer >= 0) continue; /* an initializer listed as input: a constant */
        if (val->kind != QP_VALUE_TENSOR) {
            st = qp_error_set(err, QP_ERR_UNSUPPORTED,
                              "session: input '%s' is not a tensor (sequences, maps and "
                              "optionals are not supported)",
                              val->name);
            goto fail;
        }
        if (val->dtype == QP_DTYPE_UNDEFINED || val->dtype == QP_DTYPE_STRING ||
            qp_dtype_traits(val->dtype)->bits < 8) {
            st = qp_error_set(err, QP_ERR_UNSUPPORTED, "session: input '%s' has dtype %s",
                              val->name, qp_dtype_name(val->dtype));
            goto fail;
        }
        s->fixed[s->n_inputs].rank = -1;
        s->inputs[s->n_inputs++] = v;
    }
    for (size_t i = 0; i < g->n_outputs; i++) {
        const struct qp_value *val = &g->values[g->outputs[i]];
        if (val->kind != QP_VALUE_TENSOR) {
            st = qp_error_set(err, QP_ERR_UNSUPPORTED, "session: output '%s' is not a tensor",
                              val->name);
            goto fail;
        }
        s->outputs[s->n_outputs++] = g->outputs[i];
    }
    if ((st = resolve(s, err)) || (st = setup_ifs(s, 0, err))) goto fail;
    int complete;
    if ((st = input_shapes(s, n_shapes, shapes, ranks, dims, &complete, err))) goto fail;
    for (size_t i = 0; i < s->n_inputs; i++)
        for (size_t j = 0; j < n_shapes; j++)
            if (strcmp(shapes[j].name, g->values[s->inputs[i]].name) == 0) {
                s->fixed[i] = shapes[j];
                s->fixed[i].name = g->values[s->inputs[i]].name;
            }
    if (complete && !(opts && opts->lazy_plan)) {
        struct rt_plan *p;
        if ((st = get_plan(s, ranks, (const int64_t(*)[QP_MAX_RANK])dims, NULL, &p, err)))
            goto fail;
    }
    free(ranks);
    free(dims);
    *session_out = s;
    return QP_OK;
fail:
    free(ranks);
    free(dims);
    qp_session_free(s);
    return st;
}

static void free_overlays(struct rt_overlay *ov, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(ov[i].scale);
        free(ov[i].zero_point);
    }
    free(ov);
}

/* Drops the reference inputs and overlays (keeps the buffers). A borrowed reference is let go
 * of: its arrays are the lender's. */
static void cache_clear(struct rt_cache *c) {
    if (c->borrowed) {
        c->inputs = NULL;
        c->n_inputs = 0;
        c->ov = NULL;
        c->n_ov = 0;
        c->val = NULL;
        c->lay = NULL;
        c->buf = NULL;
        c->buf_bytes = c->used = 0;
        c->valid = 0;
        c->borrowed = 0;
        return;
    }
    for (size_t i = 0; i < c->n_inputs; i++)
        qp_array_release(&c->inputs[i]);
    free(c->inputs);
    c->inputs = NULL;
    c->n_inputs = 0;
    free_overlays(c->ov, c->n_ov);
    c->ov = NULL;
    c->n_ov = 0;
    c->valid = 0;
}

/* A graph rewrite that keeps the model's outputs (runtime/narrow.h, runtime/int8.h): sets *why
 * and changes nothing when it declines; *n_rounds: float16 rounding nodes added. */
typedef enum qp_status (*rewrite_fn)(struct qp_graph *g, const char **why, size_t *n_rounds,
                                     struct qp_error *err);

/* A session (options o) on a copy of `model` that `rw` rewrote (logged at debug: `done` and
 * the float16 rounding nodes added); when the copy declines or cannot be planned, logs why after
 * `off` and sets *declined with nothing made: the caller then runs the model as written. */
static enum qp_status
create_rewritten(const struct qp_model *model, rewrite_fn rw, const char *done, const char *off,
                 const struct qp_session_options *o, size_t n_shapes, const struct qp_shape *shapes,
                 struct qp_session **session_out, int *declined, struct qp_error *err) {
    struct qp_model *clone = NULL;
    struct qp_error e2 = {0};
    const char *why = NULL;
    size_t n_rounds = 0;
    *declined = 0;
    enum qp_status st = qp_model_clone_shared(model, &clone, &e2);
    if (!st) st = rw(qp_model_graph(clone), &why, &n_rounds, &e2);
    if (!st && !why) st = create_plain(clone, o, n_shapes, shapes, session_out, &e2);
    if (!st && !why) {
        qp_log(QP_LOG_DEBUG, "session: %s, %zu rounding nodes", done, n_rounds);
        (*session_out)->int8_model = clone;
        return QP_OK;
    }
    qp_model_free(clone);
    if (st == QP_ERR_NOMEM) {
        if (err) *err = e2;
        return st;
    }
    qp_log(QP_LOG_DEBUG, "session: %s: %s", off, why ? why : e2.msg);
    *declined = 1;
    return QP_OK;
}

/* A float16 model (QP_INT8_OFF, or QP_INT8_AUTO without Q/DQ): a session on a copy whose
 * float16 values are held as float32 and rounded (runtime/narrow.h), or on the model as
 * written when the copy declines or cannot be planned. */
static enum qp_status create_narrow(const struct qp_model *model,
                                    const struct qp_session_options *opts, size_t n_shapes,
                                    const struct qp_shape *shapes, struct qp_session **session_out,
                                    struct qp_error *err) {
    int declined;
    enum qp_status st = create_rewritten(model, rt_narrow_emulate, "float16 held as float32",
                                         "float16 tensors kept as float16", opts, n_shapes, shapes,
                                         session_out, &declined, err);
    if (st || !declined) return st;
    return create_plain(model, opts, n_shapes, shapes, session_out, err);
}

/* QP_INT8_EXACT: a session on a copy rewritten with the oracle's very arithmetic
 * (runtime/int8.h rt_int8_exact_rewrite), or the QP_INT8_OFF session when the copy declines
 * or cannot be planned. */
static enum qp_status create_exact(const struct qp_model *model,
                                   const struct qp_session_options *opts, size_t n_shapes,
                                   const struct qp_shape *shapes, struct qp_session **session_out,
                                   struct qp_error *err) {
    struct qp_session_options o = *opts;
    o.int8 = QP_INT8_OFF;
    int declined;
    enum qp_status st = create_rewritten(model, rt_int8_exact_rewrite, "exact path",
                                         "the exact path is off for this model", &o, n_shapes,
                                         shapes, session_out, &declined, err);
    if (st || !declined) return st;
    return qp_session_create(model, &o, n_shapes, shapes, session_out, err);
}

enum qp_status qp_session_create(const struct qp_model *model,
                                 const struct qp_session_options *opts, size_t n_shapes,
                                 const struct qp_shape *shapes, struct qp_session **session_out,
                                 struct qp_error *err) {
    const struct qp_graph *g = model ? qp_model_graph(model) : NULL;
    if (g && session_out && opts && opts->int8 == QP_INT8_EXACT)
        return create_exact(model, opts, n_shapes, shapes, session_out, err);
    if (g && session_out && opts && opts->int8 == QP_INT8_AUTO && rt_int8_has_qdq(g))
        return create_int8(model, opts, n_shapes, shapes, session_out, err);
    if (g && session_out && rt_narrow_emulates(g))
        return create_narrow(model, opts, n_shapes, shapes, session_out, err);
    return create_plain(model, opts, n_shapes, shapes, session_out, err);
}

void qp_session_free(struct qp_session *s) {
    if (!s) return;
    for (size_t k = 0; k < s->n_plans; k++)
        rt_plan_free(s->plans[k], s->n_inputs);
    free(s->plans);
    free(s->kernels);
    free(s->opsets);
    free(s->inputs);
    free(s->outputs);
    free(s->fixed);
    free(s->keyed);
    free(s->observed);
    free_ifs(s);
    free_overlays(s->ov, s->n_ov);
    cache_clear(&s->cache);
    free(s->cache.val);
    free(s->cache.lay);
    free(s->cache.home);
    free(s->cache.buf);
    rt_profile_print_free(s->prof);
    struct qp_model *m8 = s->int8_model;
    if (s->int8) {
        rt_int8_report_free(s->int8);
        free(s->int8);
    }
    free(s);
    qp_model_free(m8);
}

size_t qp_session_n_inputs(const struct qp_session *s) {
    return s ? s->n_inputs : 0;
}
size_t qp_session_n_outputs(const struct qp_session *s) {
    return s ? s->n_outputs : 0;
}

const char *qp_session_input_name(const struct qp_session *s, size_t i) {
    return s && i < s->n_inputs ? s->g->values[s->inputs[i]].name : NULL;
}

enum qp_dtype qp_session_input_dtype(const struct qp_session *s, size_t i) {
    return s && i < s->n_inputs ? s->g->values[s->inputs[i]].dtype : QP_DTYPE_UNDEFINED;
}

const char *qp_session_output_name(const struct qp_session *s, size_t i) {
    return s && i < s->n_outputs ? s->g->values[s->outputs[i]].name : NULL;
}

int qp_session_input_index(const struct qp_session *s, const char *name) {
    if (!s || !name) return -1;
    for (size_t i = 0; i < s->n_inputs; i++)
        if (strcmp(s->g->values[s->inputs[i]].name, name) == 0) return (int)i;
    return -1;
}

void qp_session_set_threads(struct qp_session *s, int n_threads) {
    if (!s) return;
    if (n_threads <= 0) n_threads = omp_get_num_procs();
    if (n_threads < 1) n_threads = 1;
    if (n_threads > 1024) n_threads = 1024;
    s->n_threads = n_threads;
    for (size_t i = 0; s->ifs && i < s->g->n_nodes; i++)
        if (s->ifs[i]) {
            qp_session_set_threads(s->ifs[i]->sub[0], n_threads);
            qp_session_set_threads(s->ifs[i]->sub[1], n_threads);
        }
}

/* The next run plans again: fusion decisions depend on what is observed. The last run's plan
 * stays (stale, never reused) so that its outputs can still be read; get_plan frees it later. */
static void drop_plans(struct qp_session *s) {
    size_t j = 0;
    for (size_t k = 0; k < s->n_plans; k++) {
        if (s->plans[k] == s->last) {
            s->last->stale = 1;
            s->plans[j++] = s->last;
        } else {
            rt_plan_free(s->plans[k], s->n_inputs);
        }
    }
    s->n_plans = j;
}

void qp_session_set_observer(struct qp_session *s, qp_observer_fn fn, void *user) {
    if (!s) return;
    if ((s->observer != NULL) != (fn != NULL)) drop_plans(s);
    s->observer = fn;
    s->observer_user = fn ? user : NULL;
}

void qp_session_set_observer_any_order(struct qp_session *s, int on) {
    if (!s || s->observer_any_order == !!on) return;
    if (s->observer) drop_plans(s);
    s->observer_any_order = !!on;
}

enum qp_status qp_session_set_observed(struct qp_session *s, size_t n, const char *const *names,
                                       struct qp_error *err) {
    if (!s || (n && !names)) return qp_error_set(err, QP_ERR_USAGE, "session: NULL argument");
    if (!n) {
        if (s->observed && s->observer) drop_plans(s);
        free(s->observed);
        s->observed = NULL;
        return QP_OK;
    }
    unsigned char *set = calloc(s->g->n_values ? s->g->n_values : 1, 1);
    if (!set) return qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
    for (size_t i = 0; i < n; i++) {
        int v = names[i] ? qp_graph_find_value(s->g, names[i]) : -1;
        if (v < 0 || s->g->values[v].producer < 0) {
            free(set);
            return qp_error_set(err, QP_ERR_USAGE, "session: observed tensor '%s' %s",
                                names[i] ? names[i] : "(null)",
                                v < 0 ? "is not in the graph"
                                      : "is a graph input or initializer, not computed by a run");
        }
        set[v] = 1;
    }
    size_t nv = s->g->n_values ? s->g->n_values : 1;
    if (s->observer && (!s->observed || memcmp(s->observed, set, nv) != 0)) drop_plans(s);
    free(s->observed);
    s->observed = set;
    return QP_OK;
}

size_t qp_session_arena_bytes(const struct qp_session *s) {
    if (!s) return 0;
    if (s->last) return s->last->arena_bytes;
    return s->n_plans ? s->plans[s->n_plans - 1]->arena_bytes : 0;
}

enum qp_status qp_session_value_info(const struct qp_session *s, const char *name,
                                     enum qp_dtype *dtype_out, int *computed_out,
                                     struct qp_error *err) {
    if (!s || !name || !dtype_out || !computed_out)
        return qp_error_set(err, QP_ERR_USAGE, "session: NULL argument");
    const struct rt_plan *p = s->last ? s->last : s->n_plans ? s->plans[s->n_plans - 1] : NULL;
    if (!p)
        return qp_error_set(err, QP_ERR_USAGE,
                            "session: no plan yet (give every input a shape, or run first)");
    int v = qp_graph_find_value(s->g, name);
    if (v < 0) return qp_error_set(err, QP_ERR_USAGE, "session: the graph has no value '%s'", name);
    const struct qp_kt *t = &p->vals[v];
    *dtype_out = t->dtype;
    *computed_out = t->dtype != QP_DTYPE_UNDEFINED && !t->is_const;
    return QP_OK;
}

enum qp_status qp_session_plan(struct qp_session *s, size_t n_shapes, const struct qp_shape *shapes,
                               struct qp_error *err) {
    if (!s || (n_shapes && !shapes))
        return qp_error_set(err, QP_ERR_USAGE, "session: NULL argument");
    int ranks[64];
    int64_t(*dims)[QP_MAX_RANK] = calloc(s->n_inputs + 1, sizeof *dims);
    int *rk = s->n_inputs <= 64 ? ranks : calloc(s->n_inputs, sizeof *rk);
    enum qp_status st = QP_OK;
    if (!dims || !rk) {
        st = qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
        goto done;
    }
    int complete;
    if ((st = input_shapes(s, n_shapes, shapes, rk, dims, &complete, err))) goto done;
    if (!complete) {
        st = qp_error_set(err, QP_ERR_USAGE,
                          "session: some input dimensions are still unknown; give every "
                          "dynamic input a shape");
        goto done;
    }
    struct rt_plan *p;
    st = get_plan(s, rk, (const int64_t(*)[QP_MAX_RANK])dims, NULL, &p, err);
done:
    free(dims);
    if (rk != ranks) free(rk);
    return st;
}

/* Hands value v (tensor t, made by node `node`) to the observer. */
static enum qp_status report(struct qp_session *s, int v, const char *node, const struct qp_kt *t,
                             struct qp_error *err) {
    struct qp_array a;
    memset(&a, 0, sizeof a);
    a.dtype = t->dtype;
    a.rank = t->rank;
    memcpy(a.dims, t->dims, sizeof(int64_t) * (size_t)t->rank);
    a.data = t->data;
    a.nbytes = t->nbytes;
    if (s->observer(s->g->values[v].name, node, &a, s->observer_user))
        return qp_error_set(err, QP_ERR_USAGE,
                            "session: the observer stopped the run at tensor '%s'",
                            s->g->values[v].name);
    return QP_OK;
}

static enum qp_status observe(struct qp_session *s, const struct rt_step *stp,
                              struct qp_error *err) {
    const struct qp_node *n = &s->g->nodes[rt_step_onode(stp)];
    enum qp_status st = QP_OK;
    for (int i = 0; i < stp->n_out && st == QP_OK; i++) {
        const struct qp_kt *t = stp->val_out[i];
        if (t && (!s->observed || s->observed[n->outputs[i]]))
            st = report(s, n->outputs[i], n->name, t, err);
    }
    return st;
}

/* The observed tensors the plan computed once when it was built (a Cast of a shape value: no
 * step makes them), reported after a run's steps, so an observer that named them gets their
 * values as it gets every other tensor's. Only for an explicit set (qp_session_set_observed):
 * "every tensor" means what the steps compute. */
static enum qp_status observe_plan_time(struct qp_session *s, const struct rt_plan *p,
                                        struct qp_error *err) {
    enum qp_status st = QP_OK;
    for (size_t v = 0; s->observed && v < s->g->n_values && st == QP_OK; v++) {
        const struct qp_kt *t = &p->vals[v];
        int prod = s->g->values[v].producer;
        if (s->observed[v] && t->is_const && t->data && prod >= 0)
            st = report(s, (int)v, s->g->nodes[prod].name, t, err);
    }
    return st;
}

/* Validates inputs, finds (or builds) the plan and binds the inputs. */
static enum qp_status run_setup(struct qp_session *s, size_t n_inputs,
                                const struct qp_array *inputs, struct rt_plan **plan_out,
                                struct qp_error *err) {
    *plan_out = NULL;
    if (n_inputs != s->n_inputs)
        return qp_error_set(err, QP_ERR_USAGE, "session: %zu inputs given, the model takes %zu",
                            n_inputs, s->n_inputs);
    int ranks_buf[16] = {0};
    int64_t dims_buf[16][QP_MAX_RANK];
    int *ranks = ranks_buf;
    int64_t(*dims)[QP_MAX_RANK] = dims_buf;
    enum qp_status st = QP_OK;
    if (n_inputs > 16) {
        ranks = calloc(n_inputs, sizeof *ranks);
        dims = calloc(n_inputs, sizeof *dims);
        if (!ranks || !dims) {
            st = qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
            goto done;
        }
    }
    for (size_t i = 0; i < n_inputs; i++) {
        const struct qp_value *v = &s->g->values[s->inputs[i]];
        const struct qp_array *a = &inputs[i];
        if (a->dtype != v->dtype) {
            st = qp_error_set(err, QP_ERR_USAGE, "session: input '%s' is %s, the model expects %s",
                              v->name, qp_dtype_name(a->dtype), qp_dtype_name(v->dtype));
            goto done;
        }
        if (a->rank < 0 || a->rank > QP_MAX_RANK) {
            st = qp_error_set(err, QP_ERR_USAGE, "session: input '%s' has rank %d", v->name,
                              a->rank);
            goto done;
        }
        ranks[i] = a->rank;
        memcpy(dims[i], a->dims, sizeof dims[i]);
        int ok;
        uint64_t numel = qp_array_numel(a, &ok);
        size_t nb = ok ? qp_dtype_nbytes(a->dtype, numel, &ok) : 0;
        if (!ok || nb != a->nbytes || (nb && !a->data)) {
            st = qp_error_set(err, QP_ERR_USAGE,
                              "session: input '%s' has %zu bytes for its shape "
                              "(expected %zu)",
                              v->name, a->nbytes, nb);
            goto done;
        }
    }
    /* A caller shape must agree with the model (checked by input_shapes). */
    {
        struct qp_shape tmp_shapes[1];
        (void)tmp_shapes;
        for (size_t i = 0; i < n_inputs; i++) {
            const struct qp_value *v = &s->g->values[s->inputs[i]];
            if (v->rank >= 0 && v->rank != ranks[i]) {
                st = qp_error_set(err, QP_ERR_BAD_INPUT,
                                  "session: input '%s' has rank %d, the model expects %d", v->name,
                                  ranks[i], v->rank);
                goto done;
            }
            for (int d = 0; v->rank >= 0 && d < v->rank; d++)
                if (v->dims[d].value >= 0 && v->dims[d].value != dims[i][d]) {
                    st = qp_error_set(err, QP_ERR_BAD_INPUT,
                                      "session: input '%s' dimension %d is %lld, the model "
                                      "expects %lld",
                                      v->name, d, (long long)dims[i][d],
                                      (long long)v->dims[d].value);
                    goto done;
                }
        }
    }
    struct rt_plan *p;
    if ((st = get_plan(s, ranks, (const int64_t(*)[QP_MAX_RANK])dims, inputs, &p, err))) goto done;
    if (!p) {
        st = qp_error_set(err, QP_ERR_INTERNAL, "session: no plan");
        goto done;
    }
    for (size_t i = 0; i < n_inputs; i++) {
        static unsigned char empty[64];
        if (!s->keyed[i]) p->vals[s->inputs[i]].data = inputs[i].nbytes ? inputs[i].data : empty;
    }
    if ((st = rt_plan_sync_overlays(s, p, err))) goto done;
    *plan_out = p;
done:
    if (ranks != ranks_buf) free(ranks);
    if (dims != dims_buf) free(dims);
    return st;
}

#define CACHE_ALIGN 64

/* Steps whose outputs a partial run may read from the cache while the overlays keep their
 * edges: those read by a step that some overlay change can make recompute while the producer
 * stays (a step's "edge set" is the overlays at or upstream of it, its own constant overlays
 * included; a reader with an edge set other than its producer's), and producers of graph
 * outputs. *rel_out is NULL (no preference)
 * without overlays or when the bit sets would be too large. */
static enum qp_status cache_relevant(const struct qp_session *s, const struct rt_plan *p,
                                     unsigned char **rel_out, struct qp_error *err) {
    *rel_out = NULL;
    size_t words = (s->n_ov + 63) / 64, ns = p->n_steps;
    if (!s->n_ov || !ns || words > ((size_t)1 << 22) / ns) return QP_OK;
    uint64_t *up = calloc(ns * words, sizeof *up);
    unsigned char *rel = calloc(ns, 1);
    if (!up || !rel) {
        free(up);
        free(rel);
        return qp_error_set(err, QP_ERR_NOMEM, "session: out of memory (cache)");
    }
    for (size_t k = 0; k < ns; k++) {
        const struct rt_step *stp = &p->steps[k];
        uint64_t *a = up + k * words;
        for (int i = 0; i < stp->n_dep; i++)
            if (stp->dep[i] >= 0)
                for (size_t w = 0; w < words; w++)
                    a[w] |= up[(size_t)stp->dep[i] * words + w];
        if (stp->kind == RT_STEP_OVERLAY) a[stp->ov / 64] |= (uint64_t)1 << (stp->ov % 64);
        /* An overlay on a constant (a weight) has no step: its consumer toggles it itself, so
         * what the consumer reads may have to come from the cache. */
        for (int j = 0; j < stp->n_ovin; j++)
            if (stp->ovin[j].is_const)
                a[stp->ovin[j].ov / 64] |= (uint64_t)1 << (stp->ovin[j].ov % 64);
    }
    for (size_t k = 0; k < ns; k++) {
        const struct rt_step *stp = &p->steps[k];
        for (int i = 0; i < stp->n_dep; i++) {
            int d = stp->dep[i];
            if (d >= 0 && memcmp(up + k * words, up + (size_t)d * words, words * sizeof *up))
                rel[d] = 1;
        }
    }
    /* An overlay step's output is not cached: what it reads is. */
    for (size_t k = 0; k < ns; k++)
        if (p->steps[k].kind == RT_STEP_OVERLAY && rel[k])
            for (int i = 0; i < p->steps[k].n_dep; i++)
                if (p->steps[k].dep[i] >= 0) rel[p->steps[k].dep[i]] = 1;
    for (size_t i = 0; i < s->n_outputs; i++) {
        int pn = s->g->values[s->outputs[i]].producer;
        for (size_t k = 0; pn >= 0 && k < ns; k++)
            if (p->steps[k].kind != RT_STEP_OVERLAY && rt_step_onode(&p->steps[k]) == pn)
                rel[k] = 1;
    }
    free(up);
    *rel_out = rel;
    return QP_OK;
}

/* 1 when graph value v is one of the session's outputs. */
static int is_session_output(const struct qp_session *s, int v) {
    for (size_t i = 0; i < s->n_outputs; i++)
        if (s->outputs[i] == v) return 1;
    return 0;
}

/* Starts recording a reference run: copies of the inputs and overlays, room for the values. */
static enum qp_status cache_begin(struct qp_session *s, const struct rt_plan *p, size_t n_inputs,
                                  const struct qp_array *inputs, struct qp_error *err) {
    struct rt_cache *c = &s->cache;
    cache_clear(c);
    if (!c->lay) c->lay = calloc(s->g->n_values ? s->g->n_values : 1, 1);
    if (!c->home) c->home = calloc(s->g->n_values ? s->g->n_values : 1, sizeof *c->home);
    if (!c->lay || !c->home)
        return qp_error_set(err, QP_ERR_NOMEM, "session: out of memory (cache)");
    if (!c->val) {
        c->val = calloc(s->g->n_values ? s->g->n_values : 1, sizeof *c->val);
        if (!c->val) return qp_error_set(err, QP_ERR_NOMEM, "session: out of memory (cache)");
    } else {
        memset(c->val, 0, (s->g->n_values ? s->g->n_values : 1) * sizeof *c->val);
    }
    c->inputs = calloc(n_inputs + 1, sizeof *c->inputs);
    if (!c->inputs) return qp_error_set(err, QP_ERR_NOMEM, "session: out of memory (cache)");
    for (size_t i = 0; i < n_inputs; i++) {
        enum qp_status st =
            qp_array_alloc(&c->inputs[i], inputs[i].dtype, inputs[i].rank, inputs[i].dims, err);
        if (st != QP_OK) return st;
        c->n_inputs = i + 1;
        if (inputs[i].nbytes) memcpy(c->inputs[i].data, inputs[i].data, inputs[i].nbytes);
    }
    if (s->n_ov) {
        c->ov = calloc(s->n_ov, sizeof *c->ov);
        if (!c->ov) return qp_error_set(err, QP_ERR_NOMEM, "session: out of memory (cache)");
        for (size_t i = 0; i < s->n_ov; i++) {
            struct rt_overlay *d = &c->ov[i];
            *d = s->ov[i];
            d->scale = qp_malloc_n(d->n_params, sizeof *d->scale);
            d->zero_point = d->zp_bytes ? malloc(d->zp_bytes) : NULL;
            c->n_ov = i + 1;
            if (!d->scale || (d->zp_bytes && !d->zero_point))
                return qp_error_set(err, QP_ERR_NOMEM, "session: out of memory (cache)");
            memcpy(d->scale, s->ov[i].scale, d->n_params * sizeof *d->scale);
            if (d->zp_bytes) memcpy(d->zero_point, s->ov[i].zero_point, d->zp_bytes);
        }
    }
    /* Which step outputs to keep: first those a partial run can read (see cache_relevant),
     * latest first, then the others, latest first, while the budget lasts. Late tensors first
     * because they are the cheap ones per byte in convolutional networks (small maps) and a
     * gap early in the graph costs only the targets there, which recompute most of it anyway. */
    unsigned char *rel = NULL;
    enum qp_status st = cache_relevant(s, p, &rel, err);
    if (st != QP_OK) return st;
    size_t need = 0;
    for (int pass = 0; pass < 2; pass++)
        for (size_t k = p->n_steps; k-- > 0;) {
            const struct rt_step *stp = &p->steps[k];
            if (stp->kind == RT_STEP_OVERLAY || (rel && rel[k] != (pass == 0))) continue;
            if (!rel && pass == 1) continue;
            size_t b = 0;
            for (int i = 0; i < stp->n_out; i++)
                if (stp->val_out[i])
                    b += (stp->val_out[i]->nbytes + CACHE_ALIGN - 1) / CACHE_ALIGN * CACHE_ALIGN;
            if (b > c->budget - need) continue;
            const struct qp_node *n = &s->g->nodes[rt_step_onode(stp)];
            for (int i = 0; i < stp->n_out; i++)
                if (stp->val_out[i]) {
                    /* offset + 1 until the buffer exists */
                    c->val[n->outputs[i]] = (void *)(uintptr_t)(need + 1);
                    need += (stp->val_out[i]->nbytes + CACHE_ALIGN - 1) / CACHE_ALIGN * CACHE_ALIGN;
                }
        }
    free(rel);
    if (need > c->buf_bytes || !c->buf) {
        free(c->buf);
        c->buf_bytes = 0;
        /* Aligned as the arena: partial runs read cached values where they lie. */
        c->buf = aligned_alloc(CACHE_ALIGN, need > CACHE_ALIGN ? need : CACHE_ALIGN);
        if (!c->buf) {
            memset(c->val, 0, (s->g->n_values ? s->g->n_values : 1) * sizeof *c->val);
            return qp_error_set(err, QP_ERR_NOMEM, "session: cannot allocate a %zu-byte cache",
                                need);
        }
        c->buf_bytes = need > CACHE_ALIGN ? need : CACHE_ALIGN;
    }
    for (size_t k = 0; k < p->n_steps; k++) {
        const struct rt_step *stp = &p->steps[k];
        if (stp->kind == RT_STEP_OVERLAY) continue;
        const struct qp_node *n = &s->g->nodes[rt_step_onode(stp)];
        for (int i = 0; i < stp->n_out; i++)
            if (stp->val_out[i] && c->val[n->outputs[i]])
                c->val[n->outputs[i]] = c->buf + ((uintptr_t)c->val[n->outputs[i]] - 1);
    }
    c->used = need;
    return QP_OK;
}

/* Copies a step's values into their cache slots (cache_begin chose them), with their layout. */
static void cache_store(struct qp_session *s, const struct rt_plan *p, const struct rt_step *stp) {
    struct rt_cache *c = &s->cache;
    if (stp->kind == RT_STEP_OVERLAY) return;
    const struct qp_node *n = &s->g->nodes[rt_step_onode(stp)];
    for (int i = 0; i < stp->n_out; i++) {
        const struct qp_kt *t = stp->val_out[i];
        if (!t || !c->val[n->outputs[i]]) continue;
        if (t->nbytes && t->data != c->val[n->outputs[i]]) /* else written there (cache_aim) */
            memcpy(c->val[n->outputs[i]], t->data, t->nbytes);
        c->lay[n->outputs[i]] = p->blocked[n->outputs[i]];
    }
}

/* Points tensor t of value v at v's cache slot, keeping its arena bytes in c->home[v]. */
static void aim_at_slot(struct rt_cache *c, struct qp_kt *t, int v) {
    c->home[v] = t->data;
    t->data = c->val[v];
}

/* Points the tensors of the values cache_begin gave a slot at that slot, so the steps of a
 * recording run write them there instead of copying them after (cache_store); graph outputs
 * stay in the arena (qp_session_output reads them after the run). With `on` 0 it points them
 * back at their arena bytes, where the next run's plan expects them (If branches read the
 * enclosing tensors' data at run time, so they follow either way). */
static void cache_aim(struct qp_session *s, struct rt_plan *p, int on) {
    struct rt_cache *c = &s->cache;
    for (size_t k = 0; k < p->n_steps; k++) {
        const struct rt_step *stp = &p->steps[k];
        if (stp->kind == RT_STEP_OVERLAY) continue;
        const struct qp_node *n = &s->g->nodes[rt_step_onode(stp)];
        for (int i = 0; i < stp->n_out; i++) {
            struct qp_kt *t = stp->val_out[i];
            int v = n->outputs[i];
            if (!t || !t->nbytes || v < 0 || !c->val[v] || is_session_output(s, v)) continue;
            if (on) {
                aim_at_slot(c, t, v);
            } else if (c->home[v]) {
                t->data = c->home[v];
                c->home[v] = NULL;
            }
        }
    }
}

/* "1x3x48x320" (or "-" for no tensor) into buf. */
static void profile_dims(const struct qp_kt *t, char *buf, size_t n) {
    size_t at = (size_t)snprintf(buf, n, t ? "" : "-");
    for (int i = 0; t && i < t->rank && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, "%s%lld", i ? "x" : "", (long long)t->dims[i]);
}

/* The profile row of a step: its (last) node's op type, "+N" for the other nodes of a fused
 * step, "overlay" for an edge overlay; per node (QP_PROFILE=node) also the node's name and the
 * step's first input and output shapes. */
static void profile_step(const struct qp_session *s, const struct rt_step *stp, double dt) {
    char label[128];
    const struct qp_node *nd = &s->g->nodes[stp->nodes ? stp->nodes[0] : stp->node];
    if (stp->kind == RT_STEP_OVERLAY)
        snprintf(label, sizeof label, "overlay");
    else if (stp->nodes)
        snprintf(label, sizeof label, "%s+%d", nd->op_type, stp->n_nodes - 1);
    else
        snprintf(label, sizeof label, "%s", nd->op_type);
    if (rt_profile_by_node(s->prof)) {
        char in[48], out[48];
        profile_dims(stp->n_in && stp->in ? stp->in[0] : NULL, in, sizeof in);
        profile_dims(stp->n_out && stp->out ? stp->out[0] : NULL, out, sizeof out);
        size_t at = strlen(label);
        snprintf(label + at, sizeof label - at, " %s %s->%s", nd->name ? nd->name : "", in, out);
    }
    rt_profile_add(s->prof, label, dt);
}

enum qp_status qp_session_run(struct qp_session *s, size_t n_inputs, const struct qp_array *inputs,
                              struct qp_error *err) {
    if (!s || (n_inputs && !inputs))
        return qp_error_set(err, QP_ERR_USAGE, "session: NULL argument");
    s->last = NULL;
    s->n_executed = 0;
    struct rt_plan *p;
    enum qp_status st = run_setup(s, n_inputs, inputs, &p, err);
    if (st != QP_OK) return st;
    int record = s->cache.budget > 0;
    if (record && (st = cache_begin(s, p, n_inputs, inputs, err))) {
        cache_clear(&s->cache);
        return st;
    }
    if (record) cache_aim(s, p, 1);
    for (size_t k = 0; k < p->n_steps; k++) {
        struct rt_step *stp = &p->steps[k];
        double t0 = s->prof ? qp_clock_seconds() : 0;
        if ((st = rt_step_run(s, p, stp, p->scratch, err))) goto fail;
        if (s->prof) profile_step(s, stp, qp_clock_seconds() - t0);
        s->n_executed += rt_step_count(stp);
        if (record) cache_store(s, p, stp);
        if (s->observer && stp->kind != RT_STEP_OVERLAY && (st = observe(s, stp, err))) goto fail;
    }
    if (s->observer && (st = observe_plan_time(s, p, err))) goto fail;
    s->last = p;
    rt_profile_run(s->prof);
    if (record) {
        cache_aim(s, p, 0);
        s->cache.valid = 1;
    }
    return QP_OK;
fail:
    if (record) {
        cache_aim(s, p, 0);
        cache_clear(&s->cache);
    }
    return st;
}

/* Same parameters (the bypass flag aside). */
static int overlay_params_equal(const struct rt_overlay *a, const struct rt_overlay *b) {
    return a->qtype == b->qtype && a->axis == b->axis && a->saturate == b->saturate &&
           a->n_params == b->n_params && a->zp_bytes == b->zp_bytes &&
           memcmp(a->scale, b->scale, a->n_params * sizeof *a->scale) == 0 &&
           (!a->zp_bytes || memcmp(a->zero_point, b->zero_point, a->zp_bytes) == 0);
}

/* Whether the two overlays make the consumer read the same values. */
static int overlay_equal(const struct rt_overlay *a, const struct rt_overlay *b) {
    if (a->bypass || b->bypass) return a->bypass && b->bypass;
    return overlay_params_equal(a, b);
}

enum { MODE_SKIP = 0, MODE_RESTORE, MODE_COMPUTE };

enum qp_status qp_session_run_partial(struct qp_session *s, struct qp_error *err) {
    if (!s) return qp_error_set(err, QP_ERR_USAGE, "session: NULL argument");
    s->last = NULL;
    s->n_executed = 0;
    struct rt_cache *c = &s->cache;
    if (!c->valid)
        return qp_error_set(err, QP_ERR_USAGE,
                            "session: no reference run to re-execute from (set a cache budget "
                            "and run first)");
    const struct qp_graph *g = s->g;
    struct rt_plan *p;
    enum qp_status st = run_setup(s, c->n_inputs, c->inputs, &p, err);
    if (st != QP_OK) return st;
    size_t nn = g->n_nodes ? g->n_nodes : 1;
    unsigned char *dirty = calloc(nn, 1), *mode = calloc(p->n_steps + 1, 1);
    unsigned char *need = calloc(p->n_steps + 1, 1);
    int *stack = qp_malloc_n(nn, sizeof *stack), *nstep = qp_malloc_n(nn, sizeof *nstep);
    if (!dirty || !mode || !need || !stack || !nstep) {
        st = qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
        goto done;
    }
    /* Nodes reading a changed edge, and everything downstream of them. */
    size_t sp = 0;
    for (size_t i = 0; i < s->n_ov; i++) {
        int ri = rt_overlay_index(c->ov, c->n_ov, s->ov[i].node, s->ov[i].input);
        const struct rt_overlay *r = ri >= 0 ? &c->ov[ri] : NULL;
        if ((!r || !overlay_equal(r, &s->ov[i])) && !dirty[s->ov[i].node]) {
            dirty[s->ov[i].node] = 1;
            stack[sp++] = s->ov[i].node;
        }
    }
    for (size_t i = 0; i < c->n_ov; i++)
        if (rt_overlay_index(s->ov, s->n_ov, c->ov[i].node, c->ov[i].input) < 0 &&
            !dirty[c->ov[i].node]) {
            dirty[c->ov[i].node] = 1;
            stack[sp++] = c->ov[i].node;
        }
    qp_graph_mark_downstream(g, dirty, stack, sp);
    for (size_t i = 0; i < nn; i++)
        nstep[i] = -1;
    for (size_t k = 0; k < p->n_steps; k++) {
        struct rt_step *stp = &p->steps[k];
        if (stp->kind == RT_STEP_OVERLAY) continue;
        nstep[stp->node] = (int)k;
        int d = dirty[stp->node];
        for (int i = 0; i < stp->n_nodes; i++) { /* a fused step: any of its nodes */
            nstep[stp->nodes[i]] = (int)k;
            d |= dirty[stp->nodes[i]];
        }
        for (int i = 0; !d && i < stp->n_dep; i++)
            d = stp->dep[i] >= 0 && mode[stp->dep[i]] == MODE_COMPUTE &&
                p->steps[stp->dep[i]].kind != RT_STEP_OVERLAY;
        if (d) mode[k] = MODE_COMPUTE;
    }
    for (size_t i = 0; i < g->n_outputs; i++) {
        int pn = g->values[g->outputs[i]].producer;
        if (pn >= 0 && nstep[pn] >= 0) need[nstep[pn]] = 1;
    }
    /* Backwards: what computed steps read comes from the cache, or is computed again. */
    for (size_t k = p->n_steps; k-- > 0;) {
        struct rt_step *stp = &p->steps[k];
        if (mode[k] != MODE_COMPUTE && need[k]) {
            int cached = stp->kind != RT_STEP_OVERLAY;
            const struct qp_node *n = &g->nodes[rt_step_onode(stp)];
            for (int i = 0; cached && i < stp->n_out; i++)
                if (stp->val_out[i] &&
                    (!c->val[n->outputs[i]] || c->lay[n->outputs[i]] != p->blocked[n->outputs[i]]))
                    cached = 0; /* not cached, or cached in another layout */
            mode[k] = cached ? MODE_RESTORE : MODE_COMPUTE;
        }
        if (mode[k] == MODE_COMPUTE)
            for (int i = 0; i < stp->n_dep; i++)
                if (stp->dep[i] >= 0) need[stp->dep[i]] = 1;
    }
    /* A restored value is read from its cache slot where it lies: its tensor points there
     * for this run (kernels read their inputs' data at run time and never write them, see
     * memplan.h), which saves copying it back into the arena. Graph outputs are copied (they
     * are read through qp_session_output after the run); the rest point back at their arena
     * bytes at the end (cache_aim, as after a recording run). */
    for (size_t k = 0; k < p->n_steps; k++) {
        struct rt_step *stp = &p->steps[k];
        if (mode[k] == MODE_COMPUTE) {
            if ((st = rt_step_run(s, p, stp, p->scratch, err))) goto done;
            s->n_executed += rt_step_count(stp);
        } else if (mode[k] == MODE_RESTORE) {
            const struct qp_node *n = &g->nodes[rt_step_onode(stp)];
            for (int i = 0; i < stp->n_out; i++) {
                struct qp_kt *t = stp->val_out[i];
                if (!t || !t->nbytes) continue;
                if (is_session_output(s, n->outputs[i])) {
                    memcpy(t->data, c->val[n->outputs[i]], t->nbytes);
                    continue;
                }
                aim_at_slot(c, t, n->outputs[i]);
            }
        }
    }
    s->last = p;
done:
    cache_aim(s, p, 0);
    free(dirty);
    free(mode);
    free(need);
    free(stack);
    free(nstep);
    return st;
}

size_t qp_session_nodes_executed(const struct qp_session *s) {
    return s ? s->n_executed : 0;
}

void qp_session_set_cache(struct qp_session *s, size_t budget_bytes) {
    if (!s) return;
    if (s->cache.borrowed) cache_clear(&s->cache);
    s->cache.budget = budget_bytes;
    if (!budget_bytes) {
        cache_clear(&s->cache);
        free(s->cache.buf);
        s->cache.buf = NULL;
        s->cache.buf_bytes = 0;
    }
}

enum qp_status qp_session_borrow_cache(struct qp_session *dst, const struct qp_session *src,
                                       struct qp_error *err) {
    if (!dst || !src || dst == src)
        return qp_error_set(err, QP_ERR_USAGE, "session: borrow_cache needs two sessions");
    if (dst->g != src->g)
        return qp_error_set(err, QP_ERR_USAGE,
                            "session: borrow_cache needs sessions of the same model");
    const struct rt_cache *from = &src->cache;
    if (!from->valid || from->borrowed)
        return qp_error_set(err, QP_ERR_USAGE,
                            "session: the lending session holds no reference run of its own");
    struct rt_cache *c = &dst->cache;
    cache_clear(c); /* a borrow before lets go; this session's own buffers go below */
    free(c->val);
    free(c->lay);
    free(c->buf);
    c->val = NULL;
    c->lay = NULL;
    c->buf = NULL;
    void **home = c->home; /* this session's own: where its tensors point back after a run */
    if (!home && !(home = calloc(dst->g->n_values ? dst->g->n_values : 1, sizeof *home)))
        return qp_error_set(err, QP_ERR_NOMEM, "session: out of memory (cache)");
    *c = *from; /* inputs, overlays, slots, layouts and buffer: the lender's, by pointer */
    c->home = home;
    c->budget = 0;
    c->borrowed = 1;
    return QP_OK;
}

static int cmp_overlay(const void *a, const void *b) {
    const struct rt_overlay *x = a, *y = b;
    if (x->node != y->node) return x->node < y->node ? -1 : 1;
    return x->input < y->input ? -1 : (x->input > y->input);
}

enum qp_status qp_session_set_overlays(struct qp_session *s, size_t n, const struct qp_overlay *ov,
                                       struct qp_error *err) {
    if (!s || (n && !ov)) return qp_error_set(err, QP_ERR_USAGE, "session: NULL argument");
    const struct qp_graph *g = s->g;
    if (n > g->n_nodes * 64 + 64)
        return qp_error_set(err, QP_ERR_BAD_INPUT, "session: %zu overlays", n);
    struct rt_overlay *nov = calloc(n + 1, sizeof *nov);
    if (!nov) return qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
    enum qp_status st = QP_OK;
    size_t made = 0;
    for (size_t i = 0; i < n; i++) {
        const struct qp_overlay *o = &ov[i];
        struct rt_overlay *d = &nov[i];
        int node = o->node ? qp_graph_find_node(g, o->node) : -1;
        if (node < 0) {
            st = qp_error_set(err, QP_ERR_BAD_INPUT, "session: overlay %zu: no node named '%s'", i,
                              o->node ? o->node : "(null)");
            goto fail;
        }
        const struct qp_node *nd = &g->nodes[node];
        if (o->input < 0 || o->input >= nd->n_inputs || nd->inputs[o->input] < 0) {
            st = qp_error_set(err, QP_ERR_BAD_INPUT,
                              "session: overlay %zu: node '%s' (%s) has no input %d", i, o->node,
                              nd->op_type, o->input);
            goto fail;
        }
        const struct qp_dtype_traits *tr = qp_dtype_traits(o->qtype);
        if (!qp_qtype_supported(o->qtype) || o->qtype == QP_DTYPE_INT32 || !tr || tr->bits < 8) {
            st = qp_error_set(err, QP_ERR_UNSUPPORTED,
                              "session: overlay %zu on node '%s' input %d: quantized type %s is "
                              "not supported",
                              i, o->node, o->input, qp_dtype_name(o->qtype));
            goto fail;
        }
        if (o->n_params == 0 || o->n_params > ((size_t)1 << 28) || !o->scale) {
            st = qp_error_set(err, QP_ERR_BAD_INPUT,
                              "session: overlay %zu on node '%s' input %d: %zu parameters", i,
                              o->node, o->input, o->n_params);
            goto fail;
        }
        for (size_t j = 0; j < o->n_params; j++) {
            float sc = o->scale[j];
            if (!(sc > 0) || sc > 3.4e38f) {
                st = qp_error_set(err, QP_ERR_BAD_INPUT,
                                  "session: overlay %zu on node '%s' input %d: scale %zu is %g "
                                  "(must be finite and positive)",
                                  i, o->node, o->input, j, (double)sc);
                goto fail;
            }
        }
        for (size_t j = 0; j < i; j++)
            if (nov[j].node == node && nov[j].input == o->input) {
                st = qp_error_set(err, QP_ERR_BAD_INPUT,
                                  "session: overlays %zu and %zu are both on node '%s' input %d", j,
                                  i, o->node, o->input);
                goto fail;
            }
        d->node = node;
        d->input = o->input;
        d->qtype = o->qtype;
        d->axis = o->axis;
        d->saturate = o->saturate;
        d->bypass = o->bypass != 0;
        d->n_params = o->n_params;
        d->zp_bytes = o->zero_point ? o->n_params * (size_t)(tr->bits / 8) : 0;
        d->scale = qp_malloc_n(o->n_params, sizeof *d->scale);
        d->zero_point = d->zp_bytes ? malloc(d->zp_bytes) : NULL;
        made = i + 1;
        if (!d->scale || (d->zp_bytes && !d->zero_point)) {
            st = qp_error_set(err, QP_ERR_NOMEM, "session: out of memory");
            goto fail;
        }
        memcpy(d->scale, o->scale, o->n_params * sizeof *d->scale);
        if (d->zp_bytes) memcpy(d->zero_point, o->zero_point, d->zp_bytes);
    }
    qsort(nov, n, sizeof *nov, cmp_overlay);
    /* Plans depend on the edges, axes and parameter counts, and on what a plan applied at plan
     * time: the parameters of overlays on constants, bypass flags it marked baked. */
    int same = n == s->n_ov;
    for (size_t i = 0; same && i < n; i++)
        same = nov[i].node == s->ov[i].node && nov[i].input == s->ov[i].input &&
               nov[i].axis == s->ov[i].axis && nov[i].n_params == s->ov[i].n_params;
    for (size_t k = 0; same && k < s->n_plans; k++)
        for (size_t i = 0; same && i < n; i++) {
            unsigned char b = s->plans[k]->ov_baked[i];
            if ((b & RT_OV_PARAMS_BAKED) && !overlay_params_equal(&nov[i], &s->ov[i])) same = 0;
            if ((b & RT_OV_BYPASS_BAKED) && nov[i].bypass != s->ov[i].bypass) same = 0;
        }
    if (!same) {
        for (size_t k = 0; k < s->n_plans; k++)
            rt_plan_free(s->plans[k], s->n_inputs);
        s->n_plans = 0;
    }
    s->last = NULL;
    free_overlays(s->ov, s->n_ov);
    s->ov = nov;
    s->n_ov = n;
    return QP_OK;
fail:
    free_overlays(nov, made);
    return st;
}

enum qp_status qp_session_output(const struct qp_session *s, size_t i, struct qp_array *view_out,
                                 struct qp_error *err) {
    if (!s || !view_out) return qp_error_set(err, QP_ERR_USAGE, "session: NULL argument");
    if (!s->last) return qp_error_set(err, QP_ERR_USAGE, "session: no successful run yet");
    if (i >= s->n_outputs)
        return qp_error_set(err, QP_ERR_USAGE, "session: output %zu of %zu", i, s->n_outputs);
    const struct qp_kt *t = &s->last->vals[s->outputs[i]];
    memset(view_out, 0, sizeof *view_out);
    view_out->dtype = t->dtype;
    view_out->rank = t->rank;
    memcpy(view_out->dims, t->dims, sizeof(int64_t) * (size_t)t->rank);
    view_out->data = t->data;
    view_out->nbytes = t->nbytes;
    return QP_OK;
}
