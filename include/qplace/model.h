/*
 * qplace/model.h — loading and saving ONNX models.
 *
 * A `struct qp_model` is the in-memory form of one .onnx file: its graph in qplace's IR plus
 * everything else the file held (opset imports, metadata, model-local functions, unknown fields),
 * so that saving writes back all that was read.
 *
 *     struct qp_error err = {0};
 *     struct qp_model *m = NULL;
 *     if (qp_model_load_file("in.onnx", NULL, &m, &err) != QP_OK) { ...err.msg... }
 *     ... edit the graph ...
 *     if (qp_model_save_file(m, "out.onnx", NULL, &err) != QP_OK) { ... }
 *     qp_model_free(m);
 *
 * Loading never reads outside the model's folder: external data locations are resolved relative
 * to it, and absolute paths, `..`, symlinks pointing out, missing files and ranges past the end
 * of a file are QP_ERR_BAD_INPUT. Saving is atomic (temporary file in the target folder, then
 * rename) and refuses to overwrite the file the model was loaded from.
 */
#ifndef QPLACE_MODEL_H
#define QPLACE_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "qplace/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct qp_model;

struct qp_load_options {
    /* Refuse files larger than this many bytes (0: no limit besides memory). */
    uint64_t max_file_bytes;
    /* 1: do not read external data files (tensors keep their location only). For `info`. */
    int skip_external_data;
};

enum qp_external_mode {
    QP_EXTERNAL_AUTO = 0, /* external data only when the serialized model would exceed 2 GiB */
    QP_EXTERNAL_ALWAYS,   /* every tensor of at least `external_min_bytes` goes to the data file */
    QP_EXTERNAL_NEVER     /* everything inline; a model over 2 GiB is an error */
};

struct qp_save_options {
    enum qp_external_mode external;
    /* Data file name, relative to the output's folder; NULL: "<output file name>.data". */
    const char *external_location;
    /* Tensors smaller than this stay inline when external data is used (0: 1024). */
    size_t external_min_bytes;
};

/* Loads `path`. `opts` may be NULL (defaults). On success *model_out owns a new model (free with
 * qp_model_free). Returns QP_ERR_IO (unreadable file), QP_ERR_BAD_INPUT (malformed protobuf,
 * inconsistent graph or tensor, bad external data), QP_ERR_UNSUPPORTED (sparse initializers),
 * QP_ERR_NOMEM. */
enum qp_status qp_model_load_file(const char *path, const struct qp_load_options *opts,
                                  struct qp_model **model_out, struct qp_error *err);

/* Loads a model from memory (borrowed for the call). External data is resolved against
 * `base_dir` (NULL: external data is an error). Same statuses as qp_model_load_file. */
enum qp_status qp_model_load_buffer(const void *data, size_t size, const char *base_dir,
                                    const struct qp_load_options *opts, struct qp_model **model_out,
                                    struct qp_error *err);

/* Writes `model` to `path` atomically. `opts` may be NULL. Returns QP_ERR_USAGE when `path` is
 * the file the model was loaded from, QP_ERR_IO on write failure (nothing is left behind),
 * QP_ERR_BAD_INPUT when the model cannot be serialized (over 2 GiB with QP_EXTERNAL_NEVER). */
enum qp_status qp_model_save_file(const struct qp_model *model, const char *path,
                                  const struct qp_save_options *opts, struct qp_error *err);

/* Serializes `model` into memory: *data_out (malloc'd, caller frees) holds *size_out bytes of
 * an .onnx file with every tensor inline. QP_ERR_BAD_INPUT when that exceeds protobuf's 2 GiB
 * (save to a file with external data instead), QP_ERR_NOMEM, QP_ERR_USAGE. */
enum qp_status qp_model_save_buffer(const struct qp_model *model, void **data_out, size_t *size_out,
                                    struct qp_error *err);

/* A deep copy of `model` (serialized and loaded again, so the copy saves the same bytes):
 * *out owns a new model, which does not remember the original's file (qp_model_save_file will
 * write over it if told to). Statuses of qp_model_save_buffer and qp_model_load_buffer. */
enum qp_status qp_model_clone(const struct qp_model *model, struct qp_model **out,
                              struct qp_error *err);

/* Like qp_model_clone, but the clone's initializers borrow their bytes from `model`, which must
 * outlive the clone and keep its initializers unchanged: a copy of the graph at the cost of its
 * structure only (the integer path rewrites one per session). */
enum qp_status qp_model_clone_shared(const struct qp_model *model, struct qp_model **out,
                                     struct qp_error *err);

/* NULL-safe. */
void qp_model_free(struct qp_model *model);

#ifdef __cplusplus
}
#endif
#endif
