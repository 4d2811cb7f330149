/*
 * Elementwise family: binary arithmetic, comparison and logic with numpy broadcasting (Add, Sub,
 * Mul, Div, Pow, Mod, Min, Max, Sum, Mean, Equal, Less, Greater, LessOrEqual, GreaterOrEqual,
 * And, Or, Xor, PRelu), Where, and the math unary ops (Neg, Abs, Reciprocal, Sqrt, Exp, Log,
 * Floor, Ceil, Round, Not, Sign, Erf, Sin, Cos, ...).
 *
 * Integer arithmetic wraps (computed in unsigned) and integer division by zero gives 0, so model
 * data can never trap.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kcheck.h"
#include "kernels/bcast.h"
#include "kernels/fast.h"
#include "kernels/kernels.h"
#include "kernels/vecmath.h"
#include "qmath/qparams.h"

/* The type-generic macros below compare unsigned values with 0. */
#pragma GCC diagnostic ignored "-Wtype-limits"

enum bin_op {
    B_ADD,
    B_SUB,
    B_MUL,
    B_DIV,
    B_POW,
    B_MOD,
    B_FMOD,
    B_MIN,
    B_MAX,
    B_EQ,
    B_LT,
    B_GT,
    B_LE,
    B_GE,
    B_AND,
    B_OR,
    B_XOR,
    B_PRELU,
    B_BITSHIFT_L,
    B_BITSHIFT_R
};

struct bin_state {
    enum bin_op op;
    struct qp_bcast b[9]; /* variadic ops: b[k] folds input k into the output */
    int n_steps;
    int variadic_kind; /* 0: binary; 1: Sum, 2: Mean, 3: Min, 4: Max */
    int mixed;         /* Pow with different base/exponent types: slow generic path */
};

struct bin_ctx {
    enum bin_op op;
    enum qp_dtype dt; /* operand dtype */
    const void *a, *b;
    void *o;
    const struct qp_kt *ta, *tb;
    struct qp_kt *to;
};

#define ROW(T, OT, EXPR)                                                                           \
    do {                                                                                           \
        const T *pa = (const T *)c->a + off[0];                                                    \
        const T *pb = (const T *)c->b + off[1];                                                    \
        OT *po = (OT *)c->o + o;                                                                   \
        int64_t s0 = step[0], s1 = step[1];                                                        \
        for (int64_t j = 0; j < len; j++) {                                                        \
            T x = pa[j * s0], y = pb[j * s1];                                                      \
            po[j] = (OT)(EXPR);                                                                    \
        }                                                                                          \
    } while (0)

#define CMP_CASES(T)                                                                               \
    case B_EQ:                                                                                     \
        ROW(T, uint8_t, x == y);                                                                   \
        break;                                                                                     \
    case B_LT:                                                                                     \
        ROW(T, uint8_t, x < y);                                                                    \
        break;                                                                                     \
    case B_GT:                                                                                     \
        ROW(T, uint8_t, x > y);                                                                    \
        break;                                                                                     \
    case B_LE:                                                                                     \
        ROW(T, uint8_t, x <= y);                                                                   \
        break;                                                                                     \
    case B_GE:                                                                                     \
        ROW(T, uint8_t, x >= y);                                                                   \
        break;                                                                                     \
    case B_MIN:                                                                                    \
        ROW(T, T, x < y ? x : y);                                                                  \
        break;                                                                                     \
    case B_MAX:                                                                                    \
        ROW(T, T, x > y ? x : y);                                                                  \
        break;

