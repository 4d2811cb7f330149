/*
 * The contract between the runtime and the kernels.
 *
 * Every op is a registry row (registry.def): domain, op type, the opset range it implements, the
 * input dtypes it accepts, a *prepare* and a *run* function. The runtime resolves rows when a
 * session is created and calls prepare once per node when it plans a shape set:
 *
 *   prepare  validates attributes and inputs, sets every output's dtype and shape, precomputes
 *            what run needs into a malloc'd `state` (freed by the runtime with free()), and asks
 *            for `scratch` bytes. Inputs whose data is known at plan time (initializers,
 *            constants, shape-subgraph values) have is_const set and data valid; an op that
 *            needs data to infer its shape (Reshape's shape, Slice's starts, ...) reads it here
 *            and fails with QP_ERR_UNSUPPORTED when it is not a plan-time constant.
 *   run      computes only: no allocation, no shape logic beyond what prepare stored. It may fail
 *            only on data it could not see at prepare (an out-of-range Gather index).
 *
 * When all inputs of a node are plan-time constants (or the op reads shapes only, like Shape),
 * the runtime runs it at plan time and its outputs become constants too; that is how shape
 * subgraphs resolve to concrete shapes.
 *
 * Kernels use OpenMP (the engine's one threading runtime) with r->n_threads threads and must
 * give results that do not depend on the thread count: each output element is computed by one
 * thread, in an order that does not depend on the partition.
 */
#ifndef QP_KERNELS_KERNEL_H
#define QP_KERNELS_KERNEL_H

#include <stddef.h>
#include <stdint.h>

#include "ir/ir.h"
#include "qplace/array.h"
#include "qplace/dtype.h"
#include "qplace/status.h"

/* A tensor as kernels see it. */
struct qp_kt {
    enum qp_dtype dtype;
    int rank;
    int64_t dims[QP_MAX_RANK];
    uint64_t numel;
    size_t nbytes;
    void *data;   /* at prepare: valid only when is_const; at run: always valid */
    int is_const; /* data known at plan time */
};

struct qp_kprep {
    const struct qp_node *node;
    int opset; /* opset version imported for the node's domain */
    int n_in, n_out;
    const struct qp_kt *const *in; /* in[i] NULL: optional input omitted (or beyond n_inputs) */
    struct qp_kt *const *out;      /* out[i] NULL: optional output omitted */
    void *state;                   /* set by prepare (malloc'd), freed by the runtime */
    size_t scratch;                /* bytes of scratch run needs (64-byte aligned) */
    struct qp_error *err;          /* messages without the node prefix; the runtime adds it */
    int missing_const; /* set by qp_kneed_const: the input whose plan-time value was missing */
};

struct qp_krun {
    const struct qp_node *node;
    const void *state;
    int n_in, n_out;
    const struct qp_kt *const *in;
    struct qp_kt *const *out;
    void *scratch;
    int n_threads;
    int lane; /* the session's qp_session_options.lane: which oneDNN primitive objects to use */
    struct qp_error *err;
};

typedef enum qp_status (*qp_kprepare_fn)(struct qp_kprep *p);
typedef enum qp_status (*qp_krun_fn)(const struct qp_krun *r);

/* Dtype masks for registry rows. */
#define QP_DT(d)  (1u << (d))
#define QP_DT_F32 QP_DT(QP_DTYPE_FLOAT)
#define QP_DT_F16 QP_DT(QP_DTYPE_FLOAT16)
#define QP_DT_F64 QP_DT(QP_DTYPE_DOUBLE)
#define QP_DT_INTS                                                                                 \
    (QP_DT(QP_DTYPE_INT8) | QP_DT(QP_DTYPE_UINT8) | QP_DT(QP_DTYPE_INT16) |                        \
     QP_DT(QP_DTYPE_UINT16) | QP_DT(QP_DTYPE_INT32) | QP_DT(QP_DTYPE_INT64) |                      \
     QP_DT(QP_DTYPE_UINT32) | QP_DT(QP_DTYPE_UINT64))
#define QP_DT_BOOL   QP_DT(QP_DTYPE_BOOL)
#define QP_DT_NUM    (QP_DT_F32 | QP_DT_F64 | QP_DT_INTS)
#define QP_DT_FLOATS (QP_DT_F32 | QP_DT_F64)
#define QP_DT_ANY    0xFFFFFFFFu

