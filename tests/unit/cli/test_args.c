/* The CLI flag parser (src/cli/args.c, compiled in here: the CLI is not part of qplace_lib). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "../../../src/cli/args.c"

static const struct cli_opt opts[] = {
    {"json", CLI_BOOL, NULL, "print JSON"},
    {"onnx_path", CLI_VALUE, "MODEL", "the model"},
    {"threshold", CLI_VALUE, "T", "a number"},
    {"input", CLI_MULTI, "NAME=FILE", "an input"},
    {"nodes_to_exclude", CLI_LIST, "REGEX", "patterns"},
    {"disable_mha_qdq", CLI_BOOL, NULL, "a long boolean"},
    {0},
};

/* Parses a NULL-terminated list; the array must outlive the result (values are borrowed). */
static enum qp_status parse(char **argv, struct cli_args *a, struct qp_error *err) {
    int argc = 0;
    while (argv[argc])
        argc++;
    memset(err, 0, sizeof *err);
    return cli_parse(opts, argc, argv, a, err);
}

static void expect_usage(char **argv, const char *needle) {
    struct cli_args a;
    struct qp_error err;
    assert_int_equal(parse(argv, &a, &err), QP_ERR_USAGE);
    assert_int_equal(err.status, QP_ERR_USAGE);
    if (!strstr(err.msg, needle)) fail_msg("message '%s' does not mention '%s'", err.msg, needle);
    /* failure leaves an empty result that is safe to free */
    assert_null(a.flags);
    assert_int_equal(a.n_pos, 0);
    cli_args_free(&a);
}

static void test_both_spellings(void **state) {
    (void)state;
    char *v1[] = {"--onnx_path", "m.onnx", "--disable-mha-qdq", NULL};
    char *v2[] = {"--onnx-path=m.onnx", "--disable_mha_qdq", NULL};
    char *v3[] = {"--onnx-path", "m.onnx", "--disable-mha_qdq", NULL}; /* mixed is fine */
    char **all[] = {v1, v2, v3};
    for (int k = 0; k < 3; k++) {
        struct cli_args a;
        struct qp_error err;
        assert_int_equal(parse(all[k], &a, &err), QP_OK);
        assert_string_equal(cli_value(&a, "onnx_path", NULL), "m.onnx");
        assert_true(cli_has(&a, "disable_mha_qdq"));
        assert_false(cli_has(&a, "json"));
        assert_int_equal(a.n_pos, 0);
        assert_int_equal(a.help, 0);
        cli_args_free(&a);
    }
}

static void test_positionals_and_values(void **state) {
    (void)state;
    char *v[] = {"model.onnx", "--json", "--threshold", "-0.5", "-", "out.onnx", NULL};
    struct cli_args a;
    struct qp_error err;
    assert_int_equal(parse(v, &a, &err), QP_OK);
    assert_int_equal(a.n_pos, 3);
    assert_string_equal(a.pos[0], "model.onnx");
    assert_string_equal(a.pos[1], "-");
    assert_string_equal(a.pos[2], "out.onnx");
    assert_true(cli_has(&a, "json"));
    assert_string_equal(cli_value(&a, "threshold", NULL), "-0.5");
    assert_string_equal(cli_value(&a, "onnx_path", "dflt"), "dflt");
    assert_null(cli_value_at(&a, "input", 0));
    assert_int_equal(cli_count(&a, "input"), 0);
    /* a name not in the table is never present */
    assert_int_equal(cli_count(&a, "nonsense"), 0);
    cli_args_free(&a);

    /* values may contain '=' and be empty */
    char *w[] = {"--onnx_path=a=b.onnx", "--threshold=", NULL};
    assert_int_equal(parse(w, &a, &err), QP_OK);
    assert_string_equal(cli_value(&a, "onnx_path", NULL), "a=b.onnx");
    assert_string_equal(cli_value(&a, "threshold", "x"), "");
    cli_args_free(&a);
}