#define INT_CASES(T, U)                                                                            \
    case B_ADD:                                                                                    \
        ROW(T, T, (U)x + (U)y);                                                                    \
        break;                                                                                     \
    case B_SUB:                                                                                    \
        ROW(T, T, (U)x - (U)y);                                                                    \
        break;                                                                                     \
    case B_MUL:                                                                                    \
        ROW(T, T, (U)x *(U)y);                                                                     \
        break;                                                                                     \
    case B_DIV:                                                                                    \
        ROW(T, T, idiv_##T(x, y));                                                                 \
        break;                                                                                     \
    case B_MOD:                                                                                    \
        ROW(T, T, imod_##T(x, y));                                                                 \
        break;                                                                                     \
    case B_FMOD:                                                                                   \
        ROW(T, T, ifmod_##T(x, y));                                                                \
        break;                                                                                     \
    case B_POW:                                                                                    \
        ROW(T, T, ipow_##T(x, y));                                                                 \
        break;                                                                                     \
    case B_BITSHIFT_L:                                                                             \
        ROW(T, T, (U)y >= sizeof(T) * 8 ? 0 : (U)x << (U)y);                                       \
        break;                                                                                     \
    case B_BITSHIFT_R:                                                                             \
        ROW(T, T, (U)y >= sizeof(T) * 8 ? 0 : (U)x >> (U)y);                                       \
        break;                                                                                     \
        CMP_CASES(T)

#define INT_HELPERS(T, U, TMIN)                                                                    \
    static inline T idiv_##T(T x, T y) {                                                           \
        if (y == 0) return 0;                                                                      \
        if ((TMIN) != 0 && x == (T)(TMIN) && y == (T)-1) return x;                                 \
        return (T)(x / y);                                                                         \
    }                                                                                              \
    static inline T ifmod_##T(T x, T y) {                                                          \
        if (y == 0) return 0;                                                                      \
        if ((TMIN) != 0 && y == (T)-1) return 0;                                                   \
        return (T)(x % y);                                                                         \
    }                                                                                              \
    static inline T imod_##T(T x, T y) {                                                           \
        T r = ifmod_##T(x, y);                                                                     \
        if (r != 0 && ((r < 0) != (y < 0))) r = (T)((U)r + (U)y);                                  \
        return r;                                                                                  \
    }                                                                                              \
    static inline T ipow_##T(T x, T y) {                                                           \
        if (y < 0) return (T)(x == 1 ? 1 : (x == (T)-1 ? ((y & 1) ? -1 : 1) : 0));                 \
        U r = 1, b = (U)x;                                                                         \
        U e = (U)y;                                                                                \
        while (e) {                                                                                \
            if (e & 1) r *= b;                                                                     \
            b *= b;                                                                                \
            e >>= 1;                                                                               \
        }                                                                                          \
        return (T)r;                                                                               \
    }

typedef unsigned int uint_t;
INT_HELPERS(int8_t, uint_t, INT8_MIN)
INT_HELPERS(uint8_t, uint_t, 0)
INT_HELPERS(int16_t, uint_t, INT16_MIN)
INT_HELPERS(uint16_t, uint_t, 0)
INT_HELPERS(int32_t, uint32_t, INT32_MIN)
INT_HELPERS(uint32_t, uint32_t, 0)
INT_HELPERS(int64_t, uint64_t, INT64_MIN)
INT_HELPERS(uint64_t, uint64_t, 0)

static inline float fmodpy_f(float x, float y) {
    float r = fmodf(x, y);
    if (r != 0.0f && ((r < 0.0f) != (y < 0.0f))) r += y;
    return r;
}
static inline double fmodpy_d(double x, double y) {
    double r = fmod(x, y);
    if (r != 0.0 && ((r < 0.0) != (y < 0.0))) r += y;
    return r;
}
/* ONNX Min/Max propagate NaN. */
static inline float fminnan(float x, float y) {
    return (x != x || x < y) ? x : y;
}
static inline float fmaxnan(float x, float y) {
    return (x != x || x > y) ? x : y;
}
static inline double dminnan(double x, double y) {
    return (x != x || x < y) ? x : y;
}
static inline double dmaxnan(double x, double y) {
    return (x != x || x > y) ? x : y;
}

static void bin_row_f32(const struct bin_ctx *c, const int64_t *off, const int64_t *step, int64_t o,
                        int64_t len) {
    switch (c->op) {
    case B_ADD:
        ROW(float, float, x + y);
        break;
    case B_SUB:
        ROW(float, float, x - y);
        break;
    case B_MUL:
        ROW(float, float, x *y);
        break;
    case B_DIV:
        ROW(float, float, x / y);
        break;
    case B_POW:
        ROW(float, float, powf(x, y));
        break;
    case B_MOD:
        ROW(float, float, fmodpy_f(x, y));
        break;
    case B_FMOD:
        ROW(float, float, fmodf(x, y));
        break;
    case B_PRELU:
        ROW(float, float, x < 0.0f ? x * y : x);
        break;
    case B_EQ:
        ROW(float, uint8_t, x == y);
        break;
    case B_LT:
        ROW(float, uint8_t, x < y);
        break;
    case B_GT:
        ROW(float, uint8_t, x > y);
        break;
    case B_LE:
        ROW(float, uint8_t, x <= y);
        break;
    case B_GE:
        ROW(float, uint8_t, x >= y);
        break;
    case B_MIN:
        ROW(float, float, fminnan(x, y));
        break;
    case B_MAX:
        ROW(float, float, fmaxnan(x, y));
        break;
    default:
        break;
    }
}

