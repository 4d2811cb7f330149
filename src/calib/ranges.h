/*
 * Calibrated ranges: what calibration produces and what the Q/DQ writer, sensitivity analysis
 * and `qplace calibrate` consume. One entry per activation tensor name.
 *
 *     struct qp_ranges *r = qp_ranges_create();
 *     qp_ranges_set(r, &(struct qp_range){.tensor = "conv1_out", .lo = -1.5f, .hi = 6.0f,
 *                                          .amax = 6.0f},
 *                   &err);
 *     const struct qp_range *x = qp_ranges_find(r, "conv1_out");   // NULL when absent
 *     qp_ranges_save_json(r, &meta, "ranges.json", &err);   // docs/calibration.md
 *     qp_ranges_save_trt_cache(r, "entropy", QP_TRT_CACHE_DEFAULT_VERSION, "cal.cache", &err);
 *     qp_ranges_free(r);
 *
 * Weight ranges are not stored here: the writer computes per-channel ranges from the weights
 * themselves (they are constants).
 */
#ifndef QP_CALIB_RANGES_H
#define QP_CALIB_RANGES_H

#include <stddef.h>
#include <stdint.h>

#include "qplace/status.h"

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
    const char *method;             /* "max", "entropy", "percentile" */
    double percentile;              /* for "percentile"; 0 when unknown (a TensorRT cache) */
    const char *calibration_source; /* "npz", "npy", "images", "synthetic", "trt_cache" */
    uint64_t num_samples;
};

struct qp_ranges;

/* NULL when out of memory. */
struct qp_ranges *qp_ranges_create(void);
/* NULL-safe. */
void qp_ranges_free(struct qp_ranges *r);
size_t qp_ranges_count(const struct qp_ranges *r);
/* Entry i (0 <= i < count), in insertion order. */
const struct qp_range *qp_ranges_at(const struct qp_ranges *r, size_t i);
/* The entry for `tensor`, or NULL. */
const struct qp_range *qp_ranges_find(const struct qp_ranges *r, const char *tensor);
/* Inserts or replaces the entry for range->tensor (the name is copied). Non-finite lo/hi/amax
 * or amax < 0 is QP_ERR_BAD_INPUT. */
enum qp_status qp_ranges_set(struct qp_ranges *r, const struct qp_range *range,
                             struct qp_error *err);

/* ---- the facts the table carries ------------------------------------------------------- */

/* The meta of a table read from a file (strings owned by the table; all fields zero/NULL for a
 * table made with qp_ranges_create until qp_ranges_set_meta). Never NULL for a non-NULL r. */
const struct qp_ranges_meta *qp_ranges_get_meta(const struct qp_ranges *r);
/* Copies `meta` (and its strings) into the table. QP_ERR_NOMEM. */
enum qp_status qp_ranges_set_meta(struct qp_ranges *r, const struct qp_ranges_meta *meta,
                                  struct qp_error *err);

/* ---- JSON (docs/calibration.md, "Ranges file") ----------------------------------------- */

#define QP_RANGES_FORMAT  "qplace.ranges"
#define QP_RANGES_VERSION 1
/* Files larger than this are refused before they are read (JSON and TRT caches alike). */
#define QP_RANGES_MAX_FILE_BYTES ((size_t)256 << 20)

/* Writes the table as JSON, one tensor per line, in insertion order. `meta` may be NULL (the
 * table's own meta is written then). Per tensor: lo, hi, amax, the INT8 scale (amax / 127 from
 * qp_qparams_from_range), n_values, n_nan, n_inf. Floats are printed with 9 significant digits,
 * so reading gives back the same float32 bits. *text_out is malloc'd (caller frees).
 * QP_ERR_NOMEM, QP_ERR_BAD_INPUT (an amax the scale formula refuses). */
enum qp_status qp_ranges_write_json(const struct qp_ranges *r, const struct qp_ranges_meta *meta,
                                    char **text_out, struct qp_error *err);
/* Same, written atomically to `path` (temporary file beside it, then rename). QP_ERR_IO. */
enum qp_status qp_ranges_save_json(const struct qp_ranges *r, const struct qp_ranges_meta *meta,
                                   const char *path, struct qp_error *err);
/* Parses `len` bytes of `text` (borrowed for the call). Strict: the format string, a version
 * not newer than QP_RANGES_VERSION (newer: QP_ERR_UNSUPPORTED), no unknown keys, numbers where
 * numbers belong, finite lo <= hi, amax >= 0, non-negative integer counts, no repeated tensor
 * names. Errors are QP_ERR_BAD_INPUT naming `source` (may be NULL) and the entry. The file's
 * "scale" is not trusted: it must equal the scale recomputed from amax. On success *out owns
 * a new table whose meta holds the file's facts. */
enum qp_status qp_ranges_read_json(const char *text, size_t len, const char *source,
                                   struct qp_ranges **out, struct qp_error *err);
/* Reads the file at `path` (QP_ERR_IO, or QP_ERR_BAD_INPUT over QP_RANGES_MAX_FILE_BYTES). */
enum qp_status qp_ranges_load_json(const char *path, struct qp_ranges **out, struct qp_error *err);

/* ---- TensorRT calibration cache (implicit INT8) ----------------------------------------- */

#define QP_TRT_CACHE_DEFAULT_VERSION 8601

/* The text of a TensorRT calibration cache: the header `TRT-<trt_version>-<calibrator>` where
 * calibrator is "MinMaxCalibration" for method "max" and "EntropyCalibration2" otherwise, then
 * one line `<tensor>: <8 lowercase hex digits>` per entry, the big-endian bits of the float32
 * INT8 scale amax / 127 (qp_qparams_from_range: amax 0 gives scale 1). `method` may be NULL
 * (the table's meta method, else entropy). *text_out is malloc'd. QP_ERR_USAGE for a
 * trt_version outside 0..99999999, QP_ERR_BAD_INPUT for an empty name or one holding a line
 * break (the line format cannot carry it), QP_ERR_NOMEM. */
enum qp_status qp_ranges_write_trt_cache(const struct qp_ranges *r, const char *method,
                                         int trt_version, char **text_out, struct qp_error *err);
enum qp_status qp_ranges_save_trt_cache(const struct qp_ranges *r, const char *method,
                                        int trt_version, const char *path, struct qp_error *err);
/* Parses a calibration cache back into ranges: amax = scale * 127 (adjusted by at most one ulp
 * so that amax / 127 gives back exactly the cached scale), lo = -amax, hi = amax, counts 0.
 * Meta: calibration_source "trt_cache", method "max" for MinMaxCalibration, "entropy" for
 * the Entropy calibrators, "legacy" for LegacyCalibration, "percentile" for
 * PercentileCalibration. Strict, with line-numbered messages (`source:LINE: ...`,
 * QP_ERR_BAD_INPUT): the header must be TRT-<digits>-<known calibrator>; each following line
 * must be `<name>: <exactly 8 hex digits>` (split at the last ": "), the name non-empty and not
 * repeated, the value a finite, non-negative float32; blank lines only at the end; "\r\n" line
 * ends are accepted. */
enum qp_status qp_ranges_read_trt_cache(const char *text, size_t len, const char *source,
                                        struct qp_ranges **out, struct qp_error *err);
enum qp_status qp_ranges_load_trt_cache(const char *path, struct qp_ranges **out,
                                        struct qp_error *err);

#endif