static void test_repeated(void **state) {
    (void)state;
    char *v[] = {"--input", "a=x.npy", "--json",  "--input=b=y.npy",
                 "--json",  "--input", "c=z.npy", NULL};
    struct cli_args a;
    struct qp_error err;
    assert_int_equal(parse(v, &a, &err), QP_OK);
    assert_int_equal(cli_count(&a, "input"), 3);
    assert_string_equal(cli_value_at(&a, "input", 0), "a=x.npy");
    assert_string_equal(cli_value_at(&a, "input", 1), "b=y.npy");
    assert_string_equal(cli_value_at(&a, "input", 2), "c=z.npy");
    assert_null(cli_value_at(&a, "input", 3));
    assert_string_equal(cli_value(&a, "input", NULL), "c=z.npy");
    assert_int_equal(cli_count(&a, "json"), 2);
    cli_args_free(&a);
}

static void test_list(void **state) {
    (void)state;
    /* nargs="+": values up to the next flag; repeated flags accumulate */
    char *v[] = {"--nodes_to_exclude", "/a/.*", "/b/.*", "-1",    "--json",
                 "--nodes-to-exclude", "c",     "--",    "--pos", NULL};
    struct cli_args a;
    struct qp_error err;
    assert_int_equal(parse(v, &a, &err), QP_OK);
    assert_int_equal(cli_count(&a, "nodes_to_exclude"), 4);
    assert_string_equal(cli_value_at(&a, "nodes_to_exclude", 0), "/a/.*");
    assert_string_equal(cli_value_at(&a, "nodes_to_exclude", 1), "/b/.*");
    assert_string_equal(cli_value_at(&a, "nodes_to_exclude", 2), "-1");
    assert_string_equal(cli_value_at(&a, "nodes_to_exclude", 3), "c");
    assert_true(cli_has(&a, "json"));
    /* after "--" everything is positional */
    assert_int_equal(a.n_pos, 1);
    assert_string_equal(a.pos[0], "--pos");
    cli_args_free(&a);
}

static void test_help(void **state) {
    (void)state;
    char *v[] = {"--threshold", "1", "-h", NULL};
    struct cli_args a;
    struct qp_error err;
    assert_int_equal(parse(v, &a, &err), QP_OK);
    assert_int_equal(a.help, 1);
    cli_args_free(&a);
    char *w[] = {"--help", NULL};
    assert_int_equal(parse(w, &a, &err), QP_OK);
    assert_int_equal(a.help, 1);
    cli_args_free(&a);
}

static void test_errors(void **state) {
    (void)state;
    char *unknown[] = {"m.onnx", "--jsn", NULL};
    expect_usage(unknown, "--jsn");
    char *unknown_eq[] = {"--output-path=x", NULL};
    expect_usage(unknown_eq, "--output-path");
    char *short_flag[] = {"-x", NULL};
    expect_usage(short_flag, "-x");
    char *missing_end[] = {"--onnx-path", NULL};
    expect_usage(missing_end, "--onnx-path");
    char *missing_flag[] = {"--onnx_path", "--json", NULL};
    expect_usage(missing_flag, "--onnx_path");
    char *missing_multi[] = {"--input", "--json", NULL};
    expect_usage(missing_multi, "--input");
    char *missing_list[] = {"--nodes_to_exclude", "-v", NULL};
    expect_usage(missing_list, "--nodes_to_exclude");
    char *bool_value[] = {"--json=yes", NULL};
    expect_usage(bool_value, "--json");
    char *twice[] = {"--onnx_path", "a", "--onnx-path=b", NULL};
    expect_usage(twice, "--onnx-path");
    char *dashes_only[] = {"--=x", NULL};
    expect_usage(dashes_only, "unknown flag");
}

static void test_print_opts(void **state) {
    (void)state;
    char buf[4096] = {0};
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    assert_non_null(f);
    cli_print_opts(f, opts);
    fclose(f);
    assert_non_null(strstr(buf, "--onnx_path MODEL"));
    assert_non_null(strstr(buf, "--input NAME=FILE ..."));
    assert_non_null(strstr(buf, "--nodes_to_exclude REGEX [REGEX ...]"));
    assert_non_null(strstr(buf, "--help"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_both_spellings), cmocka_unit_test(test_positionals_and_values),
        cmocka_unit_test(test_repeated),       cmocka_unit_test(test_list),
        cmocka_unit_test(test_help),           cmocka_unit_test(test_errors),
        cmocka_unit_test(test_print_opts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
