/* .npy / .npz calibration data, streamed one batch at a time (provider_npz.h). */
#include "calib/provider_npz.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "calib/npy.h"
#include "core/size.h"
#include "ir/ir.h"
#include "qplace/npy.h"
#include "core/sort.h"

/* Where one input's next rows come from: an open shard (a .npy file or an .npz member) read
 * sequentially, or a Fortran-ordered shard loaded whole. */
struct in_stream {
    size_t file;   /* shard index; SIZE_MAX before the first */
    uint64_t left; /* rows of the shard not yet taken */
    FILE *fp;      /* .npy */
    struct qp_npz *z;
    struct qp_npz_member *mr; /* .npz */
    struct qp_npy_source fsrc;
    const struct qp_npy_source *src;
    struct qp_npy_stream ns;
    struct qp_array whole; /* Fortran order: the shard in C order */
    uint64_t whole_next;
    uint8_t *buf; /* the batch, up to max_rows rows */
};

struct npzp {
    size_t n_files;
    char **files;
    uint64_t *rows;         /* n_files x n_inputs: rows of each input in each shard */
    struct qp_array *first; /* n_inputs: the first shard's header (no data) */
    size_t *row_bytes;      /* n_inputs */
    uint64_t max_bytes;     /* the cap, for reopening .npz files */
    uint64_t total_rows, steps, next;
    struct in_stream *in; /* n_inputs */
};

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Checks one shard's array header against the model input and the first shard. */
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

static void stream_close(struct in_stream *s) {
    if (s->fp) fclose(s->fp);
    free(s->fsrc.ctx);
    qp_npz_member_close(s->mr);
    qp_npz_close(s->z);
    qp_array_release(&s->whole);
    s->fp = NULL;
    s->fsrc.ctx = NULL;
    s->mr = NULL;
    s->z = NULL;
    s->src = NULL;
    s->whole_next = 0;
    s->left = 0;
}

/* Opens input `name` of shard `file` and reads its header into s->ns. */
static enum qp_status stream_open(struct in_stream *s, const char *file, const char *name,
                                  uint64_t max_bytes, struct qp_error *err) {
    enum qp_status st;
    if (ends_with(file, ".npy")) {
        struct qp_npy_file *fc = malloc(sizeof *fc);
        if (!fc) return qp_error_set(err, QP_ERR_NOMEM, "calibration data: out of memory");
        s->fsrc.ctx = fc;
        if (!(s->fp = fopen(file, "rb")))
            return qp_error_set(err, QP_ERR_IO, "%s: cannot open: %s", file, strerror(errno));
        struct stat sb;
        if (fstat(fileno(s->fp), &sb) != 0 || !S_ISREG(sb.st_mode))
            return qp_error_set(err, QP_ERR_IO, "%s: not a regular file", file);
        *fc = (struct qp_npy_file){s->fp, file};
        s->fsrc = (struct qp_npy_source){file, 1, (uint64_t)sb.st_size, qp_npy_file_read, fc};
        s->src = &s->fsrc;
    } else {
        if ((st = qp_npz_open(file, max_bytes, &s->z, err)) != QP_OK) return st;
        if (!qp_npz_contains(s->z, name))
            return qp_error_set(err, QP_ERR_BAD_INPUT, "%s: no array for model input '%s'", file,
                                name);
        if ((st = qp_npz_member_open(s->z, name, &s->mr, err)) != QP_OK) return st;
        s->src = qp_npz_member_source(s->mr);
    }
    return qp_npy_stream_begin(s->src, &s->ns, err);
}

static struct qp_array header_array(const struct qp_npy_stream *ns) {
    struct qp_array a = {.dtype = ns->dtype, .rank = ns->rank};
    memcpy(a.dims, ns->dims, sizeof a.dims);
    return a;
}

/* Moves input i on to its next shard that has rows, checking that the shard still is what the
 * provider saw when it was made. */
