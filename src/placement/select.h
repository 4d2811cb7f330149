/*
 * User control over placement: include/exclude lists (ModelOpt's --op_types_to_quantize,
 * --op_types_to_exclude, --nodes_to_quantize, --nodes_to_exclude) and ordered rules files
 * (--rules FILE). docs/placement-rules.md describes both.
 *
 * Lists. Node patterns are POSIX extended regexes matched at the start of the node name, like
 * Python's re.match in ModelOpt ("conv" matches "conv1"; add "$" to match the whole name); "\d"
 * and "\D" are accepted and mean [0-9] / [^0-9]. Op types are exact, case-sensitive names; an
 * op-type argument may hold several, separated by commas. "@FILE" reads one entry per line
 * (blank lines and lines starting with '#' are skipped). A pattern or op type that matches no
 * node is a warning naming it (qp_log), not an error.
 *
 *     struct qp_select *s = qp_select_create();
 *     qp_select_add(s, QP_SELECT_NODES_TO_EXCLUDE, "/blocks\\.1[01]/", &err);
 *     qp_select_add(s, QP_SELECT_OP_TYPES_TO_EXCLUDE, "@ops.txt", &err);
 *
 * Rules. A rules file is a list of lines, applied in order to a placement after the policy;
 * a later rule wins over an earlier one:
 *
 *     # ACTION SIDE   INDEX MATCH PATTERN
 *     on       output 0     glob  *project_conv.1*
 *     off      input  *     glob  *_expand_conv.0*
 *     off      input  1     re    /blocks\.[0-9]+/attn/MatMul
 *     on       input  0     op    GlobalAveragePool
 *
 * ACTION on|off; SIDE input|output; INDEX a slot number or * (every slot); MATCH glob
 * (fnmatch(3) on the whole node name), re (regex as above) or op (exact op type); PATTERN is the
 * rest of the line. "on input" quantizes that input of each matching node (an initializer gets
 * a weight quantizer, per channel on the op's weight axis); "on output" quantizes that output
 * for every consumer; "off" removes them. Each entry a rule places has reason "user.rule:<line>".
 */
#ifndef QP_PLACEMENT_SELECT_H
#define QP_PLACEMENT_SELECT_H

#include <stddef.h>

#include "ir/ir.h"
#include "placement/placement.h"
#include "qplace/status.h"

enum qp_select_list {
    QP_SELECT_OP_TYPES_TO_QUANTIZE = 0,
    QP_SELECT_OP_TYPES_TO_EXCLUDE,
    QP_SELECT_NODES_TO_QUANTIZE,
    QP_SELECT_NODES_TO_EXCLUDE,
    QP_SELECT_LIST_COUNT
};

/* Per-node flags from qp_select_match. */
enum {
    QP_SEL_NODE_QUANTIZE = 1, /* name matches a --nodes_to_quantize pattern */
    QP_SEL_OP_QUANTIZE = 2,   /* op type listed in --op_types_to_quantize */
    QP_SEL_EXCLUDE = 4        /* matches --nodes_to_exclude or --op_types_to_exclude */
};

struct qp_select;

/* NULL when out of memory. qp_select_free is NULL-safe. */
struct qp_select *qp_select_create(void);
void qp_select_free(struct qp_select *s);

/* Adds one argument (borrowed for the call) to a list: a pattern, an op type (commas split
 * several), or "@FILE". A regex that does not compile is QP_ERR_USAGE naming it (and the file
 * and line for @FILE); an unreadable file is QP_ERR_IO. */
enum qp_status qp_select_add(struct qp_select *s, enum qp_select_list list, const char *arg,
                             struct qp_error *err);
/* Number of entries in a list. */
size_t qp_select_count(const struct qp_select *s, enum qp_select_list list);
/* 1 when `op` is listed in `list` (an op-type list). */
int qp_select_has_op(const struct qp_select *s, enum qp_select_list list, const char *op);
/* Entry `i` of a list, as given (after @FILE expansion). */
const char *qp_select_entry(const struct qp_select *s, enum qp_select_list list, size_t i);

/* Sets flags[n] (QP_SEL_*) for every node of `g` (flags has g->n_nodes entries; dead nodes get
 * 0). Logs a warning for each pattern or op type that matches no live node, and for op types that
 * differ from a model op type only in case. QP_OK (matching cannot fail). */
enum qp_status qp_select_match(const struct qp_select *s, const struct qp_graph *g,
                               unsigned char *flags, struct qp_error *err);

struct qp_rules;

/* Parses a rules file's text (`len` bytes, borrowed). A syntax error is QP_ERR_BAD_INPUT naming
 * `source` (may be NULL) and the line. */
enum qp_status qp_rules_parse(const char *text, size_t len, const char *source,
                              struct qp_rules **out, struct qp_error *err);
enum qp_status qp_rules_load_file(const char *path, struct qp_rules **out, struct qp_error *err);
void qp_rules_free(struct qp_rules *r);
size_t qp_rules_count(const struct qp_rules *r);

/* Applies the rules in order to `p` over the live top-level nodes of `g` (g->topo current), then
 * validates and sorts `p` (qp_placement_validate). A rule that matches no node, or switches on a
 * slot that cannot be quantized (an omitted input, a non-float tensor, an output nothing reads)
 * is a warning. Errors come from qp_placement_* (QP_ERR_NOMEM, QP_ERR_BAD_INPUT). */
enum qp_status qp_rules_apply(const struct qp_rules *r, const struct qp_graph *g,
                              struct qp_placement *p, struct qp_error *err);

/* Per-channel axis for a weight read by input `input` of node `n` (Conv 0, ConvTranspose 1,
 * Gemm 0 with transB else 1, MatMul last axis), or -1 (per tensor) for any other slot. */
int qp_weight_axis(const struct qp_node *n, int input, int weight_rank);

#endif
