/* Calibration through the engine's observer (collect.h). */
#include "calib/collect.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "calib/auto.h"
#include "core/clock.h"
#include "ir/ir.h"
#include "ir/optraits.h"
#include "placement/placement.h"

struct slot {
    int value;          /* value index in the top-level graph */
    int required;       /* a placement tensor: must end up with a range */
    int group;          /* pooled Concat group (index into groups), or -1 */
    int member;         /* its index among the group's members */
    struct qp_stats *s; /* made on the first float batch of the tensor; in a pooled group it
                           keeps only the tensor's own counts (no histogram) */
    uint64_t fed_run;   /* 1 + the index of the last run that fed it (0: none) */
    int from;           /* the slot of the input it follows from (see feed), or -1 */
    enum qp_stats_derive how;
};

/* A Concat group whose histograms are pooled (entropy, percentile): each batch, copies of the
 * members' values are kept until the run ends and then fed as one pooled batch, so the group
 * has one histogram over all members' values, grown as ORT grows a pooled batch's. */
struct group {
    size_t n;
    int *slots;              /* n member slots */
    struct qp_array *copies; /* n: this batch's values (owned buffers, reused) */
    size_t *caps;            /* n: bytes allocated per copy */
    unsigned char *fed;      /* n: fed in this batch */
    struct qp_stats *s;      /* the pooled statistics */
};

struct qp_collector {
    const struct qp_model *model;
    const struct qp_graph *g;
    struct qp_collect_options o;
    struct qp_stats_config cfg;
    struct qp_session *session;
    size_t n_slots;
    struct slot *slots;
    int *slot_of_value; /* g->n_values entries, -1 when the value is not calibrated */
    size_t n_groups;
    struct group *groups;
    struct qp_array *pool; /* scratch: the fed copies of one group */
    struct qp_stats_config member_cfg;
    uint64_t n_batches, n_samples;
    size_t bytes_max;
    uint64_t n_derived; /* batches fed from their input's statistics (see feed) */
    /* auto: the first batches' inputs (session order), until QP_AUTO_SAMPLES samples */
    struct qp_array *kept;
    size_t n_kept, n_kept_inputs, kept_bytes;
    uint64_t kept_samples;
    /* auto, after qp_collector_finish: per slot the method chosen (-1: none) and 1 when it is
     * entropy for want of an evaluated consumer */
    int *chosen;
    unsigned char *fallback;
    /* An error raised inside the observer, which can only return non-zero. */
    int failed;
    struct qp_error obs_err;
};

void qp_collect_options_default(struct qp_collect_options *o, enum qp_calib_method m) {
    memset(o, 0, sizeof *o);
    qp_calib_options_default(&o->calib, m);
    o->pin_softmax = 1;
    o->group_concat = 1;
}

static int is_float_dtype(enum qp_dtype t) {
    return t == QP_DTYPE_FLOAT || t == QP_DTYPE_FLOAT16 || t == QP_DTYPE_BFLOAT16 ||
           t == QP_DTYPE_DOUBLE;
}

static int is_onnx_op(const struct qp_node *n, const char *op) {
    return !n->dead && qp_node_is(n, op);
}

/* A value the calibration of "every float activation" takes: computed at run time (not an
 * initializer, not a Constant's output) and consumed by some node. */
static int is_activation(const struct qp_graph *g, int v) {
    const struct qp_value *x = &g->values[v];
    if (x->kind != QP_VALUE_TENSOR || x->initializer >= 0 || x->is_outer || x->n_uses == 0)
        return 0;
    if (x->dtype != QP_DTYPE_UNDEFINED && !is_float_dtype(x->dtype)) return 0;
    if (x->producer >= 0 && is_onnx_op(&g->nodes[x->producer], "Constant")) return 0;
    return x->producer >= 0 || x->is_graph_input;
}

static enum qp_status add_slot(struct qp_collector *c, int v, int required, struct qp_error *err) {
    if (c->slot_of_value[v] >= 0) {
        c->slots[c->slot_of_value[v]].required |= required;
        return QP_OK;
    }
    c->slots[c->n_slots] = (struct slot){.value = v, .required = required, .group = -1, .from = -1};
    c->slot_of_value[v] = (int)c->n_slots++;
    (void)err;
    return QP_OK;
}

static enum qp_status select_tensors(struct qp_collector *c, struct qp_error *err) {
    const struct qp_graph *g = c->g;
    if (c->o.placement) {
        const struct qp_placement *p = c->o.placement;
        for (size_t i = 0; i < p->n_edges; i++) {
            int v = qp_graph_find_value(g, p->edges[i].tensor);
            if (v < 0)
                return qp_error_set(err, QP_ERR_BAD_INPUT,
                                    "calibrate: placement tensor '%s' is not in the model",
                                    p->edges[i].tensor);
            if (g->values[v].initializer >= 0)
                return qp_error_set(err, QP_ERR_BAD_INPUT,
                                    "calibrate: placement edge tensor '%s' is an initializer",
                                    p->edges[i].tensor);
            add_slot(c, v, !c->o.placement_float_only, err);
        }
        return QP_OK;
    }
    /* Graph inputs first, then node outputs in topological order: the order of the file. */
    for (size_t i = 0; i < g->n_inputs; i++)
        if (is_activation(g, g->inputs[i])) add_slot(c, g->inputs[i], 0, err);
    for (size_t k = 0; k < g->n_topo; k++) {
        const struct qp_node *n = &g->nodes[g->topo[k]];
        if (n->dead) continue;
        for (int j = 0; j < n->n_outputs; j++)
            if (n->outputs[j] >= 0 && is_activation(g, n->outputs[j]))
                add_slot(c, n->outputs[j], 0, err);
    }
    return QP_OK;
}

