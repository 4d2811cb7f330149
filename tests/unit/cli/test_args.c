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

/* Parses a NULL-terminated list against `spec`; the array must outlive the result (values are
 * borrowed). */
static enum qp_status parse_spec(const struct cli_spec *spec, char **argv, struct cli_args *a,
                                 struct qp_error *err) {
    int argc = 0;
    while (argv[argc])
        argc++;
    memset(err, 0, sizeof *err);
    return cli_parse(spec, argc, argv, a, err);
}

/* Any number of positionals: the flag rules alone. */
static enum qp_status parse(char **argv, struct cli_args *a, struct qp_error *err) {
    static const struct cli_spec any = {opts, 0, -1, NULL};
    return parse_spec(&any, argv, a, err);
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
    expect_usage(unknown, "unknown flag --jsn; did you mean --json?");
    char *far[] = {"--bogus", NULL}; /* nothing close: no suggestion */
    expect_usage(far, "unknown flag --bogus");
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
    expect_usage(bool_value, "--json takes no value");
    char *twice[] = {"--onnx_path", "a", "--onnx-path=b", NULL};
    expect_usage(twice, "--onnx-path given more than once");
    char *dashes_only[] = {"--=x", NULL};
    expect_usage(dashes_only, "unknown flag");
}

/* Failure with `spec`, the message containing `needle`; the result is left empty. */
static void expect_spec_usage(const struct cli_spec *spec, char **argv, const char *needle) {
    struct cli_args a;
    struct qp_error err;
    assert_int_equal(parse_spec(spec, argv, &a, &err), QP_ERR_USAGE);
    if (!strstr(err.msg, needle)) fail_msg("message '%s' does not mention '%s'", err.msg, needle);
    assert_null(a.flags);
    assert_int_equal(a.n_pos, 0);
    cli_args_free(&a);
}

static void test_stray_words(void **state) {
    (void)state;
    static const struct cli_spec none = {opts, 0, 0, NULL};
    char *junk[] = {"--onnx_path", "m.onnx", "junk", NULL};
    expect_spec_usage(&none, junk, "unexpected argument 'junk'");
    /* store_true flags take no value: the word after one is stray, and the message says why */
    char *bool_word[] = {"--onnx_path", "m.onnx", "--disable_mha_qdq", "False", NULL};
    expect_spec_usage(&none, bool_word,
                      "unexpected argument 'False' (--disable_mha_qdq takes no "
                      "value)");
    char *prefix_bool[] = {"--disable_mha", "True", NULL};
    expect_spec_usage(&none, prefix_bool, "'True' (--disable_mha takes no value)");
    char *after_dashes[] = {"--", "x", NULL};
    expect_spec_usage(&none, after_dashes, "unexpected argument 'x'");
    char *negative[] = {"-1", NULL};
    expect_spec_usage(&none, negative, "unexpected argument '-1'");

    static const struct cli_spec two = {opts, 2, 2, NULL};
    char *one[] = {"a.onnx", "--json", NULL};
    expect_spec_usage(&two, one, "missing argument (2 expected, 1 given)");
    char *three[] = {"--json", "a", "b", "c", NULL}; /* 'a' follows --json but is wanted */
    expect_spec_usage(&two, three, "unexpected argument 'c'");
    char *ok[] = {"--json", "a", "b", NULL};
    struct cli_args a;
    struct qp_error err;
    assert_int_equal(parse_spec(&two, ok, &a, &err), QP_OK);
    assert_int_equal(a.n_pos, 2);
    assert_string_equal(a.pos[1], "b");
    cli_args_free(&a);
    /* help skips the count, and wins over any usage error */
    char *help[] = {"a", "b", "c", "--bogus", "-h", NULL};
    assert_int_equal(parse_spec(&two, help, &a, &err), QP_OK);
    assert_int_equal(a.help, 1);
    assert_int_equal(err.status, QP_OK);
    cli_args_free(&a);
    char *help_after_dashes[] = {"--", "--help", NULL}; /* a positional, not a request */
    expect_spec_usage(&none, help_after_dashes, "unexpected argument '--help'");
}

