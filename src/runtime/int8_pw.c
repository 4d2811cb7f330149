/*
 * The pointwise pass of the integer path (int8_graph.h rt_int8_pw_pass): connected chains of
 * elementwise nodes, with the FakeQuant passes, DequantizeLinear sources and QuantizeLinear
 * sinks around them, become one QP_INT8_DOMAIN "Pointwise" node (kernels/int8_pw.h).
 *
 * A group starts at the earliest eligible node (topological order) whose inputs are known to
 * be float, and grows forward: a reader of a member joins when every other input is a member,
 * a float constant, or a tensor produced before the group's first node (so the group can never
 * depend on its own outputs: no cycle). A DQ (per tensor, of a computed int8 tensor) feeding a
 * member is read as its int8 tensor, dequantized in the pass; a per-tensor int8 Q reading a
 * member ends the group there with an int8 output. Values read outside the group are its outputs.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/size.h"
#include "kernels/int8_conv.h"
#include "kernels/int8_pw.h"
#include "kernels/kernel.h"
#include "runtime/int8_graph.h"
#include "runtime/runtime.h"

#define PW_MAX_NODES 40

struct group {
    int n, member[PW_MAX_NODES]; /* compute nodes, each after the members it reads */
    int n_q, q[QP_PW_MAX_OUT];   /* absorbed QuantizeLinear sinks */
    int seed_pos;                /* topological position of the first member */
    enum qp_dtype fdt;           /* the float side's dtype (FLOAT or FLOAT16; 0: not known) */
};

struct pass {
    struct qp_graph *g;
    size_t nn;         /* nodes before the pass: later ones are Pointwise nodes it made */
    int *pos;          /* node -> topological position (-1: dead or new) */
    unsigned char *in; /* node -> member of the current group */
    unsigned char *done;
    struct rt_int8_report *rep;
    struct qp_error *err;
    int exact;                /* rt_int8_pw_pass's `exact`: only ops that match the engine's */
    unsigned char *near_conv; /* exact: node -> a Conv chain (runtime/fuse.c) may take it */
};

/* Topological position of node n. A Pointwise node the pass made takes its last member's: what
 * it computes only depends on what came before that. */
static int pos_of(const struct pass *ps, const struct qp_node *n) {
    size_t k = (size_t)(n - ps->g->nodes);
    return k < 2 * ps->nn && ps->pos[k] >= 0 ? ps->pos[k] : INT32_MAX;
}

/* ---- eligibility ----------------------------------------------------------------------------- */

static float attr_f(const struct qp_node *n, const char *name, float def) {
    const struct qp_attr *a = qp_node_attr(n, name);
    return a ? a->f : def;
}

/* A constant scalar float input i of n (*out), 1 when there is one. */
static int const_scalar(const struct qp_graph *g, const struct qp_node *n, int i, float *out) {
    const struct qp_tensor *t = i8g_const_of(g, i8g_in_at(n, i));
    return t && t->numel == 1 && i8g_tensor_f(t, 0, out);
}

/* The Pointwise op of node n and its parameters, or -1 when n cannot be a member. */
static int pw_op(const struct qp_graph *g, const struct qp_node *n, float p[3]) {
    static const struct {
        const char *name;
        int op, n_in;
    } tab[] = {{"Add", QP_PW_ADD, 2},
               {"Sub", QP_PW_SUB, 2},
               {"Mul", QP_PW_MUL, 2},
               {"Div", QP_PW_DIV, 2},
               {"Relu", QP_PW_RELU, 1},
               {"Sigmoid", QP_PW_SIGMOID, 1},
               {"Tanh", QP_PW_TANH, 1},
               {"Erf", QP_PW_ERF, 1},
               {"HardSwish", QP_PW_HSWISH, 1},
               {"LeakyRelu", QP_PW_LEAKY, 1},
               {"HardSigmoid", QP_PW_HSIGMOID, 1}};
    if (n->dead || n->n_outputs != 1) return -1;
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++) {
        if (!qp_node_is(n, tab[i].name) || n->n_inputs != tab[i].n_in) continue;
        p[0] = attr_f(n, "alpha", tab[i].op == QP_PW_LEAKY ? 0.01f : 0.2f);
        p[1] = attr_f(n, "beta", 0.5f);
        return tab[i].op;
    }
    if (qp_node_is(n, "Clip")) {
        p[0] = -INFINITY;
        p[1] = INFINITY;
        if (qp_node_attr(n, "min") || qp_node_attr(n, "max")) { /* opset < 11 */
            p[0] = attr_f(n, "min", -INFINITY);
            p[1] = attr_f(n, "max", INFINITY);
            return QP_PW_CLIP;
        }
        for (int i = 1; i < n->n_inputs; i++)
            if (i8g_in_at(n, i) >= 0 && !const_scalar(g, n, i, &p[i - 1])) return -1;
        return QP_PW_CLIP;
    }
    float e;
    if (qp_node_is(n, "Pow") && n->n_inputs == 2 && const_scalar(g, n, 1, &e) && e == 2.0f)
        return QP_PW_SQUARE;
    struct i8g_qparam q;
    if (i8g_is_op(n, "FakeQuant") && i8g_per_tensor(g, n, &q) &&
        (q.dt == QP_DTYPE_INT8 || q.dt == QP_DTYPE_UINT8)) {
        p[0] = q.s;
        p[1] = (float)q.z;
        p[2] = (float)q.dt;
        return QP_PW_FQ;
    }
    if (i8g_is_op(n, "RoundFloat16") && n->n_inputs == 1) return QP_PW_ROUND16;
    return -1;
}

