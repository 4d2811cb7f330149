/*
 * Internal: the pieces of the .npy reader and writer that the .npz code (npz.c) shares.
 * Public API: include/qplace/npy.h.
 */
#ifndef QP_CALIB_NPY_H
#define QP_CALIB_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "qplace/array.h"
#include "qplace/npy.h"
#include "qplace/status.h"

/* Longest header (magic to the last padding byte) qplace reads. numpy refuses headers over
 * 10000 bytes unless told otherwise; only structured dtypes need long ones, and those are
 * refused anyway. Bounds the one allocation made before the header is understood. */
#define QP_NPY_MAX_HEADER ((size_t)1 << 20)

/* Room for any header qp_npy_header_format writes (rank <= QP_MAX_RANK: about 250 bytes). */
#define QP_NPY_HEADER_CAP 512

/* A byte stream holding one .npy image. */
struct qp_npy_source {
    const char *name; /* starts every message ("calib.npz: member 'x.npy'") */
    int size_known;   /* 1: `size` is the exact length of the image */
    uint64_t size;
    /* Reads up to n (> 0) bytes into buf and stores the count in *got; 0 means the end.
     * Returns QP_OK or an error, with its message, in err. */
    enum qp_status (*read)(void *ctx, void *buf, size_t n, size_t *got, struct qp_error *err);
    void *ctx;
};

/* Reads and checks one .npy image from `src` into a new owned array `out` (written only on
 * success). When the size is known, no data memory is allocated before the header and the
 * size agree; otherwise memory grows with the bytes actually delivered. Reads past the data to
 * prove the image ends there. Statuses as qp_npy_read_file. */
enum qp_status qp_npy_read_source(const struct qp_npy_source *src, struct qp_array *out,
                                  struct qp_error *err);

/* Checks that `a` can be written as .npy (valid shape, nbytes matching, a dtype numpy has)
 * and writes the header numpy would write for it into buf (cap >= QP_NPY_HEADER_CAP), with
 * its length in *len_out. `what` starts messages. QP_ERR_USAGE / QP_ERR_UNSUPPORTED. */
enum qp_status qp_npy_header_format(const struct qp_array *a, const char *what, uint8_t *buf,
                                    size_t cap, size_t *len_out, struct qp_error *err);

/* Writes the concatenation of `parts` to `path` atomically: a new temporary file next to the
 * target, flushed to disk, renamed over the target; removed on any failure. QP_ERR_IO. */
/* Atomic writes of npy/npz files go through core/file.h. */
#include "core/file.h"

#endif
