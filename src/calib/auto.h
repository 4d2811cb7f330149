/*
 * The `auto` calibration method's choice (collect.h): for each tensor, which of the candidate
 * ranges (max, entropy, percentile, mse: the methods before QP_CALIB_AUTO) gives the least
 * squared error at the output of the nodes that consume the tensor.
 *
 * How: one engine run of the whole model per kept calibration batch (the collector keeps the
 * first QP_AUTO_SAMPLES samples' inputs) copies the tensors and the other inputs of their
 * consumers. Each consumer node is then run alone, as a one-node model (its initializers
 * borrowed, its non-float inputs such as shapes made constants from the first batch, its float
 * inputs fed from the copies): once in float (the reference), then once per candidate with the
 * tensor fake-quantized (qmath, symmetric, `qtype`: int8 or FP8 E4M3) and the other inputs
 * float. A consumer's error for a candidate is sum((y - y_ref)^2) / sum(y_ref^2) over its float
 * outputs and the batches; a tensor's error is the sum over its consumers (relative, so a
 * consumer with large outputs does not outweigh the others).
 *
 * Consumers: with a placement, the nodes of the tensor's placement edges; without one, every
 * node reading the tensor. A consumer that cannot run alone (a subgraph, an op or shape the
 * engine refuses), has no float32 output, or whose non-float inputs change between batches is
 * left out; a tensor without any consumer left, or that is not float32, is not chosen for
 * (n_consumers = 0: the collector falls back to entropy).
 *
 * Threads: the whole-model run uses n_threads; the consumer nodes then run side by side on
 * two workers when n_threads allows (calib/batch_pool.h's rule), node k always on worker
 * k % 2 with a one-thread session on that worker's lane. A node's sums grow in batch order
 * whatever the worker, so the errors do not depend on n_threads (test_auto_evaluate_workers).
 * PaddleOCR rec, 158 tensors on 8 samples, AVX2 EPYC: 2.2 s on one worker, 1.4 s on two.
 *
 * Memory: the copies of one batch's observed tensors (reused from batch to batch) and one
 * one-node session per consumer node (each planning its node's inputs and outputs): of the
 * order of two batches' activations, whatever the number of calibration samples.
 */
#ifndef QP_CALIB_AUTO_H
#define QP_CALIB_AUTO_H

#include <stddef.h>

#include "qplace/array.h"
#include "qplace/calib.h"
#include "qplace/dtype.h"
#include "qplace/model.h"
#include "qplace/status.h"

struct qp_placement;

/* Samples (rows along axis 0 of the first input) whose batches auto evaluates on: the first
 * batches of the calibration data until this many are kept. */
#define QP_AUTO_SAMPLES 8

/* Candidate methods: every method before QP_CALIB_AUTO, indexed by their enum value. */
#define QP_AUTO_N_CAND ((int)QP_CALIB_AUTO)

struct qp_auto_tensor {
    int value;                    /* in: value index in the model's top-level graph */
    double amax[QP_AUTO_N_CAND];  /* in: each candidate's symmetric threshold */
    double error[QP_AUTO_N_CAND]; /* out: summed relative squared error at the consumers */
    int n_consumers;              /* out: consumer nodes evaluated (0: no choice possible) */
};

/* Evaluates the candidates of the n tensors `t` (their `value` and `amax` set by the caller)
 * on `n_batches` batches of `n_inputs` arrays each (batches[b * n_inputs + i] feeds the model's
 * graph input i, session order; all borrowed for the call). `placement` (may be NULL, borrowed)
 * limits the consumers to its edges. Fills error and n_consumers. Tensors and consumers that
 * cannot be evaluated are not errors (see above); errors are QP_ERR_NOMEM, QP_ERR_USAGE, and a
 * failing run of the whole model (statuses of qp_session_create / _run). */
enum qp_status qp_auto_evaluate(const struct qp_model *model, const struct qp_placement *placement,
                                enum qp_dtype qtype, int n_threads, size_t n_batches,
                                size_t n_inputs, const struct qp_array *batches, size_t n,
                                struct qp_auto_tensor *t, struct qp_error *err);

#endif
