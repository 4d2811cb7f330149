/* Pattern signatures (autotune/pattern.h). */
#include "autotune/pattern.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/edit.h"
#include "core/size.h"
#include "placement/placement.h"

/* ---- a growable string --------------------------------------------------------------------- */

struct sbuf {
    char *s;
    size_t len, cap;
    int oom;
};

static void sb_add(struct sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = 1;
            return;
        }
        if (b->s && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = (b->cap + (size_t)n + 64) * 2;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->oom = 1;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

/* ---- node labels --------------------------------------------------------------------------- */

static int commutative(const struct qp_node *n) {
    static const char *const ops[] = {"Add",        "Mul",       "Sum",        "Max", "Min",
                                      "Mean",       "And",       "Or",         "Xor", "Equal",
                                      "BitwiseAnd", "BitwiseOr", "BitwiseXor", NULL};
    if (!qp_domain_is_onnx(n->domain) || n->n_inputs < 2) return 0;
    for (const char *const *o = ops; *o; o++)
        if (strcmp(n->op_type, *o) == 0) return 1;
    return 0;
}

static void attr_text(struct sbuf *b, const struct qp_attr *a) {
    sb_add(b, "%s=", a->name);
    switch (a->type) {
    case QP_ATTR_INT:
        sb_add(b, "%lld", (long long)a->i);
        break;
    case QP_ATTR_FLOAT:
        sb_add(b, "%.4g", (double)a->f);
        break;
    case QP_ATTR_STRING:
        sb_add(b, "%.*s", (int)(a->s.len > 32 ? 32 : a->s.len), a->s.data);
        break;
    case QP_ATTR_INTS:
        for (size_t k = 0; k < a->n; k++)
            sb_add(b, "%s%lld", k ? "x" : "", (long long)a->ints[k]);
        break;
    case QP_ATTR_FLOATS:
        for (size_t k = 0; k < a->n; k++)
            sb_add(b, "%s%.4g", k ? "x" : "", (double)a->floats[k]);
        break;
    default:
        sb_add(b, "?");
        break;
    }
}

/* `Op[k=v,...]`, attributes sorted by name; a non-ONNX domain prefixes the op. */
static void node_label(struct sbuf *b, const struct qp_node *n) {
    if (n->domain && n->domain[0]) sb_add(b, "%s:", n->domain);
    sb_add(b, "%s", n->op_type);
    const struct qp_attr *prev = NULL;
    for (int k = 0; k < n->n_attrs; k++) {
        const struct qp_attr *next = NULL; /* smallest name greater than prev's */
        for (int j = 0; j < n->n_attrs; j++) {
            const struct qp_attr *a = &n->attrs[j];
            if (prev && strcmp(a->name, prev->name) <= 0) continue;
            if (!next || strcmp(a->name, next->name) < 0) next = a;
        }
        if (!next) break;
        sb_add(b, "%s", k ? "," : "[");
        attr_text(b, next);
        prev = next;
    }
    if (n->n_attrs > 0) sb_add(b, "]");
}

static uint64_t hash_str(const char *s, size_t len) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static uint64_t mix(uint64_t a, uint64_t b) {
    uint64_t x = a * 0x9E3779B97F4A7C15ull + b;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* ---- canonical order ----------------------------------------------------------------------- */

/* Scratch for one region; arrays of the region's size, `loc` of the graph's node count. */
struct canon {
    const struct qp_graph *g;
    struct qp_region *r;
    int *loc; /* node -> local index in r, -1 outside */
    uint64_t *h, *h2;
    int *cpos;  /* local index -> canonical position */
    int *order; /* canonical position -> local index */
    int *indeg;
};

static int local_producer(const struct canon *c, int v) {
    if (v < 0) return -1;
    int p = c->g->values[v].producer;
    return p >= 0 ? c->loc[p] : -1;
}

/* Three Weisfeiler-Lehman rounds over in-region edges, from the node labels. */
static void refine(struct canon *c) {
    size_t m = c->r->n_nodes;
    for (int round = 0; round < 3; round++) {
        for (size_t k = 0; k < m; k++)
            c->h2[k] = mix(c->h[k], 1);
        for (size_t k = 0; k < m; k++) {
            const struct qp_node *nd = &c->g->nodes[c->r->nodes[k]];
            int comm = commutative(nd);
            for (int i = 0; i < nd->n_inputs; i++) {
                int p = local_producer(c, nd->inputs[i]);
                if (p < 0) continue;
                c->h2[k] += mix(c->h[p], comm ? 0 : (uint64_t)i + 1);
                c->h2[p] += mix(c->h[k], 999);
            }
        }
        memcpy(c->h, c->h2, m * sizeof *c->h);
    }
}

/* Kahn's order over in-region edges, smallest hash first among ready nodes (ties: local index,
 * which is graph order). */
static void order_nodes(struct canon *c) {
    size_t m = c->r->n_nodes;
    for (size_t k = 0; k < m; k++) {
        const struct qp_node *nd = &c->g->nodes[c->r->nodes[k]];
        c->indeg[k] = 0;
        c->cpos[k] = -1;
        for (int i = 0; i < nd->n_inputs; i++)
            c->indeg[k] += local_producer(c, nd->inputs[i]) >= 0;
    }
    for (size_t pos = 0; pos < m; pos++) {
        int pick = -1;
        for (size_t k = 0; k < m; k++)
            if (c->cpos[k] < 0 && c->indeg[k] == 0 && (pick < 0 || c->h[k] < c->h[pick]))
                pick = (int)k;
        if (pick < 0) /* a cycle: cannot happen on a toposorted graph; stay defined anyway */
            for (size_t k = 0; k < m && pick < 0; k++)
                if (c->cpos[k] < 0) pick = (int)k;
        c->cpos[pick] = (int)pos;
        c->order[pos] = pick;
        for (size_t k = 0; k < m; k++) {
            const struct qp_node *nd = &c->g->nodes[c->r->nodes[k]];
            for (int i = 0; i < nd->n_inputs; i++)
                c->indeg[k] -= local_producer(c, nd->inputs[i]) == pick;
        }
    }
}

static int find_point(const struct qp_region *r, int node, int input) {
    for (size_t k = 0; k < r->n_points; k++)
        if (r->points[k].node == node && r->points[k].input == input) return (int)k;
    return -1;
}

struct token {
    char text[40];
    int input;
};

static int token_cmp(const void *a, const void *b) {
    const struct token *x = a, *y = b;
    int d = strcmp(x->text, y->text);
    return d ? d : x->input - y->input;
}

/* Appends node k's text and sets its points' canonical slots. 0 when out of memory. */
static int node_text(struct canon *c, struct sbuf *b, int k) {
    int n = c->r->nodes[k];
    const struct qp_node *nd = &c->g->nodes[n];
    struct token *t = qp_malloc_n((size_t)nd->n_inputs + 1, sizeof *t);
    if (!t) return 0;
    for (int i = 0; i < nd->n_inputs; i++) {
        int v = nd->inputs[i], p = local_producer(c, v), pt = find_point(c->r, n, i);
        const char *star = pt >= 0 ? "*" : "";
        t[i].input = i;
        if (v < 0)
            snprintf(t[i].text, sizeof t[i].text, "-");
        else if (p >= 0)
            snprintf(t[i].text, sizeof t[i].text, "%d.%d%s", c->cpos[p],
                     c->g->values[v].producer_output, star);
        else
            snprintf(t[i].text, sizeof t[i].text, "%s%s",
                     qp_placement_weight_tensor(c->g, v) ? "c" : "x", star);
    }
    if (commutative(nd)) qsort(t, (size_t)nd->n_inputs, sizeof *t, token_cmp);
    if (b->len) sb_add(b, ";");
    node_label(b, nd);
    sb_add(b, "(");
    for (int j = 0; j < nd->n_inputs; j++) {
        sb_add(b, "%s%s", j ? "," : "", t[j].text);
        int pt = find_point(c->r, n, t[j].input);
        if (pt >= 0) {
            c->r->points[pt].pos = c->cpos[k];
            c->r->points[pt].slot = j;
        }
    }
    sb_add(b, ")");
    free(t);
    return 1;
}

static int point_cmp(const void *a, const void *b) {
    const struct qp_region_point *x = a, *y = b;
    return x->pos != y->pos ? (x->pos < y->pos ? -1 : 1)
                            : (x->slot > y->slot) - (x->slot < y->slot);
}

/* Canonical order and signature of region r into *sig_out (malloc'd). 0 when out of memory. */
static int region_signature(struct canon *c, char **sig_out) {
    struct qp_region *r = c->r;
    size_t m = r->n_nodes;
    for (size_t k = 0; k < m; k++) {
        struct sbuf lb = {0};
        c->loc[r->nodes[k]] = (int)k;
        node_label(&lb, &c->g->nodes[r->nodes[k]]);
        if (lb.oom) {
            free(lb.s);
            return 0;
        }
        c->h[k] = hash_str(lb.s, lb.len);
        free(lb.s);
    }
    refine(c);
    order_nodes(c);
    struct sbuf b = {0};
    int ok = 1;
    for (size_t pos = 0; pos < m && ok; pos++)
        ok = node_text(c, &b, c->order[pos]);
    for (size_t k = 0; k < m; k++)
        c->loc[r->nodes[k]] = -1;
    if (!ok || b.oom || !b.s) {
        free(b.s);
        return 0;
    }
    for (size_t pos = 0; pos < m; pos++)
        c->indeg[pos] = r->nodes[c->order[pos]];
    memcpy(r->nodes, c->indeg, m * sizeof *r->nodes);
    qsort(r->points, r->n_points, sizeof *r->points, point_cmp);
    *sig_out = b.s;
    return 1;
}

/* The op types of the region's nodes (canonical order), into p->ops. 0 when out of memory. */
static int pattern_ops(const struct qp_graph *g, const struct qp_region *r, struct qp_pattern *p) {
    p->ops = calloc(r->n_nodes + 1, sizeof *p->ops);
    if (!p->ops) return 0;
    for (size_t k = 0; k < r->n_nodes; k++) {
        p->ops[k] = strdup(g->nodes[r->nodes[k]].op_type);
        if (!p->ops[k]) return 0;
        p->n_ops++;
    }
    return 1;
}

/* Finds or adds the pattern of signature `sig` (taken over). 0 when out of memory. */
static int assign_pattern(struct qp_regions *rs, struct qp_region *r, char *sig) {
    for (size_t k = 0; k < rs->n_patterns; k++) {
        if (strcmp(rs->patterns[k].signature, sig) != 0) continue;
        free(sig);
        r->pattern = (int)k;
        rs->patterns[k].n_instances++;
        return 1;
    }
    struct qp_pattern *p = &rs->patterns[rs->n_patterns];
    memset(p, 0, sizeof *p);
    p->signature = sig;
    p->n_points = r->n_points;
    p->n_instances = 1;
    r->pattern = (int)rs->n_patterns++;
    return pattern_ops(rs->graph, r, p);
}

enum qp_status qp_patterns_compute(struct qp_regions *rs, struct qp_error *err) {
    struct canon c = {.g = rs->graph};
    size_t maxm = 1;
    for (size_t r = 0; r < rs->n_regions; r++)
        if (rs->regions[r].n_nodes > maxm) maxm = rs->regions[r].n_nodes;
    c.loc = qp_malloc_n(rs->graph->n_nodes + 1, sizeof *c.loc);
    c.h = qp_malloc_n(maxm, sizeof *c.h);
    c.h2 = qp_malloc_n(maxm, sizeof *c.h2);
    c.cpos = qp_malloc_n(maxm, sizeof *c.cpos);
    c.order = qp_malloc_n(maxm, sizeof *c.order);
    c.indeg = qp_malloc_n(maxm, sizeof *c.indeg);
    rs->patterns = calloc(rs->n_regions + 1, sizeof *rs->patterns);
    int ok = c.loc && c.h && c.h2 && c.cpos && c.order && c.indeg && rs->patterns;
    if (ok)
        for (size_t n = 0; n < rs->graph->n_nodes; n++)
            c.loc[n] = -1;
    for (size_t r = 0; ok && r < rs->n_regions; r++) {
        char *sig = NULL;
        c.r = &rs->regions[r];
        ok = region_signature(&c, &sig) && assign_pattern(rs, c.r, sig);
    }
    free(c.loc);
    free(c.h);
    free(c.h2);
    free(c.cpos);
    free(c.order);
    free(c.indeg);
    return ok ? QP_OK : qp_error_set(err, QP_ERR_NOMEM, "autotune patterns: out of memory");
}

void qp_patterns_release(struct qp_regions *rs) {
    for (size_t k = 0; rs->patterns && k < rs->n_patterns; k++) {
        free(rs->patterns[k].signature);
        for (size_t j = 0; j < rs->patterns[k].n_ops; j++)
            free(rs->patterns[k].ops[j]);
        free(rs->patterns[k].ops);
    }
    free(rs->patterns);
    rs->patterns = NULL;
    rs->n_patterns = 0;
}

/* ctx: {a, b}, two arrays of op-type strings. */
static int ops_differ(size_t i, size_t j, const void *ctx) {
    char *const *const *s = ctx;
    return strcmp(s[0][i], s[1][j]) != 0;
}

size_t qp_pattern_distance(char *const *a, size_t na, char *const *b, size_t nb) {
    size_t *row = qp_malloc_n(nb + 1, sizeof *row);
    if (!row) return SIZE_MAX;
    size_t d = qp_edit_distance(na, nb, ops_differ, (char *const *const[]){a, b}, row);
    free(row);
    return d;
}
