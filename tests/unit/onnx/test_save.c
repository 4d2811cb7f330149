/* Saving ONNX files: round trips, idempotence, external data, refusals, atomicity. */
#include "onnx_test_util.h"

#include <signal.h>
#include <sys/resource.h>

static const struct qp_tensor *find_init(const struct qp_graph *g, const char *name) {
    for (size_t i = 0; i < g->n_inits; i++)
        if (!strcmp(g->inits[i].name, name)) return &g->inits[i];
    fail_msg("no initializer '%s'", name);
    return NULL;
}

static void save_ok(const struct qp_model *m, const char *path, const struct qp_save_options *o) {
    struct qp_error err = {0};
    enum qp_status st = qp_model_save_file(m, path, o, &err);
    if (st != QP_OK) fail_msg("saving %s: %s: %s", path, qp_status_name(st), err.msg);
}

static void expect_save_error(const struct qp_model *m, const char *path,
                              const struct qp_save_options *o, enum qp_status want,
                              const char *needle) {
    struct qp_error err = {0};
    enum qp_status st = qp_model_save_file(m, path, o, &err);
    if (st != want)
        fail_msg("saving %s: got %s (%s), expected %s", path, qp_status_name(st), err.msg,
                 qp_status_name(want));
    if (needle && !strstr(err.msg, needle)) fail_msg("message '%s' lacks '%s'", err.msg, needle);
}

static void assert_same_bytes(const char *a, const char *b) {
    size_t na, nb;
    uint8_t *x = tu_read_file(a, &na), *y = tu_read_file(b, &nb);
    if (na != nb || memcmp(x, y, na)) fail_msg("%s and %s differ (%zu vs %zu bytes)", a, b, na, nb);
    free(x);
    free(y);
}

/* load -> save a -> load a (same graphs) -> save b: a and b byte-identical. */
static void round_trip(const char *src) {
    char *dir = tu_mkdtemp();
    char *a = strdup(tu_fmt("%s/a.onnx", dir)), *b = strdup(tu_fmt("%s/b.onnx", dir));
    struct qp_model *m0 = tu_load(src);
    save_ok(m0, a, NULL);
    struct qp_model *m1 = tu_load(a);
    tu_cmp_models(m0, m1, 1);
    save_ok(m1, b, NULL);
    assert_same_bytes(a, b);
    struct qp_model *m2 = tu_load(b);
    tu_cmp_models(m0, m2, 1);
    assert_int_equal(tu_count_entries(dir), 2); /* no temp files left behind */
    qp_model_free(m0);
    qp_model_free(m1);
    qp_model_free(m2);
    free(a);
    free(b);
    tu_rmtree(dir);
}

