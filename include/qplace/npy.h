/*
 * qplace/npy.h — NumPy .npy and .npz files: how `qplace run` takes inputs and returns outputs,
 * and how calibration data arrives.
 *
 *     struct qp_error err = {0};
 *     struct qp_npz *npz = NULL;
 *     if (qp_npz_open("calib.npz", QP_NPZ_DEFAULT_MAX_BYTES, &npz, &err) != QP_OK) goto fail;
 *     for (size_t i = 0; i < qp_npz_count(npz); i++) {
 *         struct qp_array a;
 *         if (qp_npz_read(npz, qp_npz_name(npz, i), &a, &err) != QP_OK) goto fail;
 *         ...                                   // a.data: C order, little-endian
 *         qp_array_release(&a);
 *     }
 *     qp_npz_close(npz);
 *
 * Files are untrusted. Readers accept .npy format versions 1.0, 2.0 and 3.0 with a strictly
 * parsed header, these element types (any byte order; big-endian data is converted):
 *
 *     f2 f4 f8        float16 float double
 *     i1 i2 i4 i8     int8 int16 int32 int64
 *     u1 u2 u4 u8     uint8 uint16 uint32 uint64
 *     b1              bool (any nonzero byte reads as 1)
 *     c8 c16          complex64 complex128
 *
 * and Fortran-ordered files, which are transposed to C order. They refuse, with a message
 * naming the file (and the archive member): object arrays ('|O', which hold pickles — qplace
 * never unpickles, and there is no opt-in), structured, string, datetime and other dtypes,
 * rank above QP_MAX_RANK, data shorter or longer than the shape needs, shapes whose size
 * overflows, and malformed headers. Nothing is allocated for the data before its size is
 * known to match the file. docs/npy.md has the details and the reasons.
 *
 * Writers produce exactly what numpy writes (format 1.0, '<' byte order, 64-byte aligned
 * header) and replace the target atomically: data goes to a temporary file in the target's
 * folder that is renamed over the target, and is removed on failure.
 *
 * A qp_npz handle is not thread-safe; use one per thread.
 */
#ifndef QPLACE_NPY_H
#define QPLACE_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "qplace/array.h"
#include "qplace/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- .npy ------------------------------------------------------------------------------- */

/* Reads the .npy file at `path` (a regular file, or a pipe) into `out`, a new owned array that
 * the caller releases with qp_array_release. `out` is written only on success.
 * Returns QP_OK; QP_ERR_IO when the file cannot be opened or read; QP_ERR_BAD_INPUT for a
 * malformed or truncated file, or data whose size does not match the header;
 * QP_ERR_UNSUPPORTED for a well-formed file qplace does not take (object, structured or string
 * dtype, rank above QP_MAX_RANK, format version above 3.0); QP_ERR_NOMEM. */
enum qp_status qp_npy_read_file(const char *path, struct qp_array *out, struct qp_error *err);

/* Reads a whole .npy image held in memory (`data`, `size` bytes, borrowed for the call; `data`
 * may be NULL when size is 0). The data is copied: `out` owns its memory and does not point
 * into `data`. `name` (borrowed, may be NULL) starts every error message. Statuses as
 * qp_npy_read_file, without QP_ERR_IO. */
enum qp_status qp_npy_read_buffer(const void *data, size_t size, const char *name,
                                  struct qp_array *out, struct qp_error *err);

/* Writes `a` (borrowed) to `path` as a .npy file, atomically. Returns QP_OK; QP_ERR_USAGE for
 * an invalid array; QP_ERR_UNSUPPORTED for dtypes numpy has no standard type for (bfloat16,
 * the FP8 and 4-bit types: convert them first); QP_ERR_IO (nothing is left behind: neither the
 * temporary file nor a partial target; an existing target is untouched); QP_ERR_NOMEM. */
enum qp_status qp_npy_write_file(const char *path, const struct qp_array *a, struct qp_error *err);

/* ---- .npz ------------------------------------------------------------------------------- */

struct qp_npz;

