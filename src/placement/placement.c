#include "placement/placement.h"
#include "core/file.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/arena.h"
#include "core/grow.h"
#include "core/size.h"

/* ---- storage ---------------------------------------------------------------------------- */

static uint64_t slot_hash(const char *node, int input) {
    uint64_t h = 1469598103934665603ull;
    for (const unsigned char *s = (const unsigned char *)node; *s; s++)
        h = (h ^ *s) * 1099511628211ull;
    h = (h ^ (uint64_t)(unsigned)input) * 1099511628211ull;
    return h ^ (h >> 29);
}

/* Entry code in the hash: 2*index + is_weight. */
static const char *code_node(const struct qp_placement *p, int code, int *input) {
    size_t i = (size_t)code >> 1;
    if (code & 1) {
        *input = p->weights[i].input;
        return p->weights[i].node;
    }
    *input = p->edges[i].input;
    return p->edges[i].node;
}

static int hash_lookup(const struct qp_placement *p, const char *node, int input) {
    if (!p->hash_cap) return -1;
    size_t mask = p->hash_cap - 1;
    for (size_t k = slot_hash(node, input) & mask;; k = (k + 1) & mask) {
        int c = p->hash[k];
        if (c < 0) return -1;
        int in;
        const char *nm = code_node(p, c, &in);
        if (in == input && strcmp(nm, node) == 0) return c;
    }
}

static void hash_put(struct qp_placement *p, int code) {
    int input;
    const char *node = code_node(p, code, &input);
    size_t mask = p->hash_cap - 1;
    size_t k = slot_hash(node, input) & mask;
    while (p->hash[k] >= 0)
        k = (k + 1) & mask;
    p->hash[k] = code;
    p->hash_n++;
}

static int hash_rebuild(struct qp_placement *p, size_t need) {
    size_t cap = p->hash_cap ? p->hash_cap : 64;
    while (cap < need * 2)
        if (!qp_size_mul(cap, 2, &cap)) return 0;
    if (cap != p->hash_cap) {
        int *h = qp_malloc_n(cap, sizeof *h);
        if (!h) return 0;
        free(p->hash);
        p->hash = h;
        p->hash_cap = cap;
    }
    memset(p->hash, 0xff, p->hash_cap * sizeof *p->hash);
    p->hash_n = 0;
    for (size_t i = 0; i < p->n_edges; i++)
        hash_put(p, (int)(i * 2));
    for (size_t i = 0; i < p->n_weights; i++)
        hash_put(p, (int)(i * 2 + 1));
    return 1;
}

struct qp_placement *qp_placement_create(void) {
    struct qp_placement *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->arena = qp_arena_create();
    if (!p->arena) {
        free(p);
        return NULL;
    }
    return p;
}

void qp_placement_free(struct qp_placement *p) {
    if (!p) return;
    free(p->edges);
    free(p->weights);
    free(p->hash);
    qp_arena_free(p->arena);
    free(p);
}

static enum qp_status check_args(const char *tensor, const char *node, int input,
                                 struct qp_error *err) {
    if (!tensor || !*tensor || !node || !*node)
        return qp_error_set(err, QP_ERR_USAGE, "placement: empty tensor or node name");
    if (input < 0)
        return qp_error_set(err, QP_ERR_USAGE, "placement: node '%s': negative input index %d",
                            node, input);
    return QP_OK;
}

/* Room for one more entry in the hash (and the int code range). */
static enum qp_status reserve_slot(struct qp_placement *p, struct qp_error *err) {
    size_t total = p->n_edges + p->n_weights + 1;
    if (total > (size_t)INT32_MAX / 2)
        return qp_error_set(err, QP_ERR_NOMEM, "placement: too many entries");
    if (total * 2 > p->hash_cap && !hash_rebuild(p, total * 2))
        return qp_error_set(err, QP_ERR_NOMEM, "placement: out of memory");
    return QP_OK;
}

