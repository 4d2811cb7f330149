#include "calib/provider_npz.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ir/ir.h"
#include "qplace/npy.h"

struct npzp {
    struct qp_array *data; /* n_inputs concatenated arrays */
    uint64_t rows, steps, next;
};

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Checks one loaded array against the model input and the arrays already loaded for it. */
static enum qp_status check_part(const char *file, const struct qp_npz_provider_input *in,
                                 const struct qp_array *a, const struct qp_array *first,
                                 struct qp_error *err) {
    if (a->dtype != in->dtype)
        return qp_error_set(err, QP_ERR_BAD_INPUT, "%s: input '%s' is %s, the model takes %s", file,
                            in->name, qp_dtype_name(a->dtype), qp_dtype_name(in->dtype));
    if (a->rank != in->rank || a->rank < 1)
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "%s: input '%s' has rank %d, the model takes rank %d", file, in->name,
                            a->rank, in->rank);
    for (int d = 1; d < a->rank; d++) {
        if (in->model_dims[d] >= 0 && a->dims[d] != in->model_dims[d])
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "%s: input '%s' dim %d is %lld, the model takes %lld", file,
                                in->name, d, (long long)a->dims[d], (long long)in->model_dims[d]);
        if (first && a->dims[d] != first->dims[d])
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "%s: input '%s' dim %d is %lld, earlier shards have %lld", file,
                                in->name, d, (long long)a->dims[d], (long long)first->dims[d]);
    }
    return QP_OK;
}

/* Appends `a` (consumed) to the concatenation `acc` along axis 0. */
static enum qp_status append(struct qp_array *acc, struct qp_array *a, struct qp_error *err) {
    if (!acc->data && acc->rank == 0) {
        *acc = *a;
        memset(a, 0, sizeof *a);
        return QP_OK;
    }
    if (a->nbytes > SIZE_MAX - acc->nbytes)
        return qp_error_set(err, QP_ERR_NOMEM, "calibration data too large");
    void *p = realloc(acc->owned ? acc->data : NULL, acc->nbytes + a->nbytes);
    if (!p) return qp_error_set(err, QP_ERR_NOMEM, "calibration data: out of memory");
    if (a->nbytes) memcpy((char *)p + acc->nbytes, a->data, a->nbytes);
    acc->data = p;
    acc->owned = 1;
    acc->nbytes += a->nbytes;
    acc->dims[0] += a->dims[0];
    qp_array_release(a);
    return QP_OK;
}

static enum qp_status load_file(const char *file, const struct qp_npz_provider_input *inputs,
                                size_t n, struct qp_array *acc, uint64_t *budget,
                                struct qp_error *err) {
    enum qp_status st = QP_OK;
    if (ends_with(file, ".npy")) {
        if (n != 1)
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "%s: a .npy file holds one array but the model has %zu inputs; "
                                "use a .npz keyed by input name",
                                file, n);
        struct stat sb;
        if (stat(file, &sb) == 0 && (uint64_t)sb.st_size > *budget)
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "%s: calibration data over the --max_calibration_bytes cap", file);
        struct qp_array a;
        if ((st = qp_npy_read_file(file, &a, err)) != QP_OK) return st;
        if ((st = check_part(file, &inputs[0], &a, acc[0].data ? &acc[0] : NULL, err)) != QP_OK ||
            a.nbytes > *budget) {
            if (st == QP_OK)
                st =
                    qp_error_set(err, QP_ERR_BAD_INPUT,
                                 "%s: calibration data over the --max_calibration_bytes cap", file);
            qp_array_release(&a);
            return st;
        }
        *budget -= a.nbytes;
        st = append(&acc[0], &a, err);
        qp_array_release(&a);
        return st;
    }
    struct qp_npz *z = NULL;
    if (*budget == 0)
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "%s: calibration data over the --max_calibration_bytes cap", file);
    if ((st = qp_npz_open(file, *budget, &z, err)) != QP_OK) return st;
    size_t count = qp_npz_count(z);
    for (size_t k = 0; k < count && st == QP_OK; k++) {
        const char *key = qp_npz_name(z, k);
        size_t i = 0;
        while (i < n && strcmp(inputs[i].name, key) != 0)
            i++;
        if (i == n) {
            st = qp_error_set(err, QP_ERR_BAD_INPUT,
                              "%s: key '%s' is not an input of the model (keys must be exactly "
                              "the input names; save with np.savez(path, **{name: array}))",
                              file, key);
        }
    }
    for (size_t i = 0; i < n && st == QP_OK; i++) {
        if (!qp_npz_contains(z, inputs[i].name)) {
            st = qp_error_set(err, QP_ERR_BAD_INPUT, "%s: no array for model input '%s'", file,
                              inputs[i].name);
            break;
        }
        struct qp_array a;
        if ((st = qp_npz_read(z, inputs[i].name, &a, err)) != QP_OK) break;
        st = check_part(file, &inputs[i], &a, acc[i].data ? &acc[i] : NULL, err);
        if (st == QP_OK && a.nbytes > *budget)
            st = qp_error_set(err, QP_ERR_BAD_INPUT,
                              "%s: calibration data over the --max_calibration_bytes cap", file);
        if (st == QP_OK) {
            *budget -= a.nbytes;
            st = append(&acc[i], &a, err);
        }
        qp_array_release(&a);
    }
    qp_npz_close(z);
    return st;
}