/* Keeps a copy of a pooled group member's values until the end of the run. */
static enum qp_status keep_copy(struct group *gr, int k, const struct qp_array *a,
                                struct qp_error *err) {
    if (a->nbytes > gr->caps[k]) {
        void *p = realloc(gr->copies[k].data, a->nbytes);
        if (!p) return qp_error_set(err, QP_ERR_NOMEM, "out of memory keeping a group member");
        gr->copies[k].data = p;
        gr->caps[k] = a->nbytes;
    }
    void *data = gr->copies[k].data;
    if (a->nbytes) memcpy(data, a->data, a->nbytes);
    gr->copies[k] = *a;
    gr->copies[k].data = data;
    gr->copies[k].owned = 0; /* the buffer belongs to the group */
    gr->fed[k] = 1;
    return QP_OK;
}

static enum qp_status feed(struct qp_collector *c, struct slot *sl, const struct qp_array *a,
                           struct qp_error *err) {
    if (!is_float_dtype(a->dtype)) return QP_OK;
    const struct qp_stats_config *cfg = sl->group >= 0 ? &c->member_cfg : &c->cfg;
    if (!sl->s) {
        enum qp_status st = qp_stats_create(cfg, &sl->s, err);
        if (st != QP_OK) return st;
    }
    enum qp_status st = QP_OK;
    /* The output of a Relu or of a value-preserving op (link_derived) whose input was fed in
     * this run: its statistics follow from the input's (qp_stats_update_derived) when the
     * histograms line up, which saves reading its values. */
    const struct slot *in = sl->from >= 0 ? &c->slots[sl->from] : NULL;
    int ok = 0;
    uint64_t numel = in && in->s && in->fed_run == c->n_batches + 1 ? qp_array_numel(a, &ok) : 0;
    if (ok && qp_stats_update_derived(sl->s, in->s, numel, sl->how))
        c->n_derived++;
    else
        st = qp_stats_update(sl->s, a, err);
    sl->fed_run = c->n_batches + 1;
    if (st == QP_OK && sl->group >= 0) st = keep_copy(&c->groups[sl->group], sl->member, a, err);
    if (st != QP_OK)
        return qp_error_prefix(err, "calibrate: tensor '%s'", c->g->values[sl->value].name);
    return QP_OK;
}

/* Feeds each pooled group the copies of its members seen in this run, as one batch. */
static enum qp_status flush_groups(struct qp_collector *c, struct qp_error *err) {
    for (size_t gi = 0; gi < c->n_groups; gi++) {
        struct group *gr = &c->groups[gi];
        size_t m = 0;
        for (size_t k = 0; k < gr->n; k++)
            if (gr->fed[k]) {
                c->pool[m++] = gr->copies[k];
                gr->fed[k] = 0;
            }
        if (!m) continue;
        enum qp_status st = QP_OK;
        if (!gr->s) st = qp_stats_create(&c->cfg, &gr->s, err);
        if (st == QP_OK) st = qp_stats_update_pooled(gr->s, c->pool, m, err);
        if (st != QP_OK)
            return qp_error_prefix(err, "calibrate: Concat group of tensor '%s'",
                                   c->g->values[c->slots[gr->slots[0]].value].name);
    }
    return QP_OK;
}

/* Union-find over slot indices, for Concat groups. */
static int uf_find(int *parent, int i) {
    while (parent[i] != i) {
        parent[i] = parent[parent[i]];
        i = parent[i];
    }
    return i;
}

/* Joins the inputs and the output of every Concat among the given slots (transitively; the
 * rule qp_collect_concat_close applies to values) into parent[] (size n_slots). `have` (may be
 * NULL: all) limits it to slots with statistics. */
static void concat_union(const struct qp_collector *c, int *parent, const int *have) {
    const struct qp_graph *g = c->g;
    for (size_t i = 0; i < c->n_slots; i++)
        parent[i] = (int)i;
    for (size_t k = 0; k < g->n_nodes; k++) {
        const struct qp_node *n = &g->nodes[k];
        if (!is_onnx_op(n, "Concat") || n->n_outputs < 1 || n->outputs[0] < 0) continue;
        int root = c->slot_of_value[n->outputs[0]];
        if (root < 0 || (have && !have[root])) continue;
        for (int j = 0; j < n->n_inputs; j++) {
            int v = n->inputs[j];
            int s = v >= 0 ? c->slot_of_value[v] : -1;
            if (s < 0 || (have && !have[s])) continue;
            int a = uf_find(parent, root), b = uf_find(parent, s);
            if (a != b) parent[b] = a;
        }
    }
}

/* Pooled groups (entropy and percentile with group_concat): every set of two or more slots
 * joined by Concats. */