enum qp_status qp_placement_add_edge(struct qp_placement *p, const char *tensor, const char *node,
                                     int input, const char *reason, struct qp_error *err) {
    enum qp_status st = check_args(tensor, node, input, err);
    if (st != QP_OK) return st;
    int c = hash_lookup(p, node, input);
    if (c >= 0) {
        if (!(c & 1) && strcmp(p->edges[c >> 1].tensor, tensor) == 0) return QP_OK;
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "placement: node '%s' input %d already holds a %s quantizer on '%s'",
                            node, input, (c & 1) ? "weight" : "activation",
                            (c & 1) ? p->weights[c >> 1].tensor : p->edges[c >> 1].tensor);
    }
    if ((st = reserve_slot(p, err)) != QP_OK) return st;
    if (!qp_grow((void **)&p->edges, &p->cap_edges, p->n_edges + 1, sizeof *p->edges))
        return qp_error_set(err, QP_ERR_NOMEM, "placement: out of memory");
    struct qp_qedge e = {.tensor = qp_arena_strdup(p->arena, tensor),
                         .node = qp_arena_strdup(p->arena, node),
                         .input = input,
                         .reason = qp_arena_strdup(p->arena, reason ? reason : ""),
                         .node_index = -1,
                         .value_index = -1};
    if (!e.tensor || !e.node || !e.reason)
        return qp_error_set(err, QP_ERR_NOMEM, "placement: out of memory");
    p->edges[p->n_edges++] = e;
    hash_put(p, (int)((p->n_edges - 1) * 2));
    return QP_OK;
}

enum qp_status qp_placement_add_weight(struct qp_placement *p, const char *tensor, const char *node,
                                       int input, int axis, const char *reason,
                                       struct qp_error *err) {
    enum qp_status st = check_args(tensor, node, input, err);
    if (st != QP_OK) return st;
    if (axis < -1)
        return qp_error_set(err, QP_ERR_USAGE, "placement: weight '%s': axis %d (expected >= -1)",
                            tensor, axis);
    int c = hash_lookup(p, node, input);
    if (c >= 0) {
        if ((c & 1) && strcmp(p->weights[c >> 1].tensor, tensor) == 0 &&
            p->weights[c >> 1].axis == axis)
            return QP_OK;
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "placement: node '%s' input %d already holds a %s quantizer on '%s'",
                            node, input, (c & 1) ? "weight" : "activation",
                            (c & 1) ? p->weights[c >> 1].tensor : p->edges[c >> 1].tensor);
    }
    if ((st = reserve_slot(p, err)) != QP_OK) return st;
    if (!qp_grow((void **)&p->weights, &p->cap_weights, p->n_weights + 1, sizeof *p->weights))
        return qp_error_set(err, QP_ERR_NOMEM, "placement: out of memory");
    struct qp_qweight w = {.tensor = qp_arena_strdup(p->arena, tensor),
                           .node = qp_arena_strdup(p->arena, node),
                           .input = input,
                           .axis = axis,
                           .reason = qp_arena_strdup(p->arena, reason ? reason : ""),
                           .node_index = -1,
                           .value_index = -1};
    if (!w.tensor || !w.node || !w.reason)
        return qp_error_set(err, QP_ERR_NOMEM, "placement: out of memory");
    p->weights[p->n_weights++] = w;
    hash_put(p, (int)((p->n_weights - 1) * 2 + 1));
    return QP_OK;
}

int qp_placement_find(const struct qp_placement *p, const char *node, int input, int *is_weight_out,
                      size_t *index_out) {
    int c = node ? hash_lookup(p, node, input) : -1;
    if (c < 0) return 0;
    if (is_weight_out) *is_weight_out = c & 1;
    if (index_out) *index_out = (size_t)c >> 1;
    return 1;
}

