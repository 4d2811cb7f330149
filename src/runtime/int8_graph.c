/* Graph helpers of the integer path's passes (int8_graph.h). */
#include "runtime/int8_graph.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/size.h"
#include "kernels/dnnl_conv.h"
#include "kernels/int8_conv.h"
#include "kernels/int8_pw.h"
#include "kernels/kernel.h"

/* ---- reading the graph ---------------------------------------------------------------------- */

const struct qp_node *i8g_producer(const struct qp_graph *g, int v) {
    if (v < 0) return NULL;
    int p = g->values[v].producer;
    return p >= 0 && !g->nodes[p].dead ? &g->nodes[p] : NULL;
}

/* The constant tensor value v holds (an initializer or a Constant node's `value`), or NULL. */
const struct qp_tensor *i8g_const_of(const struct qp_graph *g, int v) {
    if (v < 0) return NULL;
    const struct qp_value *val = &g->values[v];
    if (val->initializer >= 0) return &g->inits[val->initializer];
    const struct qp_node *p = i8g_producer(g, v);
    if (!p || !qp_node_is(p, "Constant")) return NULL;
    const struct qp_attr *a = qp_node_attr(p, "value");
    return a && a->type == QP_ATTR_TENSOR ? a->t : NULL;
}

int i8g_float_dt(enum qp_dtype dt) {
    return dt == QP_DTYPE_FLOAT || dt == QP_DTYPE_FLOAT16;
}

int i8g_is_op(const struct qp_node *n, const char *op) {
    return n->domain && strcmp(n->domain, QP_INT8_DOMAIN) == 0 && strcmp(n->op_type, op) == 0;
}

/* 1 when value v is certainly a float tensor: its declared dtype, an op that only makes float,
 * or a type-preserving op (elementwise arithmetic, data movement) of a float input, looked up
 * `depth` producers back. */
static int known_float_d(const struct qp_graph *g, int v, int depth) {
    if (v < 0) return 0;
    if (i8g_float_dt(g->values[v].dtype)) return 1;
    const struct qp_tensor *c = i8g_const_of(g, v);
    if (c) return i8g_float_dt(c->dtype);
    const struct qp_node *p = i8g_producer(g, v);
    if (!p || depth <= 0) return 0;
    static const char *makes[] = {"DequantizeLinear",
                                  "Conv",
                                  "ConvTranspose",
                                  "Gemm",
                                  "GlobalAveragePool",
                                  "AveragePool",
                                  "BatchNormalization",
                                  "Softmax",
                                  "LayerNormalization",
                                  "Sigmoid",
                                  "HardSigmoid",
                                  "HardSwish",
                                  "Tanh",
                                  "Erf",
                                  "Sqrt",
                                  "Gelu",
                                  "Resize"};
    static const char *keeps[] = {"Add",     "Sub",       "Mul",     "Div",        "Relu",
                                  "Clip",    "LeakyRelu", "Reshape", "Transpose",  "Flatten",
                                  "Squeeze", "Unsqueeze", "Slice",   "Gather",     "Identity",
                                  "Concat",  "MaxPool",   "Pow",     "ReduceMean", "MatMul"};
    for (size_t i = 0; i < sizeof makes / sizeof makes[0]; i++)
        if (qp_node_is(p, makes[i])) return 1;
    if (i8g_is_op(p, "FakeQuant") || i8g_is_op(p, "RoundFloat16")) return 1;
    if (i8g_is_op(p, "QConv") || i8g_is_op(p, "QMatMul")) return i8g_in_at(p, 7) < 0;
    if (i8g_is_op(p, "Pointwise")) {
        const int64_t *dt;
        int64_t n = qp_kattr_ints(p, "pw_out_dt", &dt);
        for (int o = 0; o < p->n_outputs && o < n; o++)
            if (p->outputs[o] == v) return i8g_float_dt((enum qp_dtype)dt[o]);
        return 0;
    }
    for (size_t i = 0; i < sizeof keeps / sizeof keeps[0]; i++)
        if (qp_node_is(p, keeps[i])) {
            int n_data = qp_node_is(p, "Add") || qp_node_is(p, "Sub") || qp_node_is(p, "Mul") ||
                                 qp_node_is(p, "Div") || qp_node_is(p, "Concat")
                             ? p->n_inputs
                             : 1;
            for (int k = 0; k < n_data; k++)
                if (known_float_d(g, i8g_in_at(p, k), depth - 1)) return 1;
            return 0;
        }
    return 0;
}

