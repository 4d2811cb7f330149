/*
 * qplace/calib.h — calibration data, calibration, and calibrated ranges.
 *
 * Calibration runs a float model on representative inputs and records, for every activation
 * tensor a placement quantizes, the range its scale comes from (INT8 scale = amax / 127). Data
 * comes from a *provider*, one interface over every source:
 *   - a .npz / .npy file or a folder of shards, an image folder, or seeded synthetic data
 *     (qp_provider_open_model decides what a path is, as `qplace calibrate` does);
 *   - batches handed from the caller's memory by a callback (qp_provider_callback_create): never
 *     written to disk, read again for every pass.
 *
 *     struct qp_error err = {0};
 *     struct qp_provider *data = NULL;
 *     if (qp_provider_open_model(model, "calib.npz", NULL, NULL, &data, &err) != QP_OK) goto fail;
 *     struct qp_calibrate_options o;
 *     qp_calibrate_options_default(&o);
 *     o.method = QP_CALIB_ENTROPY;
 *     o.placement = placement;                 // only its activation tensors (NULL: all)
 *     struct qp_ranges *ranges = NULL;
 *     if (qp_calibrate(model, data, &o, &ranges, NULL, &err) != QP_OK) goto fail;
 *     const struct qp_range *r = qp_ranges_find(ranges, "conv1_out");   // NULL when absent
 *     qp_ranges_save_json(ranges, NULL, "ranges.json", &err);           // docs/calibration.md
 *     qp_ranges_save_trt_cache(ranges, NULL, QP_TRT_CACHE_DEFAULT_VERSION, "cal.cache", &err);
 *     qp_ranges_free(ranges);
 *     qp_provider_free(data);
 *
 * Methods (docs/calibration.md): max ([min, max] over all batches), entropy (ONNX Runtime's KL
 * threshold on the histogram; ModelOpt's default), percentile (of |x|, default 99.999).
 *
 * Ownership: a provider owns the arrays it hands out (valid until its next call); a ranges table
 * owns its strings. Everything passed in is borrowed for the call unless a function says it
 * keeps it. Neither a provider nor a ranges table is safe to use from two threads at once.
 */
#ifndef QPLACE_CALIB_H
#define QPLACE_CALIB_H

#include <stddef.h>
#include <stdint.h>

#include "qplace/array.h"
#include "qplace/model.h"
#include "qplace/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct qp_placement;

/* ---- methods -------------------------------------------------------------------------------- */

enum qp_calib_method {
    QP_CALIB_MAX,
    QP_CALIB_ENTROPY,
    QP_CALIB_PERCENTILE,
    QP_CALIB_MSE, /* the range whose quantization error (MSE over the |x| histogram) is least */
    /* per tensor, the one of the methods above whose range gives the least squared error at the
     * output of the tensor's consumers on the first calibration samples (docs/calibration.md) */
    QP_CALIB_AUTO,
    QP_CALIB_METHOD_COUNT
};

/* "max", "entropy", "percentile", "mse", "auto". Never NULL ("unknown" out of range). */
const char *qp_calib_method_name(enum qp_calib_method m);
/* Parses a method name. QP_ERR_USAGE naming the accepted values. */
enum qp_status qp_calib_method_parse(const char *s, enum qp_calib_method *out,
                                     struct qp_error *err);

#define QP_CALIB_DEFAULT_PERCENTILE 99.999

/* ---- providers ------------------------------------------------------------------------------ */

struct qp_provider;

/* How paths are read (image folders, caps) and synthetic data is made. */
struct qp_data_options {
    uint64_t max_bytes;         /* .npz/.npy data cap; 0: 16 GiB */
    float image_mean[3];        /* image folders: after scaling to 0..1; default 0 */
    float image_std[3];         /* default 1; no zero entry */
    int image_bgr;              /* channel order B, G, R */
    uint64_t seed;              /* synthetic data */
    uint64_t synthetic_batches; /* synthetic batches; default 1 */
};

