/*
 * libFuzzer harness for the .npy and .npz readers. The same bytes go to the .npy buffer reader
 * and, written to a temporary file, to the .npz reader (every member is read whole and through
 * the streaming API the npz provider uses). Beyond "does not crash", it checks that an accepted
 * .npy re-encodes to an image that reads back identically, that streaming accepts exactly what
 * the whole read accepts (with the same bytes), and that the non-finite counter accepts what the
 * reader produced.
 *
 *     clang -fsanitize=fuzzer,address,undefined -Iinclude -Isrc fuzz/fuzz_npy.c \
 *         src/calib/npy.c src/calib/npz.c src/core/{array,dtype,status}.c -lzip -o fuzz_npy
 *     ./fuzz_npy fuzz/corpus/npy
 *
 * Inputs that once crashed are kept in tests/data/npy/fuzz-* and replayed by
 * tests/unit/calib/test_npy.c.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "calib/npy.h"
#include "qplace/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "fuzz_npy: invariant broken: %s\n", what);
        abort();
    }
}

static void npy_round_trip(const struct qp_array *a) {
    struct qp_error err = {0};
    uint64_t nan, inf;
    check(qp_array_count_nonfinite(a, &nan, &inf, &err) == QP_OK, "count_nonfinite refused");
    uint8_t header[QP_NPY_HEADER_CAP];
    size_t hlen;
    check(qp_npy_header_format(a, "fuzz", header, sizeof header, &hlen, &err) == QP_OK,
          "an array the reader made cannot be written");
    uint8_t *img = malloc(hlen + a->nbytes);
    if (!img) return;
    memcpy(img, header, hlen);
    if (a->nbytes) memcpy(img + hlen, a->data, a->nbytes);
    struct qp_array b;
    check(qp_npy_read_buffer(img, hlen + a->nbytes, "again", &b, &err) == QP_OK,
          "re-encoded array does not read back");
    check(b.dtype == a->dtype && b.rank == a->rank && b.nbytes == a->nbytes, "shape changed");
    check(memcmp(b.dims, a->dims, sizeof b.dims[0] * (size_t)a->rank) == 0, "dims changed");
    check(a->nbytes == 0 || memcmp(b.data, a->data, a->nbytes) == 0, "data changed");
    qp_array_release(&b);
    free(img);
}

static char npz_tmp[512];

static void remove_npz_tmp(void) {
    unlink(npz_tmp);
}

static const char *npz_path(void) {
    static char *path = npz_tmp;
    static int fd = -1;
    if (fd < 0) {
        const char *dir = getenv("TMPDIR");
        snprintf(path, sizeof npz_tmp, "%s/fuzz_npy_XXXXXX.npz", dir && *dir ? dir : "/tmp");
        fd = mkstemps(path, 4);
        if (fd < 0) return NULL;
        close(fd);
        atexit(remove_npz_tmp);
    }
    return path;
}

/* Reads member `name` through the streaming API (header, then the data in three uneven
 * pieces, then the end check), as the npz provider does. It must accept exactly what the
 * whole-array reader accepted (`whole`, NULL when refused) and, for C-ordered data, give the
 * same bytes. */
static void stream_member(struct qp_npz *npz, const char *name, const struct qp_array *whole) {
    struct qp_error err = {0};
    struct qp_npz_member *m = NULL;
    if (qp_npz_member_open(npz, name, &m, &err) != QP_OK) {
        check(!whole, "member opens for the whole reader only");
        return;
    }
    const struct qp_npy_source *src = qp_npz_member_source(m);
    struct qp_npy_stream st;
    int ok = qp_npy_stream_begin(src, &st, &err) == QP_OK;
    uint8_t *buf = NULL;
    if (ok) {
        buf = malloc(st.data_size ? (size_t)st.data_size : 1);
        if (!buf) {
            qp_npz_member_close(m);
            return;
        }
        uint64_t items = st.data_size / st.item_size;
        uint64_t cut[3] = {items / 3, items / 3 + items / 5, items};
        uint64_t at = 0;
        for (int k = 0; k < 3 && ok; k++) {
            size_t n = (size_t)((cut[k] - at) * st.item_size);
            ok = qp_npy_stream_read(src, &st, buf + at * st.item_size, n, &err) == QP_OK;
            at = cut[k];
        }
        if (ok) ok = qp_npy_stream_end(src, &st, &err) == QP_OK;
    }
    check(ok == (whole != NULL), "streamed and whole reads disagree on accepting a member");
    if (ok && whole && (!st.fortran || st.rank < 2))
        check(whole->nbytes == st.data_size &&
                  (!whole->nbytes || memcmp(whole->data, buf, whole->nbytes) == 0),
              "streamed data differ from the whole read");
    free(buf);
    qp_npz_member_close(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct qp_error err = {0};
    struct qp_array a;
    if (qp_npy_read_buffer(size ? data : NULL, size, "fuzz.npy", &a, &err) == QP_OK) {
        npy_round_trip(&a);
        qp_array_release(&a);
    }

    const char *path = npz_path();
    if (!path) return 0;
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    size_t w = fwrite(data, 1, size, f);
    fclose(f);
    if (w != size) return 0;
    struct qp_npz *npz = NULL;
    if (qp_npz_open(path, (uint64_t)1 << 24, &npz, &err) != QP_OK) return 0;
    for (size_t i = 0; i < qp_npz_count(npz); i++) {
        const char *name = qp_npz_name(npz, i);
        check(name && qp_npz_contains(npz, name), "listed member not found");
        int whole_ok = qp_npz_read(npz, name, &a, &err) == QP_OK;
        stream_member(npz, name, whole_ok ? &a : NULL);
        if (whole_ok) {
            npy_round_trip(&a);
            qp_array_release(&a);
        }
    }
    qp_npz_close(npz);
    return 0;
}