static enum qp_status make_groups(struct qp_collector *c, struct qp_error *err) {
    if (!c->o.group_concat || c->o.calib.method == QP_CALIB_MAX || c->n_slots < 2) return QP_OK;
    enum qp_status st = QP_OK;
    int *parent = malloc(c->n_slots * sizeof *parent);
    int *gid = malloc(c->n_slots * sizeof *gid);
    size_t *count = calloc(c->n_slots, sizeof *count);
    if (!parent || !gid || !count) {
        st = qp_error_set(err, QP_ERR_NOMEM, "calibrate: out of memory");
        goto done;
    }
    concat_union(c, parent, NULL);
    size_t biggest = 0, n_groups = 0;
    for (size_t i = 0; i < c->n_slots; i++)
        count[uf_find(parent, (int)i)]++;
    for (size_t i = 0; i < c->n_slots; i++) {
        gid[i] = -1;
        if (uf_find(parent, (int)i) == (int)i && count[i] >= 2) gid[i] = (int)n_groups++;
        if (count[i] > biggest) biggest = count[i];
    }
    if (!n_groups) goto done;
    c->groups = calloc(n_groups, sizeof *c->groups);
    c->pool = calloc(biggest, sizeof *c->pool);
    if (!c->groups || !c->pool) {
        st = qp_error_set(err, QP_ERR_NOMEM, "calibrate: out of memory");
        goto done;
    }
    c->n_groups = n_groups; /* only with the array: qp_collector_free walks it */
    for (size_t i = 0; i < c->n_slots; i++) {
        int gi = gid[uf_find(parent, (int)i)];
        if (gi < 0) continue;
        struct group *gr = &c->groups[gi];
        if (!gr->slots) {
            size_t m = count[uf_find(parent, (int)i)];
            gr->slots = calloc(m, sizeof *gr->slots);
            gr->copies = calloc(m, sizeof *gr->copies);
            gr->caps = calloc(m, sizeof *gr->caps);
            gr->fed = calloc(m, 1);
            if (!gr->slots || !gr->copies || !gr->caps || !gr->fed) {
                st = qp_error_set(err, QP_ERR_NOMEM, "calibrate: out of memory");
                goto done;
            }
        }
        c->slots[i].group = gi;
        c->slots[i].member = (int)gr->n;
        gr->slots[gr->n++] = (int)i;
    }
done:
    free(parent);
    free(gid);
    free(count);
    return st;
}

static int observe(const char *tensor_name, const char *node_name, const struct qp_array *value,
                   void *user) {
    struct qp_collector *c = user;
    int v = qp_graph_find_value(c->g, tensor_name);
    if (v < 0 || c->slot_of_value[v] < 0) return 0;
    if (feed(c, &c->slots[c->slot_of_value[v]], value, &c->obs_err) != QP_OK) {
        c->failed = 1;
        return 1;
    }
    return 0;
}

/* Tells the session to report only the calibrated tensors that a run computes (graph inputs
 * are fed from the batch), so it may fuse across all the others. */
static enum qp_status observe_only_slots(struct qp_collector *c, struct qp_error *err) {
    const char **names = malloc((c->n_slots ? c->n_slots : 1) * sizeof *names);
    if (!names) return qp_error_set(err, QP_ERR_NOMEM, "calibrate: out of memory");
    size_t n = 0;
    for (size_t i = 0; i < c->n_slots; i++) {
        const struct qp_value *x = &c->g->values[c->slots[i].value];
        if (x->producer >= 0) names[n++] = x->name;
    }
    enum qp_status st = QP_OK;
    /* An empty set would mean "every tensor": with nothing computed to observe, keep the
     * observer off instead. */
    if (n)
        st = qp_session_set_observed(c->session, n, names, err);
    else
        qp_session_set_observer(c->session, NULL, NULL);
    free(names);
    if (st != QP_OK) qp_error_prefix(err, "calibrate");
    return st;
}

/* Marks the calibrated outputs that follow from a calibrated input element for element
 * (slot.from, slot.how): Relu's, and those of ops that only move values (their output holds
 * exactly the input's values). */
static void link_derived(struct qp_collector *c) {
    for (size_t i = 0; i < c->n_slots; i++) {
        const struct qp_value *y = &c->g->values[c->slots[i].value];
        if (y->producer < 0) continue;
        const struct qp_node *n = &c->g->nodes[y->producer];
        if (n->n_inputs < 1 || n->inputs[0] < 0 || n->n_outputs != 1) continue;
        int how = is_onnx_op(n, "Relu") ? QP_STATS_RELU : -1;
        if (how < 0 && !n->dead && qp_op_is(n, QP_OP_FLAG_SAME_VALUES)) how = QP_STATS_SAME;
        if (how < 0) continue;
        c->slots[i].from = c->slot_of_value[n->inputs[0]];
        c->slots[i].how = (enum qp_stats_derive)how;
    }
}

enum qp_status qp_collector_create(const struct qp_model *model, const struct qp_collect_options *o,
                                   size_t n_shapes, const struct qp_shape *shapes,
                                   struct qp_collector **out, struct qp_error *err) {
    if (!model || !o || !out || (n_shapes && !shapes))
        return qp_error_set(err, QP_ERR_USAGE, "calibrate: collector_create arguments");
    if (o->calib.method < 0 || o->calib.method >= QP_CALIB_METHOD_COUNT)
        return qp_error_set(err, QP_ERR_USAGE, "calibrate: unknown calibration method %d",
                            (int)o->calib.method);
    if (o->calib.method == QP_CALIB_PERCENTILE &&
        !(o->calib.percentile > 0 && o->calib.percentile <= 100))
        return qp_error_set(err, QP_ERR_USAGE, "calibrate: percentile %g is not in (0, 100]",
                            o->calib.percentile);
    const struct qp_graph *g = qp_model_graph(model);
    if (!g) return qp_error_set(err, QP_ERR_USAGE, "calibrate: model without a graph");
    struct qp_collector *c = calloc(1, sizeof *c);
    if (!c) return qp_error_set(err, QP_ERR_NOMEM, "calibrate: out of memory");
    enum qp_status st = QP_OK;
    c->model = model;
    c->g = g;
    c->o = *o;
    qp_calib_stats_config(&o->calib, &c->cfg);
    c->cfg.n_threads = o->n_threads; /* --threads bounds the statistics too */
    size_t nv = g->n_values ? g->n_values : 1;
    c->slot_of_value = malloc(nv * sizeof *c->slot_of_value);
    c->slots = calloc(nv, sizeof *c->slots);
    if (!c->slot_of_value || !c->slots) {
        st = qp_error_set(err, QP_ERR_NOMEM, "calibrate: out of memory");
        goto fail;
    }
    for (size_t v = 0; v < nv; v++)
        c->slot_of_value[v] = -1;
    if ((st = select_tensors(c, err)) != QP_OK) goto fail;
    c->member_cfg = c->cfg;
    c->member_cfg.flags = 0;
    if ((st = make_groups(c, err)) != QP_OK) goto fail;
    if (!o->values_only) link_derived(c);
    /* Planned at the first run: the observer and the observed set below would drop a plan
     * made now. */
    struct qp_session_options so = {.n_threads = o->n_threads, .lazy_plan = 1};
    if ((st = qp_session_create(model, &so, n_shapes, shapes, &c->session, err)) != QP_OK)
        goto fail;
    qp_session_set_observer(c->session, observe, c);
    /* Ranges and histograms are per tensor: blocked tensors need no reorder for them. */
    qp_session_set_observer_any_order(c->session, 1);
    if ((st = observe_only_slots(c, err)) != QP_OK) goto fail;
    *out = c;
    return QP_OK;
fail:
    qp_collector_free(c);
    return st;
}