int i8g_known_float(const struct qp_graph *g, int v) {
    return known_float_d(g, v, 8);
}

int i8g_tensor_f(const struct qp_tensor *t, uint64_t i, float *out) {
    if (!t || !t->data || i >= t->numel) return 0;
    if (t->dtype == QP_DTYPE_FLOAT)
        *out = ((const float *)t->data)[i];
    else if (t->dtype == QP_DTYPE_FLOAT16)
        *out = qp_fp16_to_f32(((const uint16_t *)t->data)[i]);
    else
        return 0;
    return 1;
}

/* Element i of a constant of a number type, as a double, and whether that type is an integer
 * one (ONNX's integer Div truncates); 0 when it has none. */
static int tensor_d(const struct qp_tensor *t, uint64_t i, double *out, int *is_int) {
    if (!t || !t->data || i >= t->numel) return 0;
    float f;
    *is_int = t->dtype == QP_DTYPE_INT64 || t->dtype == QP_DTYPE_INT32;
    switch (t->dtype) {
    case QP_DTYPE_INT64:
        *out = (double)((const int64_t *)t->data)[i];
        return 1;
    case QP_DTYPE_INT32:
        *out = (double)((const int32_t *)t->data)[i];
        return 1;
    case QP_DTYPE_DOUBLE:
        *out = ((const double *)t->data)[i];
        return 1;
    default:
        if (!i8g_tensor_f(t, i, &f)) return 0;
        *out = f;
        return 1;
    }
}

/* Value v's shape where the graph fixes it without shape inference: declared, a constant's, or
 * traced back through data movement whose result's shape its attributes and constant inputs
 * give (a Reshape to a constant shape, Transpose, a Gather of constant indices, Q, DQ, the
 * integer path's GatherQuantize). A ViT exported without value_info computes its attention
 * scale from Shape(q), q = Gather(Transpose(Reshape(MatMul, [1, 197, 3, 3, 64]))). Returns the
 * rank (-1: unknown) and fills dims[0..rank) (-1 where a dim is unknown). */
static int traced_shape(const struct qp_graph *g, int v, int depth, int64_t *dims) {
    if (v < 0 || depth > 16) return -1;
    const struct qp_value *val = &g->values[v];
    if (val->rank >= 0) {
        if (val->rank > QP_MAX_RANK) return -1;
        for (int i = 0; i < val->rank; i++)
            dims[i] = val->dims[i].param ? -1 : val->dims[i].value;
        return val->rank;
    }
    const struct qp_tensor *c = i8g_const_of(g, v);
    if (c) {
        if (c->rank > QP_MAX_RANK) return -1;
        memcpy(dims, c->dims, (size_t)c->rank * sizeof *dims);
        return c->rank;
    }
    const struct qp_node *n = i8g_producer(g, v);
    if (!n) return -1;
    int64_t xd[QP_MAX_RANK];
    int xr = traced_shape(g, i8g_in_at(n, 0), depth + 1, xd);
    if (qp_node_is(n, "QuantizeLinear") || qp_node_is(n, "DequantizeLinear")) {
        if (xr > 0) memcpy(dims, xd, (size_t)xr * sizeof *dims);
        return xr;
    }
    if (qp_node_is(n, "Reshape")) {
        const struct qp_tensor *sh = i8g_const_of(g, i8g_in_at(n, 1));
        if (!sh || sh->rank != 1 || sh->dtype != QP_DTYPE_INT64 || sh->numel > QP_MAX_RANK)
            return -1;
        int keep0 = !qp_node_attr(n, "allowzero"); /* 0 copies the input's dim */
        for (int k = 0; k < (int)sh->numel; k++) {
            int64_t d = ((const int64_t *)sh->data)[k];
            dims[k] = d > 0 ? d : d == 0 && keep0 && k < xr ? xd[k] : -1;
        }
        return (int)sh->numel;
    }
    const struct qp_attr *perm = qp_node_attr(n, "perm"); /* Transpose's, GatherQuantize's */
    if (xr < 0 || (perm && (int)perm->n != xr)) return -1;
    for (int k = 0; perm && k < xr; k++)
        if (perm->ints[k] < 0 || perm->ints[k] >= xr) return -1;
    if (qp_node_is(n, "Transpose")) {
        for (int k = 0; k < xr; k++)
            dims[k] = xd[perm ? perm->ints[k] : xr - 1 - k];
        return xr;
    }
    if (qp_node_is(n, "Gather") || i8g_is_op(n, "GatherQuantize")) {
        int64_t id[QP_MAX_RANK], vd[QP_MAX_RANK]; /* the indices'; the data seen through perm */
        int ir = traced_shape(g, i8g_in_at(n, 1), depth + 1, id);
        const struct qp_attr *ax = qp_node_attr(n, "axis");
        int64_t a = ax ? ax->i : 0;
        if (a < 0) a += xr;
        if (ir < 0 || a < 0 || a >= xr || xr - 1 + ir > QP_MAX_RANK) return -1;
        for (int k = 0; k < xr; k++)
            vd[k] = xd[perm ? perm->ints[k] : k]; /* GatherQuantize's perm */
        int r = 0;
        for (int k = 0; k < xr; k++)
            if (k != a)
                dims[r++] = vd[k];
            else
                for (int j = 0; j < ir; j++)
                    dims[r++] = id[j];
        return r;
    }
    return -1;
}

