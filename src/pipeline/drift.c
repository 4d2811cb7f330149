/* The drift of quantized models against their float model (drift.h). */
#include "pipeline/drift.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "calib/batch_pool.h"
#include "calib/provider.h"
#include "qplace/session.h"
#include "sensitivity/sensitivity.h"

/* One output's sums. */
struct drift_acc {
    double dot, na, nb, max_abs;
    uint64_t rows, agree;
    int top1; /* rank >= 2 and last dim >= 2 */
};

/* Sessions of mf and of every target on one lane, and one batch's sums (n * n_out). */
struct drift_worker {
    const struct drift_run *r;
    struct qp_session *sf, *s[QP_DRIFT_MAX_MODELS];
    struct drift_acc *batch;
};

struct drift_run {
    size_t n, n_out, ns, n_in;
    size_t map[QP_BATCH_POOL_MAX_INPUTS];
    struct drift_worker w[QP_BATCH_POOL_MAX];
    size_t n_workers;
    struct drift_acc *tot;
    uint64_t samples;
};

/* Adds the comparison of sf's and sq's float outputs to acc (n_out entries). */
static enum qp_status compare_outputs(struct qp_session *sf, struct qp_session *sq,
                                      struct drift_acc *acc, size_t n_out, struct qp_error *err) {
    for (size_t i = 0; i < n_out; i++) {
        struct qp_array a, b;
        enum qp_status st = qp_session_output(sf, i, &a, err);
        if (st == QP_OK) st = qp_session_output(sq, i, &b, err);
        if (st != QP_OK) return st;
        if (a.dtype != QP_DTYPE_FLOAT || b.dtype != QP_DTYPE_FLOAT || a.nbytes != b.nbytes)
            continue;
        size_t n = a.nbytes / 4;
        const float *x = a.data, *y = b.data;
        struct drift_acc *d = &acc[i];
        for (size_t k = 0; k < n; k++) {
            d->dot += (double)x[k] * y[k];
            d->na += (double)x[k] * x[k];
            d->nb += (double)y[k] * y[k];
            double e = fabs((double)x[k] - (double)y[k]);
            if (e > d->max_abs || isnan(e)) d->max_abs = e;
        }
        if (a.rank >= 2 && a.dims[a.rank - 1] >= 2) {
            d->top1 = 1;
            size_t c = (size_t)a.dims[a.rank - 1];
            d->rows += n / c;
            d->agree += qp_sens_top1_agree(x, y, n, c);
        }
    }
    return QP_OK;
}

/* Adds one batch's sums into the totals. */
static void acc_add(struct drift_acc *t, const struct drift_acc *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        t[i].dot += b[i].dot;
        t[i].na += b[i].na;
        t[i].nb += b[i].nb;
        if (b[i].max_abs > t[i].max_abs || isnan(b[i].max_abs)) t[i].max_abs = b[i].max_abs;
        t[i].rows += b[i].rows;
        t[i].agree += b[i].agree;
        t[i].top1 |= b[i].top1;
    }
}

/* The sums into the figures. */
static void acc_finish(const struct drift_acc *acc, struct qp_quantize_drift *outs, size_t n) {
    for (size_t i = 0; i < n; i++) {
        struct qp_quantize_drift *d = &outs[i];
        d->cosine = acc[i].na > 0 && acc[i].nb > 0 ? acc[i].dot / sqrt(acc[i].na * acc[i].nb)
                    : acc[i].na == acc[i].nb       ? 1.0
                                                   : 0.0;
        d->max_abs = acc[i].max_abs;
        d->has_top1 = acc[i].top1;
        d->n_rows = acc[i].rows;
        d->top1 = acc[i].rows ? (double)acc[i].agree / (double)acc[i].rows : 0;
    }
}

/* One batch on a worker: mf, then every target, each compared with mf, into w->batch. */
static enum qp_status worker_run(void *p, const struct qp_array *batch, struct qp_error *err) {
    struct drift_worker *w = p;
    const struct drift_run *r = w->r;
    struct qp_array feed[QP_BATCH_POOL_MAX_INPUTS];
    for (size_t i = 0; i < r->ns; i++)
        feed[i] = batch[r->map[i]];
    memset(w->batch, 0, r->n * r->n_out * sizeof *w->batch);
    enum qp_status st = qp_session_run(w->sf, r->ns, feed, err);
    for (size_t k = 0; st == QP_OK && k < r->n; k++)
        if ((st = qp_session_run(w->s[k], r->ns, feed, err)) == QP_OK)
            st = compare_outputs(w->sf, w->s[k], w->batch + k * r->n_out, r->n_out, err);
    return st;
}