void qp_collector_free(struct qp_collector *c) {
    if (!c) return;
    for (size_t i = 0; i < c->n_slots; i++)
        qp_stats_free(c->slots[i].s);
    for (size_t gi = 0; gi < c->n_groups; gi++) {
        struct group *gr = &c->groups[gi];
        for (size_t k = 0; k < gr->n; k++)
            free(gr->copies[k].data);
        free(gr->slots);
        free(gr->copies);
        free(gr->caps);
        free(gr->fed);
        qp_stats_free(gr->s);
    }
    for (size_t i = 0; i < c->n_kept * c->n_kept_inputs; i++)
        free(c->kept[i].data);
    free(c->kept);
    free(c->groups);
    free(c->pool);
    free(c->slots);
    free(c->slot_of_value);
    free(c->chosen);
    free(c->fallback);
    qp_session_free(c->session);
    free(c);
}

const struct qp_session *qp_collector_session(const struct qp_collector *c) {
    return c ? c->session : NULL;
}

size_t qp_collector_bytes(const struct qp_collector *c) {
    if (!c) return 0;
    size_t b = sizeof *c + c->g->n_values * (sizeof *c->slot_of_value + sizeof *c->slots);
    for (size_t i = 0; i < c->n_slots; i++)
        if (c->slots[i].s) b += qp_stats_bytes(c->slots[i].s);
    for (size_t gi = 0; gi < c->n_groups; gi++) {
        const struct group *gr = &c->groups[gi];
        b += qp_stats_bytes(gr->s);
        for (size_t k = 0; k < gr->n; k++)
            b += gr->caps[k];
    }
    return b + c->kept_bytes;
}

/* auto: keeps copies of the first batches' inputs (QP_AUTO_SAMPLES samples) for the choice in
 * qp_collector_finish; a batch with another input count ends the keeping. */
static enum qp_status keep_batch(struct qp_collector *c, size_t n, const struct qp_array *inputs,
                                 struct qp_error *err) {
    if (c->o.calib.method != QP_CALIB_AUTO || c->kept_samples >= QP_AUTO_SAMPLES || !n ||
        (c->n_kept && n != c->n_kept_inputs))
        return QP_OK;
    struct qp_array *k = realloc(c->kept, (c->n_kept + 1) * n * sizeof *k);
    if (!k) return qp_error_set(err, QP_ERR_NOMEM, "calibrate: out of memory keeping a batch");
    c->kept = k;
    k += c->n_kept * n;
    for (size_t i = 0; i < n; i++) {
        k[i] = inputs[i];
        k[i].owned = 0;
        k[i].data = malloc(inputs[i].nbytes ? inputs[i].nbytes : 1);
        if (!k[i].data) {
            for (size_t j = 0; j < i; j++)
                free(k[j].data);
            return qp_error_set(err, QP_ERR_NOMEM, "calibrate: out of memory keeping a batch");
        }
        if (inputs[i].nbytes) memcpy(k[i].data, inputs[i].data, inputs[i].nbytes);
        c->kept_bytes += inputs[i].nbytes;
    }
    c->n_kept++;
    c->n_kept_inputs = n;
    c->kept_samples +=
        inputs[0].rank > 0 && inputs[0].dims[0] > 0 ? (uint64_t)inputs[0].dims[0] : 1;
    return QP_OK;
}

enum qp_status qp_collector_run(struct qp_collector *c, size_t n, const struct qp_array *inputs,
                                struct qp_error *err) {
    if (!c || (n && !inputs)) return qp_error_set(err, QP_ERR_USAGE, "calibrate: run arguments");
    c->failed = 0;
    for (size_t gi = 0; gi < c->n_groups; gi++) /* nothing left from a failed run */
        memset(c->groups[gi].fed, 0, c->groups[gi].n);
    c->obs_err.status = QP_OK;
    c->obs_err.msg[0] = '\0';
    enum qp_status st = qp_session_run(c->session, n, inputs, err);
    if (c->failed) {
        if (err) *err = c->obs_err;
        return c->obs_err.status;
    }
    if (st != QP_OK) return st;
    /* Graph inputs are not computed by the run, so the observer does not see them. */
    for (size_t i = 0; i < n; i++) {
        const char *name = qp_session_input_name(c->session, i);
        int v = name ? qp_graph_find_value(c->g, name) : -1;
        if (v >= 0 && c->slot_of_value[v] >= 0)
            if ((st = feed(c, &c->slots[c->slot_of_value[v]], &inputs[i], err)) != QP_OK) return st;
    }
    if ((st = flush_groups(c, err)) != QP_OK) return st;
    if ((st = keep_batch(c, n, inputs, err)) != QP_OK) return st;
    c->n_batches++;
    c->n_samples +=
        n && inputs[0].rank > 0 && inputs[0].dims[0] > 0 ? (uint64_t)inputs[0].dims[0] : 1;
    size_t b = qp_collector_bytes(c);
    if (b > c->bytes_max) c->bytes_max = b;
    return QP_OK;
}

