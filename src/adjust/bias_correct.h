/*
 * Bias correction (docs/quantize.md, "Bias correction"; `qplace quantize --bias_correction`):
 * quantizing a layer's weights and inputs shifts the mean of its output channels; this lowers
 * each channel's bias by the mean shift measured on calibration data, so the quantized layer's
 * channel means match the float layer's. Written biases stay float.
 *
 * Layers: every Conv, ConvTranspose, Gemm and MatMul of the top-level graph whose weight (input
 * 1) is a float constant and whose data or weight input the placement quantizes. Channels are
 * axis 1 of the output for Conv / ConvTranspose and the last axis for Gemm / MatMul. The bias
 * corrected is
 *   - Conv / ConvTranspose: input 2 (a new float initializer when the node has none);
 *   - Gemm: input C, corrected by shift / beta (a new C when there is none; a C read with beta 0
 *     is replaced by the correction and beta set to 1);
 *   - MatMul: the constant of the Add that alone reads its output when that constant broadcasts
 *     over the last axis (its last dim is 1 or the channel count; widened to the channel count
 *     when 1); otherwise a new Add of a float initializer is put after the MatMul: the MatMul
 *     then writes `<output>_matmul` and the Add writes the old output name, so every consumer,
 *     placement entry and calibrated range keeps naming the same tensor.
 * A constant read by anything else (another node, a graph output) is copied, never changed;
 * node indices stay valid (nodes are only appended).
 *
 * Measurement uses the real writer: each round writes a clone of `mq` with the placement and
 * `writer` options (high precision forced to float32, direct_io_types off), adds beside every
 * layer a float twin (the same op, attributes and bias reading the layer's input before its
 * QuantizeLinear/DequantizeLinear and the float weight), runs it on every batch of the data in
 * the engine's fake-quantization path (QP_INT8_EXACT: QP_INT8_OFF's bits), observing only the
 * layers and their twins, and accumulates per channel (float64) the mean of layer minus twin: the
 * shift that quantizing this layer's input and weight causes, given the input the quantized model
 * feeds it. Every layer is corrected from one pass; the next round measures again with the
 * corrections in place (the corrections upstream move a layer's input distribution a little, so its
 * own shift moves a little: rounds converge, by a factor of 3 to 4 each on PaddleOCR cls). `verify`
 * adds a last measuring pass, which measures what the last round left.
 *
 * Why not the shift of the quantized model's output against the float model's: that shift
 * includes what upstream layers pass on, so correcting every layer from one pass corrects the
 * upstream part again at every later layer; on PaddleOCR cls the mean relative shift grew from
 * 0.066 to 0.41 and 1.29 in two such rounds. Only the sequential form (one pass per layer) is
 * right for that measure; the twin removes the upstream part from each layer's measure, so one
 * pass corrects all layers at once.
 *
 *     struct qp_writer_options wo;                       // as the final write uses them
 *     struct qp_bias_correct_options bo = {.writer = &wo, .verify = 1};
 *     struct qp_bias_correct_stats bs;
 *     if (qp_bias_correct(mq, placement, calib, &bo, &bs, &err) != QP_OK) ...
 *     qp_qdq_write(mq, placement, &wo, NULL, &err);      // mq now carries the corrected biases
 */
#ifndef QP_ADJUST_BIAS_CORRECT_H
#define QP_ADJUST_BIAS_CORRECT_H

#include <stddef.h>
#include <stdint.h>

#include "ir/ir.h"
#include "placement/placement.h"
#include "qplace/calib.h"
#include "qplace/status.h"
#include "quant/writer.h"

#define QP_BIAS_CORRECT_DEFAULT_ROUNDS 2
#define QP_BIAS_CORRECT_MAX_ROUNDS     8

struct qp_bias_correct_options {
    int n_rounds;  /* corrections, 1..QP_BIAS_CORRECT_MAX_ROUNDS; 0: the default (2) */
    int verify;    /* 1: one more measuring pass after the last round (stats->shift_after) */
    int n_threads; /* engine threads; 0: all cores */
    /* The writer options of the final write (borrowed for the call; required): the scratch
     * models are written with them, but for float32 high precision and direct_io_types 0. */
    const struct qp_writer_options *writer;
};

struct qp_bias_correct_stats {
    size_t n_layers;       /* layers corrected */
    size_t n_channels;     /* their output channels */
    size_t n_biases_added; /* Conv/ConvTranspose biases, Gemm C inputs and Add nodes created */
    size_t n_copied;       /* shared constants copied before correcting (never changed) */
    size_t n_skipped;      /* eligible layers left alone (a bias that is not a float constant) */
    int n_rounds;          /* corrections applied */
    int n_passes;          /* measuring passes over the data (n_rounds + verify) */
    uint64_t n_batches;    /* batches per pass */
    /* The mean over channels (those whose twin's output varies) of |mean(layer - float twin)| /
     * std(twin's output channel), over all batches: shift[k] measured at pass k, so shift[0] is
     * before any correction and shift[n_rounds] (with verify) after the last. */
    double shift[QP_BIAS_CORRECT_MAX_ROUNDS + 1];
    /* shift[0], and shift[n_passes - 1]: after the last round with verify, else after round
     * n_rounds - 1 (the last measurement; the last round's own correction is not measured). */
    double shift_before, shift_after;
    double seconds; /* wall time of the whole correction */
};

/* Corrects the biases of `mq` (the float model that is written next; its top-level graph is
 * edited in place and left sorted) over every batch of `data` (borrowed; reset before each
 * pass). `pl` is the placement the final write applies (borrowed; names are resolved against
 * mq). `stats` may be NULL. Returns QP_ERR_USAGE (NULL arguments, n_rounds out of range),
 * QP_ERR_BAD_INPUT (data with no batches or that the model cannot take; a bias whose size is not
 * the channel count; an output whose channel count differs from the weight's),
 * QP_ERR_UNSUPPORTED (a layer output that is not float32), QP_ERR_NOMEM, and the writer's and
 * the engine's statuses, each message naming the node. On an error `mq` may be half edited: free
 * it. */
enum qp_status qp_bias_correct(struct qp_model *mq, const struct qp_placement *pl,
                               struct qp_provider *data, const struct qp_bias_correct_options *o,
                               struct qp_bias_correct_stats *stats, struct qp_error *err);

#endif