static void bin_row_f64(const struct bin_ctx *c, const int64_t *off, const int64_t *step, int64_t o,
                        int64_t len) {
    switch (c->op) {
    case B_ADD:
        ROW(double, double, x + y);
        break;
    case B_SUB:
        ROW(double, double, x - y);
        break;
    case B_MUL:
        ROW(double, double, x *y);
        break;
    case B_DIV:
        ROW(double, double, x / y);
        break;
    case B_POW:
        ROW(double, double, pow(x, y));
        break;
    case B_MOD:
        ROW(double, double, fmodpy_d(x, y));
        break;
    case B_FMOD:
        ROW(double, double, fmod(x, y));
        break;
    case B_PRELU:
        ROW(double, double, x < 0.0 ? x * y : x);
        break;
    case B_EQ:
        ROW(double, uint8_t, x == y);
        break;
    case B_LT:
        ROW(double, uint8_t, x < y);
        break;
    case B_GT:
        ROW(double, uint8_t, x > y);
        break;
    case B_LE:
        ROW(double, uint8_t, x <= y);
        break;
    case B_GE:
        ROW(double, uint8_t, x >= y);
        break;
    case B_MIN:
        ROW(double, double, dminnan(x, y));
        break;
    case B_MAX:
        ROW(double, double, dmaxnan(x, y));
        break;
    default:
        break;
    }
}

static void bin_row(void *ctx, const int64_t *off, const int64_t *step, int64_t o, int64_t len) {
    const struct bin_ctx *c = ctx;
    switch (c->dt) {
    case QP_DTYPE_FLOAT:
        bin_row_f32(c, off, step, o, len);
        break;
    case QP_DTYPE_DOUBLE:
        bin_row_f64(c, off, step, o, len);
        break;
    case QP_DTYPE_INT8:
        switch (c->op) { INT_CASES(int8_t, uint_t) default : break; }
        break;
    case QP_DTYPE_UINT8:
        switch (c->op) { INT_CASES(uint8_t, uint_t) default : break; }
        break;
    case QP_DTYPE_INT16:
        switch (c->op) { INT_CASES(int16_t, uint_t) default : break; }
        break;
    case QP_DTYPE_UINT16:
        switch (c->op) { INT_CASES(uint16_t, uint_t) default : break; }
        break;
    case QP_DTYPE_INT32:
        switch (c->op) { INT_CASES(int32_t, uint32_t) default : break; }
        break;
    case QP_DTYPE_UINT32:
        switch (c->op) { INT_CASES(uint32_t, uint32_t) default : break; }
        break;
    case QP_DTYPE_INT64:
        switch (c->op) { INT_CASES(int64_t, uint64_t) default : break; }
        break;
    case QP_DTYPE_UINT64:
        switch (c->op) { INT_CASES(uint64_t, uint64_t) default : break; }
        break;
    case QP_DTYPE_BOOL:
        switch (c->op) {
        case B_AND:
            ROW(uint8_t, uint8_t, x && y);
            break;
        case B_OR:
            ROW(uint8_t, uint8_t, x || y);
            break;
        case B_XOR:
            ROW(uint8_t, uint8_t, (x != 0) != (y != 0));
            break;
        case B_EQ:
            ROW(uint8_t, uint8_t, (x != 0) == (y != 0));
            break;
        default:
            break;
        }
        break;
    default:
        break;
    }
}

/* Mixed-type Pow (opset 12+: exponent of another numeric type), computed in double. */
static void pow_mixed_row(void *ctx, const int64_t *off, const int64_t *step, int64_t o,
                          int64_t len) {
    const struct bin_ctx *c = ctx;
    for (int64_t j = 0; j < len; j++) {
        double x = qp_kt_get_f64(c->ta, (uint64_t)(off[0] + j * step[0]));
        double y = qp_kt_get_f64(c->tb, (uint64_t)(off[1] + j * step[1]));
        double r = pow(x, y);
        if (c->to->dtype == QP_DTYPE_FLOAT)
            ((float *)c->to->data)[o + j] = powf((float)x, (float)y);
        else
            qp_kt_set_f64(c->to, (uint64_t)(o + j), r);
    }
}

