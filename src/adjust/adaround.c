/* Weight rounding by layer-output error (adaround.h). */
#include "adjust/adaround.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calib/batch_pool.h"
#include "calib/provider.h"
#include "core/arena.h"
#include "core/clock.h"
#include "kernels/gemm.h"
#include "qplace/session.h"

enum ar_kind { AR_CONV, AR_GEMM, AR_MATMUL };
enum { PAD_EXPLICIT = 0, PAD_VALID, PAD_SAME_UPPER, PAD_SAME_LOWER };

#define AR_QMAX 127
/* Damping: the choice minimises E + AR_DAMP * mean(diag H) * |D|^2, as GPTQ damps its Hessian:
 * directions the sampled rows barely see stay at nearest instead of fitting the sample. */
#define AR_DAMP 0.01
/* A layer is chosen only when its sampled rows number at least this many times its inputs per
 * output (K): with fewer, the quadratic is fitted to the sample more than to the layer. */
#define AR_ROWS_PER_INPUT 4 /* levels -127 .. 127: the weights' absmax stays put (adaround.h) */

struct ar_layer {
    int node, wv; /* mq's node and its weight value */
    enum ar_kind kind;
    int axis;             /* the placement's: the output-channel axis or -1 */
    int64_t O, K, G, Og;  /* output channels, inputs per row, groups, channels per group */
    int trans_a, trans_w; /* Gemm transA; the weight stored [K x O] (MatMul, Gemm transB 0) */
    /* Conv (a 1-D Conv has kh 1): input channels per group, kernel, strides, dilations, pads
     * (begin and end per axis) and auto_pad */
    int64_t cg, k[2], s[2], d[2], pb[2], pe[2];
    int auto_pad;
    float *w;       /* [O x K], channel rows */
    float *scale;   /* [O] */
    const char *xq; /* what it reads in the measured model (its DequantizeLinear output) */
    float *H;       /* [G][K x K]: sum over the sampled rows of x x' */
    uint64_t rows;  /* rows sampled (per group) */
};

struct ar_pass {
    struct ar_layer *L;
    size_t n;
    uint64_t batch, n_samples, max_rows;
    int n_threads;
    long bad; /* the layer whose input did not fit it, or -1 */
    int nomem;
};

static enum qp_status nomem(struct qp_error *err) {
    return qp_error_set(err, QP_ERR_NOMEM, "weight rounding: out of memory");
}

static float *floats(uint64_t n) {
    return n <= SIZE_MAX / sizeof(float) ? malloc((size_t)(n ? n : 1) * sizeof(float)) : NULL;
}

static int64_t attr_int(const struct qp_node *n, const char *name, int64_t dflt) {
    const struct qp_attr *a = qp_node_attr(n, name);
    return a && a->type == QP_ATTR_INT ? a->i : dflt;
}

/* Element i of ints attribute `name`, or dflt. */
static int64_t attr_at(const struct qp_node *n, const char *name, size_t i, int64_t dflt) {
    const struct qp_attr *a = qp_node_attr(n, name);
    return a && a->type == QP_ATTR_INTS && i < a->n ? a->ints[i] : dflt;
}

static int attr_is(const struct qp_node *n, const char *name, const char *v) {
    const struct qp_attr *a = qp_node_attr(n, name);
    return a && a->type == QP_ATTR_STRING && a->s.len == strlen(v) &&
           memcmp(a->s.data, v, a->s.len) == 0;
}

/* ---- discovery ------------------------------------------------------------------------------ */

/* Conv geometry from node n and its weight (rank 3 or 4); 0 when unsupported. */
static int conv_geometry(const struct qp_node *n, const struct qp_tensor *t, struct ar_layer *L) {
    if (t->rank != 3 && t->rank != 4) return 0;
    int sp = t->rank - 2; /* spatial axes in the attributes */
    L->G = attr_int(n, "group", 1);
    L->O = t->dims[0];
    L->cg = t->dims[1];
    for (int a = 0; a < 2; a++) {
        int i = a - (2 - sp); /* the attribute index of axis a; < 0: the 1-D Conv's unit axis */
        L->k[a] = i < 0 ? 1 : t->dims[2 + i];
        L->s[a] = i < 0 ? 1 : attr_at(n, "strides", (size_t)i, 1);
        L->d[a] = i < 0 ? 1 : attr_at(n, "dilations", (size_t)i, 1);
        L->pb[a] = i < 0 ? 0 : attr_at(n, "pads", (size_t)i, 0);
        L->pe[a] = i < 0 ? 0 : attr_at(n, "pads", (size_t)(i + sp), 0);
        if (L->k[a] < 1 || L->s[a] < 1 || L->d[a] < 1 || L->pb[a] < 0 || L->pe[a] < 0) return 0;
    }
    L->auto_pad = attr_is(n, "auto_pad", "VALID")        ? PAD_VALID
                  : attr_is(n, "auto_pad", "SAME_UPPER") ? PAD_SAME_UPPER
                  : attr_is(n, "auto_pad", "SAME_LOWER") ? PAD_SAME_LOWER
                                                         : PAD_EXPLICIT;
    if (L->G < 1 || L->O % L->G || L->cg < 1) return 0;
    L->K = L->cg * L->k[0] * L->k[1];
    L->Og = L->O / L->G;
    return 1;
}

