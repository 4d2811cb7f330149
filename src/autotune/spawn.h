/*
 * Child processes for the latency backends that run another program (trtexec, node): start it
 * with posix_spawnp, collect what it prints (stdout and stderr, interleaved, through one pipe),
 * wait for it.
 *
 *     char *const argv[] = {"trtexec", "--onnx=m.onnx", NULL};
 *     struct qp_spawn_output o;
 *     if (qp_spawn_capture(argv, &o, &err) != QP_OK) ...   // could not start it
 *     if (o.exit_code != 0) ... qp_spawn_tail(&o, 8) ...    // the last 8 lines, for the message
 *     qp_spawn_output_release(&o);
 */
#ifndef QP_AUTOTUNE_SPAWN_H
#define QP_AUTOTUNE_SPAWN_H

#include <stddef.h>

#include "qplace/status.h"

/* Output kept of a child: at most this many bytes (the rest is read and dropped). */
#define QP_SPAWN_MAX_OUTPUT ((size_t)64 << 20)

struct qp_spawn_output {
    char *text; /* NUL-terminated; owned */
    size_t len;
    int exit_code; /* the child's exit status, or 128 + signal when a signal ended it */
};

/* Runs argv[0] (searched on PATH when it has no '/') with argv (NULL-terminated, borrowed for
 * the call) and the caller's environment; stdin is /dev/null. On success *out holds its output
 * and exit status, whatever that status is. Returns QP_ERR_IO (the program cannot be started:
 * the message names it and why; a pipe or wait failure), QP_ERR_NOMEM. */
enum qp_status qp_spawn_capture(char *const argv[], struct qp_spawn_output *out,
                                struct qp_error *err);

void qp_spawn_output_release(struct qp_spawn_output *o);

/* The start of the last n_lines lines of o->text (a pointer into it; a final newline does not
 * start an empty line), at most the last 600 bytes so it fits in an error message. */
const char *qp_spawn_tail(const struct qp_spawn_output *o, int n_lines);

#endif