int qp_placement_remove(struct qp_placement *p, const char *node, int input) {
    int c = node ? hash_lookup(p, node, input) : -1;
    if (c < 0) return 0;
    size_t i = (size_t)c >> 1;
    if (c & 1) {
        memmove(&p->weights[i], &p->weights[i + 1], (p->n_weights - i - 1) * sizeof *p->weights);
        p->n_weights--;
    } else {
        memmove(&p->edges[i], &p->edges[i + 1], (p->n_edges - i - 1) * sizeof *p->edges);
        p->n_edges--;
    }
    /* The table only shrinks in use, so rebuilding in place cannot fail. */
    (void)hash_rebuild(p, 0);
    return 1;
}

enum qp_status qp_placement_copy(const struct qp_placement *p, struct qp_placement **out,
                                 struct qp_error *err) {
    struct qp_placement *q = qp_placement_create();
    if (!q) return qp_error_set(err, QP_ERR_NOMEM, "placement: out of memory");
    enum qp_status st = qp_placement_union(q, p, err);
    if (st != QP_OK) {
        qp_placement_free(q);
        return st;
    }
    *out = q;
    return QP_OK;
}

/* 1 when slot code `ca` of `a` and code `cb` of `b` hold the same quantizer. */
static int same_entry(const struct qp_placement *a, int ca, const struct qp_placement *b, int cb) {
    if ((ca & 1) != (cb & 1)) return 0;
    if (ca & 1) {
        const struct qp_qweight *x = &a->weights[ca >> 1], *y = &b->weights[cb >> 1];
        return x->axis == y->axis && strcmp(x->tensor, y->tensor) == 0;
    }
    return strcmp(a->edges[ca >> 1].tensor, b->edges[cb >> 1].tensor) == 0;
}

enum qp_status qp_placement_union(struct qp_placement *dst, const struct qp_placement *src,
                                  struct qp_error *err) {
    enum qp_status st = QP_OK;
    for (size_t i = 0; i < src->n_edges && st == QP_OK; i++) {
        const struct qp_qedge *e = &src->edges[i];
        st = qp_placement_add_edge(dst, e->tensor, e->node, e->input, e->reason, err);
    }
    for (size_t i = 0; i < src->n_weights && st == QP_OK; i++) {
        const struct qp_qweight *w = &src->weights[i];
        st = qp_placement_add_weight(dst, w->tensor, w->node, w->input, w->axis, w->reason, err);
    }
    return st;
}

/* Keeps the entries of dst for which keep(slot in src) holds, in order. */
static void filter(struct qp_placement *dst, const struct qp_placement *src, int keep_if_in_src) {
    size_t k = 0;
    for (size_t i = 0; i < dst->n_edges; i++) {
        int in_src = hash_lookup(src, dst->edges[i].node, dst->edges[i].input) >= 0;
        if (in_src == keep_if_in_src) dst->edges[k++] = dst->edges[i];
    }
    dst->n_edges = k;
    k = 0;
    for (size_t i = 0; i < dst->n_weights; i++) {
        int in_src = hash_lookup(src, dst->weights[i].node, dst->weights[i].input) >= 0;
        if (in_src == keep_if_in_src) dst->weights[k++] = dst->weights[i];
    }
    dst->n_weights = k;
    (void)hash_rebuild(dst, 0);
}

void qp_placement_subtract(struct qp_placement *dst, const struct qp_placement *src) {
    filter(dst, src, 0);
}

void qp_placement_intersect(struct qp_placement *dst, const struct qp_placement *src) {
    filter(dst, src, 1);
}

int qp_placement_equal(const struct qp_placement *a, const struct qp_placement *b) {
    if (a->n_edges != b->n_edges || a->n_weights != b->n_weights) return 0;
    for (size_t i = 0; i < a->n_edges; i++) {
        int cb = hash_lookup(b, a->edges[i].node, a->edges[i].input);
        if (cb < 0 || !same_entry(a, (int)(i * 2), b, cb)) return 0;
    }
    for (size_t i = 0; i < a->n_weights; i++) {
        int cb = hash_lookup(b, a->weights[i].node, a->weights[i].input);
        if (cb < 0 || !same_entry(a, (int)(i * 2 + 1), b, cb)) return 0;
    }
    return 1;
}