/* Row flags. */
enum {
    QP_KF_SHAPE_ONLY = 1,  /* reads input shapes only: always evaluated at plan time */
    QP_KF_F16_VIA_F32 = 2, /* float16 inputs are converted to float32 around the kernel */
    /* What the runtime's fusion and layout passes may assume of a row (they read these flags,
     * never the row's function pointers): */
    QP_KF_DNNL_CONV = 4,      /* the oneDNN convolution state (dnnl_conv.h's qp_dnnl_conv_*) */
    QP_KF_TRANSPOSED = 8,     /* with QP_KF_DNNL_CONV: ConvTranspose */
    QP_KF_LAYOUT_UNARY = 16,  /* each output element from input 0's at the same offset (other
                                 inputs: scalars), whatever order the offsets stand for */
    QP_KF_LAYOUT_BINARY = 32, /* each output element from the same offset of both inputs (or a
                                 scalar one) */
    QP_KF_QCONV = 64,         /* the integer path's QConv state (int8_conv.h's qp_int8_conv_*) */
    QP_KF_COPY = 128          /* output 0 holds input 0's bytes unchanged (Reshape, Identity...):
                                 the run copies nothing when both share their bytes */
};

struct qp_kernel {
    const char *domain; /* "" for ai.onnx */
    const char *op;
    int since_min, since_max; /* opset versions this row implements */
    uint32_t dtypes;          /* accepted dtypes of input `dtype_input` (QP_DT_ANY: any) */
    int dtype_input;
    unsigned flags;
    qp_kprepare_fn prepare;
    qp_krun_fn run;
};

/* Registry lookup. qp_kernel_find_op: any row for (domain, op) at `opset`, or NULL.
 * qp_kernel_has_op: 1 when (domain, op) has a row at any version. */
const struct qp_kernel *qp_kernel_find(const char *domain, const char *op, int opset);
int qp_kernel_has_op(const char *domain, const char *op);
size_t qp_kernel_count(void);
const struct qp_kernel *qp_kernel_at(size_t i);

/* ---- helpers for kernels (kutil.c) --------------------------------------------------------- */

const struct qp_attr *qp_kattr(const struct qp_node *n, const char *name);
int64_t qp_kattr_int(const struct qp_node *n, const char *name, int64_t def);
float qp_kattr_float(const struct qp_node *n, const char *name, float def);
/* String attribute copied into buf (NUL-terminated, truncated); `def` when absent. */
const char *qp_kattr_str(const struct qp_node *n, const char *name, const char *def, char *buf,
                         size_t size);
/* INTS attribute: returns count (or -1 when absent); values in *vals (borrowed). */
int64_t qp_kattr_ints(const struct qp_node *n, const char *name, const int64_t **vals);
int64_t qp_kattr_floats(const struct qp_node *n, const char *name, const float **vals);

/* Sets an output's dtype and shape and computes numel/nbytes. QP_ERR_BAD_INPUT / QP_ERR_NOMEM
 * on a negative dim, rank over QP_MAX_RANK or size overflow. */
enum qp_status qp_kt_set(struct qp_kt *t, enum qp_dtype dt, int rank, const int64_t *dims,
                         struct qp_error *err);
/* Integer element i of an integer (or bool) tensor, widened to int64. */
int64_t qp_kt_get_i64(const struct qp_kt *t, uint64_t i);
/* Element i of any numeric tensor as double (fp16/bf16 decoded). */
double qp_kt_get_f64(const struct qp_kt *t, uint64_t i);
/* Stores `v` (converted with C semantics; float16 rounded) as element i. */
void qp_kt_set_f64(struct qp_kt *t, uint64_t i, double v);
void qp_kt_set_i64(struct qp_kt *t, uint64_t i, int64_t v);

/* Normalizes axis to [0, rank) (negative counts from the end). QP_ERR_BAD_INPUT when out of
 * range, naming `what`. */
enum qp_status qp_kaxis(int64_t axis, int rank, int64_t *out, const char *what,
                        struct qp_error *err);
/* Requires input i to be present. */
enum qp_status qp_kneed(const struct qp_kprep *p, int i);
/* Requires input i to be present and a plan-time constant. */
enum qp_status qp_kneed_const(struct qp_kprep *p, int i, const char *what);
/* Multidirectional (numpy) broadcast of two shapes into out. */
enum qp_status qp_kbroadcast(int ra, const int64_t *da, int rb, const int64_t *db, int *r_out,
                             int64_t *d_out, struct qp_error *err);
/* "2x3x4" into buf. */
const char *qp_kshape_str(const struct qp_kt *t, char *buf, size_t size);
/* Elements per thread chunk: splits [0,n) into at most n_threads ranges (deterministic). */
void qp_ksplit(int64_t n, int n_threads, int t, int64_t *begin, int64_t *end);

#endif