/* Gather(Shape(t), index): t's dim, when the graph fixes it (traced_shape). */
static int shape_dim(const struct qp_graph *g, const struct qp_node *gather, double *out) {
    const struct qp_node *sh = i8g_producer(g, i8g_in_at(gather, 0));
    const struct qp_attr *ax = qp_node_attr(gather, "axis");
    const struct qp_tensor *it = i8g_const_of(g, i8g_in_at(gather, 1));
    double idx;
    int is_int;
    if (!sh || !qp_node_is(sh, "Shape") || (ax && ax->i != 0) || qp_node_attr(sh, "start") ||
        qp_node_attr(sh, "end") || !it || it->numel != 1 || !tensor_d(it, 0, &idx, &is_int))
        return 0;
    int64_t d[QP_MAX_RANK];
    int r = traced_shape(g, i8g_in_at(sh, 0), 0, d);
    int64_t k = (int64_t)idx < 0 ? (int64_t)idx + r : (int64_t)idx;
    if (r < 0 || k < 0 || k >= r || d[k] < 0) return 0;
    *out = (double)d[k];
    return 1;
}

/* A Cast's target keeps a value (float types, and whole values to int32 / int64). */
static int cast_keeps(const struct qp_node *n, double a, int *is_int) {
    const struct qp_attr *to = qp_node_attr(n, "to");
    if (!to) return 1; /* Identity, (Un)Squeeze, Reshape */
    if (to->i == QP_DTYPE_FLOAT || to->i == QP_DTYPE_DOUBLE || to->i == QP_DTYPE_FLOAT16) {
        *is_int = 0;
        return 1;
    }
    *is_int = 1;
    return (to->i == QP_DTYPE_INT64 || to->i == QP_DTYPE_INT32) && a == (double)(int64_t)a;
}

static int scalar_d(const struct qp_graph *g, int v, int depth, double *out, int *is_int) {
    const struct qp_tensor *c = v >= 0 ? i8g_const_of(g, v) : NULL;
    if (c) return c->numel == 1 && tensor_d(c, 0, out, is_int);
    const struct qp_node *n = v >= 0 ? i8g_producer(g, v) : NULL;
    double a, b;
    int ib;
    if (!n || depth > 8 || n->n_outputs != 1 || n->n_inputs < 1) return 0;
    if (qp_node_is(n, "Gather")) {
        *is_int = 1; /* a dim: int64 */
        return shape_dim(g, n, out);
    }
    if (!scalar_d(g, i8g_in_at(n, 0), depth + 1, &a, is_int)) return 0;
    if (qp_node_is(n, "Cast") || qp_node_is(n, "Identity") || qp_node_is(n, "Squeeze") ||
        qp_node_is(n, "Unsqueeze") || qp_node_is(n, "Reshape")) {
        *out = a;
        return cast_keeps(n, a, is_int);
    }
    if (qp_node_is(n, "Sqrt") || qp_node_is(n, "Reciprocal")) {
        int sq = qp_node_is(n, "Sqrt");
        if (*is_int || (sq ? a < 0 : a == 0)) return 0;
        *out = sq ? sqrt(a) : 1 / a;
        return 1;
    }
    if (n->n_inputs != 2 || !scalar_d(g, i8g_in_at(n, 1), depth + 1, &b, &ib) || ib != *is_int)
        return 0;
    if (qp_node_is(n, "Mul"))
        *out = a * b;
    else if (qp_node_is(n, "Add"))
        *out = a + b;
    else if (qp_node_is(n, "Sub"))
        *out = a - b;
    else if (qp_node_is(n, "Div") && b != 0)
        *out = *is_int ? trunc(a / b) : a / b;
    else
        return 0;
    return 1;
}