static enum qp_status advance(struct npzp *z, size_t n_inputs, size_t i, const char *name,
                              struct qp_error *err) {
    struct in_stream *s = &z->in[i];
    stream_close(s);
    size_t f = s->file == SIZE_MAX ? 0 : s->file + 1;
    while (f < z->n_files && z->rows[f * n_inputs + i] == 0)
        f++;
    s->file = f;
    if (f == z->n_files)
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "calibration data: input '%s' ran out of rows (a file changed)", name);
    const char *file = z->files[f];
    enum qp_status st = stream_open(s, file, name, z->max_bytes, err);
    if (st != QP_OK) return st;
    struct qp_array h = header_array(&s->ns);
    if (h.dtype != z->first[i].dtype || h.rank != z->first[i].rank ||
        (uint64_t)h.dims[0] != z->rows[f * n_inputs + i] ||
        memcmp(h.dims + 1, z->first[i].dims + 1, (size_t)(h.rank - 1) * sizeof h.dims[0]) != 0)
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "%s: input '%s' changed since the calibration data were opened", file,
                            name);
    s->left = (uint64_t)h.dims[0];
    if (s->ns.fortran && h.rank >= 2) {
        /* Rows of a Fortran-ordered array are not contiguous: this shard is read whole. */
        stream_close(s);
        s->file = f;
        st = ends_with(file, ".npy") ? qp_npy_read_file(file, &s->whole, err) : QP_OK;
        if (st == QP_OK && !ends_with(file, ".npy")) {
            if ((st = qp_npz_open(file, z->max_bytes, &s->z, err)) == QP_OK)
                st = qp_npz_read(s->z, name, &s->whole, err);
        }
        if (st != QP_OK) return st;
        s->left = (uint64_t)h.dims[0];
    }
    return QP_OK;
}

static enum qp_status npzp_next(struct qp_provider *p, int *end_out, struct qp_error *err) {
    struct npzp *z = p->impl;
    if (z->next == z->steps) {
        *end_out = 1;
        return QP_OK;
    }
    enum qp_status st = QP_OK;
    for (size_t i = 0; i < p->n_inputs; i++) {
        struct in_stream *s = &z->in[i];
        /* np.array_split: the first rows % steps chunks have one row more */
        uint64_t base = z->total_rows / z->steps, extra = z->total_rows % z->steps, k = z->next;
        uint64_t len = base + (k < extra ? 1 : 0);
        size_t rb = z->row_bytes[i];
        uint8_t *dst = s->buf;
        for (uint64_t need = len; need > 0;) {
            if (s->left == 0 && (st = advance(z, p->n_inputs, i, p->names[i], err)) != QP_OK)
                return st;
            uint64_t take = need < s->left ? need : s->left;
            if (s->whole.data || s->whole.rank) {
                memcpy(dst, (const uint8_t *)s->whole.data + s->whole_next * rb, take * rb);
                s->whole_next += take;
            } else if ((st = qp_npy_stream_read(s->src, &s->ns, dst, take * rb, err)) != QP_OK) {
                return st;
            }
            s->left -= take;
            need -= take;
            dst += take * rb;
            if (s->left == 0 && s->src && (st = qp_npy_stream_end(s->src, &s->ns, err)) != QP_OK)
                return st;
        }
        int64_t dims[QP_MAX_RANK];
        memcpy(dims, z->first[i].dims, sizeof dims);
        dims[0] = (int64_t)len;
        if ((st = qp_array_view(&p->batch[i], z->first[i].dtype, z->first[i].rank, dims, s->buf,
                                len * rb, err)) != QP_OK)
            return st;
    }
    z->next++;
    *end_out = 0;
    return QP_OK;
}

static enum qp_status npzp_reset(struct qp_provider *p, struct qp_error *err) {
    (void)err;
    struct npzp *z = p->impl;
    for (size_t i = 0; i < p->n_inputs; i++) {
        stream_close(&z->in[i]);
        z->in[i].file = SIZE_MAX;
    }
    z->next = 0;
    return QP_OK;
}

static void npzp_free(struct npzp *z, size_t n_inputs) {
    if (!z) return;
    for (size_t f = 0; f < z->n_files; f++)
        free(z->files[f]);
    free(z->files);
    free(z->rows);
    free(z->first);
    free(z->row_bytes);
    if (z->in)
        for (size_t i = 0; i < n_inputs; i++) {
            stream_close(&z->in[i]);
            free(z->in[i].buf);
        }
    free(z->in);
    free(z);
}

static void npzp_destroy(struct qp_provider *p) {
    npzp_free(p->impl, p->n_inputs);
}

static const struct qp_provider_ops npzp_ops = {npzp_next, npzp_reset, npzp_destroy};

static const char over_cap[] = "%s: calibration data over the --max_calibration_bytes cap";

/* Reads the headers of shard `f` (every input) into z->rows / z->first, checking keys,
 * dtypes, shapes and the byte budget. */