/* The layer of placed weight `pw` in g: 1, or 0 when it is not one this step rounds. */
static int discover(const struct qp_graph *g, const struct qp_qweight *pw, struct ar_layer *L) {
    int ni = qp_graph_find_node(g, pw->node), v = qp_graph_find_value(g, pw->tensor);
    if (ni < 0 || v < 0 || pw->input != 1) return 0;
    const struct qp_node *n = &g->nodes[ni];
    const struct qp_tensor *t = qp_placement_weight_tensor(g, v);
    if (!t || t->dtype != QP_DTYPE_FLOAT || !t->data || t->nbytes != t->numel * 4) return 0;
    memset(L, 0, sizeof *L);
    L->node = ni;
    L->wv = v;
    L->axis = pw->axis;
    if (qp_node_is(n, "Conv")) {
        L->kind = AR_CONV;
        if (!conv_geometry(n, t, L) || (pw->axis != 0 && pw->axis != -1)) return 0;
    } else if (qp_node_is(n, "Gemm") || qp_node_is(n, "MatMul")) {
        /* Gemm's alpha scales the error uniformly: the choice does not depend on it */
        int gemm = qp_node_is(n, "Gemm");
        L->kind = gemm ? AR_GEMM : AR_MATMUL;
        if (t->rank != 2) return 0;
        L->trans_w = !gemm || !attr_int(n, "transB", 0);
        L->trans_a = gemm && attr_int(n, "transA", 0);
        L->O = t->dims[L->trans_w ? 1 : 0];
        L->K = t->dims[L->trans_w ? 0 : 1];
        L->G = 1;
        L->Og = L->O;
        if (pw->axis != -1 && pw->axis != (L->trans_w ? 1 : 0)) return 0;
    } else {
        return 0;
    }
    return L->O > 0 && L->K > 0;
}

/* The weights as channel rows and their scales. */
static enum qp_status load_weights(const struct qp_graph *g, struct ar_layer *L,
                                   const struct qp_writer_options *wo, struct qp_error *err) {
    const struct qp_tensor *t = qp_placement_weight_tensor(g, L->wv);
    float *sc = NULL;
    int64_t ns = 0;
    enum qp_status st =
        qp_qdq_weight_scales(t, L->axis, wo->qtype, wo->weight_clip_mse, &sc, &ns, err);
    if (st != QP_OK) return st;
    L->w = floats((uint64_t)(L->O * L->K));
    L->scale = floats((uint64_t)L->O);
    if (!L->w || !L->scale) {
        free(sc);
        return nomem(err);
    }
    const float *src = t->data;
    for (int64_t o = 0; o < L->O; o++) {
        L->scale[o] = sc[ns == 1 ? 0 : o];
        for (int64_t k = 0; k < L->K; k++)
            L->w[o * L->K + k] = L->trans_w ? src[k * L->O + o] : src[o * L->K + k];
    }
    free(sc);
    return QP_OK;
}

/* 1 when nothing but node ni reads value v (so it can be rewritten in place). */
static int private_to(const struct qp_graph *g, int v, int ni) {
    const struct qp_value *val = &g->values[v];
    if (val->is_graph_input || val->is_graph_output) return 0;
    for (size_t u = 0; u < val->n_uses; u++)
        if (val->uses[u].node != ni) return 0;
    return 1;
}

/* ---- rows of a layer's input ---------------------------------------------------------------- */

/* Where a Conv's rows come from in input x: dims, output size and begin pads per axis. */
struct conv_view {
    int64_t n, c, in[2], out[2], pb[2];
};

/* The row count of layer L's input x (Conv output positions, MatMul/Gemm rows); -1 when x does
 * not fit the layer. *cv is filled for a Conv. */
static int64_t input_rows(const struct ar_layer *L, const struct qp_array *x,
                          struct conv_view *cv) {
    int ok = 1;
    uint64_t numel = qp_array_numel(x, &ok);
    if (x->dtype != QP_DTYPE_FLOAT || !ok) return -1;
    if (L->kind == AR_MATMUL)
        return x->rank >= 1 && x->dims[x->rank - 1] == L->K ? (int64_t)(numel / (uint64_t)L->K)
                                                            : -1;
    if (L->kind == AR_GEMM)
        return x->rank == 2 && x->dims[L->trans_a ? 0 : 1] == L->K ? x->dims[L->trans_a ? 1 : 0]
                                                                   : -1;
    int two = x->rank == 4;
    if ((x->rank != 3 && x->rank != 4) || x->dims[1] != L->G * L->cg || (L->k[0] > 1 && !two))
        return -1;
    cv->n = x->dims[0];
    cv->c = x->dims[1];
    cv->in[0] = two ? x->dims[2] : 1;
    cv->in[1] = x->dims[x->rank - 1];
    for (int a = 0; a < 2; a++) {
        int64_t ext = (L->k[a] - 1) * L->d[a] + 1, b = L->pb[a], e = L->pe[a];
        if (L->auto_pad == PAD_VALID) b = e = 0;
        if (L->auto_pad == PAD_SAME_UPPER || L->auto_pad == PAD_SAME_LOWER) {
            int64_t o = (cv->in[a] + L->s[a] - 1) / L->s[a];
            int64_t total = (o - 1) * L->s[a] + ext - cv->in[a];
            if (total < 0) total = 0;
            b = L->auto_pad == PAD_SAME_UPPER ? total / 2 : total - total / 2;
            e = total - b;
        }
        int64_t span = cv->in[a] + b + e - ext;
        if (span < 0) return -1;
        cv->out[a] = span / L->s[a] + 1;
        cv->pb[a] = b;
    }
    return cv->n * cv->out[0] * cv->out[1];
}

