/*
 * Add, Sub, Mul and Div of float32 tensors on oneDNN's binary primitive (vectorized, with
 * per-channel / row / scalar broadcasting of the second operand). Each output element is one
 * IEEE operation on the same two values as in the reference kernel (elementwise.c), so results
 * are bit-identical to it and do not depend on the thread count. The reference prepare validates
 * and sets the output; its state is copied into ours (the runtime frees states with free(), so
 * ours cannot own a second allocation) and the reference run is used for everything oneDNN's
 * binary does not take: other dtypes, opset < 7 broadcasting, a first operand that broadcasts
 * (Sub/Div; Add/Mul swap their operands), empty tensors.
 */
#include <malloc.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/dnnl_binary.h"
#include "kernels/dnnl_util.h"
#include "kernels/kernels.h"

/* Below this many output elements one thread does the whole op (as the reference kernels). */
#define BIN_PARALLEL_MIN 65536

struct bin_key {
    int32_t alg, nthr, rank, lane; /* lane: qp_krun.lane (0 for the primary entry) */
    int64_t d0[QP_MAX_RANK], d1[QP_MAX_RANK];
};

struct bin_entry {
    int nthr;
    dnnl_primitive_t prim;
    dnnl_memory_t m0, m1, md;
    dnnl_stream_t stream;
    pthread_mutex_t lock;
};

struct dnnl_bin_state {
    struct bin_key key;      /* nthr: the count prepare made the entry for */
    struct bin_entry *entry; /* NULL: reference kernel on `ref` */
    int swap;                /* operands swapped (Add, Mul) */
    max_align_t ref[];
};

static void *bin_build(const void *key_, void *ctx) {
    (void)ctx;
    const struct bin_key *k = key_;
    struct bin_entry *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->nthr = k->nthr;
    dnnl_engine_t eng = qp_dnnl_engine();
    int saved = qp_dnnl_threads_push(k->nthr);
    dnnl_dims_t d0, d1;
    for (int i = 0; i < k->rank; i++) {
        d0[i] = k->d0[i];
        d1[i] = k->d1[i];
    }
    static const dnnl_format_tag_t plain[] = {dnnl_a,     dnnl_ab,     dnnl_abc,     dnnl_abcd,
                                              dnnl_abcde, dnnl_abcdef, dnnl_abcdefg, dnnl_abcdefgh};
    dnnl_memory_desc_t md0, md1;
    dnnl_binary_desc_t bd;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_format_tag_t tag = plain[k->rank - 1];
    int ok =
        dnnl_memory_desc_init_by_tag(&md0, k->rank, d0, dnnl_f32, tag) == dnnl_success &&
        dnnl_memory_desc_init_by_tag(&md1, k->rank, d1, dnnl_f32, tag) == dnnl_success &&
        dnnl_binary_desc_init(&bd, (dnnl_alg_kind_t)k->alg, &md0, &md1, &md0) == dnnl_success &&
        dnnl_primitive_desc_create(&pd, &bd, NULL, eng, NULL) == dnnl_success &&
        dnnl_primitive_create(&e->prim, pd) == dnnl_success &&
        dnnl_memory_create(&e->m0, &md0, eng, DNNL_MEMORY_NONE) == dnnl_success &&
        dnnl_memory_create(&e->m1, &md1, eng, DNNL_MEMORY_NONE) == dnnl_success &&
        dnnl_memory_create(&e->md, &md0, eng, DNNL_MEMORY_NONE) == dnnl_success &&
        dnnl_stream_create(&e->stream, eng, dnnl_stream_default_flags) == dnnl_success &&
        pthread_mutex_init(&e->lock, NULL) == 0;
    if (ok) {
        const dnnl_memory_desc_t *scr =
            dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        if (scr && qp_dnnl_md_bytes(scr) != 0) ok = 0; /* would allocate at run */
    }
    dnnl_primitive_desc_destroy(pd);
    qp_dnnl_threads_pop(saved);
    if (!ok) {
        dnnl_primitive_destroy(e->prim);
        dnnl_memory_destroy(e->m0);
        dnnl_memory_destroy(e->m1);
        dnnl_memory_destroy(e->md);
        dnnl_stream_destroy(e->stream);
        free(e);
        return NULL;
    }
    return e;
}

static struct bin_entry *bin_entry_for(const struct bin_key *primary, int nthr, int lane) {
    struct bin_key k = *primary;
    k.nthr = nthr;
    k.lane = lane;
    return qp_dnnl_cache_get(&k, sizeof k, bin_build, NULL);
}