static void test_round_trip(void **state) {
    (void)state;
    const char *files[] = {"dtypes.onnx", "control_flow.onnx", "small.onnx", "ext_good.onnx"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        round_trip(tu_fmt(ONNX_DATA "%s", files[i]));
    /* A few real exported models when the ONNX test data package is installed. */
    const char *real[] = {
        "/usr/share/libonnx-testdata/data/pytorch-converted/test_ConvTranspose2d/model.onnx",
        "/usr/share/libonnx-testdata/data/node/test_loop11/model.onnx",
        "/usr/share/libonnx-testdata/data/node/test_if_seq/model.onnx",
        "/usr/share/libonnx-testdata/data/simple/test_sequence_model1/model.onnx",
    };
    for (size_t i = 0; i < sizeof real / sizeof real[0]; i++)
        if (tu_exists(real[i])) round_trip(real[i]);
}

/* The saved file keeps the input's unknown fields, opsets, metadata and functions verbatim. */
static void test_preserves_everything(void **state) {
    (void)state;
    char *dir = tu_mkdtemp();
    const char *out = tu_fmt("%s/cf.onnx", dir);
    struct qp_model *m = tu_load(ONNX_DATA "control_flow.onnx");
    save_ok(m, out, NULL);
    struct qp_model *r = tu_load(out);
    const Onnx__ModelProto *o = r->proto;
    assert_int_equal(o->base.n_unknown_fields, 1);
    assert_int_equal(o->opset_import[0]->base.n_unknown_fields, 1);
    assert_int_equal(o->graph->input[0]->base.n_unknown_fields, 1);
    assert_int_equal(o->graph->base.n_unknown_fields, 1);
    const struct qp_tensor *w = find_init(r->graph, "W");
    assert_int_equal(((const ProtobufCMessage *)w->origin)->n_unknown_fields, 1);
    int c = qp_graph_find_node(r->graph, "const_c");
    assert_true(c >= 0);
    assert_int_equal(
        ((const ProtobufCMessage *)r->graph->nodes[c].attrs[0].origin)->n_unknown_fields, 1);
    assert_int_equal(o->n_functions, 1);
    assert_string_equal(o->functions[0]->name, "AddTwice");
    assert_string_equal(o->doc_string, "model doc");
    assert_int_equal(o->model_version, 7);
    assert_int_equal(o->n_metadata_props, 2);
    qp_model_free(m);
    qp_model_free(r);
    tu_rmtree(dir);
}

static void test_external_always(void **state) {
    (void)state;
    const char *files[] = {"dtypes.onnx", "control_flow.onnx", "ext_good.onnx"};
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        char *dir = tu_mkdtemp();
        char *out = strdup(tu_fmt("%s/a.onnx", dir));
        struct qp_model *m = tu_load(tu_fmt(ONNX_DATA "%s", files[f]));
        struct qp_save_options o = {.external = QP_EXTERNAL_ALWAYS, .external_min_bytes = 1};
        save_ok(m, out, &o);
        assert_true(tu_exists(tu_fmt("%s/a.onnx.data", dir)));
        assert_int_equal(tu_count_entries(dir), 2);
        struct qp_model *r = tu_load(out);
        tu_cmp_models(m, r, 1);
        assert_int_equal(r->n_external_files, 1);
        assert_string_equal(r->external_files[0], "a.onnx.data");
        for (size_t i = 0; i < r->graph->n_inits; i++) {
            const struct qp_tensor *t = &r->graph->inits[i];
            if (t->dtype == QP_DTYPE_STRING || t->nbytes == 0) {
                assert_null(t->external_location);
                continue;
            }
            assert_string_equal(t->external_location, "a.onnx.data");
            assert_int_equal(t->external_length, t->nbytes);
        }
        qp_model_free(r);
        qp_model_free(m);
        free(out);
        tu_rmtree(dir);
    }

    /* A custom data file name, and the default 1024-byte threshold keeping small tensors inline. */
    char *dir = tu_mkdtemp();
    struct qp_model *m = tu_load(ONNX_DATA "ext_good.onnx");
    struct qp_save_options o = {
        .external = QP_EXTERNAL_ALWAYS, .external_location = "w.bin", .external_min_bytes = 16};
    save_ok(m, tu_fmt("%s/b.onnx", dir), &o);
    assert_true(tu_exists(tu_fmt("%s/w.bin", dir)));
    struct qp_model *r = tu_load(tu_fmt("%s/b.onnx", dir));
    assert_string_equal(find_init(r->graph, "wb")->external_location, "w.bin");
    qp_model_free(r);
    o.external_min_bytes = 0;
    save_ok(m, tu_fmt("%s/c.onnx", dir), &o); /* everything under 1024 bytes: no data file */
    assert_false(tu_exists(tu_fmt("%s/c.onnx.data", dir)));
    r = tu_load(tu_fmt("%s/c.onnx", dir));
    assert_int_equal(r->n_external_files, 0);
    qp_model_free(r);
    o.external_location = "../escape.bin";
    expect_save_error(m, tu_fmt("%s/d.onnx", dir), &o, QP_ERR_USAGE, "relative");
    qp_model_free(m);
    tu_rmtree(dir);
}

/* Input external data never stays referenced: AUTO writes it inline, and re-saving a model
 * loaded from an ALWAYS save inline gives the same bytes as saving the original inline. */
static void test_external_input_resaved(void **state) {
    (void)state;
    char *dir = tu_mkdtemp();
    char *x = strdup(tu_fmt("%s/x.onnx", dir)), *y = strdup(tu_fmt("%s/y.onnx", dir)),
         *z = strdup(tu_fmt("%s/z.onnx", dir));
    struct qp_model *m = tu_load(ONNX_DATA "ext_good.onnx");
    save_ok(m, x, NULL);
    struct qp_model *rx = tu_load(x);
    assert_int_equal(rx->n_external_files, 0);
    for (size_t i = 0; i < rx->graph->n_inits; i++)
        assert_null(rx->graph->inits[i].external_location);
    struct qp_save_options o = {.external = QP_EXTERNAL_ALWAYS, .external_min_bytes = 1};
    save_ok(m, y, &o);
    struct qp_model *ry = tu_load(y);
    save_ok(ry, z, NULL);
    assert_same_bytes(x, z);
    qp_model_free(m);
    qp_model_free(rx);
    qp_model_free(ry);
    free(x);
    free(y);
    free(z);
    tu_rmtree(dir);
}

/* Adds a new (qplace-made) 64 KiB initializer to a loaded model. */
static float *add_big_init(struct qp_model *m) {
    static const int64_t dims[1] = {16384};
    float *data = malloc(sizeof(float) * 16384);
    for (int i = 0; i < 16384; i++)
        data[i] = (float)i * 0.5f;
    struct qp_tensor t = {.name = "big",
                          .dtype = QP_DTYPE_FLOAT,
                          .rank = 1,
                          .dims = dims,
                          .numel = 16384,
                          .data = data,
                          .nbytes = sizeof(float) * 16384};
    struct qp_error err = {0};
    assert_int_equal(qp_graph_add_initializer(m->graph, &t, NULL, &err), QP_OK);
    return data;
}

