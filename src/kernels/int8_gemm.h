/*
 * The exact integer cores of the integer path on CPUs without VNNI (QP_INT8_PATH_AVX2 of QConv
 * and QMatMul, kernels/int8_conv.h): a GEMM, an im2col and a depthwise convolution on int8 / uint8
 * activations and int8 weights, with int32 accumulation that is exact for every input.
 *
 *   y[i][j] = epilogue_j( sum_k (A[i][k] - a_zp) * B[k][j] )
 *
 * A is m rows of bytes (int8 or uint8, any values), B int8 constants packed once (qp_i8g_pack).
 * The zero point enters as - a_zp * colsum[j], the column sums of B computed when packing. The
 * products are summed exactly, whatever the values (k <= QP_I8G_MAX_K), by one of four kernels,
 * picked from a scan of A (qp_i8g_range, by the caller) and the weights (when packing):
 *   - QP_I8G_BELOW_128 (every byte below 128: int8 activations after a Relu, the common case):
 *     vpmaddubsw of the A bytes as unsigned and the signed weights, whose pair sums are within
 *     2 * 127 * 128 = 32512 and never saturate int16, then vpmaddwd with ones into int32;
 *   - QP_I8G_NO_MIN (int8 A without -128: an image, activations without a Relu): vpmaddubsw of
 *     |w| (0..128, unsigned) and sign(w) * x (vpsignb, -127..127), the same products, pair sums
 *     within 2 * 128 * 127 = 32512;
 *   - any int8 A where no weight is -128 (symmetric weight quantization gives -127..127):
 *     vpmaddubsw of |x| (0..128) and sign(x) * w (vpsignb, -127..127), pair sums within
 *     2 * 128 * 127 = 32512 again;
 *   - otherwise (QP_I8G_ANY uint8 bytes of 128 or more, or int8 -128 with a -128 weight): bytes
 *     and weights sign- or zero-extended to int16 and vpmaddwd (the pair sums of int16 products
 *     are exact in int32), half the speed of the others.
 * vpmaddubsw never sees an operand pair whose sum may leave int16: that is where oneDNN's AVX2
 * int8 kernels saturate (docs/engine.md, "INT8 path").
 *
 * Packed B: ceil(n / 16) panels of 16 columns (zero weights beyond n); panel p holds, for each
 * quad q of k (k padded to a multiple of 4 with zero weights), 16 columns x 4 bytes: byte
 * 64 q + 4 c + t is B[4 q + t][16 p + c]. Then the column sums, int32, n padded to a multiple
 * of 16 with zeros, then one int32: 1 when no weight is -128.
 *
 * The epilogue (struct qp_i8g_epi) writes raw int32 sums, or the integer path's real values:
 * v = acc * osc[j] + bias[j], the post-operations in order (SUM adds the residual's real value),
 * then the store (float, fp16, or requantized int8) with the very float operations, in the very
 * order, of QConv's reference path (int8_conv.c): every path gives the same bits.
 *
 * isa: QP_ISA_AVX2 and above run AVX2 code (functions compiled with target("avx2,fma"): the
 * project builds for baseline x86-64), QP_ISA_PORTABLE plain C; both give the same bits. Each
 * output element is computed by one of the n_threads OpenMP threads, in an order that does not
 * depend on the partition, so results do not depend on the thread count. Nothing here
 * allocates: all pointers are borrowed for the call.
 */
#ifndef QP_KERNELS_INT8_GEMM_H
#define QP_KERNELS_INT8_GEMM_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/dnnl_conv.h"
#include "kernels/int8_util.h"
#include "kernels/isa.h"

/* The longest k the int32 sums hold for every input: 65536 * 255 * 128 < 2^31. */
#define QP_I8G_MAX_K 65536

/* n rounded up to the panel width (16): the length of per-column arrays (osc, bias). */
int64_t qp_i8g_npad(int64_t n);

/* Bytes of a packed B of k x n (panels and column sums), 0 when k or n is out of range
 * (k < 1, k > QP_I8G_MAX_K, n < 1) or the size overflows. */
size_t qp_i8g_pack_bytes(int64_t k, int64_t n);

/* Packs B, given transposed: bt row j (at bt + j * ldbt) is column j of B, k bytes, into
 * `packed` (qp_i8g_pack_bytes bytes, 32-byte aligned), with whether any weight is -128. */
void qp_i8g_pack(const int8_t *bt, int64_t ldbt, int64_t k, int64_t n, void *packed);

/* A packed B (views into the packed bytes). */
struct qp_i8g_b {
    const int8_t *panels;
    const int32_t *colsum;
    int64_t k, n;
    int no_min; /* no weight is -128 (found when packing) */
};
void qp_i8g_b_view(const void *packed, int64_t k, int64_t n, struct qp_i8g_b *b);

