/*
 * oneDNN plumbing shared by the fast kernels (dnnl_conv.c, dnnl_matmul.c).
 *
 * Kernel state is plain malloc'd memory that the runtime releases with free(), so it cannot own
 * oneDNN objects. Primitives (with their memory objects and stream) therefore live in a
 * process-wide cache keyed by the primitive's full description and the thread count it was
 * created for; a kernel's state keeps a pointer to its entry plus what is specific to the node
 * (weights reordered into the primitive's layout). Entries are never evicted; the cache is
 * bounded (QP_DNNL_MAX_ENTRIES) and a kernel whose primitive does not fit falls back to the
 * reference kernel.
 *
 * Threads: oneDNN here is built on OpenMP, like the engine. It sizes its parallel regions from
 * omp_get_max_threads() when a primitive is created and run, so qp_dnnl_threads_push/pop set it
 * around those calls.
 */
#ifndef QP_KERNELS_DNNL_UTIL_H
#define QP_KERNELS_DNNL_UTIL_H

#include <oneapi/dnnl/dnnl.h>
#include <stddef.h>

#define QP_DNNL_MAX_ENTRIES 4096
#define QP_DNNL_IMPL_NAME   64 /* bytes kept of an implementation name */

/* The CPU engine (created once; NULL when oneDNN cannot create one). */
dnnl_engine_t qp_dnnl_engine(void);

/* 0 when the environment variable QP_NO_DNNL is set to a non-empty value other than "0":
 * every kernel then uses its reference implementation (for measurements and bisecting). */
int qp_dnnl_enabled(void);

/* The thread count primitives are created for at prepare (kernels learn the session's count
 * only at run): omp_get_num_procs(), the session default. */
int qp_dnnl_default_threads(void);

/* Sets omp_get_max_threads() to n for the calling thread; returns the previous value. */
int qp_dnnl_threads_push(int n);
void qp_dnnl_threads_pop(int saved);

/* A cache of opaque entries keyed by (build, bytes). qp_dnnl_cache_get returns the entry stored
 * under `build` and `key` (key_size bytes, compared with memcmp: zero the key's padding), or
 * calls build(key, ctx) to make one and stores it. NULL when build fails (remembered: a key is
 * built once, so `ctx` must be the same for every call with one key) or the cache is full.
 * Thread-safe; build runs under the cache lock. */
void *qp_dnnl_cache_get(const void *key, size_t key_size, void *(*build)(const void *, void *),
                        void *ctx);

/* Creates *pd_out for the operation desc and attr on qp_dnnl_engine(): oneDNN's first choice when
 * impl is NULL, else the implementation named impl (dnnl_query_impl_info_str) from oneDNN's list
 * of candidates. A primitive made for another thread count or lane with the primary's layouts
 * must run the primary's implementation: another one (oneDNN falls back to ref:any when the
 * primary's rejects the thread count) sums in another order, and results would then depend on
 * the thread count. Returns dnnl_success, dnnl_unimplemented when no candidate has that name,
 * or oneDNN's status; *pd_out is set only on success (destroy it). */
dnnl_status_t qp_dnnl_pd_create(dnnl_primitive_desc_t *pd_out, const_dnnl_op_desc_t desc,
                                const_dnnl_primitive_attr_t attr, const char *impl);

/* The implementation name of a primitive descriptor, copied into out (size bytes, truncated,
 * "" when oneDNN names none). */
void qp_dnnl_pd_impl_name(const_dnnl_primitive_desc_t pd, char *out, size_t size);

/* Reorders `src` (laid out as `from`) into `dst` (as `to`) once, on a stream of its own: for
 * constants at prepare (weights into a primitive's layout). 1 on success. */
int qp_dnnl_reorder_once(const dnnl_memory_desc_t *from, const void *src,
                         const dnnl_memory_desc_t *to, void *dst);

/* The oneDNN eltwise algorithm of a fused post-operation (enum qp_conv_post_kind of
 * kernels/dnnl_conv.h; dnnl_alg_kind_undef for the SUM). */
dnnl_alg_kind_t qp_dnnl_post_alg(int kind);

/* Bytes of a memory descriptor. */
size_t qp_dnnl_md_bytes(const dnnl_memory_desc_t *md);

/* *md = a float32 channels-last (nwc, nhwc, ndhwc) descriptor of dims (rank nd, 3 to 5);
 * 1 on success. qp_dnnl_md_is_nhwc: 1 when md is exactly that layout for its own dims and data
 * type (no blocking, no padding). */
int qp_dnnl_md_nhwc_f32(dnnl_memory_desc_t *md, int nd, const int64_t *dims);
int qp_dnnl_md_is_nhwc(const dnnl_memory_desc_t *md);

/* Round up to 64 bytes. */
static inline size_t qp_dnnl_align(size_t n) {
    return (n + 63) / 64 * 64;
}

#endif