/* ---- validation ------------------------------------------------------------------------- */

static int is_float_dtype(enum qp_dtype dt) {
    return dt == QP_DTYPE_FLOAT || dt == QP_DTYPE_FLOAT16 || dt == QP_DTYPE_BFLOAT16 ||
           dt == QP_DTYPE_DOUBLE;
}

/* Resolves one slot; `what` is "edge 3" or "weight 0" for messages. */
static enum qp_status resolve_slot(const struct qp_graph *g, const char *what, const char *tensor,
                                   const char *node, int input, int *node_out, int *value_out,
                                   struct qp_error *err) {
    int v = qp_graph_find_value(g, tensor);
    if (v < 0)
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "placement: %s: tensor '%s' does not exist in the graph", what, tensor);
    int n = qp_graph_find_node(g, node);
    if (n < 0)
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "placement: %s: node '%s' does not exist in the graph", what, node);
    const struct qp_node *nd = &g->nodes[n];
    if (input >= nd->n_inputs)
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "placement: %s: node '%s' (%s) has %d inputs, there is no input %d",
                            what, node, nd->op_type, nd->n_inputs, input);
    if (nd->inputs[input] != v)
        return qp_error_set(
            err, QP_ERR_BAD_INPUT, "placement: %s: input %d of node '%s' (%s) is '%s', not '%s'",
            what, input, node, nd->op_type,
            nd->inputs[input] >= 0 ? g->values[nd->inputs[input]].name : "", tensor);
    *node_out = n;
    *value_out = v;
    return QP_OK;
}

const struct qp_tensor *qp_placement_weight_tensor(const struct qp_graph *g, int v) {
    if (v < 0 || (size_t)v >= g->n_values) return NULL;
    const struct qp_value *val = &g->values[v];
    if (val->initializer >= 0) return &g->inits[val->initializer];
    if (val->producer < 0) return NULL;
    const struct qp_node *n = &g->nodes[val->producer];
    if (strcmp(n->op_type, "Constant") != 0 || n->n_outputs != 1) return NULL;
    const struct qp_attr *a = qp_node_attr(n, "value");
    return a && a->type == QP_ATTR_TENSOR ? a->t : NULL;
}

struct sort_key {
    size_t pos;
    int input;
    size_t index;
};

static int cmp_key(const void *a, const void *b) {
    const struct sort_key *x = a, *y = b;
    if (x->pos != y->pos) return x->pos < y->pos ? -1 : 1;
    if (x->input != y->input) return x->input < y->input ? -1 : 1;
    return x->index < y->index ? -1 : (x->index > y->index);
}

size_t qp_placement_n_edges(const struct qp_placement *p) {
    return p ? p->n_edges : 0;
}

size_t qp_placement_n_weights(const struct qp_placement *p) {
    return p ? p->n_weights : 0;
}

int qp_placement_edge(const struct qp_placement *p, size_t i, struct qp_placement_entry *out) {
    if (!p || i >= p->n_edges) return 0;
    const struct qp_qedge *e = &p->edges[i];
    *out = (struct qp_placement_entry){e->tensor, e->node, e->input, -1, e->reason};
    return 1;
}

int qp_placement_weight(const struct qp_placement *p, size_t i, struct qp_placement_entry *out) {
    if (!p || i >= p->n_weights) return 0;
    const struct qp_qweight *w = &p->weights[i];
    *out = (struct qp_placement_entry){w->tensor, w->node, w->input, w->axis, w->reason};
    return 1;
}