static int op_from_name(const char *op, enum bin_op *out, int *variadic) {
    static const struct {
        const char *name;
        enum bin_op op;
        int variadic;
    } t[] = {{"Add", B_ADD, 0},
             {"Sub", B_SUB, 0},
             {"Mul", B_MUL, 0},
             {"Div", B_DIV, 0},
             {"Pow", B_POW, 0},
             {"Mod", B_MOD, 0},
             {"Equal", B_EQ, 0},
             {"Less", B_LT, 0},
             {"Greater", B_GT, 0},
             {"LessOrEqual", B_LE, 0},
             {"GreaterOrEqual", B_GE, 0},
             {"And", B_AND, 0},
             {"Or", B_OR, 0},
             {"Xor", B_XOR, 0},
             {"PRelu", B_PRELU, 0},
             {"BitShift", B_BITSHIFT_L, 0},
             {"Sum", B_ADD, 1},
             {"Mean", B_ADD, 2},
             {"Min", B_MIN, 3},
             {"Max", B_MAX, 4}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (strcmp(t[i].name, op) == 0) {
            *out = t[i].op;
            *variadic = t[i].variadic;
            return 1;
        }
    return 0;
}

static int is_cmp(enum bin_op op) {
    return op == B_EQ || op == B_LT || op == B_GT || op == B_LE || op == B_GE;
}

enum qp_status qp_k_binary_prepare(struct qp_kprep *p) {
    struct bin_state s;
    memset(&s, 0, sizeof s);
    int variadic = 0;
    if (!op_from_name(p->node->op_type, &s.op, &variadic))
        return qp_error_set(p->err, QP_ERR_INTERNAL, "not an elementwise op");
    s.variadic_kind = variadic;
    int n = variadic ? p->n_in : 2;
    if (n < 1 || n > 9)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "%d inputs (1..9 supported)", n);
    if (!variadic && p->n_in < 2) return qp_error_set(p->err, QP_ERR_BAD_INPUT, "needs 2 inputs");
    for (int i = 0; i < n; i++) {
        enum qp_status st = qp_kneed(p, i);
        if (st) return st;
    }
    enum qp_dtype dt = p->in[0]->dtype;
    for (int i = 1; i < n; i++)
        if (p->in[i]->dtype != dt) {
            if (s.op == B_POW && i == 1 && !variadic) {
                s.mixed = 1;
                continue;
            }
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "input %d is %s but input 0 is %s", i,
                                qp_dtype_name(p->in[i]->dtype), qp_dtype_name(dt));
        }
    if (s.op == B_BITSHIFT_L) {
        char buf[16];
        qp_kattr_str(p->node, "direction", "", buf, sizeof buf);
        if (strcmp(buf, "RIGHT") == 0)
            s.op = B_BITSHIFT_R;
        else if (strcmp(buf, "LEFT") != 0)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "BitShift direction '%s'", buf);
    }
    if (s.op == B_MOD && qp_kattr_int(p->node, "fmod", 0)) s.op = B_FMOD;
    if (s.op == B_MOD && !qp_dtype_traits(dt)->is_float && qp_kattr_int(p->node, "fmod", 0) == 0)
        s.op = B_MOD;
    if ((s.op == B_MOD) && qp_dtype_traits(dt)->is_float)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "Mod of floats requires fmod=1");
    int is_logic = s.op == B_AND || s.op == B_OR || s.op == B_XOR;
    if (is_logic != (dt == QP_DTYPE_BOOL) && !(s.op == B_EQ && dt == QP_DTYPE_BOOL))
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "dtype %s", qp_dtype_name(dt));
    if (variadic == 2 && !qp_dtype_traits(dt)->is_float)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "Mean of %s", qp_dtype_name(dt));
    /* Opset < 7 binary ops: `broadcast` = 1 with `axis` aligns B's dims at `axis` of A
     * (numpy aligns at the end); viewing B with trailing 1s makes that numpy broadcasting. */
    struct qp_kt legacy_b;
    const struct qp_kt *b_in = n > 1 ? p->in[1] : NULL;
    if (p->opset < 7 && !variadic && qp_kattr_int(p->node, "broadcast", 0) &&
        qp_kattr(p->node, "axis")) {
        int64_t axis = qp_kattr_int(p->node, "axis", 0);
        if (axis < 0) axis += p->in[0]->rank;
        int pad = p->in[0]->rank - (int)axis - p->in[1]->rank;
        if (axis < 0 || pad < 0)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "legacy broadcast axis out of range");
        legacy_b = *p->in[1];
        for (int i = 0; i < pad; i++)
            legacy_b.dims[legacy_b.rank++] = 1;
        b_in = &legacy_b;
    }
    /* Output shape: broadcast of all inputs (PRelu: slope broadcasts to X). */
    int r = p->in[0]->rank;
    int64_t d[QP_MAX_RANK];
    memcpy(d, p->in[0]->dims, sizeof d);
    for (int i = 1; i < n; i++) {
        const struct qp_kt *t = i == 1 ? b_in : p->in[i];
        enum qp_status st = qp_kbroadcast(r, d, t->rank, t->dims, &r, d, p->err);
        if (st) return st;
    }
    enum qp_dtype odt = (is_cmp(s.op) && !variadic) ? QP_DTYPE_BOOL : dt;
    enum qp_status st = qp_kt_set(p->out[0], odt, r, d, p->err);
    if (st) return st;
    if (variadic) {
        /* Step 0 copies broadcast(input 0) into the output; step k folds input k into it. */
        s.n_steps = n;
        for (int k = 0; k < n; k++) {
            const struct qp_kt *ops[2] = {k == 0 ? p->in[0] : p->out[0], p->in[k]};
            st = qp_bcast_init(&s.b[k], 2, ops, r, d, p->err);
            if (st) return st;
        }
    } else {
        const struct qp_kt *ops[2] = {p->in[0], b_in};
        st = qp_bcast_init(&s.b[0], 2, ops, r, d, p->err);
        if (st) return st;
    }
    return qp_ksave_state(p, &s, sizeof s);
}

