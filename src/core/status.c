#include "qplace/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const status_names[] = {
    [QP_OK] = "ok",
    [QP_ERR_USAGE] = "usage error",
    [QP_ERR_BAD_INPUT] = "bad input",
    [QP_ERR_UNSUPPORTED] = "unsupported",
    [QP_ERR_IO] = "i/o error",
    [QP_ERR_NOMEM] = "out of memory",
    [QP_ERR_INTERNAL] = "internal error",
};
_Static_assert(sizeof(status_names) / sizeof(status_names[0]) == QP_STATUS_COUNT,
               "every status needs a name");

const char *qp_status_name(enum qp_status status) {
    if ((unsigned)status >= QP_STATUS_COUNT) return "unknown status";
    return status_names[status];
}

int qp_status_exit_code(enum qp_status status) {
    switch (status) {
    case QP_OK:
        return 0;
    case QP_ERR_USAGE:
        return 1;
    case QP_ERR_BAD_INPUT:
    case QP_ERR_UNSUPPORTED:
    case QP_ERR_IO:
        return 2;
    case QP_ERR_NOMEM:
    case QP_ERR_INTERNAL:
    case QP_STATUS_COUNT:
        break;
    }
    return 3;
}

enum qp_status qp_error_set(struct qp_error *err, enum qp_status status, const char *fmt, ...) {
    if (!err) return status;
    err->status = status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return status;
}

enum qp_status qp_error_prefix(struct qp_error *err, const char *fmt, ...) {
    if (!err) return QP_ERR_INTERNAL;
    char prefix[QP_ERROR_MSG_SIZE];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    if (n < 0) return err->status;
    /* Truncation is expected for long chains; the message stays NUL-terminated. */
    char joined[2 * QP_ERROR_MSG_SIZE + 2];
    size_t np = strnlen(prefix, sizeof prefix - 1);
    size_t nm = strnlen(err->msg, sizeof err->msg - 1);
    memcpy(joined, prefix, np);
    memcpy(joined + np, ": ", 2);
    memcpy(joined + np + 2, err->msg, nm);
    joined[np + 2 + nm] = 0;
    memcpy(err->msg, joined, sizeof err->msg - 1);
    err->msg[sizeof err->msg - 1] = 0;
    return err->status;
}

static qp_log_fn log_hook;
static void *log_user;

void qp_log_set_hook(qp_log_fn fn, void *user) {
    log_hook = fn;
    log_user = user;
}

void qp_log(enum qp_log_level level, const char *fmt, ...) {
    if (!log_hook) return;
    char msg[QP_ERROR_MSG_SIZE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log_hook(level, msg, log_user);
}
