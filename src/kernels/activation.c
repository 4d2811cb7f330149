/*
 * Activations: Relu, LeakyRelu, Clip, Sigmoid, HardSigmoid, HardSwish, Gelu (exact and tanh),
 * Tanh, Elu, Selu, Celu, Softplus, Softsign, ThresholdedRelu, Mish, Shrink. float32 (float16 via
 * the runtime's fp32 conversion); Clip and Relu also take the integer types.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kcheck.h"
#include "kernels/fast.h"
#include "kernels/kernels.h"
#include "kernels/vecmath.h"

enum act_op {
    A_RELU,
    A_LEAKY,
    A_CLIP,
    A_SIGMOID,
    A_HSIGMOID,
    A_HSWISH,
    A_GELU,
    A_GELU_TANH,
    A_TANH,
    A_ELU,
    A_SELU,
    A_CELU,
    A_SOFTPLUS,
    A_SOFTSIGN,
    A_THRELU,
    A_MISH,
    A_SHRINK
};

struct act_state {
    enum act_op op;
    float alpha, beta, gamma;
    int clip_from_inputs; /* Clip-11+: min/max are inputs 1 and 2 */
};

static const struct {
    const char *name;
    enum act_op op;
    float alpha, beta, gamma;
} act_ops[] = {{"Relu", A_RELU, 0, 0, 0},
               {"LeakyRelu", A_LEAKY, 0.01f, 0, 0},
               {"Clip", A_CLIP, -3.402823466e+38f, 3.402823466e+38f, 0},
               {"Sigmoid", A_SIGMOID, 0, 0, 0},
               {"HardSigmoid", A_HSIGMOID, 0.2f, 0.5f, 0},
               {"HardSwish", A_HSWISH, 1.0f / 6.0f, 0.5f, 0},
               {"Gelu", A_GELU, 0, 0, 0},
               {"Tanh", A_TANH, 0, 0, 0},
               {"Elu", A_ELU, 1.0f, 0, 0},
               {"Selu", A_SELU, 1.67326319217681884765625f, 0, 1.05070102214813232421875f},
               {"Celu", A_CELU, 1.0f, 0, 0},
               {"Softplus", A_SOFTPLUS, 0, 0, 0},
               {"Softsign", A_SOFTSIGN, 0, 0, 0},
               {"ThresholdedRelu", A_THRELU, 1.0f, 0, 0},
               {"Mish", A_MISH, 0, 0, 0},
               {"Shrink", A_SHRINK, 0, 0.5f, 0}};

enum qp_status qp_k_act_prepare(struct qp_kprep *p) {
    enum qp_status st = qp_kneed(p, 0);
    if (st) return st;
    struct act_state s;
    memset(&s, 0, sizeof s);
    size_t i;
    for (i = 0; i < sizeof act_ops / sizeof act_ops[0]; i++)
        if (strcmp(act_ops[i].name, p->node->op_type) == 0) break;
    if (i == sizeof act_ops / sizeof act_ops[0])
        return qp_error_set(p->err, QP_ERR_INTERNAL, "not an activation");
    s.op = act_ops[i].op;
    s.alpha = qp_kattr_float(p->node, "alpha", act_ops[i].alpha);
    s.beta = qp_kattr_float(p->node, "beta", act_ops[i].beta);
    s.gamma = qp_kattr_float(p->node, "gamma", act_ops[i].gamma);
    if (s.op == A_CLIP) {
        if (p->opset < 11) {
            s.alpha = qp_kattr_float(p->node, "min", act_ops[i].alpha);
            s.beta = qp_kattr_float(p->node, "max", act_ops[i].beta);
        } else {
            s.clip_from_inputs = 1;
            for (int k = 1; k < 3 && k < p->n_in; k++)
                if (p->in[k] && (p->in[k]->numel != 1 || p->in[k]->dtype != p->in[0]->dtype))
                    return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                                        "input %d must be a scalar of the input's type", k);
        }
    }
    if (s.op == A_SHRINK) {
        s.alpha = qp_kattr_float(p->node, "lambd", 0.5f);
        s.beta = qp_kattr_float(p->node, "bias", 0.0f);
    }
    if (s.op == A_GELU) {
        char buf[16];
        qp_kattr_str(p->node, "approximate", "none", buf, sizeof buf);
        if (strcmp(buf, "tanh") == 0)
            s.op = A_GELU_TANH;
        else if (strcmp(buf, "none") != 0)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "Gelu approximate '%s'", buf);
    }
    enum qp_dtype dt = p->in[0]->dtype;
    if (dt != QP_DTYPE_FLOAT && !(s.op == A_CLIP || s.op == A_RELU || s.op == A_SHRINK))
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "dtype %s", qp_dtype_name(dt));
    st = qp_kt_set(p->out[0], dt, p->in[0]->rank, p->in[0]->dims, p->err);
    if (st) return st;
    return qp_ksave_state(p, &s, sizeof s);
}

