/*
 * Large buffers (model bytes, tensor data). Above QP_BIGBUF_MIN bytes they are anonymous
 * mappings advised for transparent huge pages, so filling 100 MB costs ~50 page faults instead
 * of ~25,000 (page faults, not copying, dominated loading a large model). Smaller ones are
 * plain malloc. Every buffer records its own size, so qp_bigbuf_free needs only the pointer.
 */
#ifndef QP_CORE_BIGBUF_H
#define QP_CORE_BIGBUF_H

#include <stddef.h>

#define QP_BIGBUF_MIN ((size_t)1 << 20)

/* NULL when out of memory or on size overflow. Contents are zero only for mapped buffers. */
void *qp_bigbuf_alloc(size_t size);
/* NULL-safe. */
void qp_bigbuf_free(void *p);

#endif