int i8g_scalar_f(const struct qp_graph *g, int v, float *out) {
    double d;
    int is_int;
    if (!scalar_d(g, v, 0, &d, &is_int)) return 0;
    *out = (float)d;
    return 1;
}

int i8g_tensor_i(const struct qp_tensor *t, uint64_t i, int64_t *out) {
    if (!t || !t->data || i >= t->numel) return 0;
    if (t->dtype == QP_DTYPE_INT8)
        *out = ((const int8_t *)t->data)[i];
    else if (t->dtype == QP_DTYPE_UINT8)
        *out = ((const uint8_t *)t->data)[i];
    else
        return 0;
    return 1;
}

int i8g_in_at(const struct qp_node *n, int i) {
    return i < n->n_inputs ? n->inputs[i] : -1;
}

/* The bound of one constant scalar input (its magnitude), or NAN when it is not one. */
static double const_mag(const struct qp_graph *g, int v, uint64_t i) {
    const struct qp_tensor *t = i8g_const_of(g, v);
    float f;
    if (!t || !i8g_tensor_f(t, t->numel == 1 ? 0 : i, &f)) return NAN;
    return fabs((double)f);
}

/* The bound after QConv's post-operations, from the bound b of its affine output (every one
 * maps [-b, b] into [-b', b']); INFINITY for a kind it does not know. */
static double post_bound(const struct qp_graph *g, const struct qp_node *n, double b) {
    const int64_t *kind;
    const float *al, *be;
    int64_t np = qp_kattr_ints(n, "post", &kind);
    if (np <= 0) return b;
    if (qp_kattr_floats(n, "post_alpha", &al) != np || qp_kattr_floats(n, "post_beta", &be) != np)
        return INFINITY;
    for (int64_t k = 0; k < np; k++) {
        double a = fabs((double)al[k]), c = fabs((double)be[k]);
        switch (kind[k]) {
        case QP_CONV_POST_LINEAR:
            b = a * b + c;
            break;
        case QP_CONV_POST_RELU:
            b = a > 1.0 ? a * b : b;
            break;
        case QP_CONV_POST_CLIP: /* into [alpha, beta]: within b or at a finite bound */
            b = fmax(b, fmax(isfinite(a) ? a : 0.0, isfinite(c) ? c : 0.0));
            break;
        case QP_CONV_POST_SIGMOID:
            b = 1.0;
            break;
        case QP_CONV_POST_HARDSWISH: /* x times a factor in [0, 1] */
        case QP_CONV_POST_GELU:
        case QP_CONV_POST_GELU_TANH:
            break;
        case QP_CONV_POST_SUM: { /* an int8 residual: |q - zp| <= 255 levels */
            double rs = const_mag(g, i8g_in_at(n, 10), 0);
            b = i8g_in_at(n, 9) >= 0 && rs == rs ? b + 255.0 * rs : INFINITY;
            break;
        }
        default:
            return INFINITY;
        }
        if (!(b <= DBL_MAX)) return INFINITY;
    }
    return b;
}

/* The weights of a QConv: their int8 constant (*q8 set), or, where a QuantizeLinear of a float
 * constant makes them when the plan is built, that constant (its shape only); NULL if neither. */
static const struct qp_tensor *qconv_weights(const struct qp_graph *g, int w, int *q8) {
    const struct qp_tensor *t = i8g_const_of(g, w);
    *q8 = t && (t->dtype == QP_DTYPE_INT8 || t->dtype == QP_DTYPE_UINT8);
    if (*q8) return t;
    const struct qp_node *q = i8g_producer(g, w);
    return q && qp_node_is(q, "QuantizeLinear") ? i8g_const_of(g, i8g_in_at(q, 0)) : NULL;
}

/* Sum of |w| over output channel c's `per` weights: exact for int8 constants, else 128 each. */
static double channel_abs_sum(const struct qp_tensor *w, int q8, int64_t c, uint64_t per) {
    if (!q8) return 128.0 * (double)per;
    double sum = 0.0;
    for (uint64_t i = 0; i < per; i++) {
        int64_t q;
        if (!i8g_tensor_i(w, (uint64_t)c * per + i, &q)) return INFINITY;
        sum += (double)(q < 0 ? -q : q);
    }
    return sum;
}

static double bound_at(const struct qp_graph *g, int v, int depth);

/* Constant v's largest |element| into *hi (INFINITY when v is no constant or holds a NaN or
 * an infinity) and its smallest into *lo (a divisor's; NaN elements skipped, 0 when v is no
 * constant or an element cannot be read), in one pass. */
