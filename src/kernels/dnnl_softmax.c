/*
 * Softmax on oneDNN's softmax primitive (vectorized exp and reductions), for float32 inputs
 * viewed as [outer, axis, inner] (opset >= 13: one axis; before 13: the input coerced to 2-D at
 * `axis`). Each row is reduced by one thread in the primitive's fixed order; the primitive for
 * the session's thread count is cached (dnnl_util.h) and the 1-thread one is made at prepare, so
 * its availability at run is known. When oneDNN is disabled or cannot take the shape, the
 * reference kernel (norm.c) runs instead, on a copy of the reference's state kept inside ours
 * (the runtime frees states with free(), so ours cannot own a second allocation).
 * Contiguous rows (inner 1) run vecmath's softmax instead of the primitive when the CPU has
 * AVX2+FMA: faster on short rows, and each row is still computed by one thread in a fixed order.
 */
#include <malloc.h>
#include <omp.h>
#include <stddef.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/dnnl_softmax.h"
#include "kernels/dnnl_util.h"
#include "kernels/kernels.h"
#include "kernels/kcheck.h"
#include "kernels/vecmath.h"
#include "qmath/qparams.h"

struct sm_key {
    int32_t nthr, lane; /* lane: qp_krun.lane (0 for the primary entry) */
    int64_t outer, axis, inner;
};

struct sm_entry {
    int nthr;
    dnnl_primitive_t prim;
    dnnl_memory_desc_t md;
    dnnl_memory_t m_src, m_dst;
    dnnl_stream_t stream;
    pthread_mutex_t lock;
};

struct dnnl_sm_state {
    struct sm_key key;
    struct sm_entry *entry; /* NULL: reference kernel on `ref` */
    max_align_t ref[];
};

/* The reference prepare, its state copied into ours. */
static enum qp_status fallback_prepare(struct qp_kprep *p) {
    enum qp_status st = qp_k_softmax_prepare(p);
    if (st) return st;
    size_t n = p->state ? malloc_usable_size(p->state) : 0;
    struct dnnl_sm_state *s = calloc(1, sizeof *s + n);
    if (!s) return qp_error_set(p->err, QP_ERR_NOMEM, "out of memory");
    if (n) memcpy(s->ref, p->state, n);
    free(p->state);
    p->state = s;
    return QP_OK;
}

static void *sm_build(const void *key_, void *ctx) {
    (void)ctx;
    const struct sm_key *k = key_;
    struct sm_entry *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->nthr = k->nthr;
    dnnl_engine_t eng = qp_dnnl_engine();
    int saved = qp_dnnl_threads_push(k->nthr);
    dnnl_dims_t dims = {k->outer, k->axis, k->inner};
    dnnl_softmax_desc_t sd;
    dnnl_primitive_desc_t pd = NULL;
    int ok =
        dnnl_memory_desc_init_by_tag(&e->md, 3, dims, dnnl_f32, dnnl_abc) == dnnl_success &&
        dnnl_softmax_forward_desc_init(&sd, dnnl_forward_inference, &e->md, 1) == dnnl_success &&
        dnnl_primitive_desc_create(&pd, &sd, NULL, eng, NULL) == dnnl_success &&
        dnnl_primitive_create(&e->prim, pd) == dnnl_success &&
        dnnl_memory_create(&e->m_src, &e->md, eng, DNNL_MEMORY_NONE) == dnnl_success &&
        dnnl_memory_create(&e->m_dst, &e->md, eng, DNNL_MEMORY_NONE) == dnnl_success &&
        dnnl_stream_create(&e->stream, eng, dnnl_stream_default_flags) == dnnl_success &&
        pthread_mutex_init(&e->lock, NULL) == 0;
    /* The primitive must not need scratchpad memory (it would allocate at run). */
    if (ok && pd) {
        const dnnl_memory_desc_t *scr =
            dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        if (scr && qp_dnnl_md_bytes(scr) != 0) ok = 0;
    }
    dnnl_primitive_desc_destroy(pd);
    qp_dnnl_threads_pop(saved);
    if (!ok) {
        dnnl_primitive_destroy(e->prim);
        dnnl_memory_destroy(e->m_src);
        dnnl_memory_destroy(e->m_dst);
        dnnl_stream_destroy(e->stream);
        free(e);
        return NULL;
    }
    return e;
}

static struct sm_entry *sm_entry_for(const struct sm_key *primary, int nthr, int lane) {
    struct sm_key k = *primary;
    k.nthr = nthr;
    k.lane = lane;
    return qp_dnnl_cache_get(&k, sizeof k, sm_build, NULL);
}

