/* Loading ONNX files: dtypes, graphs and subgraphs, external data, and every way to fail. */
#include "onnx_test_util.h"

#include <errno.h>

#include "../../data/onnx/dtypes_expected.h"

static const struct qp_tensor *find_init(const struct qp_graph *g, const char *name) {
    for (size_t i = 0; i < g->n_inits; i++)
        if (!strcmp(g->inits[i].name, name)) return &g->inits[i];
    fail_msg("no initializer '%s'", name);
    return NULL;
}

static const struct qp_node *find_node(const struct qp_graph *g, const char *name) {
    int n = qp_graph_find_node(g, name);
    if (n < 0) fail_msg("no node '%s'", name);
    return &g->nodes[n];
}

/* ---- dtypes --------------------------------------------------------------------------------- */

static void check_case(const struct qp_tensor *t, const struct dtype_case *c) {
    if ((int)t->dtype != c->dtype)
        fail_msg("%s: dtype %d, expected %d", t->name, t->dtype, c->dtype);
    assert_int_equal(t->rank, c->rank);
    for (int i = 0; i < c->rank; i++)
        assert_int_equal(t->dims[i], c->dims[i]);
    assert_int_equal(t->numel, c->numel);
    if (t->nbytes != c->nbytes)
        fail_msg("%s: nbytes %zu, expected %zu", t->name, t->nbytes, c->nbytes);
    if (c->nbytes && memcmp(t->data, c->bytes, c->nbytes)) fail_msg("%s: bytes differ", t->name);
}

static void test_every_dtype(void **state) {
    (void)state;
    struct qp_model *m = tu_load(ONNX_DATA "dtypes.onnx");
    const struct qp_graph *g = m->graph;
    size_t n = sizeof dtype_cases / sizeof dtype_cases[0];
    assert_true(n >= 24);
    for (size_t i = 0; i < n; i++) {
        const struct dtype_case *c = &dtype_cases[i];
        const struct qp_tensor *raw = find_init(g, tu_fmt("raw_%s", c->name));
        const struct qp_tensor *typed = find_init(g, tu_fmt("typed_%s", c->name));
        check_case(raw, c);
        check_case(typed, c);
        /* raw_data is borrowed from the unpacked message, not copied. */
        const Onnx__TensorProto *o = raw->origin;
        assert_non_null(o);
        if (c->nbytes) assert_ptr_equal(raw->data, o->raw_data.data);
    }
    /* Typed fields the host can use as is are borrowed too. */
    const struct qp_tensor *tf = find_init(g, "typed_float");
    assert_ptr_equal(tf->data, ((const Onnx__TensorProto *)tf->origin)->float_data);
    const struct qp_tensor *s = find_init(g, "strings");
    assert_int_equal(s->dtype, QP_DTYPE_STRING);
    assert_int_equal(s->numel, 3);
    assert_null(s->data);
    assert_int_equal(s->strings[0].len, 5);
    assert_memory_equal(s->strings[0].data, "hello", 5);
    assert_int_equal(s->strings[1].len, 0);
    assert_int_equal(s->strings[2].len, 6);
    assert_memory_equal(s->strings[2].data, "w\xc3\xb6rld", 6);
    /* Values of the outputs come from the value_info types. */
    int v = qp_graph_find_value(g, "raw_float8e4m3fn");
    assert_true(v >= 0);
    assert_int_equal(g->values[v].dtype, QP_DTYPE_FLOAT8E4M3FN);
    assert_int_equal(g->values[v].rank, 1);
    assert_int_equal(g->values[v].dims[0].value, 5);
    qp_model_free(m);
}

/* ---- graphs, subgraphs, metadata ------------------------------------------------------------ */

static const struct qp_attr *attr(const struct qp_node *n, const char *name) {
    const struct qp_attr *a = qp_node_attr(n, name);
    if (!a) fail_msg("node '%s' has no attribute '%s'", n->name, name);
    return a;
}