static void copy_row(void *ctx, const int64_t *off, const int64_t *step, int64_t o, int64_t len) {
    const struct bin_ctx *c = ctx;
    size_t es = (size_t)qp_dtype_traits(c->dt)->bits / 8;
    const unsigned char *pa = (const unsigned char *)c->a + (size_t)off[0] * es;
    unsigned char *po = (unsigned char *)c->o + (size_t)o * es;
    if (step[0] == 1)
        memcpy(po, pa, (size_t)len * es);
    else
        for (int64_t j = 0; j < len; j++)
            memcpy(po + (size_t)j * es, pa, es);
}

static void run_bcast(const struct qp_bcast *b, qp_bcast_row_fn fn, void *ctx, int nt) {
    int64_t n = (int64_t)b->numel;
    if (n < 32768) nt = 1;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int64_t lo, hi;
        qp_ksplit(n, omp_get_num_threads(), omp_get_thread_num(), &lo, &hi);
        qp_bcast_walk(b, lo, hi, fn, ctx);
    }
}

enum qp_status qp_k_binary_run(const struct qp_krun *r) {
    const struct bin_state *s = r->state;
    struct bin_ctx c = {.op = s->op, .dt = r->in[0]->dtype, .o = r->out[0]->data};
    if (!s->variadic_kind) {
        c.a = r->in[0]->data;
        c.b = r->in[1]->data;
        c.ta = r->in[0];
        c.tb = r->in[1];
        c.to = r->out[0];
        run_bcast(&s->b[0], s->mixed ? pow_mixed_row : bin_row, &c, r->n_threads);
        return QP_OK;
    }
    c.a = r->in[0]->data;
    run_bcast(&s->b[0], copy_row, &c, r->n_threads);
    for (int k = 1; k < s->n_steps; k++) {
        c.a = r->out[0]->data;
        c.b = r->in[k]->data;
        run_bcast(&s->b[k], bin_row, &c, r->n_threads);
    }
    if (s->variadic_kind == 2) {
        struct qp_kt *o = r->out[0];
        for (uint64_t i = 0; i < o->numel; i++)
            qp_kt_set_f64(o, i, qp_kt_get_f64(o, i) / (double)s->n_steps);
    }
    return QP_OK;
}

/* ---- Where ------------------------------------------------------------------------------- */

struct where_ctx {
    const uint8_t *cond;
    const unsigned char *x, *y;
    unsigned char *o;
    size_t es;
};

static void where_row(void *ctx, const int64_t *off, const int64_t *step, int64_t o, int64_t len) {
    const struct where_ctx *c = ctx;
    for (int64_t j = 0; j < len; j++) {
        int64_t ic = off[0] + j * step[0], ix = off[1] + j * step[1], iy = off[2] + j * step[2];
        const unsigned char *src =
            c->cond[ic] ? c->x + (size_t)ix * c->es : c->y + (size_t)iy * c->es;
        memcpy(c->o + (size_t)(o + j) * c->es, src, c->es);
    }
}

enum qp_status qp_k_where_prepare(struct qp_kprep *p) {
    for (int i = 0; i < 3; i++) {
        enum qp_status st = qp_kneed(p, i);
        if (st) return st;
    }
    if (p->in[0]->dtype != QP_DTYPE_BOOL)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "condition is %s, expected bool",
                            qp_dtype_name(p->in[0]->dtype));
    if (p->in[1]->dtype != p->in[2]->dtype)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "X is %s but Y is %s",
                            qp_dtype_name(p->in[1]->dtype), qp_dtype_name(p->in[2]->dtype));
    if (qp_dtype_traits(p->in[1]->dtype)->bits < 8)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "dtype %s", qp_dtype_name(p->in[1]->dtype));
    int r = p->in[0]->rank;
    int64_t d[QP_MAX_RANK];
    memcpy(d, p->in[0]->dims, sizeof d);
    for (int i = 1; i < 3; i++) {
        enum qp_status st = qp_kbroadcast(r, d, p->in[i]->rank, p->in[i]->dims, &r, d, p->err);
        if (st) return st;
    }
    enum qp_status st = qp_kt_set(p->out[0], p->in[1]->dtype, r, d, p->err);
    if (st) return st;
    struct qp_bcast *b = malloc(sizeof *b);
    if (!b) return qp_error_set(p->err, QP_ERR_NOMEM, "out of memory");
    st = qp_bcast_init(b, 3, p->in, r, d, p->err);
    if (st) {
        free(b);
        return st;
    }
    p->state = b;
    return QP_OK;
}

