#include "placement/select.h"
#include "core/file.h"
#include "core/grow.h"
#include "core/regex.h"

#include <errno.h>
#include <fnmatch.h>
#include <regex.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- shared helpers --------------------------------------------------------------------- */

/* Node lists and rules files are small text files; anything bigger is a mistake. */
#define SELECT_MAX_FILE_BYTES ((size_t)64 << 20)

static enum qp_status read_file(const char *path, char **buf_out, size_t *len_out,
                                struct qp_error *err) {
    return qp_file_read_text(path, SELECT_MAX_FILE_BYTES, buf_out, len_out, err);
}

static int regex_match_start(const regex_t *re, const char *s) {
    regmatch_t m;
    /* The leftmost match starts earliest, so a match at 0 exists iff the leftmost is at 0. */
    return regexec(re, s, 1, &m, 0) == 0 && m.rm_so == 0;
}

/* ---- include / exclude lists -------------------------------------------------------------- */

struct sel_entry {
    char *text;
    int is_regex;
    regex_t re;
};

struct sel_list {
    size_t n, cap;
    struct sel_entry *e;
};

struct qp_select {
    struct sel_list lists[QP_SELECT_LIST_COUNT];
};

static const char *const list_names[] = {
    [QP_SELECT_OP_TYPES_TO_QUANTIZE] = "op_types_to_quantize",
    [QP_SELECT_OP_TYPES_TO_EXCLUDE] = "op_types_to_exclude",
    [QP_SELECT_NODES_TO_QUANTIZE] = "nodes_to_quantize",
    [QP_SELECT_NODES_TO_EXCLUDE] = "nodes_to_exclude",
};
_Static_assert(sizeof(list_names) / sizeof(list_names[0]) == QP_SELECT_LIST_COUNT,
               "every list needs a name");

static int is_node_list(enum qp_select_list l) {
    return l == QP_SELECT_NODES_TO_QUANTIZE || l == QP_SELECT_NODES_TO_EXCLUDE;
}

struct qp_select *qp_select_create(void) {
    return calloc(1, sizeof(struct qp_select));
}

void qp_select_free(struct qp_select *s) {
    if (!s) return;
    for (int l = 0; l < QP_SELECT_LIST_COUNT; l++) {
        for (size_t i = 0; i < s->lists[l].n; i++) {
            free(s->lists[l].e[i].text);
            if (s->lists[l].e[i].is_regex) regfree(&s->lists[l].e[i].re);
        }
        free(s->lists[l].e);
    }
    free(s);
}

/* Adds one entry of `len` bytes; `where` (file:line or NULL) for messages. */
static enum qp_status add_entry(struct qp_select *s, enum qp_select_list list, const char *text,
                                size_t len, const char *where, struct qp_error *err) {
    struct sel_list *L = &s->lists[list];
    if (!qp_grow((void **)&L->e, &L->cap, L->n + 1, sizeof *L->e))
        return qp_error_set(err, QP_ERR_NOMEM, "%s: out of memory", list_names[list]);
    struct sel_entry e = {0};
    if (!(e.text = malloc(len + 1)))
        return qp_error_set(err, QP_ERR_NOMEM, "%s: out of memory", list_names[list]);
    memcpy(e.text, text, len);
    e.text[len] = '\0';
    if (is_node_list(list)) {
        char msg[256];
        if (!qp_regex_compile(&e.re, e.text, 0, msg, sizeof msg)) {
            enum qp_status st =
                qp_error_set(err, QP_ERR_USAGE, "%s%s%s: bad regex '%s': %s", where ? where : "",
                             where ? ": " : "", list_names[list], e.text, msg);
            free(e.text);
            return st;
        }
        e.is_regex = 1;
    }
    L->e[L->n++] = e;
    return QP_OK;
}