/* What a scan of A's bytes showed, which decides the kernel (flags; 0: any bytes). */
enum qp_i8g_range {
    QP_I8G_ANY = 0,
    QP_I8G_BELOW_128 = 1, /* every byte below 128 (int8 >= 0, uint8 <= 127) */
    QP_I8G_NO_MIN = 2     /* no byte is 0x80 (int8 >= -127) */
};

/* The A operand: row i is the bytes at data + i * lda; 4 * ceil(k / 4) bytes of each row are
 * read (those beyond k meet zero weights: any value). */
struct qp_i8g_a {
    const void *data;
    int64_t lda;
    int is_signed; /* int8 (else uint8) */
    int32_t zp;
    unsigned range; /* enum qp_i8g_range flags that hold for every byte read */
};

/* What is done with the sums of row i, column j. */
struct qp_i8g_epi {
    const struct qp_i8_io *io; /* NULL: the raw int32 sums into y (int32) */
    const float *osc, *bias;   /* per column, qp_i8g_npad(n) values */
    enum qp_dtype ydt;         /* y's elements: INT8 / UINT8 (io->ys, io->yzp), FLOAT, FLOAT16 */
    void *y;
    int64_t ldy;     /* elements from one row of y to the next */
    const void *res; /* the SUM post's residual: NULL, INT8 / UINT8 (io->rs, io->rzp) or FLOAT */
    enum qp_dtype rdt;
    int64_t ldr;
};

/* y for rows [0, m) of A times the packed B. */
void qp_i8g_gemm(enum qp_isa isa, int64_t m, const struct qp_i8g_a *a, const struct qp_i8g_b *b,
                 const struct qp_i8g_epi *e, int n_threads);

/* The enum qp_i8g_range flags that hold for every one of the n bytes at x. */
unsigned qp_i8g_range(enum qp_isa isa, const void *x, size_t n, int n_threads);

/* The convolution g (group 1) as a GEMM operand: one row per output pixel (n * out_sz rows, ld
 * bytes apart, ld >= 4 * ceil(g->c * g->k_sz / 4)), k = (kernel position, channel) in that
 * order, from the channels-last input x; positions in the padding hold `fill` (the zero point's
 * byte), bytes from c * k_sz to ld zero. The matching B column of output channel oc is
 * w[oc][c][kpos] at k = kpos * c + c. */
void qp_i8g_im2col(const struct qp_conv_state *g, const void *x, uint8_t fill, void *col,
                   int64_t ld, int n_threads);

/* qp_i8g_im2col then qp_i8g_gemm on its rows (a->data and a->lda unused: the rows come from
 * x), in chunks of rows that stay in cache: each thread writes a chunk's im2col rows into its
 * own part of `col` (qp_i8g_conv_gemm_scratch bytes for n_threads) and runs every panel on them
 * before the next chunk, instead of writing the whole im2col matrix to memory and reading it
 * back once per panel group. The same bits as the two calls. */
int qp_i8g_conv_gemm_pays(int64_t k, int64_t n); /* B of k x n small enough to stay in cache */
size_t qp_i8g_conv_gemm_scratch(const struct qp_conv_state *g, int64_t ld, int n_threads);
void qp_i8g_conv_gemm(enum qp_isa isa, const struct qp_conv_state *g, const void *x, uint8_t fill,
                      int64_t ld, void *col, const struct qp_i8g_a *a, const struct qp_i8g_b *b,
                      const struct qp_i8g_epi *e, int n_threads);

/* Depthwise weights (group == c == m): w is [c][k_sz] (k_sz <= 81, else the size is 0), packed
 * as floats for the kernel. */
size_t qp_i8g_dw_pack_bytes(int64_t c, int64_t k_sz);
void qp_i8g_dw_pack(const int8_t *w, int64_t c, int64_t k_sz, void *packed);

/* Scratch bytes of qp_i8g_depthwise for g: the source as floats x - zp (0 when the size
 * overflows). */
size_t qp_i8g_dw_scratch_bytes(const struct qp_conv_state *g);

/* The depthwise convolution g on the channels-last input x (int8 when is_signed, else uint8;
 * zero point zp): row b * out_sz + o, column c of the epilogue is output pixel o, channel c.
 * The source is first converted to floats x - zp in `scratch`; the sums are then float32
 * multiply-adds of those and the float weights, exact (int8_gemm.c says why) and about four
 * times fewer instructions than int16 pair sums, which need the bytes widened and interleaved
 * for every product. */
void qp_i8g_depthwise(enum qp_isa isa, const struct qp_conv_state *g, const void *x, int is_signed,
                      int32_t zp, const void *packed, void *scratch, const struct qp_i8g_epi *e,
                      int n_threads);

#endif