/* pw_op for this pass: on the exact path only the ops whose Pointwise arithmetic is the very
 * arithmetic of the engine's kernel (IEEE add, subtract, multiply, divide; Clip, Relu and
 * LeakyRelu; the FakeQuant and the float16 rounding) and only nodes that no Conv chain of the float
 * fusion (runtime/fuse.c) could take: the exact path must not change what that pass folds. */
static int pass_op(const struct pass *ps, const struct qp_node *n, float p[3]) {
    int op = pw_op(ps->g, n, p);
    if (!ps->exact || op < 0) return op;
    if (ps->near_conv[n - ps->g->nodes]) return -1;
    switch (op) {
    case QP_PW_ADD:
    case QP_PW_SUB:
    case QP_PW_MUL:
    case QP_PW_DIV:
    case QP_PW_CLIP:
    case QP_PW_RELU:
    case QP_PW_LEAKY:
    case QP_PW_FQ:
    case QP_PW_ROUND16:
        return op;
    default:
        return -1;
    }
}

/* Marks the nodes a Conv chain of the float fusion could take: every node of a chain op type
 * (rt_fuse_chain_op) reached from a Conv or ConvTranspose through such nodes only (a superset of
 * what runtime/fuse.c groups, which also needs single readers and constant operands). */
static void mark_near_conv(const struct qp_graph *g, unsigned char *mark) {
    for (size_t t = 0; t < g->n_topo; t++) {
        const struct qp_node *n = &g->nodes[g->topo[t]];
        int root = qp_node_is(n, "Conv") || qp_node_is(n, "ConvTranspose");
        if (n->dead || (!root && !mark[g->topo[t]])) continue;
        for (int o = 0; o < n->n_outputs; o++) {
            if (n->outputs[o] < 0) continue;
            const struct qp_value *v = &g->values[n->outputs[o]];
            for (size_t u = 0; u < v->n_uses; u++)
                if (rt_fuse_chain_op(&g->nodes[v->uses[u].node])) mark[v->uses[u].node] = 1;
        }
    }
}

/* The inputs of n that carry data (Clip's bounds and Pow's exponent are parameters). */
static int data_inputs(const struct qp_node *n) {
    int op = qp_node_is(n, "Clip") || qp_node_is(n, "Pow") || i8g_is_op(n, "FakeQuant");
    return op ? 1 : n->n_inputs;
}

/* ---- growing a group --------------------------------------------------------------------- */

/* The float dtype value v brings into group gr (0: unknown); -1 when it conflicts. */
static int merge_dt(struct group *gr, enum qp_dtype dt) {
    if (!i8g_float_dt(dt)) return 0;
    if (gr->fdt && gr->fdt != dt) return -1;
    gr->fdt = dt;
    return 0;
}

/* Whether external input v (not a member's output) can be read by the group. */
static int external_ok(struct pass *ps, struct group *gr, int v) {
    const struct qp_graph *g = ps->g;
    const struct qp_tensor *c = i8g_const_of(g, v);
    if (c) return i8g_float_dt(c->dtype) && merge_dt(gr, c->dtype) == 0;
    int x;
    struct i8g_qparam q;
    if (i8g_dq_act(g, v, &x, &q) && (q.dt == QP_DTYPE_INT8 || q.dt == QP_DTYPE_UINT8)) {
        const struct qp_node *px = i8g_producer(g, x);
        return (!px || pos_of(ps, px) < gr->seed_pos) && merge_dt(gr, q.sdt) == 0;
    }
    const struct qp_node *p = i8g_producer(g, v);
    if (p && pos_of(ps, p) >= gr->seed_pos) return 0;
    return i8g_known_float(g, v) && merge_dt(gr, g->values[v].dtype) == 0;
}

