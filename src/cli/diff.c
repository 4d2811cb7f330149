/* qplace diff A B [--json]: Q/DQ topology at consumer-input-slot level; exit 4 when different. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "qplace/model.h"
#include "qplace/placement.h"

const struct cli_opt cli_diff_opts[] = {
    {"json", CLI_BOOL, NULL, "print one JSON object (docs/cli.md)"},
    {0},
};

const char cli_diff_details[] =
    "Each side is a Q/DQ model (.onnx) or a placement file (.json). For a model, every\n"
    "(consumer node, input index) fed through a DequantizeLinear is resolved back to the\n"
    "original tensor; for a placement, its edges and weight quantizers are the slots. Prints\n"
    "SAME / A ONLY / B ONLY counts (activation edges and weights separately) and the\n"
    "differences grouped by producer op -> consumer op with examples.\n"
    "Exit status: 0 the same, 4 different, 2 bad input.\n";

#define DIFF_EXIT_DIFFERENT 4

static int is_placement_path(const char *path) {
    size_t n = strlen(path);
    return n >= 5 && strcmp(path + n - 5, ".json") == 0;
}

int cli_diff_run(const struct cli_args *a) {
    struct qp_error err = {0};
    const char *path[2] = {a->pos[0], a->pos[1]};
    struct qp_model *m[2] = {NULL, NULL};
    struct qp_placement *p[2] = {NULL, NULL};
    struct qp_diff_counts c;
    char *text = NULL;
    int rc = 0;
    enum qp_status st = QP_OK;
    for (int k = 0; k < 2 && st == QP_OK; k++) {
        if (is_placement_path(path[k]))
            st = qp_placement_load_file(path[k], &p[k], &err);
        else
            st = qp_model_load_file(path[k], NULL, &m[k], &err);
    }
    /* A placement side takes its op types from the model on either side. */
    const struct qp_model *named = m[0] ? m[0] : m[1];
    struct qp_diff_side sides[2];
    for (int k = 0; k < 2; k++)
        sides[k] = (struct qp_diff_side){p[k] ? named : m[k], p[k], path[k]};
    if (st == QP_OK)
        st = qp_placement_diff(&sides[0], &sides[1], cli_has(a, "json"), &c, &text, &err);
    if (st != QP_OK) {
        rc = cli_fail(&err);
    } else {
        fputs(text, stdout);
        int same = 1;
        for (int k = 0; k < 2; k++)
            same &= c.a_only[k] == 0 && c.b_only[k] == 0;
        rc = same ? 0 : DIFF_EXIT_DIFFERENT;
    }
    free(text);
    for (int k = 0; k < 2; k++) {
        qp_placement_free(p[k]);
        qp_model_free(m[k]);
    }
    return rc;
}
