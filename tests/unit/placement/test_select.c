/* Unit tests of include/exclude lists, @FILE, and rules files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "placement/select.h"
#include "../quant/qgraph.h"

/* Captures warnings from the log hook. */
static char warnings[8192];
static void capture(enum qp_log_level level, const char *msg, void *user) {
    (void)user;
    if (level != QP_LOG_WARN) return;
    size_t n = strlen(warnings);
    snprintf(warnings + n, sizeof warnings - n, "%s\n", msg);
}

/* An EfficientNet-like MBConv pair: expand conv, depthwise, project conv. */
static struct qp_model *mbconv(void) {
    struct qp_model *m = qp_model_create();
    qg_input(m, "x");
    const char *names[3][2] = {{"blocks.0._expand_conv.0", "e0"},
                               {"blocks.0._depthwise_conv.0", "d0"},
                               {"blocks.0._project_conv.1", "p0"}};
    const char *prev = "x";
    for (int i = 0; i < 3; i++) {
        char w[128], ins[300];
        snprintf(w, sizeof w, "%s.w", names[i][0]);
        qg_init(m, w, 4, QG_DIMS(32, 32, 1, 1));
        snprintf(ins, sizeof ins, "%s,%s", prev, w);
        qg_node(m, names[i][0], "Conv", ins, names[i][1]);
        prev = names[i][1];
    }
    qg_node(m, "blocks.1.relu", "Relu", "p0", "r");
    qg_node(m, "blocks.1.add", "Add", "r,p0", "y");
    qg_output(m, "y");
    qg_sort(m);
    return m;
}

static char *write_tmp(const char *name, const char *text) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", QP_TEST_BINARY_DIR, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