static int alg_of(const char *op, int *commutes) {
    *commutes = 1;
    if (strcmp(op, "Add") == 0) return dnnl_binary_add;
    if (strcmp(op, "Mul") == 0) return dnnl_binary_mul;
    *commutes = 0;
    if (strcmp(op, "Sub") == 0) return dnnl_binary_sub;
    if (strcmp(op, "Div") == 0) return dnnl_binary_div;
    return -1;
}

enum qp_status qp_k_dnnl_binary_prepare(struct qp_kprep *p) {
    enum qp_status st = qp_k_binary_prepare(p);
    if (st) return st;
    size_t n = p->state ? malloc_usable_size(p->state) : 0;
    struct dnnl_bin_state *s = calloc(1, sizeof *s + n);
    if (!s) return qp_error_set(p->err, QP_ERR_NOMEM, "out of memory");
    if (n) memcpy(s->ref, p->state, n);
    free(p->state);
    p->state = s;
    int commutes, alg = alg_of(p->node->op_type, &commutes);
    const struct qp_kt *a = p->in[0], *b = p->in[1], *y = p->out[0];
    if (!qp_dnnl_enabled() || alg < 0 || p->opset < 7 || p->n_in != 2 || !a || !b ||
        a->dtype != QP_DTYPE_FLOAT || b->dtype != QP_DTYPE_FLOAT || y->numel == 0)
        return QP_OK;
    int r = y->rank > 0 ? y->rank : 1;
    struct bin_key key;
    memset(&key, 0, sizeof key);
    key.alg = alg;
    key.rank = r;
    /* Operands right-aligned to the output's rank (numpy broadcasting). */
    for (int i = 0; i < r; i++) {
        int ia = i - (r - a->rank), ib = i - (r - b->rank);
        key.d0[i] = ia >= 0 ? a->dims[ia] : 1;
        key.d1[i] = ib >= 0 ? b->dims[ib] : 1;
    }
    int a_full = 1, b_full = 1;
    for (int i = 0; i < r; i++) {
        int64_t yd = y->rank > 0 ? y->dims[i] : 1;
        a_full &= key.d0[i] == yd;
        b_full &= key.d1[i] == yd;
    }
    if (!a_full) {
        if (!commutes || !b_full) return QP_OK;
        int64_t t[QP_MAX_RANK];
        memcpy(t, key.d0, sizeof t);
        memcpy(key.d0, key.d1, sizeof t);
        memcpy(key.d1, t, sizeof t);
        s->swap = 1;
    }
    key.nthr = y->numel < BIN_PARALLEL_MIN ? 1 : qp_dnnl_default_threads();
    struct bin_entry *e = bin_entry_for(&key, key.nthr, 0);
    if (e && key.nthr != 1 && !bin_entry_for(&key, 1, 0)) e = NULL;
    s->key = key;
    s->entry = e;
    return QP_OK;
}

enum qp_status qp_k_dnnl_binary_run(const struct qp_krun *r) {
    const struct dnnl_bin_state *s = r->state;
    struct bin_entry *e = s->entry;
    int nthr = s->key.nthr == 1 ? 1 : r->n_threads;
    if (e && (nthr != s->key.nthr || r->lane)) e = bin_entry_for(&s->key, nthr, r->lane);
    if (!e) {
        if (s->entry)
            return qp_error_set(r->err, QP_ERR_NOMEM, "no oneDNN binary primitive for %d threads",
                                r->n_threads);
        struct qp_krun rr = *r;
        rr.state = s->ref;
        return qp_k_binary_run(&rr);
    }
    void *x0 = r->in[s->swap ? 1 : 0]->data, *x1 = r->in[s->swap ? 0 : 1]->data;
    pthread_mutex_lock(&e->lock);
    int saved = qp_dnnl_threads_push(e->nthr);
    dnnl_memory_set_data_handle(e->m0, x0);
    dnnl_memory_set_data_handle(e->m1, x1);
    dnnl_memory_set_data_handle(e->md, r->out[0]->data);
    dnnl_exec_arg_t args[3] = {
        {DNNL_ARG_SRC_0, e->m0}, {DNNL_ARG_SRC_1, e->m1}, {DNNL_ARG_DST, e->md}};
    dnnl_status_t rc = dnnl_primitive_execute(e->prim, e->stream, 3, args);
    if (rc == dnnl_success) rc = dnnl_stream_wait(e->stream);
    qp_dnnl_threads_pop(saved);
    pthread_mutex_unlock(&e->lock);
    if (rc != dnnl_success)
        return qp_error_set(r->err, QP_ERR_INTERNAL, "oneDNN binary failed (status %d)", (int)rc);
    return QP_OK;
}

int qp_dnnl_binary_state_uses_dnnl(const void *state) {
    return state && ((const struct dnnl_bin_state *)state)->entry != NULL;
}