/* A worker's batch sums into the totals, in batch order. */
static enum qp_status worker_merge(void *user, void *p, const struct qp_array *batch,
                                   struct qp_error *err) {
    (void)err;
    struct drift_run *r = user;
    const struct drift_worker *w = p;
    acc_add(r->tot, w->batch, r->n * r->n_out);
    r->samples += r->n_in && batch[0].rank > 0 ? (uint64_t)batch[0].dims[0] : 1;
    return QP_OK;
}

/* Worker w's sessions (n_threads each, lane w) and sums. */
static enum qp_status worker_open(struct drift_run *r, size_t w, const struct qp_model *mf,
                                  const struct qp_drift_target *t, int n_threads,
                                  struct qp_error *err) {
    struct drift_worker *wk = &r->w[w];
    struct qp_session_options so = {.n_threads = n_threads, .lane = (int)w};
    /* the quantized models on the exact path: the oracle's bits, faster (runtime/int8.h) */
    struct qp_session_options sq = {.n_threads = n_threads, .lane = (int)w, .int8 = QP_INT8_EXACT};
    wk->r = r;
    enum qp_status st = qp_session_create(mf, &so, 0, NULL, &wk->sf, err);
    for (size_t k = 0; st == QP_OK && k < r->n; k++)
        if ((st = qp_session_create(t[k].m, &sq, 0, NULL, &wk->s[k], err)) != QP_OK)
            qp_error_prefix(err, "quantize: the quantized model does not run in the engine");
    if (st != QP_OK) return st;
    size_t n_out = qp_session_n_outputs(wk->sf);
    if (!(wk->batch = calloc(r->n * (n_out ? n_out : 1), sizeof *wk->batch)))
        return qp_error_set(err, QP_ERR_NOMEM, "quantize: out of memory");
    return QP_OK;
}

enum qp_status qp_drift_measure(const struct qp_model *mf, const struct qp_drift_target *t,
                                size_t n, struct qp_provider *data, int n_threads,
                                size_t *n_outputs, uint64_t *n_samples, struct qp_error *err) {
    if (!mf || (n && !t) || n > QP_DRIFT_MAX_MODELS || !data || !n_outputs || !n_samples)
        return qp_error_set(err, QP_ERR_USAGE, "quantize: drift: bad arguments");
    *n_outputs = 0;
    *n_samples = 0;
    int each = 1;
    struct drift_run r = {.n = n,
                          .n_workers = qp_batch_pool_workers(n_threads, &each),
                          .n_in = qp_provider_n_inputs(data)};
    enum qp_status st = QP_OK;
    for (size_t w = 0; st == QP_OK && w < r.n_workers; w++)
        st = worker_open(&r, w, mf, t, each, err);
    if (st != QP_OK) goto done;
    r.n_out = qp_session_n_outputs(r.w[0].sf);
    r.ns = qp_session_n_inputs(r.w[0].sf);
    *n_outputs = r.n_out;
    if (r.ns > QP_BATCH_POOL_MAX_INPUTS) {
        st = qp_error_set(err, QP_ERR_UNSUPPORTED, "quantize: more than %d model inputs",
                          QP_BATCH_POOL_MAX_INPUTS);
        goto done;
    }
    for (size_t k = 0; k < n; k++) {
        if (!(*t[k].outs = calloc(r.n_out ? r.n_out : 1, sizeof **t[k].outs))) goto nomem;
        for (size_t i = 0; i < r.n_out; i++)
            if (!((*t[k].outs)[i].name = strdup(qp_session_output_name(r.w[0].sf, i)))) goto nomem;
    }
    if (!(r.tot = calloc(n * (r.n_out ? r.n_out : 1), sizeof *r.tot))) goto nomem;
    if ((st = qp_provider_map_inputs(data, r.w[0].sf, "quantize", r.map, err)) != QP_OK) goto done;
    struct qp_batch_pool bp = {.n_workers = r.n_workers,
                               .worker = {&r.w[0], &r.w[1]},
                               .run = worker_run,
                               .merge = worker_merge,
                               .user = &r};
    st = qp_batch_pool_run(data, &bp, err);
    *n_samples = r.samples;
    for (size_t k = 0; st == QP_OK && k < n; k++)
        acc_finish(r.tot + k * r.n_out, *t[k].outs, r.n_out);
    goto done;
nomem:
    st = qp_error_set(err, QP_ERR_NOMEM, "quantize: out of memory");
done:
    for (size_t w = 0; w < r.n_workers; w++) {
        for (size_t k = 0; k < n; k++)
            qp_session_free(r.w[w].s[k]);
        qp_session_free(r.w[w].sf);
        free(r.w[w].batch);
    }
    free(r.tot);
    return st;
}