/* 1 when value v is a Softmax output that the options pin to [0, 1]. */
static int pinned_softmax(const struct qp_collector *c, int v) {
    const struct qp_value *x = &c->g->values[v];
    return c->o.pin_softmax && x->producer >= 0 &&
           is_onnx_op(&c->g->nodes[x->producer], "Softmax") && x->producer_output == 0;
}

/* auto: every candidate method's range per tensor (from its pooled group's statistics when it
 * has one), evaluated at the tensor's consumers on the kept batches (calib/auto.h); each Concat
 * group (or lone tensor) takes the candidate with the least error summed over its members, ties
 * going to entropy, then max, percentile, mse. Tensors with no consumer evaluated keep rr's
 * entropy range (the fallback); pinned Softmax outputs are not evaluated (their pin wins).
 * chosen[i] receives the method of slot i, or -1 (no range, pinned). */
static enum qp_status choose_auto(struct qp_collector *c, struct qp_calib_range *rr,
                                  const int *have, int *parent, int *chosen,
                                  struct qp_collect_report *rep, struct qp_error *err) {
    static const int order[QP_AUTO_N_CAND] = {QP_CALIB_ENTROPY, QP_CALIB_MAX, QP_CALIB_PERCENTILE,
                                              QP_CALIB_MSE};
    size_t ns = c->n_slots ? c->n_slots : 1;
    struct qp_calib_range(*cand)[QP_AUTO_N_CAND] = calloc(ns, sizeof *cand);
    struct qp_auto_tensor *t = calloc(ns, sizeof *t);
    int *tix = malloc(ns * sizeof *tix); /* slot -> index in t, or -1 */
    size_t n = 0;
    enum qp_status st = QP_OK;
    if (!cand || !t || !tix) {
        st = qp_error_set(err, QP_ERR_NOMEM, "calibrate: out of memory");
        goto done;
    }
    for (size_t i = 0; i < c->n_slots; i++) {
        const struct slot *sl = &c->slots[i];
        tix[i] = -1;
        chosen[i] = -1;
        if (!have[i] || (c->o.pin_softmax && pinned_softmax(c, sl->value))) continue;
        chosen[i] = QP_CALIB_ENTROPY;
        const struct qp_stats *from = sl->group >= 0 ? c->groups[sl->group].s : sl->s;
        int ok = 1;
        for (int m = 0; m < QP_AUTO_N_CAND && ok; m++) {
            struct qp_calib_options o = c->o.calib;
            o.method = (enum qp_calib_method)m;
            struct qp_error e = {0};
            if (qp_calib_compute(&o, from, &cand[i][m], &e) == QP_OK) continue;
            if (e.status == QP_ERR_NOMEM) { /* an error of the calibration, not of the method */
                if (err) *err = e;
                st = QP_ERR_NOMEM;
                goto done;
            }
            ok = 0;
        }
        if (!ok) continue;
        tix[i] = (int)n;
        t[n].value = sl->value;
        for (int m = 0; m < QP_AUTO_N_CAND; m++)
            t[n].amax[m] = cand[i][m].amax;
        n++;
    }
    double t0 = qp_clock_seconds();
    if ((st = qp_auto_evaluate(c->model, c->o.placement, c->o.calib.qtype, c->o.n_threads,
                               c->n_kept, c->n_kept_inputs, c->kept, n, t, err)) != QP_OK) {
        qp_error_prefix(err, "calibrate: auto");
        goto done;
    }
    qp_log(QP_LOG_DEBUG, "calibrate auto: %zu tensors evaluated on %zu batches in %.2f s", n,
           c->n_kept, qp_clock_seconds() - t0);
    if (c->o.group_concat)
        concat_union(c, parent, have);
    else
        for (size_t i = 0; i < c->n_slots; i++)
            parent[i] = (int)i;
    for (size_t i = 0; i < c->n_slots; i++) {
        if (!have[i] || uf_find(parent, (int)i) != (int)i) continue;
        double sum[QP_AUTO_N_CAND] = {0};
        int any = 0, all = 1;
        for (size_t j = 0; j < c->n_slots; j++) {
            if (!have[j] || uf_find(parent, (int)j) != (int)i || chosen[j] < 0) continue;
            if (tix[j] < 0) all = 0; /* its candidates failed: the group keeps entropy */
            if (tix[j] < 0 || !t[tix[j]].n_consumers) continue;
            any = 1;
            for (int m = 0; m < QP_AUTO_N_CAND; m++)
                sum[m] += t[tix[j]].error[m];
        }
        int best = QP_CALIB_ENTROPY;
        if (any && all)
            for (int k = 1; k < QP_AUTO_N_CAND; k++)
                if (sum[order[k]] < sum[best]) best = order[k];
        for (size_t j = 0; j < c->n_slots; j++) {
            if (!have[j] || uf_find(parent, (int)j) != (int)i || chosen[j] < 0) continue;
            if (!(any && all)) {
                rep->n_auto_fallback++;
                c->fallback[j] = 1;
            } else {
                struct qp_calib_range own = rr[j];
                rr[j] = cand[j][best];
                rr[j].n_nan = own.n_nan; /* the member's own counts */
                rr[j].n_inf = own.n_inf;
            }
            chosen[j] = best;
            rep->n_auto[best]++;
            const struct qp_auto_tensor *x = tix[j] >= 0 ? &t[tix[j]] : NULL;
            qp_log(QP_LOG_DEBUG,
                   "calibrate auto: tensor '%s': %s%s (%d consumers; relative error at them: max "
                   "%.3g, entropy %.3g, percentile %.3g, mse %.3g)",
                   c->g->values[c->slots[j].value].name, qp_calib_method_name(best),
                   any && all ? "" : " (fallback)", x ? x->n_consumers : 0,
                   x ? x->error[QP_CALIB_MAX] : NAN, x ? x->error[QP_CALIB_ENTROPY] : NAN,
                   x ? x->error[QP_CALIB_PERCENTILE] : NAN, x ? x->error[QP_CALIB_MSE] : NAN);
        }
    }
done:
    free(cand);
    free(t);
    free(tix);
    return st;
}

