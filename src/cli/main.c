/* qplace — the command-line entry point: global flags, the command table, help and dispatch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "qplace/status.h"

#ifndef QPLACE_VERSION
#define QPLACE_VERSION "0.1.0"
#endif

/* One row per subcommand; `qplace --help` lists them in this order. */
static const struct cli_command commands[] = {
    {"info",
     "summarize a model: graph inputs/outputs, ops, initializers, subgraphs",
     "MODEL [--json]",
     cli_info_details,
     {cli_info_opts, 1, 1, NULL},
     cli_info_run},
    {"run",
     "run a model on the CPU engine: .npy/.npz inputs, .npz outputs",
     "MODEL --input NAME=FILE.npy ... | --inputs FILE.npz --output OUT.npz [--threads N]",
     cli_run_details,
     {cli_run_opts, 1, 1, NULL},
     cli_run_run},
    {"calibrate",
     "compute activation ranges by running the model (JSON, TensorRT cache)",
     "--onnx_path MODEL [--calibration_data_path FILE|DIR] [--calibration_method M] [...]",
     cli_calibrate_details,
     {cli_calibrate_opts, 0, 0, NULL},
     cli_calibrate_run},
    {"quantize",
     "insert Q/DQ (placement, calibration, writer) and report the output drift",
     "--onnx_path MODEL [--calibration_data_path FILE] [--placement_in FILE] [...]",
     cli_quantize_details,
     {cli_quantize_opts, 0, 0, "onnx_path"},
     cli_quantize_run},
    {"diff",
     "compare the Q/DQ topology of two models or placements (exit 4 when different)",
     "A B [--json]",
     cli_diff_details,
     {cli_diff_opts, 2, 2, NULL},
     cli_diff_run},
    {"qdq-to-dq",
     "store weights quantized, feeding their DequantizeLinear directly",
     "IN.onnx OUT.onnx",
     cli_qdq_to_dq_details,
     {cli_qdq_to_dq_opts, 2, 2, NULL},
     cli_qdq_to_dq_run},
    {"bench",
     "measure latency, throughput and peak RSS (optionally against ONNX Runtime)",
     "MODEL [--shape NAME=1x3x224x224 ...] [--iterations N] [--warmup N] [--threads N] [--json] "
     "[--compare-ort]",
     cli_bench_details,
     {cli_bench_opts, 1, 1, NULL},
     cli_bench_run},
    {"sensitivity",
     "rank targets by the output drift their quantization causes; pick exclusions",
     "--onnx_path MODEL [--calibration_data_path FILE] [--granularity op_type|node] [...]",
     cli_sensitivity_details,
     {cli_sensitivity_opts, 0, 0, NULL},
     cli_sensitivity_run},
    {"autotune",
     "choose Q/DQ placement by measured latency",
     "--onnx_path MODEL [--output_dir DIR] [--mode quick|default|extensive] [--backend B] [...]",
     cli_autotune_details,
     {cli_autotune_opts, 0, 0, NULL},
     cli_autotune_run},
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

static const struct cli_command *find_command(const char *name) {
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0) return &commands[i];
    return NULL;
}

/* "unknown command 'x'", with the nearest command name when one is close. */
static void unknown_command(char *msg, size_t size, const char *name) {
    const char *best = NULL;
    int best_d = -1;
    for (size_t i = 0; i < N_COMMANDS; i++) {
        int d = cli_name_distance(name, strlen(name), commands[i].name);
        if (d >= 0 && (best_d < 0 || d < best_d)) best = commands[i].name, best_d = d;
    }
    if (best)
        snprintf(msg, size, "unknown command '%s'; did you mean %s?", name, best);
    else
        snprintf(msg, size, "unknown command '%s'", name);
}

/* The command being run, for the prefix of every message ("qplace quantize: ..."). */
static const char *current_command;