enum qp_status qp_placement_check(struct qp_placement *p, struct qp_model *model,
                                  struct qp_error *err) {
    if (!p || !model) return qp_error_set(err, QP_ERR_USAGE, "placement: no placement or model");
    enum qp_status st = qp_graph_toposort(model->graph, err);
    return st != QP_OK ? st : qp_placement_validate(p, model->graph, err);
}

enum qp_status qp_placement_validate(struct qp_placement *p, const struct qp_graph *g,
                                     struct qp_error *err) {
    enum qp_status st = QP_OK;
    size_t *pos = NULL;
    struct sort_key *keys = NULL;
    void *tmp = NULL;
    char what[64];

    if (g->n_nodes && !(pos = qp_malloc_n(g->n_nodes, sizeof *pos))) goto nomem;
    for (size_t i = 0; i < g->n_nodes; i++)
        pos[i] = SIZE_MAX;
    for (size_t k = 0; k < g->n_topo; k++)
        pos[g->topo[k]] = k;

    for (size_t i = 0; i < p->n_edges; i++) {
        struct qp_qedge *e = &p->edges[i];
        snprintf(what, sizeof what, "edge %zu", i);
        st = resolve_slot(g, what, e->tensor, e->node, e->input, &e->node_index, &e->value_index,
                          err);
        if (st != QP_OK) goto fail;
        if (g->values[e->value_index].initializer >= 0) {
            st = qp_error_set(err, QP_ERR_BAD_INPUT,
                              "placement: %s: tensor '%s' (input %d of '%s') is an initializer; "
                              "quantize it with a weight entry",
                              what, e->tensor, e->input, e->node);
            goto fail;
        }
    }
    for (size_t i = 0; i < p->n_weights; i++) {
        struct qp_qweight *w = &p->weights[i];
        snprintf(what, sizeof what, "weight %zu", i);
        st = resolve_slot(g, what, w->tensor, w->node, w->input, &w->node_index, &w->value_index,
                          err);
        if (st != QP_OK) goto fail;
        const struct qp_tensor *t = qp_placement_weight_tensor(g, w->value_index);
        if (!t) {
            st = qp_error_set(err, QP_ERR_BAD_INPUT,
                              "placement: %s: tensor '%s' is not an initializer or Constant "
                              "output; quantize it with an edge entry",
                              what, w->tensor);
            goto fail;
        }
        if (!is_float_dtype(t->dtype)) {
            st = qp_error_set(err, QP_ERR_BAD_INPUT,
                              "placement: %s: weight '%s' has dtype %s, not a float type", what,
                              w->tensor, qp_dtype_name(t->dtype));
            goto fail;
        }
        if (w->axis >= 0 && w->axis >= t->rank) {
            st = qp_error_set(err, QP_ERR_BAD_INPUT,
                              "placement: %s: axis %d is out of range for weight '%s' of rank %d",
                              what, w->axis, w->tensor, t->rank);
            goto fail;
        }
    }

    /* Sort both lists by (topo position, input). Ties cannot happen: slots are unique. */
    size_t nmax = p->n_edges > p->n_weights ? p->n_edges : p->n_weights;
    if (nmax) {
        if (!(keys = qp_malloc_n(nmax, sizeof *keys))) goto nomem;
        size_t esz = sizeof(struct qp_qedge) > sizeof(struct qp_qweight)
                         ? sizeof(struct qp_qedge)
                         : sizeof(struct qp_qweight);
        if (!(tmp = qp_malloc_n(nmax, esz))) goto nomem;
    }
    for (size_t i = 0; i < p->n_edges; i++)
        keys[i] = (struct sort_key){pos[p->edges[i].node_index], p->edges[i].input, i};
    if (p->n_edges) {
        qsort(keys, p->n_edges, sizeof *keys, cmp_key);
        struct qp_qedge *t = tmp;
        for (size_t i = 0; i < p->n_edges; i++)
            t[i] = p->edges[keys[i].index];
        memcpy(p->edges, t, p->n_edges * sizeof *t);
    }
    for (size_t i = 0; i < p->n_weights; i++)
        keys[i] = (struct sort_key){pos[p->weights[i].node_index], p->weights[i].input, i};
    if (p->n_weights) {
        qsort(keys, p->n_weights, sizeof *keys, cmp_key);
        struct qp_qweight *t = tmp;
        for (size_t i = 0; i < p->n_weights; i++)
            t[i] = p->weights[keys[i].index];
        memcpy(p->weights, t, p->n_weights * sizeof *t);
    }
    (void)hash_rebuild(p, 0);
    goto done;
nomem:
    st = qp_error_set(err, QP_ERR_NOMEM, "placement: out of memory");
fail:
done:
    free(pos);
    free(keys);
    free(tmp);
    return st;
}

