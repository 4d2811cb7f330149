/* ConvTranspose with kernel == stride as a GEMM and a scatter (deconv_patch.h). */
#include "kernels/deconv_patch.h"

#include <omp.h>

#include "kernels/dnnl_util.h"
#include "kernels/gemm.h"

int qp_patch_takes(const struct qp_conv_state *g) {
    if (g->group != 1 || g->w.nsp < 1 || g->w.nsp > 3 || g->n < 1 || !qp_gemm_available()) return 0;
    for (int i = 0; i < g->w.nsp; i++)
        if (g->w.k[i] != g->w.stride[i] || g->w.dil[i] != 1 || g->w.pad_begin[i] != 0 ||
            g->w.pad_end[i] != 0 || g->w.out[i] != g->w.in[i] * g->w.k[i])
            return 0;
    /* The GEMM's sizes: J = m * k_sz rows, in_sz columns, c deep. */
    return (double)g->m * (double)g->k_sz * (double)g->in_sz < 9e15 && g->c > 0;
}

size_t qp_patch_weight_bytes(const struct qp_conv_state *g) {
    return (size_t)(g->m * g->k_sz * g->c) * sizeof(float);
}

void qp_patch_weights(const struct qp_conv_state *g, const float *w, float *out) {
    int64_t jn = g->m * g->k_sz, c = g->c;
    for (int64_t ci = 0; ci < c; ci++) /* w: [C, J]; out: [J, C] */
        for (int64_t j = 0; j < jn; j++)
            out[j * c + ci] = w[ci * jn + j];
}

static size_t pack_bytes(const struct qp_conv_state *g) {
    return qp_dnnl_align(qp_gemm_pack_bytes(g->c, g->in_sz));
}

size_t qp_patch_scratch_bytes(const struct qp_conv_state *g) {
    return pack_bytes(g) + qp_dnnl_align((size_t)(g->m * g->k_sz * g->in_sz) * sizeof(float));
}

/* Y[m, p * k + d] = Z[(m, d), p] for one image (3-d indices, leading dims 1), output row by
 * output row: each row interleaves k[2] rows of Z, and is written contiguously. */
static void scatter(const struct qp_conv_state *g, const float *z, float *y, int n_threads) {
    const int64_t *k = g->k3, *in = g->in3, *out = g->out3;
    int64_t p = g->in_sz, rows = out[0] * out[1], tasks = g->m * rows;
    int nt = g->m * g->out_sz < 65536 ? 1 : n_threads;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t t = 0; t < tasks; t++) {
        int64_t m = t / rows, r0 = t % rows / out[1], r1 = t % out[1];
        int64_t d = (r0 % k[0] * k[1] + r1 % k[1]) * k[2],
                at = (r0 / k[0] * in[1] + r1 / k[1]) * in[2];
        const float *src = z + (m * g->k_sz + d) * p + at; /* d2 = 0; d2 + 1 is p further */
        float *row = y + m * g->out_sz + t % rows * out[2];
        if (k[2] == 2) {
            const float *s1 = src + p;
            for (int64_t x = 0; x < in[2]; x++) {
                row[2 * x] = src[x];
                row[2 * x + 1] = s1[x];
            }
        } else {
            for (int64_t d2 = 0; d2 < k[2]; d2++)
                for (int64_t x = 0; x < in[2]; x++)
                    row[x * k[2] + d2] = src[d2 * p + x];
        }
    }
}

void qp_patch_run(const struct qp_conv_state *g, const float *x, const float *wt, float *y,
                  void *scratch, int n_threads) {
    float *pack = scratch, *z = (float *)((char *)scratch + pack_bytes(g));
    int64_t jn = g->m * g->k_sz;
    for (int64_t b = 0; b < g->n; b++) {
        qp_gemm_f32(jn, g->in_sz, g->c, wt, g->c, x + b * g->c * g->in_sz, g->in_sz, z, g->in_sz,
                    pack, n_threads);
        scatter(g, z, y + b * g->m * g->out_sz, n_threads);
    }
}
