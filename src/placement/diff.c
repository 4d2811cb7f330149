/* Q/DQ topology diff at consumer-input-slot level (diff.h). */
#include "placement/diff.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/size.h"
#include "core/arena.h"

static enum qp_status nomem(struct qp_error *err) {
    return qp_error_set(err, QP_ERR_NOMEM, "diff: out of memory");
}

static struct qp_qdq_slots *slots_new(void) {
    struct qp_qdq_slots *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->arena = qp_arena_create();
    if (!s->arena) {
        free(s);
        return NULL;
    }
    return s;
}

void qp_qdq_slots_free(struct qp_qdq_slots *s) {
    if (!s) return;
    free(s->slots);
    qp_arena_free(s->arena);
    free(s);
}

static int push(struct qp_qdq_slots *s, const char *node, int input, const char *tensor, int weight,
                const char *prod, const char *cons) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        struct qp_qdq_slot *ns = qp_realloc_n(s->slots, cap, sizeof *ns);
        if (!ns) return 0;
        s->slots = ns;
        s->cap = cap;
    }
    struct qp_qdq_slot *e = &s->slots[s->n];
    e->node = qp_arena_strdup(s->arena, node);
    e->tensor = qp_arena_strdup(s->arena, tensor);
    e->producer_op = qp_arena_strdup(s->arena, prod ? prod : "?");
    e->consumer_op = qp_arena_strdup(s->arena, cons ? cons : "?");
    e->input = input;
    e->weight = weight;
    if (!e->node || !e->tensor || !e->producer_op || !e->consumer_op) return 0;
    s->n++;
    return 1;
}

static int slot_cmp(const void *pa, const void *pb) {
    const struct qp_qdq_slot *a = pa, *b = pb;
    int c = strcmp(a->node, b->node);
    if (c) return c;
    return (a->input > b->input) - (a->input < b->input);
}

static const char *producer_label(const struct qp_graph *g, int v) {
    if (!g || v < 0) return "?";
    const struct qp_value *val = &g->values[v];
    if (val->producer >= 0) return g->nodes[val->producer].op_type;
    if (val->initializer >= 0) return "initializer";
    if (val->is_graph_input) return "input";
    return "?";
}

static int is_op(const struct qp_graph *g, int v, const char *op) {
    if (v < 0) return -1;
    int p = g->values[v].producer;
    if (p < 0 || g->nodes[p].dead || strcmp(g->nodes[p].op_type, op) != 0) return -1;
    return p;
}

/* The original tensor behind DQ node `d`: sets *orig and *weight; 0 when it resolves to none. */
static int resolve_dq(const struct qp_graph *g, int d, int *orig, int *weight) {
    const struct qp_node *dq = &g->nodes[d];
    if (dq->n_inputs < 1 || dq->inputs[0] < 0) return 0;
    int x = dq->inputs[0];
    int q = is_op(g, x, "QuantizeLinear");
    if (q >= 0) {
        if (g->nodes[q].n_inputs < 1 || g->nodes[q].inputs[0] < 0) return 0;
        *orig = g->nodes[q].inputs[0];
        *weight = qp_placement_weight_tensor(g, *orig) != NULL;
        return 1;
    }
    if (qp_placement_weight_tensor(g, x)) {
        *orig = x;
        *weight = 1;
        const char *name = g->values[x].name;
        size_t n = strlen(name), k = strlen(QP_QUANTIZED_SUFFIX);
        if (n > k && strcmp(name + n - k, QP_QUANTIZED_SUFFIX) == 0) {
            char *base = strndup(name, n - k);
            if (base) {
                int b = qp_graph_find_value(g, base);
                if (b >= 0) *orig = b;
                free(base);
            }
        }
        return 1;
    }
    return 0;
}