static void const_abs_range(const struct qp_graph *g, int v, double *lo, double *hi) {
    const struct qp_tensor *t = i8g_const_of(g, v);
    *lo = 0.0;
    *hi = INFINITY;
    if (!t || !t->numel) return;
    double mn = INFINITY, mx = 0.0;
    int finite = 1;
    for (uint64_t i = 0; i < t->numel; i++) {
        float f;
        if (!i8g_tensor_f(t, i, &f)) return;
        double a = fabs((double)f);
        finite &= a <= DBL_MAX;
        mn = fmin(mn, a);
        mx = fmax(mx, a);
    }
    *lo = mn <= DBL_MAX ? mn : 0.0;
    *hi = finite ? mx : INFINITY;
}

/* One instruction of a Pointwise program (kernels/int8_pw.h) on operand bounds a and b
 * (INFINITY: none, NaN included); bd is b's smallest magnitude where b is a constant input. */
static double instr_bound(const int64_t *c, const float *par, int64_t n_par, double a, double b,
                          double bd) {
    const float *p = c[4] >= 0 && c[4] + qp_pw_n_params((int)c[0]) <= n_par ? par + c[4] : NULL;
    if (c[0] == QP_PW_FQ) /* NaN quantizes to the zero point: bounded whatever its operand */
        return p ? fabs((double)p[0]) * 255.0 : INFINITY;
    if (!(a <= DBL_MAX)) return INFINITY;
    switch (c[0]) {
    case QP_PW_ADD:
    case QP_PW_SUB:
        return a + b;
    case QP_PW_MUL:
        return a * b;
    case QP_PW_DIV:
        return bd > 0.0 ? a / bd : INFINITY;
    case QP_PW_CLIP:
        return p && isfinite(p[0]) && isfinite(p[1]) ? fmax(fabs((double)p[0]), fabs((double)p[1]))
                                                     : INFINITY;
    case QP_PW_LEAKY:
        return p ? a * fmax(1.0, fabs((double)p[0])) : INFINITY;
    case QP_PW_SIGMOID:
    case QP_PW_HSIGMOID:
    case QP_PW_TANH:
    case QP_PW_ERF:
        return 1.0;
    case QP_PW_RELU:
    case QP_PW_HSWISH:
    case QP_PW_COPY:
        return a;
    case QP_PW_SQUARE:
        return a * a;
    case QP_PW_ROUND16:
        return a <= 65504.0 ? a : INFINITY;
    default:
        return INFINITY;
    }
}

/* Float output v of Pointwise node n: its program run on bounds, the inputs' from their
 * producers (int8 ones: 255 levels; constants: their values). */
static double pointwise_bound(const struct qp_graph *g, const struct qp_node *n, int v, int depth) {
    const int64_t *prog, *inq, *oreg, *oq;
    const float *par;
    int64_t np = qp_kattr_ints(n, "pw_prog", &prog), n_par = qp_kattr_floats(n, "pw_params", &par);
    int64_t nr = qp_kattr_int(n, "pw_regs", 0);
    if (np <= 0 || np % 5 || nr <= 0 || nr > QP_PW_MAX_REGS || n->n_inputs > QP_PW_MAX_IN ||
        qp_kattr_ints(n, "pw_in_q", &inq) != n->n_inputs ||
        qp_kattr_ints(n, "pw_out", &oreg) != n->n_outputs ||
        qp_kattr_ints(n, "pw_out_q", &oq) != n->n_outputs)
        return INFINITY;
    double in[QP_PW_MAX_IN], floor_[QP_PW_MAX_IN], reg[QP_PW_MAX_REGS];
    for (int i = 0; i < n->n_inputs; i++) {
        int x = n->inputs[i];
        const_abs_range(g, x, &floor_[i], &in[i]);
        if (inq[i] >= 0 && inq[i] < n_par)
            in[i] = fabs((double)par[inq[i]]) * 255.0;
        else if (!i8g_const_of(g, x))
            in[i] = bound_at(g, x, depth + 1);
    }
    for (int r = 0; r < nr; r++)
        reg[r] = INFINITY;
    for (int64_t k = 0; k < np / 5; k++) {
        const int64_t *c = prog + 5 * k;
        double ab[2], bd = 0.0;
        for (int o = 0; o < 2; o++) {
            int64_t r = c[2 + o];
            ab[o] = r >= 0 ? (r < nr ? reg[r] : INFINITY)
                           : (-r - 1 < n->n_inputs ? in[-r - 1] : INFINITY);
            if (o == 1 && r < 0 && -r - 1 < n->n_inputs) bd = floor_[-r - 1];
        }
        if (c[1] < 0 || c[1] >= nr) return INFINITY;
        reg[c[1]] = instr_bound(c, par, n_par, ab[0], ab[1], bd);
    }
    const int64_t *odt;
    int has_dt = qp_kattr_ints(n, "pw_out_dt", &odt) == n->n_outputs;
    for (int o = 0; o < n->n_outputs; o++) {
        if (n->outputs[o] != v) continue;
        if (oq[o] >= 0 || oreg[o] < 0 || oreg[o] >= nr || !has_dt) return INFINITY;
        double b = reg[oreg[o]]; /* a float16 output rounds to infinity past 65504 */
        return odt[o] == QP_DTYPE_FLOAT16 && !(b <= 65504.0) ? INFINITY : b;
    }
    return INFINITY;
}

