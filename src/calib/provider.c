#include "calib/provider.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "qplace/dtype.h"

/* ---- the interface ------------------------------------------------------------------- */

enum qp_status qp_provider_alloc(const struct qp_provider_ops *ops, const char *source,
                                 const char *const *names, size_t n_inputs,
                                 struct qp_provider **out, struct qp_error *err) {
    struct qp_provider *p = calloc(1, sizeof *p);
    if (!p) goto nomem;
    p->ops = ops;
    p->source = source;
    p->n_inputs = n_inputs;
    if (n_inputs) {
        p->names = calloc(n_inputs, sizeof *p->names);
        p->batch = calloc(n_inputs, sizeof *p->batch);
        if (!p->names || !p->batch) goto nomem;
        for (size_t i = 0; i < n_inputs; i++) {
            p->names[i] = strdup(names[i] ? names[i] : "");
            if (!p->names[i]) goto nomem;
        }
    }
    *out = p;
    return QP_OK;
nomem:
    if (p) {
        p->ops = NULL;
        qp_provider_free(p);
    }
    return qp_error_set(err, QP_ERR_NOMEM, "calibration data: out of memory");
}

enum qp_status qp_provider_next(struct qp_provider *p, const struct qp_array **arrays_out,
                                int *end_out, struct qp_error *err) {
    if (!p || !arrays_out || !end_out)
        return qp_error_set(err, QP_ERR_USAGE, "calibration data: NULL argument");
    int end = 0;
    enum qp_status st = p->ops->next(p, &end, err);
    if (st != QP_OK) return st;
    *end_out = end;
    *arrays_out = end ? NULL : p->batch;
    return QP_OK;
}

enum qp_status qp_provider_reset(struct qp_provider *p, struct qp_error *err) {
    if (!p) return qp_error_set(err, QP_ERR_USAGE, "calibration data: NULL provider");
    return p->ops->reset(p, err);
}

size_t qp_provider_n_inputs(const struct qp_provider *p) {
    return p ? p->n_inputs : 0;
}
const char *qp_provider_input_name(const struct qp_provider *p, size_t i) {
    return p && i < p->n_inputs ? p->names[i] : NULL;
}
void qp_provider_shapes(const struct qp_provider *p, const struct qp_array *batch,
                        struct qp_shape *shapes) {
    for (size_t i = 0; i < p->n_inputs; i++) {
        memset(&shapes[i], 0, sizeof shapes[i]);
        shapes[i].name = p->names[i];
        shapes[i].rank = batch[i].rank;
        memcpy(shapes[i].dims, batch[i].dims, sizeof shapes[i].dims);
    }
}

enum qp_status qp_provider_map_inputs(const struct qp_provider *p, const struct qp_session *s,
                                      const char *what, size_t *map, struct qp_error *err) {
    size_t ns = qp_session_n_inputs(s), np = p->n_inputs;
    if (ns != np)
        return qp_error_set(err, QP_ERR_BAD_INPUT, "%s: the model has %zu inputs, the data %zu",
                            what, ns, np);
    for (size_t i = 0; i < ns; i++) {
        const char *name = qp_session_input_name(s, i);
        size_t k = 0;
        while (k < np && strcmp(p->names[k], name) != 0)
            k++;
        if (k == np)
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "%s: model input '%s' is missing from the data", what, name);
        map[i] = k;
    }
    return QP_OK;
}

uint64_t qp_provider_n_samples(const struct qp_provider *p) {
    return p ? p->n_samples : 0;
}
uint64_t qp_provider_n_batches(const struct qp_provider *p) {
    return p ? p->n_batches : 0;
}
const char *qp_provider_source(const struct qp_provider *p) {
    return p ? p->source : NULL;
}
int qp_provider_is_synthetic(const struct qp_provider *p) {
    return p ? p->synthetic : 0;
}

void qp_provider_free(struct qp_provider *p) {
    if (!p) return;
    if (p->ops && p->ops->destroy) p->ops->destroy(p);
    for (size_t i = 0; i < p->n_inputs; i++) {
        if (p->names) free(p->names[i]);
        if (p->batch) qp_array_release(&p->batch[i]);
    }
    free(p->names);
    free(p->batch);
    free(p);
}

/* ---- --calibration_shapes ------------------------------------------------------------ */