/* Every slot's range from its (group's) statistics into rr, have[i] = 1 for each computed;
 * parent[] starts as the identity. NaN/Inf counts go to the report. */
static enum qp_status compute_slot_ranges(struct qp_collector *c, struct qp_calib_range *rr,
                                          int *have, int *parent, struct qp_collect_report *rep,
                                          struct qp_error *err) {
    const struct qp_graph *g = c->g;
    for (size_t i = 0; i < c->n_slots; i++) {
        const struct slot *sl = &c->slots[i];
        const char *name = g->values[sl->value].name;
        parent[i] = (int)i;
        if (!sl->s) {
            if (sl->required)
                return qp_error_set(err, QP_ERR_BAD_INPUT,
                                    "calibrate: placement tensor '%s' was never computed as a "
                                    "float tensor by the engine (not float, or on a branch no run "
                                    "took), so it has no range",
                                    name);
            continue;
        }
        const struct qp_stats *from = sl->group >= 0 ? c->groups[sl->group].s : sl->s;
        if (!from) /* a run failed before its group was fed */
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "calibrate: tensor '%s': its Concat group has no statistics", name);
        enum qp_status st = qp_calib_compute(&c->o.calib, from, &rr[i], err);
        if (st == QP_OK && from != sl->s) {
            struct qp_stats_summary own; /* the member's own NaN/Inf counts */
            qp_stats_summary(sl->s, &own);
            rr[i].n_nan = own.n_nan;
            rr[i].n_inf = own.n_inf;
        }
        if (st != QP_OK) {
            /* A pinned Softmax output needs no statistics: all-NaN is reported, not fatal. */
            struct qp_stats_summary sum;
            qp_stats_summary(sl->s, &sum);
            if (st != QP_ERR_BAD_INPUT || sum.has_range || !pinned_softmax(c, sl->value)) {
                qp_error_prefix(err, "calibrate: tensor '%s'", name);
                return st;
            }
            rr[i] = (struct qp_calib_range){.n_nan = sum.n_nan, .n_inf = sum.n_inf};
        }
        have[i] = 1;
        if (rr[i].n_nan || rr[i].n_inf) {
            rep->n_nonfinite_tensors++;
            rep->n_nan += rr[i].n_nan;
            rep->n_inf += rr[i].n_inf;
            qp_log(QP_LOG_WARN,
                   "calibrate: tensor '%s': %llu NaN and %llu Inf values seen, left out of its "
                   "range",
                   name, (unsigned long long)rr[i].n_nan, (unsigned long long)rr[i].n_inf);
        }
    }
    return QP_OK;
}

/* How many batches of derived statistics were taken (debug log). */
static void log_derived(const struct qp_collector *c) {
    if (!c->n_derived) return;
    size_t linked = 0;
    for (size_t i = 0; i < c->n_slots; i++)
        linked += c->slots[i].from >= 0;
    qp_log(QP_LOG_DEBUG,
           "calibrate: %llu batches of %zu Relu/Reshape-like outputs took their input's "
           "statistics (qp_stats_update_derived), of %llu",
           (unsigned long long)c->n_derived, linked, (unsigned long long)(linked * c->n_batches));
}

/* Pooled groups already have one range; this shares it among the members computed (and, for
 * max, is the grouping itself: min lo, max hi, max amax). tmp and members: room for n_slots. */
static void share_concat_groups(struct qp_collector *c, struct qp_calib_range *rr, const int *have,
                                int *parent, struct qp_calib_range *tmp, int *members,
                                struct qp_collect_report *rep) {
    concat_union(c, parent, have);
    for (size_t i = 0; i < c->n_slots; i++) {
        if (!have[i] || uf_find(parent, (int)i) != (int)i) continue;
        size_t m = 0;
        for (size_t j = 0; j < c->n_slots; j++)
            if (have[j] && uf_find(parent, (int)j) == (int)i) {
                members[m] = (int)j;
                tmp[m++] = rr[j];
            }
        if (m < 2) continue;
        qp_calib_group_share(tmp, m);
        for (size_t j = 0; j < m; j++)
            rr[members[j]] = tmp[j];
        rep->n_grouped += m;
    }
}

/* Softmax outputs pinned to [0, 1]. */
static void pin_softmax_ranges(const struct qp_collector *c, struct qp_calib_range *rr,
                               const int *have, struct qp_collect_report *rep) {
    const struct qp_graph *g = c->g;
    for (size_t k = 0; k < g->n_nodes; k++) {
        const struct qp_node *n = &g->nodes[k];
        if (!is_onnx_op(n, "Softmax") || n->n_outputs < 1 || n->outputs[0] < 0) continue;
        int s = c->slot_of_value[n->outputs[0]];
        if (s < 0 || !have[s]) continue;
        qp_calib_range_pin(&rr[s], 0, 1);
        rep->n_pinned++;
    }
}

/* The computed ranges into the table r, with each tensor's own value counts. */
static enum qp_status fill_ranges(const struct qp_collector *c, const struct qp_calib_range *rr,
                                  const int *have, struct qp_ranges *r, struct qp_error *err) {
    for (size_t i = 0; i < c->n_slots; i++) {
        if (!have[i]) continue;
        struct qp_stats_summary sum;
        qp_stats_summary(c->slots[i].s, &sum);
        struct qp_range x = {.tensor = c->g->values[c->slots[i].value].name,
                             .lo = (float)rr[i].lo,
                             .hi = (float)rr[i].hi,
                             .amax = (float)rr[i].amax,
                             .n_nan = sum.n_nan,
                             .n_inf = sum.n_inf,
                             .n_values = sum.n_values};
        enum qp_status st = qp_ranges_set(r, &x, err);
        if (st != QP_OK) return st;
    }
    return QP_OK;
}

