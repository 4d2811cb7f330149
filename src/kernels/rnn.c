/*
 * Recurrent layers, float32: RNN, GRU, LSTM (opset 7; 14 adds `layout`). One driver: for each
 * direction (forward, reverse or both) and batch entry, the steps run in order; gate
 * pre-activations are X_t W^T + H_{t-1} R^T + Wb + Rb, accumulated in double, optionally
 * clipped to [-clip, clip], then the op's activations (defaults: RNN Tanh; GRU Sigmoid, Tanh;
 * LSTM Sigmoid, Tanh, Tanh; any of the spec's list with activation_alpha/beta).
 *
 *   RNN   H = f(Xi + Hi)
 *   GRU   z = f(Xz + Hz), r = f(Xr + Hr), h = g(Xh + (r . H) Rh^T + Rbh)   (linear_before_reset
 *         = 0) or g(Xh + r . (H Rh^T + Rbh)) (= 1), H = (1 - z) . h + z . H
 *   LSTM  i = f(Xi + Hi + Pi . C), f = f(Xf + Hf + Pf . C) (1 - i with input_forget),
 *         c = g(Xc + Hc), C = f . C + i . c, o = f(Xo + Ho + Po . C), H = o . h(C)
 *
 * Gate order in W, R, B: RNN [i]; GRU [z, r, h]; LSTM [i, o, f, c]; P is [i, o, f]. With
 * sequence_lens, steps at or beyond a batch entry's length output 0 and leave its state;
 * the reverse direction starts at its last valid step. Each (direction, batch) is one
 * thread's work in a fixed order, so results do not depend on the thread count.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/size.h"
#include "kernels/kcheck.h"
#include "kernels/kernels.h"

enum rnn_kind { RK_RNN, RK_GRU, RK_LSTM };

enum rnn_act {
    RA_RELU,
    RA_TANH,
    RA_SIGMOID,
    RA_AFFINE,
    RA_LEAKY,
    RA_THRESH,
    RA_SCALED_TANH,
    RA_HARD_SIGMOID,
    RA_ELU,
    RA_SOFTSIGN,
    RA_SOFTPLUS
};

struct rnn_fn {
    int act;
    float alpha, beta;
};

#define RNN_MAX_FN 6 /* 3 per direction */

struct rnn_state {
    int kind, n_dirs, reverse_only, layout, lbr, input_forget;
    int64_t seq, batch, in_size, hidden, gates;
    float clip; /* 0: none */
    struct rnn_fn fn[RNN_MAX_FN];
    int n_fn; /* per direction */
};

static double rnn_apply(const struct rnn_fn *f, double x) {
    switch (f->act) {
    case RA_RELU:
        return x > 0 ? x : 0;
    case RA_TANH:
        return tanh(x);
    case RA_SIGMOID:
        return 1 / (1 + exp(-x));
    case RA_AFFINE:
        return f->alpha * x + f->beta;
    case RA_LEAKY:
        return x >= 0 ? x : f->alpha * x;
    case RA_THRESH:
        return x > f->alpha ? x : 0;
    case RA_SCALED_TANH:
        return f->alpha * tanh(f->beta * x);
    case RA_HARD_SIGMOID: {
        double v = f->alpha * x + f->beta;
        return v < 0 ? 0 : (v > 1 ? 1 : v);
    }
    case RA_ELU:
        return x >= 0 ? x : f->alpha * (exp(x) - 1);
    case RA_SOFTSIGN:
        return x / (1 + fabs(x));
    default:
        return log1p(exp(x));
    }
}

/* Activation names (case-insensitive, as the spec lists them) and their default alpha/beta;
 * n_params: how many of activation_alpha/beta the function consumes. */
