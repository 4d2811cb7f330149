#include "args.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/edit.h"
#include "core/size.h"

static char normalize(char c) {
    return c == '-' ? '_' : c;
}

/* Flag spellings: `--onnx_path`, `--onnx-path` (and mixtures) all name option "onnx_path". */
static int name_matches(const char *spec, const char *given, size_t given_len) {
    if (strlen(spec) != given_len) return 0;
    for (size_t i = 0; i < given_len; i++)
        if (normalize(given[i]) != spec[i]) return 0;
    return 1;
}

static int name_starts_with(const char *spec, const char *given, size_t given_len) {
    for (size_t i = 0; i < given_len; i++)
        if (spec[i] == 0 || normalize(given[i]) != spec[i]) return 0;
    return 1;
}

static int find_opt(const struct cli_opt *opts, const char *given, size_t len) {
    for (int i = 0; opts[i].name; i++)
        if (opts[i].kind != CLI_ALIAS && name_matches(opts[i].name, given, len)) return i;
    return -1;
}

#define CLI_MAX_NAME 64 /* longer names are never "close" to anything */

/* ctx: {given, name}; '-' and '_' are the same character. */
static int name_chars_differ(size_t i, size_t j, const void *ctx) {
    const char *const *s = ctx;
    return normalize(s[0][i]) != normalize(s[1][j]);
}