static enum qp_status npzp_next(struct qp_provider *p, int *end_out, struct qp_error *err) {
    struct npzp *s = p->impl;
    if (s->next == s->steps) {
        *end_out = 1;
        return QP_OK;
    }
    for (size_t i = 0; i < p->n_inputs; i++) {
        const struct qp_array *all = &s->data[i];
        uint64_t rows = (uint64_t)all->dims[0];
        /* np.array_split: the first rows % steps chunks have one row more */
        uint64_t base = rows / s->steps, extra = rows % s->steps, k = s->next;
        uint64_t start = k * base + (k < extra ? k : extra);
        uint64_t len = base + (k < extra ? 1 : 0);
        size_t row_bytes = rows ? all->nbytes / rows : 0;
        int64_t dims[QP_MAX_RANK];
        memcpy(dims, all->dims, sizeof dims);
        dims[0] = (int64_t)len;
        enum qp_status st =
            qp_array_view(&p->batch[i], all->dtype, all->rank, dims,
                          (char *)all->data + start * row_bytes, len * row_bytes, err);
        if (st != QP_OK) return st;
    }
    s->next++;
    *end_out = 0;
    return QP_OK;
}

static enum qp_status npzp_reset(struct qp_provider *p, struct qp_error *err) {
    (void)err;
    ((struct npzp *)p->impl)->next = 0;
    return QP_OK;
}

static void npzp_destroy(struct qp_provider *p) {
    struct npzp *s = p->impl;
    if (!s) return;
    for (size_t i = 0; i < p->n_inputs; i++)
        qp_array_release(&s->data[i]);
    free(s->data);
    free(s);
}

static const struct qp_provider_ops npzp_ops = {npzp_next, npzp_reset, npzp_destroy};

enum qp_status qp_provider_npz_create(const char *path, const struct qp_npz_provider_input *inputs,
                                      size_t n, uint64_t max_bytes, struct qp_provider **out,
                                      struct qp_error *err) {
    if (!path || !out || n == 0 || !inputs)
        return qp_error_set(err, QP_ERR_USAGE, "calibration data: bad arguments");
    uint64_t budget = max_bytes ? max_bytes : QP_CALIB_DEFAULT_MAX_BYTES;
    struct npzp *s = calloc(1, sizeof *s);
    struct qp_array *acc = calloc(n, sizeof *acc);
    char **files = NULL;
    size_t n_files = 0;
    struct qp_provider *p = NULL;
    enum qp_status st = QP_OK;
    if (!s || !acc) {
        st = qp_error_set(err, QP_ERR_NOMEM, "calibration data: out of memory");
        goto fail;
    }
    struct stat sb;
    if (stat(path, &sb) != 0) {
        st = qp_error_set(err, QP_ERR_IO, "%s: %s", path, strerror(errno));
        goto fail;
    }
    const char *source = ends_with(path, ".npy") ? "npy" : "npz";
    if (S_ISDIR(sb.st_mode)) {
        source = "npz";
        DIR *d = opendir(path);
        if (!d) {
            st = qp_error_set(err, QP_ERR_IO, "%s: cannot open folder: %s", path, strerror(errno));
            goto fail;
        }
        size_t cap = 0;
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.' ||
                !(ends_with(e->d_name, ".npz") || ends_with(e->d_name, ".npy")))
                continue;
            if (n_files == cap) {
                cap = cap ? 2 * cap : 16;
                char **nf = realloc(files, cap * sizeof *nf);
                if (!nf) {
                    closedir(d);
                    st = qp_error_set(err, QP_ERR_NOMEM, "calibration data: out of memory");
                    goto fail;
                }
                files = nf;
            }
            size_t len = strlen(path) + strlen(e->d_name) + 2;
            if (!(files[n_files] = malloc(len))) {
                closedir(d);
                st = qp_error_set(err, QP_ERR_NOMEM, "calibration data: out of memory");
                goto fail;
            }
            snprintf(files[n_files++], len, "%s/%s", path, e->d_name);
        }
        closedir(d);
        if (n_files == 0) {
            st = qp_error_set(err, QP_ERR_BAD_INPUT, "%s: no .npz or .npy shards", path);
            goto fail;
        }
        qsort(files, n_files, sizeof *files, cmp_str);
        for (size_t f = 0; f < n_files && st == QP_OK; f++)
            st = load_file(files[f], inputs, n, acc, &budget, err);
    } else {
        st = load_file(path, inputs, n, acc, &budget, err);
    }
    if (st != QP_OK) goto fail;
    uint64_t rows = (uint64_t)acc[0].dims[0];
    for (size_t i = 1; i < n; i++) {
        if ((uint64_t)acc[i].dims[0] != rows) {
            st =
                qp_error_set(err, QP_ERR_BAD_INPUT,
                             "%s: input '%s' has %lld rows but '%s' has %llu", path, inputs[i].name,
                             (long long)acc[i].dims[0], inputs[0].name, (unsigned long long)rows);
            goto fail;
        }
    }
    uint64_t batch0 = inputs[0].batch_dims[0] > 0 ? (uint64_t)inputs[0].batch_dims[0] : 1;
    s->steps = rows / batch0;
    if (s->steps == 0) {
        st = qp_error_set(err, QP_ERR_BAD_INPUT,
                          "%s: input '%s' has %llu rows, fewer than one batch of %llu", path,
                          inputs[0].name, (unsigned long long)rows, (unsigned long long)batch0);
        goto fail;
    }
    const char **names = malloc(n * sizeof *names);
    if (!names) {
        st = qp_error_set(err, QP_ERR_NOMEM, "calibration data: out of memory");
        goto fail;
    }
    for (size_t i = 0; i < n; i++)
        names[i] = inputs[i].name;
    st = qp_provider_alloc(&npzp_ops, source, names, n, &p, err);
    free(names);
    if (st != QP_OK) goto fail;
    s->data = acc;
    s->rows = rows;
    p->impl = s;
    p->n_samples = rows;
    p->n_batches = s->steps;
    for (size_t f = 0; f < n_files; f++)
        free(files[f]);
    free(files);
    *out = p;
    return QP_OK;