static inline float sigmoidf_(float x) {
    /* Split at 0 so exp never overflows: identical results either side. */
    if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
    float e = expf(x);
    return e / (1.0f + e);
}

/* Clamp to [0, 1] that keeps NaN (fminf/fmaxf would drop it), as ONNX Runtime does. */
static inline float clamp01_nan(float v) {
    v = v < 0.0f ? 0.0f : v;
    return v > 1.0f ? 1.0f : v;
}

static void act_range(const struct act_state *s, float lo_c, float hi_c, const float *x, float *y,
                      int64_t lo, int64_t hi, int fast) {
    float a = s->alpha, b = s->beta, g = s->gamma;
    if (fast) {
        /* vecmath (accuracy in vecmath.h); libm where it has no fast code. */
        enum qp_vfn f = QP_VF_COUNT;
        switch (s->op) {
        case A_SIGMOID:
            f = QP_VF_SIGMOID;
            break;
        case A_TANH:
            f = QP_VF_TANH;
            break;
        case A_GELU:
            f = QP_VF_GELU;
            break;
        case A_GELU_TANH:
            f = QP_VF_GELU_TANH;
            break;
        default:
            break;
        }
        if (f != QP_VF_COUNT && qp_vf_apply(f, x + lo, y + lo, hi - lo)) return;
    }
    switch (s->op) {
    case A_RELU:
        /* NaN and -0 pass through, as in ONNX Runtime (max(x, 0) with NaN propagation). */
        for (int64_t i = lo; i < hi; i++)
            y[i] = x[i] < 0.0f ? 0.0f : x[i];
        break;
    case A_LEAKY:
        for (int64_t i = lo; i < hi; i++)
            y[i] = x[i] >= 0.0f ? x[i] : a * x[i];
        break;
    case A_CLIP:
        for (int64_t i = lo; i < hi; i++) {
            float v = x[i];
            v = v < lo_c ? lo_c : v;
            y[i] = v > hi_c ? hi_c : v;
        }
        break;
    case A_SIGMOID:
        for (int64_t i = lo; i < hi; i++)
            y[i] = sigmoidf_(x[i]);
        break;
    case A_HSIGMOID:
        for (int64_t i = lo; i < hi; i++)
            y[i] = clamp01_nan(a * x[i] + b);
        break;
    case A_HSWISH:
        for (int64_t i = lo; i < hi; i++)
            y[i] = x[i] * clamp01_nan(x[i] * (1.0f / 6.0f) + 0.5f);
        break;
    case A_GELU:
        for (int64_t i = lo; i < hi; i++)
            y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f));
        break;
    case A_GELU_TANH:
        for (int64_t i = lo; i < hi; i++) {
            float v = x[i];
            y[i] = 0.5f * v * (1.0f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)));
        }
        break;
    case A_TANH:
        for (int64_t i = lo; i < hi; i++)
            y[i] = tanhf(x[i]);
        break;
    case A_ELU:
        for (int64_t i = lo; i < hi; i++)
            y[i] = x[i] >= 0.0f ? x[i] : a * expm1f(x[i]);
        break;
    case A_SELU:
        for (int64_t i = lo; i < hi; i++)
            y[i] = x[i] > 0.0f ? g * x[i] : g * (a * expf(x[i]) - a);
        break;
    case A_CELU:
        for (int64_t i = lo; i < hi; i++)
            y[i] = x[i] != x[i] ? x[i] : fmaxf(0.0f, x[i]) + fminf(0.0f, a * expm1f(x[i] / a));
        break;
    case A_SOFTPLUS:
        for (int64_t i = lo; i < hi; i++)
            y[i] = x[i] > 0.0f ? x[i] + log1pf(expf(-x[i])) : log1pf(expf(x[i]));
        break;
    case A_SOFTSIGN:
        for (int64_t i = lo; i < hi; i++)
            y[i] = x[i] / (1.0f + fabsf(x[i]));
        break;
    case A_THRELU:
        for (int64_t i = lo; i < hi; i++)
            y[i] = x[i] > a ? x[i] : 0.0f;
        break;
    case A_MISH:
        for (int64_t i = lo; i < hi; i++) {
            float sp = x[i] > 0.0f ? x[i] + log1pf(expf(-x[i])) : log1pf(expf(x[i]));
            y[i] = x[i] * tanhf(sp);
        }
        break;
    case A_SHRINK:
        for (int64_t i = lo; i < hi; i++)
            y[i] = x[i] < -a ? x[i] + b : (x[i] > a ? x[i] - b : 0.0f);
        break;
    }
}

