/*
 * qplace/status.h — result codes and the error record every fallible call fills.
 *
 * Every fallible qplace function returns an `enum qp_status`. On failure it also writes a
 * human-readable message, saying where and what, into a caller-owned `struct qp_error`:
 *
 *     struct qp_error err = {0};
 *     struct qp_model *m = NULL;
 *     if (qp_model_load_file("model.onnx", NULL, &m, &err) != QP_OK) {
 *         fprintf(stderr, "qplace: %s\n", err.msg);
 *         return qp_status_exit_code(err.status);
 *     }
 *
 * The error buffer is fixed-size, so error paths never allocate. Passing NULL for the error is
 * allowed; the status is still returned.
 */
#ifndef QPLACE_STATUS_H
#define QPLACE_STATUS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum qp_status {
    QP_OK = 0,
    QP_ERR_USAGE,       /* bad arguments from the caller (a flag, an API misuse) */
    QP_ERR_BAD_INPUT,   /* malformed or inconsistent model, data or file content */
    QP_ERR_UNSUPPORTED, /* well-formed input that qplace does not handle (an op, a dtype) */
    QP_ERR_IO,          /* a file that cannot be opened, read or written */
    QP_ERR_NOMEM,       /* an allocation failed or a size would overflow */
    QP_ERR_INTERNAL,    /* a bug in qplace */
    QP_STATUS_COUNT
};

#define QP_ERROR_MSG_SIZE 1024

struct qp_error {
    enum qp_status status;
    char msg[QP_ERROR_MSG_SIZE];
};

/* Short constant name of a status ("bad input", ...). Never NULL. */
const char *qp_status_name(enum qp_status status);

/* Process exit code for a status, as DESIGN.md's CLI contract says: 0 success, 1 usage error,
 * 2 bad input (malformed, unsupported, unreadable input or data), 3 internal failure. */
int qp_status_exit_code(enum qp_status status);

/* Records `status` and a printf-style message in `err` (may be NULL) and returns `status`.
 * An existing message is replaced. */
enum qp_status qp_error_set(struct qp_error *err, enum qp_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Prepends "prefix: " to the message already in `err` (context as an error travels up) and
 * returns err->status (QP_ERR_INTERNAL when err is NULL). */
enum qp_status qp_error_prefix(struct qp_error *err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Logging: the library never prints; it calls this hook (default: none). */
enum qp_log_level { QP_LOG_DEBUG, QP_LOG_INFO, QP_LOG_WARN, QP_LOG_ERROR };
typedef void (*qp_log_fn)(enum qp_log_level level, const char *msg, void *user);
/* Installs the process-wide log hook (NULL silences). `user` is borrowed for as long as set. */
void qp_log_set_hook(qp_log_fn fn, void *user);
void qp_log(enum qp_log_level level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#ifdef __cplusplus
}
#endif
#endif