void qp_data_options_default(struct qp_data_options *o);

/* Opens calibration data for the inputs of `model` (borrowed for the call), as `qplace
 * calibrate --calibration_data_path PATH --calibration_shapes SHAPES` does:
 *   - path NULL: seeded synthetic data (source "synthetic"; whoever writes an output fed by it
 *     should say so: qp_provider_is_synthetic);
 *   - a folder holding PNG/JPEG images and no .npz/.npy: an image folder, for a model with one
 *     float input of rank 4 with a 3-channel axis;
 *   - else a .npy / .npz file (arrays named as the model's inputs) or a folder of such shards.
 * `calibration_shapes` ("name:1x3x224x224,other:1x128", may be NULL) fixes dynamic dims; `o` may
 * be NULL (defaults). On success *out owns a new provider. QP_ERR_USAGE (a bad shapes string or
 * image options), QP_ERR_IO (no such path), QP_ERR_BAD_INPUT (data the model cannot take, named
 * by path and input), QP_ERR_UNSUPPORTED, QP_ERR_NOMEM. */
enum qp_status qp_provider_open_model(const struct qp_model *model, const char *path,
                                      const char *calibration_shapes,
                                      const struct qp_data_options *o, struct qp_provider **out,
                                      struct qp_error *err);

/* Fills `inputs` (n_inputs zeroed arrays, in the order of the names given at creation) with
 * batch `index` (0 <= index < n_batches), with qp_array_view (the caller keeps the data alive
 * until the next call of the callback or qp_provider_free) or qp_array_alloc (the provider frees
 * it). The same index must give the same data every time: calibration and sensitivity read the
 * batches more than once. Return QP_OK, or an error status with a message in `err` (the provider
 * passes it on, prefixed with the batch index). */
typedef enum qp_status (*qp_batch_fn)(void *user, uint64_t index, struct qp_array *inputs,
                                      struct qp_error *err);

/* A provider of `n_batches` (>= 1) batches of the inputs `names` (n_inputs >= 1, copied) that
 * `fn` hands from the caller's memory; `user` is passed to every call. The callback is called
 * from one thread at a time, but not always from the caller's thread (calibration reads one
 * batch ahead on a thread of its own). Every batch must hold, for each input, an array of the
 * same dtype and rank as the first batch's: QP_ERR_BAD_INPUT otherwise, naming the batch and
 * input. Source "memory". QP_ERR_USAGE (no names, an empty or repeated name, n_batches 0, no
 * fn), QP_ERR_NOMEM. */
enum qp_status qp_provider_callback_create(const char *const *names, size_t n_inputs,
                                           uint64_t n_batches, qp_batch_fn fn, void *user,
                                           struct qp_provider **out, struct qp_error *err);

/* The next batch: *arrays_out points at qp_provider_n_inputs(p) arrays, in qp_provider_input_name
 * order, owned by the provider and valid until its next call; at the end of the data
 * *end_out = 1 and *arrays_out = NULL. Errors come from the source (a file that fails to decode,
 * the callback's status). */
enum qp_status qp_provider_next(struct qp_provider *p, const struct qp_array **arrays_out,
                                int *end_out, struct qp_error *err);
/* Rewinds to the first batch; the same batches come again in the same order. */
enum qp_status qp_provider_reset(struct qp_provider *p, struct qp_error *err);
size_t qp_provider_n_inputs(const struct qp_provider *p);
/* Borrowed from p. */
const char *qp_provider_input_name(const struct qp_provider *p, size_t i);
/* Samples (rows along axis 0) over one full pass; 0 while not known (a callback provider
 * before its first full pass). */
uint64_t qp_provider_n_samples(const struct qp_provider *p);
/* Batches in one full pass. */
uint64_t qp_provider_n_batches(const struct qp_provider *p);
/* "npy", "npz", "images", "synthetic" or "memory" (static). */
const char *qp_provider_source(const struct qp_provider *p);
int qp_provider_is_synthetic(const struct qp_provider *p);
/* NULL-safe. */
void qp_provider_free(struct qp_provider *p);