/* Cap on the total uncompressed size of an archive's members used when max_bytes is 0. */
#define QP_NPZ_DEFAULT_MAX_BYTES ((uint64_t)4 << 30)

/* Opens the .npz (zip) archive at `path` and checks its directory: every member must be a flat
 * "<key>.npy" name (no folders, no absolute or ".." paths, no repeats), stored or deflated,
 * not encrypted, and the members' declared uncompressed sizes must add up to at most
 * `max_bytes` (0: QP_NPZ_DEFAULT_MAX_BYTES). Reads are later bounded by those declared sizes,
 * so an archive that lies about them fails instead of growing. On success `*npz_out` is a new
 * handle the caller closes with qp_npz_close; it is left alone on failure.
 * Returns QP_OK; QP_ERR_IO (cannot open or read); QP_ERR_BAD_INPUT (not a zip, a bad member
 * name, over the size cap); QP_ERR_UNSUPPORTED (another compression method, encryption);
 * QP_ERR_NOMEM. */
enum qp_status qp_npz_open(const char *path, uint64_t max_bytes, struct qp_npz **npz_out,
                           struct qp_error *err);

/* Number of members, and the key of member i (0 <= i < count) in archive order: the member
 * name without ".npy". The string is owned by the handle and lives until qp_npz_close; NULL
 * for i out of range. */
size_t qp_npz_count(const struct qp_npz *npz);
const char *qp_npz_name(const struct qp_npz *npz, size_t i);
/* 1 when the archive has a member with key `name`, else 0. */
int qp_npz_contains(const struct qp_npz *npz, const char *name);

/* Reads member `name` (a key, without ".npy"; borrowed) into `out`, a new owned array as from
 * qp_npy_read_file; messages read "<path>: member '<name>.npy': ...". `out` is written only on
 * success. Returns QP_OK; QP_ERR_BAD_INPUT (no such member — the message lists the keys —, a
 * malformed member, a CRC or size mismatch); QP_ERR_UNSUPPORTED; QP_ERR_IO; QP_ERR_NOMEM. */
enum qp_status qp_npz_read(struct qp_npz *npz, const char *name, struct qp_array *out,
                           struct qp_error *err);

/* Closes the archive and frees the handle. NULL-safe. */
void qp_npz_close(struct qp_npz *npz);

enum qp_npz_method {
    QP_NPZ_STORE,   /* like np.savez */
    QP_NPZ_DEFLATE, /* like np.savez_compressed */
    QP_NPZ_METHOD_COUNT
};

/* Writes `n` arrays as an .npz archive at `path`, atomically: member i is "<names[i]>.npy"
 * holding arrays[i]. `names` and `arrays` are borrowed for the call. Keys must be non-empty,
 * distinct, and hold no '/', '\\' or control characters and not be "." or "..".
 * Returns QP_OK; QP_ERR_USAGE (a bad key or array, n > 0 with NULL lists); QP_ERR_UNSUPPORTED
 * (a dtype numpy has no type for, as qp_npy_write_file); QP_ERR_IO (nothing left behind);
 * QP_ERR_NOMEM. */
enum qp_status qp_npz_write_file(const char *path, const char *const *names,
                                 const struct qp_array *arrays, size_t n, enum qp_npz_method method,
                                 struct qp_error *err);

/* ---- checks ----------------------------------------------------------------------------- */

/* Counts NaN and infinite elements of a float array (float, double, float16, bfloat16, the FP8
 * types; complex types count each real and imaginary part). The readers keep NaN and Inf
 * (calibration decides what to do with them); this is how to find them. Integer, bool and
 * float4 arrays have none: both counts are 0. `a` is borrowed for the call. Returns QP_OK, or
 * QP_ERR_USAGE for an invalid array (bad dtype, data size not matching the shape); the counts
 * are written only on success and either pointer may be NULL. */
enum qp_status qp_array_count_nonfinite(const struct qp_array *a, uint64_t *nan_out,
                                        uint64_t *inf_out, struct qp_error *err);

#ifdef __cplusplus
}
#endif
#endif