static const struct {
    const char *name;
    int act, n_params;
    float alpha, beta;
} rnn_acts[] = {
    {"relu", RA_RELU, 0, 0, 0},
    {"tanh", RA_TANH, 0, 0, 0},
    {"sigmoid", RA_SIGMOID, 0, 0, 0},
    {"affine", RA_AFFINE, 2, 1.0f, 0.0f},
    {"leakyrelu", RA_LEAKY, 1, 0.01f, 0},
    {"thresholdedrelu", RA_THRESH, 1, 1.0f, 0},
    {"scaledtanh", RA_SCALED_TANH, 2, 1.0f, 1.0f},
    {"hardsigmoid", RA_HARD_SIGMOID, 2, 0.2f, 0.5f},
    {"elu", RA_ELU, 1, 1.0f, 0},
    {"softsign", RA_SOFTSIGN, 0, 0, 0},
    {"softplus", RA_SOFTPLUS, 0, 0, 0},
};

static enum qp_status rnn_acts_read(struct qp_kprep *p, struct rnn_state *s) {
    static const int defaults[3][3] = {
        {RA_TANH, 0, 0}, {RA_SIGMOID, RA_TANH, 0}, {RA_SIGMOID, RA_TANH, RA_TANH}};
    s->n_fn = s->kind == RK_RNN ? 1 : (s->kind == RK_GRU ? 2 : 3);
    int total = s->n_fn * s->n_dirs;
    const struct qp_attr *a = qp_kattr(p->node, "activations");
    const float *alphas = NULL, *betas = NULL;
    int64_t n_alpha = qp_kattr_floats(p->node, "activation_alpha", &alphas);
    int64_t n_beta = qp_kattr_floats(p->node, "activation_beta", &betas);
    int64_t ia = 0, ib = 0;
    if (!a) {
        for (int i = 0; i < total; i++) {
            s->fn[i].act = defaults[s->kind][i % s->n_fn];
            s->fn[i].alpha = s->fn[i].beta = 0;
        }
        return QP_OK;
    }
    if (a->type != QP_ATTR_STRINGS || (int)a->n != total)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                            "activations has %zu entries, expected %d (%d per direction)", a->n,
                            total, s->n_fn);
    for (int i = 0; i < total; i++) {
        char name[32];
        size_t len = a->strings[i].len < sizeof name - 1 ? a->strings[i].len : sizeof name - 1;
        for (size_t k = 0; k < len; k++) {
            char ch = (char)a->strings[i].data[k];
            name[k] = ch >= 'A' && ch <= 'Z' ? (char)(ch - 'A' + 'a') : ch;
        }
        name[len] = 0;
        size_t j;
        for (j = 0; j < sizeof rnn_acts / sizeof rnn_acts[0]; j++)
            if (strcmp(name, rnn_acts[j].name) == 0) break;
        if (j == sizeof rnn_acts / sizeof rnn_acts[0])
            return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "activation '%s'", name);
        s->fn[i].act = rnn_acts[j].act;
        s->fn[i].alpha = rnn_acts[j].alpha;
        s->fn[i].beta = rnn_acts[j].beta;
        /* alpha and beta lists are consumed in order by the functions that take them */
        if (rnn_acts[j].n_params >= 1 && n_alpha > ia) s->fn[i].alpha = alphas[ia++];
        if (rnn_acts[j].n_params >= 2 && n_beta > ib) s->fn[i].beta = betas[ib++];
    }
    return QP_OK;
}

static enum qp_status need_f32_opt(const struct qp_kprep *p, int i, int rank, const int64_t *dims,
                                   const char *what) {
    if (i >= p->n_in || !p->in[i]) return QP_OK;
    const struct qp_kt *t = p->in[i];
    if (t->dtype != QP_DTYPE_FLOAT)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "%s is %s (float only)", what,
                            qp_dtype_name(t->dtype));
    int ok = t->rank == rank;
    for (int d = 0; ok && d < rank; d++)
        ok = t->dims[d] == dims[d];
    if (!ok) {
        char buf[64];
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "%s has shape %s", what,
                            qp_kshape_str(t, buf, sizeof buf));
    }
    return QP_OK;
}