static enum qp_status scan_shard(struct npzp *z, size_t f, const struct qp_npz_provider_input *in,
                                 size_t n, uint64_t *budget, struct qp_error *err) {
    const char *file = z->files[f];
    const uint64_t budget0 = *budget; /* what this shard's members may declare in all */
    enum qp_status st = QP_OK;
    if (ends_with(file, ".npy") && n != 1)
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "%s: a .npy file holds one array but the model has %zu inputs; "
                            "use a .npz keyed by input name",
                            file, n);
    if (!ends_with(file, ".npy")) {
        struct qp_npz *npz = NULL;
        if (*budget == 0) return qp_error_set(err, QP_ERR_BAD_INPUT, over_cap, file);
        if ((st = qp_npz_open(file, *budget, &npz, err)) != QP_OK) return st;
        for (size_t k = 0; k < qp_npz_count(npz) && st == QP_OK; k++) {
            const char *key = qp_npz_name(npz, k);
            size_t i = 0;
            while (i < n && strcmp(in[i].name, key) != 0)
                i++;
            if (i == n)
                st = qp_error_set(err, QP_ERR_BAD_INPUT,
                                  "%s: key '%s' is not an input of the model (keys must be "
                                  "exactly the input names; save with np.savez(path, **{name: "
                                  "array}))",
                                  file, key);
        }
        qp_npz_close(npz);
        if (st != QP_OK) return st;
    }
    for (size_t i = 0; i < n; i++) {
        struct in_stream s = {.file = SIZE_MAX};
        st = stream_open(&s, file, in[i].name, budget0, err);
        if (st == QP_OK) {
            struct qp_array h = header_array(&s.ns);
            st = check_part(file, &in[i], &h, f ? &z->first[i] : NULL, err);
            if (st == QP_OK && s.ns.data_size > *budget)
                st = qp_error_set(err, QP_ERR_BAD_INPUT, over_cap, file);
            if (st == QP_OK) {
                *budget -= s.ns.data_size;
                z->rows[f * n + i] = (uint64_t)h.dims[0];
                if (f == 0) z->first[i] = h;
            }
        }
        stream_close(&s);
        if (st != QP_OK) return st;
    }
    return QP_OK;
}

/* The shard files under `path` (a folder: its .npz/.npy files sorted by name), into z->files. */
static enum qp_status list_files(struct npzp *z, const char *path, int is_dir,
                                 struct qp_error *err) {
    if (!is_dir) {
        z->files = malloc(sizeof *z->files);
        if (!z->files || !(z->files[0] = strdup(path)))
            return qp_error_set(err, QP_ERR_NOMEM, "calibration data: out of memory");
        z->n_files = 1;
        return QP_OK;
    }
    DIR *d = opendir(path);
    if (!d)
        return qp_error_set(err, QP_ERR_IO, "%s: cannot open folder: %s", path, strerror(errno));
    size_t cap = 0;
    struct dirent *e;
    enum qp_status st = QP_OK;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || !(ends_with(e->d_name, ".npz") || ends_with(e->d_name, ".npy")))
            continue;
        if (z->n_files == cap) {
            cap = cap ? 2 * cap : 16;
            char **nf = realloc(z->files, cap * sizeof *nf);
            if (!nf) {
                st = qp_error_set(err, QP_ERR_NOMEM, "calibration data: out of memory");
                break;
            }
            z->files = nf;
        }
        size_t len = strlen(path) + strlen(e->d_name) + 2;
        if (!(z->files[z->n_files] = malloc(len))) {
            st = qp_error_set(err, QP_ERR_NOMEM, "calibration data: out of memory");
            break;
        }
        snprintf(z->files[z->n_files++], len, "%s/%s", path, e->d_name);
    }
    closedir(d);
    if (st != QP_OK) return st;
    if (z->n_files == 0)
        return qp_error_set(err, QP_ERR_BAD_INPUT, "%s: no .npz or .npy shards", path);
    qsort(z->files, z->n_files, sizeof *z->files, qp_cmp_strp);
    return QP_OK;
}

