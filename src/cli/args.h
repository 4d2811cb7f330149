/*
 * The flag parser shared by every subcommand.
 *
 * A command lists its flags once, by their snake_case name, and says how many positional
 * arguments it takes; the parser owns every rule, so no command can forget one (docs/cli.md,
 * "Flag spellings"): `--snake_case` and `--kebab-case`, `--flag value` and `--flag=value`, and
 * argparse's unambiguous prefixes (`--calibration_data` is `--calibration_data_path` when no
 * other flag starts so) all work (DESIGN.md: ModelOpt's scripts keep working).
 *
 *     static const struct cli_opt opts[] = {
 *         {"json", CLI_BOOL, NULL, "print JSON"},
 *         {"output_path", CLI_VALUE, "OUT", "where to write the model"},
 *         {"input", CLI_MULTI, "NAME=FILE", "an input tensor (repeatable)"},
 *         {"nodes_to_exclude", CLI_LIST, "REGEX", "one or more patterns (repeatable)"},
 *         {0}};
 *     static const struct cli_spec spec = {opts, 1, 1, NULL}; // exactly one positional
 *     struct cli_args a;
 *     if (cli_parse(&spec, argc, argv, &a, &err) != QP_OK) ... usage error, err.msg says why
 *     if (cli_has(&a, "json")) ...
 *     for (size_t i = 0; i < cli_count(&a, "input"); i++) use(cli_value_at(&a, "input", i));
 *     cli_args_free(&a);
 *
 * Values are borrowed from argv. "--" ends the flags; a lone "-" is a positional argument.
 * Single-dash flags exist only as CLI_ALIAS rows (`-v`).
 * `-h`/`--help` anywhere before "--" sets `help` instead of failing on anything else.
 * Messages name flags as the user spelled them, unquoted (`--dq_only takes no value`), and
 * words in quotes (`unexpected argument 'junk'`); the caller adds "qplace <command>: ".
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
    CLI_LIST,  /* one or more values up to the next flag (argparse nargs="+"); repeatable */
    /* a value only as `--flag=value`; bare `--flag` has none (cli_value gives the fallback);
     * once at most. `quantize --autotune[=quick]`: the next word is never taken, so
     * `--autotune MODEL` keeps MODEL positional */
    CLI_OPTIONAL,
    /* A one-letter short spelling, `-v` for `--verbose`: the row {"v", CLI_ALIAS, "verbose",
     * NULL} names the flag in `metavar` (that flag's row must exist). `-v` then parses as the
     * flag does (`-m MODEL` takes the next word); `--v` means nothing more than before, and
     * help prints "-v, --verbose". ModelOpt's autotune spells -m, -o, -s and -v so. */
    CLI_ALIAS
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

/* What a command accepts. A positional argument beyond max_pos is an error naming it (and, when
 * it follows a boolean flag, saying that flag takes no value); fewer than min_pos is an error. */
struct cli_spec {
    const struct cli_opt *opts; /* ends with a {0} row */
    int min_pos, max_pos;       /* positional argument counts (max -1: unlimited) */
    /* NULL, or a CLI_VALUE flag the first positional stands for when that flag is not given
     * (`qplace quantize MODEL` is `--onnx_path MODEL`); it then counts as the flag, not in n_pos.
     */
    const char *pos_flag;
};

/* Parses argv[0..argc-1] (the arguments after the command name) against `spec`. On success
 * fills `out` (free with cli_args_free). Unknown flags (with the nearest name when one is
 * close), ambiguous prefixes (listing the candidates), missing values, a value given to a
 * CLI_BOOL flag, a CLI_VALUE flag given twice and a wrong positional count are QP_ERR_USAGE;
 * QP_ERR_NOMEM when out of memory. On failure `out` is empty. With -h/--help the positional
 * count is not checked and a usage error gives QP_OK with only `help` set. */
enum qp_status cli_parse(const struct cli_spec *spec, int argc, char **argv, struct cli_args *out,
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

/* A whole, finite decimal number (strtod's grammar, nothing after it, no overflow) into *out;
 * 1 on success, 0 (*out untouched) otherwise. Flag values like --max_output_drift D. */
int cli_parse_finite(const char *s, double *out);

/* Edit distance between given[0..len) and `name` ('-' and '_' equal) when it is small enough to
 * suggest `name` for a misspelling (about one edit per four characters), else -1. */
int cli_name_distance(const char *given, size_t len, const char *name);

/* Prints "  --name METAVAR   help" lines for every flag in `opts`. */
void cli_print_opts(FILE *f, const struct cli_opt *opts);

#endif