static void test_control_flow(void **state) {
    (void)state;
    struct qp_model *m = tu_load(ONNX_DATA "control_flow.onnx");
    assert_int_equal(m->ir_version, 8);
    assert_string_equal(m->producer_name, "qplace-gen");
    assert_string_equal(m->producer_version, "1.0");
    assert_string_equal(m->domain, "ai.qplace.test");
    assert_string_equal(m->doc_string, "model doc");
    assert_int_equal(m->model_version, 7);
    assert_int_equal(m->n_opsets, 2);
    assert_int_equal(qp_model_opset(m, ""), 13);
    assert_int_equal(qp_model_opset(m, "qp.test"), 1);
    assert_int_equal(m->n_metadata, 2);
    assert_string_equal(m->metadata[0].key, "author");
    assert_string_equal(m->metadata[0].value, "qplace");
    assert_string_equal(m->metadata[1].key, "license");
    assert_int_equal(m->n_functions, 1);
    const Onnx__FunctionProto *fn = m->functions[0];
    assert_string_equal(fn->name, "AddTwice");
    assert_string_equal(fn->domain, "qp.test");
    assert_int_equal(fn->n_node, 2);
    assert_non_null(m->path);
    assert_true(m->path[0] == '/');
    assert_non_null(strstr(m->path, "control_flow.onnx"));
    assert_non_null(m->dir);
    assert_int_equal(m->n_external_files, 0);

    const struct qp_graph *g = m->graph;
    assert_string_equal(g->name, "main");
    assert_string_equal(g->doc_string, "graph doc");
    assert_ptr_equal(g->origin, ((const Onnx__ModelProto *)m->proto)->graph);
    assert_int_equal(g->n_inputs, 2);
    assert_int_equal(g->n_outputs, 5);
    assert_int_equal(g->n_value_info, 1);
    assert_int_equal(g->n_topo, 7);

    /* Symbolic and static dims; a value without shape. */
    const struct qp_value *x = &g->values[g->inputs[0]];
    assert_string_equal(x->name, "X");
    assert_int_equal(x->dtype, QP_DTYPE_FLOAT);
    assert_int_equal(x->rank, 2);
    assert_true(x->dims[0].value < 0);
    assert_string_equal(x->dims[0].param, "batch");
    assert_int_equal(x->dims[1].value, 4);
    assert_null(x->dims[1].param);
    assert_non_null(x->origin_type);
    const struct qp_value *y = &g->values[g->outputs[0]];
    assert_string_equal(y->doc_string, "the If result");
    const struct qp_value *z = &g->values[g->outputs[4]];
    assert_string_equal(z->name, "Z");
    assert_int_equal(z->rank, -1);
    assert_int_equal(z->dtype, QP_DTYPE_FLOAT);

    /* Constant: tensor attribute with values. */
    const struct qp_node *c = find_node(g, "const_c");
    const struct qp_attr *val = attr(c, "value");
    assert_int_equal(val->type, QP_ATTR_TENSOR);
    assert_int_equal(val->t->dtype, QP_DTYPE_FLOAT);
    assert_int_equal(val->t->numel, 4);
    assert_true(((const float *)val->t->data)[3] == 0.5f);
    assert_non_null(val->origin);

    /* Node with doc string and an unknown field. */
    const struct qp_node *mul = find_node(g, "mul_xw");
    assert_string_equal(mul->doc_string, "x times w");
    assert_int_equal(((const ProtobufCMessage *)mul->origin)->n_unknown_fields, 1);
    assert_int_equal(((const ProtobufCMessage *)m->proto)->n_unknown_fields, 1);
    assert_int_equal(((const ProtobufCMessage *)g->origin)->n_unknown_fields, 1);

    /* If: both branches are subgraphs whose reads of XW and C are outer-scope. */
    const struct qp_node *ifn = find_node(g, "the_if");
    const struct qp_attr *tb = attr(ifn, "then_branch"), *eb = attr(ifn, "else_branch");
    assert_int_equal(tb->type, QP_ATTR_GRAPH);
    assert_ptr_equal(tb->g->parent, g);
    assert_ptr_equal(eb->g->parent, g);
    assert_string_equal(tb->g->name, "then_branch");
    int xw = qp_graph_find_value(tb->g, "XW");
    assert_true(xw >= 0);
    assert_true(tb->g->values[xw].is_outer);
    assert_int_equal(tb->g->n_topo, 1);
    assert_int_equal(((const ProtobufCMessage *)eb->g->origin)->n_unknown_fields, 1);

    /* Loop body with a nested If reading C from two levels up. */
    const struct qp_node *loop = find_node(g, "the_loop");
    const struct qp_graph *body = attr(loop, "body")->g;
    assert_ptr_equal(body->parent, g);
    assert_int_equal(body->n_inputs, 3);
    assert_int_equal(body->n_topo, 4);
    int w = qp_graph_find_value(body, "W");
    assert_true(w >= 0 && body->values[w].is_outer);
    const struct qp_node *bif = &body->nodes[qp_graph_find_node(body, "body_if")];
    const struct qp_graph *inner = attr(bif, "then_branch")->g;
    assert_ptr_equal(inner->parent, body);
    int ci = qp_graph_find_value(inner, "C");
    assert_true(ci >= 0 && inner->values[ci].is_outer);
    /* The Loop must come after the Constant producing C (read two levels down). */
    size_t pos_const = 0, pos_loop = 0;
    for (size_t k = 0; k < g->n_topo; k++) {
        if (&g->nodes[g->topo[k]] == c) pos_const = k;
        if (&g->nodes[g->topo[k]] == loop) pos_loop = k;
    }
    assert_true(pos_const < pos_loop);

    /* The unnamed Relu got a name. */
    int relu = -1;
    for (size_t i = 0; i < g->n_nodes; i++)
        if (!strcmp(g->nodes[i].op_type, "Relu")) relu = (int)i;
    assert_true(relu >= 0);
    assert_true(g->nodes[relu].name && g->nodes[relu].name[0]);
    assert_non_null(strstr(g->nodes[relu].name, "Relu"));

    /* Attributes of every list kind. */
    const struct qp_node *zoo = find_node(g, "attr_zoo");
    assert_string_equal(zoo->domain, "qp.test");
    assert_true(attr(zoo, "f")->f == 0.25f);
    assert_int_equal(attr(zoo, "i")->i, -3);
    assert_int_equal(attr(zoo, "s")->s.len, 3);
    assert_memory_equal(attr(zoo, "s")->s.data, "str", 3);
    assert_int_equal(attr(zoo, "floats")->n, 2);
    assert_true(attr(zoo, "floats")->floats[1] == 2.5f);
    assert_int_equal(attr(zoo, "ints")->n, 3);
    assert_int_equal(attr(zoo, "ints")->ints[1], -2);
    assert_int_equal(attr(zoo, "strings")->n, 2);
    assert_int_equal(attr(zoo, "strings")->strings[1].len, 2);

    const struct qp_attr *ts = attr(zoo, "tensors");
    assert_int_equal(ts->type, QP_ATTR_TENSORS);
    assert_int_equal(ts->n, 2);
    assert_int_equal(ts->tensors[0]->dtype, QP_DTYPE_INT64);
    assert_int_equal(((const int64_t *)ts->tensors[0]->data)[1], 6);
    assert_int_equal(ts->tensors[1]->rank, 0);
    const struct qp_attr *gs = attr(zoo, "graphs");
    assert_int_equal(gs->type, QP_ATTR_GRAPHS);
    assert_int_equal(gs->n, 2);
    assert_ptr_equal(gs->graphs[1]->parent, g);
    int gx = qp_graph_find_value(gs->graphs[1], "X");
    assert_true(gx >= 0 && gs->graphs[1]->values[gx].is_outer);
    assert_int_equal(attr(zoo, "sparse")->type, QP_ATTR_SPARSE_TENSOR);
    assert_non_null(attr(zoo, "sparse")->origin);
    assert_int_equal(attr(zoo, "tp")->type, QP_ATTR_TYPE_PROTO);
    assert_int_equal(attr(zoo, "tps")->type, QP_ATTR_TYPE_PROTOS);
    assert_int_equal(attr(zoo, "tps")->n, 2);
    /* No `type` written: inferred. */
    assert_false(((const Onnx__AttributeProto *)attr(zoo, "legacy")->origin)->has_type);
    assert_int_equal(attr(zoo, "legacy")->type, QP_ATTR_INT);
    assert_int_equal(attr(zoo, "legacy")->i, 11);

    /* Function call node keeps its domain. */
    assert_string_equal(find_node(g, "call_fn")->domain, "qp.test");
    qp_model_free(m);
}

