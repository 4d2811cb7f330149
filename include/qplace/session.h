/*
 * qplace/session.h — the CPU inference engine.
 *
 * A session runs one loaded model. When it is created it resolves every node against the kernel
 * registry (an op, opset or dtype the engine lacks is an error right there, naming the node, op,
 * domain, opset and dtype), and for each set of input shapes it builds a *plan*: every tensor's
 * dtype and shape computed node by node by the kernels' prepare step, shape subgraphs (Shape,
 * Gather on shapes, Concat of int64, Range, ...) evaluated ahead of time so Reshape, Expand,
 * Slice and friends get concrete shapes, and all intermediate tensors placed in one arena whose
 * offsets are reused as tensors die (liveness). A run then computes only: it does not allocate.
 *
 * Plans are cached per input shape set. Shapes given at creation are planned at creation; a run
 * with a shape set not seen before plans it first (that run allocates; later runs with the same
 * shapes do not).
 *
 *     struct qp_error err = {0};
 *     struct qp_model *m = NULL;
 *     struct qp_session *s = NULL;
 *     if (qp_model_load_file("resnet50.onnx", NULL, &m, &err) != QP_OK) goto fail;
 *     struct qp_shape shape = {.name = "input", .rank = 4, .dims = {1, 3, 224, 224}};
 *     if (qp_session_create(m, NULL, 1, &shape, &s, &err) != QP_OK) goto fail;
 *
 *     struct qp_array in;                             // caller-owned input
 *     qp_array_alloc(&in, QP_DTYPE_FLOAT, 4, shape.dims, &err);
 *     ... fill in.data ...
 *     if (qp_session_run(s, 1, &in, &err) != QP_OK) goto fail;
 *     struct qp_array out;                            // a view into the session
 *     qp_session_output(s, 0, &out, &err);
 *     const float *logits = out.data;                 // valid until the next run or free
 *
 *     qp_array_release(&in);
 *     qp_session_free(s);
 *     qp_model_free(m);                               // after every session using it
 *
 * Threads: the engine uses OpenMP (the runtime oneDNN is built on) and nothing else. Results do
 * not depend on the thread count. A session is not safe to run from two threads at once; use one
 * session per thread.
 *
 * If: each branch is planned with the enclosing graph (only the taken one when the condition
 * is a plan-time constant; both branches must then give the same output dtypes and shapes, or
 * creation fails with QP_ERR_UNSUPPORTED) in an arena of its own; a run executes the taken
 * branch. Loop and Scan are not supported.
 *
 * Observers: a callback set with qp_session_set_observer sees every tensor a run computes, in
 * execution order — what calibration collects statistics from. Tensors the plan evaluated ahead
 * of time (constants, shape subgraphs) are not reported. When no observer is set the run does
 * not look for one beyond a NULL check.
 */
#ifndef QPLACE_SESSION_H
#define QPLACE_SESSION_H

#include <stddef.h>
#include <stdint.h>

#include "qplace/array.h"
#include "qplace/model.h"
#include "qplace/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct qp_session;