enum qp_status qp_collector_finish(struct qp_collector *c, struct qp_ranges **out,
                                   struct qp_collect_report *report, struct qp_error *err) {
    if (!c || !out) return qp_error_set(err, QP_ERR_USAGE, "calibrate: finish arguments");
    size_t ns = c->n_slots ? c->n_slots : 1;
    struct qp_calib_range *rr = calloc(ns, sizeof *rr);
    int *have = calloc(ns, sizeof *have);
    int *parent = malloc(ns * sizeof *parent);
    struct qp_calib_range *tmp = malloc(ns * sizeof *tmp);
    int *members = malloc(ns * sizeof *members);
    free(c->chosen);
    free(c->fallback);
    int *chosen = c->chosen = malloc(ns * sizeof *chosen);
    c->fallback = calloc(ns, 1);
    struct qp_ranges *r = qp_ranges_create();
    struct qp_collect_report rep = {.n_batches = c->n_batches,
                                    .n_samples = c->n_samples,
                                    .collector_bytes_max = c->bytes_max,
                                    .n_derived = c->n_derived};
    enum qp_status st = QP_OK;
    if (!rr || !have || !parent || !tmp || !members || !chosen || !c->fallback || !r) {
        st = qp_error_set(err, QP_ERR_NOMEM, "calibrate: out of memory");
        goto done;
    }
    for (size_t i = 0; i < ns; i++)
        chosen[i] = -1;
    if ((st = compute_slot_ranges(c, rr, have, parent, &rep, err)) != QP_OK) goto done;
    log_derived(c);
    if (c->o.calib.method == QP_CALIB_AUTO &&
        (st = choose_auto(c, rr, have, parent, chosen, &rep, err)) != QP_OK)
        goto done;
    if (c->o.group_concat) share_concat_groups(c, rr, have, parent, tmp, members, &rep);
    if (c->o.pin_softmax) pin_softmax_ranges(c, rr, have, &rep);
    if ((st = fill_ranges(c, rr, have, r, err)) != QP_OK) goto done;
    rep.n_tensors = qp_ranges_count(r);
done:
    free(rr);
    free(have);
    free(parent);
    free(tmp);
    free(members);
    if (st != QP_OK) {
        qp_ranges_free(r);
        return st;
    }
    if (report) *report = rep;
    *out = r;
    return QP_OK;
}

int qp_collector_auto_choice(const struct qp_collector *c, const char *tensor, int *fallback) {
    if (fallback) *fallback = 0;
    if (!c || !tensor || !c->chosen || c->o.calib.method != QP_CALIB_AUTO) return -1;
    int v = qp_graph_find_value(c->g, tensor);
    int i = v >= 0 ? c->slot_of_value[v] : -1;
    if (i < 0) return -1;
    if (fallback && c->chosen[i] >= 0) *fallback = c->fallback[i];
    return c->chosen[i];
}

void qp_collect_concat_close(const struct qp_graph *g, unsigned char *mark) {
    for (int again = 1; again;) {
        again = 0;
        for (size_t k = 0; k < g->n_topo; k++) {
            const struct qp_node *n = &g->nodes[g->topo[k]];
            if (!is_onnx_op(n, "Concat") || n->n_outputs < 1 || n->outputs[0] < 0) continue;
            int any = mark[n->outputs[0]];
            for (int j = 0; j < n->n_inputs && !any; j++)
                any = n->inputs[j] >= 0 && mark[n->inputs[j]];
            if (!any) continue;
            for (int j = -1; j < n->n_inputs; j++) {
                int v = j < 0 ? n->outputs[0] : n->inputs[j];
                if (v >= 0 && !mark[v]) mark[v] = again = 1;
            }
        }
    }
}

/* ---- all in one ---------------------------------------------------------------------------- */

/* Reads the provider's next batch on a thread of its own while the engine runs the current
 * one, so that decoding images or inflating .npz members overlaps the run: one batch ahead at
 * most. The provider's arrays are valid only until its next call, so each batch is copied
 * before the next read starts (a copy is cheap next to the run); memory is thus two batches. */
struct prefetch {
    struct qp_provider *p;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int started, want, ready, quit;
    /* the read's result, valid once ready */
    enum qp_status st;
    struct qp_error err;
    const struct qp_array *batch;
    int end;
};

static void *prefetch_main(void *arg) {
    struct prefetch *pf = arg;
    pthread_mutex_lock(&pf->mu);
    for (;;) {
        while (!pf->want && !pf->quit)
            pthread_cond_wait(&pf->cv, &pf->mu);
        if (pf->quit) break;
        pf->want = 0;
        pthread_mutex_unlock(&pf->mu);
        const struct qp_array *batch = NULL;
        int end = 0;
        struct qp_error err = {0};
        enum qp_status st = qp_provider_next(pf->p, &batch, &end, &err);
        pthread_mutex_lock(&pf->mu);
        pf->st = st;
        pf->err = err;
        pf->batch = batch;
        pf->end = end;
        pf->ready = 1;
        pthread_cond_broadcast(&pf->cv);
    }
    pthread_mutex_unlock(&pf->mu);
    return NULL;
}

/* Starts the reader thread. When no thread can be made, batches are read on the caller's
 * thread instead (pf->started stays 0). */
