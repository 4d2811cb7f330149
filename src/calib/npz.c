/*
 * .npz (a zip of .npy members, as np.savez / np.savez_compressed write) reading and writing
 * with libzip.
 *
 * The archive is untrusted. Its directory is checked once at open: flat "<key>.npy" names, no
 * repeats, store or deflate only, and declared sizes that are plausible for the file and add up
 * to at most the caller's cap. A member read is then bounded by its declared size, so a zip
 * whose directory lies fails on the read instead of growing memory.
 */
#include "calib/npy.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#include "core/size.h"

/* Deflate cannot expand a bit into more than about 1032 bytes (a 258-byte match coded in two
 * 1-bit codes); a member claiming more than this ratio is lying about its size. */
#define DEFLATE_MAX_RATIO 1036
#define DEFLATE_SLACK     64

struct npz_member {
    char *key;          /* member name without ".npy" */
    zip_uint64_t index; /* in the archive */
    uint64_t size;      /* declared uncompressed size */
};

struct qp_npz {
    zip_t *zip;
    char *path;
    size_t n;
    struct npz_member *members; /* archive order */
    size_t *sorted;             /* member indices sorted by key, for lookup and repeats */
};

/* Sorts member indices by key (a merge sort: qsort has no context argument, and a global one
 * would not be thread-safe). */
static void sort_members(const struct npz_member *m, size_t *idx, size_t n) {
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    if (n < 2) return;
    size_t *tmp = malloc(n * sizeof *tmp);
    if (!tmp) { /* fall back to insertion sort: correct, only slower */
        for (size_t i = 1; i < n; i++) {
            size_t v = idx[i], j = i;
            while (j > 0 && strcmp(m[idx[j - 1]].key, m[v].key) > 0) {
                idx[j] = idx[j - 1];
                j--;
            }
            idx[j] = v;
        }
        return;
    }
    for (size_t width = 1; width < n; width *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            size_t mid = lo + width < n ? lo + width : n;
            size_t hi = lo + 2 * width < n ? lo + 2 * width : n;
            size_t a = lo, b = mid, o = lo;
            while (a < mid && b < hi)
                tmp[o++] = strcmp(m[idx[a]].key, m[idx[b]].key) <= 0 ? idx[a++] : idx[b++];
            while (a < mid)
                tmp[o++] = idx[a++];
            while (b < hi)
                tmp[o++] = idx[b++];
        }
        memcpy(idx, tmp, n * sizeof *idx);
        if (width > SIZE_MAX / 4) break;
    }
    free(tmp);
}

static enum qp_status zip_status(int code) {
    switch (code) {
    case ZIP_ER_MEMORY:
        return QP_ERR_NOMEM;
    case ZIP_ER_OPEN:
    case ZIP_ER_READ:
    case ZIP_ER_SEEK:
    case ZIP_ER_NOENT:
    case ZIP_ER_CLOSE:
    case ZIP_ER_WRITE:
    case ZIP_ER_TMPOPEN:
    case ZIP_ER_RENAME:
    case ZIP_ER_REMOVE:
        return QP_ERR_IO;
    case ZIP_ER_COMPNOTSUPP:
    case ZIP_ER_ENCRNOTSUPP:
        return QP_ERR_UNSUPPORTED;
    default:
        return QP_ERR_BAD_INPUT;
    }
}

/* Checks an archive member name; returns NULL when fine, else why not. */
static const char *bad_member_name(const char *name) {
    size_t len = strlen(name);
    if (name[0] == '/' || name[0] == '\\' || (len >= 2 && name[1] == ':'))
        return "is an absolute path";
    if (strcmp(name, "..") == 0 || strncmp(name, "../", 3) == 0 || strstr(name, "/../") ||
        (len >= 3 && strcmp(name + len - 3, "/..") == 0) || strncmp(name, "..\\", 3) == 0 ||
        strstr(name, "\\..\\") || strstr(name, "/..\\") || strstr(name, "\\../"))
        return "escapes the archive ('..')";
    if (strchr(name, '/') || strchr(name, '\\'))
        return "is inside a folder (np.savez writes flat archives)";
    for (const char *c = name; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) return "holds a control character";
    if (len < 4 || strcmp(name + len - 4, ".npy") != 0) return "is not an .npy file";
    if (len == 4) return "has an empty key";
    return NULL;
}

