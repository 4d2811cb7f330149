/*
 * The command-line tool: main.c holds the command table; each subcommand lives in its own file
 * and exports its flag table and a run function. Adding a command is one file plus one row.
 *
 * A run function gets parsed arguments (help, unknown flags and positional counts already
 * handled by main and the parser),
 * owns stdout, reports errors with cli_fail and returns the process exit code.
 */
#ifndef QP_CLI_CLI_H
#define QP_CLI_CLI_H

#include "args.h"
#include "qplace/calib.h"
#include "qplace/status.h"

struct cli_command {
    const char *name;
    const char *summary;  /* one line, for `qplace --help` */
    const char *usage;    /* after "qplace NAME": "MODEL [--json]" */
    const char *details;  /* printed by `qplace help NAME`; may be NULL */
    struct cli_spec spec; /* flags and positional arguments, checked by cli_parse */
    int (*run)(const struct cli_args *args);
};

/* Prints "qplace: <err->msg>" on stderr and returns qp_status_exit_code(err->status). */
int cli_fail(const struct qp_error *err);
/* Prints the methods --calibration_method auto chose: "  auto: max N, entropy N, ..." with the
 * entropy fallbacks (counts indexed by enum qp_calib_method). */
void cli_print_auto(const size_t *n_per_method, size_t n_fallback);

/* ---- calibration data flags, shared by calibrate, quantize and sensitivity ------------------
 * One row set in each command's flag table and one parser (data_flags.c); which provider a
 * path means is decided in src/calib/data.h. The calibrator and thread rows are shared too. */
/* clang-format off */
#define CLI_DATA_OPTS                                                                              \
    {"calibration_data_path", CLI_VALUE, "FILE|DIR",                                               \
     ".npz/.npy file, folder of .npz/.npy shards, or folder of PNG/JPEG images (default: "         \
     "synthetic)"},                                                                                \
    {"calibration_shapes", CLI_VALUE, "NAME:1x3x224x224,...", "batch shape per input"},            \
    {"max_calibration_bytes", CLI_VALUE, "N",                                                      \
     "cap on .npz/.npy calibration data (bytes, K/M/G suffixes; 16G)"},                            \
    {"image_mean", CLI_VALUE, "R,G,B", "image folders: mean after scaling to 0..1 (0,0,0)"},       \
    {"image_std", CLI_VALUE, "R,G,B", "image folders: std after scaling to 0..1 (1,1,1)"},         \
    {"image_bgr", CLI_BOOL, NULL, "image folders: channel order B,G,R"}
/* Rows more than one command's table holds word for word. */
#define CLI_CALIBRATION_METHOD_OPT                                                                 \
    {"calibration_method", CLI_VALUE, "max|entropy|percentile|mse|auto", "calibrator (default entropy)"}
#define CLI_THREADS_OPT {"threads", CLI_VALUE, "N", "engine threads (0: all cores)"}
#define CLI_WEIGHT_CLIPPING_OPT                                                                    \
    {"weight_clipping", CLI_VALUE, "absmax|mse",                                                   \
     "weight channel scales from the least-error clipping (default) or absmax (ModelOpt's)"}
/* clang-format on */

struct qp_data_options;
/* Fills `o` (defaults first) from the data flags of `a`. A bad value prints
 * "qplace CMD: ..." with a hint on stderr and returns 1 (the exit code); 0 on success. */
int cli_data_options(const struct cli_args *a, const char *cmd, struct qp_data_options *o);

/* --percentile P for calibration `method`: absent leaves *out alone; a number in (0, 100] with
 * the percentile method is stored in *out. Otherwise QP_ERR_USAGE with the message ("--percentile
 * 'x' is not a number in (0, 100]", "--percentile needs --calibration_method percentile"), which
 * the command prints its own way. calibrate, quantize and sensitivity share it. */
/* --weight_clipping mse|absmax (quantize, and sensitivity's scores of the same weights): *out 1
 * for mse (also when absent: the default), 0 for absmax; another value is QP_ERR_USAGE with the
 * message, which the command prints its own way. */
enum qp_status cli_weight_clip_mse(const struct cli_args *a, int *out, struct qp_error *err);

enum qp_status cli_percentile(const struct cli_args *a, enum qp_calib_method method, double *out,
                              struct qp_error *err);

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

extern const struct cli_opt cli_autotune_opts[];
extern const char cli_autotune_details[];
int cli_autotune_run(const struct cli_args *args);

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

/* ---- OpenMP waiting (src/cli/omp_wait.c) ----
 * libgomp's threads spin between parallel regions by default, and a run has dozens to hundreds
 * of regions: on an idle machine spinning is 20-45% faster than sleeping (bench/README.md), on a
 * machine with other load it made runs 4-20x slower. libgomp reads its policy once, when it is
 * loaded, so cli_choose_omp_wait (first thing in main) sets it and executes qplace again: when
 * the user set OMP_WAIT_POLICY or GOMP_SPINCOUNT, nothing; when /proc/loadavg shows an idle
 * machine, GOMP_SPINCOUNT=300000 (libgomp's own default, bounded spinning); otherwise
 * OMP_WAIT_POLICY=passive. */
void cli_choose_omp_wait(char **argv);
/* The idle test: no other runnable task (the fewest of a few snapshots) and a 1-minute load
 * average below twice the CPU count (our own previous run raises it by up to its thread count
 * for a minute, which must not make a quiet machine look busy). */
int cli_omp_spin_ok(double load1, int running_others, long n_cpus);

/* An accuracy budget's outcome, one line on `f`: the drift and top-1 agreement (those the goal
 * bounds, or the top-1 when there is one) with everything quantized (`first`) and after
 * excluding `n_groups` targets or groups (`last`), met or NOT met (src/cli/sensitivity.c). */
struct qp_sens_budget_goal;
struct qp_sens_budget_step;
void cli_print_budget(FILE *f, const struct qp_sens_budget_goal *g,
                      const struct qp_sens_budget_step *first,
                      const struct qp_sens_budget_step *last, size_t n_groups, int met);

/* --int8 auto|off|exact of `run` and `bench` (int8.c): QP_INT8_AUTO (the default),
 * QP_INT8_OFF or QP_INT8_EXACT; -1 after the message for another value. */
int cli_int8_mode(const struct cli_args *args, const char *command);
/* The flag's word for a mode ("auto", "off", "exact"). */
const char *cli_int8_name(int mode);
/* Prints what the integer path of session `s` did: counts, and with `explain` one line per
 * Q/DQ node of the model (what it fused into, or why it runs as its own pass). */
struct qp_session;
void cli_int8_summary(const struct qp_session *s, int explain);

#endif
