/*
 * .npy / .npz calibration data (ModelOpt's CalibrationDataProvider, reference §1.3):
 *
 *     struct qp_npz_provider_input in[1] = {{.name = "x", .dtype = QP_DTYPE_FLOAT, .rank = 4,
 *                                            .model_dims = {-1, 3, 224, 224},
 *                                            .batch_dims = {8, 3, 224, 224}}};
 *     qp_provider_npz_create("calib.npz", in, 1, 0, &p, &err);
 *
 * `path` is a .npy file (only for a single-input model), a .npz file whose keys are exactly
 * the model's input names, or a folder of .npz / .npy shards, read in name order and
 * concatenated along axis 0 (every shard must hold the same keys, dtypes and trailing dims).
 * The data are streamed: creating the provider reads every shard's .npy headers (checks, row
 * counts; pickles are never read: object arrays are refused by the readers) and sums their
 * declared data sizes against `max_bytes` (0: QP_CALIB_DEFAULT_MAX_BYTES, 16 GiB); each batch's
 * rows are then read from the shards in order when the batch is asked for (.npz members with
 * zip_fread, sequentially; a reset reopens them), into one buffer per input. Memory is one
 * batch, except for a Fortran-ordered array (rows not contiguous), whose shard is read whole.
 * A shard that changed since the provider was made is an error naming it.
 *
 * Batching as ModelOpt: n_steps = N / batch_dims[0] of the first input (N: its rows), and every
 * input is cut into n_steps chunks along axis 0 like np.array_split (the first N % n_steps
 * chunks get one row more).
 *
 * Refused with a message naming the file and input: keys that are missing, extra or repeated;
 * a dtype other than the model's; a rank other than the model's; a trailing dim that differs
 * from a static model dim; inputs with different row counts; fewer rows than one batch; data
 * over the byte cap. NaN/Inf are kept (calibration counts them).
 */
#ifndef QP_CALIB_PROVIDER_NPZ_H
#define QP_CALIB_PROVIDER_NPZ_H

#include <stdint.h>

#include "calib/provider.h"

#define QP_CALIB_DEFAULT_MAX_BYTES ((uint64_t)16 << 30)

struct qp_npz_provider_input {
    const char *name;
    enum qp_dtype dtype; /* the model's element type */
    int rank;
    int64_t model_dims[QP_MAX_RANK];     /* negative: dynamic */
    int64_t batch_dims[QP_MAX_RANK];     /* from qp_calib_shape_resolve */
    int shape_given;                     /* --calibration_shapes names this input */
    const char *dim_params[QP_MAX_RANK]; /* a dynamic dim's symbolic name (borrowed), or NULL */
};

struct qp_graph;

/* The inputs of `g` a caller feeds (graph inputs that are not initializers), in order, into
 * `in` (at most `cap` entries), with batch shapes from qp_calib_shape_resolve. An input of
 * unknown rank takes the rank of its `shapes` entry (else QP_ERR_BAD_INPUT asking for
 * --calibration_shapes); a non-tensor or untyped input, or more than `cap` inputs, is
 * QP_ERR_UNSUPPORTED; a `shapes` entry (may be NULL) that names no input is QP_ERR_BAD_INPUT.
 * Names are borrowed from the graph. `who` ("calibrate", ...) starts every message. */
enum qp_status qp_provider_graph_inputs(const struct qp_graph *g,
                                        const struct qp_calib_shapes *shapes, const char *who,
                                        struct qp_npz_provider_input *in, size_t cap, size_t *n_out,
                                        struct qp_error *err);

/* `inputs` (n entries, borrowed for the call) describe the model's inputs in order. The
 * provider's input order is that order. Source "npy" for a single .npy file, else "npz".
 * QP_ERR_IO, QP_ERR_BAD_INPUT, QP_ERR_UNSUPPORTED (as the npy/npz readers), QP_ERR_NOMEM. */
enum qp_status qp_provider_npz_create(const char *path, const struct qp_npz_provider_input *inputs,
                                      size_t n, uint64_t max_bytes, struct qp_provider **out,
                                      struct qp_error *err);

#endif