/* ---- JSON ------------------------------------------------------------------------------- */

static const char *src_name(const char *source) {
    return source ? source : "placement";
}

/* Reads a non-negative integer that fits an int (JSON numbers are doubles in cJSON). */
static int json_index(const cJSON *it, int min, int *out) {
    if (!cJSON_IsNumber(it)) return 0;
    double d = it->valuedouble;
    if (!(d >= (double)min && d <= (double)INT32_MAX) || floor(d) != d) return 0;
    *out = (int)d;
    return 1;
}

static enum qp_status read_entry(struct qp_placement *p, const cJSON *obj, int is_weight,
                                 size_t idx, const char *source, struct qp_error *err) {
    const char *kind = is_weight ? "weights" : "edges";
    const char *tensor = NULL, *node = NULL, *reason = "user.placement";
    int input = -1, axis = -2, have_input = 0;
    if (!cJSON_IsObject(obj))
        return qp_error_set(err, QP_ERR_BAD_INPUT, "%s: %s[%zu] is not an object", src_name(source),
                            kind, idx);
    unsigned seen = 0;
    for (const cJSON *it = obj->child; it; it = it->next) {
        const char *k = it->string ? it->string : "";
        unsigned bit;
        if (strcmp(k, "tensor") == 0 || strcmp(k, "node") == 0 || strcmp(k, "reason") == 0) {
            bit = k[0] == 't' ? 1u : k[0] == 'n' ? 2u : 4u;
            if (!cJSON_IsString(it) || !it->valuestring || (bit != 4u && !*it->valuestring))
                return qp_error_set(err, QP_ERR_BAD_INPUT,
                                    "%s: %s[%zu]: \"%s\" must be a non-empty string",
                                    src_name(source), kind, idx, k);
            if (bit == 1u) tensor = it->valuestring;
            if (bit == 2u) node = it->valuestring;
            if (bit == 4u) reason = it->valuestring;
        } else if (strcmp(k, "input") == 0) {
            bit = 8u;
            if (!json_index(it, 0, &input))
                return qp_error_set(err, QP_ERR_BAD_INPUT,
                                    "%s: %s[%zu]: \"input\" must be an integer >= 0",
                                    src_name(source), kind, idx);
            have_input = 1;
        } else if (is_weight && strcmp(k, "axis") == 0) {
            bit = 16u;
            if (!json_index(it, -1, &axis))
                return qp_error_set(err, QP_ERR_BAD_INPUT,
                                    "%s: %s[%zu]: \"axis\" must be an integer >= -1",
                                    src_name(source), kind, idx);
        } else {
            return qp_error_set(err, QP_ERR_BAD_INPUT, "%s: %s[%zu]: unknown key \"%s\"",
                                src_name(source), kind, idx, k);
        }
        if (seen & bit)
            return qp_error_set(err, QP_ERR_BAD_INPUT, "%s: %s[%zu]: key \"%s\" repeated",
                                src_name(source), kind, idx, k);
        seen |= bit;
    }
    if (!tensor || !node || !have_input || (is_weight && axis == -2))
        return qp_error_set(err, QP_ERR_BAD_INPUT, "%s: %s[%zu]: missing \"%s\"", src_name(source),
                            kind, idx,
                            !tensor       ? "tensor"
                            : !node       ? "node"
                            : !have_input ? "input"
                                          : "axis");
    if (qp_placement_find(p, node, input, NULL, NULL))
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "%s: %s[%zu]: node '%s' input %d is quantized twice", src_name(source),
                            kind, idx, node, input);
    enum qp_status st = is_weight
                            ? qp_placement_add_weight(p, tensor, node, input, axis, reason, err)
                            : qp_placement_add_edge(p, tensor, node, input, reason, err);
    if (st != QP_OK) qp_error_prefix(err, "%s: %s[%zu]", src_name(source), kind, idx);
    return st;
}