/* ---- external data -------------------------------------------------------------------------- */

static void test_external_good(void **state) {
    (void)state;
    struct qp_model *m = tu_load(ONNX_DATA "ext_good.onnx");
    const struct qp_graph *g = m->graph;
    const float want_a[4] = {1, 2, 3, 4}, want_b[4] = {10, 20, 30, 40};
    const struct qp_tensor *a = find_init(g, "wa"), *b = find_init(g, "wb"),
                           *c = find_init(g, "wc");
    assert_int_equal(a->nbytes, 16);
    assert_memory_equal(a->data, want_a, 16);
    assert_memory_equal(b->data, want_b, 16);
    assert_memory_equal(c->data, want_b, 16);
    assert_string_equal(a->external_location, "weights.bin");
    assert_int_equal(b->external_offset, 32);
    assert_int_equal(b->external_length, 16);
    assert_string_equal(c->external_location, "tail.bin");
    assert_int_equal(m->n_external_files, 2);
    assert_string_equal(m->external_files[0], "weights.bin");
    assert_string_equal(m->external_files[1], "tail.bin");
    qp_model_free(m);

    /* skip_external_data: every check, no reading. */
    struct qp_load_options o = {.skip_external_data = 1};
    struct qp_error err = {0};
    assert_int_equal(qp_model_load_file(ONNX_DATA "ext_good.onnx", &o, &m, &err), QP_OK);
    a = find_init(m->graph, "wa");
    assert_null(a->data);
    assert_int_equal(a->nbytes, 16);
    assert_int_equal(m->n_external_files, 2);
    qp_model_free(m);
    m = NULL;
    /* ... but the checks still run. */
    assert_int_equal(qp_model_load_file(ONNX_DATA "ext_missing.onnx", &o, &m, &err),
                     QP_ERR_BAD_INPUT);
    assert_null(m);
}

