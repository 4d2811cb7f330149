/*
 * Internals of the ONNX loader and saver (src/onnx), shared by its files and visible to tests.
 * The public entry points are in include/qplace/model.h.
 */
#ifndef QP_ONNX_ONNX_IO_H
#define QP_ONNX_ONNX_IO_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "ir/ir.h"
#include "onnx.pb-c.h"
#include "qplace/status.h"

/* Deepest message nesting the loader accepts (ModelProto is level 1). protobuf-c unpacks
 * recursively without a limit, so deeper files are rejected before unpacking. A graph nested in
 * an If/Loop attribute costs three levels (NodeProto, AttributeProto, GraphProto). */
#define QP_ONNX_MAX_DEPTH 100

/* Largest serialized ModelProto protobuf accepts (2 GiB - 1). */
#define QP_ONNX_PROTO_LIMIT ((uint64_t)0x7fffffff)

/* Walks the protobuf wire format of `size` bytes as a message of type `desc`, following known
 * message-typed fields, without allocating. Returns QP_ERR_BAD_INPUT for malformed wire data
 * (bad varints, lengths past the end, groups, field number 0) or nesting deeper than `max_depth`
 * message levels; the message says what and at which byte offset. */
enum qp_status qp_onnx_check_wire(const uint8_t *data, size_t size,
                                  const ProtobufCMessageDescriptor *desc, int max_depth,
                                  struct qp_error *err);

/* Test hook: the serialized-size limit used by qp_model_save_file for QP_EXTERNAL_AUTO and
 * QP_EXTERNAL_NEVER (0 restores QP_ONNX_PROTO_LIMIT). Lets tests exercise the 2 GiB logic with
 * small models. Not thread-safe; for tests only. */
void qp_onnx_set_proto_limit_for_testing(uint64_t limit);

/* ---- loading (load.c, tensor.c) ----------------------------------------------------------- */

/* A piece of the data a saver externalizes: `n` bytes of `data` at `offset` of the data file. */
struct qp_onnx_chunk {
    const void *data;
    size_t n;
    uint64_t offset;
};

/* qp_model_clone_shared: tensors whose external location is `location` borrow their bytes from
 * the chunk at their offset (chunks sorted by offset) instead of reading a file. */
struct qp_onnx_shared {
    const char *location;
    const struct qp_onnx_chunk *chunks;
    size_t n_chunks;
};

/* Loads `size` bytes at `data` like qp_model_load_buffer, with external data from `shared`. */
enum qp_status qp_onnx_load_shared(const void *data, size_t size,
                                   const struct qp_onnx_shared *shared, struct qp_model **model_out,
                                   struct qp_error *err);

struct qp_onnx_load {
    struct qp_model *m;
    const struct qp_onnx_shared *shared; /* NULL, or where shared tensors' bytes are */
    int skip_external;
    const char *dir; /* real path of the folder external data resolves against, or NULL */
    /* Distinct external data locations seen so far (borrowed from the proto), malloc'd. */
    const char **locations;
    size_t n_locations, cap_locations;
    /* Open-addressing set over `locations` (index + 1, 0 empty), malloc'd. */
    size_t *loc_hash;
    size_t loc_hash_cap;
};

/* Fills `t` from `tp`: dtype and dims checked, data borrowed from the proto (raw_data, typed
 * fields the host can use as is) or converted/read into buffers the model owns. `what` names the
 * tensor's role in messages ("initializer", "tensor"). On failure `t` may be partly filled. */
enum qp_status qp_onnx_tensor_from_proto(struct qp_onnx_load *c, const Onnx__TensorProto *tp,
                                         const char *what, struct qp_tensor *t,
                                         struct qp_error *err);

/* ---- path helpers (util.c) ----------------------------------------------------------------- */

/* 1 when the relative path `p` has a ".." component. */
int qp_onnx_path_has_dotdot(const char *p);
/* malloc'd "dir/name" (no doubled slash when dir ends with '/'); NULL when out of memory. */
char *qp_onnx_path_join(const char *dir, const char *name);
/* malloc'd folder part of `path` ("." when it has none, "/" for "/x"); NULL when out of memory. */
char *qp_onnx_path_dirname(const char *path);
/* Pointer to the last component of `path` (inside `path`). */
const char *qp_onnx_path_basename(const char *path);
/* 1 when the real path `p` is `dir` itself or lies inside it (both real paths). */
int qp_onnx_path_inside(const char *p, const char *dir);

#endif