static int member_value(const struct pass *ps, int v) {
    const struct qp_node *p = i8g_producer(ps->g, v);
    size_t k = p ? (size_t)(p - ps->g->nodes) : ps->nn;
    return k < ps->nn && ps->in[k];
}

/* Node k joins the group when its other inputs are members or readable externals. */
static int try_join(struct pass *ps, struct group *gr, int k) {
    if ((size_t)k >= ps->nn) return 0;
    const struct qp_node *n = &ps->g->nodes[k];
    float p[3];
    if (ps->in[k] || ps->done[k] || gr->n == PW_MAX_NODES || pass_op(ps, n, p) < 0) return 0;
    struct group save = *gr;
    for (int i = 0; i < data_inputs(n); i++) {
        int v = i8g_in_at(n, i);
        if (v < 0 || member_value(ps, v)) continue;
        if (!external_ok(ps, gr, v)) {
            *gr = save;
            return 0;
        }
    }
    gr->member[gr->n++] = k;
    ps->in[k] = 1;
    return 1;
}

/* A per-tensor int8 Q that reads member value v and is v's only reader: the group's sink. */
static void try_sink(struct pass *ps, struct group *gr, int v) {
    struct i8g_qparam q;
    int u = i8g_sole_q(ps->g, v, &q);
    if (u < 0 || (size_t)u >= ps->nn || gr->n_q == QP_PW_MAX_OUT || ps->done[u]) return;
    if (merge_dt(gr, q.sdt)) return;
    for (int i = 0; i < gr->n_q; i++)
        if (gr->q[i] == u) return;
    gr->q[gr->n_q++] = u;
}

/* Readers of value v may join (those after the group's first node). */
static void join_readers(struct pass *ps, struct group *gr, int v) {
    const struct qp_value *val = &ps->g->values[v];
    for (size_t u = 0; u < val->n_uses; u++) {
        int k = val->uses[u].node;
        if ((size_t)k < ps->nn && pos_of(ps, &ps->g->nodes[k]) > gr->seed_pos) try_join(ps, gr, k);
    }
}

/* Members' readers join, and so do the other readers of the group's computed inputs (the
 * branches a tensor fans out to: x and x + 3 of a HardSwish both read the Conv's output). */
static void grow(struct pass *ps, struct group *gr) {
    for (int m = 0; m < gr->n; m++) { /* gr->n grows while we walk */
        const struct qp_node *n = &ps->g->nodes[gr->member[m]];
        int out = n->outputs[0];
        for (int i = 0; i < data_inputs(n); i++) {
            int v = i8g_in_at(&ps->g->nodes[gr->member[m]], i);
            if (v >= 0 && !member_value(ps, v) && !i8g_const_of(ps->g, v)) join_readers(ps, gr, v);
        }
        join_readers(ps, gr, out);
    }
    for (int m = 0; m < gr->n; m++)
        try_sink(ps, gr, ps->g->nodes[gr->member[m]].outputs[0]);
}

/* ---- emitting ------------------------------------------------------------------------------ */

struct emit {
    int n_in, in_v[QP_PW_MAX_IN], in_q[QP_PW_MAX_IN];
    int dq_node[QP_PW_MAX_IN];
    int n_out, out_v[QP_PW_MAX_OUT], out_reg[QP_PW_MAX_OUT], out_q[QP_PW_MAX_OUT];
    enum qp_dtype out_dt[QP_PW_MAX_OUT];
    int n_prog;
    int64_t prog[5 * PW_MAX_NODES];
    int n_par;
    float par[4 * PW_MAX_NODES + 2 * (QP_PW_MAX_IN + QP_PW_MAX_OUT)];
    int reg_of[PW_MAX_NODES]; /* per member */
    int n_regs;
};

static int add_par(struct emit *e, const float *v, int n) {
    int at = e->n_par;
    for (int i = 0; i < n; i++)
        e->par[e->n_par++] = v[i];
    return at;
}