/* Row r of group gi of layer L's input x into dst (K floats). */
static void row_of(const struct ar_layer *L, const float *x, const struct conv_view *cv,
                   int64_t rows, int64_t r, int64_t gi, float *dst) {
    if (L->kind == AR_MATMUL || (L->kind == AR_GEMM && !L->trans_a)) {
        memcpy(dst, x + r * L->K, (size_t)L->K * sizeof *dst);
        return;
    }
    if (L->kind == AR_GEMM) { /* A stored [K x M] */
        for (int64_t k = 0; k < L->K; k++)
            dst[k] = x[k * rows + r];
        return;
    }
    int64_t per = cv->out[0] * cv->out[1], n = r / per, oy = r % per / cv->out[1],
            ox = r % cv->out[1];
    float *o = dst;
    for (int64_t c = 0; c < L->cg; c++) {
        const float *plane = x + ((n * cv->c) + gi * L->cg + c) * cv->in[0] * cv->in[1];
        for (int64_t ky = 0; ky < L->k[0]; ky++) {
            int64_t iy = oy * L->s[0] - cv->pb[0] + ky * L->d[0];
            for (int64_t kx = 0; kx < L->k[1]; kx++) {
                int64_t ix = ox * L->s[1] - cv->pb[1] + kx * L->d[1];
                int in = iy >= 0 && iy < cv->in[0] && ix >= 0 && ix < cv->in[1];
                *o++ = in ? plane[iy * cv->in[1] + ix] : 0.0f;
            }
        }
    }
}

/* How many of a batch's `rows` rows layer L samples: its share of max_rows over the data. */
static int64_t quota(const struct ar_pass *p, const struct ar_layer *L, int64_t rows,
                     int64_t batch_samples) {
    if (L->rows >= p->max_rows) return 0;
    uint64_t left = p->max_rows - L->rows, want;
    if (p->n_samples > 0) {
        uint64_t per_sample = (p->max_rows + p->n_samples - 1) / p->n_samples;
        want = per_sample * (uint64_t)(batch_samples > 0 ? batch_samples : 1);
    } else {
        want = p->max_rows / 16 + 1;
    }
    if (want > left) want = left;
    return (int64_t)(want < (uint64_t)rows ? want : (uint64_t)rows);
}

/* The rows a batch samples, spread evenly, the offset moving from batch to batch; the same for
 * the quantized and the float tensor of one batch. */
static int64_t sample_row(uint64_t batch, int64_t rows, int64_t q, int64_t j) {
    double phase = fmod((double)batch * 0.6180339887498949, 1.0);
    int64_t r = (int64_t)(((double)j + phase) * (double)rows / (double)q);
    return r < rows ? r : rows - 1;
}

/* The sampled rows of every group of x into out ([G][q x K]). */
static void gather(const struct ar_pass *p, const struct ar_layer *L, const struct qp_array *x,
                   const struct conv_view *cv, int64_t rows, int64_t q, float *out) {
    for (int64_t gi = 0; gi < L->G; gi++)
        for (int64_t j = 0; j < q; j++)
            row_of(L, x->data, cv, rows, sample_row(p->batch, rows, q, j), gi,
                   out + (gi * q + j) * L->K);
}

/* ---- accumulation --------------------------------------------------------------------------- */

/* The scratch matmul needs for a k x n B: qp_gemm_f32's packing memory, or NULL where the
 * portable loop runs (*ok 0 only when the memory could not be had). Free with free(). */
static float *gemm_scratch(int64_t k, int64_t n, int *ok) {
    *ok = 1;
    if (!qp_gemm_available()) return NULL;
    size_t bytes = qp_gemm_pack_bytes(k, n);
    float *pack = bytes ? aligned_alloc(64, (bytes + 63) / 64 * 64) : NULL;
    *ok = pack != NULL;
    return pack;
}

/* C[m x n] = A[m x k] B[k x n], all row-major and contiguous; `pack` from gemm_scratch(k, n). */
static void matmul(int64_t m, int64_t n, int64_t k, const float *a, const float *b, float *c,
                   float *pack, int n_threads) {
    if (pack) {
        qp_gemm_f32(m, n, k, a, k, b, n, c, n, pack, n_threads);
        return;
    }
    for (int64_t i = 0; i < m; i++) {
        float *ci = c + i * n;
        memset(ci, 0, (size_t)n * sizeof *ci);
        for (int64_t p = 0; p < k; p++) {
            float av = a[i * k + p];
            const float *bp = b + p * n;
            for (int64_t j = 0; j < n; j++)
                ci[j] += av * bp[j];
        }
    }
}

static void transpose(const float *a, int64_t rows, int64_t cols, float *t) {
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            t[j * rows + i] = a[i * cols + j];
}