struct qp_session_options {
    /* Threads for kernels; 0 (default): all cores. */
    int n_threads;
    /* 1: run every node as its own step (no Conv-chain fusion, as with QP_NO_FUSE=1): the
     * unfused ONNX semantics. A fused session keeps one preparation of a fused Conv chain per
     * combination of `bypass` flags of the overlays on its weights, bias and folded parameters,
     * so toggling those keeps the plan; only a constant that decides what fuses (a Clip bound,
     * a post-operation's scalar) re-plans when its overlay is toggled. */
    int no_fusion;
    /* 1: plan at the first run (or qp_session_plan), not at creation, even when every input
     * shape is given: a caller that sets an observer, an observed set or overlays first would
     * otherwise pay for a plan it drops. */
    int lazy_plan;
    /* Which set of oneDNN primitive objects the session's kernels execute on (0, the default,
     * or 1..QP_SESSION_MAX_LANES-1). Primitives are shared by every session of the process with
     * the same geometry and thread count, and an execution holds its primitive's lock: sessions
     * that run at the same time on different threads (parallel sensitivity probes) take
     * different lanes so they do not wait on each other. Results do not depend on the lane. */
    int lane;
    /* The integer path (enum qp_int8_mode): QP_INT8_OFF (0, the default) runs a Q/DQ model as
     * written — every DequantizeLinear to float, the op in float, every QuantizeLinear its own
     * pass: the fake-quantization oracle that calibration, overlays and sensitivity use.
     * QP_INT8_AUTO fuses what TensorRT fuses (DQ -> Conv [-> activation] [-> residual Add] [-> Q])
     * into integer kernels and runs ops that commute with quantization on int8 tensors
     * (docs/engine.md "INT8 path"). Results then differ from QP_INT8_OFF by rounding: int8
     * outputs by at most one quantization step. The session then runs a rewritten copy of the
     * model: observers and overlays see that graph (use QP_INT8_OFF for them);
     * qp_session_int8_decisions says what fused. A model without Q/DQ runs as with QP_INT8_OFF.
     * QP_INT8_EXACT gives QP_INT8_OFF's outputs bit for bit, faster: each Q whose readers are
     * DQs of its parameters runs with them as one fake-quantize pass, and chains of Add, Sub,
     * Mul, Div, Clip, Relu and LeakyRelu with those passes and a float16 model's roundings
     * run as one pass (docs/engine.md "Exact path"). It also runs a rewritten copy: the values
     * a fused pass computes are not seen by observers and overlays (use QP_INT8_OFF for them). */
    int int8;
};

enum qp_int8_mode { QP_INT8_OFF = 0, QP_INT8_AUTO = 1, QP_INT8_EXACT = 2 };

/* What the integer path did with one QuantizeLinear/DequantizeLinear node of the model. */
struct qp_int8_decision {
    const char *node;    /* the Q/DQ node's name */
    const char *op_type; /* "QuantizeLinear" or "DequantizeLinear" */
    int fused;           /* 1: it is part of an integer kernel or data flow */
    const char *into;    /* fused: what it fused into ("QConv 'conv1' (3 nodes, int8 output)") */
    const char *reason;  /* not fused (or only partly): why it runs as its own pass */
};

/* The decisions of a session created with QP_INT8_AUTO, in the order they were made (*out is
 * borrowed for the session's lifetime); 0 for other sessions. *fallback_out (may be NULL)
 * receives "" or, when the integer path could not be planned and the session runs the model
 * as written, the reason. */
size_t qp_session_int8_decisions(const struct qp_session *s, const struct qp_int8_decision **out,
                                 const char **fallback_out);
/* On the integer path, float16/bfloat16 tensors inside the graph are computed and stored as
 * float32 (the CPU has no narrow float arithmetic; docs/engine.md "float16 models"): the number
 * of constants, Casts and declared tensor types widened so, 0 for other sessions. *why_out (may be
 * NULL) receives NULL or, when a graph with such tensors keeps them, the reason. */
size_t qp_session_int8_widened(const struct qp_session *s, const char **why_out);
/* The CPU instruction set the kernels run with ("AVX-512 VNNI BF16 AMX", "AVX-512 VNNI",
 * "AVX2 AVX-VNNI", "AVX2", ...; "VNNI" appears exactly when the integer path has exact int8 dot
 * products): benchmark lines print it, since oneDNN picks kernels and the integer path its
 * method by it. */
const char *qp_session_isa(void);

#define QP_SESSION_MAX_LANES 256

/* The shape of one graph input, by name. */
struct qp_shape {
    const char *name;
    int rank;
    int64_t dims[QP_MAX_RANK];
};