static void test_auto_and_never(void **state) {
    (void)state;
    char *dir = tu_mkdtemp();
    struct qp_model *m = tu_load(ONNX_DATA "small.onnx");
    float *data = add_big_init(m);
    qp_onnx_set_proto_limit_for_testing(32768);

    struct qp_save_options never = {.external = QP_EXTERNAL_NEVER};
    expect_save_error(m, tu_fmt("%s/n.onnx", dir), &never, QP_ERR_BAD_INPUT, "external data");
    assert_int_equal(tu_count_entries(dir), 0);

    save_ok(m, tu_fmt("%s/auto.onnx", dir), NULL);
    assert_true(tu_exists(tu_fmt("%s/auto.onnx.data", dir)));
    struct qp_model *r = tu_load(tu_fmt("%s/auto.onnx", dir));
    const struct qp_tensor *t = find_init(r->graph, "big");
    assert_string_equal(t->external_location, "auto.onnx.data");
    assert_memory_equal(t->data, data, t->nbytes);
    /* The 8-byte "b" stays inline (under external_min_bytes). */
    assert_null(find_init(r->graph, "b")->external_location);
    qp_model_free(r);

    /* Under the limit, AUTO writes everything inline. */
    qp_onnx_set_proto_limit_for_testing(0);
    save_ok(m, tu_fmt("%s/inline.onnx", dir), NULL);
    assert_false(tu_exists(tu_fmt("%s/inline.onnx.data", dir)));
    r = tu_load(tu_fmt("%s/inline.onnx", dir));
    assert_memory_equal(find_init(r->graph, "big")->data, data, 65536);
    assert_null(find_init(r->graph, "big")->external_location);
    qp_model_free(r);

    /* Even external data cannot bring it under a tiny limit. */
    qp_onnx_set_proto_limit_for_testing(10);
    expect_save_error(m, tu_fmt("%s/tiny.onnx", dir), NULL, QP_ERR_BAD_INPUT, "even with");
    assert_false(tu_exists(tu_fmt("%s/tiny.onnx", dir)));
    assert_false(tu_exists(tu_fmt("%s/tiny.onnx.data", dir)));
    qp_onnx_set_proto_limit_for_testing(0);
    qp_model_free(m);
    free(data);
    tu_rmtree(dir);
}

static void test_refuse_overwriting_input(void **state) {
    (void)state;
    char *dir = tu_mkdtemp();
    const char *names[] = {"ext_good.onnx", "weights.bin", "tail.bin"};
    for (size_t i = 0; i < 3; i++)
        tu_copy_file(tu_fmt(ONNX_DATA "%s", names[i]), tu_fmt("%s/%s", dir, names[i]));
    char *in = strdup(tu_fmt("%s/ext_good.onnx", dir));
    size_t n0;
    uint8_t *before = tu_read_file(in, &n0);
    struct qp_model *m = tu_load(in);
    expect_save_error(m, in, NULL, QP_ERR_USAGE, "loaded from");
    expect_save_error(m, tu_fmt("%s/./ext_good.onnx", dir), NULL, QP_ERR_USAGE, "loaded from");
    assert_int_equal(symlink("ext_good.onnx", tu_fmt("%s/alias.onnx", dir)), 0);
    expect_save_error(m, tu_fmt("%s/alias.onnx", dir), NULL, QP_ERR_USAGE, "loaded from");
    assert_int_equal(link(in, tu_fmt("%s/hard.onnx", dir)), 0);
    expect_save_error(m, tu_fmt("%s/hard.onnx", dir), NULL, QP_ERR_USAGE, "loaded from");
    expect_save_error(m, tu_fmt("%s/weights.bin", dir), NULL, QP_ERR_USAGE, "external data");
    struct qp_save_options o = {
        .external = QP_EXTERNAL_ALWAYS, .external_location = "tail.bin", .external_min_bytes = 1};
    expect_save_error(m, tu_fmt("%s/out.onnx", dir), &o, QP_ERR_USAGE, "external data");
    o.external_location = "out.onnx";
    expect_save_error(m, tu_fmt("%s/out.onnx", dir), &o, QP_ERR_USAGE, "output model itself");
    expect_save_error(m, dir, NULL, QP_ERR_USAGE, NULL);
    expect_save_error(m, tu_fmt("%s/", dir), NULL, QP_ERR_USAGE, NULL);
    assert_int_equal(tu_count_entries(dir), 5); /* nothing new */
    size_t n1;
    uint8_t *after = tu_read_file(in, &n1);
    assert_int_equal(n0, n1);
    assert_memory_equal(before, after, n0);
    free(before);
    free(after);
    qp_model_free(m);
    free(in);
    tu_rmtree(dir);
}