/* Adds one argument or one line: op types split at commas, surrounding blanks trimmed. */
static enum qp_status add_item(struct qp_select *s, enum qp_select_list list, const char *text,
                               size_t len, const char *where, struct qp_error *err) {
    if (is_node_list(list)) {
        if (len == 0)
            return qp_error_set(err, QP_ERR_USAGE, "%s%s%s: empty pattern", where ? where : "",
                                where ? ": " : "", list_names[list]);
        return add_entry(s, list, text, len, where, err);
    }
    size_t i = 0;
    while (i <= len) {
        size_t j = i;
        while (j < len && text[j] != ',')
            j++;
        size_t a = i, b = j;
        while (a < b && (text[a] == ' ' || text[a] == '\t'))
            a++;
        while (b > a && (text[b - 1] == ' ' || text[b - 1] == '\t'))
            b--;
        if (b > a) {
            enum qp_status st = add_entry(s, list, text + a, b - a, where, err);
            if (st != QP_OK) return st;
        }
        i = j + 1;
    }
    return QP_OK;
}

enum qp_status qp_select_add(struct qp_select *s, enum qp_select_list list, const char *arg,
                             struct qp_error *err) {
    if ((unsigned)list >= QP_SELECT_LIST_COUNT || !arg)
        return qp_error_set(err, QP_ERR_USAGE, "select: bad list or NULL argument");
    if (arg[0] != '@') return add_item(s, list, arg, strlen(arg), NULL, err);
    char *buf = NULL;
    size_t len = 0;
    enum qp_status st = read_file(arg + 1, &buf, &len, err);
    if (st != QP_OK) return qp_error_prefix(err, "%s", list_names[list]);
    size_t line = 0;
    char where[512];
    for (size_t i = 0; i < len && st == QP_OK;) {
        size_t j = i;
        while (j < len && buf[j] != '\n')
            j++;
        line++;
        size_t a = i, b = j;
        while (a < b && (buf[a] == ' ' || buf[a] == '\t'))
            a++;
        while (b > a && (buf[b - 1] == ' ' || buf[b - 1] == '\t' || buf[b - 1] == '\r'))
            b--;
        if (b > a && buf[a] != '#') {
            snprintf(where, sizeof where, "%s:%zu", arg + 1, line);
            st = add_item(s, list, buf + a, b - a, where, err);
        }
        i = j + 1;
    }
    free(buf);
    return st;
}

size_t qp_select_count(const struct qp_select *s, enum qp_select_list list) {
    return s && (unsigned)list < QP_SELECT_LIST_COUNT ? s->lists[list].n : 0;
}

const char *qp_select_entry(const struct qp_select *s, enum qp_select_list list, size_t i) {
    return i < qp_select_count(s, list) ? s->lists[list].e[i].text : NULL;
}

int qp_select_has_op(const struct qp_select *s, enum qp_select_list list, const char *op) {
    for (size_t i = 0; i < qp_select_count(s, list); i++)
        if (strcmp(s->lists[list].e[i].text, op) == 0) return 1;
    return 0;
}

enum qp_status qp_select_match(const struct qp_select *s, const struct qp_graph *g,
                               unsigned char *flags, struct qp_error *err) {
    (void)err;
    for (size_t n = 0; n < g->n_nodes; n++)
        flags[n] = 0;
    for (int l = 0; l < QP_SELECT_LIST_COUNT; l++) {
        const struct sel_list *L = &s->lists[l];
        unsigned char bit = l == QP_SELECT_NODES_TO_QUANTIZE      ? QP_SEL_NODE_QUANTIZE
                            : l == QP_SELECT_OP_TYPES_TO_QUANTIZE ? QP_SEL_OP_QUANTIZE
                                                                  : QP_SEL_EXCLUDE;
        for (size_t i = 0; i < L->n; i++) {
            const struct sel_entry *e = &L->e[i];
            size_t hits = 0;
            const char *near = NULL;
            for (size_t n = 0; n < g->n_nodes; n++) {
                const struct qp_node *nd = &g->nodes[n];
                if (nd->dead) continue;
                int hit;
                if (e->is_regex) {
                    hit = regex_match_start(&e->re, nd->name ? nd->name : "");
                } else {
                    hit = strcmp(nd->op_type, e->text) == 0;
                    if (!hit && !near && strcasecmp(nd->op_type, e->text) == 0) near = nd->op_type;
                }
                if (hit) {
                    flags[n] |= bit;
                    hits++;
                }
            }
            if (hits) continue;
            if (near)
                qp_log(QP_LOG_WARN, "%s: op type '%s' matches no node (did you mean '%s'?)",
                       list_names[l], e->text, near);
            else
                qp_log(QP_LOG_WARN, "%s: %s '%s' matches no node", list_names[l],
                       e->is_regex ? "pattern" : "op type", e->text);
        }
    }
    return QP_OK;
}