int cli_name_distance(const char *given, size_t len, const char *name) {
    size_t m = strlen(name);
    if (len > CLI_MAX_NAME || m > CLI_MAX_NAME) return -1;
    size_t row[CLI_MAX_NAME + 1];
    int d = (int)qp_edit_distance(len, m, name_chars_differ, (const char *[]){given, name}, row);
    /* close: one edit for short names, about one per four characters for longer ones */
    int limit = 1 + (int)(len < m ? len : m) / 4;
    return d <= limit ? d : -1;
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

static enum qp_status unknown_flag(const struct cli_opt *opts, const char *name, size_t len,
                                   struct qp_error *err) {
    int best = -1, best_d = -1;
    for (int i = 0; opts[i].name; i++) {
        if (opts[i].kind == CLI_ALIAS) continue;
        int d = cli_name_distance(name, len, opts[i].name);
        if (d >= 0 && (best_d < 0 || d < best_d)) best = i, best_d = d;
    }
    if (best >= 0)
        return qp_error_set(err, QP_ERR_USAGE, "unknown flag --%.*s; did you mean --%s?", (int)len,
                            name, opts[best].name);
    return qp_error_set(err, QP_ERR_USAGE, "unknown flag --%.*s", (int)len, name);
}

/* argparse's rule: the exact name, else the one flag the given name is a prefix of. */
static enum qp_status resolve_flag(const struct cli_opt *opts, const char *name, size_t len,
                                   int *opt_out, struct qp_error *err) {
    *opt_out = find_opt(opts, name, len);
    if (*opt_out >= 0) return QP_OK;
    int n_match = 0, match = -1;
    for (int i = 0; len > 0 && opts[i].name; i++)
        if (opts[i].kind != CLI_ALIAS && name_starts_with(opts[i].name, name, len) &&
            n_match++ == 0)
            match = i;
    if (n_match == 1) {
        *opt_out = match;
        return QP_OK;
    }
    if (n_match == 0) return unknown_flag(opts, name, len, err);
    char list[512];
    size_t used = 0;
    list[0] = 0;
    for (int i = 0; opts[i].name && used < sizeof list; i++) {
        if (opts[i].kind == CLI_ALIAS || !name_starts_with(opts[i].name, name, len)) continue;
        int w = snprintf(list + used, sizeof list - used, "%s--%s", used ? ", " : "", opts[i].name);
        if (w < 0) break;
        used += (size_t)w;
    }
    return qp_error_set(err, QP_ERR_USAGE, "ambiguous flag --%.*s: could be %s", (int)len, name,
                        list);
}

static enum qp_status take_values(const struct cli_opt *opts, int o, const char *name, size_t len,
                                  const char *eq, int argc, char **argv, int *i,
                                  struct cli_args *out, struct qp_error *err);

/* A one-letter "-x" at argv[*i] (a CLI_ALIAS row); consumes its values. */
static enum qp_status parse_short(const struct cli_opt *opts, int argc, char **argv, int *i,
                                  struct cli_args *out, struct qp_error *err) {
    const char *arg = argv[*i];
    for (int k = 0; arg[2] == 0 && opts[k].name; k++) {
        if (opts[k].kind != CLI_ALIAS || opts[k].name[0] != arg[1] || opts[k].name[1]) continue;
        int o = find_opt(opts, opts[k].metavar, strlen(opts[k].metavar));
        if (o < 0) break;
        return take_values(opts, o, opts[o].name, strlen(opts[o].name), NULL, argc, argv, i, out,
                           err);
    }
    return qp_error_set(err, QP_ERR_USAGE, "unknown flag %s (flags are spelled --name)", arg);
}

/* One "--name[=value]" at argv[*i]; consumes its values (advancing *i). */
static enum qp_status parse_flag(const struct cli_opt *opts, int argc, char **argv, int *i,
                                 struct cli_args *out, struct qp_error *err) {
    const char *name = argv[*i] + 2;
    const char *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    int o;
    enum qp_status st = resolve_flag(opts, name, len, &o, err);
    if (st != QP_OK) return st;
    return take_values(opts, o, name, len, eq, argc, argv, i, out, err);
}

/* Flag opts[o], spelled name[0..len) (and "=value" at eq, or NULL) at argv[*i]: its values. */
static enum qp_status take_values(const struct cli_opt *opts, int o, const char *name, size_t len,
                                  const char *eq, int argc, char **argv, int *i,
                                  struct cli_args *out, struct qp_error *err) {
    const struct cli_opt *opt = &opts[o];
    if (opt->kind == CLI_BOOL) {
        if (eq) return qp_error_set(err, QP_ERR_USAGE, "--%.*s takes no value", (int)len, name);
        push_flag(out, o, NULL);
        return QP_OK;
    }
    if ((opt->kind == CLI_VALUE || opt->kind == CLI_OPTIONAL) && cli_has(out, opt->name))
        return qp_error_set(err, QP_ERR_USAGE, "--%.*s given more than once", (int)len, name);
    if (opt->kind == CLI_OPTIONAL) {
        push_flag(out, o, eq ? eq + 1 : NULL);
        return QP_OK;
    }
    if (eq) {
        push_flag(out, o, eq + 1);
        return QP_OK;
    }
    const char *next = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (!next || (looks_like_flag(next) && opt->kind != CLI_VALUE) ||
        (next[0] == '-' && next[1] == '-'))
        return qp_error_set(err, QP_ERR_USAGE, "--%.*s needs a value (%s)", (int)len, name,
                            opt->metavar ? opt->metavar : "VALUE");
    push_flag(out, o, argv[++*i]);
    if (opt->kind == CLI_LIST)
        while (*i + 1 < argc && !looks_like_flag(argv[*i + 1]) && strcmp(argv[*i + 1], "--"))
            push_flag(out, o, argv[++*i]);
    return QP_OK;
}

/* The boolean flag spelled right before argv[i], if any: "--dq_only False" is a value given to a
 * flag that takes none, the likeliest reason for a stray word. */
static const char *bool_before(const struct cli_opt *opts, char **argv, int i, int *optional) {
    if (i == 0 || strncmp(argv[i - 1], "--", 2) != 0 || strchr(argv[i - 1], '=')) return NULL;
    const char *name = argv[i - 1] + 2;
    int o = find_opt(opts, name, strlen(name));
    if (o < 0) { /* an accepted prefix */
        struct qp_error ignored;
        if (resolve_flag(opts, name, strlen(name), &o, &ignored) != QP_OK) return NULL;
    }
    if (optional) *optional = opts[o].kind == CLI_OPTIONAL;
    return opts[o].kind == CLI_BOOL || opts[o].kind == CLI_OPTIONAL ? argv[i - 1] : NULL;
}

/* The positional rules of `spec`, once every argument is read. `at[k]` is pos[k]'s argv index. */
static enum qp_status check_positionals(const struct cli_spec *spec, char **argv, const int *at,
                                        struct cli_args *out, struct qp_error *err) {
    size_t first = 0;
    if (spec->pos_flag && out->n_pos > 0) {
        int o = find_opt(spec->opts, spec->pos_flag, strlen(spec->pos_flag));
        if (o >= 0 && cli_count(out, spec->pos_flag) == 0) {
            push_flag(out, o, out->pos[0]);
            first = 1;
        }
    }
    size_t n = out->n_pos - first;
    if (spec->max_pos >= 0 && n > (size_t)spec->max_pos) {
        /* the first surplus word, or a surplus word that follows a boolean flag */
        size_t bad = first + (size_t)spec->max_pos;
        for (size_t k = bad; k < out->n_pos; k++)
            if (bool_before(spec->opts, argv, at[k], NULL)) {
                bad = k;
                break;
            }
        int optional = 0;
        const char *flag = bool_before(spec->opts, argv, at[bad], &optional);
        if (flag && optional)
            return qp_error_set(err, QP_ERR_USAGE,
                                "unexpected argument '%s' (%s takes a value only as %s=%s)",
                                out->pos[bad], flag, flag, out->pos[bad]);
        if (flag)
            return qp_error_set(err, QP_ERR_USAGE, "unexpected argument '%s' (%s takes no value)",
                                out->pos[bad], flag);
        if (spec->pos_flag && !first)
            return qp_error_set(err, QP_ERR_USAGE, "unexpected argument '%s' (--%s is given)",
                                out->pos[bad], spec->pos_flag);
        return qp_error_set(err, QP_ERR_USAGE, "unexpected argument '%s'", out->pos[bad]);
    }
    if (n < (size_t)spec->min_pos)
        return qp_error_set(err, QP_ERR_USAGE, "missing argument (%d expected, %zu given)",
                            spec->min_pos, n);
    if (first) {
        memmove(out->pos, out->pos + 1, (out->n_pos - 1) * sizeof *out->pos);
        out->n_pos--;
    }
    return QP_OK;
}

static int help_requested(int argc, char **argv) {
    for (int i = 0; i < argc && strcmp(argv[i], "--"); i++)
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) return 1;
    return 0;
}