void qp_calib_shapes_release(struct qp_calib_shapes *s) {
    if (!s) return;
    for (size_t i = 0; i < s->n; i++)
        free(s->items[i].name);
    free(s->items);
    s->items = NULL;
    s->n = 0;
}

const struct qp_calib_shape *qp_calib_shapes_find(const struct qp_calib_shapes *s,
                                                  const char *name) {
    if (!s || !name) return NULL;
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->items[i].name, name) == 0) return &s->items[i];
    return NULL;
}

/* Parses one "name:AxBxC" entry of length len. */
static enum qp_status parse_entry(const char *e, size_t len, struct qp_calib_shape *out,
                                  struct qp_error *err) {
    const char *colon = NULL;
    for (size_t i = 0; i < len; i++)
        if (e[i] == ':') colon = e + i;
    if (!colon)
        return qp_error_set(err, QP_ERR_USAGE,
                            "--calibration_shapes: entry '%.*s' has no ':' (expected "
                            "name:1x3x224x224)",
                            (int)len, e);
    size_t name_len = (size_t)(colon - e);
    if (name_len == 0)
        return qp_error_set(err, QP_ERR_USAGE, "--calibration_shapes: entry '%.*s' has no name",
                            (int)len, e);
    const char *d = colon + 1, *end = e + len;
    if (d == end)
        return qp_error_set(err, QP_ERR_USAGE, "--calibration_shapes: entry '%.*s' has no dims",
                            (int)len, e);
    int rank = 0;
    while (d < end) {
        if (rank == QP_MAX_RANK)
            return qp_error_set(err, QP_ERR_USAGE,
                                "--calibration_shapes: entry '%.*s' has more than %d dims",
                                (int)len, e, QP_MAX_RANK);
        int64_t v = 0;
        const char *start = d;
        while (d < end && *d >= '0' && *d <= '9') {
            int digit = *d - '0';
            if (v > (INT64_MAX - digit) / 10)
                return qp_error_set(err, QP_ERR_USAGE,
                                    "--calibration_shapes: entry '%.*s': a dim is too large",
                                    (int)len, e);
            v = v * 10 + digit;
            d++;
        }
        if (d == start || (d < end && *d != 'x'))
            return qp_error_set(err, QP_ERR_USAGE,
                                "--calibration_shapes: entry '%.*s': dims must be positive "
                                "integers joined by 'x'",
                                (int)len, e);
        if (v == 0)
            return qp_error_set(err, QP_ERR_USAGE,
                                "--calibration_shapes: entry '%.*s': dim %d is 0", (int)len, e,
                                rank);
        out->dims[rank++] = v;
        if (d < end) {
            d++; /* 'x' */
            if (d == end)
                return qp_error_set(err, QP_ERR_USAGE,
                                    "--calibration_shapes: entry '%.*s' ends with 'x'", (int)len,
                                    e);
        }
    }
    out->rank = rank;
    out->name = strndup(e, name_len);
    if (!out->name) return qp_error_set(err, QP_ERR_NOMEM, "--calibration_shapes: out of memory");
    return QP_OK;
}

enum qp_status qp_calib_shapes_parse(const char *s, struct qp_calib_shapes *out,
                                     struct qp_error *err) {
    if (!s || !out) return qp_error_set(err, QP_ERR_USAGE, "--calibration_shapes: NULL argument");
    struct qp_calib_shapes r = {0};
    size_t n = 1;
    for (const char *c = s; *c; c++)
        n += *c == ',';
    r.items = calloc(n, sizeof *r.items);
    if (!r.items) return qp_error_set(err, QP_ERR_NOMEM, "--calibration_shapes: out of memory");
    enum qp_status st = QP_OK;
    const char *e = s;
    for (;;) {
        const char *comma = strchr(e, ',');
        size_t len = comma ? (size_t)(comma - e) : strlen(e);
        if (len == 0) {
            st = qp_error_set(err, QP_ERR_USAGE, "--calibration_shapes: empty entry in '%s'", s);
            goto fail;
        }
        struct qp_calib_shape sh = {0};
        if ((st = parse_entry(e, len, &sh, err)) != QP_OK) goto fail;
        if (qp_calib_shapes_find(&r, sh.name)) {
            st = qp_error_set(err, QP_ERR_USAGE, "--calibration_shapes: input '%s' given twice",
                              sh.name);
            free(sh.name);
            goto fail;
        }
        r.items[r.n++] = sh;
        if (!comma) break;
        e = comma + 1;
    }
    *out = r;
    return QP_OK;
fail:
    qp_calib_shapes_release(&r);
    return st;
}