double i8g_magnitude_bound(const struct qp_graph *g, int v) {
    return bound_at(g, v, 0);
}

static double bound_at(const struct qp_graph *g, int v, int depth) {
    const struct qp_node *n = i8g_producer(g, v);
    if (n && depth < 4 && i8g_is_op(n, "Pointwise")) return pointwise_bound(g, n, v, depth);
    if (!n || !i8g_is_op(n, "QConv") || n->outputs[0] != v || i8g_in_at(n, 7) >= 0 ||
        qp_kattr_int(n, "transposed", 0))
        return INFINITY;
    int q8;
    const struct qp_tensor *w = qconv_weights(g, i8g_in_at(n, 3), &q8);
    double xs = const_mag(g, i8g_in_at(n, 1), 0);
    if (!w || w->rank < 1 || w->dims[0] < 1 || w->numel % (uint64_t)w->dims[0] || xs != xs)
        return INFINITY;
    int64_t m = w->dims[0];
    uint64_t per = w->numel / (uint64_t)m;
    const float *cs = NULL, *sh = NULL;
    int affine =
        qp_kattr_floats(n, "ch_scale", &cs) == m && qp_kattr_floats(n, "ch_shift", &sh) == m;
    const struct qp_tensor *bt = i8g_in_at(n, 6) >= 0 ? i8g_const_of(g, i8g_in_at(n, 6)) : NULL;
    if (i8g_in_at(n, 6) >= 0 && !bt) return INFINITY;
    double b = 0.0;
    for (int64_t c = 0; c < m; c++) {
        double wsc = const_mag(g, i8g_in_at(n, 4), (uint64_t)c);
        double k = affine ? (double)cs[c] : 1.0, bc = affine ? (double)sh[c] : 0.0;
        float f;
        if (bt && !i8g_tensor_f(bt, (uint64_t)c, &f)) return INFINITY;
        if (bt) bc += (double)f * k;
        /* |x - zp| <= 255 levels (x and zp of one byte type) */
        double y = 255.0 * xs * wsc * fabs(k) * channel_abs_sum(w, q8, c, per) + fabs(bc);
        if (!(y <= DBL_MAX)) return INFINITY; /* NaN or infinite constants */
        b = fmax(b, y);
    }
    b = post_bound(g, n, b);
    if (qp_kattr_int(n, "out_dtype", QP_DTYPE_FLOAT) == QP_DTYPE_FLOAT16 && !(b <= 65504.0))
        return INFINITY;
    return b;
}

int i8g_per_tensor(const struct qp_graph *g, const struct qp_node *n, struct i8g_qparam *q) {
    const struct qp_tensor *sc = i8g_const_of(g, i8g_in_at(n, 1)),
                           *zp = i8g_const_of(g, i8g_in_at(n, 2));
    if (!sc || sc->numel != 1 || !zp || zp->numel != 1) return 0;
    if (!i8g_tensor_f(sc, 0, &q->s) || !i8g_tensor_i(zp, 0, &q->z) || !(q->s > 0.0f)) return 0;
    const struct qp_attr *sat = qp_node_attr(n, "saturate");
    if (sat && sat->i == 0) return 0;
    q->dt = zp->dtype;
    q->sdt = sc->dtype;
    q->scale_v = i8g_in_at(n, 1);
    q->zp_v = i8g_in_at(n, 2);
    return 1;
}

int i8g_same_q(const struct i8g_qparam *a, const struct i8g_qparam *b) {
    return a->s == b->s && a->z == b->z && a->dt == b->dt;
}

