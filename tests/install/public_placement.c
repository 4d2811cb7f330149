/*
 * public_placement FLOAT.onnx QDQ.onnx PLACEMENT.json: qplace/placement.h through the installed
 * headers and library only (tests/install/check_install.sh builds it with pkg-config). The Q/DQ
 * model and the placement are what the installed `qplace quantize --placement_out` wrote from
 * FLOAT: the diff between them must be SAME, the placement must check against the float model,
 * round-trip through JSON byte for byte, and survive set operations; a placement naming a node
 * that does not exist must fail the check with a message naming it; qp_placement_trt on FLOAT
 * must give the CLI's placement byte for byte and honour its lists. Exit 0 when all holds.
 */
#include <qplace.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c, ...)                                                                              \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: public_placement FLOAT.onnx QDQ.onnx PLACEMENT.json\n");
        return 1;
    }
    struct qp_error err = {0};
    struct qp_model *mf = NULL, *mq = NULL;
    struct qp_placement *p = NULL, *back = NULL, *c = NULL, *t = NULL, *u = NULL, *v = NULL;
    char *text = NULL, *text2 = NULL, *text3 = NULL;
    int rc = 1;
    CHECK(qp_model_load_file(argv[1], NULL, &mf, &err) == QP_OK, "%s", err.msg);
    CHECK(qp_model_load_file(argv[2], NULL, &mq, &err) == QP_OK, "%s", err.msg);
    CHECK(qp_placement_load_file(argv[3], &p, &err) == QP_OK, "%s", err.msg);
    size_t ne = qp_placement_n_edges(p), nw = qp_placement_n_weights(p);
    CHECK(ne > 0 && nw > 0, "%zu edges, %zu weights", ne, nw);
    struct qp_placement_entry e;
    for (size_t i = 0; i < ne; i++) {
        CHECK(qp_placement_edge(p, i, &e) && e.tensor && e.node && e.reason && e.axis == -1,
              "edge %zu", i);
        size_t at = 0;
        int is_weight = 1;
        CHECK(qp_placement_find(p, e.node, e.input, &is_weight, &at) && !is_weight && at == i,
              "find edge %zu", i);
    }
    CHECK(!qp_placement_edge(p, ne, &e), "edge past the end");
    for (size_t i = 0; i < nw; i++)
        CHECK(qp_placement_weight(p, i, &e) && e.axis >= -1 && e.reason, "weight %zu", i);

    /* The written model against its placement: SAME, every entry counted once. */
    struct qp_diff_side a = {.model = mq, .name = argv[2]};
    struct qp_diff_side b = {.model = mf, .placement = p, .name = argv[3]};
    struct qp_diff_counts dc;
    CHECK(qp_placement_diff(&a, &b, 0, &dc, &text, &err) == QP_OK, "%s", err.msg);
    CHECK(dc.same[0] == ne && dc.same[1] == nw && !dc.a_only[0] && !dc.a_only[1] && !dc.b_only[0] &&
              !dc.b_only[1],
          "diff: same %zu/%zu, A only %zu/%zu, B only %zu/%zu\n%s", dc.same[0], dc.same[1],
          dc.a_only[0], dc.a_only[1], dc.b_only[0], dc.b_only[1], text);
    CHECK(strstr(text, "result: SAME") != NULL, "report:\n%s", text);
    free(text);
    text = NULL;

    /* Checked against the float model; JSON round trip byte for byte. */
    CHECK(qp_placement_check(p, mf, &err) == QP_OK, "%s", err.msg);
    CHECK(qp_placement_write_json(p, &text, &err) == QP_OK, "%s", err.msg);
    CHECK(qp_placement_read_json(text, strlen(text), "memory", &back, &err) == QP_OK, "%s",
          err.msg);
    CHECK(qp_placement_equal(p, back), "read back differs");
    CHECK(qp_placement_write_json(back, &text2, &err) == QP_OK && strcmp(text, text2) == 0,
          "second write differs");

    /* Set operations. */
    CHECK(qp_placement_copy(p, &c, &err) == QP_OK, "%s", err.msg);
    CHECK(qp_placement_edge(p, 0, &e), "edge 0");
    CHECK(qp_placement_remove(c, e.node, e.input) == 1 && !qp_placement_equal(c, p) &&
              qp_placement_n_edges(c) == ne - 1,
          "remove");
    CHECK(qp_placement_union(c, p, &err) == QP_OK && qp_placement_equal(c, p), "union: %s",
          err.msg);

    /* A node that does not exist: the check names it. */
    CHECK(qp_placement_add_edge(c, e.tensor, "no_such_node", 0, "user.test", &err) == QP_OK, "%s",
          err.msg);
    CHECK(qp_placement_check(c, mf, &err) == QP_ERR_BAD_INPUT && strstr(err.msg, "no_such_node"),
          "check of a missing node: status %d, '%s'", (int)err.status, err.msg);
    char missing[QP_ERROR_MSG_SIZE];
    snprintf(missing, sizeof missing, "%s", err.msg);

    /* The trt policy through the library: the very placement the CLI wrote, byte for byte. */
    CHECK(qp_placement_trt(mf, NULL, &t, &err) == QP_OK, "%s", err.msg);
    CHECK(qp_placement_write_json(t, &text3, &err) == QP_OK, "%s", err.msg);
    CHECK(strcmp(text3, text) == 0, "qp_placement_trt differs from the CLI's placement");
    /* Options: an op type excluded, and a regex that does not compile. */
    const char *no_conv[] = {"Conv"}, *bad_re[] = {"("};
    struct qp_trt_options o = {.n_op_types_to_exclude = 1, .op_types_to_exclude = no_conv};
    CHECK(qp_placement_trt(mf, &o, &u, &err) == QP_OK, "%s", err.msg);
    size_t n_conv = 0;
    for (size_t i = 0; i < qp_placement_n_edges(u); i++)
        n_conv += qp_placement_edge(u, i, &e) && strstr(e.reason, "conv") != NULL;
    CHECK(n_conv == 0 && qp_placement_n_edges(u) < ne, "with Conv excluded: %zu conv edges of %zu",
          n_conv, qp_placement_n_edges(u));
    struct qp_trt_options ob = {.n_nodes_to_exclude = 1, .nodes_to_exclude = bad_re};
    CHECK(qp_placement_trt(mf, &ob, &v, &err) == QP_ERR_USAGE && v == NULL, "bad regex: %d",
          (int)err.status);
    printf("ok   public placement API: %zu edges, %zu weights; diff with the written model SAME; "
           "check, JSON round trip, set operations; a missing node is named (%s); qp_placement_trt "
           "gives the CLI's placement byte for byte, %zu edges without Conv; a bad regex: %s\n",
           ne, nw, missing, qp_placement_n_edges(u), err.msg);
    rc = 0;
done:
    free(text);
    free(text2);
    free(text3);
    qp_placement_free(t);
    qp_placement_free(u);
    qp_placement_free(v);
    qp_placement_free(c);
    qp_placement_free(back);
    qp_placement_free(p);
    qp_model_free(mq);
    qp_model_free(mf);
    return rc;
}