/* The operand for value v: a member's register or an input (added on first use). */
static int operand(const struct pass *ps, const struct group *gr, struct emit *e, int v) {
    for (int m = 0; m < gr->n; m++)
        if (ps->g->nodes[gr->member[m]].outputs[0] == v) return e->reg_of[m];
    int x, dq = -1, q = -1;
    struct i8g_qparam qp;
    if (!i8g_const_of(ps->g, v) && i8g_dq_act(ps->g, v, &x, &qp)) {
        dq = ps->g->values[v].producer;
        float sz[2] = {qp.s, (float)qp.z};
        for (int i = 0; i < e->n_in; i++)
            if (e->in_v[i] == x && e->in_q[i] >= 0 && e->par[e->in_q[i]] == qp.s) return -1 - i;
        q = add_par(e, sz, 2);
        v = x;
    }
    for (int i = 0; i < e->n_in; i++)
        if (e->in_v[i] == v && e->in_q[i] < 0 && q < 0) return -1 - i;
    if (e->n_in == QP_PW_MAX_IN) return INT32_MIN;
    e->in_v[e->n_in] = v;
    e->in_q[e->n_in] = q;
    e->dq_node[e->n_in] = dq;
    return -1 - e->n_in++;
}

/* Whether member m's value is read after instruction `at` (or outside the group). */
static int live_after(const struct pass *ps, const struct group *gr, int m, int at) {
    const struct qp_value *v = &ps->g->values[ps->g->nodes[gr->member[m]].outputs[0]];
    if (v->is_graph_output) return 1;
    for (size_t u = 0; u < v->n_uses; u++) {
        int c = v->uses[u].node, j = -1;
        for (int k = 0; k < gr->n; k++)
            if (gr->member[k] == c) j = k;
        if (j < 0 || j > at) return 1;
    }
    return 0;
}

/* Registers by liveness: an operand's register is free again after its last reader. */
static int program(const struct pass *ps, const struct group *gr, struct emit *e) {
    int busy[QP_PW_MAX_REGS] = {0}, owner[QP_PW_MAX_REGS];
    for (int m = 0; m < gr->n; m++) {
        const struct qp_node *n = &ps->g->nodes[gr->member[m]];
        float p[3];
        int op = pass_op(ps, n, p), ops[2] = {0, 0};
        for (int i = 0; i < data_inputs(n); i++)
            if ((ops[i] = operand(ps, gr, e, i8g_in_at(n, i))) == INT32_MIN) return 0;
        for (int r = 0; r < QP_PW_MAX_REGS; r++) /* free what this node read last */
            if (busy[r] && !live_after(ps, gr, owner[r], m)) busy[r] = 0;
        int d = 0;
        while (d < QP_PW_MAX_REGS && busy[d])
            d++;
        if (d == QP_PW_MAX_REGS) return 0;
        busy[d] = 1;
        owner[d] = m;
        e->reg_of[m] = d;
        if (d + 1 > e->n_regs) e->n_regs = d + 1;
        int64_t *c = e->prog + 5 * e->n_prog++;
        int np = qp_pw_n_params(op);
        c[0] = op;
        c[1] = d;
        c[2] = ops[0];
        c[3] = ops[1];
        c[4] = np ? add_par(e, p, np) : -1;
    }
    return 1;
}

static int outputs(struct pass *ps, const struct group *gr, struct emit *e) {
    for (int m = 0; m < gr->n; m++) {
        int v = ps->g->nodes[gr->member[m]].outputs[0];
        for (int i = 0; i < gr->n_q; i++)
            if (i8g_in_at(&ps->g->nodes[gr->q[i]], 0) == v) {
                struct i8g_qparam q;
                i8g_per_tensor(ps->g, &ps->g->nodes[gr->q[i]], &q);
                float sz[2] = {q.s, (float)q.z};
                if (e->n_out == QP_PW_MAX_OUT) return 0;
                e->out_v[e->n_out] = ps->g->nodes[gr->q[i]].outputs[0];
                e->out_reg[e->n_out] = e->reg_of[m];
                e->out_q[e->n_out] = add_par(e, sz, 2);
                e->out_dt[e->n_out++] = q.dt;
            }
        if (!live_after(ps, gr, m, gr->n)) continue;
        int quantized_only = 0;
        for (int i = 0; i < gr->n_q; i++)
            quantized_only |= i8g_in_at(&ps->g->nodes[gr->q[i]], 0) == v;
        if (quantized_only) continue; /* its one reader is the sink */
        if (e->n_out == QP_PW_MAX_OUT) return 0;
        e->out_v[e->n_out] = v;
        e->out_reg[e->n_out] = e->reg_of[m];
        e->out_q[e->n_out] = -1;
        e->out_dt[e->n_out++] = gr->fdt ? gr->fdt : QP_DTYPE_FLOAT;
    }
    return e->n_out > 0;
}

