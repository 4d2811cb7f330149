#include "core/grow.h"

#include <stdint.h>
#include <stdlib.h>

int qp_grow(void **arr, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 1;
    size_t n = *cap ? *cap : 16;
    while (n < need) {
        if (n > SIZE_MAX / 2) return 0;
        n *= 2;
    }
    if (!elem || n > SIZE_MAX / elem) return 0;
    void *q = realloc(*arr, n * elem);
    if (!q) return 0;
    *arr = q;
    *cap = n;
    return 1;
}