/* ---- ranges --------------------------------------------------------------------------------- */

/* One calibrated activation tensor. */
struct qp_range {
    const char *tensor; /* owned by the table (set by qp_ranges_set) */
    float lo, hi;       /* observed (or calibrated) finite range */
    float amax;         /* the calibrated absolute threshold the scale comes from */
    uint64_t n_nan, n_inf;
    uint64_t n_values; /* finite values seen */
};

/* Facts about how the ranges were made, written into the JSON file. */
struct qp_ranges_meta {
    const char *model_path;
    const char *method;             /* "max", "entropy", "percentile", "mse", "auto" */
    double percentile;              /* for "percentile"; 0 when unknown (a TensorRT cache) */
    const char *calibration_source; /* "npz", "npy", "images", "synthetic", "memory", "trt_cache" */
    uint64_t num_samples;
};

struct qp_ranges;

/* An empty table; NULL when out of memory. */
struct qp_ranges *qp_ranges_create(void);
/* NULL-safe. */
void qp_ranges_free(struct qp_ranges *r);
size_t qp_ranges_count(const struct qp_ranges *r);
/* Entry i (0 <= i < count), in insertion order; borrowed until the table changes. */
const struct qp_range *qp_ranges_at(const struct qp_ranges *r, size_t i);
/* The entry for `tensor`, or NULL. */
const struct qp_range *qp_ranges_find(const struct qp_ranges *r, const char *tensor);
/* Inserts or replaces the entry for range->tensor (the name is copied). Non-finite lo/hi/amax
 * or amax < 0 is QP_ERR_BAD_INPUT; QP_ERR_NOMEM. */
enum qp_status qp_ranges_set(struct qp_ranges *r, const struct qp_range *range,
                             struct qp_error *err);
/* The meta of a table (strings owned by the table; all zero/NULL for a new table until
 * qp_ranges_set_meta). Never NULL for a non-NULL r. */
const struct qp_ranges_meta *qp_ranges_get_meta(const struct qp_ranges *r);
/* Copies `meta` (and its strings) into the table. QP_ERR_NOMEM. */
enum qp_status qp_ranges_set_meta(struct qp_ranges *r, const struct qp_ranges_meta *meta,
                                  struct qp_error *err);

/* The JSON file (docs/calibration.md, "Ranges file"): one tensor per line in insertion order,
 * floats with 9 significant digits (reading gives back the same float32 bits). `meta` may be
 * NULL (the table's own). *text_out is malloc'd (caller frees). QP_ERR_NOMEM, QP_ERR_BAD_INPUT
 * (an amax the scale formula refuses). */
enum qp_status qp_ranges_write_json(const struct qp_ranges *r, const struct qp_ranges_meta *meta,
                                    char **text_out, struct qp_error *err);
/* Same, written atomically to `path` (temporary file beside it, then rename). QP_ERR_IO. */
enum qp_status qp_ranges_save_json(const struct qp_ranges *r, const struct qp_ranges_meta *meta,
                                   const char *path, struct qp_error *err);
/* Parses `len` bytes of `text`, strictly (format, version, no unknown keys, finite lo <= hi,
 * amax >= 0, no repeated tensor; the file's "scale" must equal the one recomputed from amax).
 * QP_ERR_BAD_INPUT naming `source` (may be NULL) and the entry; QP_ERR_UNSUPPORTED for a newer
 * version. On success *out owns a new table whose meta holds the file's facts. */
enum qp_status qp_ranges_read_json(const char *text, size_t len, const char *source,
                                   struct qp_ranges **out, struct qp_error *err);
/* Reads the file at `path` (QP_ERR_IO; QP_ERR_BAD_INPUT over 256 MiB). */
enum qp_status qp_ranges_load_json(const char *path, struct qp_ranges **out, struct qp_error *err);