static void test_external_bad(void **state) {
    (void)state;
    tu_expect_load_error(ONNX_DATA "ext_absolute.onnx", QP_ERR_BAD_INPUT,
                         "ext_absolute.onnx: ", "initializer 'w'", "absolute", NULL);
    tu_expect_load_error(ONNX_DATA "ext_dotdot.onnx", QP_ERR_BAD_INPUT, "initializer 'w'", "'..'",
                         NULL);
    tu_expect_load_error(ONNX_DATA "ext_missing.onnx", QP_ERR_BAD_INPUT, "initializer 'w'",
                         "missing.bin", "does not exist", NULL);
    tu_expect_load_error(ONNX_DATA "ext_offset_past_end.onnx", QP_ERR_BAD_INPUT, "initializer 'w'",
                         "offset 100 is past the end", NULL);
    tu_expect_load_error(ONNX_DATA "ext_range_past_end.onnx", QP_ERR_BAD_INPUT, "initializer 'w'",
                         "runs past the end", NULL);
    tu_expect_load_error(ONNX_DATA "ext_length_mismatch.onnx", QP_ERR_BAD_INPUT, "initializer 'w'",
                         "length is 12 bytes", "need 16", NULL);
    tu_expect_load_error(ONNX_DATA "ext_size_mismatch.onnx", QP_ERR_BAD_INPUT, "initializer 'w'",
                         "file holds 48 bytes", NULL);
    tu_expect_load_error(ONNX_DATA "ext_bad_offset.onnx", QP_ERR_BAD_INPUT, "initializer 'w'",
                         "'16x' is not a decimal number", NULL);
}

