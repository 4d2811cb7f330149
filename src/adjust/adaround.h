/*
 * Weight rounding by layer-output error, AdaRound-style (docs/quantize.md "Weight rounding";
 * `qplace quantize --weight_rounding adaround`): each int8 weight of a Conv, Gemm or MatMul
 * takes the quantization level just below or just above w / s (s: its channel's scale, as the
 * writer computes it), whichever makes the layer's output on calibration data closer to the
 * float layer's, instead of always the nearest level. The chosen levels are written back as
 * float weights exactly on the grid (w' = s * q), so the writer's scales and quantization give
 * those levels and the graph keeps its nodes and its TensorRT fusions.
 *
 * Layers: Conv (1-D or 2-D, any group count, explicit pads or auto_pad), Gemm and MatMul with a
 * rank-2 weight, of the top-level graph, whose weight (input 1) the placement quantizes per
 * output channel or per tensor, as int8, and reads alone (a weight shared with another node is
 * left at the nearest levels and counted in n_skipped, as are layers with too few rows, below).
 *
 * The objective, per output channel with weights w (K of them, one group's input row):
 *     E(u) = sum over sampled rows n of (w . x_n - u . x_n)^2 = D'HD,  D = u - w,  H = sum x x'
 * where x_n is what the layer reads in the quantized model (its DequantizeLinear output): the
 * layer's output error from its weights, on the inputs it will see (AdaRound's layer-wise
 * reconstruction). One measuring pass per group of layers (their H in float32 under a memory
 * cap) runs the model written with nearest rounding (float32 high precision) on the calibration
 * batches in the engine's fake-quantization path and samples up to max_rows rows of each
 * layer's input (output positions for a Conv, rows for a MatMul/Gemm), spread over the batches.
 * Layers see the nearest-rounded model upstream: all are measured in one pass (AdaRound proper
 * measures layer by layer with the rounded layers before it). AdaRound's "asymmetric" variant,
 * the float input on the reference side so that the rounding also makes up for the input's
 * quantization, was built and measured first: it fitted the clipped outliers of entropy-
 * calibrated inputs, left a quarter of the weights off nearest and cost PaddleOCR rec 3 to 5
 * points of exact match (docs/quantize.md "Weight rounding" has the figures).
 *
 * The optimiser is exact coordinate descent on that quadratic, from the nearest levels: a sweep
 * flips each weight to its other level (below <-> above) when that lowers E + lambda |D|^2
 * (lambda 1% of H's mean diagonal, GPTQ's damping: directions the sample barely sees stay at
 * nearest), keeping the gradient current, until a sweep flips nothing or max_sweeps ran. A layer
 * with fewer sampled rows than 4 x K (a Conv after a global pooling sees one row per sample) is
 * left at nearest and counted in n_skipped: its choice would fit the sample, not the layer.
 * (AdaRound relaxes the choice to a continuous variable with a rounding regulariser and Adam;
 * this minimises the same objective over the same choices, deterministically.) Levels stay
 * within -127 .. 127 and a weight whose nearest level is +-127 keeps it, so the weights' absmax
 * (and any clipped scale) is unchanged by the rewrite; after it the writer's scales are computed
 * again and a layer whose scales moved is put back to nearest (counted; not expected).
 *
 * Time: after each layer the elapsed time is checked against `seconds`; layers not reached keep
 * the nearest levels (n_timed_out).
 *
 *     struct qp_writer_options wo;                      // as the final write uses them
 *     struct qp_adaround_options ao = {.writer = &wo};
 *     struct qp_adaround_stats as;
 *     if (qp_adaround(mq, placement, calib, &ao, &as, &err) != QP_OK) ...
 *     qp_qdq_write(mq, placement, &wo, NULL, &err);     // mq's weights now sit on their levels
 */
#ifndef QP_ADJUST_ADAROUND_H
#define QP_ADJUST_ADAROUND_H

#include <stddef.h>
#include <stdint.h>

#include "ir/ir.h"
#include "placement/placement.h"
#include "qplace/calib.h"
#include "qplace/status.h"
#include "quant/writer.h"

#define QP_ADAROUND_DEFAULT_SECONDS 300.0
#define QP_ADAROUND_DEFAULT_ROWS    16384
#define QP_ADAROUND_DEFAULT_SWEEPS  8
#define QP_ADAROUND_DEFAULT_MAX_MIB 512

struct qp_adaround_options {
    double seconds;    /* time budget of the whole step; 0: QP_ADAROUND_DEFAULT_SECONDS */
    uint64_t max_rows; /* sampled input rows per layer over the data; 0: the default */
    int max_sweeps;    /* coordinate-descent sweeps per channel; 0: the default */
    size_t max_mib;    /* H and M of one pass's layers; 0: the default (one layer always fits) */
    int n_threads;     /* engine and optimiser threads; 0: all cores */
    /* The writer options of the final write (borrowed for the call; required): their qtype
     * (int8 only; anything else is QP_ERR_USAGE) and weight clipping give the scales. */
    const struct qp_writer_options *writer;
};

struct qp_adaround_stats {
    size_t n_layers;    /* layers whose levels were chosen */
    size_t n_skipped;   /* eligible layers left at nearest: a shared weight, scales that moved */
    size_t n_timed_out; /* layers the time budget did not reach (nearest) */
    uint64_t n_weights; /* weights of the chosen layers */
    uint64_t n_flipped; /* of them, at the level that is not the nearest */
    int n_passes;       /* measuring passes over the data */
    uint64_t n_batches; /* batches per pass */
    uint64_t n_rows;    /* rows sampled per layer (the largest over the layers) */
    /* Over the chosen layers, the mean of sum_channels E / sum_channels sum (w . xf)^2: the
     * output error relative to the output's energy, at nearest and after. */
    double error_before, error_after;
    double seconds; /* wall time */
};

/* Chooses the levels of the weights `pl` (borrowed; names resolved against mq) places in `mq`
 * (edited in place: the chosen layers' weights are replaced by their on-grid values; sorted on
 * return), measuring on every batch of `data` (borrowed; reset before each pass). `stats` may be
 * NULL. Returns QP_ERR_USAGE (NULL arguments, a qtype other than int8), QP_ERR_BAD_INPUT (data
 * with no batches or that the model cannot take; a layer input whose shape does not fit its
 * weight), QP_ERR_NOMEM, and the writer's and the engine's statuses, each naming the node. On an
 * error `mq` may be half edited: free it. */
enum qp_status qp_adaround(struct qp_model *mq, const struct qp_placement *pl,
                           struct qp_provider *data, const struct qp_adaround_options *o,
                           struct qp_adaround_stats *stats, struct qp_error *err);

#endif