/* Adds one group's q rows x (q x K) to its H, with scratch xt (K x q), prod (K x K) and
 * pack (gemm_scratch(q, K)). */
static void accumulate_group(struct ar_pass *p, struct ar_layer *L, int64_t gi, const float *x,
                             int64_t q, float *xt, float *prod, float *pack) {
    int64_t K = L->K;
    transpose(x, q, K, xt);
    matmul(K, K, q, xt, x, prod, pack, p->n_threads);
    float *H = L->H + gi * K * K;
    for (int64_t i = 0; i < K * K; i++)
        H[i] += prod[i];
}

/* Layer L's input x of this batch: q sampled rows of every group (the scratch made once for
 * all of them). */
static int accumulate(struct ar_pass *p, struct ar_layer *L, const struct qp_array *x,
                      const struct conv_view *cv, int64_t rows, int64_t q) {
    int64_t K = L->K;
    float *buf = floats((uint64_t)(L->G * q * K));
    float *xt = floats((uint64_t)(K * q)), *prod = floats((uint64_t)(K * K));
    int ok = 0;
    float *pack = gemm_scratch(q, K, &ok);
    ok = ok && buf && xt && prod;
    if (ok) {
        gather(p, L, x, cv, rows, q, buf);
        for (int64_t gi = 0; gi < L->G; gi++)
            accumulate_group(p, L, gi, buf + gi * q * K, q, xt, prod, pack);
        L->rows += (uint64_t)q;
    }
    free(buf);
    free(xt);
    free(prod);
    free(pack);
    return ok;
}

static int observe(const char *tensor, const char *node, const struct qp_array *v, void *user) {
    (void)node;
    struct ar_pass *p = user;
    for (size_t i = 0; i < p->n; i++) {
        struct ar_layer *L = &p->L[i];
        if (strcmp(L->xq, tensor) != 0) continue;
        struct conv_view cv;
        int64_t rows = input_rows(L, v, &cv);
        if (rows < 0) {
            p->bad = (long)i;
            return 1;
        }
        int64_t q = quota(p, L, rows, v->rank > 0 ? v->dims[0] : 1);
        if (q > 0 && !accumulate(p, L, v, &cv, rows, q)) return p->nomem = 1;
    }
    return 0;
}

/* ---- choosing the levels -------------------------------------------------------------------- */

/* Levels of one channel: nearest, and the level below and above w / s, within -127 .. 127. A
 * weight whose nearest level is +-127 keeps it: those hold the channel's absmax (or its clipped
 * amax), which must not move, or the writer would compute another scale. */
static void levels(const float *w, float s, int64_t K, int *q, int *lo, int *hi) {
    for (int64_t i = 0; i < K; i++) {
        float v = s > 0.0f ? w[i] / s : 0.0f;
        float f = floorf(v), c = ceilf(v), r = rintf(v);
        q[i] = r < -AR_QMAX ? -AR_QMAX : r > AR_QMAX ? AR_QMAX : (int)r;
        lo[i] = f < -AR_QMAX ? -AR_QMAX : f > AR_QMAX ? AR_QMAX : (int)f;
        hi[i] = c < -AR_QMAX ? -AR_QMAX : c > AR_QMAX ? AR_QMAX : (int)c;
        if (q[i] == AR_QMAX || q[i] == -AR_QMAX) lo[i] = hi[i] = q[i];
    }
}

/* Coordinate descent on E(D) = D'HD for one channel (D = s q - w), from the nearest levels in
 * q; g holds HD on entry. Returns E at nearest in *before and the final E; q is left at the
 * final levels. */
static double descend(const float *H, int64_t K, const float *w, float s, int *q, const int *lo,
                      const int *hi, double *g, double damp, int sweeps, double *before) {
    double E = 0;
    for (int64_t i = 0; i < K; i++)
        E += ((double)s * q[i] - w[i]) * g[i];
    *before = E;
    for (int sw = 0; sw < sweeps; sw++) {
        uint64_t n = 0;
        for (int64_t i = 0; i < K; i++) {
            if (lo[i] == hi[i]) continue;
            int to = q[i] == lo[i] ? hi[i] : lo[i];
            double delta = (double)s * (to - q[i]), hii = H[i * K + i];
            double di = (double)s * q[i] - w[i]; /* D_i now */
            double dE = 2.0 * delta * g[i] + delta * delta * hii;
            /* decided with the damping term damp * |D|^2 (ridge towards nearest) */
            if (!(dE + damp * (2.0 * delta * di + delta * delta) < -1e-12 * fabs(E))) continue;
            q[i] = to;
            E += dE;
            const float *hr = H + i * K; /* H is symmetric: row i is column i */
            for (int64_t j = 0; j < K; j++)
                g[j] += delta * hr[j];
            n++;
        }
        if (!n) break;
    }
    return E;
}

/* One channel's levels into q (3K ints: levels, below, above) and wn: nearest, then chosen by
 * descend. ch[0..3): E at nearest, E after, weights off nearest. g: K doubles of scratch. */