fail:
    for (size_t f = 0; f < n_files; f++)
        free(files[f]);
    free(files);
    if (acc)
        for (size_t i = 0; i < n; i++)
            qp_array_release(&acc[i]);
    free(acc);
    free(s);
    return st;
}

enum qp_status qp_provider_graph_inputs(const struct qp_graph *g,
                                        const struct qp_calib_shapes *shapes, const char *who,
                                        struct qp_npz_provider_input *in, size_t cap, size_t *n_out,
                                        struct qp_error *err) {
    size_t n = 0;
    for (size_t i = 0; i < g->n_inputs; i++) {
        const struct qp_value *v = &g->values[g->inputs[i]];
        if (v->initializer >= 0) continue;
        if (n == cap)
            return qp_error_set(err, QP_ERR_UNSUPPORTED, "%s: more than %zu model inputs", who,
                                cap);
        if (v->kind != QP_VALUE_TENSOR || v->dtype == QP_DTYPE_UNDEFINED)
            return qp_error_set(err, QP_ERR_UNSUPPORTED,
                                "%s: model input '%s' is not a tensor of known type", who, v->name);
        struct qp_npz_provider_input *m = &in[n++];
        memset(m, 0, sizeof *m);
        m->name = v->name;
        m->dtype = v->dtype;
        m->rank = v->rank;
        if (m->rank < 0) {
            const struct qp_calib_shape *s = qp_calib_shapes_find(shapes, v->name);
            if (!s)
                return qp_error_set(err, QP_ERR_BAD_INPUT,
                                    "%s: model input '%s' has no known rank; give its shape with "
                                    "--calibration_shapes",
                                    who, v->name);
            m->rank = s->rank;
            for (int d = 0; d < m->rank; d++)
                m->model_dims[d] = -1;
        } else if (m->rank > QP_MAX_RANK) {
            return qp_error_set(err, QP_ERR_UNSUPPORTED, "%s: model input '%s' has rank %d", who,
                                v->name, m->rank);
        } else {
            for (int d = 0; d < m->rank; d++)
                m->model_dims[d] = v->dims[d].value;
        }
        enum qp_status st =
            qp_calib_shape_resolve(m->name, m->rank, m->model_dims, shapes, m->batch_dims, err);
        if (st != QP_OK) return st;
    }
    for (size_t k = 0; shapes && k < shapes->n; k++) {
        size_t i = 0;
        while (i < n && strcmp(in[i].name, shapes->items[k].name) != 0)
            i++;
        if (i == n)
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "%s: --calibration_shapes names '%s', which is not an input of "
                                "the model",
                                who, shapes->items[k].name);
    }
    *n_out = n;
    return QP_OK;
}
