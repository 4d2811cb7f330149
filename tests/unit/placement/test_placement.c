/* Unit tests of the placement type: slots, set operations, validation and JSON. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "placement/placement.h"
#include "../quant/qgraph.h"

/* x -> conv1(w1) -> y -> relu -> z -> conv2(w2, b2) -> out; z also read by add(z, y). */
static struct qp_model *small_model(void) {
    struct qp_model *m = qp_model_create();
    assert_non_null(m);
    qg_input(m, "x");
    qg_init(m, "w1", 4, QG_DIMS(16, 3, 3, 3));
    qg_init(m, "w2", 4, QG_DIMS(16, 16, 1, 1));
    qg_init(m, "b2", 1, QG_DIMS(16));
    /* File order differs from topological order on purpose. */
    qg_node(m, "conv2", "Conv", "z,w2,b2", "out");
    qg_node(m, "conv1", "Conv", "x,w1", "y");
    qg_node(m, "relu", "Relu", "y", "z");
    qg_node(m, "add", "Add", "z,y", "s");
    qg_output(m, "out");
    qg_output(m, "s");
    qg_sort(m);
    return m;
}

static void test_add_find_remove(void **state) {
    (void)state;
    struct qp_error err = {0};
    struct qp_placement *p = qp_placement_create();
    assert_non_null(p);
    assert_int_equal(qp_placement_add_edge(p, "x", "conv1", 0, "trt.conv_input", &err), QP_OK);
    assert_int_equal(qp_placement_add_weight(p, "w1", "conv1", 1, 0, "trt.conv_weight", &err),
                     QP_OK);
    /* The same edge again is a no-op and keeps the first reason. */
    assert_int_equal(qp_placement_add_edge(p, "x", "conv1", 0, "other", &err), QP_OK);
    assert_int_equal(p->n_edges, 1);
    assert_string_equal(p->edges[0].reason, "trt.conv_input");
    /* A different tensor or kind on an occupied slot is an error naming the slot. */
    assert_int_equal(qp_placement_add_edge(p, "q", "conv1", 0, "r", &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "'conv1' input 0"));
    assert_int_equal(qp_placement_add_edge(p, "w1", "conv1", 1, "r", &err), QP_ERR_BAD_INPUT);
    assert_int_equal(qp_placement_add_weight(p, "w1", "conv1", 1, 1, "r", &err), QP_ERR_BAD_INPUT);
    assert_int_equal(qp_placement_add_edge(p, "x", "conv1", -1, "r", &err), QP_ERR_USAGE);
    assert_int_equal(qp_placement_add_edge(p, "", "conv1", 0, "r", &err), QP_ERR_USAGE);

    int is_w = -1;
    size_t idx = 99;
    assert_true(qp_placement_find(p, "conv1", 1, &is_w, &idx));
    assert_int_equal(is_w, 1);
    assert_int_equal(idx, 0);
    assert_false(qp_placement_find(p, "conv1", 2, NULL, NULL));
    assert_int_equal(qp_placement_remove(p, "conv1", 0), 1);
    assert_int_equal(qp_placement_remove(p, "conv1", 0), 0);
    assert_int_equal(p->n_edges, 0);
    assert_true(qp_placement_find(p, "conv1", 1, NULL, NULL));
    qp_placement_free(p);
    qp_placement_free(NULL);
}

static void test_many_slots(void **state) {
    (void)state;
    struct qp_error err = {0};
    struct qp_placement *p = qp_placement_create();
    char name[32];
    for (int i = 0; i < 3000; i++) {
        snprintf(name, sizeof name, "n%d", i);
        assert_int_equal(qp_placement_add_edge(p, "t", name, i % 3, "r", &err), QP_OK);
    }
    for (int i = 0; i < 3000; i += 2) {
        snprintf(name, sizeof name, "n%d", i);
        assert_int_equal(qp_placement_remove(p, name, i % 3), 1);
    }
    assert_int_equal(p->n_edges, 1500);
    for (int i = 0; i < 3000; i++) {
        snprintf(name, sizeof name, "n%d", i);
        assert_int_equal(qp_placement_find(p, name, i % 3, NULL, NULL), i % 2);
    }
    qp_placement_free(p);
}