/* `fast`: the kernel may compile its fast program (int8_pw_impl.h): not on the exact path. */
static int set_attrs(struct qp_graph *g, int nn, const struct emit *e, int fast) {
    int64_t iq[QP_PW_MAX_IN], tame[QP_PW_MAX_IN], oreg[QP_PW_MAX_OUT], oq[QP_PW_MAX_OUT],
        odt[QP_PW_MAX_OUT];
    int n_tame = 0;
    for (int i = 0; i < e->n_in; i++) {
        iq[i] = e->in_q[i];
        /* half the kernel's limit: the bound is of exact values, the kernel's are rounded */
        tame[i] = fast && e->in_q[i] < 0 &&
                  i8g_magnitude_bound(g, e->in_v[i]) <= 0.5 * (double)QP_PW_TAME;
        n_tame += (int)tame[i];
    }
    for (int o = 0; o < e->n_out; o++) {
        oreg[o] = e->out_reg[o];
        oq[o] = e->out_q[o];
        odt[o] = e->out_dt[o];
    }
    return i8g_add_ints(g, nn, "pw_prog", 5 * e->n_prog, e->prog) &&
           i8g_add_floats(g, nn, "pw_params", e->n_par, e->par) &&
           i8g_add_int(g, nn, "pw_regs", e->n_regs) &&
           i8g_add_ints(g, nn, "pw_in_q", e->n_in, iq) &&
           i8g_add_ints(g, nn, "pw_out", e->n_out, oreg) &&
           i8g_add_ints(g, nn, "pw_out_q", e->n_out, oq) &&
           i8g_add_ints(g, nn, "pw_out_dt", e->n_out, odt) &&
           (!fast || i8g_add_int(g, nn, "pw_fast", 1)) &&
           (!n_tame || i8g_add_ints(g, nn, "pw_in_tame", e->n_in, tame));
}

/* The decisions of the Q/DQ nodes the group absorbs: its sinks, the DQs it reads through, and
 * the Q/DQ pairs of its FakeQuant members (their indices in the report: attribute qp_decisions). */
static int report(struct pass *ps, const struct group *gr, const struct emit *e, const char *name,
                  int n_dead_dq) {
    char into[160];
    snprintf(into, sizeof into, "Pointwise '%.80s' (%d nodes%s%s)", name,
             gr->n + gr->n_q + n_dead_dq, e->n_in > 0 ? ", one pass" : "",
             gr->n_q ? ", int8 output" : ", float output");
    for (int i = 0; i < gr->n_q; i++)
        if (!i8g_note(ps->rep, &ps->g->nodes[gr->q[i]], 1, into, "")) return 0;
    for (int i = 0; i < e->n_in; i++)
        if (e->dq_node[i] >= 0 && !i8g_note(ps->rep, &ps->g->nodes[e->dq_node[i]], 1, into, ""))
            return 0;
    for (int m = 0; m < gr->n; m++) {
        const int64_t *d;
        int64_t nd = qp_kattr_ints(&ps->g->nodes[gr->member[m]], "qp_decisions", &d);
        for (int64_t i = 0; i < nd; i++) {
            size_t k = (size_t)d[i];
            if (k >= ps->rep->n) continue;
            ps->rep->d[k].fused = 1;
            snprintf(ps->rep->text[k][0], sizeof ps->rep->text[k][0], "%s", into);
            ps->rep->text[k][1][0] = 0;
        }
    }
    return 1;
}

