#include "core/size.h"
#include "runtime/memplan.h"

#include <stdint.h>
#include <stdlib.h>

struct hole {
    size_t off, size;
};

struct order {
    int key;
    size_t idx;
};

static int cmp_order(const void *a, const void *b) {
    const struct order *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->idx < y->idx ? -1 : (x->idx > y->idx);
}

/* Inserts a freed block into the sorted hole list, merging neighbours. */
static void hole_free(struct hole *h, size_t *nh, size_t off, size_t size) {
    size_t i = 0;
    while (i < *nh && h[i].off < off)
        i++;
    for (size_t k = *nh; k > i; k--)
        h[k] = h[k - 1];
    h[i].off = off;
    h[i].size = size;
    (*nh)++;
    if (i + 1 < *nh && h[i].off + h[i].size == h[i + 1].off) {
        h[i].size += h[i + 1].size;
        for (size_t k = i + 1; k + 1 < *nh; k++)
            h[k] = h[k + 1];
        (*nh)--;
    }
    if (i > 0 && h[i - 1].off + h[i - 1].size == h[i].off) {
        h[i - 1].size += h[i].size;
        for (size_t k = i; k + 1 < *nh; k++)
            h[k] = h[k + 1];
        (*nh)--;
    }
}

/* Request ri (`size` bytes once aligned) in the bytes of the request it asks to take, when that
 * one dies at ri's first step, started before it, still holds at least `size` bytes and was
 * not taken already: 1 and the bytes handed on (block), else 0. */
static int take_over(struct qp_mem_req *reqs, size_t n, size_t ri, size_t *block, size_t size) {
    struct qp_mem_req *r = &reqs[ri];
    if (!r->take || r->take > n || r->take - 1 == ri) return 0;
    size_t j = r->take - 1;
    if (reqs[j].last != r->first || reqs[j].first >= r->first || block[j] < size || !size) return 0;
    r->offset = reqs[j].offset;
    block[ri] = block[j];
    block[j] = 0;
    return 1;
}

enum qp_status qp_memplan(struct qp_mem_req *reqs, size_t n, size_t align, size_t *total_out,
                          struct qp_error *err) {
    enum qp_status st = QP_OK;
    struct order *by_first = NULL, *by_last = NULL;
    struct hole *holes = NULL;
    size_t *block = NULL; /* the bytes each request frees at its last step (0: handed on) */
    size_t nh = 0, top = 0;
    *total_out = 0;
    if (n == 0) return QP_OK;
    /* n + 1 cannot wrap: reqs holds n entries. */
    by_first = qp_malloc_n(n, sizeof *by_first);
    by_last = qp_malloc_n(n, sizeof *by_last);
    holes = qp_malloc_n(n + 1, sizeof *holes);
    block = qp_malloc_n(n, sizeof *block);
    if (!by_first || !by_last || !holes || !block) {
        st = qp_error_set(err, QP_ERR_NOMEM, "memplan: out of memory");
        goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        if (reqs[i].first > reqs[i].last) {
            st =
                qp_error_set(err, QP_ERR_INTERNAL, "memplan: tensor %zu dies before it is made", i);
            goto fail;
        }
        if (reqs[i].size > SIZE_MAX - align) {
            st = qp_error_set(err, QP_ERR_NOMEM, "memplan: tensor too large");
            goto fail;
        }
        by_first[i] = (struct order){reqs[i].first, i};
        by_last[i] = (struct order){reqs[i].last, i};
    }
    qsort(by_first, n, sizeof *by_first, cmp_order);
    qsort(by_last, n, sizeof *by_last, cmp_order);
    size_t fi = 0, li = 0;
    while (fi < n || li < n) {
        int step = fi < n ? by_first[fi].key : by_last[li].key;
        if (li < n && by_last[li].key < step) step = by_last[li].key;
        for (; fi < n && by_first[fi].key == step; fi++) {
            size_t ri = by_first[fi].idx;
            struct qp_mem_req *r = &reqs[ri];
            size_t size = (r->size + align - 1) & ~(align - 1);
            block[ri] = size;
            if (take_over(reqs, n, ri, block, size)) continue;
            size_t best = SIZE_MAX;
            for (size_t h = 0; h < nh; h++)
                if (holes[h].size >= size && (best == SIZE_MAX || holes[h].size < holes[best].size))
                    best = h;
            if (size == 0) {
                r->offset = 0;
            } else if (best != SIZE_MAX) {
                r->offset = holes[best].off;
                holes[best].off += size;
                holes[best].size -= size;
                if (holes[best].size == 0) {
                    for (size_t k = best; k + 1 < nh; k++)
                        holes[k] = holes[k + 1];
                    nh--;
                }
            } else if (nh > 0 && holes[nh - 1].off + holes[nh - 1].size == top) {
                /* Grow the topmost hole instead of leaving it unused. */
                r->offset = holes[nh - 1].off;
                if (r->offset > SIZE_MAX - size) {
                    st = qp_error_set(err, QP_ERR_NOMEM, "memplan: arena size overflows");
                    goto fail;
                }
                top = r->offset + size;
                nh--;
            } else {
                if (top > SIZE_MAX - size) {
                    st = qp_error_set(err, QP_ERR_NOMEM, "memplan: arena size overflows");
                    goto fail;
                }
                r->offset = top;
                top += size;
            }
        }
        for (; li < n && by_last[li].key == step; li++) {
            size_t ri = by_last[li].idx;
            if (block[ri]) hole_free(holes, &nh, reqs[ri].offset, block[ri]);
        }
    }
    *total_out = top;
fail:
    free(by_first);
    free(by_last);
    free(holes);
    free(block);
    return st;
}