enum qp_status qp_k_dnnl_softmax_prepare(struct qp_kprep *p) {
    if (!qp_dnnl_enabled() || !p->in[0] || p->in[0]->dtype != QP_DTYPE_FLOAT || p->in[0]->rank == 0)
        return fallback_prepare(p);
    const struct qp_kt *x = p->in[0];
    int64_t axis;
    int64_t def = p->opset >= 13 ? -1 : 1;
    enum qp_status st =
        qp_kaxis(qp_kattr_int(p->node, "axis", def), x->rank, &axis, "axis", p->err);
    if (st) return st;
    struct sm_key key;
    memset(&key, 0, sizeof key);
    key.outer = key.axis = key.inner = 1;
    for (int i = 0; i < axis; i++)
        key.outer *= x->dims[i];
    if (p->opset >= 13) {
        key.axis = x->dims[axis];
        for (int i = (int)axis + 1; i < x->rank; i++)
            key.inner *= x->dims[i];
    } else {
        for (int i = (int)axis; i < x->rank; i++)
            key.axis *= x->dims[i];
    }
    key.nthr = qp_dnnl_default_threads();
    struct sm_entry *e = x->numel ? sm_entry_for(&key, key.nthr, 0) : NULL;
    if (e && key.nthr != 1 && !sm_entry_for(&key, 1, 0)) e = NULL;
    if (!e) return fallback_prepare(p);
    st = qp_kt_set(p->out[0], QP_DTYPE_FLOAT, x->rank, x->dims, p->err);
    if (st) return st;
    struct dnnl_sm_state *s = calloc(1, sizeof *s);
    if (!s) return qp_error_set(p->err, QP_ERR_NOMEM, "out of memory");
    s->key = key;
    s->entry = e;
    p->state = s;
    return QP_OK;
}

/* 1 when every element is finite: an integer test on the exponent bits, which vectorizes (the
 * NaN-row scan below it does not), in blocks so that a non-finite value stops early. */
static int all_finite(const float *x, int64_t n) {
    for (int64_t i0 = 0; i0 < n; i0 += 4096) {
        int64_t i1 = n - i0 < 4096 ? n : i0 + 4096;
        uint32_t bad = 0;
        for (int64_t i = i0; i < i1; i++) {
            uint32_t b;
            memcpy(&b, x + i, sizeof b);
            bad |= (uint32_t)((b & 0x7f800000u) == 0x7f800000u);
        }
        if (bad) return 0;
    }
    return 1;
}

/* Softmax over contiguous rows on vecmath (about 3x faster than the primitive on ViT-tiny's
 * 197-element rows): rows shared out whole among threads, then the NaN-row fix-up. 0 when
 * vecmath has no fast code here. */
static int softmax_rows_fast(const struct qp_krun *r, int64_t rows, int64_t n) {
    const float *x = r->in[0]->data;
    float *y = r->out[0]->data;
    int nt = rows * n < 32768 ? 1 : r->n_threads;
    int ok = 1, finite = 1;
    /* each thread also checks its own rows for non-finite values (while they are in its
     * cache): a serial pass after the parallel one read the whole input again on one thread */
#pragma omp parallel num_threads(nt) if (nt > 1) reduction(& : ok, finite)
    {
        int64_t lo, hi;
        qp_ksplit(rows, omp_get_num_threads(), omp_get_thread_num(), &lo, &hi);
        ok = qp_vf_softmax_rows(x + lo * n, y + lo * n, hi - lo, n);
        finite = !ok || all_finite(x + lo * n, (hi - lo) * n);
    }
    if (!ok) return 0;
    if (!finite) qp_k_softmax_nan_rows(x, y, rows, n, 1);
    return 1;
}

/* QP_INT8_DOMAIN "SoftmaxQuantize" (x, scale, zero_point; axis -1): a Softmax over the last axis
 * whose only reader is a QuantizeLinear with per-tensor int8/uint8 parameters
 * (runtime/int8_move.c), in one step: each thread computes blocks of SQ_ROWS rows into scratch
 * (vecmath's softmax and the NaN-row fix-up, the Softmax row's code) and quantizes them while
 * they are in cache. The same values as the two nodes. */
struct sq_state {
    int64_t rows, n;
    enum qp_dtype qtype;
};

#define SQ_ROWS 16

int qp_softmax_quantize_available(void) {
    return qp_vf_softmax_available();
}