enum qp_status qp_qdq_slots_from_model(const struct qp_graph *g, struct qp_qdq_slots **out,
                                       struct qp_error *err) {
    struct qp_qdq_slots *s = slots_new();
    if (!s) return nomem(err);
    for (size_t i = 0; i < g->n_nodes; i++) {
        const struct qp_node *c = &g->nodes[i];
        if (c->dead || strcmp(c->op_type, "QuantizeLinear") == 0 ||
            strcmp(c->op_type, "DequantizeLinear") == 0)
            continue;
        for (int k = 0; k < c->n_inputs; k++) {
            int v = c->inputs[k];
            int d = is_op(g, v, "DequantizeLinear");
            int orig = -1, weight = 0;
            if (d < 0 || !resolve_dq(g, d, &orig, &weight)) continue;
            if (!push(s, c->name, k, g->values[orig].name, weight, producer_label(g, orig),
                      c->op_type)) {
                qp_qdq_slots_free(s);
                return nomem(err);
            }
        }
    }
    if (s->n) qsort(s->slots, s->n, sizeof *s->slots, slot_cmp);
    *out = s;
    return QP_OK;
}

enum qp_status qp_qdq_slots_from_placement(const struct qp_placement *p, const struct qp_graph *g,
                                           struct qp_qdq_slots **out, struct qp_error *err) {
    struct qp_qdq_slots *s = slots_new();
    if (!s) return nomem(err);
    for (size_t k = 0; k < p->n_edges + p->n_weights; k++) {
        int weight = k >= p->n_edges;
        const char *node = weight ? p->weights[k - p->n_edges].node : p->edges[k].node;
        const char *tensor = weight ? p->weights[k - p->n_edges].tensor : p->edges[k].tensor;
        int input = weight ? p->weights[k - p->n_edges].input : p->edges[k].input;
        const char *prod = "?", *cons = "?";
        if (g) {
            int n = qp_graph_find_node(g, node);
            if (n >= 0) cons = g->nodes[n].op_type;
            prod = producer_label(g, qp_graph_find_value(g, tensor));
        }
        if (!push(s, node, input, tensor, weight, prod, cons)) {
            qp_qdq_slots_free(s);
            return nomem(err);
        }
    }
    if (s->n) qsort(s->slots, s->n, sizeof *s->slots, slot_cmp);
    *out = s;
    return QP_OK;
}

static int add_to_group(struct qp_qdq_diff *d, size_t *cap, int side, const struct qp_qdq_slot *e) {
    size_t i = 0;
    for (; i < d->n_groups; i++) {
        struct qp_qdq_diff_group *gr = &d->groups[i];
        if (gr->side == side && gr->weight == e->weight &&
            strcmp(gr->producer_op, e->producer_op) == 0 &&
            strcmp(gr->consumer_op, e->consumer_op) == 0)
            break;
    }
    if (i == d->n_groups) {
        if (d->n_groups == *cap) {
            size_t nc = *cap ? *cap * 2 : 16;
            struct qp_qdq_diff_group *ng = qp_realloc_n(d->groups, nc, sizeof *ng);
            if (!ng) return 0;
            d->groups = ng;
            *cap = nc;
        }
        memset(&d->groups[i], 0, sizeof d->groups[i]);
        d->groups[i].side = side;
        d->groups[i].weight = e->weight;
        d->groups[i].producer_op = e->producer_op;
        d->groups[i].consumer_op = e->consumer_op;
        d->n_groups++;
    }
    struct qp_qdq_diff_group *gr = &d->groups[i];
    gr->count++;
    if (gr->n_examples < QP_DIFF_EXAMPLES) gr->examples[gr->n_examples++] = e;
    return 1;
}

static int group_cmp(const void *pa, const void *pb) {
    const struct qp_qdq_diff_group *a = pa, *b = pb;
    if (a->side != b->side) return a->side - b->side;
    if (a->count != b->count) return a->count < b->count ? 1 : -1;
    int c = strcmp(a->producer_op, b->producer_op);
    return c ? c : strcmp(a->consumer_op, b->consumer_op);
}