static void test_external_symlink(void **state) {
    (void)state;
    char *root = tu_mkdtemp();
    char *dir = strdup(tu_fmt("%s/model", root));
    assert_int_equal(mkdir(dir, 0755), 0);
    const char *model = tu_fmt("%s/ext_symlink.onnx", dir);
    tu_copy_file(ONNX_DATA "ext_symlink.onnx", model);
    char *model_path = strdup(model);
    /* Outside the model's folder: rejected although the file exists and is big enough. */
    tu_copy_file(ONNX_DATA "weights.bin", tu_fmt("%s/outside.bin", root));
    assert_int_equal(symlink(tu_fmt("%s/outside.bin", root), tu_fmt("%s/link.bin", dir)), 0);
    tu_expect_load_error(model_path, QP_ERR_BAD_INPUT, "initializer 'w'",
                         "outside the model's folder", NULL);
    /* A relative symlink climbing out is rejected too. */
    assert_int_equal(unlink(tu_fmt("%s/link.bin", dir)), 0);
    assert_int_equal(symlink("../outside.bin", tu_fmt("%s/link.bin", dir)), 0);
    tu_expect_load_error(model_path, QP_ERR_BAD_INPUT, "outside the model's folder", NULL);
    /* A symlink to a file inside the folder is fine. */
    assert_int_equal(unlink(tu_fmt("%s/link.bin", dir)), 0);
    tu_copy_file(ONNX_DATA "weights.bin", tu_fmt("%s/real.bin", dir));
    assert_int_equal(symlink("real.bin", tu_fmt("%s/link.bin", dir)), 0);
    struct qp_model *m = tu_load(model_path);
    const float want[4] = {1, 2, 3, 4};
    assert_memory_equal(find_init(m->graph, "w")->data, want, 16);
    qp_model_free(m);
    /* The link pointing at a directory. */
    assert_int_equal(unlink(tu_fmt("%s/link.bin", dir)), 0);
    assert_int_equal(mkdir(tu_fmt("%s/sub", dir), 0755), 0);
    assert_int_equal(symlink("sub", tu_fmt("%s/link.bin", dir)), 0);
    tu_expect_load_error(model_path, QP_ERR_BAD_INPUT, "not a regular file", NULL);
    free(model_path);
    free(dir);
    tu_rmtree(root);
}

static void test_load_buffer(void **state) {
    (void)state;
    size_t n;
    uint8_t *b = tu_read_file(ONNX_DATA "ext_good.onnx", &n);
    struct qp_model *m = NULL;
    struct qp_error err = {0};
    assert_int_equal(qp_model_load_buffer(b, n, NULL, NULL, &m, &err), QP_ERR_BAD_INPUT);
    assert_null(m);
    assert_non_null(strstr(err.msg, "without a base folder"));
    assert_non_null(strstr(err.msg, "initializer 'wa'"));
    assert_int_equal(qp_model_load_buffer(b, n, QP_TEST_DATA_DIR "/onnx", NULL, &m, &err), QP_OK);
    assert_null(m->path);
    assert_non_null(m->dir);
    const float want[4] = {10, 20, 30, 40};
    assert_memory_equal(find_init(m->graph, "wb")->data, want, 16);
    qp_model_free(m);
    m = NULL;
    struct qp_load_options o = {.max_file_bytes = n - 1};
    assert_int_equal(qp_model_load_buffer(b, n, QP_TEST_DATA_DIR "/onnx", &o, &m, &err),
                     QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "over the limit"));
    assert_int_equal(qp_model_load_buffer(b, n, "/nonexistent/dir", NULL, &m, &err), QP_ERR_IO);
    free(b);
}

/* ---- invalid models ------------------------------------------------------------------------- */