/* Creates a session for `model`, which is borrowed for the session's lifetime (free the model
 * after the session). `opts` may be NULL. `shapes` (borrowed for the call; n_shapes may be 0)
 * fixes the shapes of named graph inputs; inputs not listed use the model's static shape. When
 * every input's shape is then known, the plan for it is built now, so dtype and shape errors
 * surface here. On success *session_out owns a new session (qp_session_free).
 * A float16 model runs on a copy whose float16 tensors inside the graph are float32 arrays
 * rounded to float16 after every node that computes them (docs/engine.md): the results are the
 * model's as written, and an observer or qp_session_value_info sees such a tensor as float32
 * (graph inputs and outputs keep their float16 type).
 * Returns QP_ERR_UNSUPPORTED (an op, opset or dtype without a kernel, a subgraph op other than
 * If, a non-tensor input), QP_ERR_BAD_INPUT (inconsistent shapes or attributes; a shape naming no
 * input; a shape whose rank disagrees with the model), QP_ERR_NOMEM, QP_ERR_USAGE (NULL
 * arguments). */
enum qp_status qp_session_create(const struct qp_model *model,
                                 const struct qp_session_options *opts, size_t n_shapes,
                                 const struct qp_shape *shapes, struct qp_session **session_out,
                                 struct qp_error *err);

/* NULL-safe. */
void qp_session_free(struct qp_session *s);

/* Graph inputs the caller feeds (initializers excluded), in model order, and graph outputs.
 * Names are borrowed from the model. An index out of range gives NULL / QP_DTYPE_UNDEFINED. */
size_t qp_session_n_inputs(const struct qp_session *s);
const char *qp_session_input_name(const struct qp_session *s, size_t i);
enum qp_dtype qp_session_input_dtype(const struct qp_session *s, size_t i);
size_t qp_session_n_outputs(const struct qp_session *s);
const char *qp_session_output_name(const struct qp_session *s, size_t i);
/* Index of the input named `name`, or -1. */
int qp_session_input_index(const struct qp_session *s, const char *name);

/* Sets the kernel thread count (0: all cores). Results do not change. */
void qp_session_set_threads(struct qp_session *s, int n_threads);

/* Plans the given input shapes now (same rules as at creation) without running, so that the
 * first run with them does not allocate. QP_OK if already planned. */
enum qp_status qp_session_plan(struct qp_session *s, size_t n_shapes, const struct qp_shape *shapes,
                               struct qp_error *err);

/* Runs the model. inputs[i] (borrowed for the call) feeds graph input i; dtypes must match the
 * model exactly and ranks/static dims must agree with it. Uses the cached plan for these shapes
 * (planning first if there is none). Returns QP_ERR_USAGE (wrong input count or dtype),
 * QP_ERR_BAD_INPUT (a shape the model cannot take; data a kernel rejects, such as an
 * out-of-range Gather index — the message names the node), QP_ERR_UNSUPPORTED, QP_ERR_NOMEM
 * (planning a new shape set). After a failed run the outputs are undefined. */
enum qp_status qp_session_run(struct qp_session *s, size_t n_inputs, const struct qp_array *inputs,
                              struct qp_error *err);

/* Fills *view_out with a view (owned = 0) of output i of the last successful run. The data is
 * borrowed from the session and valid until the next run, qp_session_free, or — for an output
 * that is a graph input passed through — as long as the caller's input. Returns QP_ERR_USAGE
 * when there was no successful run or i is out of range. */
enum qp_status qp_session_output(const struct qp_session *s, size_t i, struct qp_array *view_out,
                                 struct qp_error *err);

/* Called once per tensor a run computes (`value` and its data borrowed for the call only), with
 * the producing node's name. A non-zero return stops the run with QP_ERR_USAGE. */
typedef int (*qp_observer_fn)(const char *tensor_name, const char *node_name,
                              const struct qp_array *value, void *user);