static void test_lists_and_files(void **state) {
    (void)state;
    struct qp_error err = {0};
    struct qp_model *m = mbconv();
    struct qp_graph *g = m->graph;
    struct qp_select *s = qp_select_create();
    /* Regexes match at the start (re.match), not the whole name. */
    assert_int_equal(qp_select_add(s, QP_SELECT_NODES_TO_EXCLUDE, "blocks\\.\\d\\._exp", &err),
                     QP_OK);
    assert_int_equal(qp_select_add(s, QP_SELECT_NODES_TO_EXCLUDE, "_project", &err), QP_OK);
    const char *path = write_tmp("sel_nodes.txt", "# nodes to quantize\n\n"
                                                  "  blocks\\.0\\._project_conv\\.1$  \r\n"
                                                  "nomatch.*\n");
    char arg[600];
    snprintf(arg, sizeof arg, "@%s", path);
    assert_int_equal(qp_select_add(s, QP_SELECT_NODES_TO_QUANTIZE, arg, &err), QP_OK);
    assert_int_equal(qp_select_count(s, QP_SELECT_NODES_TO_QUANTIZE), 2);
    assert_string_equal(qp_select_entry(s, QP_SELECT_NODES_TO_QUANTIZE, 0),
                        "blocks\\.0\\._project_conv\\.1$");
    assert_int_equal(qp_select_add(s, QP_SELECT_OP_TYPES_TO_QUANTIZE, "Conv, relu,Add", &err),
                     QP_OK);
    assert_int_equal(qp_select_count(s, QP_SELECT_OP_TYPES_TO_QUANTIZE), 3);
    assert_true(qp_select_has_op(s, QP_SELECT_OP_TYPES_TO_QUANTIZE, "Add"));
    assert_false(qp_select_has_op(s, QP_SELECT_OP_TYPES_TO_QUANTIZE, "Relu"));

    unsigned char *flags = calloc(g->n_nodes, 1);
    warnings[0] = '\0';
    qp_log_set_hook(capture, NULL);
    assert_int_equal(qp_select_match(s, g, flags, &err), QP_OK);
    qp_log_set_hook(NULL, NULL);
    int e0 = qp_graph_find_node(g, "blocks.0._expand_conv.0");
    int p0 = qp_graph_find_node(g, "blocks.0._project_conv.1");
    int add = qp_graph_find_node(g, "blocks.1.add");
    assert_int_equal(flags[e0], QP_SEL_EXCLUDE | QP_SEL_OP_QUANTIZE);
    assert_int_equal(flags[p0], QP_SEL_NODE_QUANTIZE | QP_SEL_OP_QUANTIZE);
    assert_int_equal(flags[add], QP_SEL_OP_QUANTIZE);
    /* Patterns that match nothing are warnings naming them; case slips get a hint. */
    assert_non_null(strstr(warnings, "nodes_to_exclude: pattern '_project' matches no node"));
    assert_non_null(strstr(warnings, "nodes_to_quantize: pattern 'nomatch.*' matches no node"));
    assert_non_null(strstr(warnings, "op type 'relu' matches no node (did you mean 'Relu'?)"));
    free(flags);
    qp_select_free(s);

    /* Errors: a bad regex names it (and the file line), a missing file is an i/o error. */
    s = qp_select_create();
    assert_int_equal(qp_select_add(s, QP_SELECT_NODES_TO_EXCLUDE, "conv(", &err), QP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "bad regex 'conv('"));
    path = write_tmp("sel_bad.txt", "ok\n[unclosed\n");
    snprintf(arg, sizeof arg, "@%s", path);
    assert_int_equal(qp_select_add(s, QP_SELECT_NODES_TO_EXCLUDE, arg, &err), QP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "sel_bad.txt:2"));
    assert_int_equal(qp_select_add(s, QP_SELECT_NODES_TO_EXCLUDE, "@/nonexistent/list", &err),
                     QP_ERR_IO);
    /* Stacked quantifiers would make regcomp take gigabytes (a fuzz finding): refused. */
    assert_int_equal(qp_select_add(s, QP_SELECT_NODES_TO_EXCLUDE, "a+++++++++++++++++", &err),
                     QP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "stacked quantifiers"));
    assert_int_equal(qp_select_add(s, QP_SELECT_NODES_TO_EXCLUDE, "a*?", &err), QP_ERR_USAGE);
    /* A backslash is literal in a bracket (POSIX): "[a\\]" ends there, so the '++' after it is
     * stacked (a fuzz finding: regcomp ran for minutes). */
    assert_int_equal(qp_select_add(s, QP_SELECT_NODES_TO_EXCLUDE, "[a\\]b++", &err), QP_ERR_USAGE);
    /* ...but quantifiers in brackets or escaped, and bounded repeats, are fine. */
    assert_int_equal(qp_select_add(s, QP_SELECT_NODES_TO_EXCLUDE, "[+*]+x\\++y{2}z", &err), QP_OK);
    /* Quantified groups nested in quantified groups multiply regcomp's copies (a fuzz finding):
     * twenty levels of (...)+ (2^20 copies) or a{99}{99}-like bounds on groups are refused with
     * a message, ordinary nesting passes. */
    char deep[128] = "";
    for (int i = 0; i < 20; i++)
        strcat(deep, "(");
    strcat(deep, "a");
    for (int i = 0; i < 20; i++)
        strcat(deep, ")+");
    assert_int_equal(qp_select_add(s, QP_SELECT_NODES_TO_EXCLUDE, deep, &err), QP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "too complex"));
    assert_int_equal(qp_select_add(s, QP_SELECT_NODES_TO_EXCLUDE, "(((ab){99}c){99}d){99}", &err),
                     QP_ERR_USAGE);
    assert_int_equal(qp_select_add(s, QP_SELECT_NODES_TO_EXCLUDE,
                                   "(blocks\\.(\\d+)\\.)+(conv|fc)[0-9]{1,3}", &err),
                     QP_OK);
    /* An optional bound's copies cost regcomp memory quadratic in their number ("#{,24444}":
     * 3 GB, a fuzz finding): bounds above 255 are refused, 255 and bounds in brackets pass. */
    assert_int_equal(qp_select_add(s, QP_SELECT_NODES_TO_EXCLUDE, ",#{,24444}x", &err),
                     QP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "repetition bound 24444 above 255"));
    assert_int_equal(qp_select_add(s, QP_SELECT_NODES_TO_EXCLUDE, "a{256}", &err), QP_ERR_USAGE);
    assert_int_equal(
        qp_select_add(s, QP_SELECT_NODES_TO_EXCLUDE, "a{1,99999999999999999999}", &err),
        QP_ERR_USAGE);
    assert_int_equal(qp_select_add(s, QP_SELECT_NODES_TO_EXCLUDE, "a{0,255}[{9999}]\\{9999}", &err),
                     QP_OK);
    qp_select_free(s);
    qp_select_free(NULL);
    qp_model_free(m);
}