enum qp_status qp_k_where_run(const struct qp_krun *r) {
    struct where_ctx c = {r->in[0]->data, r->in[1]->data, r->in[2]->data, r->out[0]->data,
                          (size_t)qp_dtype_traits(r->in[1]->dtype)->bits / 8};
    run_bcast(r->state, where_row, &c, r->n_threads);
    return QP_OK;
}

/* ---- unary math ---------------------------------------------------------------------------- */

enum un_op {
    U_NEG,
    U_ABS,
    U_RECIP,
    U_SQRT,
    U_EXP,
    U_LOG,
    U_FLOOR,
    U_CEIL,
    U_ROUND,
    U_NOT,
    U_SIGN,
    U_ERF,
    U_SIN,
    U_COS,
    U_TAN,
    U_ASIN,
    U_ACOS,
    U_ATAN,
    U_SINH,
    U_COSH,
    U_ASINH,
    U_ACOSH,
    U_ATANH,
    U_ISNAN,
    U_ISINF,
    U_BITNOT
};

static const struct {
    const char *name;
    enum un_op op;
} un_ops[] = {
    {"Neg", U_NEG},     {"Abs", U_ABS},          {"Reciprocal", U_RECIP}, {"Sqrt", U_SQRT},
    {"Exp", U_EXP},     {"Log", U_LOG},          {"Floor", U_FLOOR},      {"Ceil", U_CEIL},
    {"Round", U_ROUND}, {"Not", U_NOT},          {"Sign", U_SIGN},        {"Erf", U_ERF},
    {"Sin", U_SIN},     {"Cos", U_COS},          {"Tan", U_TAN},          {"Asin", U_ASIN},
    {"Acos", U_ACOS},   {"Atan", U_ATAN},        {"Sinh", U_SINH},        {"Cosh", U_COSH},
    {"Asinh", U_ASINH}, {"Acosh", U_ACOSH},      {"Atanh", U_ATANH},      {"IsNaN", U_ISNAN},
    {"IsInf", U_ISINF}, {"BitwiseNot", U_BITNOT}};

struct un_state {
    enum un_op op;
    int detect_pos, detect_neg;
};

enum qp_status qp_k_unary_prepare(struct qp_kprep *p) {
    enum qp_status st = qp_kneed(p, 0);
    if (st) return st;
    struct un_state s = {0};
    size_t i;
    for (i = 0; i < sizeof un_ops / sizeof un_ops[0]; i++)
        if (strcmp(un_ops[i].name, p->node->op_type) == 0) break;
    if (i == sizeof un_ops / sizeof un_ops[0])
        return qp_error_set(p->err, QP_ERR_INTERNAL, "not a unary op");
    s.op = un_ops[i].op;
    s.detect_pos = (int)qp_kattr_int(p->node, "detect_positive", 1);
    s.detect_neg = (int)qp_kattr_int(p->node, "detect_negative", 1);
    enum qp_dtype dt = p->in[0]->dtype;
    int fl = qp_dtype_traits(dt)->is_float;
    if (s.op == U_NOT && dt != QP_DTYPE_BOOL)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "Not of %s", qp_dtype_name(dt));
    if (s.op != U_NOT && dt == QP_DTYPE_BOOL)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "dtype bool");
    if (s.op == U_BITNOT && fl)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "BitwiseNot of %s", qp_dtype_name(dt));
    if (!fl && s.op != U_NEG && s.op != U_ABS && s.op != U_SIGN && s.op != U_NOT &&
        s.op != U_BITNOT)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "%s of %s", p->node->op_type,
                            qp_dtype_name(dt));
    enum qp_dtype odt = (s.op == U_ISNAN || s.op == U_ISINF) ? QP_DTYPE_BOOL : dt;
    st = qp_kt_set(p->out[0], odt, p->in[0]->rank, p->in[0]->dims, p->err);
    if (st) return st;
    return qp_ksave_state(p, &s, sizeof s);
}

static inline float signf_(float x) {
    return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : x);
}