static void test_pos_flag(void **state) {
    (void)state;
    static const struct cli_spec model = {opts, 0, 0, "onnx_path"};
    char *pos[] = {"--json", "m.onnx", NULL};
    struct cli_args a;
    struct qp_error err;
    assert_int_equal(parse_spec(&model, pos, &a, &err), QP_OK);
    assert_string_equal(cli_value(&a, "onnx_path", NULL), "m.onnx");
    assert_int_equal(a.n_pos, 0);
    cli_args_free(&a);
    char *both[] = {"m.onnx", "--onnx_path", "n.onnx", NULL};
    expect_spec_usage(&model, both, "unexpected argument 'm.onnx' (--onnx_path is given)");
    char *two[] = {"m.onnx", "junk", NULL};
    expect_spec_usage(&model, two, "unexpected argument 'junk'");
}

static void test_prefixes(void **state) {
    (void)state;
    /* a unique prefix is the flag, in either spelling and with either value form */
    char *v[] = {"--onnx=m.onnx", "--thresh", "0.5", "--nodes-to", "a", "b", "--disable_mha", NULL};
    struct cli_args a;
    struct qp_error err;
    assert_int_equal(parse(v, &a, &err), QP_OK);
    assert_string_equal(cli_value(&a, "onnx_path", NULL), "m.onnx");
    assert_string_equal(cli_value(&a, "threshold", NULL), "0.5");
    assert_int_equal(cli_count(&a, "nodes_to_exclude"), 2);
    assert_true(cli_has(&a, "disable_mha_qdq"));
    cli_args_free(&a);
    static const struct cli_opt near[] = {
        {"calibration_data_path", CLI_VALUE, "F", ""},
        {"calibration_method", CLI_VALUE, "M", ""},
        {"calibration", CLI_VALUE, "X", ""}, /* an exact name wins over longer ones */
        {"out", CLI_VALUE, "O", ""},
        {"output_path", CLI_VALUE, "O", ""},
        {0},
    };
    static const struct cli_spec spec = {near, 0, 0, NULL};
    char *w[] = {"--calibration_data=d.npz", "--calibration", "x", "--out", "o", NULL};
    assert_int_equal(parse_spec(&spec, w, &a, &err), QP_OK);
    assert_string_equal(cli_value(&a, "calibration_data_path", NULL), "d.npz");
    assert_string_equal(cli_value(&a, "calibration", NULL), "x");
    assert_string_equal(cli_value(&a, "out", NULL), "o");
    assert_null(cli_value(&a, "output_path", NULL));
    cli_args_free(&a);
    char *amb[] = {"--calibration_=x", NULL};
    expect_spec_usage(&spec, amb,
                      "ambiguous flag --calibration_: could be --calibration_data_path, "
                      "--calibration_method");
    char *amb2[] = {"--ou", "x", NULL};
    expect_spec_usage(&spec, amb2, "could be --out, --output_path");
    /* a prefix given twice is the same flag given twice */
    char *twice[] = {"--calibration_d", "a", "--calibration-data-path", "b", NULL};
    expect_spec_usage(&spec, twice, "--calibration-data-path given more than once");
}

