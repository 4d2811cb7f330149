#include "core/grow.h"

#include <stdint.h>
#include <stdlib.h>

#include "core/size.h"

int qp_grow(void **arr, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 1;
    size_t n = *cap ? *cap : 16;
    while (n < need) {
        if (n > SIZE_MAX / 2) return 0;
        n *= 2;
    }
    size_t bytes;
    if (!elem || !qp_size_mul(n, elem, &bytes)) return 0;
    void *q = realloc(*arr, bytes);
    if (!q) return 0;
    *arr = q;
    *cap = n;
    return 1;
}