enum qp_status qp_calib_shape_resolve(const char *name, int rank, const int64_t *model_dims,
                                      const struct qp_calib_shapes *shapes, int64_t *dims_out,
                                      struct qp_error *err) {
    if (rank < 0 || rank > QP_MAX_RANK)
        return qp_error_set(err, QP_ERR_BAD_INPUT, "input '%s': rank %d is not supported", name,
                            rank);
    const struct qp_calib_shape *sh = qp_calib_shapes_find(shapes, name);
    if (!sh) {
        for (int i = 0; i < rank; i++)
            dims_out[i] = model_dims[i] < 0 ? 1 : model_dims[i];
        return QP_OK;
    }
    if (sh->rank != rank)
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "--calibration_shapes: input '%s' has rank %d in the model, %d given",
                            name, rank, sh->rank);
    for (int i = 0; i < rank; i++) {
        if (model_dims[i] >= 0 && model_dims[i] != sh->dims[i])
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "--calibration_shapes: input '%s' dim %d is %lld in the model, "
                                "%lld given",
                                name, i, (long long)model_dims[i], (long long)sh->dims[i]);
    }
    memcpy(dims_out, sh->dims, (size_t)rank * sizeof *dims_out);
    return QP_OK;
}

/* ---- synthetic ----------------------------------------------------------------------- */

/* PCG32 (O'Neill's XSH-RR variant), a small well-known generator. */
struct pcg32 {
    uint64_t state, inc;
};

static uint32_t pcg32_next(struct pcg32 *r) {
    uint64_t old = r->state;
    r->state = old * 6364136223846793005ULL + r->inc;
    uint32_t xorshifted = (uint32_t)(((old >> 18u) ^ old) >> 27u);
    uint32_t rot = (uint32_t)(old >> 59u);
    return (xorshifted >> rot) | (xorshifted << ((-rot) & 31u));
}

static void pcg32_seed(struct pcg32 *r, uint64_t seed) {
    r->state = 0;
    r->inc = (0xda3e39cb94b95bdbULL << 1u) | 1u;
    pcg32_next(r);
    r->state += seed;
    pcg32_next(r);
}

/* uniform in [0, n) without modulo bias */
static uint32_t pcg32_below(struct pcg32 *r, uint32_t n) {
    uint32_t threshold = (uint32_t)(-n) % n;
    for (;;) {
        uint32_t v = pcg32_next(r);
        if (v >= threshold) return v % n;
    }
}

struct synthetic {
    struct qp_synthetic_input *inputs;
    uint64_t seed, n_batches, done;
    struct pcg32 rng;
};

static enum qp_status synthetic_next(struct qp_provider *p, int *end_out, struct qp_error *err) {
    struct synthetic *s = p->impl;
    if (s->done == s->n_batches) {
        *end_out = 1;
        return QP_OK;
    }
    for (size_t i = 0; i < p->n_inputs; i++) {
        const struct qp_synthetic_input *in = &s->inputs[i];
        struct qp_array *a = &p->batch[i];
        if (!a->data) {
            enum qp_status st = qp_array_alloc(a, in->dtype, in->rank, in->dims, err);
            if (st != QP_OK) return qp_error_prefix(err, "synthetic input '%s'", in->name);
        }
        int ok;
        uint64_t n = qp_array_numel(a, &ok);
        uint32_t int_range = strstr(in->name, "ids") ? 50000 : strstr(in->name, "mask") ? 2 : 100;
        for (uint64_t j = 0; j < n; j++) {
            switch (in->dtype) {
            case QP_DTYPE_FLOAT:
                ((float *)a->data)[j] = (float)(pcg32_next(&s->rng) >> 8) * (1.0f / 16777216.0f);
                break;
            case QP_DTYPE_DOUBLE:
                ((double *)a->data)[j] = (double)(pcg32_next(&s->rng) >> 8) * (1.0 / 16777216.0);
                break;
            case QP_DTYPE_FLOAT16:
                ((uint16_t *)a->data)[j] =
                    qp_f32_to_fp16((float)(pcg32_next(&s->rng) >> 8) * (1.0f / 16777216.0f));
                break;
            case QP_DTYPE_INT32:
                ((int32_t *)a->data)[j] = (int32_t)pcg32_below(&s->rng, int_range);
                break;
            case QP_DTYPE_INT64:
                ((int64_t *)a->data)[j] = (int64_t)pcg32_below(&s->rng, int_range);
                break;
            default: /* BOOL */
                ((uint8_t *)a->data)[j] = (uint8_t)(pcg32_next(&s->rng) >> 31);
                break;
            }
        }
    }
    s->done++;
    *end_out = 0;
    return QP_OK;
}