static void choose_channel(const float *H, int64_t K, const float *w, float s, const float *hd,
                           double damp, int sweeps, int *q, double *g, float *wn, double *ch) {
    for (int64_t i = 0; i < K; i++)
        g[i] = hd[i];
    double before, after = descend(H, K, w, s, q, q + K, q + 2 * K, g, damp, sweeps, &before);
    if (!(after <= before)) { /* not expected: keep nearest */
        levels(w, s, K, q, q + K, q + 2 * K);
        after = before;
    }
    double off = 0; /* weights left off their nearest level (a weight may move back) */
    for (int64_t i = 0; i < K; i++) {
        float v = s > 0.0f ? w[i] / s : 0.0f, r = rintf(v);
        int near = r < -AR_QMAX ? -AR_QMAX : r > AR_QMAX ? AR_QMAX : (int)r;
        off += q[i] != near;
        wn[i] = s * (float)q[i];
    }
    ch[0] = before;
    ch[1] = after;
    ch[2] = off;
}

/* Group gi of layer L: every channel's levels into wn (its rows of [O x K]); the sums over its
 * channels of E at nearest and after, of the output energy w'Hw and of the weights off nearest
 * added to acc[0..4) (in channel order, so they do not depend on the thread count). */
static int choose_group(const struct ar_layer *L, int64_t gi, int sweeps, int n_threads, float *wn,
                        double *acc) {
    int64_t K = L->K, Og = L->Og;
    const float *H = L->H + gi * K * K, *W = L->w + gi * Og * K;
    float *D = floats((uint64_t)(Og * K)), *HD = floats((uint64_t)(Og * K));
    float *HW = floats((uint64_t)(Og * K));
    int *qs = malloc((size_t)(3 * Og * K) * sizeof *qs);
    double *ch = calloc((size_t)(3 * Og), sizeof *ch), damp = 0;
    int ok = 0;
    float *pack = gemm_scratch(K, K, &ok);
    ok = ok && D && HD && HW && qs && ch;
    for (int64_t o = 0; ok && o < Og; o++) {
        int *q = qs + 3 * o * K;
        float s = L->scale[gi * Og + o];
        levels(W + o * K, s, K, q, q + K, q + 2 * K);
        for (int64_t i = 0; i < K; i++) {
            D[o * K + i] = s * (float)q[i] - W[o * K + i];
            wn[(gi * Og + o) * K + i] = s * (float)q[i]; /* nearest until chosen */
        }
    }
    /* one row per channel: HD and Hw (H is symmetric) */
    if (ok) {
        matmul(Og, K, K, D, H, HD, pack, n_threads);
        matmul(Og, K, K, W, H, HW, pack, n_threads);
    }
    for (int64_t i = 0; i < K; i++)
        damp += H[i * K + i];
    damp *= AR_DAMP / (double)K;
#pragma omp parallel for num_threads(n_threads) schedule(dynamic) if (ok && Og > 1)
    for (int64_t o = 0; o < (ok ? Og : 0); o++) {
        double *g = malloc((size_t)K * sizeof *g);
        if (!g) { /* out of memory: reported below */
            ch[3 * o] = NAN;
            continue;
        }
        choose_channel(H, K, W + o * K, L->scale[gi * Og + o], HD + o * K, damp, sweeps,
                       qs + 3 * o * K, g, wn + (gi * Og + o) * K, ch + 3 * o);
        free(g);
    }
    for (int64_t o = 0; ok && o < Og; o++) {
        ok = !isnan(ch[3 * o]); /* out of memory for this channel */
        double energy = 0;
        for (int64_t i = 0; i < K; i++)
            energy += (double)HW[o * K + i] * W[o * K + i];
        acc[0] += ch[3 * o];
        acc[1] += ch[3 * o + 1];
        acc[2] += energy;
        acc[3] += ch[3 * o + 2];
    }
    free(D);
    free(HD);
    free(HW);
    free(qs);
    free(ch);
    free(pack);
    return ok;
}

/* ---- writing the chosen weights ------------------------------------------------------------- */

/* The new values (channel rows wn) in the weight's layout, as a tensor like t owning them. */
static enum qp_status new_weight(struct qp_model *m, const struct ar_layer *L,
                                 const struct qp_tensor *t, const float *wn, struct qp_tensor **out,
                                 struct qp_error *err) {
    float *buf = floats(t->numel);
    if (!buf) return nomem(err);
    if (L->trans_w)
        transpose(wn, L->O, L->K, buf);
    else
        memcpy(buf, wn, (size_t)t->numel * sizeof *buf);
    enum qp_status st = qp_model_own(m, buf, err);
    if (st != QP_OK) return st;
    struct qp_tensor *nt = qp_arena_alloc(m->arena, sizeof *nt);
    if (!nt) return nomem(err);
    *nt = *t;
    nt->data = buf;
    nt->origin = NULL;
    nt->external_location = NULL;
    nt->external_offset = nt->external_length = 0;
    *out = nt;
    return QP_OK;
}

/* *same = 1 when the writer gives tensor nt the scales L chose its levels with. */
static enum qp_status same_scales(const struct ar_layer *L, const struct qp_tensor *nt,
                                  const struct qp_writer_options *wo, int *same,
                                  struct qp_error *err) {
    float *sc = NULL;
    int64_t ns = 0;
    enum qp_status st =
        qp_qdq_weight_scales(nt, L->axis, wo->qtype, wo->weight_clip_mse, &sc, &ns, err);
    if (st != QP_OK) return st;
    *same = 1;
    for (int64_t o = 0; o < L->O && *same; o++) {
        float a = sc[ns == 1 ? 0 : o], b = L->scale[o];
        *same = fabsf(a - b) <= 1e-6f * fabsf(b);
    }
    free(sc);
    return QP_OK;
}

