/*
 * Small-file helpers every module that reads or writes a side file uses (placements, rules,
 * ranges, node lists, sensitivity reports), so each gets the same checks and atomicity.
 */
#ifndef QP_CORE_FILE_H
#define QP_CORE_FILE_H

#include <stddef.h>

#include "qplace/status.h"

/* Reads the regular file `path` (a FIFO, device or directory is refused without blocking) of
 * at most `max_bytes` bytes into a malloc'd buffer with a NUL after the last byte. Returns
 * QP_ERR_IO (cannot open/read, not a regular file) or QP_ERR_BAD_INPUT (over the limit); the
 * message starts with the path. */
enum qp_status qp_file_read_text(const char *path, size_t max_bytes, char **text_out,
                                 size_t *len_out, struct qp_error *err);

/* QP_ERR_BAD_INPUT "<what> 'path' is a directory; give a file path" when `path` names an
 * existing directory (an output path given as a folder), else QP_OK. Callers check their output
 * paths with it before any work, so the mistake costs nothing. */
enum qp_status qp_file_check_output(const char *path, const char *what, struct qp_error *err);

/* One piece of a file written by qp_file_write_atomic_parts (borrowed for the call). */
struct qp_file_part {
    const void *data;
    size_t size;
};

/* Writes the parts, in order, to `path` atomically: a temporary file beside it (created with
 * O_EXCL and mode 0666, so the umask applies as to any output), fsync, rename. On failure nothing
 * is left behind and an existing `path` is untouched. Returns QP_ERR_USAGE (empty path),
 * QP_ERR_IO or QP_ERR_NOMEM; the message starts with the path. */
enum qp_status qp_file_write_atomic_parts(const char *path, const struct qp_file_part *parts,
                                          size_t n_parts, struct qp_error *err);
/* The same for one buffer of `len` bytes. */
enum qp_status qp_file_write_atomic(const char *path, const void *data, size_t len,
                                    struct qp_error *err);

#endif