static void test_invalid_models(void **state) {
    (void)state;
    tu_expect_load_error(ONNX_DATA "sparse_init.onnx", QP_ERR_UNSUPPORTED,
                         "sparse_init.onnx: ", "sparse initializer 'sp' is not supported", NULL);
    tu_expect_load_error(ONNX_DATA "cycle.onnx", QP_ERR_BAD_INPUT, "cycle", "node_", NULL);
    tu_expect_load_error(ONNX_DATA "undefined_input.onnx", QP_ERR_BAD_INPUT, "haunted", "'ghost'",
                         NULL);
    tu_expect_load_error(ONNX_DATA "double_producer.onnx", QP_ERR_BAD_INPUT, "'y'", "r1", "r2",
                         NULL);
    tu_expect_load_error(ONNX_DATA "bad_raw_len.onnx", QP_ERR_BAD_INPUT,
                         "bad_raw_len.onnx: initializer 'w': raw_data holds 20 bytes, dims [2,3] "
                         "of float need 24",
                         NULL);
    tu_expect_load_error(ONNX_DATA "bad_negative_dim.onnx", QP_ERR_BAD_INPUT, "initializer 'w'",
                         "negative dimension in dims [2,-3]", NULL);
    tu_expect_load_error(ONNX_DATA "bad_huge_dims.onnx", QP_ERR_BAD_INPUT, "raw_data holds 4 bytes",
                         "need 4503599627370496", NULL);
    tu_expect_load_error(ONNX_DATA "bad_huge_dims_typed.onnx", QP_ERR_BAD_INPUT,
                         "holds 1 float_data values", NULL);
    tu_expect_load_error(ONNX_DATA "bad_overflow_dims.onnx", QP_ERR_BAD_INPUT, "overflow", NULL);
    tu_expect_load_error(ONNX_DATA "bad_typed_count.onnx", QP_ERR_BAD_INPUT,
                         "holds 2 int32_data values, dims [3] of int8 need 3", NULL);
    tu_expect_load_error(ONNX_DATA "bad_dtype.onnx", QP_ERR_UNSUPPORTED, "data_type 99", NULL);
    tu_expect_load_error(ONNX_DATA "bad_raw_and_typed.onnx", QP_ERR_BAD_INPUT,
                         "holds both float_data and raw_data", NULL);
    tu_expect_load_error(ONNX_DATA "bad_segment.onnx", QP_ERR_UNSUPPORTED, "segment", NULL);
    tu_expect_load_error(ONNX_DATA "bad_constant.onnx", QP_ERR_BAD_INPUT,
                         "node 'bad_const' (Constant): attribute 'value': tensor 'kv': raw_data "
                         "holds 7 bytes",
                         NULL);
    tu_expect_load_error(ONNX_DATA "bad_attr_type.onnx", QP_ERR_BAD_INPUT,
                         "node 'r' (Relu): attribute 'a': unknown attribute type 99", NULL);
    tu_expect_load_error(ONNX_DATA "bad_data_location.onnx", QP_ERR_BAD_INPUT,
                         "initializer 'w': unknown data_location 5", NULL);
    tu_expect_load_error(ONNX_DATA "no_opset.onnx", QP_ERR_BAD_INPUT, "operator set", NULL);
    tu_expect_load_error(ONNX_DATA "no_graph.onnx", QP_ERR_BAD_INPUT, "no graph", NULL);
}

static void test_io_errors(void **state) {
    (void)state;
    tu_expect_load_error(ONNX_DATA, QP_ERR_IO, "is a directory", NULL);
    tu_expect_load_error(ONNX_DATA "nope.onnx", QP_ERR_IO, "nope.onnx", "cannot open", NULL);
    tu_expect_load_error("/dev/null", QP_ERR_IO, "not a regular file", NULL);
    struct qp_load_options o = {.max_file_bytes = 50};
    struct qp_model *m = NULL;
    struct qp_error err = {0};
    assert_int_equal(qp_model_load_file(ONNX_DATA "small.onnx", &o, &m, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "over the limit of 50"));
    assert_int_equal(qp_model_load_file(NULL, NULL, &m, &err), QP_ERR_USAGE);
    /* A NULL error record is allowed. */
    assert_int_equal(qp_model_load_file(ONNX_DATA "cycle.onnx", NULL, &m, NULL), QP_ERR_BAD_INPUT);
    assert_int_equal(qp_model_load_file(ONNX_DATA "bad_constant.onnx", NULL, &m, NULL),
                     QP_ERR_BAD_INPUT);
    assert_int_equal(qp_model_load_file(ONNX_DATA "sparse_init.onnx", NULL, &m, NULL),
                     QP_ERR_UNSUPPORTED);
    assert_null(m);
}