enum qp_status qp_qdq_diff(const struct qp_qdq_slots *a, const struct qp_qdq_slots *b,
                           struct qp_qdq_diff *out, struct qp_error *err) {
    memset(out, 0, sizeof *out);
    size_t cap = 0, i = 0, j = 0;
    while (i < a->n || j < b->n) {
        int c = i == a->n ? 1 : j == b->n ? -1 : slot_cmp(&a->slots[i], &b->slots[j]);
        const struct qp_qdq_slot *ea = c <= 0 ? &a->slots[i] : NULL;
        const struct qp_qdq_slot *eb = c >= 0 ? &b->slots[j] : NULL;
        if (ea && eb && ea->weight == eb->weight && strcmp(ea->tensor, eb->tensor) == 0) {
            out->same[ea->weight]++;
        } else {
            if (ea) {
                out->a_only[ea->weight]++;
                if (!add_to_group(out, &cap, 0, ea)) goto oom;
            }
            if (eb) {
                out->b_only[eb->weight]++;
                if (!add_to_group(out, &cap, 1, eb)) goto oom;
            }
        }
        if (ea) i++;
        if (eb) j++;
    }
    if (out->n_groups) qsort(out->groups, out->n_groups, sizeof *out->groups, group_cmp);
    return QP_OK;
oom:
    qp_qdq_diff_release(out);
    return nomem(err);
}

int qp_qdq_diff_same(const struct qp_qdq_diff *d) {
    return d->a_only[0] + d->a_only[1] + d->b_only[0] + d->b_only[1] == 0;
}

void qp_qdq_diff_release(struct qp_qdq_diff *d) {
    if (!d) return;
    free(d->groups);
    memset(d, 0, sizeof *d);
}

static const char *side_name(int side) {
    return side ? "B ONLY" : "A ONLY";
}

static cJSON *counts_json(const size_t *c) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    if (!cJSON_AddNumberToObject(o, "edges", (double)c[0]) ||
        !cJSON_AddNumberToObject(o, "weights", (double)c[1])) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static enum qp_status format_json(const struct qp_qdq_diff *d, const char *na, const char *nb,
                                  char **text_out, struct qp_error *err) {
    cJSON *root = cJSON_CreateObject(), *groups = NULL;
    if (!root) return nomem(err);
    int ok = cJSON_AddStringToObject(root, "a", na ? na : "A") &&
             cJSON_AddStringToObject(root, "b", nb ? nb : "B") &&
             cJSON_AddBoolToObject(root, "same", qp_qdq_diff_same(d));
    cJSON *c;
    ok = ok && (c = counts_json(d->same)) && cJSON_AddItemToObject(root, "same_slots", c);
    ok = ok && (c = counts_json(d->a_only)) && cJSON_AddItemToObject(root, "a_only", c);
    ok = ok && (c = counts_json(d->b_only)) && cJSON_AddItemToObject(root, "b_only", c);
    ok = ok && (groups = cJSON_AddArrayToObject(root, "differences"));
    for (size_t i = 0; ok && i < d->n_groups; i++) {
        const struct qp_qdq_diff_group *gr = &d->groups[i];
        cJSON *o = cJSON_CreateObject(), *ex = NULL;
        ok = o && cJSON_AddItemToArray(groups, o);
        ok = ok && cJSON_AddStringToObject(o, "side", side_name(gr->side)) &&
             cJSON_AddStringToObject(o, "kind", gr->weight ? "weight" : "edge") &&
             cJSON_AddStringToObject(o, "producer_op", gr->producer_op) &&
             cJSON_AddStringToObject(o, "consumer_op", gr->consumer_op) &&
             cJSON_AddNumberToObject(o, "count", (double)gr->count) &&
             (ex = cJSON_AddArrayToObject(o, "examples"));
        for (size_t k = 0; ok && k < gr->n_examples; k++) {
            cJSON *e = cJSON_CreateObject();
            ok = e && cJSON_AddItemToArray(ex, e);
            ok = ok && cJSON_AddStringToObject(e, "tensor", gr->examples[k]->tensor) &&
                 cJSON_AddStringToObject(e, "node", gr->examples[k]->node) &&
                 cJSON_AddNumberToObject(e, "input", gr->examples[k]->input);
        }
    }
    char *text = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!text) return nomem(err);
    size_t n = strlen(text);
    char *copy = malloc(n + 2);
    if (!copy) {
        cJSON_free(text);
        return nomem(err);
    }
    memcpy(copy, text, n);
    copy[n] = '\n';
    copy[n + 1] = '\0';
    cJSON_free(text);
    *text_out = copy;
    return QP_OK;
}