static void test_failed_save_leaves_nothing(void **state) {
    (void)state;
    char *dir = tu_mkdtemp();
    struct qp_model *m = tu_load(ONNX_DATA "control_flow.onnx");
    struct qp_error err = {0};
    /* A missing folder. */
    expect_save_error(m, tu_fmt("%s/missing/x.onnx", dir), NULL, QP_ERR_IO, "missing");

    /* Writes failing half way (file size limit): no output, no temp file. */
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    lim = old;
    lim.rlim_cur = 700;
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    enum qp_status st = qp_model_save_file(m, tu_fmt("%s/x.onnx", dir), NULL, &err);
    struct qp_save_options o = {.external = QP_EXTERNAL_ALWAYS, .external_min_bytes = 1};
    struct qp_model *d = tu_load(ONNX_DATA "dtypes.onnx");
    enum qp_status st2 = qp_model_save_file(d, tu_fmt("%s/y.onnx", dir), &o, &err);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, prev);
    assert_int_equal(st, QP_ERR_IO);
    assert_int_equal(st2, QP_ERR_IO);
    assert_int_equal(tu_count_entries(dir), 0);

    /* An existing output survives a failed save untouched. */
    const char *keep = tu_fmt("%s/keep.onnx", dir);
    tu_write_file(keep, "old", 3);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    signal(SIGXFSZ, SIG_IGN);
    st = qp_model_save_file(m, keep, NULL, &err);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, prev);
    assert_int_equal(st, QP_ERR_IO);
    size_t n;
    uint8_t *b = tu_read_file(keep, &n);
    assert_int_equal(n, 3);
    assert_memory_equal(b, "old", 3);
    free(b);
    assert_int_equal(tu_count_entries(dir), 1);

    /* ... and is replaced by a successful one. */
    save_ok(m, keep, NULL);
    qp_model_free(tu_load(keep));
    assert_int_equal(tu_count_entries(dir), 1);

    /* Tensors whose external data was not read cannot be saved. */
    struct qp_load_options lo = {.skip_external_data = 1};
    struct qp_model *e = NULL;
    assert_int_equal(qp_model_load_file(ONNX_DATA "ext_good.onnx", &lo, &e, &err), QP_OK);
    expect_save_error(e, tu_fmt("%s/e.onnx", dir), NULL, QP_ERR_USAGE, "not loaded");
    assert_int_equal(qp_model_save_file(e, tu_fmt("%s/e.onnx", dir), NULL, NULL), QP_ERR_USAGE);
    assert_int_equal(tu_count_entries(dir), 1);
    qp_model_free(e);
    qp_model_free(d);
    qp_model_free(m);
    tu_rmtree(dir);
}

/* Edits made through the IR reach the file: changed types are rebuilt (keeping symbolic dims),
 * new tensors are written with raw_data. */
static void test_save_edits(void **state) {
    (void)state;
    char *dir = tu_mkdtemp();
    struct qp_model *m = tu_load(ONNX_DATA "control_flow.onnx");
    struct qp_graph *g = m->graph;
    int x = qp_graph_find_value(g, "X");
    g->values[x].dims[1].value = 8;
    int z = qp_graph_find_value(g, "Z");
    g->values[z].dtype = QP_DTYPE_FLOAT16;
    float *data = add_big_init(m);
    save_ok(m, tu_fmt("%s/e.onnx", dir), NULL);
    struct qp_model *r = tu_load(tu_fmt("%s/e.onnx", dir));
    const struct qp_value *rx = &r->graph->values[qp_graph_find_value(r->graph, "X")];
    assert_int_equal(rx->dims[1].value, 8);
    assert_string_equal(rx->dims[0].param, "batch");
    const struct qp_value *rz = &r->graph->values[qp_graph_find_value(r->graph, "Z")];
    assert_int_equal(rz->dtype, QP_DTYPE_FLOAT16);
    assert_int_equal(rz->rank, -1);
    const struct qp_tensor *big = find_init(r->graph, "big");
    assert_true(((const Onnx__TensorProto *)big->origin)->has_raw_data);
    assert_memory_equal(big->data, data, 65536);
    qp_model_free(r);
    qp_model_free(m);
    free(data);
    tu_rmtree(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_preserves_everything),
        cmocka_unit_test(test_external_always),
        cmocka_unit_test(test_external_input_resaved),
        cmocka_unit_test(test_auto_and_never),
        cmocka_unit_test(test_refuse_overwriting_input),
        cmocka_unit_test(test_failed_save_leaves_nothing),
        cmocka_unit_test(test_save_edits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