/* Replaces layer L's weight in g by wn; *kept 0 when the scales would move (left alone). */
static enum qp_status rewrite(struct qp_graph *g, const struct ar_layer *L, const float *wn,
                              const struct qp_writer_options *wo, int *kept, struct qp_error *err) {
    const struct qp_tensor *t = qp_placement_weight_tensor(g, L->wv);
    struct qp_tensor *nt = NULL;
    enum qp_status st = new_weight(g->model, L, t, wn, &nt, err);
    if (st != QP_OK) return st;
    if ((st = same_scales(L, nt, wo, kept, err)) != QP_OK) return st;
    if (!*kept) {
        qp_log(QP_LOG_WARN,
               "weight rounding: node '%s': the scales of the rounded weight '%s' "
               "differ from the original's; left at nearest",
               g->nodes[L->node].name, g->values[L->wv].name);
        return QP_OK;
    }
    const struct qp_value *val = &g->values[L->wv];
    if (val->initializer >= 0) {
        g->inits[val->initializer] = *nt;
    } else {
        struct qp_node *cn = &g->nodes[val->producer];
        for (int a = 0; a < cn->n_attrs; a++)
            if (cn->attrs[a].type == QP_ATTR_TENSOR && cn->attrs[a].t == t) cn->attrs[a].t = nt;
    }
    return QP_OK;
}

/* ---- passes --------------------------------------------------------------------------------- */

/* What layer `name` reads in the measured graph wg (its DequantizeLinear output when the input
 * is quantized) into L->xq; 0 when the node is missing. */
static int input_name(const struct qp_graph *wg, const char *name, struct ar_layer *L) {
    int ni = qp_graph_find_node(wg, name);
    if (ni < 0 || wg->nodes[ni].n_inputs < 1 || wg->nodes[ni].inputs[0] < 0) return 0;
    L->xq = wg->values[wg->nodes[ni].inputs[0]].name;
    return 1;
}

/* A pass's H of layer L, zeroed. */
static int alloc_stats(struct ar_layer *L) {
    L->H = calloc((size_t)(L->G * L->K * L->K), sizeof *L->H);
    L->rows = 0;
    return L->H != NULL;
}

static void free_stats(struct ar_layer *L) {
    free(L->H);
    L->H = NULL;
}

/* Bytes of a layer's H. */
static double stats_bytes(const struct ar_layer *L) {
    return (double)L->G * (double)L->K * (double)L->K * 4.0;
}

static enum qp_status bad_input(const struct ar_pass *p, const struct qp_graph *g,
                                struct qp_error *err) {
    const struct ar_layer *L = &p->L[p->bad];
    return qp_error_set(err, QP_ERR_BAD_INPUT,
                        "weight rounding: node '%s' (%s): its input '%s' does not fit its weight "
                        "'%s' (%lld inputs per output)",
                        g->nodes[L->node].name, g->nodes[L->node].op_type, L->xq,
                        g->values[L->wv].name, (long long)L->K);
}

/* Runs the batches of `data` through session s, feeding graph inputs a layer reads directly to
 * the observer first (the run reports only what it computes). */
static enum qp_status feed_batches(struct qp_session *s, struct ar_pass *p,
                                   struct qp_provider *data, const size_t *map, size_t ns,
                                   struct qp_error *err) {
    enum qp_status st = qp_provider_reset(data, err);
    while (st == QP_OK) {
        const struct qp_array *batch = NULL;
        int end = 0;
        if ((st = qp_provider_next(data, &batch, &end, err)) != QP_OK || end) break;
        struct qp_array feed[QP_BATCH_POOL_MAX_INPUTS];
        for (size_t i = 0; i < ns; i++)
            feed[i] = batch[map[i]];
        for (size_t i = 0; i < ns && p->bad < 0 && !p->nomem; i++)
            observe(qp_session_input_name(s, i), NULL, &feed[i], p);
        if (p->bad < 0 && !p->nomem) st = qp_session_run(s, ns, feed, err);
        if (st == QP_OK && (p->bad >= 0 || p->nomem)) break;
        p->batch++;
    }
    return st;
}