/* ---- rules files -------------------------------------------------------------------------- */

enum rule_match { MATCH_GLOB, MATCH_REGEX, MATCH_OP };

struct rule {
    int on;     /* 1: switch on, 0: off */
    int output; /* 1: output side, 0: input side */
    int index;  /* slot, or -1 for every slot */
    enum rule_match match;
    char *pattern;
    regex_t re;
    size_t line;
};

struct qp_rules {
    size_t n, cap;
    struct rule *r;
    char *source;
};

void qp_rules_free(struct qp_rules *r) {
    if (!r) return;
    for (size_t i = 0; i < r->n; i++) {
        if (r->r[i].match == MATCH_REGEX) regfree(&r->r[i].re);
        free(r->r[i].pattern);
    }
    free(r->r);
    free(r->source);
    free(r);
}

size_t qp_rules_count(const struct qp_rules *r) {
    return r ? r->n : 0;
}

/* Next blank-separated word of [*p, end); returns its length (0 at the end). */
static size_t next_word(const char **p, const char *end, const char **word) {
    const char *s = *p;
    while (s < end && (*s == ' ' || *s == '\t'))
        s++;
    const char *w = s;
    while (s < end && *s != ' ' && *s != '\t')
        s++;
    *word = w;
    *p = s;
    return (size_t)(s - w);
}

static int word_is(const char *w, size_t n, const char *lit) {
    return strlen(lit) == n && memcmp(w, lit, n) == 0;
}

static enum qp_status parse_rule(struct qp_rules *rs, const char *a, const char *b, size_t line,
                                 const char *src, struct qp_error *err) {
    struct rule r = {.line = line};
    const char *w;
    size_t n = next_word(&a, b, &w);
    if (word_is(w, n, "on"))
        r.on = 1;
    else if (word_is(w, n, "off"))
        r.on = 0;
    else
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "%s:%zu: expected 'on' or 'off' at the start of the rule, got '%.*s'",
                            src, line, (int)(n > 64 ? 64 : n), w);
    n = next_word(&a, b, &w);
    if (word_is(w, n, "input"))
        r.output = 0;
    else if (word_is(w, n, "output"))
        r.output = 1;
    else
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "%s:%zu: expected 'input' or 'output' after '%s', got '%.*s'", src,
                            line, r.on ? "on" : "off", (int)(n > 64 ? 64 : n), w);
    n = next_word(&a, b, &w);
    if (word_is(w, n, "*")) {
        r.index = -1;
    } else {
        long v = 0;
        size_t k = 0;
        for (; k < n && w[k] >= '0' && w[k] <= '9' && v <= 100000; k++)
            v = v * 10 + (w[k] - '0');
        if (n == 0 || k != n || v > 100000)
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "%s:%zu: expected a slot index (0, 1, ...) or '*', got '%.*s'", src,
                                line, (int)(n > 64 ? 64 : n), w);
        r.index = (int)v;
    }
    n = next_word(&a, b, &w);
    if (word_is(w, n, "glob"))
        r.match = MATCH_GLOB;
    else if (word_is(w, n, "re"))
        r.match = MATCH_REGEX;
    else if (word_is(w, n, "op"))
        r.match = MATCH_OP;
    else
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "%s:%zu: expected 'glob', 're' or 'op' before the pattern, got '%.*s'",
                            src, line, (int)(n > 64 ? 64 : n), w);
    while (a < b && (*a == ' ' || *a == '\t'))
        a++;
    if (a == b) return qp_error_set(err, QP_ERR_BAD_INPUT, "%s:%zu: missing pattern", src, line);
    if (!(r.pattern = malloc((size_t)(b - a) + 1)))
        return qp_error_set(err, QP_ERR_NOMEM, "%s: out of memory", src);
    memcpy(r.pattern, a, (size_t)(b - a));
    r.pattern[b - a] = '\0';
    if (r.match == MATCH_REGEX) {
        char msg[256];
        if (!qp_regex_compile(&r.re, r.pattern, 0, msg, sizeof msg)) {
            enum qp_status st = qp_error_set(err, QP_ERR_BAD_INPUT, "%s:%zu: bad regex '%s': %s",
                                             src, line, r.pattern, msg);
            free(r.pattern);
            return st;
        }
    }
    if (!qp_grow((void **)&rs->r, &rs->cap, rs->n + 1, sizeof *rs->r)) {
        if (r.match == MATCH_REGEX) regfree(&r.re);
        free(r.pattern);
        return qp_error_set(err, QP_ERR_NOMEM, "%s: out of memory", src);
    }
    rs->r[rs->n++] = r;
    return QP_OK;
}

