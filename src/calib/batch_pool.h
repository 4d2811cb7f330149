/*
 * Every batch of a provider through a callback, two batches at once on two threads: each
 * worker (its own state: sessions on its own lane, sums) runs alternate batches, and after each
 * round a merge callback sees the workers' results on the calling thread in batch order. At
 * batch 1 on 2 cores, two one-thread engine runs side by side finish sooner than two two-thread
 * runs in turn (a small kernel waits for its second thread), and sums merged per batch in order
 * do not depend on the number of workers.
 *
 *     struct qp_batch_pool bp = {.n_workers = 2, .worker = {&w0, &w1}, .run = run, .merge = merge,
 *                                .user = &totals};
 *     st = qp_batch_pool_run(provider, &bp, &err);
 *
 * The provider's arrays last until its next call, so the pool copies a batch for every worker
 * but the last of a round (memory: one batch per extra worker).
 */
#ifndef QP_CALIB_BATCH_POOL_H
#define QP_CALIB_BATCH_POOL_H

#include <stddef.h>

#include "qplace/array.h"
#include "qplace/calib.h"
#include "qplace/status.h"

#define QP_BATCH_POOL_MAX        2
#define QP_BATCH_POOL_MAX_INPUTS 64

struct qp_batch_pool {
    size_t n_workers;                /* 1 or 2 */
    void *worker[QP_BATCH_POOL_MAX]; /* each worker's state, given to run and merge */
    /* Runs one batch (qp_provider_n_inputs arrays, provider order) on a worker's state; on a
     * worker's thread. */
    enum qp_status (*run)(void *worker, const struct qp_array *batch, struct qp_error *err);
    /* After each round, per worker in batch order, on the calling thread (NULL: none). */
    enum qp_status (*merge)(void *user, void *worker, const struct qp_array *batch,
                            struct qp_error *err);
    void *user;
};

/* Rewinds `p`, then runs every batch. The first error (in batch order) stops the run. */
enum qp_status qp_batch_pool_run(struct qp_provider *p, const struct qp_batch_pool *bp,
                                 struct qp_error *err);

/* 2 when n_threads (0: every core) allows two workers, else 1; *each: threads per worker. */
size_t qp_batch_pool_workers(int n_threads, int *each);

#endif