/* TensorRT calibration caches (implicit INT8): `TRT-<version>-<calibrator>` then one line
 * `<tensor>: <8 hex digits>` per entry, the big-endian float32 bits of amax / 127. `method` may
 * be NULL (the table's meta method, else entropy). QP_ERR_USAGE for a trt_version outside
 * 0..99999999, QP_ERR_BAD_INPUT for a name the line format cannot carry, QP_ERR_NOMEM,
 * QP_ERR_IO (save). */
#define QP_TRT_CACHE_DEFAULT_VERSION 8601
enum qp_status qp_ranges_write_trt_cache(const struct qp_ranges *r, const char *method,
                                         int trt_version, char **text_out, struct qp_error *err);
enum qp_status qp_ranges_save_trt_cache(const struct qp_ranges *r, const char *method,
                                        int trt_version, const char *path, struct qp_error *err);
/* Reads a cache back: amax = scale * 127 (so that amax / 127 gives exactly the cached scale),
 * lo = -amax, hi = amax; meta source "trt_cache". Strict, with `source:LINE:` messages
 * (QP_ERR_BAD_INPUT). */
enum qp_status qp_ranges_read_trt_cache(const char *text, size_t len, const char *source,
                                        struct qp_ranges **out, struct qp_error *err);
enum qp_status qp_ranges_load_trt_cache(const char *path, struct qp_ranges **out,
                                        struct qp_error *err);

/* ---- calibration ---------------------------------------------------------------------------- */

/* Called after every batch with the samples done and the total (0 when not known). */
typedef void (*qp_calibrate_progress_fn)(uint64_t samples_done, uint64_t samples_total, void *user);

struct qp_calibrate_options {
    enum qp_calib_method method; /* default entropy */
    double percentile;           /* percentile: in (0, 100]; default 99.999 */
    int n_threads;               /* engine threads; 0 (default): all cores */
    /* Only the activation tensors of this placement (borrowed; checked against the model).
     * NULL (default): every float activation tensor. */
    const struct qp_placement *placement;
    /* 1: a placement tensor the engine never computes as a float tensor (an integer tensor, one
     * folded at plan time) gets no range instead of failing. Default 0. */
    int placement_float_only;
    /* 1 (default): Concat inputs and output share one range, as TensorRT needs. */
    int group_concat;
    qp_calibrate_progress_fn progress; /* may be NULL */
    void *progress_user;
};

void qp_calibrate_options_default(struct qp_calibrate_options *o);

/* What a calibration saw. */
struct qp_calibrate_report {
    uint64_t n_batches, n_samples; /* samples: rows along axis 0 of the first input */
    size_t n_tensors;              /* ranges produced */
    size_t n_nonfinite_tensors;    /* tensors in which NaN or Inf were seen (left out) */
    uint64_t n_nan, n_inf;
    size_t peak_stats_bytes; /* largest memory the statistics held (bounded by the histograms) */
};

/* Calibrates `model` on every batch of `data` (both borrowed; the provider is reset first, its
 * inputs matched to the model's by name). On success *out owns the ranges, whose meta holds the
 * method, percentile, data source and sample count (set model_path with qp_ranges_set_meta if
 * the file should name it); `report` may be NULL. Returns QP_ERR_USAGE (bad options),
 * QP_ERR_BAD_INPUT (a placement naming what the model lacks, data the model cannot take, a
 * tensor with no finite value), QP_ERR_UNSUPPORTED (more than 64 inputs, an op the engine lacks),
 * QP_ERR_NOMEM, the provider's errors and the engine's statuses. */
enum qp_status qp_calibrate(const struct qp_model *model, struct qp_provider *data,
                            const struct qp_calibrate_options *o, struct qp_ranges **out,
                            struct qp_calibrate_report *report, struct qp_error *err);

#ifdef __cplusplus
}
#endif
#endif
