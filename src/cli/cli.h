/*
 * The command-line tool: main.c holds the command table; each subcommand lives in its own file
 * and exports its flag table and a run function. Adding a command is one file plus one row.
 *
 * A run function gets parsed arguments (help and positional counts already handled by main),
 * owns stdout, reports errors with cli_fail and returns the process exit code.
 */
#ifndef QP_CLI_CLI_H
#define QP_CLI_CLI_H

#include "args.h"
#include "qplace/status.h"

struct cli_command {
    const char *name;
    const char *summary;        /* one line, for `qplace --help` */
    const char *usage;          /* after "qplace NAME": "MODEL [--json]" */
    const char *details;        /* printed by `qplace help NAME`; may be NULL */
    const struct cli_opt *opts; /* ends with a {0} row */
    int min_pos, max_pos;       /* positional argument counts (max -1: unlimited) */
    int (*run)(const struct cli_args *args);
};

/* Prints "qplace: <err->msg>" on stderr and returns qp_status_exit_code(err->status). */
int cli_fail(const struct qp_error *err);

/* ---- subcommands ------------------------------------------------------------------------- */

extern const struct cli_opt cli_info_opts[];
extern const char cli_info_details[];
int cli_info_run(const struct cli_args *args);

extern const struct cli_opt cli_calibrate_opts[];
extern const char cli_calibrate_details[];
int cli_calibrate_run(const struct cli_args *args);

extern const struct cli_opt cli_bench_opts[];
extern const char cli_bench_details[];
int cli_bench_run(const struct cli_args *args);

extern const struct cli_opt cli_sensitivity_opts[];
extern const char cli_sensitivity_details[];
int cli_sensitivity_run(const struct cli_args *args);

extern const struct cli_opt cli_run_opts[];
extern const char cli_run_details[];
int cli_run_run(const struct cli_args *args);

extern const struct cli_opt cli_quantize_opts[];
extern const char cli_quantize_details[];
int cli_quantize_run(const struct cli_args *args);

extern const struct cli_opt cli_diff_opts[];
extern const char cli_diff_details[];
int cli_diff_run(const struct cli_args *args);

extern const struct cli_opt cli_qdq_to_dq_opts[];
extern const char cli_qdq_to_dq_details[];
int cli_qdq_to_dq_run(const struct cli_args *args);

#endif