enum qp_status qp_rules_parse(const char *text, size_t len, const char *source,
                              struct qp_rules **out, struct qp_error *err) {
    const char *src = source ? source : "rules";
    struct qp_rules *rs = calloc(1, sizeof *rs);
    if (!rs) return qp_error_set(err, QP_ERR_NOMEM, "%s: out of memory", src);
    if (!(rs->source = strdup(src))) {
        free(rs);
        return qp_error_set(err, QP_ERR_NOMEM, "%s: out of memory", src);
    }
    enum qp_status st = QP_OK;
    size_t line = 0;
    for (size_t i = 0; i < len && st == QP_OK;) {
        size_t j = i;
        while (j < len && text[j] != '\n')
            j++;
        line++;
        const char *a = text + i, *b = text + j;
        while (a < b && (*a == ' ' || *a == '\t'))
            a++;
        while (b > a && (b[-1] == ' ' || b[-1] == '\t' || b[-1] == '\r'))
            b--;
        if (memchr(a, '\0', (size_t)(b - a)))
            st = qp_error_set(err, QP_ERR_BAD_INPUT, "%s:%zu: NUL byte in rule", src, line);
        else if (a < b && *a != '#')
            st = parse_rule(rs, a, b, line, src, err);
        i = j + 1;
    }
    if (st != QP_OK) {
        qp_rules_free(rs);
        return st;
    }
    *out = rs;
    return QP_OK;
}

enum qp_status qp_rules_load_file(const char *path, struct qp_rules **out, struct qp_error *err) {
    char *buf = NULL;
    size_t len = 0;
    enum qp_status st = read_file(path, &buf, &len, err);
    if (st != QP_OK) return st;
    st = qp_rules_parse(buf, len, path, out, err);
    free(buf);
    return st;
}

int qp_weight_axis(const struct qp_node *n, int input, int weight_rank) {
    if (input != 1 || weight_rank < 1) return -1;
    if (strcmp(n->op_type, "Conv") == 0) return 0;
    if (strcmp(n->op_type, "ConvTranspose") == 0) return weight_rank >= 2 ? 1 : -1;
    if (strcmp(n->op_type, "Gemm") == 0) {
        const struct qp_attr *t = qp_node_attr(n, "transB");
        if (weight_rank != 2) return -1;
        return t && t->i ? 0 : 1;
    }
    if (strcmp(n->op_type, "MatMul") == 0) return weight_rank >= 2 ? weight_rank - 1 : -1;
    return -1;
}

static int rule_matches(const struct rule *r, const struct qp_node *n) {
    const char *name = n->name ? n->name : "";
    switch (r->match) {
    case MATCH_GLOB:
        return fnmatch(r->pattern, name, 0) == 0;
    case MATCH_REGEX:
        return regex_match_start(&r->re, name);
    case MATCH_OP:
        return strcmp(n->op_type, r->pattern) == 0;
    }
    return 0;
}

