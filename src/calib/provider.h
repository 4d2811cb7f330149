/*
 * Calibration data providers: one interface for every source of calibration batches (npy/npz
 * files and shard folders, image folders, synthetic data), used by quantize, sensitivity and
 * autotune alike. Commands open them through calib/data.h (qp_provider_open), which decides
 * what a path means.
 *
 *     struct qp_provider *p = NULL;
 *     if (qp_provider_images_create("calib/", "input", &opts, &p, &err) != QP_OK) goto fail;
 *     const struct qp_array *batch;
 *     int end = 0;
 *     while (qp_provider_next(p, &batch, &end, &err) == QP_OK && !end) {
 *         // batch[i] is the input named qp_provider_input_name(p, i)
 *     }
 *     qp_provider_reset(p, &err);   // rewind for another pass
 *     qp_provider_free(p);
 *
 * A provider owns the arrays it returns; they stay valid until the next call on it. Every
 * provider reports its source label ("npy", "npz", "images", "synthetic"); a synthetic provider
 * also says so through qp_provider_is_synthetic, and whoever writes an output fed by it must
 * mark that output `calibration_source: synthetic` and warn.
 *
 * Batch shapes come from --calibration_shapes ("name:1x3x224x224,other:1x128", parsed by
 * qp_calib_shapes_parse), or from the model's input shape with dynamic dims set to 1
 * (qp_calib_shape_resolve).
 */
#ifndef QP_CALIB_PROVIDER_H
#define QP_CALIB_PROVIDER_H

#include <stddef.h>
#include <stdint.h>

#include "qplace/array.h"
#include "qplace/calib.h"
#include "qplace/session.h"
#include "qplace/status.h"

/* What each kind of provider implements. */
struct qp_provider_ops {
    /* Fills p->batch (p->n_inputs arrays) with the next batch, or sets *end_out = 1. */
    enum qp_status (*next)(struct qp_provider *p, int *end_out, struct qp_error *err);
    enum qp_status (*reset)(struct qp_provider *p, struct qp_error *err);
    void (*destroy)(struct qp_provider *p); /* frees impl only */
};

struct qp_provider {
    const struct qp_provider_ops *ops;
    const char *source; /* static string: "npy", "npz", "images", "synthetic" */
    int synthetic;
    size_t n_inputs;
    char **names;           /* n_inputs owned strings */
    struct qp_array *batch; /* n_inputs arrays, owned, valid until the next call */
    uint64_t n_samples;     /* samples (rows along axis 0) over one full pass */
    uint64_t n_batches;     /* batches in one full pass */
    void *impl;
};

/* qp_provider_next, _reset, _n_inputs, _input_name, _n_samples, _n_batches, _source,
 * _is_synthetic and _free: qplace/calib.h. */

/* shapes[i] = the name and dims of batch[i] (a batch of p, n_inputs arrays), as
 * qp_session_create takes them; the names are borrowed from p. */
void qp_provider_shapes(const struct qp_provider *p, const struct qp_array *batch,
                        struct qp_shape *shapes);
/* map[i] = the index of the provider input that session input i reads (by name). Errors are
 * QP_ERR_BAD_INPUT prefixed with `what` ("calibrate", ...): the model and the data have
 * different input counts, or a model input has no data. */
enum qp_status qp_provider_map_inputs(const struct qp_provider *p, const struct qp_session *s,
                                      const char *what, size_t *map, struct qp_error *err);

/* For provider implementations: a zeroed provider with `n_inputs` copies of `names`
 * (borrowed) and empty batch arrays. QP_ERR_NOMEM. */
enum qp_status qp_provider_alloc(const struct qp_provider_ops *ops, const char *source,
                                 const char *const *names, size_t n_inputs,
                                 struct qp_provider **out, struct qp_error *err);

/* A provider handing out the first batches of `inner` (borrowed; it must outlive the head and
 * is reset with it) until at least `max_samples` rows along axis 0 were handed out in a pass:
 * whole batches, so the last may take it past the count. The arrays are borrowed from `inner`
 * until the next call. n_samples is min(inner's, max_samples), an estimate when the last batch
 * overshoots; n_batches 0. QP_ERR_USAGE (NULL inner, max_samples 0), QP_ERR_NOMEM. */
enum qp_status qp_provider_head_create(struct qp_provider *inner, uint64_t max_samples,
                                       struct qp_provider **out, struct qp_error *err);

/* ---- --calibration_shapes ---------------------------------------------------------- */

struct qp_calib_shape {
    char *name;
    int rank;
    int64_t dims[QP_MAX_RANK];
};

struct qp_calib_shapes {
    size_t n;
    struct qp_calib_shape *items;
};

/* Parses "name:1x3x224x224,other:1x128". The name is everything before the LAST ':' of an
 * entry (so TensorFlow-style names such as "input:0" work: "input:0:1x3x8x8"). Dims are
 * positive decimal integers joined by 'x'; at most QP_MAX_RANK of them. QP_ERR_USAGE with a
 * message quoting the bad entry for: an empty entry or name, a missing ':', an empty, zero,
 * negative, non-numeric or overflowing dim, too many dims, a repeated name. `out` is written
 * only on success; release it with qp_calib_shapes_release. */
enum qp_status qp_calib_shapes_parse(const char *s, struct qp_calib_shapes *out,
                                     struct qp_error *err);
void qp_calib_shapes_release(struct qp_calib_shapes *s);
/* The entry for `name`, or NULL. */
const struct qp_calib_shape *qp_calib_shapes_find(const struct qp_calib_shapes *s,
                                                  const char *name);

/* The batch shape of model input `name` with model dims `model_dims` (rank entries, a negative
 * value is a dynamic dim): the --calibration_shapes entry when there is one (its rank must
 * match and its dims must equal every static model dim), else the model shape with dynamic
 * dims set to 1. `shapes` may be NULL. QP_ERR_BAD_INPUT naming the input otherwise. */
enum qp_status qp_calib_shape_resolve(const char *name, int rank, const int64_t *model_dims,
                                      const struct qp_calib_shapes *shapes, int64_t *dims_out,
                                      struct qp_error *err);

/* ---- synthetic data ---------------------------------------------------------------- */

/* One input of a synthetic provider: concrete dims (see qp_calib_shape_resolve). */
struct qp_synthetic_input {
    const char *name;
    enum qp_dtype dtype; /* float, float16, double, int32, int64, bool */
    int rank;
    int64_t dims[QP_MAX_RANK];
};

/* A seeded synthetic provider giving `n_batches` batches (ModelOpt gives 1). Values, from a
 * PCG32 stream seeded with `seed` (the same seed gives the same data on every platform):
 * floats uniform in [0, 1) (24-bit resolution), as ModelOpt's RandomDataProvider; integers
 * uniform in [0, 50000) when the name contains "ids", in {0, 1} when it contains "mask", else
 * in [0, 100); bools 0/1. Source "synthetic", qp_provider_is_synthetic() == 1. `inputs` is
 * copied. QP_ERR_USAGE for an unsupported dtype or bad dims, QP_ERR_NOMEM. */
enum qp_status qp_provider_synthetic_create(const struct qp_synthetic_input *inputs, size_t n,
                                            uint64_t seed, uint64_t n_batches,
                                            struct qp_provider **out, struct qp_error *err);

#endif