static void test_name_distance(void **state) {
    (void)state;
    assert_int_equal(cli_name_distance("jsn", 3, "json"), 1);
    assert_int_equal(cli_name_distance("calibraton-method", 17, "calibration_method"), 1);
    assert_int_equal(cli_name_distance("quantise", 8, "quantize"), 1);
    assert_int_equal(cli_name_distance("json", 4, "json"), 0);
    assert_int_equal(cli_name_distance("foo", 3, "json"), -1); /* too far to suggest */
    assert_int_equal(cli_name_distance("jn", 2, "json"), -1);
    char longer[100];
    memset(longer, 'a', sizeof longer);
    assert_int_equal(cli_name_distance(longer, sizeof longer, "json"), -1);
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

/* CLI_OPTIONAL (quantize --autotune[=MODE]): a value only after '=', never the next word. */
static void test_optional(void **state) {
    (void)state;
    static const struct cli_opt o[] = {
        {"onnx_path", CLI_VALUE, "MODEL", "the model"},
        {"autotune", CLI_OPTIONAL, "MODE", "a mode or none"},
        {"autotune_timing_runs", CLI_VALUE, "N", "a count"},
        {0},
    };
    static const struct cli_spec spec = {o, 0, 0, "onnx_path"};
    struct cli_args a;
    struct qp_error err;
    char *bare[] = {"--autotune", "m.onnx", NULL};
    assert_int_equal(parse_spec(&spec, bare, &a, &err), QP_OK);
    assert_true(cli_has(&a, "autotune"));
    assert_string_equal(cli_value(&a, "autotune", "default"), "default");
    assert_string_equal(cli_value(&a, "onnx_path", NULL), "m.onnx");
    cli_args_free(&a);
    char *eq[] = {"m.onnx", "--autotune=quick", "--autotune-timing-runs", "5", NULL};
    assert_int_equal(parse_spec(&spec, eq, &a, &err), QP_OK);
    assert_string_equal(cli_value(&a, "autotune", "default"), "quick");
    assert_string_equal(cli_value(&a, "autotune_timing_runs", NULL), "5");
    cli_args_free(&a);
    char *spaced[] = {"--onnx_path", "m.onnx", "--autotune", "quick", NULL};
    expect_spec_usage(&spec, spaced,
                      "unexpected argument 'quick' (--autotune takes a value only as "
                      "--autotune=quick)");
    char *twice[] = {"m.onnx", "--autotune", "--autotune=quick", NULL};
    expect_spec_usage(&spec, twice, "--autotune given more than once");
    char buf[1024] = {0};
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    assert_non_null(f);
    cli_print_opts(f, o);
    fclose(f);
    assert_non_null(strstr(buf, "--autotune[=MODE]"));
}

/* CLI_ALIAS rows: `-v` is --verbose, `-m X` is --onnx_path X; `--v` and `-x` are not flags,
 * and help prints "-v, --verbose". */
static void test_short_aliases(void **state) {
    (void)state;
    static const struct cli_opt aopts[] = {
        {"onnx_path", CLI_VALUE, "MODEL", "the model"},
        {"verbose", CLI_BOOL, NULL, "more"},
        {"v", CLI_ALIAS, "verbose", NULL},
        {"m", CLI_ALIAS, "onnx_path", NULL},
        {0},
    };
    static const struct cli_spec spec = {aopts, 0, 0, NULL};
    struct cli_args a;
    struct qp_error err;
    char *ok[] = {"-m", "x.onnx", "-v", NULL};
    assert_int_equal(parse_spec(&spec, ok, &a, &err), QP_OK);
    assert_string_equal(cli_value(&a, "onnx_path", NULL), "x.onnx");
    assert_true(cli_has(&a, "verbose"));
    cli_args_free(&a);
    char *missing[] = {"-m", NULL};
    assert_int_equal(parse_spec(&spec, missing, &a, &err), QP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "--onnx_path needs a value"));
    char *unknown[] = {"-x", NULL};
    assert_int_equal(parse_spec(&spec, unknown, &a, &err), QP_ERR_USAGE);
    assert_non_null(strstr(err.msg, "unknown flag -x"));
    char *long_alias[] = {"--m", "x.onnx", NULL}; /* an alias row is no long name */
    assert_int_equal(parse_spec(&spec, long_alias, &a, &err), QP_ERR_USAGE);
    char buf[1024] = {0};
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    assert_non_null(f);
    cli_print_opts(f, aopts);
    fclose(f);
    assert_non_null(strstr(buf, "-v, --verbose"));
    assert_non_null(strstr(buf, "-m, --onnx_path MODEL"));
    assert_null(strstr(buf, "--v "));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_both_spellings), cmocka_unit_test(test_positionals_and_values),
        cmocka_unit_test(test_repeated),       cmocka_unit_test(test_list),
        cmocka_unit_test(test_help),           cmocka_unit_test(test_errors),
        cmocka_unit_test(test_stray_words),    cmocka_unit_test(test_pos_flag),
        cmocka_unit_test(test_prefixes),       cmocka_unit_test(test_name_distance),
        cmocka_unit_test(test_print_opts),     cmocka_unit_test(test_optional),
        cmocka_unit_test(test_short_aliases),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