enum qp_status cli_parse(const struct cli_spec *spec, int argc, char **argv, struct cli_args *out,
                         struct qp_error *err) {
    memset(out, 0, sizeof *out);
    out->opts = spec->opts;
    if (argc < 0) argc = 0;
    /* Every argument yields at most one flag entry or one positional (the positional standing for
     * pos_flag moves to the flags), so argc slots suffice. */
    size_t n = (size_t)argc + 1;
    out->flags = qp_malloc_n(n, sizeof *out->flags);
    out->pos = qp_malloc_n(n, sizeof *out->pos);
    int *at = qp_malloc_n(n, sizeof *at);
    enum qp_status st = QP_OK;
    if (!out->flags || !out->pos || !at) {
        st = qp_error_set(err, QP_ERR_NOMEM, "out of memory parsing arguments");
        goto fail;
    }
    int only_pos = 0;
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        if (only_pos || !looks_like_flag(arg)) { /* also "-", "--" and negative numbers */
            if (!only_pos && strcmp(arg, "--") == 0) {
                only_pos = 1;
                continue;
            }
            at[out->n_pos] = i;
            out->pos[out->n_pos++] = arg;
        } else if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            out->help = 1;
        } else if (arg[1] != '-') {
            if ((st = parse_short(spec->opts, argc, argv, &i, out, err)) != QP_OK) goto fail;
        } else if ((st = parse_flag(spec->opts, argc, argv, &i, out, err)) != QP_OK) {
            goto fail;
        }
    }
    if (!out->help && (st = check_positionals(spec, argv, at, out, err)) != QP_OK) goto fail;
    free(at);
    return QP_OK;
fail:
    free(at);
    cli_args_free(out);
    if (st == QP_ERR_USAGE && help_requested(argc, argv)) {
        /* argparse shows the help however wrong the rest of the line is */
        if (err) memset(err, 0, sizeof *err);
        out->opts = spec->opts;
        out->help = 1;
        return QP_OK;
    }
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
        char left[96], alias[8] = "";
        const char *mv = opts[i].metavar ? opts[i].metavar : "VALUE";
        for (int k = 0; opts[k].name; k++)
            if (opts[k].kind == CLI_ALIAS && strcmp(opts[k].metavar, opts[i].name) == 0)
                snprintf(alias, sizeof alias, "-%s, ", opts[k].name);
        switch (opts[i].kind) {
        case CLI_ALIAS:
            continue;
        case CLI_BOOL:
            snprintf(left, sizeof left, "%s--%s", alias, opts[i].name);
            break;
        case CLI_VALUE:
            snprintf(left, sizeof left, "%s--%s %s", alias, opts[i].name, mv);
            break;
        case CLI_MULTI:
            snprintf(left, sizeof left, "%s--%s %s ...", alias, opts[i].name, mv);
            break;
        case CLI_LIST:
            snprintf(left, sizeof left, "%s--%s %s [%s ...]", alias, opts[i].name, mv, mv);
            break;
        case CLI_OPTIONAL:
            snprintf(left, sizeof left, "--%s[=%s]", opts[i].name, mv);
            break;
        }
        fprintf(f, "  %-30s %s\n", left, opts[i].help ? opts[i].help : "");
    }
    fprintf(f, "  %-30s %s\n", "-h, --help", "show this help");
}

int cli_parse_finite(const char *s, double *out) {
    if (!s || !*s) return 0;
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(v)) return 0;
    *out = v;
    return 1;
}