static struct qp_placement *make(const char *spec) {
    /* "e:tensor:node:input" or "w:tensor:node:input:axis", separated by spaces. */
    struct qp_error err = {0};
    struct qp_placement *p = qp_placement_create();
    char buf[512], *save = NULL;
    snprintf(buf, sizeof buf, "%s", spec);
    for (char *tok = strtok_r(buf, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        char kind = 0, t[64], n[64];
        int in = 0, ax = 0;
        int got = sscanf(tok, "%c:%63[^:]:%63[^:]:%d:%d", &kind, t, n, &in, &ax);
        assert_true(got >= 4);
        if (kind == 'e')
            assert_int_equal(qp_placement_add_edge(p, t, n, in, "r", &err), QP_OK);
        else
            assert_int_equal(qp_placement_add_weight(p, t, n, in, ax, "r", &err), QP_OK);
    }
    return p;
}

static void test_set_operations(void **state) {
    (void)state;
    struct qp_error err = {0};
    struct qp_placement *a = make("e:x:conv1:0 w:w1:conv1:1:0 e:z:conv2:0");
    struct qp_placement *b = make("e:z:conv2:0 e:y:add:1");
    struct qp_placement *u = NULL;
    assert_int_equal(qp_placement_copy(a, &u, &err), QP_OK);
    assert_true(qp_placement_equal(a, u));
    assert_int_equal(qp_placement_union(u, b, &err), QP_OK);
    assert_int_equal(u->n_edges, 3);
    assert_int_equal(u->n_weights, 1);
    assert_string_equal(u->edges[2].node, "add"); /* appended in src order */
    assert_false(qp_placement_equal(a, u));

    struct qp_placement *s = NULL;
    assert_int_equal(qp_placement_copy(u, &s, &err), QP_OK);
    qp_placement_subtract(s, b);
    assert_int_equal(s->n_edges, 1);
    assert_int_equal(s->n_weights, 1);
    assert_false(qp_placement_find(s, "conv2", 0, NULL, NULL));

    struct qp_placement *i = NULL;
    assert_int_equal(qp_placement_copy(u, &i, &err), QP_OK);
    qp_placement_intersect(i, b);
    assert_int_equal(i->n_edges, 2);
    assert_int_equal(i->n_weights, 0);

    /* Conflicting contents on a shared slot. */
    struct qp_placement *c = make("e:q:conv2:0");
    assert_int_equal(qp_placement_union(c, a, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "'conv2' input 0"));
    struct qp_placement *d = make("e:x:conv1:0 w:w1:conv1:1:1 e:z:conv2:0");
    assert_false(qp_placement_equal(a, d)); /* axis differs */

    qp_placement_free(a);
    qp_placement_free(b);
    qp_placement_free(u);
    qp_placement_free(s);
    qp_placement_free(i);
    qp_placement_free(c);
    qp_placement_free(d);
}

static void test_validate_sorts(void **state) {
    (void)state;
    struct qp_error err = {0};
    struct qp_model *m = small_model();
    struct qp_placement *p = make("e:y:add:1 e:z:add:0 e:z:conv2:0 w:w2:conv2:1:0 e:x:conv1:0 "
                                  "w:w1:conv1:1:0");
    assert_int_equal(qp_placement_validate(p, m->graph, &err), QP_OK);
    /* topo: conv1, relu, conv2, add (ready nodes in file order) */
    const char *want[][2] = {{"conv1", "x"}, {"conv2", "z"}, {"add", "z"}, {"add", "y"}};
    assert_int_equal(p->n_edges, 4);
    for (int k = 0; k < 4; k++) {
        assert_string_equal(p->edges[k].node, want[k][0]);
        assert_string_equal(p->edges[k].tensor, want[k][1]);
        assert_int_equal(p->edges[k].node_index, qp_graph_find_node(m->graph, want[k][0]));
    }
    assert_string_equal(p->weights[0].node, "conv1");
    assert_string_equal(p->weights[1].node, "conv2");
    assert_true(qp_placement_find(p, "add", 1, NULL, NULL)); /* hash follows the new order */
    size_t idx;
    assert_true(qp_placement_find(p, "add", 0, NULL, &idx));
    assert_int_equal(idx, 2);
    qp_placement_free(p);
    qp_model_free(m);
}

static void expect_invalid(struct qp_model *m, const char *spec, const char *needle) {
    struct qp_error err = {0};
    struct qp_placement *p = make(spec);
    assert_int_equal(qp_placement_validate(p, m->graph, &err), QP_ERR_BAD_INPUT);
    if (!strstr(err.msg, needle)) fail_msg("message '%s' lacks '%s'", err.msg, needle);
    qp_placement_free(p);
}

static void test_validate_errors(void **state) {
    (void)state;
    struct qp_model *m = small_model();
    expect_invalid(m, "e:x:conv1:0 e:x:nosuchnode:0", "node 'nosuchnode' does not exist");
    expect_invalid(m, "e:ghost:conv1:0", "tensor 'ghost' does not exist");
    expect_invalid(m, "e:x:conv1:7", "there is no input 7");
    expect_invalid(m, "e:y:conv1:0", "input 0 of node 'conv1' (Conv) is 'x', not 'y'");
    expect_invalid(m, "e:w1:conv1:1", "'w1' (input 1 of 'conv1') is an initializer");
    expect_invalid(m, "w:x:conv1:0:0", "'x' is not an initializer");
    expect_invalid(m, "w:w1:conv1:1:4", "axis 4 is out of range");
    qp_model_free(m);
}

static char *write_json(const struct qp_placement *p) {
    struct qp_error err = {0};
    char *s = NULL;
    assert_int_equal(qp_placement_write_json(p, &s, &err), QP_OK);
    return s;
}

static void test_json_round_trip(void **state) {
    (void)state;
    struct qp_error err = {0};
    struct qp_placement *p = qp_placement_create();
    assert_int_equal(qp_placement_add_edge(p, "x", "conv1", 0, "trt.conv_input", &err), QP_OK);
    assert_int_equal(
        qp_placement_add_edge(p, "we\"ird\\na\tme/\xc3\xa9", "n\"2", 3, "user.rule:3", &err),
        QP_OK);
    assert_int_equal(qp_placement_add_weight(p, "w1", "conv1", 1, 0, "trt.conv_weight", &err),
                     QP_OK);
    assert_int_equal(qp_placement_add_weight(p, "s", "mul", 1, -1, "trt.const_input", &err), QP_OK);
    char *a = write_json(p);
    const char *expect_head = "{\n  \"format\": \"qplace.placement\",\n  \"version\": 1,\n"
                              "  \"edges\": [\n    {\"tensor\":\"x\",\"node\":\"conv1\","
                              "\"input\":0,\"reason\":\"trt.conv_input\"},\n";
    assert_memory_equal(a, expect_head, strlen(expect_head));
    struct qp_placement *q = NULL;
    assert_int_equal(qp_placement_read_json(a, strlen(a), "a.json", &q, &err), QP_OK);
    assert_true(qp_placement_equal(p, q));
    assert_string_equal(q->edges[1].tensor, "we\"ird\\na\tme/\xc3\xa9");
    assert_string_equal(q->edges[1].reason, "user.rule:3");
    assert_int_equal(q->weights[1].axis, -1);
    char *b = write_json(q);
    assert_string_equal(a, b);

    /* Empty placement. */
    struct qp_placement *e = qp_placement_create();
    char *c = write_json(e);
    assert_string_equal(c, "{\n  \"format\": \"qplace.placement\",\n  \"version\": 1,\n"
                           "  \"edges\": [],\n  \"weights\": []\n}\n");
    struct qp_placement *e2 = NULL;
    assert_int_equal(qp_placement_read_json(c, strlen(c), NULL, &e2, &err), QP_OK);
    assert_int_equal(e2->n_edges + e2->n_weights, 0);

    /* Files: save atomically and load back. */
    char path[512];
    snprintf(path, sizeof path, "%s/test_placement_rt.json", QP_TEST_BINARY_DIR);
    assert_int_equal(qp_placement_save_file(p, path, &err), QP_OK);
    struct qp_placement *f = NULL;
    assert_int_equal(qp_placement_load_file(path, &f, &err), QP_OK);
    char *d = write_json(f);
    assert_string_equal(a, d);
    remove(path);
    assert_int_equal(qp_placement_load_file("/nonexistent/p.json", &f, &err), QP_ERR_IO);

    free(a);
    free(b);
    free(c);
    free(d);
    qp_placement_free(p);
    qp_placement_free(q);
    qp_placement_free(e);
    qp_placement_free(e2);
    qp_placement_free(f);
}

static void expect_bad_json(const char *text, enum qp_status want, const char *needle) {
    struct qp_error err = {0};
    struct qp_placement *p = NULL;
    assert_int_equal(qp_placement_read_json(text, strlen(text), "p.json", &p, &err), want);
    assert_null(p);
    if (!strstr(err.msg, needle)) fail_msg("message '%s' lacks '%s'", err.msg, needle);
}

#define HEAD "{\"format\":\"qplace.placement\",\"version\":1,"

static void test_json_errors(void **state) {
    (void)state;
    expect_bad_json("", QP_ERR_BAD_INPUT, "not valid JSON");
    expect_bad_json("{\"format\":", QP_ERR_BAD_INPUT, "not valid JSON");
    expect_bad_json("[]", QP_ERR_BAD_INPUT, "top level");
    expect_bad_json("{\"format\":\"x\",\"version\":1,\"edges\":[]}", QP_ERR_BAD_INPUT,
                    "\"format\" must be");
    expect_bad_json("{\"format\":\"qplace.placement\",\"version\":2,\"edges\":[]}",
                    QP_ERR_UNSUPPORTED, "version 2 is newer");
    expect_bad_json("{\"format\":\"qplace.placement\",\"version\":1.5,\"edges\":[]}",
                    QP_ERR_BAD_INPUT, "\"version\"");
    expect_bad_json(HEAD "\"edges\":[],\"extra\":1}", QP_ERR_BAD_INPUT, "unknown key \"extra\"");
    expect_bad_json(HEAD "\"edges\":[],\"edges\":[]}", QP_ERR_BAD_INPUT, "repeated");
    expect_bad_json(HEAD "\"weights\":[]}", QP_ERR_BAD_INPUT, "\"edges\" must be an array");
    expect_bad_json(HEAD "\"edges\":[1]}", QP_ERR_BAD_INPUT, "edges[0] is not an object");
    expect_bad_json(HEAD "\"edges\":[{\"tensor\":\"x\",\"node\":\"n\"}]}", QP_ERR_BAD_INPUT,
                    "edges[0]: missing \"input\"");
    expect_bad_json(HEAD "\"edges\":[{\"tensor\":\"x\",\"node\":\"n\",\"input\":-1}]}",
                    QP_ERR_BAD_INPUT, "\"input\" must be an integer >= 0");
    expect_bad_json(HEAD "\"edges\":[{\"tensor\":\"x\",\"node\":\"n\",\"input\":0.5}]}",
                    QP_ERR_BAD_INPUT, "\"input\" must be an integer >= 0");
    expect_bad_json(HEAD "\"edges\":[{\"tensor\":\"x\",\"node\":\"n\",\"input\":1e30}]}",
                    QP_ERR_BAD_INPUT, "\"input\" must be an integer >= 0");
    expect_bad_json(HEAD "\"edges\":[{\"tensor\":\"\",\"node\":\"n\",\"input\":0}]}",
                    QP_ERR_BAD_INPUT, "\"tensor\" must be a non-empty string");
    expect_bad_json(HEAD "\"edges\":[{\"tensor\":\"x\",\"node\":\"n\",\"input\":0,\"axis\":0}]}",
                    QP_ERR_BAD_INPUT, "edges[0]: unknown key \"axis\"");
    expect_bad_json(HEAD "\"edges\":[{\"tensor\":\"x\",\"node\":\"n\",\"input\":0},"
                         "{\"tensor\":\"x\",\"node\":\"n\",\"input\":0}]}",
                    QP_ERR_BAD_INPUT, "edges[1]: node 'n' input 0 is quantized twice");
    expect_bad_json(HEAD "\"edges\":[{\"tensor\":\"x\",\"node\":\"n\",\"input\":0}],"
                         "\"weights\":[{\"tensor\":\"w\",\"node\":\"n\",\"input\":0,\"axis\":0}]}",
                    QP_ERR_BAD_INPUT, "weights[0]: node 'n' input 0 is quantized twice");
    expect_bad_json(HEAD "\"edges\":[],\"weights\":[{\"tensor\":\"w\",\"node\":\"n\",\"input\":1}"
                         "]}",
                    QP_ERR_BAD_INPUT, "weights[0]: missing \"axis\"");
    expect_bad_json(HEAD "\"edges\":[],\"weights\":[{\"tensor\":\"w\",\"node\":\"n\",\"input\":1,"
                         "\"axis\":-2}]}",
                    QP_ERR_BAD_INPUT, "\"axis\" must be an integer >= -1");
    /* Deep nesting is rejected by the parser, not by a crash. */
    char deep[4096];
    memset(deep, '[', sizeof deep - 1);
    deep[sizeof deep - 1] = '\0';
    expect_bad_json(deep, QP_ERR_BAD_INPUT, "not valid JSON");

    /* A reason may be omitted; it defaults to user.placement. */
    struct qp_error err = {0};
    struct qp_placement *p = NULL;
    const char *ok = HEAD "\"edges\":[{\"node\":\"n\",\"input\":2,\"tensor\":\"x\"}]}";
    assert_int_equal(qp_placement_read_json(ok, strlen(ok), NULL, &p, &err), QP_OK);
    assert_string_equal(p->edges[0].reason, "user.placement");
    assert_int_equal(p->edges[0].input, 2);
    qp_placement_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_find_remove), cmocka_unit_test(test_many_slots),
        cmocka_unit_test(test_set_operations),  cmocka_unit_test(test_validate_sorts),
        cmocka_unit_test(test_validate_errors), cmocka_unit_test(test_json_round_trip),
        cmocka_unit_test(test_json_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