enum qp_status qp_k_softmax_quantize_prepare(struct qp_kprep *p) {
    enum qp_status st = qp_kneed(p, 0);
    if (!st) st = qp_kneed_const(p, 1, "scale");
    if (st) return st;
    const struct qp_kt *x = p->in[0], *sc = p->in[1];
    const struct qp_kt *zp = p->n_in > 2 ? p->in[2] : NULL;
    if (x->dtype != QP_DTYPE_FLOAT || x->rank < 1 || sc->dtype != QP_DTYPE_FLOAT ||
        sc->numel != 1 || (zp && zp->numel != 1) || qp_kattr_int(p->node, "axis", -1) != -1 ||
        !qp_softmax_quantize_available())
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED,
                            "SoftmaxQuantize takes float data over its last axis (axis -1) and a "
                            "per-tensor float scale");
    struct sq_state s = {.n = x->dims[x->rank - 1], .qtype = zp ? zp->dtype : QP_DTYPE_UINT8};
    s.rows = s.n ? (int64_t)x->numel / s.n : 0;
    if (s.qtype != QP_DTYPE_INT8 && s.qtype != QP_DTYPE_UINT8)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "SoftmaxQuantize to %s",
                            qp_dtype_name(s.qtype));
    st = qp_kt_set(p->out[0], s.qtype, x->rank, x->dims, p->err);
    if (st) return st;
    p->scratch = (size_t)x->numel * sizeof(float);
    return qp_ksave_state(p, &s, sizeof s);
}

enum qp_status qp_k_softmax_quantize_run(const struct qp_krun *r) {
    const struct sq_state *s = r->state;
    const float *x = r->in[0]->data;
    float *buf = r->scratch;
    void *y = r->out[0]->data;
    struct qp_qspec q = qp_qspec_per_tensor(s->qtype, s->rows * s->n, r->in[1]->data,
                                            r->n_in > 2 && r->in[2] ? r->in[2]->data : NULL);
    int64_t n = s->n;
    int nt = s->rows * n < 32768 ? 1 : r->n_threads;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int64_t lo, hi;
        qp_ksplit(s->rows, omp_get_num_threads(), omp_get_thread_num(), &lo, &hi);
        for (int64_t r0 = lo; r0 < hi; r0 += SQ_ROWS) {
            int64_t m = hi - r0 < SQ_ROWS ? hi - r0 : SQ_ROWS;
            qp_vf_softmax_rows(x + r0 * n, buf + r0 * n, m, n);
            if (!all_finite(x + r0 * n, m * n))
                qp_k_softmax_nan_rows(x + r0 * n, buf + r0 * n, m, n, 1);
            qp_quantize_f32(&q, buf, y, r0 * n, (r0 + m) * n);
        }
    }
    return QP_OK;
}

enum qp_status qp_k_dnnl_softmax_run(const struct qp_krun *r) {
    const struct dnnl_sm_state *s = r->state;
    if (!s->entry) {
        struct qp_krun rr = *r;
        rr.state = s->ref;
        return qp_k_softmax_run(&rr);
    }
    if (s->key.inner == 1 && softmax_rows_fast(r, s->key.outer, s->key.axis)) return QP_OK;
    struct sm_entry *e = r->n_threads == s->key.nthr && !r->lane
                             ? s->entry
                             : sm_entry_for(&s->key, r->n_threads, r->lane);
    if (!e)
        return qp_error_set(r->err, QP_ERR_NOMEM, "no oneDNN softmax primitive for %d threads",
                            r->n_threads);
    pthread_mutex_lock(&e->lock);
    int saved = qp_dnnl_threads_push(e->nthr);
    dnnl_memory_set_data_handle(e->m_src, r->in[0]->data);
    dnnl_memory_set_data_handle(e->m_dst, r->out[0]->data);
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_SRC, e->m_src}, {DNNL_ARG_DST, e->m_dst}};
    dnnl_status_t rc = dnnl_primitive_execute(e->prim, e->stream, 2, args);
    if (rc == dnnl_success) rc = dnnl_stream_wait(e->stream);
    qp_dnnl_threads_pop(saved);
    pthread_mutex_unlock(&e->lock);
    if (rc != dnnl_success)
        return qp_error_set(r->err, QP_ERR_INTERNAL, "oneDNN softmax failed (status %d)", (int)rc);
    /* oneDNN's max reduction drops NaN; give the rows ONNX Runtime gives NaN for NaN (rows with
     * NaN, +inf, or only -inf: none when every input is finite). */
    if (!all_finite(r->in[0]->data, (int64_t)r->in[0]->numel))
        qp_k_softmax_nan_rows(r->in[0]->data, r->out[0]->data, s->key.outer, s->key.axis,
                              s->key.inner);
    return QP_OK;
}

int qp_dnnl_softmax_state_uses_dnnl(const void *state) {
    return state && ((const struct dnnl_sm_state *)state)->entry != NULL;
}
