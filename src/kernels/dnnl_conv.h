/*
 * Shared between the Conv/ConvTranspose reference kernels (conv.c) and their oneDNN variants
 * (dnnl_conv.c): the geometry every variant computes from the node, so the fast variant can fall
 * back to the reference kernel with the very same state.
 */
#ifndef QP_KERNELS_DNNL_CONV_H
#define QP_KERNELS_DNNL_CONV_H

#include "kernels/kernel.h"
#include "kernels/spatial.h"

struct qp_conv_state {
    struct qp_window w;
    int64_t n, c, m, group; /* batch, input channels, output channels */
    int has_bias;
    int64_t in_sz, out_sz, k_sz; /* spatial element counts */
    int64_t k3[3], in3[3], out3[3], s3[3], d3[3], p3[3];
};

/* Validates a Conv (transpose 0) or ConvTranspose (1) node, fills *s and sets output 0's dtype
 * and shape. Does not allocate p->state. */
enum qp_status qp_conv_geometry(struct qp_kprep *p, int transpose, struct qp_conv_state *s);

/* Operations applied, in order, to a fused convolution's output (bias included): the runtime's
 * fusion pass (src/runtime/fuse.c) hands a Conv node and the activations / residual Add that
 * follow it to one primitive, as oneDNN post-ops. */
enum qp_conv_post_kind {
    QP_CONV_POST_LINEAR = 0, /* alpha * x + beta */
    QP_CONV_POST_RELU,       /* x > 0 ? x : alpha * x */
    QP_CONV_POST_CLIP,       /* min(max(x, alpha), beta) */
    QP_CONV_POST_SIGMOID,    /* 1 / (1 + exp(-x)) */
    QP_CONV_POST_HARDSWISH,  /* x * min(max(x + 3, 0), 6) / 6 */
    QP_CONV_POST_SUM,        /* x + residual (the step's input 3, same shape as the output) */
    QP_CONV_POST_GELU,       /* 0.5 x (1 + erf(x / sqrt 2)) (only the integer path's chains) */
    QP_CONV_POST_GELU_TANH,  /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (likewise) */
    QP_CONV_POST_COUNT
};

#define QP_CONV_MAX_POST 8

struct qp_conv_post {
    int kind; /* enum qp_conv_post_kind */
    float alpha, beta;
};

/* Prepares a fused Conv (transpose 0) or ConvTranspose (1): p->node is the node, p->in[0..2]
 * its input, weights and bias (both plan-time constants: BatchNormalization and per-channel
 * scales already folded in, by the caller), p->n_in 3; `post` (n_post <= QP_CONV_MAX_POST, at
 * most one SUM) follows. The run (qp_k_dnnl_conv_run / qp_k_dnnl_conv_transpose_run) then takes
 * 4 inputs, the 4th the residual of a SUM (NULL without one). When oneDNN cannot take the node,
 * the state runs the reference convolution and the post-operations in C
 * (qp_dnnl_conv_state_uses_dnnl tells which: the fusion pass only fuses onto oneDNN). */
enum qp_status qp_dnnl_conv_fused_prepare(struct qp_kprep *p, int transpose, int n_post,
                                          const struct qp_conv_post *post);

/* Validates the node and sets output 0's dtype and shape like the registry row's prepare, but
 * makes no primitive and reorders no weights: the state (qp_dnnl_conv_state_deferred 1) must
 * be replaced, by a fused state or by the row's prepare, before the step runs (running it is
 * an error). The fusion pass uses it so that a convolution it fuses is prepared once. */
enum qp_status qp_dnnl_conv_defer_prepare(struct qp_kprep *p, int transpose);
int qp_dnnl_conv_state_deferred(const void *state);

/* The reference meaning of `post` on one value (residual: the SUM operand). */
float qp_conv_post_ref(int n_post, const struct qp_conv_post *post, float x, float residual);

/* Blocked layouts between convolutions (the runtime's layout pass, src/runtime/fuse.c), for
 * states of the Conv row or qp_dnnl_conv_fused_prepare:
 * - qp_dnnl_conv_blocked_dst: the destination's oneDNN memory descriptor when the primitive
 *   writes a blocked layout (else NULL), and its bytes (padded channels included);
 * - qp_dnnl_conv_accepts: 1 when input 0 (source) or 3 (the SUM residual) can be read in the
 *   layout `md` directly;
 * - qp_dnnl_conv_set_blocked: from now on input 0 / 3, or the output (input -1), is in the
 *   blocked layout, not NCHW. Only oneDNN convolutions read such tensors: the runtime
 *   guarantees that nothing else does. */
const void *qp_dnnl_conv_blocked_dst(const void *state, size_t *bytes_out);
int qp_dnnl_conv_accepts(const void *state, int input, const void *md);
void qp_dnnl_conv_set_blocked(void *state, int input, int on);

/* 1 when the output of a state with a SUM may be given the bytes of its residual (input 3), so
 * that the residual is not copied into the destination before each run: the state runs on
 * oneDNN or Winograd (never the reference, which writes its output before it reads the
 * residual) and the residual and the output are in the same layout (after
 * qp_dnnl_conv_set_blocked). The memory plan does it where the residual dies at this step. */
int qp_dnnl_conv_sum_in_place(const void *state);
/* 1 when two descriptors qp_dnnl_conv_blocked_dst returned describe the same layout. */
int qp_dnnl_conv_md_equal(const void *a, const void *b);

/* Weight reorders the prepares of this process have done, one per prepared convolution on
 * oneDNN (tests: a fused convolution is prepared once). */
size_t qp_dnnl_conv_weight_reorders(void);

/* 1 when a state made by the Conv/ConvTranspose registry rows runs on oneDNN (tests); also for
 * one on the Winograd path (winograd.h), which keeps oneDNN's layouts. */
int qp_dnnl_conv_state_uses_dnnl(const void *state);

/* 1 when the state runs the Winograd path instead of the oneDNN primitive (tests). */
int qp_dnnl_conv_state_uses_winograd(const void *state);
/* 1 when a ConvTranspose state runs as a GEMM and a scatter (kernel == stride, deconv_patch.h). */
int qp_dnnl_conv_state_uses_patch(const void *state);
/* 1 when a 1x1 convolution with strides runs as a gather of the strided source pixels and a
 * stride-1 primitive (whenever its source arrives in the primary primitive's layout; tests).
 * QP_CONV_SUBSAMPLE=0 in the environment, read at prepare, keeps oneDNN's strided form. */
int qp_dnnl_conv_state_uses_subsample(const void *state);

/* The reference kernels (conv.c): the oracle the oneDNN rows are tested against, and their
 * fallback. The registry rows use qp_k_dnnl_conv_* / qp_k_dnnl_conv_transpose_*. */
enum qp_status qp_k_conv_prepare(struct qp_kprep *p);
enum qp_status qp_k_conv_run(const struct qp_krun *r);
enum qp_status qp_k_conv_transpose_prepare(struct qp_kprep *p);
enum qp_status qp_k_conv_transpose_run(const struct qp_krun *r);

#endif
