#include "args.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/size.h"

/* Flag spellings: `--onnx_path`, `--onnx-path` (and mixtures) all name option "onnx_path". */
static int name_matches(const char *spec, const char *given, size_t given_len) {
    if (strlen(spec) != given_len) return 0;
    for (size_t i = 0; i < given_len; i++) {
        char c = given[i] == '-' ? '_' : given[i];
        if (c != spec[i]) return 0;
    }
    return 1;
}

static int find_opt(const struct cli_opt *opts, const char *given, size_t len) {
    for (int i = 0; opts[i].name; i++)
        if (name_matches(opts[i].name, given, len)) return i;
    return -1;
}

/* An argument that starts another flag rather than being a value: "--x...", or "-x" unless it
 * looks like a negative number ("-1", "-.5"). "-" alone and "--" are not flags here. */
static int looks_like_flag(const char *s) {
    if (s[0] != '-' || s[1] == 0) return 0;
    if (s[1] == '-') return s[2] != 0;
    return !(s[1] == '.' || (s[1] >= '0' && s[1] <= '9'));
}

static void push_flag(struct cli_args *a, int opt, const char *value) {
    a->flags[a->n_flags].opt = opt;
    a->flags[a->n_flags].value = value;
    a->n_flags++;
}

enum qp_status cli_parse(const struct cli_opt *opts, int argc, char **argv, struct cli_args *out,
                         struct qp_error *err) {
    memset(out, 0, sizeof *out);
    out->opts = opts;
    if (argc < 0) argc = 0;
    /* Every argument yields at most one flag entry or one positional, so argc slots suffice. */
    size_t n = (size_t)argc + 1;
    out->flags = qp_malloc_n(n, sizeof *out->flags);
    out->pos = qp_malloc_n(n, sizeof *out->pos);
    if (!out->flags || !out->pos) {
        cli_args_free(out);
        return qp_error_set(err, QP_ERR_NOMEM, "out of memory parsing arguments");
    }
    enum qp_status st = QP_OK;
    int only_pos = 0;
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        if (only_pos || arg[0] != '-' || arg[1] == 0) {
            out->pos[out->n_pos++] = arg;
            continue;
        }
        if (strcmp(arg, "--") == 0) {
            only_pos = 1;
            continue;
        }
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            out->help = 1;
            continue;
        }
        if (arg[1] != '-') {
            if (!looks_like_flag(arg)) { /* a negative number as a positional */
                out->pos[out->n_pos++] = arg;
                continue;
            }
            st = qp_error_set(err, QP_ERR_USAGE, "unknown flag '%s' (flags are spelled --name)",
                              arg);
            goto fail;
        }
        const char *name = arg + 2;
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        int o = find_opt(opts, name, len);
        if (o < 0) {
            st = qp_error_set(err, QP_ERR_USAGE, "unknown flag '--%.*s'", (int)len, name);
            goto fail;
        }
        const struct cli_opt *opt = &opts[o];
        if (opt->kind == CLI_BOOL) {
            if (eq) {
                st =
                    qp_error_set(err, QP_ERR_USAGE, "flag '--%.*s' takes no value", (int)len, name);
                goto fail;
            }
            push_flag(out, o, NULL);
            continue;
        }
        if (opt->kind == CLI_VALUE && cli_count(out, opt->name) > 0) {
            st = qp_error_set(err, QP_ERR_USAGE, "flag '--%.*s' given more than once", (int)len,
                              name);
            goto fail;
        }
        if (eq) {
            push_flag(out, o, eq + 1);
            continue;
        }
        if (i + 1 >= argc || (looks_like_flag(argv[i + 1]) && opt->kind != CLI_VALUE) ||
            (argv[i + 1][0] == '-' && argv[i + 1][1] == '-')) {
            st = qp_error_set(err, QP_ERR_USAGE, "flag '--%s' needs a value (%s)", name,
                              opt->metavar ? opt->metavar : "VALUE");
            goto fail;
        }
        push_flag(out, o, argv[++i]);
        if (opt->kind == CLI_LIST)
            while (i + 1 < argc && !looks_like_flag(argv[i + 1]) && strcmp(argv[i + 1], "--"))
                push_flag(out, o, argv[++i]);
    }
    return QP_OK;
fail:
    cli_args_free(out);
    return st;
}

void cli_args_free(struct cli_args *a) {
    if (!a) return;
    free(a->flags);
    free(a->pos);
    memset(a, 0, sizeof *a);
}

static int opt_index(const struct cli_args *a, const char *name) {
    if (!a->opts) return -1;
    return find_opt(a->opts, name, strlen(name));
}

size_t cli_count(const struct cli_args *a, const char *name) {
    int o = opt_index(a, name);
    size_t n = 0;
    for (size_t i = 0; i < a->n_flags; i++)
        n += a->flags[i].opt == o;
    return n;
}

int cli_has(const struct cli_args *a, const char *name) {
    return cli_count(a, name) > 0;
}

const char *cli_value_at(const struct cli_args *a, const char *name, size_t k) {
    int o = opt_index(a, name);
    for (size_t i = 0; i < a->n_flags; i++)
        if (a->flags[i].opt == o && k-- == 0) return a->flags[i].value;
    return NULL;
}

const char *cli_value(const struct cli_args *a, const char *name, const char *fallback) {
    size_t n = cli_count(a, name);
    const char *v = n ? cli_value_at(a, name, n - 1) : NULL;
    return v ? v : fallback;
}

void cli_print_opts(FILE *f, const struct cli_opt *opts) {
    for (int i = 0; opts[i].name; i++) {
        char left[96];
        const char *mv = opts[i].metavar ? opts[i].metavar : "VALUE";
        switch (opts[i].kind) {
        case CLI_BOOL:
            snprintf(left, sizeof left, "--%s", opts[i].name);
            break;
        case CLI_VALUE:
            snprintf(left, sizeof left, "--%s %s", opts[i].name, mv);
            break;
        case CLI_MULTI:
            snprintf(left, sizeof left, "--%s %s ...", opts[i].name, mv);
            break;
        case CLI_LIST:
            snprintf(left, sizeof left, "--%s %s [%s ...]", opts[i].name, mv, mv);
            break;
        }
        fprintf(f, "  %-30s %s\n", left, opts[i].help ? opts[i].help : "");
    }
    fprintf(f, "  %-30s %s\n", "-h, --help", "show this help");
}