#define UN_LOOP(T, OT, EXPR)                                                                       \
    do {                                                                                           \
        const T *pi = in;                                                                          \
        OT *po = out;                                                                              \
        for (int64_t i = lo; i < hi; i++) {                                                        \
            T x = pi[i];                                                                           \
            po[i] = (OT)(EXPR);                                                                    \
        }                                                                                          \
    } while (0)

#define UN_INT(T, U)                                                                               \
    switch (s->op) {                                                                               \
    case U_NEG:                                                                                    \
        UN_LOOP(T, T, (T)(0u - (U)x));                                                             \
        break;                                                                                     \
    case U_ABS:                                                                                    \
        UN_LOOP(T, T, x < 0 ? (T)(0u - (U)x) : x);                                                 \
        break;                                                                                     \
    case U_SIGN:                                                                                   \
        UN_LOOP(T, T, x > 0 ? 1 : (x < 0 ? -1 : 0));                                               \
        break;                                                                                     \
    case U_BITNOT:                                                                                 \
        UN_LOOP(T, T, ~(U)x);                                                                      \
        break;                                                                                     \
    default:                                                                                       \
        break;                                                                                     \
    }

/* float32: the vecmath code when `fast` and it has some, else libm. */
static void un_range_f32(const struct un_state *s, const void *in, void *out, int64_t lo,
                         int64_t hi, int fast) {
    if (fast && (s->op == U_EXP || s->op == U_ERF)) {
        /* vecmath: Exp within 1.0 ulp, Erf 1.2 (vecmath.h); libm where it has no fast code. */
        if (qp_vf_apply(s->op == U_EXP ? QP_VF_EXP : QP_VF_ERF, (const float *)in + lo,
                        (float *)out + lo, hi - lo))
            return;
    }
    switch (s->op) {
    case U_NEG:
        UN_LOOP(float, float, -x);
        break;
    case U_ABS:
        UN_LOOP(float, float, fabsf(x));
        break;
    case U_RECIP:
        UN_LOOP(float, float, 1.0f / x);
        break;
    case U_SQRT:
        UN_LOOP(float, float, sqrtf(x));
        break;
    case U_EXP:
        UN_LOOP(float, float, expf(x));
        break;
    case U_LOG:
        UN_LOOP(float, float, logf(x));
        break;
    case U_FLOOR:
        UN_LOOP(float, float, floorf(x));
        break;
    case U_CEIL:
        UN_LOOP(float, float, ceilf(x));
        break;
    case U_ROUND:
        UN_LOOP(float, float, qp_round_half_even(x));
        break;
    case U_SIGN:
        UN_LOOP(float, float, signf_(x));
        break;
    case U_ERF:
        UN_LOOP(float, float, erff(x));
        break;
    case U_SIN:
        UN_LOOP(float, float, sinf(x));
        break;
    case U_COS:
        UN_LOOP(float, float, cosf(x));
        break;
    case U_TAN:
        UN_LOOP(float, float, tanf(x));
        break;
    case U_ASIN:
        UN_LOOP(float, float, asinf(x));
        break;
    case U_ACOS:
        UN_LOOP(float, float, acosf(x));
        break;
    case U_ATAN:
        UN_LOOP(float, float, atanf(x));
        break;
    case U_SINH:
        UN_LOOP(float, float, sinhf(x));
        break;
    case U_COSH:
        UN_LOOP(float, float, coshf(x));
        break;
    case U_ASINH:
        UN_LOOP(float, float, asinhf(x));
        break;
    case U_ACOSH:
        UN_LOOP(float, float, acoshf(x));
        break;
    case U_ATANH:
        UN_LOOP(float, float, atanhf(x));
        break;
    case U_ISNAN:
        UN_LOOP(float, uint8_t, x != x);
        break;
    case U_ISINF:
        UN_LOOP(float, uint8_t, isinf(x) && ((x > 0 && s->detect_pos) || (x < 0 && s->detect_neg)));
        break;
    default:
        break;
    }
}

/* The double ops with no float-table twin, element by element through libm. */
static void un_range_f64_rare(const struct un_state *s, const void *in, void *out, int64_t lo,
                              int64_t hi) {
    const double *pi = in;
    double *po = out;
    for (int64_t i = lo; i < hi; i++) {
        double x = pi[i];
        switch (s->op) {
        case U_TAN:
            po[i] = tan(x);
            break;
        case U_ASIN:
            po[i] = asin(x);
            break;
        case U_ACOS:
            po[i] = acos(x);
            break;
        case U_ATAN:
            po[i] = atan(x);
            break;
        case U_SINH:
            po[i] = sinh(x);
            break;
        case U_COSH:
            po[i] = cosh(x);
            break;
        case U_ASINH:
            po[i] = asinh(x);
            break;
        case U_ACOSH:
            po[i] = acosh(x);
            break;
        case U_ATANH:
            po[i] = atanh(x);
            break;
        default:
            po[i] = x;
            break;
        }
    }
}