/* Installs (fn non-NULL) or removes the observer. `user` is borrowed while installed. */
void qp_session_set_observer(struct qp_session *s, qp_observer_fn fn, void *user);
/* on = 1: the observer does not depend on the order of the elements it receives (it computes
 * per-tensor statistics: ranges, histograms). The engine may then hand it a tensor in a oneDNN
 * blocked layout (the same elements, value->nbytes of them, in another order) instead of
 * reordering it to plain row-major for the observer, so observing costs no reorders between
 * convolutions. value->dims stay the logical shape. Off (0) by default; changing it may
 * re-plan. */
void qp_session_set_observer_any_order(struct qp_session *s, int on);
/* Restricts the observer to the named tensors (graph value names; n = 0 restores "every
 * tensor"). Tensors outside the set are not reported, so the engine may fuse across them: a
 * calibrator that names only the tensors it needs runs at (close to) plain inference speed.
 * A named tensor the plan computes once when it is built (a value derived from shapes, such as
 * attention's Cast of a dimension before Sqrt) is reported after each run's steps, with its
 * producer's name, like the tensors the run computes.
 * A name the graph does not have, or a graph input or initializer (never computed by a run),
 * is QP_ERR_USAGE naming it; the previous set is kept then. Changing the set may re-plan. */
enum qp_status qp_session_set_observed(struct qp_session *s, size_t n, const char *const *names,
                                       struct qp_error *err);

/* ---- edge overlays and partial re-execution ------------------------------------------------
 *
 * An overlay transforms what one consumer reads on one input: node `node` (a node name of the
 * top-level graph) input `input` sees fake_quantize(x) = dequantize(quantize(x)) instead of x,
 * computed by src/qmath/qparams, so a run with overlays is bit-identical to running the model
 * rewritten with real QuantizeLinear -> DequantizeLinear pairs on those edges (DESIGN.md
 * invariant 3). Other consumers of the same tensor still read x. The transformed copy lives in
 * the plan's arena (an overlay on a constant, such as a weight, is computed once at plan time).
 *
 * Partial re-execution (sensitivity probes): with a cache budget set, every successful
 * qp_session_run keeps its inputs and, while the budget lasts, the tensors it computes (first
 * those a partial run with the same overlay edges can read, latest first): the *reference*.
 * qp_session_run_partial then runs on the reference inputs with the current overlays and
 * computes only the nodes downstream of edges whose overlay differs from the reference's (a
 * bypass toggle counts as a change; two bypassed overlays are equal whatever their parameters),
 * plus, when the budget left a gap, the nodes needed to rebuild the uncached tensors those
 * read. Its outputs equal a full run's bit for bit.
 *
 *     struct qp_overlay ov = {.node = "conv1", .input = 0, .qtype = QP_DTYPE_INT8,
 *                             .n_params = 1, .scale = &scale};
 *     qp_session_set_cache(s, (size_t)1 << 30);
 *     qp_session_run(s, 1, &in, &err);                 // reference (no overlays)
 *     qp_session_set_overlays(s, 1, &ov, &err);
 *     qp_session_run_partial(s, &err);                 // recomputes conv1 and what follows
 *     qp_session_output(s, 0, &out, &err);
 */
struct qp_overlay {
    const char *node;       /* consumer node name (borrowed for the call) */
    int input;              /* input index of that node; the tensor must be float32 */
    enum qp_dtype qtype;    /* INT8, UINT8, INT16, UINT16, FLOAT8E4M3FN(UZ), FLOAT8E5M2(FNUZ) */
    int axis;               /* quantization axis when n_params > 1 (negative counts from the end) */
    size_t n_params;        /* 1: per tensor; else the length of `axis` (per channel) */
    const float *scale;     /* n_params finite positive scales (copied) */
    const void *zero_point; /* n_params elements of qtype (copied), or NULL for 0 */
    int saturate;           /* FP8 only: ONNX `saturate` (1 is ONNX's default) */
    int bypass;             /* 1: the consumer reads x unchanged, as with no overlay on the edge */
};