/* One pass of the measured model wm over `data`, filling the statistics of p's layers. */
static enum qp_status run_pass(const struct qp_model *wm, struct ar_pass *p,
                               struct qp_provider *data, uint64_t *n_batches,
                               struct qp_error *err) {
    const char **names = malloc((p->n ? p->n : 1) * sizeof *names);
    if (!names) return nomem(err);
    size_t nn = 0;
    for (size_t i = 0; i < p->n; i++) { /* graph inputs are fed to the observer by feed_batches */
        int v = qp_graph_find_value(wm->graph, p->L[i].xq);
        if (v < 0 || !wm->graph->values[v].is_graph_input) names[nn++] = p->L[i].xq;
    }
    struct qp_session_options so = {.n_threads = p->n_threads, .lazy_plan = 1};
    struct qp_session *s = NULL;
    size_t map[QP_BATCH_POOL_MAX_INPUTS];
    enum qp_status st = qp_session_create(wm, &so, 0, NULL, &s, err);
    if (st == QP_OK) st = qp_session_set_observed(s, nn, names, err);
    size_t ns = st == QP_OK ? qp_session_n_inputs(s) : 0;
    if (st == QP_OK && (ns > QP_BATCH_POOL_MAX_INPUTS || ns > qp_provider_n_inputs(data)))
        st = qp_error_set(err, QP_ERR_BAD_INPUT,
                          "weight rounding: the model has %zu inputs, the "
                          "data %zu",
                          ns, qp_provider_n_inputs(data));
    if (st == QP_OK) st = qp_provider_map_inputs(data, s, "weight rounding", map, err);
    if (st == QP_OK) {
        qp_session_set_observer(s, observe, p);
        p->batch = 0;
        p->bad = -1;
        p->nomem = 0;
        st = feed_batches(s, p, data, map, ns, err);
    }
    if (st == QP_OK && p->nomem) st = nomem(err);
    if (st == QP_OK && p->bad >= 0) st = bad_input(p, wm->graph, err);
    if (st == QP_OK && !p->batch)
        st = qp_error_set(err, QP_ERR_BAD_INPUT, "weight rounding: the data has no batches");
    *n_batches = p->batch;
    qp_session_free(s);
    free(names);
    return st;
}

/* Layer L after its pass: its levels chosen and written into mq (or left as they are). */
static enum qp_status finish_layer(struct qp_graph *g, struct ar_layer *L, const struct ar_pass *p,
                                   const struct qp_adaround_options *o, int sweeps,
                                   struct qp_adaround_stats *st, double *rel_before,
                                   double *rel_after, struct qp_error *err) {
    if (L->rows < (uint64_t)(AR_ROWS_PER_INPUT * L->K)) {
        /* too few rows to tell a better level from a fit to the sample (or none came) */
        qp_log(QP_LOG_INFO,
               "weight rounding: node '%s': %llu rows of its input for %lld inputs "
               "per output (needs %d x); left at nearest",
               g->nodes[L->node].name, (unsigned long long)L->rows, (long long)L->K,
               AR_ROWS_PER_INPUT);
        st->n_skipped++;
        return QP_OK;
    }
    float *wn = floats((uint64_t)(L->O * L->K));
    if (!wn) return nomem(err);
    double acc[4] = {0}; /* E at nearest, E after, output energy, weights off nearest */
    int ok = 1;
    for (int64_t gi = 0; ok && gi < L->G; gi++)
        ok = choose_group(L, gi, sweeps, p->n_threads, wn, acc);
    int kept = 0;
    enum qp_status s = ok ? rewrite(g, L, wn, o->writer, &kept, err) : nomem(err);
    free(wn);
    if (s != QP_OK) return s;
    if (!kept) {
        st->n_skipped++;
        return QP_OK;
    }
    double eb = acc[0], ea = acc[1], energy = acc[2];
    uint64_t flips = (uint64_t)acc[3];
    st->n_layers++;
    st->n_weights += (uint64_t)(L->O * L->K);
    st->n_flipped += flips;
    if (L->rows > st->n_rows) st->n_rows = L->rows;
    *rel_before += energy > 0 ? eb / energy : 0;
    *rel_after += energy > 0 ? ea / energy : 0;
    qp_log(QP_LOG_DEBUG,
           "weight rounding: node '%s': %llu of %lld weights off nearest, output "
           "error %.4g -> %.4g of its energy (%llu rows)",
           g->nodes[L->node].name, (unsigned long long)flips, (long long)(L->O * L->K),
           energy > 0 ? eb / energy : 0.0, energy > 0 ? ea / energy : 0.0,
           (unsigned long long)L->rows);
    return QP_OK;
}

/* ---- the step ------------------------------------------------------------------------------- */

/* The layers of pl's weights in mq (weights loaded); shared weights counted in n_skipped. */
static enum qp_status find_layers(const struct qp_graph *g, const struct qp_placement *pl,
                                  const struct qp_writer_options *wo, struct ar_layer **out,
                                  size_t *n_out, struct qp_adaround_stats *st,
                                  struct qp_error *err) {
    struct ar_layer *L = calloc(pl->n_weights ? pl->n_weights : 1, sizeof *L);
    size_t n = 0;
    enum qp_status s = L ? QP_OK : nomem(err);
    for (size_t i = 0; s == QP_OK && i < pl->n_weights; i++) {
        if (!discover(g, &pl->weights[i], &L[n])) continue;
        if (!private_to(g, L[n].wv, L[n].node)) {
            qp_log(QP_LOG_INFO,
                   "weight rounding: node '%s': weight '%s' is shared; left at "
                   "nearest",
                   g->nodes[L[n].node].name, g->values[L[n].wv].name);
            st->n_skipped++;
            continue;
        }
        s = load_weights(g, &L[n], wo, err);
        n++;
    }
    *out = L;
    *n_out = n;
    return s;
}

