/*
 * The one entry to calibration data for every command (calibrate, quantize, sensitivity,
 * autotune): a path (or none) and the data options in, a provider (calib/provider.h) out.
 *
 *     struct qp_data_options o;
 *     qp_data_options_default(&o);
 *     o.image.mean[0] = 0.485f; ...                 // image folders only
 *     struct qp_npz_provider_input in[QP_MAX_CALIB_INPUTS];
 *     size_t n;
 *     qp_provider_graph_inputs(g, shapes, "quantize", in, QP_MAX_CALIB_INPUTS, &n, &err);
 *     qp_provider_open(path, &o, in, n, &p, &err);  // path NULL: synthetic
 *
 * What `path` may be, decided here and nowhere else:
 *   - NULL: seeded synthetic data (o->seed, o->synthetic_batches batches; source "synthetic",
 *     the caller warns and marks its output);
 *   - a folder holding PNG/JPEG images and no .npz/.npy: an image folder (calib/image.h) for a
 *     model with one float input of rank 4 and a 3-channel axis (NCHW, else NHWC); images are
 *     resized to the input's H x W, scaled by 1/255, then normalised with o->image_mean /
 *     o->image_std in the output channel order (RGB, or BGR with o->image_bgr); batches of
 *     the input's first dim, a short last batch dropped;
 *   - anything else: a .npy / .npz file or a folder of shards (calib/provider_npz.h), up to
 *     o->max_bytes.
 * Refused with a message naming the path: an image folder for a model that cannot take
 * images; a zero --image_std entry; everything the providers refuse.
 */
#ifndef QP_CALIB_DATA_H
#define QP_CALIB_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "calib/provider.h"
#include "calib/provider_npz.h"
#include "qplace/calib.h"
#include "qplace/status.h"

/* struct qp_data_options and qp_data_options_default: qplace/calib.h. */

/* 1 when `dir` is a folder holding images (.png, .jpg, .jpeg, any case) and no .npz/.npy. */
int qp_data_is_image_folder(const char *dir);

/* Opens the calibration data at `path` (see above) for the model inputs `in` (n entries, from
 * qp_provider_graph_inputs; borrowed for the call). `o` may be NULL (defaults). `*out` is
 * written only on success. QP_ERR_IO (no such path), QP_ERR_BAD_INPUT, QP_ERR_UNSUPPORTED,
 * QP_ERR_USAGE (bad image options), QP_ERR_NOMEM. */
enum qp_status qp_provider_open(const char *path, const struct qp_data_options *o,
                                const struct qp_npz_provider_input *in, size_t n,
                                struct qp_provider **out, struct qp_error *err);

#endif
