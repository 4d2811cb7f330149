#include "core/arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/size.h"

struct arena_block {
    struct arena_block *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
};

struct qp_arena {
    struct arena_block *head;
    size_t bytes;
};

#define ARENA_BLOCK_MIN ((size_t)64 * 1024)

struct qp_arena *qp_arena_create(void) {
    return calloc(1, sizeof(struct qp_arena));
}

void qp_arena_free(struct qp_arena *a) {
    if (!a) return;
    struct arena_block *b = a->head;
    while (b) {
        struct arena_block *next = b->next;
        free(b);
        b = next;
    }
    free(a);
}

void *qp_arena_alloc(struct qp_arena *a, size_t n) {
    if (n > SIZE_MAX - 15) return NULL;
    size_t need = (n + 15) & ~(size_t)15;
    if (need == 0) need = 16;
    struct arena_block *b = a->head;
    if (!b || b->size - b->used < need) {
        /* Large requests get a block of their own, placed behind the current one so the
         * current block's free space is not wasted. */
        size_t size = need > ARENA_BLOCK_MIN / 4 ? need : ARENA_BLOCK_MIN;
        if (size > SIZE_MAX - sizeof(struct arena_block)) return NULL;
        struct arena_block *nb = malloc(sizeof(struct arena_block) + size);
        if (!nb) return NULL;
        nb->size = size;
        nb->used = 0;
        a->bytes += sizeof(struct arena_block) + size;
        if (b && size != ARENA_BLOCK_MIN) {
            nb->next = b->next;
            b->next = nb;
        } else {
            nb->next = b;
            a->head = nb;
        }
        b = nb;
    }
    void *p = b->data + b->used;
    b->used += need;
    memset(p, 0, n);
    return p;
}

void *qp_arena_calloc(struct qp_arena *a, size_t n, size_t size) {
    size_t bytes;
    if (!qp_size_mul(n, size, &bytes)) return NULL;
    return qp_arena_alloc(a, bytes);
}

char *qp_arena_strndup(struct qp_arena *a, const char *s, size_t n) {
    if (!s) return NULL;
    char *p = qp_arena_alloc(a, n + 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

char *qp_arena_strdup(struct qp_arena *a, const char *s) {
    if (!s) return NULL;
    return qp_arena_strndup(a, s, strlen(s));
}

size_t qp_arena_bytes(const struct qp_arena *a) {
    return a ? a->bytes : 0;
}