/* mq written with nearest rounding and float32 high precision, the model the passes run. */
static enum qp_status measured_model(const struct qp_model *mq, const struct qp_placement *pl,
                                     const struct qp_writer_options *wo, struct qp_model **out,
                                     struct qp_error *err) {
    struct qp_writer_options w = *wo;
    w.high_precision = QP_DTYPE_FLOAT;
    w.direct_io_types = 0;
    w.dq_only = 0;
    struct qp_model *m = NULL;
    enum qp_status st = qp_model_clone(mq, &m, err);
    if (st == QP_OK) st = qp_qdq_write(m, pl, &w, NULL, err);
    if (st != QP_OK) {
        qp_model_free(m);
        return qp_error_prefix(err, "weight rounding");
    }
    *out = m;
    return QP_OK;
}

/* Layers [a, *b) of L for one pass: as many as fit max_bytes, at least one. */
static size_t pass_end(const struct ar_layer *L, size_t n, size_t a, double max_bytes) {
    double sum = stats_bytes(&L[a]);
    size_t b = a + 1;
    while (b < n && sum + stats_bytes(&L[b]) <= max_bytes)
        sum += stats_bytes(&L[b++]);
    return b;
}

/* Passes over groups of layers, each followed by choosing its layers' levels. */
static enum qp_status passes(struct qp_graph *g, const struct qp_model *wm, struct ar_layer *L,
                             size_t n, struct qp_provider *data,
                             const struct qp_adaround_options *o, double t0,
                             struct qp_adaround_stats *st, struct qp_error *err) {
    double budget = o->seconds > 0 ? o->seconds : QP_ADAROUND_DEFAULT_SECONDS;
    double max_bytes = (double)(o->max_mib ? o->max_mib : QP_ADAROUND_DEFAULT_MAX_MIB) * 1048576.0;
    int sweeps = o->max_sweeps > 0 ? o->max_sweeps : QP_ADAROUND_DEFAULT_SWEEPS;
    double rel_before = 0, rel_after = 0;
    enum qp_status s = QP_OK;
    for (size_t a = 0; s == QP_OK && a < n;) {
        size_t b = pass_end(L, n, a, max_bytes);
        struct ar_pass p = {.L = L + a,
                            .n = b - a,
                            .n_samples = qp_provider_n_samples(data),
                            .max_rows = o->max_rows ? o->max_rows : QP_ADAROUND_DEFAULT_ROWS,
                            .n_threads = o->n_threads};
        int timed_out = qp_clock_seconds() - t0 > budget;
        for (size_t i = a; s == QP_OK && !timed_out && i < b; i++)
            if (!alloc_stats(&L[i])) s = nomem(err);
        if (s == QP_OK && !timed_out && (s = run_pass(wm, &p, data, &st->n_batches, err)) == QP_OK)
            st->n_passes++;
        for (size_t i = a; s == QP_OK && i < b; i++) {
            if (timed_out || qp_clock_seconds() - t0 > budget) {
                timed_out = 1;
                st->n_timed_out++;
                continue;
            }
            s = finish_layer(g, &L[i], &p, o, sweeps, st, &rel_before, &rel_after, err);
        }
        for (size_t i = a; i < b; i++)
            free_stats(&L[i]);
        a = b;
    }
    if (st->n_layers) {
        st->error_before = rel_before / (double)st->n_layers;
        st->error_after = rel_after / (double)st->n_layers;
    }
    return s;
}

enum qp_status qp_adaround(struct qp_model *mq, const struct qp_placement *pl,
                           struct qp_provider *data, const struct qp_adaround_options *o,
                           struct qp_adaround_stats *stats, struct qp_error *err) {
    double t0 = qp_clock_seconds();
    struct qp_adaround_stats local;
    struct qp_adaround_stats *st = stats ? stats : &local;
    memset(st, 0, sizeof *st);
    if (!mq || !pl || !data || !o || !o->writer)
        return qp_error_set(err, QP_ERR_USAGE, "weight rounding: NULL argument");
    if (o->writer->qtype != QP_DTYPE_INT8)
        return qp_error_set(err, QP_ERR_USAGE,
                            "weight rounding: adaround chooses int8 levels; the quantized type is "
                            "%s (give --quantize_mode int8, or --weight_rounding nearest)",
                            qp_dtype_name(o->writer->qtype));
    struct qp_graph *g = mq->graph;
    struct ar_layer *L = NULL;
    struct qp_model *wm = NULL;
    size_t n = 0;
    enum qp_status s = qp_graph_toposort(g, err);
    if (s == QP_OK) s = find_layers(g, pl, o->writer, &L, &n, st, err);
    if (s == QP_OK && n) s = measured_model(mq, pl, o->writer, &wm, err);
    for (size_t i = 0; s == QP_OK && i < n; i++)
        if (!input_name(wm->graph, g->nodes[L[i].node].name, &L[i]))
            s = qp_error_set(err, QP_ERR_INTERNAL, "weight rounding: node '%s' vanished",
                             g->nodes[L[i].node].name);
    if (s == QP_OK && n) s = passes(g, wm, L, n, data, o, t0, st, err);
    if (s == QP_OK) s = qp_graph_toposort(g, err);
    for (size_t i = 0; L && i < n; i++) {
        free_stats(&L[i]);
        free(L[i].w);
        free(L[i].scale);
    }
    free(L);
    qp_model_free(wm);
    st->seconds = qp_clock_seconds() - t0;
    return s;
}