enum qp_status qp_qdq_diff_format(const struct qp_qdq_diff *d, const char *name_a,
                                  const char *name_b, int json, char **text_out,
                                  struct qp_error *err) {
    if (json) return format_json(d, name_a, name_b, text_out, err);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return nomem(err);
    fprintf(f, "A: %s\nB: %s\n", name_a ? name_a : "A", name_b ? name_b : "B");
    fprintf(f, "%-8s %10s %10s\n", "", "edges", "weights");
    fprintf(f, "%-8s %10zu %10zu\n", "SAME", d->same[0], d->same[1]);
    fprintf(f, "%-8s %10zu %10zu\n", "A ONLY", d->a_only[0], d->a_only[1]);
    fprintf(f, "%-8s %10zu %10zu\n", "B ONLY", d->b_only[0], d->b_only[1]);
    if (d->n_groups) fprintf(f, "\ndifferences by pattern (producer -> consumer):\n");
    for (size_t i = 0; i < d->n_groups; i++) {
        const struct qp_qdq_diff_group *gr = &d->groups[i];
        fprintf(f, "  %-6s %-6s %s -> %s: %zu\n", side_name(gr->side),
                gr->weight ? "weight" : "edge", gr->producer_op, gr->consumer_op, gr->count);
        for (size_t k = 0; k < gr->n_examples; k++)
            fprintf(f, "      e.g. '%s' -> node '%s' input %d\n", gr->examples[k]->tensor,
                    gr->examples[k]->node, gr->examples[k]->input);
    }
    fprintf(f, "%s\n", qp_qdq_diff_same(d) ? "result: SAME" : "result: DIFFERENT");
    if (fclose(f) != 0 || !buf) {
        free(buf);
        return nomem(err);
    }
    *text_out = buf;
    return QP_OK;
}

/* ---- the public diff (qplace/placement.h) ----------------------------------------------- */

static enum qp_status side_slots(const struct qp_diff_side *s, struct qp_qdq_slots **out,
                                 struct qp_error *err) {
    if (!s || (!s->placement && !s->model))
        return qp_error_set(err, QP_ERR_USAGE, "diff: a side needs a model or a placement");
    if (s->placement)
        return qp_qdq_slots_from_placement(s->placement, s->model ? s->model->graph : NULL, out,
                                           err);
    return qp_qdq_slots_from_model(s->model->graph, out, err);
}

enum qp_status qp_placement_diff(const struct qp_diff_side *a, const struct qp_diff_side *b,
                                 int json, struct qp_diff_counts *counts_out, char **text_out,
                                 struct qp_error *err) {
    struct qp_qdq_slots *sa = NULL, *sb = NULL;
    struct qp_qdq_diff d = {0};
    enum qp_status st = side_slots(a, &sa, err);
    if (st == QP_OK) st = side_slots(b, &sb, err);
    if (st == QP_OK) st = qp_qdq_diff(sa, sb, &d, err);
    if (st == QP_OK && text_out)
        st = qp_qdq_diff_format(&d, a->name ? a->name : "A", b->name ? b->name : "B", json,
                                text_out, err);
    if (st == QP_OK && counts_out)
        for (int k = 0; k < 2; k++) {
            counts_out->same[k] = d.same[k];
            counts_out->a_only[k] = d.a_only[k];
            counts_out->b_only[k] = d.b_only[k];
        }
    qp_qdq_diff_release(&d);
    qp_qdq_slots_free(sa);
    qp_qdq_slots_free(sb);
    return st;
}