/* ---- hostile bytes -------------------------------------------------------------------------- */

static void test_truncations(void **state) {
    (void)state;
    size_t n;
    uint8_t *b = tu_read_file(ONNX_DATA "small.onnx", &n);
    struct qp_model *m = NULL;
    struct qp_error err = {0};
    assert_int_equal(qp_model_load_buffer(b, n, NULL, NULL, &m, &err), QP_OK);
    qp_model_free(m);
    for (size_t len = 0; len < n; len++) {
        /* A fresh copy of exactly `len` bytes, so ASan sees any read past the end. */
        uint8_t *p = malloc(len ? len : 1);
        memcpy(p, b, len);
        m = NULL;
        enum qp_status st = qp_model_load_buffer(p, len, NULL, NULL, &m, &err);
        if (st == QP_OK) fail_msg("prefix of %zu/%zu bytes loaded", len, n);
        assert_int_equal(st, QP_ERR_BAD_INPUT);
        assert_null(m);
        free(p);
    }
    free(b);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 32);
}

static void test_random_bytes(void **state) {
    (void)state;
    for (int k = 0; k < 2000; k++) {
        size_t len = 1 + rnd() % 600;
        uint8_t *p = malloc(len);
        for (size_t i = 0; i < len; i++)
            p[i] = (uint8_t)rnd();
        struct qp_model *m = NULL;
        struct qp_error err = {0};
        enum qp_status st = qp_model_load_buffer(p, len, NULL, NULL, &m, &err);
        if (st == QP_OK) fail_msg("random buffer %d loaded", k);
        assert_null(m);
        free(p);
    }
    /* Mutations of valid models: any status is fine, crashing or leaking is not. */
    const char *files[] = {"control_flow.onnx", "dtypes.onnx", "small.onnx"};
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        size_t n;
        uint8_t *b = tu_read_file(tu_fmt(ONNX_DATA "%s", files[f]), &n);
        for (int k = 0; k < 1500; k++) {
            uint8_t *p = malloc(n);
            memcpy(p, b, n);
            int flips = 1 + (int)(rnd() % 4);
            for (int i = 0; i < flips; i++)
                p[rnd() % n] = (uint8_t)rnd();
            struct qp_model *m = NULL;
            struct qp_error err = {0};
            if (qp_model_load_buffer(p, n, NULL, NULL, &m, &err) == QP_OK) {
                /* Whatever loads must also save. */
                char *dir = tu_mkdtemp();
                enum qp_status st = qp_model_save_file(m, tu_fmt("%s/o.onnx", dir), NULL, &err);
                if (st != QP_OK && st != QP_ERR_USAGE) fail_msg("save after mutation: %s", err.msg);
                tu_rmtree(dir);
                qp_model_free(m);
            }
            free(p);
        }
        free(b);
    }
}

/* Appends a protobuf varint. */
static size_t put_varint(uint8_t *p, uint64_t v) {
    size_t n = 0;
    do {
        p[n] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v) p[n] |= 0x80;
        n++;
    } while (v);
    return n;
}

/* Builds, inside out at the end of `buf`, `levels` wrappers of (field tag, length, content). The
 * wrapper sequence repeats `tags` (field numbers, wire type 2). Returns the start offset. */
static size_t nest(uint8_t *buf, size_t cap, const uint32_t *tags, size_t n_tags, size_t levels,
                   size_t content_len) {
    size_t start = cap - content_len;
    for (size_t l = 0; l < levels; l++) {
        uint8_t hdr[20];
        size_t len = cap - start;
        uint32_t tag = tags[(levels - 1 - l) % n_tags];
        size_t h = put_varint(hdr, ((uint64_t)tag << 3) | 2);
        h += put_varint(hdr + h, len);
        start -= h;
        memcpy(buf + start, hdr, h);
    }
    return start;
}