/* v is DQ(x) of a computed int8 tensor x with per-tensor parameters. */
int i8g_dq_act(const struct qp_graph *g, int v, int *x_out, struct i8g_qparam *q) {
    const struct qp_node *d = i8g_producer(g, v);
    if (!d || !qp_node_is(d, "DequantizeLinear") || !i8g_per_tensor(g, d, q)) return 0;
    int x = i8g_in_at(d, 0);
    if (x < 0 || i8g_const_of(g, x)) return 0;
    const struct qp_node *px = i8g_producer(g, x);
    if (px && qp_node_is(px, "QuantizeLinear") && i8g_const_of(g, i8g_in_at(px, 0))) return 0;
    *x_out = x;
    return 1;
}

int i8g_resize_copies(const struct qp_node *n) {
    const struct qp_attr *m = qp_node_attr(n, "mode");
    const struct qp_attr *c = qp_node_attr(n, "coordinate_transformation_mode");
    const struct qp_attr *aa = qp_node_attr(n, "antialias");
    return qp_node_is(n, "Resize") && (!m || (m->s.len == 7 && !memcmp(m->s.data, "nearest", 7))) &&
           !(c && c->s.len == 18 && !memcmp(c->s.data, "tf_crop_and_resize", 18)) && !(aa && aa->i);
}

/* The Q node that is v's only reader with per-tensor parameters, or -1. */
int i8g_q8_use(const struct qp_graph *g, const struct qp_use *u, struct i8g_qparam *q) {
    const struct qp_node *n = &g->nodes[u->node];
    return u->input == 0 && !n->dead && qp_node_is(n, "QuantizeLinear") &&
           i8g_per_tensor(g, n, q) && (q->dt == QP_DTYPE_INT8 || q->dt == QP_DTYPE_UINT8);
}

int i8g_sole_q(const struct qp_graph *g, int v, struct i8g_qparam *q) {
    const struct qp_value *val = &g->values[v];
    if (val->is_graph_output || val->n_uses != 1 || !i8g_q8_use(g, &val->uses[0], q)) return -1;
    return val->uses[0].node;
}

/* ---- the report ----------------------------------------------------------------------------- */

int i8g_note(struct rt_int8_report *rep, const struct qp_node *n, int fused, const char *into,
             const char *reason) {
    for (size_t i = 0; i < rep->n; i++)
        if (rep->d[i].node == n->name) {
            /* already decided: a fusion wins over a reason, and where a moved Q or DQ ends up
             * over the move */
            if (fused && (!rep->d[i].fused || strstr(rep->text[i][0], " moved "))) {
                rep->d[i].fused = 1;
                snprintf(rep->text[i][0], sizeof rep->text[i][0], "%s", into);
                rep->text[i][1][0] = 0;
            }
            return 1;
        }
    if (rep->n == rep->cap) {
        size_t cap = rep->cap ? rep->cap * 2 : 64;
        struct qp_int8_decision *d = qp_realloc_n(rep->d, cap, sizeof *d);
        if (!d) return 0;
        rep->d = d;
        char(*t)[2][160] = qp_realloc_n(rep->text, cap, sizeof *t);
        if (!t) return 0;
        rep->text = t;
        rep->cap = cap;
    }
    size_t i = rep->n++;
    snprintf(rep->text[i][0], sizeof rep->text[i][0], "%s", into ? into : "");
    snprintf(rep->text[i][1], sizeof rep->text[i][1], "%s", reason ? reason : "");
    /* into/reason point at `text` once every decision is made (it moves while growing) */
    rep->d[i] = (struct qp_int8_decision){n->name ? n->name : "", n->op_type, fused, "", ""};
    return 1;
}

void rt_int8_report_free(struct rt_int8_report *rep) {
    if (!rep) return;
    free(rep->d);
    free(rep->text);
    memset(rep, 0, sizeof *rep);
}

int rt_int8_has_qdq(const struct qp_graph *g) {
    for (size_t i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && (qp_node_is(&g->nodes[i], "QuantizeLinear") ||
                                  qp_node_is(&g->nodes[i], "DequantizeLinear")))
            return 1;
    return 0;
}

/* ---- editing -------------------------------------------------------------------------------- */

const char *i8g_vname(const struct qp_graph *g, int v) {
    return v >= 0 ? g->values[v].name : "";
}

/* Replaces nodes dead[0..n_dead) by a node of op/domain with the given inputs and one output,
 * copying the attributes of `attrs_of` (may be NULL). Returns the new node or -1. */