/* Replaces the group by its Pointwise node. 1 done, 0 failed (err set), -1 nothing to do. */
static int emit_group(struct pass *ps, const struct group *gr) {
    struct qp_graph *g = ps->g;
    struct emit *e = calloc(1, sizeof *e);
    if (!e) return 0;
    int rc = -1;
    if (!program(ps, gr, e) || !outputs(ps, gr, e)) goto out;
    const char *in_names[QP_PW_MAX_IN], *out_names[QP_PW_MAX_OUT];
    for (int i = 0; i < e->n_in; i++)
        in_names[i] = i8g_vname(g, e->in_v[i]);
    for (int o = 0; o < e->n_out; o++)
        out_names[o] = i8g_vname(g, e->out_v[o]);
    char name[256];
    snprintf(name, sizeof name, "%s",
             g->nodes[gr->member[0]].name ? g->nodes[gr->member[0]].name : "pointwise");
    /* DQ nodes read through go when nothing else reads them */
    int n_dq = 0;
    rc = 0;
    for (int m = gr->n - 1; m >= 0; m--)
        if (qp_graph_remove_node(g, gr->member[m], ps->err)) goto out;
    for (int i = 0; i < gr->n_q; i++)
        if (qp_graph_remove_node(g, gr->q[i], ps->err)) goto out;
    for (int i = 0; i < e->n_in; i++) {
        int d = e->dq_node[i];
        if (d >= 0 && !g->nodes[d].dead && !g->values[g->nodes[d].outputs[0]].n_uses &&
            !g->values[g->nodes[d].outputs[0]].is_graph_output) {
            if (qp_graph_remove_node(g, d, ps->err)) goto out;
            n_dq++;
        }
    }
    int nn;
    if (qp_graph_add_node(g, name, "Pointwise", QP_INT8_DOMAIN, e->n_in, in_names, e->n_out,
                          out_names, &nn, ps->err) ||
        !set_attrs(g, nn, e, !ps->exact) || !report(ps, gr, e, name, n_dq))
        goto out;
    int last = 0;
    for (int m = 0; m < gr->n; m++)
        last = ps->pos[gr->member[m]] > last ? ps->pos[gr->member[m]] : last;
    if ((size_t)nn < 2 * ps->nn) ps->pos[nn] = last;
    ps->rep->n_pointwise++;
    rc = 1;
out:
    free(e);
    return rc;
}

/* How many of the group's external inputs are DQ outputs it would read as int8 (a lone Add of
 * two DQs is worth a node: three passes become one). */
static int dq_inputs(const struct pass *ps, const struct group *gr) {
    int k = 0;
    for (int m = 0; m < gr->n; m++) {
        const struct qp_node *n = &ps->g->nodes[gr->member[m]];
        for (int i = 0; i < data_inputs(n); i++) {
            int v = i8g_in_at(n, i), x;
            struct i8g_qparam q;
            k += v >= 0 && !member_value(ps, v) && i8g_dq_act(ps->g, v, &x, &q);
        }
    }
    return k;
}

int rt_int8_pw_pass(struct qp_graph *g, int exact, struct rt_int8_report *rep,
                    struct qp_error *err) {
    if (qp_graph_toposort(g, err)) return 0;
    size_t nn = g->n_nodes;
    struct pass ps = {g,
                      nn,
                      qp_malloc_n(2 * nn + 1, sizeof(int)),
                      calloc(nn + 1, 1),
                      calloc(nn + 1, 1),
                      rep,
                      err,
                      exact,
                      calloc(nn + 1, 1)};
    int ok = ps.pos && ps.in && ps.done && ps.near_conv;
    if (ok && exact) mark_near_conv(g, ps.near_conv);
    for (size_t k = 0; ok && k < 2 * nn + 1; k++)
        ps.pos[k] = -1;
    for (size_t t = 0; ok && t < g->n_topo; t++)
        ps.pos[g->topo[t]] = (int)t;
    size_t n_topo = g->n_topo;
    int *order = ok ? qp_malloc_n(n_topo + 1, sizeof *order) : NULL;
    ok = ok && order;
    if (ok) memcpy(order, g->topo, n_topo * sizeof *order);
    for (size_t t = 0; ok && t < n_topo; t++) {
        int k = order[t];
        float p[3];
        const struct qp_node *n = &g->nodes[k];
        if (n->dead || ps.done[k] || pass_op(&ps, n, p) < 0) continue;
        struct group gr = {.seed_pos = (int)t};
        if (!try_join(&ps, &gr, k)) continue;
        int any_float = 0;
        for (int i = 0; i < data_inputs(n); i++)
            any_float |= i8g_known_float(g, i8g_in_at(n, i));
        if (any_float) grow(&ps, &gr);
        for (int m = 0; m < gr.n; m++) {
            ps.in[gr.member[m]] = 0;
            ps.done[gr.member[m]] = 1;
        }
        for (int i = 0; i < gr.n_q; i++)
            ps.done[gr.q[i]] = 1;
        if (!any_float || gr.n + gr.n_q + dq_inputs(&ps, &gr) < 2) continue;
        if (emit_group(&ps, &gr) == 0) ok = 0;
    }
    free(order);
    free(ps.pos);
    free(ps.in);
    free(ps.done);
    free(ps.near_conv);
    return ok;
}