/* Replaces the session's overlays with `ov[0..n)` (n = 0 removes them). Everything is copied.
 * When the set of edges (with their axis and parameter count) changes, cached plans are dropped
 * and the next run plans again (allocates); changing only scales, zero points, qtype, saturate
 * or bypass keeps them. So to try many subsets of one set of edges (sensitivity probes), set
 * every edge once and toggle `bypass`: a bypassed overlay computes nothing and its consumer
 * reads the original tensor, bit for bit as with no overlay. Exceptions, which drop the plans:
 * new parameters for an overlay on a plan-time constant (a weight: its fake-quantized copy is
 * made at plan time), and a bypass toggle on a constant whose consumer was itself evaluated at
 * plan time. Toggling bypass on a weight keeps the plan but makes the next run prepare the
 * consumer once for the new combination (a weight reorder; allocates); later toggles back and
 * forth reuse both preparations. The outputs of the last run become unavailable. Returns
 * QP_ERR_BAD_INPUT (no such node, an input index out of range or omitted, a repeated edge, a
 * non-finite or non-positive scale, n_params 0), QP_ERR_UNSUPPORTED (a qtype other than those
 * listed), QP_ERR_NOMEM, QP_ERR_USAGE (NULL arguments); on failure the previous overlays stay.
 * A float-dtype or axis mismatch with the tensor surfaces when the plan is built (run). */
enum qp_status qp_session_set_overlays(struct qp_session *s, size_t n, const struct qp_overlay *ov,
                                       struct qp_error *err);

/* Sets the byte budget for the reference values kept by each successful qp_session_run (0, the
 * default: keep nothing and drop the reference). The inputs are always kept whole. Runs with a
 * budget allocate the cache when it must grow. */
void qp_session_set_cache(struct qp_session *s, size_t budget_bytes);

/* Runs on the reference inputs with the current overlays, recomputing only what the overlay
 * changes since the reference run affect (see above). Outputs are read with
 * qp_session_output as after qp_session_run; the observer is not called; the reference stays.
 * Returns QP_ERR_USAGE when there is no reference run (no budget set or no successful run since),
 * and what qp_session_run returns. */
enum qp_status qp_session_run_partial(struct qp_session *s, struct qp_error *err);

/* Makes `dst`'s partial runs start from the reference run that `src` recorded (a budget and a
 * successful qp_session_run), read where `src` keeps it: nothing is copied, and any number of
 * sessions may read one reference at the same time (partial runs never write it). `dst` must be
 * a session of the same model (its plan's layouts are checked per value: a value cached in
 * another layout is computed again). The borrow lasts until `src` records another reference,
 * changes its budget or is freed, and until `dst` sets a budget, borrows again or is freed;
 * `dst`'s own full runs record nothing meanwhile. Returns QP_ERR_USAGE (NULL, the same session,
 * different graphs, `src` holding no reference), QP_ERR_NOMEM. */
enum qp_status qp_session_borrow_cache(struct qp_session *dst, const struct qp_session *src,
                                       struct qp_error *err);

/* Node computations in the last run (full or partial); overlays are not counted, nor nodes
 * evaluated at plan time. An If counts once, whatever its branch computes. */
size_t qp_session_nodes_executed(const struct qp_session *s);

/* Bytes of the current shape set's activation arena (after a plan), for memory reports. */
size_t qp_session_arena_bytes(const struct qp_session *s);

/* What the current plan (the last run's, else the newest) knows of graph value `name` without
 * running: its dtype (QP_DTYPE_UNDEFINED when nothing gives it one) and *computed_out = 1 when
 * a run computes or receives it (a step's output, a graph input), 0 for a plan-time constant
 * (an initializer, a folded subgraph) or a value no step produces. So a caller learns which
 * tensors are float at run time from planning alone. QP_ERR_USAGE when no plan exists yet (the
 * shapes were not all known, or a value-keyed input needs its bytes) or the graph has no value
 * `name`. */
enum qp_status qp_session_value_info(const struct qp_session *s, const char *name,
                                     enum qp_dtype *dtype_out, int *computed_out,
                                     struct qp_error *err);

#ifdef __cplusplus
}
#endif
#endif