enum qp_status qp_k_rnn_prepare(struct qp_kprep *p) {
    if (qp_kinputs_sane(p)) return QP_ERR_BAD_INPUT;
    struct rnn_state s;
    memset(&s, 0, sizeof s);
    const char *op = p->node->op_type;
    s.kind = strcmp(op, "RNN") == 0 ? RK_RNN : (strcmp(op, "GRU") == 0 ? RK_GRU : RK_LSTM);
    s.gates = s.kind == RK_RNN ? 1 : (s.kind == RK_GRU ? 3 : 4);
    enum qp_status st = qp_kneed(p, 0);
    if (!st) st = qp_kneed(p, 1);
    if (!st) st = qp_kneed(p, 2);
    if (st) return st;
    const struct qp_kt *x = p->in[0];
    if (x->dtype != QP_DTYPE_FLOAT)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "X is %s (float only)",
                            qp_dtype_name(x->dtype));
    if (x->rank != 3)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "X has rank %d, expected 3", x->rank);
    s.layout = p->opset >= 14 ? (int)qp_kattr_int(p->node, "layout", 0) : 0;
    if (s.layout != 0 && s.layout != 1)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "layout %d", s.layout);
    s.seq = x->dims[s.layout ? 1 : 0];
    s.batch = x->dims[s.layout ? 0 : 1];
    s.in_size = x->dims[2];
    char dir[32];
    qp_kattr_str(p->node, "direction", "forward", dir, sizeof dir);
    if (strcmp(dir, "forward") == 0) {
        s.n_dirs = 1;
    } else if (strcmp(dir, "reverse") == 0) {
        s.n_dirs = 1;
        s.reverse_only = 1;
    } else if (strcmp(dir, "bidirectional") == 0) {
        s.n_dirs = 2;
    } else {
        return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                            "direction '%s', expected forward, reverse or bidirectional", dir);
    }
    const struct qp_kt *w = p->in[1];
    s.hidden = qp_kattr_int(p->node, "hidden_size", w->rank == 3 ? w->dims[1] / s.gates : 0);
    if (s.hidden < 1 || s.hidden > (1 << 20))
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "hidden_size %lld", (long long)s.hidden);
    s.clip = qp_kattr(p->node, "clip") ? qp_kattr_float(p->node, "clip", 0) : 0;
    if (s.clip < 0) return qp_error_set(p->err, QP_ERR_BAD_INPUT, "clip %g < 0", (double)s.clip);
    s.lbr = s.kind == RK_GRU && qp_kattr_int(p->node, "linear_before_reset", 0) != 0;
    s.input_forget = s.kind == RK_LSTM && qp_kattr_int(p->node, "input_forget", 0) != 0;
    int64_t gh = s.gates * s.hidden;
    int64_t dw[3] = {s.n_dirs, gh, s.in_size}, dr[3] = {s.n_dirs, gh, s.hidden},
            db[2] = {s.n_dirs, 2 * gh},
            dh[3] = {s.layout ? s.batch : s.n_dirs, s.layout ? s.n_dirs : s.batch, s.hidden},
            dp[2] = {s.n_dirs, 3 * s.hidden};
    if ((st = need_f32_opt(p, 1, 3, dw, "W")) || (st = need_f32_opt(p, 2, 3, dr, "R")) ||
        (st = need_f32_opt(p, 3, 2, db, "B")) || (st = need_f32_opt(p, 5, 3, dh, "initial_h")))
        return st;
    if (s.kind == RK_LSTM &&
        ((st = need_f32_opt(p, 6, 3, dh, "initial_c")) || (st = need_f32_opt(p, 7, 2, dp, "P"))))
        return st;
    if (p->n_in > 4 && p->in[4]) {
        const struct qp_kt *sl = p->in[4];
        if ((sl->dtype != QP_DTYPE_INT32 && sl->dtype != QP_DTYPE_INT64) || sl->rank != 1 ||
            sl->dims[0] != s.batch)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "sequence_lens must be int32 [%lld]",
                                (long long)s.batch);
    }
    if ((st = rnn_acts_read(p, &s))) return st;
    int64_t dy[4];
    if (s.layout) {
        dy[0] = s.batch;
        dy[1] = s.seq;
        dy[2] = s.n_dirs;
    } else {
        dy[0] = s.seq;
        dy[1] = s.n_dirs;
        dy[2] = s.batch;
    }
    dy[3] = s.hidden;
    int64_t dhh[3] = {s.layout ? s.batch : s.n_dirs, s.layout ? s.n_dirs : s.batch, s.hidden};
    if (p->n_out > 0 && p->out[0] && (st = qp_kt_set(p->out[0], QP_DTYPE_FLOAT, 4, dy, p->err)))
        return st;
    if (p->n_out > 1 && p->out[1] && (st = qp_kt_set(p->out[1], QP_DTYPE_FLOAT, 3, dhh, p->err)))
        return st;
    if (p->n_out > 2 && p->out[2]) {
        if (s.kind != RK_LSTM)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "%s has 2 outputs", op);
        if ((st = qp_kt_set(p->out[2], QP_DTYPE_FLOAT, 3, dhh, p->err))) return st;
    }
    /* scratch per (direction, batch) job: H, C, gate sums (double), H R^T buffer */
    if (!qp_size_mul3((size_t)(s.n_dirs * s.batch), (size_t)(2 * s.hidden + 2 * gh), sizeof(double),
                      &p->scratch))
        return qp_error_set(p->err, QP_ERR_NOMEM, "out of memory");
    return qp_ksave_state(p, &s, sizeof s);
}

