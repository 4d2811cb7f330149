#include "core/bigbuf.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

/* The two words in front of every payload: [-2] the block's total size, [-1] the payload's
 * offset from the block start shifted left once, low bit set for mapped blocks. Small blocks
 * carry a 16-byte header (malloc alignment kept); mapped ones 64 bytes (cache-line aligned). */
#define SMALL_HEAD 16
#define BIG_HEAD   64

void *qp_bigbuf_alloc(size_t size) {
    if (size > SIZE_MAX - BIG_HEAD - 4096) return NULL;
    unsigned char *block;
    size_t total, head;
    int mapped = size >= QP_BIGBUF_MIN;
    if (!mapped) {
        head = SMALL_HEAD;
        total = size + head;
        block = malloc(total);
        if (!block) return NULL;
    } else {
        head = BIG_HEAD;
        total = (size + head + 4095) & ~(size_t)4095;
        void *p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
        (void)madvise(p, total, MADV_HUGEPAGE); /* advice only: failure is harmless */
#endif
        block = p;
    }
    size_t *words = (size_t *)(block + head);
    words[-2] = total;
    words[-1] = (head << 1) | (size_t)mapped;
    return block + head;
}

void qp_bigbuf_free(void *p) {
    if (!p) return;
    size_t *words = p;
    size_t total = words[-2], tag = words[-1];
    unsigned char *block = (unsigned char *)p - (tag >> 1);
    if (tag & 1)
        munmap(block, total);
    else
        free(block);
}
