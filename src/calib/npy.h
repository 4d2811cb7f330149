/*
 * Internal: the pieces of the .npy reader and writer that the .npz code (npz.c) shares.
 * Public API: include/qplace/npy.h.
 */
#ifndef QP_CALIB_NPY_H
#define QP_CALIB_NPY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

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

/* The context of a source reading an open file: qp_npy_file_read is its `read`. Both fields are
 * borrowed; `path` names the file in messages. */
struct qp_npy_file {
    FILE *f;
    const char *path;
};
/* The `read` of a qp_npy_source whose ctx is a struct qp_npy_file: QP_ERR_IO on a read error. */
enum qp_status qp_npy_file_read(void *ctx, void *buf, size_t n, size_t *got, struct qp_error *err);

/* Reads and checks one .npy image from `src` into a new owned array `out` (written only on
 * success). When the size is known, no data memory is allocated before the header and the
 * size agree; otherwise memory grows with the bytes actually delivered. Reads past the data to
 * prove the image ends there. Statuses as qp_npy_read_file. */
enum qp_status qp_npy_read_source(const struct qp_npy_source *src, struct qp_array *out,
                                  struct qp_error *err);

/* Streaming reads of one .npy image: the header first, then the data in pieces, so that a
 * caller can take rows as it needs them (the npz provider, one batch at a time). */
struct qp_npy_stream {
    enum qp_dtype dtype;
    int rank;
    int64_t dims[QP_MAX_RANK];
    size_t item_size;
    int big_endian; /* the stored data is big-endian (reads swap it) */
    int fortran;    /* Fortran order: rows are not contiguous */
    uint64_t data_size, done;
};

/* Reads and checks the preamble and header from `src` (as qp_npy_read_source does, including
 * that a known size matches the shape) and fills *out; the source is then at the first data
 * byte. Statuses as qp_npy_read_file. */
enum qp_status qp_npy_stream_begin(const struct qp_npy_source *src, struct qp_npy_stream *out,
                                   struct qp_error *err);
/* Reads the next `n` data bytes (whole items, at most what is left) into buf, little-endian
 * and with bools as 0/1, in storage order. QP_ERR_BAD_INPUT when the data end early. */
enum qp_status qp_npy_stream_read(const struct qp_npy_source *src, struct qp_npy_stream *s,
                                  void *buf, size_t n, struct qp_error *err);
/* After all data were read: QP_ERR_BAD_INPUT when bytes follow them. */
enum qp_status qp_npy_stream_end(const struct qp_npy_source *src, const struct qp_npy_stream *s,
                                 struct qp_error *err);

/* One member of an open .npz (include/qplace/npy.h) as a stream source, read sequentially
 * (deflated members cannot seek; opening again starts over). `npz` must outlive it. */
struct qp_npz_member;
struct qp_npz;
enum qp_status qp_npz_member_open(struct qp_npz *npz, const char *name, struct qp_npz_member **out,
                                  struct qp_error *err);
/* The member's bytes; its name ("file.npz: member 'x.npy'") starts messages. */
const struct qp_npy_source *qp_npz_member_source(const struct qp_npz_member *m);
/* NULL-safe. */
void qp_npz_member_close(struct qp_npz_member *m);

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