/* Switches the quantizer on slot (node, input) on or off. */
static enum qp_status set_slot(struct qp_placement *p, const struct qp_graph *g, int node,
                               int input, int on, int explicit_slot, const char *reason,
                               const char *where, struct qp_error *err) {
    const struct qp_node *n = &g->nodes[node];
    if (!on) {
        qp_placement_remove(p, n->name, input);
        return QP_OK;
    }
    int v = n->inputs[input];
    if (v < 0) return QP_OK;
    const struct qp_value *val = &g->values[v];
    const struct qp_tensor *wt = qp_placement_weight_tensor(g, v);
    enum qp_dtype dt = wt ? wt->dtype : val->dtype;
    int is_float = dt == QP_DTYPE_FLOAT || dt == QP_DTYPE_FLOAT16 || dt == QP_DTYPE_BFLOAT16 ||
                   dt == QP_DTYPE_DOUBLE || (!wt && dt == QP_DTYPE_UNDEFINED);
    if (!is_float || (!wt && val->initializer >= 0) || val->kind != QP_VALUE_TENSOR) {
        if (explicit_slot)
            qp_log(QP_LOG_WARN,
                   "%s: input %d of node '%s' ('%s', %s) is not a float tensor; not "
                   "quantized",
                   where, input, n->name, val->name, qp_dtype_name(dt));
        return QP_OK;
    }
    /* The rule's reason replaces whatever placed the slot before. */
    qp_placement_remove(p, n->name, input);
    if (wt)
        return qp_placement_add_weight(p, val->name, n->name, input,
                                       qp_weight_axis(n, input, wt->rank), reason, err);
    return qp_placement_add_edge(p, val->name, n->name, input, reason, err);
}

enum qp_status qp_rules_apply(const struct qp_rules *r, const struct qp_graph *g,
                              struct qp_placement *p, struct qp_error *err) {
    enum qp_status st = QP_OK;
    char reason[48], where[600];
    for (size_t k = 0; k < r->n && st == QP_OK; k++) {
        const struct rule *ru = &r->r[k];
        snprintf(reason, sizeof reason, "user.rule:%zu", ru->line);
        snprintf(where, sizeof where, "%s:%zu", r->source, ru->line);
        size_t hits = 0;
        for (size_t t = 0; t < g->n_topo && st == QP_OK; t++) {
            int node = g->topo[t];
            const struct qp_node *n = &g->nodes[node];
            if (!rule_matches(ru, n)) continue;
            hits++;
            int count = ru->output ? n->n_outputs : n->n_inputs;
            int lo = ru->index < 0 ? 0 : ru->index, hi = ru->index < 0 ? count : ru->index + 1;
            if (ru->index >= count) {
                qp_log(QP_LOG_WARN, "%s: node '%s' (%s) has no %s %d", where, n->name, n->op_type,
                       ru->output ? "output" : "input", ru->index);
                continue;
            }
            for (int s = lo; s < hi && st == QP_OK; s++) {
                if (!ru->output) {
                    st = set_slot(p, g, node, s, ru->on, ru->index >= 0, reason, where, err);
                    continue;
                }
                int v = n->outputs[s];
                if (v < 0) continue;
                const struct qp_value *val = &g->values[v];
                if (ru->on && val->n_uses == 0 && ru->index >= 0)
                    qp_log(QP_LOG_WARN,
                           "%s: output '%s' of node '%s' has no consumer; graph "
                           "outputs are not quantized",
                           where, val->name, n->name);
                for (size_t u = 0; u < val->n_uses && st == QP_OK; u++) {
                    int c = val->uses[u].node;
                    if (c < 0 || (size_t)c >= g->n_nodes || g->nodes[c].dead) continue;
                    st = set_slot(p, g, c, val->uses[u].input, ru->on, ru->index >= 0, reason,
                                  where, err);
                }
            }
        }
        if (!hits) qp_log(QP_LOG_WARN, "%s: rule matches no node ('%s')", where, ru->pattern);
    }
    if (st != QP_OK) return st;
    return qp_placement_validate(p, g, err);
}