int i8g_replace(struct qp_graph *g, const int *dead, int n_dead, const char *name, const char *op,
                const char *domain, int n_in, const int *in, int out, int attrs_of,
                struct qp_error *err) {
    return i8g_replace_n(g, dead, n_dead, name, op, domain, n_in, in, 1, &out, attrs_of, err);
}

int i8g_replace_n(struct qp_graph *g, const int *dead, int n_dead, const char *name, const char *op,
                  const char *domain, int n_in, const int *in, int n_out, const int *out,
                  int attrs_of, struct qp_error *err) {
    const char *names[MAX_IN], *onames[MAX_IN];
    if (n_in > MAX_IN || n_out > MAX_IN) {
        qp_error_set(err, QP_ERR_INTERNAL, "int8 rewrite: %d inputs, %d outputs", n_in, n_out);
        return -1;
    }
    for (int i = 0; i < n_in; i++)
        names[i] = i8g_vname(g, in[i]);
    for (int i = 0; i < n_out; i++)
        onames[i] = i8g_vname(g, out[i]);
    for (int i = 0; i < n_dead; i++)
        if (qp_graph_remove_node(g, dead[i], err)) return -1;
    int nn;
    if (qp_graph_add_node(g, name, op, domain, n_in, names, n_out, onames, &nn, err)) return -1;
    return attrs_of < 0 || i8g_copy_attrs(g, nn, attrs_of) ? nn : -1;
}

int i8g_copy_attrs(struct qp_graph *g, int to, int from) {
    for (int i = 0; i < g->nodes[from].n_attrs; i++) {
        struct qp_attr a = g->nodes[from].attrs[i];
        struct qp_attr *c = qp_node_add_attr(g, to, a.name, a.type);
        if (!c) return 0;
        const char *nm = c->name;
        *c = a;
        c->name = nm;
    }
    return 1;
}

/* A copy of n bytes owned by the graph's model. */
void *i8g_arena_dup(struct qp_graph *g, const void *v, size_t n) {
    void *c = malloc(n);
    if (!c) return NULL;
    memcpy(c, v, n);
    if (qp_model_own(g->model, c, NULL)) return NULL; /* freed by qp_model_own on failure */
    return c;
}

int i8g_add_ints(struct qp_graph *g, int node, const char *name, int n, const int64_t *v) {
    struct qp_attr *a = qp_node_add_attr(g, node, name, QP_ATTR_INTS);
    if (!a) return 0;
    int64_t *c = i8g_arena_dup(g, v, (size_t)(n ? n : 1) * sizeof *v);
    if (!c) return 0;
    a->ints = c;
    a->n = (size_t)n;
    return 1;
}

int i8g_add_floats(struct qp_graph *g, int node, const char *name, int n, const float *v) {
    struct qp_attr *a = qp_node_add_attr(g, node, name, QP_ATTR_FLOATS);
    if (!a) return 0;
    float *c = i8g_arena_dup(g, v, (size_t)(n ? n : 1) * sizeof *v);
    if (!c) return 0;
    a->floats = c;
    a->n = (size_t)n;
    return 1;
}

static struct qp_attr *find_attr(struct qp_graph *g, int node, const char *name,
                                 enum qp_attr_type type) {
    struct qp_node *n = &g->nodes[node];
    for (int i = 0; i < n->n_attrs; i++)
        if (n->attrs[i].type == type && strcmp(n->attrs[i].name, name) == 0) return &n->attrs[i];
    return NULL;
}

int i8g_set_int(struct qp_graph *g, int node, const char *name, int64_t v) {
    struct qp_attr *a = find_attr(g, node, name, QP_ATTR_INT);
    if (!a) return i8g_add_int(g, node, name, v);
    a->i = v;
    return 1;
}

int i8g_set_ints(struct qp_graph *g, int node, const char *name, int n, const int64_t *v) {
    struct qp_attr *a = find_attr(g, node, name, QP_ATTR_INTS);
    if (!a) return i8g_add_ints(g, node, name, n, v);
    int64_t *c = i8g_arena_dup(g, v, (size_t)(n ? n : 1) * sizeof *v);
    if (!c) return 0;
    a->ints = c;
    a->n = (size_t)n;
    return 1;
}

int i8g_add_int(struct qp_graph *g, int node, const char *name, int64_t v) {
    struct qp_attr *a = qp_node_add_attr(g, node, name, QP_ATTR_INT);
    if (!a) return 0;
    a->i = v;
    return 1;
}