static void test_deep_nesting(void **state) {
    (void)state;
    size_t cap = 8u << 20;
    uint8_t *buf = calloc(1, cap);
    /* ModelProto.graph(7) -> GraphProto.node(1) -> NodeProto.attribute(5) -> AttributeProto.g(6)
     * -> GraphProto.node(1) -> ... 300000 levels: protobuf-c alone would overflow the stack. */
    const uint32_t cycle[] = {1, 5, 6};
    size_t start = nest(buf, cap, cycle, 3, 300000, 0);
    {
        uint8_t hdr[20];
        size_t h = put_varint(hdr, (7u << 3) | 2);
        h += put_varint(hdr + h, cap - start);
        start -= h;
        memcpy(buf + start, hdr, h);
    }
    struct qp_model *m = NULL;
    struct qp_error err = {0};
    assert_int_equal(qp_model_load_buffer(buf + start, cap - start, NULL, NULL, &m, &err),
                     QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "nested deeper than"));
    assert_null(m);

    /* The bound itself: TypeProto.sequence_type(4) -> Sequence.elem_type(1) -> TypeProto ...
     * exactly QP_ONNX_MAX_DEPTH levels pass the wire check, one more does not. */
    const uint32_t seq[] = {4, 1};
    for (int extra = 0; extra <= 1; extra++) {
        size_t lv = (size_t)QP_ONNX_MAX_DEPTH - 1 + (size_t)extra; /* plus the outer TypeProto */
        size_t s = nest(buf, cap, seq, 2, lv, 0);
        enum qp_status st = qp_onnx_check_wire(buf + s, cap - s, &onnx__type_proto__descriptor,
                                               QP_ONNX_MAX_DEPTH, &err);
        assert_int_equal(st, extra ? QP_ERR_BAD_INPUT : QP_OK);
    }
    free(buf);
}

static void test_wire_malformed(void **state) {
    (void)state;
    struct qp_error err = {0};
    const ProtobufCMessageDescriptor *d = &onnx__model_proto__descriptor;
    /* Truncated varint, group wire type, field number 0, length past the end, 11-byte varint. */
    const uint8_t a[] = {0x08, 0x80};
    const uint8_t b[] = {0x0b, 0x0c};
    const uint8_t c[] = {0x00, 0x01};
    const uint8_t e[] = {0x3a, 0x05, 0x01};
    const uint8_t f[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    assert_int_equal(qp_onnx_check_wire(a, sizeof a, d, 100, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "not a valid ONNX protobuf"));
    assert_int_equal(qp_onnx_check_wire(b, sizeof b, d, 100, &err), QP_ERR_BAD_INPUT);
    assert_int_equal(qp_onnx_check_wire(c, sizeof c, d, 100, &err), QP_ERR_BAD_INPUT);
    assert_int_equal(qp_onnx_check_wire(e, sizeof e, d, 100, &err), QP_ERR_BAD_INPUT);
    assert_int_equal(qp_onnx_check_wire(f, sizeof f, d, 100, &err), QP_ERR_BAD_INPUT);
    /* A valid field of each wire type. */
    const uint8_t ok[] = {0x08, 0x07, 0x12, 0x01, 'p', 0x98, 0x06, 0x07};
    assert_int_equal(qp_onnx_check_wire(ok, sizeof ok, d, 100, &err), QP_OK);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_dtype),      cmocka_unit_test(test_control_flow),
        cmocka_unit_test(test_external_good),    cmocka_unit_test(test_external_bad),
        cmocka_unit_test(test_external_symlink), cmocka_unit_test(test_load_buffer),
        cmocka_unit_test(test_invalid_models),   cmocka_unit_test(test_io_errors),
        cmocka_unit_test(test_truncations),      cmocka_unit_test(test_random_bytes),
        cmocka_unit_test(test_deep_nesting),     cmocka_unit_test(test_wire_malformed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
