/* Every batch of a provider through a callback, two at once (batch_pool.h). */
#include "calib/batch_pool.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A worker's batch of one round: a copy, or the provider's arrays (the round's last). */
struct slot {
    const struct qp_batch_pool *bp;
    size_t w;
    struct qp_array arrays[QP_BATCH_POOL_MAX_INPUTS];
    const struct qp_array *batch;
    unsigned char *copy;
    size_t cap;
    enum qp_status st;
    struct qp_error err;
};

static enum qp_status copy_batch(struct slot *s, const struct qp_array *batch, size_t n,
                                 struct qp_error *err) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += (batch[i].nbytes + 63) & ~(size_t)63;
    if (total > s->cap) {
        free(s->copy);
        s->cap = 0;
        if (!(s->copy = malloc(total ? total : 1)))
            return qp_error_set(err, QP_ERR_NOMEM, "calibration data: out of memory");
        s->cap = total;
    }
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        s->arrays[i] = batch[i];
        s->arrays[i].owned = 0;
        if (batch[i].nbytes) memcpy(s->copy + off, batch[i].data, batch[i].nbytes);
        s->arrays[i].data = s->copy + off;
        off += (batch[i].nbytes + 63) & ~(size_t)63;
    }
    s->batch = s->arrays;
    return QP_OK;
}

static void *slot_main(void *p) {
    struct slot *s = p;
    s->st = s->bp->run(s->bp->worker[s->w], s->batch, &s->err);
    return NULL;
}

/* One round: up to n_workers batches run side by side, then merged in order. */
static enum qp_status round_run(struct qp_provider *p, const struct qp_batch_pool *bp,
                                struct slot *slots, int *end, struct qp_error *err) {
    size_t n_in = qp_provider_n_inputs(p), busy = 0;
    enum qp_status st = QP_OK;
    while (busy < bp->n_workers) {
        const struct qp_array *batch = NULL;
        if ((st = qp_provider_next(p, &batch, end, err)) != QP_OK || *end) break;
        struct slot *s = &slots[busy];
        s->err = (struct qp_error){0};
        if (busy + 1 < bp->n_workers) {
            if ((st = copy_batch(s, batch, n_in, err)) != QP_OK) return st;
        } else {
            s->batch = batch;
        }
        busy++;
    }
    if (st != QP_OK) return st;
    pthread_t th[QP_BATCH_POOL_MAX];
    size_t started = 0; /* slots 1..started run on threads */
    while (started + 1 < busy &&
           pthread_create(&th[started + 1], NULL, slot_main, &slots[started + 1]) == 0)
        started++;
    if (busy) slot_main(&slots[0]);
    for (size_t k = 1; k <= started; k++)
        pthread_join(th[k], NULL);
    for (size_t k = started + 1; k < busy; k++) /* threads that did not start */
        slot_main(&slots[k]);
    for (size_t k = 0; k < busy; k++) {
        if (slots[k].st != QP_OK) {
            if (err) *err = slots[k].err;
            return slots[k].st;
        }
        if (bp->merge && (st = bp->merge(bp->user, bp->worker[k], slots[k].batch, err)) != QP_OK)
            return st;
    }
    return QP_OK;
}

enum qp_status qp_batch_pool_run(struct qp_provider *p, const struct qp_batch_pool *bp,
                                 struct qp_error *err) {
    if (!p || !bp || !bp->run || bp->n_workers < 1 || bp->n_workers > QP_BATCH_POOL_MAX)
        return qp_error_set(err, QP_ERR_USAGE, "batch pool: bad arguments");
    if (qp_provider_n_inputs(p) > QP_BATCH_POOL_MAX_INPUTS)
        return qp_error_set(err, QP_ERR_UNSUPPORTED, "calibration data: more than %d inputs",
                            QP_BATCH_POOL_MAX_INPUTS);
    struct slot slots[QP_BATCH_POOL_MAX];
    memset(slots, 0, sizeof slots);
    for (size_t k = 0; k < bp->n_workers; k++) {
        slots[k].bp = bp;
        slots[k].w = k;
    }
    enum qp_status st = qp_provider_reset(p, err);
    for (int end = 0; st == QP_OK && !end;)
        st = round_run(p, bp, slots, &end, err);
    for (size_t k = 0; k < bp->n_workers; k++)
        free(slots[k].copy);
    return st;
}

size_t qp_batch_pool_workers(int n_threads, int *each) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int t = n_threads > 0 ? n_threads : (cores > 0 ? (int)cores : 1);
    size_t n = t >= 2 ? 2 : 1;
    *each = t / (int)n;
    return n;
}
