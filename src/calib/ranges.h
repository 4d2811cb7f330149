/*
 * Calibrated ranges: what calibration produces and what the Q/DQ writer, sensitivity analysis
 * and `qplace calibrate` consume. One entry per activation tensor name.
 *
 *     struct qp_ranges *r = qp_ranges_create();
 *     qp_ranges_set(r, "conv1_out", &(struct qp_range){.lo = -1.5f, .hi = 6.0f, .amax = 6.0f},
 *                   &err);
 *     const struct qp_range *x = qp_ranges_find(r, "conv1_out");   // NULL when absent
 *     qp_ranges_save_json(r, &meta, "ranges.json", &err);
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
    double percentile;              /* for "percentile" */
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

#endif