int cli_fail(const struct qp_error *err) {
    const char *msg = err->msg[0] ? err->msg : qp_status_name(err->status);
    if (!current_command) {
        fprintf(stderr, "qplace: %s\n", msg);
    } else {
        /* Library messages often start with the step's name ("quantize: ..."): said once. */
        size_t n = strlen(current_command);
        if (strncmp(msg, current_command, n) == 0 && msg[n] == ':' && msg[n + 1] == ' ')
            msg += n + 2;
        fprintf(stderr, "qplace %s: %s\n", current_command, msg);
    }
    return qp_status_exit_code(err->status);
}

static void print_usage(FILE *f) {
    fprintf(f, "usage: qplace COMMAND [ARGS...]\n"
               "       qplace help COMMAND | --help | --version\n\n"
               "commands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nFlags may be spelled --snake_case or --kebab-case, with the value as the next\n"
               "argument or after '='. Exit status: 0 ok, 1 usage error, 2 bad input, 3 internal "
               "error.\n");
}

static void print_command_usage(FILE *f, const struct cli_command *c) {
    fprintf(f, "usage: qplace %s %s\n", c->name, c->usage);
}

static void print_command_help(FILE *f, const struct cli_command *c) {
    print_command_usage(f, c);
    fprintf(f, "\n%s.\n", c->summary);
    if (c->details) fprintf(f, "\n%s", c->details);
    fprintf(f, "\nflags:\n");
    cli_print_opts(f, c->spec.opts);
}

/* A usage error: "qplace <where>: <msg>" (where is the command, or "help"; NULL for none), the
 * usage line of command `c` (the command list without one), and where to get help; exit 1. */
static int usage_error(const char *where, const struct cli_command *c, const char *msg) {
    if (where)
        fprintf(stderr, "qplace %s: %s\n", where, msg);
    else
        fprintf(stderr, "qplace: %s\n", msg);
    if (c) {
        print_command_usage(stderr, c);
        fprintf(stderr, "Try 'qplace help %s'.\n", c->name);
    } else {
        print_usage(stderr);
    }
    return 1;
}

static void log_to_stderr(enum qp_log_level level, const char *msg, void *user) {
    int verbose = *(const int *)user;
    if (level < QP_LOG_WARN && !verbose) return;
    static const char *const prefix[] = {"debug", "info", "warning", "error"};
    fprintf(stderr, "qplace: %s: %s\n", prefix[level], msg);
}

static int run_command(const struct cli_command *c, int argc, char **argv) {
    struct qp_error err = {0};
    struct cli_args args;
    if (cli_parse(&c->spec, argc, argv, &args, &err) != QP_OK) {
        if (err.status != QP_ERR_USAGE) return cli_fail(&err);
        return usage_error(c->name, c, err.msg);
    }
    int rc;
    current_command = c->name;
    if (args.help) {
        print_command_help(stdout, c);
        rc = 0;
    } else {
        rc = c->run(&args);
    }
    cli_args_free(&args);
    return rc;
}

/* `qplace help [COMMAND]`, `qplace --help [COMMAND]`: argv[0] is "help", "--help" or "-h". */
static int show_help(int argc, char **argv) {
    if (argc < 2) {
        print_usage(stdout);
        return 0;
    }
    const struct cli_command *c = find_command(argv[1]);
    if (!c) {
        char msg[256];
        unknown_command(msg, sizeof msg, argv[1]);
        return usage_error("help", NULL, msg);
    }
    if (argc > 2) return usage_error("help", NULL, "help takes one command name");
    print_command_help(stdout, c);
    return 0;
}

int main(int argc, char **argv) {
    cli_choose_omp_wait(argv);
    static int verbose;
    const char *env = getenv("QPLACE_VERBOSE");
    verbose = env && env[0] && strcmp(env, "0") != 0;
    qp_log_set_hook(log_to_stderr, &verbose);

    if (argc < 2) return usage_error(NULL, NULL, "missing command");
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0)
        return show_help(argc - 1, argv + 1);
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
        printf("qplace %s\n", QPLACE_VERSION);
        return 0;
    }
    const struct cli_command *c = find_command(cmd);
    if (!c) {
        char msg[256];
        unknown_command(msg, sizeof msg, cmd);
        return usage_error(NULL, NULL, msg);
    }
    return run_command(c, argc - 2, argv + 2);
}