static double rnn_clip(const struct rnn_state *s, double v) {
    if (s->clip > 0) {
        if (v > s->clip) return s->clip;
        if (v < -s->clip) return -s->clip;
    }
    return v;
}

enum qp_status qp_k_rnn_run(const struct qp_krun *r) {
    const struct rnn_state *s = r->state;
    const float *x = r->in[0]->data, *w = r->in[1]->data, *rw = r->in[2]->data;
    const float *b = r->n_in > 3 && r->in[3] ? r->in[3]->data : NULL;
    const struct qp_kt *sl = r->n_in > 4 ? r->in[4] : NULL;
    const float *h0 = r->n_in > 5 && r->in[5] ? r->in[5]->data : NULL;
    const float *c0 = s->kind == RK_LSTM && r->n_in > 6 && r->in[6] ? r->in[6]->data : NULL;
    const float *peep = s->kind == RK_LSTM && r->n_in > 7 && r->in[7] ? r->in[7]->data : NULL;
    float *y = r->n_out > 0 && r->out[0] ? r->out[0]->data : NULL;
    float *yh = r->n_out > 1 && r->out[1] ? r->out[1]->data : NULL;
    float *yc = r->n_out > 2 && r->out[2] ? r->out[2]->data : NULL;
    int64_t hs = s->hidden, gh = s->gates * hs;
    for (int64_t bt = 0; sl && bt < s->batch; bt++) {
        int64_t len = qp_kt_get_i64(sl, (uint64_t)bt);
        if (len < 0 || len > s->seq)
            return qp_error_set(r->err, QP_ERR_BAD_INPUT,
                                "sequence_lens[%lld] = %lld is outside [0, %lld]", (long long)bt,
                                (long long)len, (long long)s->seq);
    }
    if (y) memset(y, 0, r->out[0]->nbytes);
    int64_t jobs = s->n_dirs * s->batch;
    int nt = jobs * s->seq * gh * (s->in_size + hs) < 65536 ? 1 : r->n_threads;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t job = 0; job < jobs; job++) {
        int64_t d = job / s->batch, bt = job % s->batch;
        int reverse = s->reverse_only || d == 1;
        double *h = (double *)r->scratch + job * (2 * hs + 2 * gh), *c = h + hs, *g = c + hs,
               *hr = g + gh;
        const float *W = w + d * gh * s->in_size, *R = rw + d * gh * hs;
        const float *Wb = b ? b + d * 2 * gh : NULL, *Rb = b ? Wb + gh : NULL;
        const float *P = peep ? peep + d * 3 * hs : NULL;
        /* initial_h/c and Y_h/c are [dirs, batch, hidden], or [batch, dirs, hidden] with
         * layout 1 */
        int64_t ho = (s->layout ? bt * s->n_dirs + d : d * s->batch + bt) * hs;
        for (int64_t k = 0; k < hs; k++) {
            h[k] = h0 ? h0[ho + k] : 0;
            c[k] = c0 ? c0[ho + k] : 0;
        }
        int64_t len = sl ? qp_kt_get_i64(sl, (uint64_t)bt) : s->seq;
        const struct rnn_fn *fn = s->fn + d * s->n_fn;
        for (int64_t step = 0; step < len; step++) {
            int64_t t = reverse ? len - 1 - step : step;
            const float *xt = x + (s->layout ? bt * s->seq + t : t * s->batch + bt) * s->in_size;
            /* g = X W^T + Wb + Rb; hr = H R^T (kept apart for GRU's h gate) */
            for (int64_t j = 0; j < gh; j++) {
                double acc = Wb ? (double)Wb[j] : 0, acc_r = Rb ? (double)Rb[j] : 0;
                const float *wj = W + j * s->in_size, *rj = R + j * hs;
                for (int64_t q = 0; q < s->in_size; q++)
                    acc += (double)xt[q] * wj[q];
                for (int64_t q = 0; q < hs; q++)
                    acc_r += h[q] * rj[q];
                g[j] = acc;
                hr[j] = acc_r;
            }
            if (s->kind == RK_RNN) {
                for (int64_t k = 0; k < hs; k++)
                    h[k] = rnn_apply(&fn[0], rnn_clip(s, g[k] + hr[k]));
            } else if (s->kind == RK_GRU) {
                double *z = g, *rg = g + hs, *hh = g + 2 * hs;
                for (int64_t k = 0; k < hs; k++) {
                    z[k] = rnn_apply(&fn[0], rnn_clip(s, z[k] + hr[k]));
                    rg[k] = rnn_apply(&fn[0], rnn_clip(s, rg[k] + hr[hs + k]));
                }
                if (s->lbr) {
                    for (int64_t k = 0; k < hs; k++)
                        hh[k] += rg[k] * hr[2 * hs + k];
                } else {
                    /* (r . H) Rh^T + Rbh, recomputed with the reset state */
                    const float *Rh = R + 2 * hs * hs;
                    for (int64_t k = 0; k < hs; k++) {
                        double acc = Rb ? (double)Rb[2 * hs + k] : 0;
                        for (int64_t q = 0; q < hs; q++)
                            acc += rg[q] * h[q] * Rh[k * hs + q];
                        hh[k] += acc;
                    }
                }
                for (int64_t k = 0; k < hs; k++) {
                    double cand = rnn_apply(&fn[1], rnn_clip(s, hh[k]));
                    h[k] = (1 - z[k]) * cand + z[k] * h[k];
                }
            } else {
                double *gi = g, *go = g + hs, *gf = g + 2 * hs, *gc = g + 3 * hs;
                for (int64_t k = 0; k < hs; k++) {
                    double iv = gi[k] + hr[k] + (P ? P[k] * c[k] : 0);
                    double fv = gf[k] + hr[2 * hs + k] + (P ? P[2 * hs + k] * c[k] : 0);
                    double i_ = rnn_apply(&fn[0], rnn_clip(s, iv));
                    double f_ = s->input_forget ? 1 - i_ : rnn_apply(&fn[0], rnn_clip(s, fv));
                    double c_ = rnn_apply(&fn[1], rnn_clip(s, gc[k] + hr[3 * hs + k]));
                    c[k] = f_ * c[k] + i_ * c_;
                    double ov = go[k] + hr[hs + k] + (P ? P[hs + k] * c[k] : 0);
                    double o_ = rnn_apply(&fn[0], rnn_clip(s, ov));
                    h[k] = o_ * rnn_apply(&fn[2], c[k]);
                }
            }
            if (y) {
                float *yt = y + (s->layout ? (bt * s->seq + t) * s->n_dirs + d
                                           : (t * s->n_dirs + d) * s->batch + bt) *
                                    hs;
                for (int64_t k = 0; k < hs; k++)
                    yt[k] = (float)h[k];
            }
        }
        for (int64_t k = 0; k < hs; k++) {
            if (yh) yh[ho + k] = (float)h[k];
            if (yc) yc[ho + k] = (float)c[k];
        }
    }
    return QP_OK;
}
