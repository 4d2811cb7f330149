#include "kernels/dnnl_util.h"

#include <omp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_once_t engine_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t engine;
static int enabled = 1;

static void engine_init(void) {
    const char *e = getenv("QP_NO_DNNL");
    if (e && e[0] && strcmp(e, "0") != 0) enabled = 0;
    /* oneDNN's own primitive cache would duplicate ours. */
    if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) engine = NULL;
}

dnnl_engine_t qp_dnnl_engine(void) {
    pthread_once(&engine_once, engine_init);
    return engine;
}

int qp_dnnl_enabled(void) {
    pthread_once(&engine_once, engine_init);
    return enabled && engine;
}

int qp_dnnl_default_threads(void) {
    int n = omp_get_num_procs();
    return n < 1 ? 1 : n > 1024 ? 1024 : n;
}

int qp_dnnl_threads_push(int n) {
    int saved = omp_get_max_threads();
    if (n != saved) omp_set_num_threads(n);
    return saved;
}

void qp_dnnl_threads_pop(int saved) {
    if (omp_get_max_threads() != saved) omp_set_num_threads(saved);
}

void qp_dnnl_pd_impl_name(const_dnnl_primitive_desc_t pd, char *out, size_t size) {
    const char *name = NULL;
    if (!size) return;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name) != dnnl_success || !name)
        name = "";
    snprintf(out, size, "%s", name);
}

dnnl_status_t qp_dnnl_pd_create(dnnl_primitive_desc_t *pd_out, const_dnnl_op_desc_t desc,
                                const_dnnl_primitive_attr_t attr, const char *impl) {
    dnnl_engine_t eng = qp_dnnl_engine();
    if (!impl) return dnnl_primitive_desc_create(pd_out, desc, attr, eng, NULL);
    dnnl_primitive_desc_iterator_t it = NULL;
    dnnl_status_t rc = dnnl_primitive_desc_iterator_create(&it, desc, attr, eng, NULL);
    if (rc != dnnl_success) return rc;
    char have[QP_DNNL_IMPL_NAME];
    for (rc = dnnl_unimplemented;;) {
        dnnl_primitive_desc_t pd = dnnl_primitive_desc_iterator_fetch(it);
        if (pd) {
            qp_dnnl_pd_impl_name(pd, have, sizeof have);
            if (strcmp(have, impl) == 0) {
                *pd_out = pd;
                rc = dnnl_success;
                break;
            }
            dnnl_primitive_desc_destroy(pd);
        }
        if (dnnl_primitive_desc_iterator_next(it) != dnnl_success) break;
    }
    dnnl_primitive_desc_iterator_destroy(it);
    return rc;
}

struct cache_node {
    struct cache_node *next;
    void *(*build)(const void *, void *); /* kernels' keys never collide: builders differ */
    size_t key_size;
    void *entry;
    unsigned char key[];
};

#define CACHE_BUCKETS 256
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cache_node *buckets[CACHE_BUCKETS];
static size_t cache_count;

static uint64_t hash_bytes(const unsigned char *p, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

void *qp_dnnl_cache_get(const void *key, size_t key_size, void *(*build)(const void *, void *),
                        void *ctx) {
    uint64_t h = hash_bytes(key, key_size) % CACHE_BUCKETS;
    void *entry = NULL;
    pthread_mutex_lock(&cache_lock);
    for (struct cache_node *c = buckets[h]; c; c = c->next)
        if (c->build == build && c->key_size == key_size && memcmp(c->key, key, key_size) == 0) {
            entry = c->entry;
            goto done;
        }
    if (cache_count >= QP_DNNL_MAX_ENTRIES) goto done;
    struct cache_node *c = malloc(sizeof *c + key_size);
    if (!c) goto done;
    /* A key oneDNN cannot build for is stored too (entry NULL), so it is tried once: a kernel
     * asks for the same variant on every run (a one-thread variant of a small convolution,
     * whose build failed, cost a primitive-descriptor attempt, about 80 us, per run). */
    entry = build(key, ctx);
    c->build = build;
    c->key_size = key_size;
    c->entry = entry;
    memcpy(c->key, key, key_size);
    c->next = buckets[h];
    buckets[h] = c;
    cache_count++;
done:
    pthread_mutex_unlock(&cache_lock);
    return entry;
}

size_t qp_dnnl_md_bytes(const dnnl_memory_desc_t *md) {
    return dnnl_memory_desc_get_size(md);
}

int qp_dnnl_reorder_once(const dnnl_memory_desc_t *from, const void *src,
                         const dnnl_memory_desc_t *to, void *dst) {
    dnnl_engine_t eng = qp_dnnl_engine();
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t r = NULL;
    dnnl_memory_t ms = NULL, md = NULL;
    dnnl_stream_t strm = NULL;
    int ok = eng && !dnnl_reorder_primitive_desc_create(&pd, from, eng, to, eng, NULL) &&
             !dnnl_primitive_create(&r, pd) && !dnnl_memory_create(&ms, from, eng, (void *)src) &&
             !dnnl_memory_create(&md, to, eng, dst) &&
             !dnnl_stream_create(&strm, eng, dnnl_stream_default_flags);
    if (ok) {
        dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, ms}, {DNNL_ARG_TO, md}};
        ok = !dnnl_primitive_execute(r, strm, 2, a) && !dnnl_stream_wait(strm);
    }
    dnnl_primitive_desc_destroy(pd);
    dnnl_primitive_destroy(r);
    dnnl_memory_destroy(ms);
    dnnl_memory_destroy(md);
    dnnl_stream_destroy(strm);
    return ok;
}

static dnnl_format_tag_t channels_last_tag(int nd) {
    return nd == 3 ? dnnl_nwc : nd == 4 ? dnnl_nhwc : dnnl_ndhwc;
}

int qp_dnnl_md_nhwc_f32(dnnl_memory_desc_t *md, int nd, const int64_t *dims) {
    if (nd < 3 || nd > 5) return 0;
    dnnl_dims_t d;
    for (int i = 0; i < nd; i++)
        d[i] = dims[i];
    return dnnl_memory_desc_init_by_tag(md, nd, d, dnnl_f32, channels_last_tag(nd)) == dnnl_success;
}

int qp_dnnl_md_is_nhwc(const dnnl_memory_desc_t *md) {
    if (!md || md->ndims < 3 || md->ndims > 5) return 0;
    dnnl_memory_desc_t want;
    return dnnl_memory_desc_init_by_tag(&want, md->ndims, md->dims, md->data_type,
                                        channels_last_tag(md->ndims)) == dnnl_success &&
           dnnl_memory_desc_equal(&want, md);
}
