/*
 * The drift of quantized models against their float model, as quantize's summary reports it
 * (qplace/quantize.h: struct qp_quantize_drift): per output, the cosine over all elements of all
 * samples, the largest |quantized - float| and, for outputs that look like class scores, the
 * fraction of rows whose argmax agree. Each batch of the data runs the float model once and
 * every quantized model once, those on the exact path (QP_INT8_EXACT: the fake-quantization
 * oracle's bits in fewer passes).
 *
 * With two or more threads, two workers take alternate batches at once (calib/batch_pool.h),
 * each with its own sessions on its own lane and half the threads: at batch 1 on 2 cores, two
 * one-thread runs side by side finish sooner than two two-thread runs in turn (small kernels
 * wait for their second thread). The sums of each batch are added to the totals in batch order,
 * so the figures do not depend on the thread count. Memory: each worker holds a session per
 * model.
 */
#ifndef QP_PIPELINE_DRIFT_H
#define QP_PIPELINE_DRIFT_H

#include <stddef.h>
#include <stdint.h>

#include "qplace/calib.h"
#include "qplace/model.h"
#include "qplace/quantize.h"

#define QP_DRIFT_MAX_MODELS 5

/* One quantized model and where its figures go: *outs receives n_outputs entries (calloc'd,
 * names strdup'd; the caller frees them). */
struct qp_drift_target {
    const struct qp_model *m;
    struct qp_quantize_drift **outs;
};

/* The drift of each of the n (<= QP_DRIFT_MAX_MODELS) targets against mf over every batch of
 * `data` (rewound first), with n_threads threads (0: all cores). *n_outputs: mf's outputs;
 * *n_samples: the rows along axis 0 of the first input, summed over batches. A quantized model
 * the engine cannot run is an error prefixed "quantize: the quantized model does not run in the
 * engine". On error the entries already allocated stay for the caller to free. */
enum qp_status qp_drift_measure(const struct qp_model *mf, const struct qp_drift_target *t,
                                size_t n, struct qp_provider *data, int n_threads,
                                size_t *n_outputs, uint64_t *n_samples, struct qp_error *err);

#endif