enum qp_status qp_placement_read_json(const char *text, size_t len, const char *source,
                                      struct qp_placement **out, struct qp_error *err) {
    enum qp_status st = QP_OK;
    struct qp_placement *p = NULL;
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        size_t off = at && at >= text && at <= text + len ? (size_t)(at - text) : len;
        return qp_error_set(err, QP_ERR_BAD_INPUT, "%s: not valid JSON (near byte %zu)",
                            src_name(source), off);
    }
    if (!cJSON_IsObject(root)) {
        st = qp_error_set(err, QP_ERR_BAD_INPUT, "%s: top level must be a JSON object",
                          src_name(source));
        goto fail;
    }
    const cJSON *format = NULL, *version = NULL, *edges = NULL, *weights = NULL;
    for (const cJSON *it = root->child; it; it = it->next) {
        const char *k = it->string ? it->string : "";
        const cJSON **slot = strcmp(k, "format") == 0    ? &format
                             : strcmp(k, "version") == 0 ? &version
                             : strcmp(k, "edges") == 0   ? &edges
                             : strcmp(k, "weights") == 0 ? &weights
                                                         : NULL;
        if (!slot) {
            st = qp_error_set(err, QP_ERR_BAD_INPUT, "%s: unknown key \"%s\"", src_name(source), k);
            goto fail;
        }
        if (*slot) {
            st =
                qp_error_set(err, QP_ERR_BAD_INPUT, "%s: key \"%s\" repeated", src_name(source), k);
            goto fail;
        }
        *slot = it;
    }
    if (!cJSON_IsString(format) || strcmp(format->valuestring, QP_PLACEMENT_FORMAT) != 0) {
        st = qp_error_set(err, QP_ERR_BAD_INPUT, "%s: \"format\" must be \"%s\"", src_name(source),
                          QP_PLACEMENT_FORMAT);
        goto fail;
    }
    int ver = 0;
    if (!json_index(version, 1, &ver)) {
        st = qp_error_set(err, QP_ERR_BAD_INPUT, "%s: \"version\" must be an integer >= 1",
                          src_name(source));
        goto fail;
    }
    if (ver > QP_PLACEMENT_VERSION) {
        st = qp_error_set(err, QP_ERR_UNSUPPORTED,
                          "%s: placement format version %d is newer than this qplace reads (%d)",
                          src_name(source), ver, QP_PLACEMENT_VERSION);
        goto fail;
    }
    if (!cJSON_IsArray(edges) || (weights && !cJSON_IsArray(weights))) {
        st = qp_error_set(err, QP_ERR_BAD_INPUT,
                          "%s: \"edges\" must be an array (and \"weights\", if present)",
                          src_name(source));
        goto fail;
    }
    if (!(p = qp_placement_create())) {
        st = qp_error_set(err, QP_ERR_NOMEM, "%s: out of memory", src_name(source));
        goto fail;
    }
    size_t i = 0;
    for (const cJSON *it = edges->child; it; it = it->next, i++)
        if ((st = read_entry(p, it, 0, i, source, err)) != QP_OK) goto fail;
    i = 0;
    for (const cJSON *it = weights ? weights->child : NULL; it; it = it->next, i++)
        if ((st = read_entry(p, it, 1, i, source, err)) != QP_OK) goto fail;
    cJSON_Delete(root);
    *out = p;
    return QP_OK;