static void un_range_f64(const struct un_state *s, const void *in, void *out, int64_t lo,
                         int64_t hi) {
    switch (s->op) {
    case U_NEG:
        UN_LOOP(double, double, -x);
        break;
    case U_ABS:
        UN_LOOP(double, double, fabs(x));
        break;
    case U_RECIP:
        UN_LOOP(double, double, 1.0 / x);
        break;
    case U_SQRT:
        UN_LOOP(double, double, sqrt(x));
        break;
    case U_EXP:
        UN_LOOP(double, double, exp(x));
        break;
    case U_LOG:
        UN_LOOP(double, double, log(x));
        break;
    case U_FLOOR:
        UN_LOOP(double, double, floor(x));
        break;
    case U_CEIL:
        UN_LOOP(double, double, ceil(x));
        break;
    case U_ROUND:
        UN_LOOP(double, double, nearbyint(x));
        break;
    case U_SIGN:
        UN_LOOP(double, double, x > 0 ? 1.0 : (x < 0 ? -1.0 : x));
        break;
    case U_ERF:
        UN_LOOP(double, double, erf(x));
        break;
    case U_SIN:
        UN_LOOP(double, double, sin(x));
        break;
    case U_COS:
        UN_LOOP(double, double, cos(x));
        break;
    case U_ISNAN:
        UN_LOOP(double, uint8_t, x != x);
        break;
    case U_ISINF:
        UN_LOOP(double, uint8_t,
                isinf(x) && ((x > 0 && s->detect_pos) || (x < 0 && s->detect_neg)));
        break;
    default:
        /* rarer double ops: through float's table is wrong; compute in double via libm */
        un_range_f64_rare(s, in, out, lo, hi);
        break;
    }
}

static void un_range(const struct un_state *s, enum qp_dtype dt, const void *in, void *out,
                     int64_t lo, int64_t hi, int fast) {
    switch (dt) {
    case QP_DTYPE_FLOAT:
        un_range_f32(s, in, out, lo, hi, fast);
        break;
    case QP_DTYPE_DOUBLE:
        un_range_f64(s, in, out, lo, hi);
        break;
    case QP_DTYPE_BOOL:
        UN_LOOP(uint8_t, uint8_t, !x);
        break;
    case QP_DTYPE_INT8:
        UN_INT(int8_t, uint_t) break;
    case QP_DTYPE_UINT8:
        UN_INT(uint8_t, uint_t) break;
    case QP_DTYPE_INT16:
        UN_INT(int16_t, uint_t) break;
    case QP_DTYPE_UINT16:
        UN_INT(uint16_t, uint_t) break;
    case QP_DTYPE_INT32:
        UN_INT(int32_t, uint32_t) break;
    case QP_DTYPE_UINT32:
        UN_INT(uint32_t, uint32_t) break;
    case QP_DTYPE_INT64:
        UN_INT(int64_t, uint64_t) break;
    case QP_DTYPE_UINT64:
        UN_INT(uint64_t, uint64_t) break;
    default:
        break;
    }
}

static enum qp_status unary_run(const struct qp_krun *r, int fast) {
    const struct un_state *s = r->state;
    int64_t n = (int64_t)r->in[0]->numel;
    /* Below ~40 us of work one thread beats a parallel region (activation.c). */
    int cheap = s->op == U_NEG || s->op == U_ABS || s->op == U_RECIP || s->op == U_SQRT ||
                s->op == U_FLOOR || s->op == U_CEIL || s->op == U_ROUND || s->op == U_NOT ||
                s->op == U_SIGN || s->op == U_ISNAN || s->op == U_ISINF || s->op == U_BITNOT;
    int nt = n < (cheap ? 131072 : 16384) ? 1 : r->n_threads;
    const void *in = r->in[0]->data;
    void *out = r->out[0]->data;
    enum qp_dtype dt = r->in[0]->dtype;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int64_t lo, hi;
        qp_ksplit(n, omp_get_num_threads(), omp_get_thread_num(), &lo, &hi);
        un_range(s, dt, in, out, lo, hi, fast);
    }
    return QP_OK;
}

enum qp_status qp_k_unary_run(const struct qp_krun *r) {
    return unary_run(r, 1);
}

enum qp_status qp_k_unary_ref_run(const struct qp_krun *r) {
    return unary_run(r, 0);
}
