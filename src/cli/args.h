/*
 * The flag parser shared by every subcommand.
 *
 * A command lists its flags once, by their snake_case name; `--snake_case`, `--kebab-case`,
 * `--flag value` and `--flag=value` are all accepted (DESIGN.md: ModelOpt's scripts keep working).
 *
 *     static const struct cli_opt opts[] = {
 *         {"json", CLI_BOOL, NULL, "print JSON"},
 *         {"output_path", CLI_VALUE, "OUT", "where to write the model"},
 *         {"input", CLI_MULTI, "NAME=FILE", "an input tensor (repeatable)"},
 *         {"nodes_to_exclude", CLI_LIST, "REGEX", "one or more patterns (repeatable)"},
 *         {0}};
 *     struct cli_args a;
 *     if (cli_parse(opts, argc, argv, &a, &err) != QP_OK) ... usage error, err.msg names the flag
 *     if (cli_has(&a, "json")) ...
 *     for (size_t i = 0; i < cli_count(&a, "input"); i++) use(cli_value_at(&a, "input", i));
 *     cli_args_free(&a);
 *
 * Values are borrowed from argv. "--" ends the flags; a lone "-" is a positional argument.
 * `-h`/`--help` anywhere sets `help` instead of failing on what else is missing.
 */
#ifndef QP_CLI_ARGS_H
#define QP_CLI_ARGS_H

#include <stddef.h>
#include <stdio.h>

#include "qplace/status.h"

enum cli_opt_kind {
    CLI_BOOL,  /* no value; `--flag=x` is an error; repeating it is harmless */
    CLI_VALUE, /* exactly one value; giving the flag twice is an error */
    CLI_MULTI, /* one value per occurrence; repeatable (`--input a=x.npy --input b=y.npy`) */
    CLI_LIST   /* one or more values up to the next flag (argparse nargs="+"); repeatable */
};

struct cli_opt {
    const char *name; /* snake_case, without dashes; NULL ends the table */
    enum cli_opt_kind kind;
    const char *metavar; /* shown in help for flags with values */
    const char *help;    /* one line */
};

struct cli_arg {
    int opt;           /* index into the opts table */
    const char *value; /* NULL for CLI_BOOL */
};

struct cli_args {
    const struct cli_opt *opts;
    size_t n_flags;
    struct cli_arg *flags; /* in command-line order */
    size_t n_pos;
    const char **pos; /* positional arguments, in order */
    int help;         /* -h or --help was given */
};

/* Parses argv[0..argc-1] (the arguments after the command name) against `opts`. On success
 * fills `out` (free with cli_args_free). Unknown flags, missing values, a value given to a
 * CLI_BOOL flag and a CLI_VALUE flag given twice are QP_ERR_USAGE with a message naming the flag
 * as the user spelled it; QP_ERR_NOMEM when out of memory. On failure `out` is empty. */
enum qp_status cli_parse(const struct cli_opt *opts, int argc, char **argv, struct cli_args *out,
                         struct qp_error *err);
/* NULL-safe. */
void cli_args_free(struct cli_args *a);

/* Occurrences of flag `name` (CLI_BOOL: times given; others: number of values). */
size_t cli_count(const struct cli_args *a, const char *name);
int cli_has(const struct cli_args *a, const char *name);
/* The i-th value of `name`, or NULL. */
const char *cli_value_at(const struct cli_args *a, const char *name, size_t i);
/* The value of a CLI_VALUE flag (the last value for the others), or `fallback`. */
const char *cli_value(const struct cli_args *a, const char *name, const char *fallback);

/* Prints "  --name METAVAR   help" lines for every flag in `opts`. */
void cli_print_opts(FILE *f, const struct cli_opt *opts);

#endif