fail:
    cJSON_Delete(root);
    qp_placement_free(p);
    return st;
}

enum qp_status qp_placement_load_file(const char *path, struct qp_placement **out,
                                      struct qp_error *err) {
    char *buf = NULL;
    size_t len = 0;
    enum qp_status st = qp_file_read_text(path, QP_PLACEMENT_MAX_FILE_BYTES, &buf, &len, err);
    if (st != QP_OK) return st;
    st = qp_placement_read_json(buf, len, path, out, err);
    free(buf);
    return st;
}

/* One entry, compact, via cJSON so strings are escaped correctly. */
static char *entry_json(const char *tensor, const char *node, int input, int axis, int is_weight,
                        const char *reason) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    char *s = NULL;
    if (!cJSON_AddStringToObject(o, "tensor", tensor) ||
        !cJSON_AddStringToObject(o, "node", node) || !cJSON_AddNumberToObject(o, "input", input) ||
        (is_weight && !cJSON_AddNumberToObject(o, "axis", axis)) ||
        !cJSON_AddStringToObject(o, "reason", reason))
        goto done;
    s = cJSON_PrintUnformatted(o);
done:
    cJSON_Delete(o);
    return s;
}

struct sbuf {
    char *s;
    size_t n, cap;
    int oom;
};

static void sb_add(struct sbuf *b, const char *s) {
    size_t k = strlen(s);
    if (b->oom || !qp_grow((void **)&b->s, &b->cap, b->n + k + 1, 1)) {
        b->oom = 1;
        return;
    }
    memcpy(b->s + b->n, s, k + 1);
    b->n += k;
}

enum qp_status qp_placement_write_json(const struct qp_placement *p, char **text_out,
                                       struct qp_error *err) {
    struct sbuf b = {0};
    char head[128];
    snprintf(head, sizeof head, "{\n  \"format\": \"%s\",\n  \"version\": %d,\n  \"edges\": [",
             QP_PLACEMENT_FORMAT, QP_PLACEMENT_VERSION);
    sb_add(&b, head);
    for (size_t i = 0; i < p->n_edges; i++) {
        const struct qp_qedge *e = &p->edges[i];
        char *s = entry_json(e->tensor, e->node, e->input, 0, 0, e->reason);
        if (!s) b.oom = 1;
        sb_add(&b, i ? ",\n    " : "\n    ");
        if (s) sb_add(&b, s);
        cJSON_free(s);
    }
    sb_add(&b, p->n_edges ? "\n  ],\n  \"weights\": [" : "],\n  \"weights\": [");
    for (size_t i = 0; i < p->n_weights; i++) {
        const struct qp_qweight *w = &p->weights[i];
        char *s = entry_json(w->tensor, w->node, w->input, w->axis, 1, w->reason);
        if (!s) b.oom = 1;
        sb_add(&b, i ? ",\n    " : "\n    ");
        if (s) sb_add(&b, s);
        cJSON_free(s);
    }
    sb_add(&b, p->n_weights ? "\n  ]\n}\n" : "]\n}\n");
    if (b.oom) {
        free(b.s);
        return qp_error_set(err, QP_ERR_NOMEM, "placement: out of memory writing JSON");
    }
    *text_out = b.s;
    return QP_OK;
}

enum qp_status qp_placement_save_file(const struct qp_placement *p, const char *path,
                                      struct qp_error *err) {
    char *text = NULL;
    enum qp_status st = qp_placement_write_json(p, &text, err);
    if (st != QP_OK) return st;
    st = qp_file_write_atomic(path, text, strlen(text), err);
    free(text);
    return st;
}