static enum qp_status synthetic_reset(struct qp_provider *p, struct qp_error *err) {
    (void)err;
    struct synthetic *s = p->impl;
    s->done = 0;
    pcg32_seed(&s->rng, s->seed);
    return QP_OK;
}

static void synthetic_destroy(struct qp_provider *p) {
    struct synthetic *s = p->impl;
    if (!s) return;
    free(s->inputs);
    free(s);
}

static const struct qp_provider_ops synthetic_ops = {synthetic_next, synthetic_reset,
                                                     synthetic_destroy};

enum qp_status qp_provider_synthetic_create(const struct qp_synthetic_input *inputs, size_t n,
                                            uint64_t seed, uint64_t n_batches,
                                            struct qp_provider **out, struct qp_error *err) {
    if ((n && !inputs) || !out)
        return qp_error_set(err, QP_ERR_USAGE, "synthetic data: NULL argument");
    uint64_t samples = 0;
    for (size_t i = 0; i < n; i++) {
        const struct qp_synthetic_input *in = &inputs[i];
        enum qp_dtype dt = in->dtype;
        if (dt != QP_DTYPE_FLOAT && dt != QP_DTYPE_DOUBLE && dt != QP_DTYPE_FLOAT16 &&
            dt != QP_DTYPE_INT32 && dt != QP_DTYPE_INT64 && dt != QP_DTYPE_BOOL)
            return qp_error_set(err, QP_ERR_USAGE,
                                "synthetic data: input '%s' has type %s; only float, float16, "
                                "double, int32, int64 and bool can be generated",
                                in->name ? in->name : "", qp_dtype_name(dt));
        if (!in->name || in->rank < 0 || in->rank > QP_MAX_RANK)
            return qp_error_set(err, QP_ERR_USAGE, "synthetic data: input %zu is malformed", i);
        for (int d = 0; d < in->rank; d++)
            if (in->dims[d] < 1)
                return qp_error_set(err, QP_ERR_USAGE,
                                    "synthetic data: input '%s' dim %d is %lld (dynamic dims "
                                    "must be resolved first)",
                                    in->name, d, (long long)in->dims[d]);
        if (i == 0) samples = in->rank ? (uint64_t)in->dims[0] : 1;
    }
    const char **names = n ? calloc(n, sizeof *names) : NULL;
    struct synthetic *s = calloc(1, sizeof *s);
    struct qp_synthetic_input *copy = n ? calloc(n, sizeof *copy) : NULL;
    if ((n && (!names || !copy)) || !s) {
        free(names);
        free(s);
        free(copy);
        return qp_error_set(err, QP_ERR_NOMEM, "synthetic data: out of memory");
    }
    for (size_t i = 0; i < n; i++)
        names[i] = inputs[i].name;
    struct qp_provider *p = NULL;
    enum qp_status st = qp_provider_alloc(&synthetic_ops, "synthetic", names, n, &p, err);
    free(names);
    if (st != QP_OK) {
        free(s);
        free(copy);
        return st;
    }
    for (size_t i = 0; i < n; i++) {
        copy[i] = inputs[i];
        copy[i].name = p->names[i]; /* the provider's own copy of the name */
    }
    s->inputs = copy;
    s->seed = seed;
    s->n_batches = n_batches;
    pcg32_seed(&s->rng, seed);
    p->impl = s;
    p->synthetic = 1;
    p->n_batches = n_batches;
    p->n_samples = samples * n_batches;
    *out = p;
    return QP_OK;
}