static struct qp_rules *parse(const char *text) {
    struct qp_error err = {0};
    struct qp_rules *r = NULL;
    enum qp_status st = qp_rules_parse(text, strlen(text), "r.rules", &r, &err);
    if (st != QP_OK) fail_msg("parse failed: %s", err.msg);
    return r;
}

static void expect_syntax_error(const char *text, const char *needle) {
    struct qp_error err = {0};
    struct qp_rules *r = NULL;
    assert_int_equal(qp_rules_parse(text, strlen(text), "r.rules", &r, &err), QP_ERR_BAD_INPUT);
    assert_null(r);
    if (!strstr(err.msg, needle)) fail_msg("message '%s' lacks '%s'", err.msg, needle);
}

static void test_rules_syntax(void **state) {
    (void)state;
    struct qp_rules *r = parse("# comment\n\n  on output 0 glob *project_conv.1*  \n"
                               "off input * re blocks\\.[0-9]+\\._expand\r\n"
                               "on input 1 op Conv\n");
    assert_int_equal(qp_rules_count(r), 3);
    qp_rules_free(r);
    expect_syntax_error("maybe input 0 glob x\n", "r.rules:1: expected 'on' or 'off'");
    expect_syntax_error("\non inpt 0 glob x\n", "r.rules:2: expected 'input' or 'output'");
    expect_syntax_error("on input x glob n\n", "r.rules:1: expected a slot index");
    expect_syntax_error("on input -1 glob n\n", "r.rules:1: expected a slot index");
    expect_syntax_error("on input 99999999999 glob n\n", "expected a slot index");
    expect_syntax_error("on input 0 regex n\n", "r.rules:1: expected 'glob', 're' or 'op'");
    expect_syntax_error("on input 0 glob\n", "r.rules:1: missing pattern");
    expect_syntax_error("on input 0 re (a\n", "r.rules:1: bad regex '(a'");
    expect_syntax_error("on input 0\n", "expected 'glob', 're' or 'op'");
    char nul[] = "on input 0 glob a\0b\n";
    struct qp_error err = {0};
    struct qp_rules *rr = NULL;
    assert_int_equal(qp_rules_parse(nul, sizeof nul - 1, NULL, &rr, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "NUL"));
    assert_int_equal(qp_rules_load_file("/nonexistent/r.rules", &rr, &err), QP_ERR_IO);
}

static char *dump(const struct qp_placement *p) {
    static char s[4096];
    size_t n = 0;
    s[0] = '\0';
    for (size_t i = 0; i < p->n_edges; i++)
        n += (size_t)snprintf(s + n, sizeof s - n, "e %s %s %d %s\n", p->edges[i].tensor,
                              p->edges[i].node, p->edges[i].input, p->edges[i].reason);
    for (size_t i = 0; i < p->n_weights; i++)
        n += (size_t)snprintf(s + n, sizeof s - n, "w %s %s %d %d %s\n", p->weights[i].tensor,
                              p->weights[i].node, p->weights[i].input, p->weights[i].axis,
                              p->weights[i].reason);
    return s;
}