static enum qp_status act_run(const struct qp_krun *r, int fast) {
    const struct act_state *s = r->state;
    const struct qp_kt *in = r->in[0];
    struct qp_kt *out = r->out[0];
    int64_t n = (int64_t)in->numel;
    if (in->dtype != QP_DTYPE_FLOAT) {
        /* Integer Clip / Relu / Shrink: exact, in double. */
        double lo_c = -INFINITY, hi_c = INFINITY;
        if (s->op == A_CLIP && s->clip_from_inputs) {
            if (r->n_in > 1 && r->in[1]) lo_c = qp_kt_get_f64(r->in[1], 0);
            if (r->n_in > 2 && r->in[2]) hi_c = qp_kt_get_f64(r->in[2], 0);
        }
        for (int64_t i = 0; i < n; i++) {
            double v = qp_kt_get_f64(in, (uint64_t)i);
            if (s->op == A_RELU) v = v < 0 ? 0 : v;
            if (s->op == A_CLIP) v = v < lo_c ? lo_c : (v > hi_c ? hi_c : v);
            if (s->op == A_SHRINK)
                v = v < -s->alpha ? v + s->beta : (v > s->alpha ? v - s->beta : 0);
            qp_kt_set_f64(out, (uint64_t)i, v);
        }
        return QP_OK;
    }
    float lo_c = s->alpha, hi_c = s->beta;
    if (s->op == A_CLIP && s->clip_from_inputs) {
        lo_c = -INFINITY;
        hi_c = INFINITY;
        if (r->n_in > 1 && r->in[1]) lo_c = ((const float *)r->in[1]->data)[0];
        if (r->n_in > 2 && r->in[2]) hi_c = ((const float *)r->in[2]->data)[0];
    }
    /* A parallel region costs ~5-25 us (passive waiting wakes threads through the kernel):
     * below ~40 us of work one thread is faster. Transcendental ones run ~1.5 ns/element on
     * vecmath, the others ~0.3. */
    int costly = s->op == A_SIGMOID || s->op == A_TANH || s->op == A_GELU || s->op == A_GELU_TANH ||
                 s->op == A_ELU || s->op == A_SELU || s->op == A_CELU || s->op == A_SOFTPLUS ||
                 s->op == A_MISH;
    int nt = n < (costly ? 32768 : 131072) ? 1 : r->n_threads;
    const float *x = in->data;
    float *y = out->data;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int64_t lo, hi;
        qp_ksplit(n, omp_get_num_threads(), omp_get_thread_num(), &lo, &hi);
        act_range(s, lo_c, hi_c, x, y, lo, hi, fast);
    }
    return QP_OK;
}

enum qp_status qp_k_act_run(const struct qp_krun *r) {
    return act_run(r, 1);
}

enum qp_status qp_k_act_ref_run(const struct qp_krun *r) {
    return act_run(r, 0);
}
