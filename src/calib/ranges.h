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

#include "qplace/calib.h"
#include "qplace/status.h"

/* struct qp_range, struct qp_ranges_meta and the qp_ranges_* functions: qplace/calib.h. */

/* ---- JSON (docs/calibration.md, "Ranges file") ----------------------------------------- */

#define QP_RANGES_FORMAT  "qplace.ranges"
#define QP_RANGES_VERSION 1
/* Files larger than this are refused before they are read (JSON and TRT caches alike). */
#define QP_RANGES_MAX_FILE_BYTES ((size_t)256 << 20)

/* ---- TensorRT calibration cache (implicit INT8) ----------------------------------------- */

/* qp_ranges_write_trt_cache, _save_, _read_ and _load_trt_cache: qplace/calib.h. */

#endif
