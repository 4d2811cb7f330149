/* The autotune node filter (pipeline/autotune_filter.h). */
#include "pipeline/autotune_filter.h"

#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/edit.h"

void qp_node_filter_free(struct qp_node_filter *f) {
    if (!f) return;
    for (size_t i = 0; i < f->n; i++)
        free(f->patterns[i]);
    free(f->patterns);
    free(f->lines);
    free(f->path);
    free(f);
}

static int is_blank(char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v';
}

/* Appends pattern `s` (len bytes) found on line `line`; 0 when out of memory. */
static int add_pattern(struct qp_node_filter *f, size_t *cap, const char *s, size_t len,
                       size_t line) {
    if (f->n == *cap) {
        size_t nc = *cap ? *cap * 2 : 8;
        char **np = realloc(f->patterns, nc * sizeof *np);
        if (!np) return 0;
        f->patterns = np;
        size_t *nl = realloc(f->lines, nc * sizeof *nl);
        if (!nl) return 0;
        f->lines = nl;
        *cap = nc;
    }
    char *p = malloc(len + 1);
    if (!p) return 0;
    memcpy(p, s, len);
    p[len] = 0;
    f->patterns[f->n] = p;
    f->lines[f->n++] = line;
    return 1;
}

enum qp_status qp_node_filter_load(const char *path, struct qp_node_filter **out,
                                   struct qp_error *err) {
    FILE *in = fopen(path, "r");
    if (!in)
        return qp_error_set(err, QP_ERR_IO, "autotune: --node_filter_list '%s': cannot read: %s",
                            path, strerror(errno));
    struct qp_node_filter *f = calloc(1, sizeof *f);
    char *line = NULL;
    size_t line_cap = 0, cap = 0, lineno = 0;
    enum qp_status st = QP_OK;
    if (!f || !(f->path = strdup(path))) {
        st = qp_error_set(err, QP_ERR_NOMEM, "autotune: out of memory");
        goto done;
    }
    ssize_t got;
    while ((got = getline(&line, &line_cap, in)) >= 0) {
        lineno++;
        size_t b = 0, e = (size_t)got;
        while (b < e && is_blank(line[b]))
            b++;
        while (e > b && is_blank(line[e - 1]))
            e--;
        if (b == e || line[b] == '#') continue;
        if (!add_pattern(f, &cap, line + b, e - b, lineno)) {
            st = qp_error_set(err, QP_ERR_NOMEM, "autotune: out of memory");
            goto done;
        }
    }
    if (ferror(in)) {
        st = qp_error_set(err, QP_ERR_IO, "autotune: --node_filter_list '%s': read error", path);
        goto done;
    }
    if (f->n == 0)
        st = qp_error_set(err, QP_ERR_BAD_INPUT,
                          "autotune: --node_filter_list '%s' holds no pattern (one fnmatch "
                          "pattern over node names per line; '#' starts a comment line)",
                          path);
done:
    free(line);
    fclose(in);
    if (st == QP_OK)
        *out = f;
    else
        qp_node_filter_free(f);
    return st;
}

int qp_node_filter_match(const struct qp_node_filter *f, const char *name) {
    for (size_t i = 0; i < f->n; i++)
        if (fnmatch(f->patterns[i], name ? name : "", 0) == 0) return 1;
    return 0;
}

static int chars_differ(size_t i, size_t j, const void *ctx) {
    const char *const *s = ctx;
    return s[0][i] != s[1][j];
}

/* The live node of `g` whose name is nearest to `pattern` by edit distance (NULL: none). */
static const char *nearest_name(const struct qp_graph *g, const char *pattern, size_t *row) {
    const char *best = NULL;
    size_t best_d = 0, np = strlen(pattern);
    for (size_t i = 0; i < g->n_nodes; i++) {
        const char *name = g->nodes[i].name;
        if (g->nodes[i].dead || !name || !*name) continue;
        size_t d =
            qp_edit_distance(np, strlen(name), chars_differ, (const char *[]){pattern, name}, row);
        if (!best || d < best_d) best = name, best_d = d;
    }
    return best;
}

enum qp_status qp_node_filter_check(const struct qp_node_filter *f, const struct qp_graph *g,
                                    struct qp_error *err) {
    for (size_t k = 0; k < f->n; k++) {
        int hit = 0;
        for (size_t i = 0; i < g->n_nodes && !hit; i++)
            hit = !g->nodes[i].dead &&
                  fnmatch(f->patterns[k], g->nodes[i].name ? g->nodes[i].name : "", 0) == 0;
        if (hit) continue;
        size_t longest = 0;
        for (size_t i = 0; i < g->n_nodes; i++)
            if (g->nodes[i].name && strlen(g->nodes[i].name) > longest)
                longest = strlen(g->nodes[i].name);
        size_t *row = malloc((longest + 1) * sizeof *row);
        if (!row) return qp_error_set(err, QP_ERR_NOMEM, "autotune: out of memory");
        const char *near = nearest_name(g, f->patterns[k], row);
        free(row);
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "autotune: --node_filter_list '%s' line %zu: pattern '%s' matches no "
                            "node of the model%s%s%s",
                            f->path, f->lines[k], f->patterns[k], near ? " (nearest node: '" : "",
                            near ? near : "", near ? "')" : "");
    }
    return QP_OK;
}

enum qp_status qp_node_filter_regions(const struct qp_node_filter *f, const struct qp_regions *rs,
                                      int **in_out, struct qp_error *err) {
    int *in = calloc(rs->n_regions ? rs->n_regions : 1, sizeof *in);
    if (!in) return qp_error_set(err, QP_ERR_NOMEM, "autotune: out of memory");
    for (size_t r = 0; r < rs->n_regions; r++) {
        const struct qp_region *reg = &rs->regions[r];
        for (size_t k = 0; k < reg->n_nodes && !in[r]; k++)
            in[r] = qp_node_filter_match(f, rs->graph->nodes[reg->nodes[k]].name);
    }
    *in_out = in;
    return QP_OK;
}