static void test_rules_apply(void **state) {
    (void)state;
    struct qp_error err = {0};
    struct qp_model *m = mbconv();
    struct qp_graph *g = m->graph;
    struct qp_placement *p = qp_placement_create();
    /* Start from the policy's usual inputs on all three convs. */
    assert_int_equal(
        qp_placement_add_edge(p, "x", "blocks.0._expand_conv.0", 0, "trt.conv_input", &err), QP_OK);
    assert_int_equal(
        qp_placement_add_edge(p, "d0", "blocks.0._project_conv.1", 0, "trt.conv_input", &err),
        QP_OK);
    /* The hand-tuned placement: quantize the output of *project_conv.1*, not the input of
     * *_expand_conv.0*; weights of every conv per channel; a rule matching nothing warns. */
    const char *path = write_tmp("mb.rules", "on output 0 glob *project_conv.1*\n"
                                             "off input * glob *_expand_conv.0*\n"
                                             "on input 1 op Conv\n"
                                             "off input 1 re blocks\\.\\d\\._depthwise\n"
                                             "on input 0 glob nothing*\n"
                                             "on input 5 op Relu\n");
    struct qp_rules *r = NULL;
    assert_int_equal(qp_rules_load_file(path, &r, &err), QP_OK);
    warnings[0] = '\0';
    qp_log_set_hook(capture, NULL);
    assert_int_equal(qp_rules_apply(r, g, p, &err), QP_OK);
    qp_log_set_hook(NULL, NULL);
    assert_string_equal(dump(p), "e d0 blocks.0._project_conv.1 0 trt.conv_input\n"
                                 "e p0 blocks.1.relu 0 user.rule:1\n"
                                 "e p0 blocks.1.add 1 user.rule:1\n"
                                 "w blocks.0._expand_conv.0.w blocks.0._expand_conv.0 1 0 "
                                 "user.rule:3\n"
                                 "w blocks.0._project_conv.1.w blocks.0._project_conv.1 1 0 "
                                 "user.rule:3\n");
    assert_non_null(strstr(warnings, "mb.rules:5: rule matches no node ('nothing*')"));
    assert_non_null(strstr(warnings, "mb.rules:6: node 'blocks.1.relu' (Relu) has no input 5"));

    /* Later rules win; "off output" removes every consumer edge of the tensor. */
    struct qp_rules *r2 = parse("off output * glob *project_conv*\non input 0 glob blocks.1.add\n");
    assert_int_equal(qp_rules_apply(r2, g, p, &err), QP_OK);
    assert_false(qp_placement_find(p, "blocks.1.relu", 0, NULL, NULL));
    assert_false(qp_placement_find(p, "blocks.1.add", 1, NULL, NULL));
    size_t idx;
    assert_true(qp_placement_find(p, "blocks.1.add", 0, NULL, &idx));
    assert_string_equal(p->edges[idx].reason, "user.rule:2");
    qp_rules_free(r);
    qp_rules_free(r2);
    qp_placement_free(p);
    qp_model_free(m);
}

static void test_weight_axis(void **state) {
    (void)state;
    struct qp_model *m = qp_model_create();
    qg_input(m, "x");
    qg_init(m, "w", 2, QG_DIMS(8, 8));
    int gemm = qg_node(m, "gemm", "Gemm", "x,w", "y");
    int ct = qg_node(m, "ct", "ConvTranspose", "x,w", "z");
    int mm = qg_node(m, "mm", "MatMul", "x,w", "u");
    struct qp_graph *g = m->graph;
    assert_int_equal(qp_weight_axis(&g->nodes[gemm], 1, 2), 1);
    qg_attr_i(m, gemm, "transB", 1);
    assert_int_equal(qp_weight_axis(&g->nodes[gemm], 1, 2), 0);
    assert_int_equal(qp_weight_axis(&g->nodes[ct], 1, 4), 1);
    assert_int_equal(qp_weight_axis(&g->nodes[mm], 1, 3), 2);
    assert_int_equal(qp_weight_axis(&g->nodes[mm], 0, 2), -1);
    qp_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lists_and_files),
        cmocka_unit_test(test_rules_syntax),
        cmocka_unit_test(test_rules_apply),
        cmocka_unit_test(test_weight_axis),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