enum qp_status qp_provider_npz_create(const char *path, const struct qp_npz_provider_input *inputs,
                                      size_t n, uint64_t max_bytes, struct qp_provider **out,
                                      struct qp_error *err) {
    if (!path || !out || n == 0 || !inputs)
        return qp_error_set(err, QP_ERR_USAGE, "calibration data: bad arguments");
    uint64_t budget = max_bytes ? max_bytes : QP_CALIB_DEFAULT_MAX_BYTES;
    struct npzp *z = calloc(1, sizeof *z);
    struct qp_provider *p = NULL;
    enum qp_status st = QP_OK;
    if (!z) return qp_error_set(err, QP_ERR_NOMEM, "calibration data: out of memory");
    z->max_bytes = budget;
    struct stat sb;
    if (stat(path, &sb) != 0) {
        st = qp_error_set(err, QP_ERR_IO, "%s: %s", path, strerror(errno));
        goto fail;
    }
    const char *source = !S_ISDIR(sb.st_mode) && ends_with(path, ".npy") ? "npy" : "npz";
    if ((st = list_files(z, path, S_ISDIR(sb.st_mode), err)) != QP_OK) goto fail;
    size_t n_rows;
    if (!qp_size_mul(z->n_files, n, &n_rows)) {
        st = qp_error_set(err, QP_ERR_NOMEM, "calibration data: too many shards");
        goto fail;
    }
    z->rows = calloc(n_rows, sizeof *z->rows);
    z->first = calloc(n, sizeof *z->first);
    z->row_bytes = calloc(n, sizeof *z->row_bytes);
    z->in = calloc(n, sizeof *z->in);
    if (!z->rows || !z->first || !z->row_bytes || !z->in) {
        st = qp_error_set(err, QP_ERR_NOMEM, "calibration data: out of memory");
        goto fail;
    }
    for (size_t i = 0; i < n; i++)
        z->in[i].file = SIZE_MAX;
    for (size_t f = 0; f < z->n_files; f++)
        if ((st = scan_shard(z, f, inputs, n, &budget, err)) != QP_OK) goto fail;
    uint64_t rows[2] = {0, 0};
    for (size_t i = 0; i < n; i++) {
        uint64_t r = 0;
        for (size_t f = 0; f < z->n_files; f++)
            r += z->rows[f * n + i];
        rows[i ? 1 : 0] = r;
        if (i && r != rows[0]) {
            st = qp_error_set(
                err, QP_ERR_BAD_INPUT, "%s: input '%s' has %llu rows but '%s' has %llu", path,
                inputs[i].name, (unsigned long long)r, inputs[0].name, (unsigned long long)rows[0]);
            goto fail;
        }
    }
    z->total_rows = rows[0];
    uint64_t batch0 = inputs[0].batch_dims[0] > 0 ? (uint64_t)inputs[0].batch_dims[0] : 1;
    z->steps = z->total_rows / batch0;
    if (z->steps == 0) {
        st = qp_error_set(
            err, QP_ERR_BAD_INPUT, "%s: input '%s' has %llu rows, fewer than one batch of %llu",
            path, inputs[0].name, (unsigned long long)z->total_rows, (unsigned long long)batch0);
        goto fail;
    }
    /* One batch buffer per input: the largest array_split chunk. */
    uint64_t max_rows = z->total_rows / z->steps + (z->total_rows % z->steps ? 1 : 0);
    for (size_t i = 0; i < n; i++) {
        struct qp_array row = z->first[i];
        row.dims[0] = 1;
        int ok = 0;
        uint64_t numel = qp_array_numel(&row, &ok);
        size_t rb = ok ? qp_dtype_nbytes(row.dtype, numel, &ok) : 0, bytes = 0;
        if (!ok || max_rows > SIZE_MAX || !qp_size_mul((size_t)max_rows, rb, &bytes)) {
            st = qp_error_set(err, QP_ERR_BAD_INPUT, "%s: input '%s': a batch is too large", path,
                              inputs[i].name);
            goto fail;
        }
        z->row_bytes[i] = rb;
        if (!(z->in[i].buf = malloc(bytes ? bytes : 1))) {
            st = qp_error_set(err, QP_ERR_NOMEM, "calibration data: cannot allocate a batch");
            goto fail;
        }
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
    p->impl = z;
    p->n_samples = z->total_rows;
    p->n_batches = z->steps;
    *out = p;
    return QP_OK;
fail:
    npzp_free(z, n);
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
            for (int d = 0; d < m->rank; d++) {
                m->model_dims[d] = v->dims[d].value;
                m->dim_params[d] = v->dims[d].value < 0 ? v->dims[d].param : NULL;
            }
        }
        m->shape_given = qp_calib_shapes_find(shapes, v->name) != NULL;
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