static void prefetch_start(struct prefetch *pf, struct qp_provider *p) {
    memset(pf, 0, sizeof *pf);
    pf->p = p;
    if (pthread_mutex_init(&pf->mu, NULL) != 0) return;
    if (pthread_cond_init(&pf->cv, NULL) != 0) {
        pthread_mutex_destroy(&pf->mu);
        return;
    }
    if (pthread_create(&pf->thread, NULL, prefetch_main, pf) != 0) {
        pthread_cond_destroy(&pf->cv);
        pthread_mutex_destroy(&pf->mu);
        return;
    }
    pf->started = 1;
}

/* Asks for the next batch (read in the background when the thread runs). */
static void prefetch_request(struct prefetch *pf) {
    if (!pf->started) return;
    pthread_mutex_lock(&pf->mu);
    pf->want = 1;
    pf->ready = 0;
    pthread_cond_broadcast(&pf->cv);
    pthread_mutex_unlock(&pf->mu);
}

/* The batch asked for with prefetch_request: waits for the thread (or reads it now). */
static enum qp_status prefetch_take(struct prefetch *pf, const struct qp_array **batch_out,
                                    int *end_out, struct qp_error *err) {
    if (!pf->started) return qp_provider_next(pf->p, batch_out, end_out, err);
    pthread_mutex_lock(&pf->mu);
    while (!pf->ready)
        pthread_cond_wait(&pf->cv, &pf->mu);
    pf->ready = 0;
    enum qp_status st = pf->st;
    *batch_out = pf->batch;
    *end_out = pf->end;
    if (st != QP_OK && err) *err = pf->err;
    pthread_mutex_unlock(&pf->mu);
    return st;
}

/* Lets a read in progress finish, then ends the thread. */
static void prefetch_stop(struct prefetch *pf) {
    if (!pf->started) return;
    pthread_mutex_lock(&pf->mu);
    pf->quit = 1;
    pthread_cond_broadcast(&pf->cv);
    pthread_mutex_unlock(&pf->mu);
    pthread_join(pf->thread, NULL);
    pthread_cond_destroy(&pf->cv);
    pthread_mutex_destroy(&pf->mu);
    pf->started = 0;
}

/* Copies the n arrays of `from` into `to` (buffers in caps[], grown as needed and kept). */
static enum qp_status copy_batch(struct qp_array *to, size_t *caps, const struct qp_array *from,
                                 size_t n, struct qp_error *err) {
    for (size_t i = 0; i < n; i++) {
        if (from[i].nbytes > caps[i]) {
            void *d = realloc(to[i].data, from[i].nbytes);
            if (!d) return qp_error_set(err, QP_ERR_NOMEM, "calibrate: out of memory for a batch");
            to[i].data = d;
            caps[i] = from[i].nbytes;
        }
        void *d = to[i].data;
        if (from[i].nbytes) memcpy(d, from[i].data, from[i].nbytes);
        to[i] = from[i];
        to[i].data = d;
        to[i].owned = 0; /* the buffer belongs to the loop */
    }
    return QP_OK;
}

enum qp_status qp_calibrate_model(const struct qp_model *model, struct qp_provider *provider,
                                  const struct qp_collect_options *o, struct qp_ranges **out,
                                  struct qp_collect_report *report, struct qp_error *err) {
    if (!model || !provider || !o || !out)
        return qp_error_set(err, QP_ERR_USAGE, "calibrate: calibrate_model arguments");
    enum qp_status st = qp_provider_reset(provider, err);
    if (st != QP_OK) return st;
    const struct qp_array *batch = NULL;
    int end = 0;
    if ((st = qp_provider_next(provider, &batch, &end, err)) != QP_OK) return st;
    if (end)
        return qp_error_set(err, QP_ERR_BAD_INPUT, "calibrate: the calibration data hold no batch");
    size_t np = qp_provider_n_inputs(provider);
    if (np > QP_MAX_CALIB_INPUTS)
        return qp_error_set(err, QP_ERR_UNSUPPORTED, "calibrate: %zu inputs (at most %d)", np,
                            QP_MAX_CALIB_INPUTS);
    struct qp_shape shapes[QP_MAX_CALIB_INPUTS];
    qp_provider_shapes(provider, batch, shapes);
    struct qp_collector *c = NULL;
    struct prefetch pf = {0};
    struct qp_array cur[QP_MAX_CALIB_INPUTS] = {0}; /* the batch being run (a copy) */
    size_t caps[QP_MAX_CALIB_INPUTS] = {0};
    if ((st = qp_collector_create(model, o, np, shapes, &c, err)) != QP_OK) return st;
    /* Provider order -> session order, by name. */
    size_t ns = qp_session_n_inputs(c->session);
    size_t map[QP_MAX_CALIB_INPUTS];
    struct qp_array feed_arrays[QP_MAX_CALIB_INPUTS];
    if ((st = qp_provider_map_inputs(provider, c->session, "calibrate", map, err)) != QP_OK)
        goto done;
    uint64_t total = qp_provider_n_samples(provider);
    prefetch_start(&pf, provider);
    while (!end) {
        if ((st = copy_batch(cur, caps, batch, np, err)) != QP_OK) goto done;
        prefetch_request(&pf);
        for (size_t i = 0; i < ns; i++)
            feed_arrays[i] = cur[map[i]];
        if ((st = qp_collector_run(c, ns, feed_arrays, err)) != QP_OK) {
            qp_error_prefix(err, "calibrate: batch %llu", (unsigned long long)c->n_batches + 1);
            goto done;
        }
        if (o->progress) o->progress(c->n_samples, total, o->progress_user);
        if ((st = prefetch_take(&pf, &batch, &end, err)) != QP_OK) goto done;
    }
    st = qp_collector_finish(c, out, report, err);
done:
    prefetch_stop(&pf);
    for (size_t i = 0; i < np; i++)
        free(cur[i].data);
    qp_collector_free(c);
    return st;
}