void qp_npz_close(struct qp_npz *npz) {
    if (!npz) return;
    if (npz->zip) zip_discard(npz->zip);
    for (size_t i = 0; i < npz->n; i++)
        free(npz->members[i].key);
    free(npz->members);
    free(npz->sorted);
    free(npz->path);
    free(npz);
}

enum qp_status qp_npz_open(const char *path, uint64_t max_bytes, struct qp_npz **npz_out,
                           struct qp_error *err) {
    if (!path || !npz_out) return qp_error_set(err, QP_ERR_USAGE, "qp_npz_open: NULL argument");
    if (max_bytes == 0) max_bytes = QP_NPZ_DEFAULT_MAX_BYTES;
    enum qp_status st = QP_OK;
    struct qp_npz *npz = NULL;

    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return qp_error_set(err, QP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st =
            qp_error_set(err, QP_ERR_IO, "%s: not a regular file (an .npz must be seekable)", path);
        goto fail;
    }
    uint64_t file_size = (uint64_t)sb.st_size;
    if (file_size == 0) { /* libzip would take it for an empty archive; numpy does not */
        st = qp_error_set(err, QP_ERR_BAD_INPUT, "%s: empty file, not an .npz (zip) archive", path);
        goto fail;
    }
    npz = calloc(1, sizeof *npz);
    if (!npz || !(npz->path = strdup(path))) {
        st = qp_error_set(err, QP_ERR_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    int zcode = 0;
    npz->zip = zip_fdopen(fd, 0, &zcode);
    if (!npz->zip) {
        zip_error_t ze;
        zip_error_init_with_code(&ze, zcode);
        st = qp_error_set(err, zip_status(zcode), "%s: %s%s", path,
                          zcode == ZIP_ER_NOZIP ? "not an .npz (zip) archive: " : "",
                          zip_error_strerror(&ze));
        zip_error_fini(&ze);
        goto fail;
    }
    fd = -1; /* owned by the archive now */

    zip_int64_t n_entries = zip_get_num_entries(npz->zip, 0);
    if (n_entries < 0 || (uint64_t)n_entries > SIZE_MAX / sizeof(struct npz_member)) {
        st = qp_error_set(err, QP_ERR_BAD_INPUT, "%s: bad entry count", path);
        goto fail;
    }
    size_t n = (size_t)n_entries;
    npz->members = calloc(n ? n : 1, sizeof *npz->members);
    npz->sorted = calloc(n ? n : 1, sizeof *npz->sorted);
    if (!npz->members || !npz->sorted) {
        st = qp_error_set(err, QP_ERR_NOMEM, "%s: cannot allocate %zu member records", path, n);
        goto fail;
    }
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        zip_stat_t zs;
        if (zip_stat_index(npz->zip, i, 0, &zs) != 0) {
            zip_error_t *ze = zip_get_error(npz->zip);
            st = qp_error_set(err, zip_status(zip_error_code_zip(ze)), "%s: entry %zu: %s", path, i,
                              zip_error_strerror(ze));
            goto fail;
        }
        const zip_uint64_t need = ZIP_STAT_NAME | ZIP_STAT_SIZE | ZIP_STAT_COMP_SIZE |
                                  ZIP_STAT_COMP_METHOD | ZIP_STAT_ENCRYPTION_METHOD;
        if ((zs.valid & need) != need) {
            st = qp_error_set(err, QP_ERR_BAD_INPUT, "%s: entry %zu: incomplete directory record",
                              path, i);
            goto fail;
        }
        const char *why = bad_member_name(zs.name);
        if (why) {
            /* control characters are not echoed back */
            int printable = 1;
            for (const char *c = zs.name; *c; c++)
                if ((unsigned char)*c < 0x20 || *c == 0x7f) printable = 0;
            st = qp_error_set(err, QP_ERR_BAD_INPUT, "%s: member '%.200s' %s", path,
                              printable ? zs.name : "?", why);
            goto fail;
        }
        if (zs.encryption_method != ZIP_EM_NONE) {
            st = qp_error_set(err, QP_ERR_UNSUPPORTED, "%s: member '%.200s' is encrypted", path,
                              zs.name);
            goto fail;
        }
        if (zs.comp_method != ZIP_CM_STORE && zs.comp_method != ZIP_CM_DEFLATE) {
            st = qp_error_set(err, QP_ERR_UNSUPPORTED,
                              "%s: member '%.200s' uses compression method %d; only stored and "
                              "deflated members (what numpy writes) are read",
                              path, zs.name, (int)zs.comp_method);
            goto fail;
        }
        if (zs.comp_size > file_size ||
            (zs.comp_method == ZIP_CM_STORE && zs.size != zs.comp_size) ||
            (zs.comp_method == ZIP_CM_DEFLATE &&
             zs.size / DEFLATE_MAX_RATIO > zs.comp_size + DEFLATE_SLACK)) {
            st = qp_error_set(err, QP_ERR_BAD_INPUT,
                              "%s: member '%.200s' declares %llu bytes from %llu compressed in a "
                              "%llu-byte file: impossible sizes",
                              path, zs.name, (unsigned long long)zs.size,
                              (unsigned long long)zs.comp_size, (unsigned long long)file_size);
            goto fail;
        }
        if (zs.size > max_bytes - total) {
            st = qp_error_set(err, QP_ERR_BAD_INPUT,
                              "%s: members declare more than %llu bytes uncompressed in total "
                              "(reached at member '%.200s'), over the limit",
                              path, (unsigned long long)max_bytes, zs.name);
            goto fail;
        }
        total += zs.size;
        size_t klen = strlen(zs.name) - 4;
        char *key = malloc(klen + 1);
        if (!key) {
            st = qp_error_set(err, QP_ERR_NOMEM, "%s: out of memory", path);
            goto fail;
        }
        memcpy(key, zs.name, klen);
        key[klen] = 0;
        npz->members[i] = (struct npz_member){key, i, zs.size};
        npz->n = i + 1;
    }
    sort_members(npz->members, npz->sorted, npz->n);
    for (size_t i = 1; i < npz->n; i++) {
        const char *k = npz->members[npz->sorted[i]].key;
        if (strcmp(npz->members[npz->sorted[i - 1]].key, k) == 0) {
            st = qp_error_set(err, QP_ERR_BAD_INPUT, "%s: member '%.200s.npy' appears twice", path,
                              k);
            goto fail;
        }
    }
    *npz_out = npz;
    return QP_OK;

fail:
    if (fd >= 0) close(fd);
    qp_npz_close(npz);
    return st;
}

size_t qp_npz_count(const struct qp_npz *npz) {
    return npz ? npz->n : 0;
}

const char *qp_npz_name(const struct qp_npz *npz, size_t i) {
    return npz && i < npz->n ? npz->members[i].key : NULL;
}

static const struct npz_member *find_member(const struct qp_npz *npz, const char *name) {
    size_t lo = 0, hi = npz->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const struct npz_member *m = &npz->members[npz->sorted[mid]];
        int c = strcmp(m->key, name);
        if (c == 0) return m;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

int qp_npz_contains(const struct qp_npz *npz, const char *name) {
    return npz && name && find_member(npz, name) != NULL;
}

struct zread_ctx {
    zip_file_t *zf;
    const char *name;
};

struct qp_npz_member {
    zip_file_t *zf;
    struct zread_ctx zc;
    char what[512];
    struct qp_npy_source src;
};

static enum qp_status zread(void *ctx, void *buf, size_t n, size_t *got, struct qp_error *err) {
    struct zread_ctx *z = ctx;
    zip_int64_t k = zip_fread(z->zf, buf, n);
    if (k < 0) {
        zip_error_t *ze = zip_file_get_error(z->zf);
        return qp_error_set(err, zip_status(zip_error_code_zip(ze)), "%s: %s", z->name,
                            zip_error_strerror(ze));
    }
    *got = (size_t)k;
    return QP_OK;
}

enum qp_status qp_npz_read(struct qp_npz *npz, const char *name, struct qp_array *out,
                           struct qp_error *err) {
    if (!npz || !name || !out) return qp_error_set(err, QP_ERR_USAGE, "qp_npz_read: NULL argument");
    const struct npz_member *m = find_member(npz, name);
    if (!m) {
        char keys[512];
        size_t off = 0;
        keys[0] = 0;
        for (size_t i = 0; i < npz->n && off < sizeof keys - 8; i++) {
            int w = snprintf(keys + off, sizeof keys - off, "%s'%s'", i ? ", " : "",
                             npz->members[i].key);
            if (w < 0) break;
            off += (size_t)w;
        }
        if (off >= sizeof keys - 8) snprintf(keys + sizeof keys - 8, 8, ", ...");
        return qp_error_set(err, QP_ERR_BAD_INPUT, "%s: no member '%.200s' (members: %s)",
                            npz->path, name, npz->n ? keys : "none");
    }
    struct qp_npz_member *mr = NULL;
    enum qp_status st = qp_npz_member_open(npz, name, &mr, err);
    if (st != QP_OK) return st;
    st = qp_npy_read_source(&mr->src, out, err);
    qp_npz_member_close(mr);
    return st;
}

enum qp_status qp_npz_member_open(struct qp_npz *npz, const char *name, struct qp_npz_member **out,
                                  struct qp_error *err) {
    const struct npz_member *m = find_member(npz, name);
    if (!m) return qp_error_set(err, QP_ERR_BAD_INPUT, "%s: no member '%.200s'", npz->path, name);
    struct qp_npz_member *r = calloc(1, sizeof *r);
    if (!r) return qp_error_set(err, QP_ERR_NOMEM, "%s: out of memory", npz->path);
    snprintf(r->what, sizeof r->what, "%s: member '%s.npy'", npz->path, m->key);
    r->zf = zip_fopen_index(npz->zip, m->index, 0);
    if (!r->zf) {
        zip_error_t *ze = zip_get_error(npz->zip);
        enum qp_status st = qp_error_set(err, zip_status(zip_error_code_zip(ze)), "%s: %s", r->what,
                                         zip_error_strerror(ze));
        free(r);
        return st;
    }
    r->zc = (struct zread_ctx){r->zf, r->what};
    r->src = (struct qp_npy_source){r->what, 1, m->size, zread, &r->zc};
    *out = r;
    return QP_OK;
}

const struct qp_npy_source *qp_npz_member_source(const struct qp_npz_member *m) {
    return &m->src;
}

void qp_npz_member_close(struct qp_npz_member *r) {
    if (!r) return;
    zip_fclose(r->zf);
    free(r);
}

/* Checks a key given to the writer; NULL when fine. */
static const char *bad_key(const char *key) {
    if (!key) return "is NULL";
    if (!*key) return "is empty";
    if (strcmp(key, ".") == 0 || strcmp(key, "..") == 0) return "is '.' or '..'";
    for (const char *c = key; *c; c++) {
        if (*c == '/' || *c == '\\') return "holds a '/' or '\\'";
        if ((unsigned char)*c < 0x20 || *c == 0x7f) return "holds a control character";
    }
    return NULL;
}

/* The end-of-central-directory record alone: the empty archive np.savez writes for no arrays
 * (libzip writes nothing at all for an empty archive). */
static const uint8_t empty_zip[22] = {'P', 'K', 5, 6};

enum qp_status qp_npz_write_file(const char *path, const char *const *names,
                                 const struct qp_array *arrays, size_t n, enum qp_npz_method method,
                                 struct qp_error *err) {
    if (!path || (n && (!names || !arrays)))
        return qp_error_set(err, QP_ERR_USAGE, "qp_npz_write_file: NULL argument");
    if ((unsigned)method >= QP_NPZ_METHOD_COUNT)
        return qp_error_set(err, QP_ERR_USAGE, "%s: unknown npz method %d", path, (int)method);
    if (n == 0) {
        struct qp_file_part part = {empty_zip, sizeof empty_zip};
        return qp_file_write_atomic_parts(path, &part, 1, err);
    }
    enum qp_status st = QP_OK;
    uint8_t *headers = NULL;
    size_t *hlens = NULL;
    struct npz_member *keys = NULL;
    size_t *sorted = NULL;
    zip_t *za = NULL;
    char *member = NULL;

    if (!(headers = qp_malloc_n(n, QP_NPY_HEADER_CAP)) || !(hlens = calloc(n, sizeof *hlens)) ||
        !(keys = calloc(n, sizeof *keys)) || !(sorted = calloc(n, sizeof *sorted))) {
        st = qp_error_set(err, QP_ERR_NOMEM, "%s: cannot allocate headers for %zu arrays", path, n);
        goto fail;
    }
    size_t max_key = 0;
    for (size_t i = 0; i < n; i++) {
        const char *why = bad_key(names[i]);
        if (why) {
            st = qp_error_set(err, QP_ERR_USAGE, "%s: array %zu: key '%.200s' %s", path, i,
                              names[i] && !strstr(why, "control") ? names[i] : "?", why);
            goto fail;
        }
        char what[300];
        snprintf(what, sizeof what, "%s: array '%.200s'", path, names[i]);
        st = qp_npy_header_format(&arrays[i], what, headers + i * QP_NPY_HEADER_CAP,
                                  QP_NPY_HEADER_CAP, &hlens[i], err);
        if (st != QP_OK) goto fail;
        keys[i].key = (char *)names[i];
        size_t kl = strlen(names[i]);
        if (kl > max_key) max_key = kl;
    }
    sort_members(keys, sorted, n);
    for (size_t i = 1; i < n; i++)
        if (strcmp(keys[sorted[i - 1]].key, keys[sorted[i]].key) == 0) {
            st = qp_error_set(err, QP_ERR_USAGE, "%s: key '%.200s' is given twice", path,
                              keys[sorted[i]].key);
            goto fail;
        }
    if (max_key > SIZE_MAX - 5 || !(member = malloc(max_key + 5))) {
        st = qp_error_set(err, QP_ERR_NOMEM, "%s: out of memory", path);
        goto fail;
    }

    /* libzip writes to a temporary file next to `path` and renames it over `path` in
     * zip_close; on failure it removes the temporary file and leaves `path` alone. */
    int zcode = 0;
    za = zip_open(path, ZIP_CREATE | ZIP_TRUNCATE, &zcode);
    if (!za) {
        zip_error_t ze;
        zip_error_init_with_code(&ze, zcode);
        st = qp_error_set(err, zip_status(zcode), "%s: %s", path, zip_error_strerror(&ze));
        zip_error_fini(&ze);
        goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        zip_buffer_fragment_t frags[2] = {
            {headers + i * QP_NPY_HEADER_CAP, hlens[i]},
            {arrays[i].data, arrays[i].nbytes},
        };
        zip_error_t ze;
        zip_error_init(&ze);
        zip_source_t *zs =
            zip_source_buffer_fragment_create(frags, arrays[i].nbytes ? 2 : 1, 0, &ze);
        if (!zs) {
            st = qp_error_set(err, zip_status(zip_error_code_zip(&ze)), "%s: %s", path,
                              zip_error_strerror(&ze));
            zip_error_fini(&ze);
            goto fail;
        }
        zip_error_fini(&ze);
        snprintf(member, max_key + 5, "%s.npy", names[i]);
        zip_int64_t idx = zip_file_add(za, member, zs, ZIP_FL_ENC_UTF_8);
        if (idx < 0) {
            zip_source_free(zs);
            st = qp_error_set(err, zip_status(zip_error_code_zip(zip_get_error(za))),
                              "%s: adding '%s': %s", path, member, zip_strerror(za));
            goto fail;
        }
        zip_int32_t cm = method == QP_NPZ_DEFLATE ? ZIP_CM_DEFLATE : ZIP_CM_STORE;
        if (zip_set_file_compression(za, (zip_uint64_t)idx, cm, 0) != 0) {
            st = qp_error_set(err, zip_status(zip_error_code_zip(zip_get_error(za))),
                              "%s: '%s': %s", path, member, zip_strerror(za));
            goto fail;
        }
    }
    if (zip_close(za) != 0) {
        st = qp_error_set(err, zip_status(zip_error_code_zip(zip_get_error(za))),
                          "%s: writing the archive: %s", path, zip_strerror(za));
        goto fail;
    }
    za = NULL;

fail:
    if (za) zip_discard(za);
    free(member);
    free(sorted);
    free(keys);
    free(hlens);
    free(headers);
    return st;
}
