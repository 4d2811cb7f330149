/*
 * The autotune node filter (`qplace autotune --node_filter_list FILE`, ModelOpt's
 * `--node_filter_list`): a file of fnmatch(3) wildcard patterns over node names, one per line;
 * blank lines and lines whose first non-blank character is `#` are skipped, surrounding blanks
 * trimmed. A region is searched only when one of its nodes matches a pattern; the others keep the
 * seed's choices (docs/autotune.md, "Node filter").
 *
 * Unlike ModelOpt (whose implementation raises AttributeError on any filter), a filter that can
 * do nothing is an error: an unreadable file (QP_ERR_IO), a file without a pattern, and a pattern
 * that matches no node of the model (QP_ERR_BAD_INPUT, naming the file, the line and the nearest
 * node name by edit distance).
 *
 *     struct qp_node_filter *f = NULL;
 *     if (qp_node_filter_load("filter.txt", &f, &err) != QP_OK) ...
 *     if (qp_node_filter_check(f, graph, &err) != QP_OK) ...      // every pattern matches a node
 *     int *in = NULL;
 *     if (qp_node_filter_regions(f, rs, &in, &err) != QP_OK) ...   // in[r]: region r is searched
 *     ... free(in); qp_node_filter_free(f);
 */
#ifndef QP_PIPELINE_AUTOTUNE_FILTER_H
#define QP_PIPELINE_AUTOTUNE_FILTER_H

#include <stddef.h>

#include "autotune/region.h"
#include "ir/ir.h"
#include "qplace/status.h"

struct qp_node_filter {
    char *path;      /* as given, for messages */
    size_t n;        /* at least 1 */
    char **patterns; /* trimmed lines */
    size_t *lines;   /* 1-based line of each pattern */
};

/* Reads the filter file `path` (borrowed for the call). *out is written only on success; free
 * with qp_node_filter_free (NULL-safe). QP_ERR_IO (unreadable), QP_ERR_BAD_INPUT (no pattern),
 * QP_ERR_NOMEM. */
enum qp_status qp_node_filter_load(const char *path, struct qp_node_filter **out,
                                   struct qp_error *err);
void qp_node_filter_free(struct qp_node_filter *f);

/* 1 when node name `name` (NULL: "") matches one of the patterns (fnmatch, no flags). */
int qp_node_filter_match(const struct qp_node_filter *f, const char *name);

/* QP_ERR_BAD_INPUT for the first pattern that matches no live node of `g`, with the nearest node
 * name; QP_ERR_NOMEM. */
enum qp_status qp_node_filter_check(const struct qp_node_filter *f, const struct qp_graph *g,
                                    struct qp_error *err);

/* *in_out: rs->n_regions flags (calloc'd; caller frees), 1 for a region one of whose nodes
 * matches. QP_ERR_NOMEM. */
enum qp_status qp_node_filter_regions(const struct qp_node_filter *f, const struct qp_regions *rs,
                                      int **in_out, struct qp_error *err);

#endif
