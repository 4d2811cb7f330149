/*
 * The Pointwise kernel's fast program (int8_pw_impl.h describes what it computes).
 *
 * pw_fast_compile walks the exact program once, holding each register's value symbolically:
 * where its content lives (a register of the fast program or a node input), the scale d > 0,
 * offset e and clamp bounds that turn the content into the exact program's value, a bound on
 * the value's magnitude, or a constant. Operations that the symbolic form absorbs emit nothing;
 * the others make their operands plain (one PW_AFFINE each, where needed) and emit the exact
 * operation. Fast registers are taken afresh for every result, never one that a live value of
 * the exact program still lives in.
 */
#include <math.h>
#include <string.h>

#include "core/clones.h"
#include "kernels/int8_pw_impl.h"
#include "qmath/qsimd.h"

/* Every scale, offset and value bound of a fast program stays below this (far from float
 * overflow, so that the fast and the exact program see the same finite values). */
#define PW_LIMIT 1e30

enum { S_VEC = 0, S_CONST };

struct sym {
    int kind;
    int op;     /* S_VEC: the content's operand (fast register >= 0, node input < 0) */
    float c;    /* S_CONST: the value */
    float d, e; /* S_VEC: value = d * clamp(content, lo, hi) + e */
    float lo, hi;
    double bound; /* |value| <= bound */
};

struct fc {
    struct pw_state *s;
    struct pw_instr *out;
    int n, cap, k; /* fast instructions, room, the exact instruction being compiled */
    struct sym reg[QP_PW_MAX_REGS];
    struct sym in[QP_PW_MAX_IN];
    unsigned avoid; /* fast registers the current instruction still reads */
};

static int reads(const struct pw_instr *in, int r) {
    return in->a == r || (pw_binary(in->op) && in->b == r);
}

/* Whether exact register r holds a value read after instruction k (or an output). */
static int live_after(const struct pw_state *s, int r, int k) {
    for (int j = k + 1; j < s->n_instr; j++) {
        if (reads(&s->ins[j], r)) return 1;
        if (s->ins[j].dst == r) return 0;
    }
    for (int o = 0; o < s->n_out; o++)
        if (s->out[o].reg == r) return 1;
    return 0;
}

/* A fast register no live value lives in, or -1. */
static int fresh(struct fc *c) {
    unsigned used = c->avoid;
    for (int r = 0; r < c->s->n_regs; r++)
        if (c->reg[r].kind == S_VEC && c->reg[r].op >= 0 && live_after(c->s, r, c->k))
            used |= 1u << c->reg[r].op;
    for (int p = 0; p < QP_PW_MAX_REGS; p++)
        if (!(used >> p & 1)) {
            c->avoid |= 1u << p;
            return p;
        }
    return -1;
}

static int finite_in(double v, double lo, double hi) {
    return isfinite(v) && v >= lo && v <= hi;
}

/* Appends an instruction writing a fresh register; returns it, or -1. */
static int emit(struct fc *c, int op, int a, int b, const float p[4], const struct pw_instr *like) {
    int d = fresh(c);
    if (d < 0 || c->n == c->cap) return -1;
    struct pw_instr *in = &c->out[c->n++];
    if (like)
        *in = *like;
    else
        memset(in, 0, sizeof *in);
    in->op = op;
    in->dst = d;
    in->a = a;
    in->b = b;
    if (p) memcpy(in->p, p, sizeof in->p);
    return d;
}

static struct sym vec(int op, float d, float e, double bound) {
    return (struct sym){S_VEC, op, 0.0f, d, e, -INFINITY, INFINITY, bound};
}

static int plain(const struct sym *x) {
    return x->kind == S_VEC && x->d == 1.0f && x->e == 0.0f && x->lo == -INFINITY &&
           x->hi == INFINITY;
}

/* x as content with d = 1, e = 0 and no clamp (one PW_AFFINE when it is not); 0 on failure. */
static int make_plain(struct fc *c, struct sym *x) {
    if (x->kind != S_VEC || plain(x)) return x->kind == S_VEC;
    float p[4] = {x->d, x->e, x->lo, x->hi};
    int r = emit(c, PW_AFFINE, x->op, 0, p, NULL);
    if (r < 0) return 0;
    *x = vec(r, 1.0f, 0.0f, x->bound);
    return 1;
}

/* x without clamp and offset, its scale kept (for products); 0 on failure. */
static int make_unclamped(struct fc *c, struct sym *x) {
    if (x->kind == S_VEC && x->e == 0.0f && x->lo == -INFINITY && x->hi == INFINITY) return 1;
    return make_plain(c, x);
}

/* The fast program's level of one value: what PW_FQL and the affine store compute. */
float pw_level_of(float v, float m, float o, float lo, float hi) {
    float t = v * m;
    if (o != 0.0f) t = t + o;
    t = rintf(t);
    t = t > lo ? t : lo; /* as vmaxps / vminps: a bound equal to the value is the result */
    return t < hi ? t : hi;
}

/* The bounds [*lo, *hi] of the levels of x (through m, o) within [lo0, hi0]: x's clamp passes
 * through the monotone level function. */
static void level_bounds(const struct sym *x, float m, float o, float lo0, float hi0, float *lo,
                         float *hi) {
    *lo = x->lo == -INFINITY ? lo0 : pw_level_of(x->lo, m, o, lo0, hi0);
    *hi = x->hi == INFINITY ? hi0 : pw_level_of(x->hi, m, o, lo0, hi0);
}

static int fake_quant(struct fc *c, const struct pw_instr *in, struct sym *x, struct sym *r) {
    float s = in->p[0], m = x->d / s, o = x->e / s, lo, hi;
    if (!finite_in(fabs(m), 1e-30, PW_LIMIT) || !finite_in(fabs(o), 0, PW_LIMIT)) return 0;
    level_bounds(x, m, o, in->fq_lo - in->fq_z, in->fq_hi - in->fq_z, &lo, &hi);
    float p[4] = {m, o, lo, hi};
    int d = emit(c, PW_FQL, x->op, 0, p, NULL);
    if (d < 0) return 0;
    *r = vec(d, s, 0.0f, (double)s * fmax(fabs(lo), fabs(hi)));
    return 1;
}

/* Clip to [lo, hi] (values of the exact program). */
static int clip(struct fc *c, const struct pw_instr *in, struct sym *x, float lo, float hi,
                struct sym *r) {
    float clo = lo == -INFINITY ? -INFINITY : (lo - x->e) / x->d;
    float chi = hi == INFINITY ? INFINITY : (hi - x->e) / x->d;
    float nlo = clo > x->lo ? clo : x->lo, nhi = chi < x->hi ? chi : x->hi;
    if (!(lo <= hi) || isnan(clo) || isnan(chi)) return 0;
    if (nlo <= nhi) {
        *r = *x;
        r->lo = nlo;
        r->hi = nhi;
    } else { /* the two ranges do not meet: the exact Clip on plain values */
        if (!make_plain(c, x)) return 0;
        int d = emit(c, in->op, x->op, 0, in->p, in);
        if (d < 0) return 0;
        *r = vec(d, 1.0f, 0.0f, x->bound);
    }
    double b = fmax(fabs(lo), fabs(hi));
    r->bound = b < x->bound ? b : x->bound;
    return 1;
}

/* x * k for a constant k. */
static int scale_by(struct fc *c, struct sym *x, double k, struct sym *r) {
    if (k > 0) {
        *r = *x;
        r->d = (float)(x->d * k);
        r->e = (float)(x->e * k);
    } else { /* a sign change (or zero): made plain through one PW_AFFINE */
        float p[4] = {(float)(x->d * k), (float)(x->e * k), x->lo, x->hi};
        int d = emit(c, PW_AFFINE, x->op, 0, p, NULL);
        if (d < 0) return 0;
        *r = vec(d, 1.0f, 0.0f, 0.0);
    }
    r->bound = x->bound * fabs(k);
    return 1;
}

/* a + sign * b, both non-constant. */
static int add_vec(struct fc *c, struct sym *a, struct sym *b, int sign, struct sym *r) {
    if ((a->lo != -INFINITY || a->hi != INFINITY) && !make_plain(c, a)) return 0;
    if ((b->lo != -INFINITY || b->hi != INFINITY) && !make_plain(c, b)) return 0;
    int d;
    if (a->d == b->d) {
        d = emit(c, sign > 0 ? QP_PW_ADD : QP_PW_SUB, a->op, b->op, NULL, NULL);
    } else {
        float p[4] = {(float)sign * (b->d / a->d), 0, 0, 0};
        d = emit(c, PW_ADDS, a->op, b->op, p, NULL);
    }
    if (d < 0) return 0;
    *r = vec(d, a->d, a->e + (float)sign * b->e, a->bound + b->bound);
    return 1;
}

static int binary_op(struct fc *c, const struct pw_instr *in, struct sym *a, struct sym *b,
                     struct sym *r) {
    int op = in->op;
    if (a->kind == S_CONST && b->kind == S_CONST) {
        float x = a->c, y = b->c;
        float v = op == QP_PW_ADD   ? x + y
                  : op == QP_PW_SUB ? x - y
                  : op == QP_PW_MUL ? x * y
                                    : x / y;
        *r = (struct sym){S_CONST, 0, v, 1, 0, -INFINITY, INFINITY, fabs(v)};
        return 1;
    }
    if (op == QP_PW_ADD || op == QP_PW_SUB) {
        float sign = op == QP_PW_SUB ? -1.0f : 1.0f;
        if (b->kind == S_CONST) {
            *r = *a;
            r->e = a->e + sign * b->c;
            r->bound = a->bound + fabs(b->c);
            return 1;
        }
        if (a->kind == S_CONST && op == QP_PW_ADD) return binary_op(c, in, b, a, r);
        if (a->kind == S_CONST) { /* k - x */
            if (!scale_by(c, b, -1.0, r)) return 0;
            r->e += a->c;
            r->bound += fabs(a->c);
            return 1;
        }
        return add_vec(c, a, b, op == QP_PW_SUB ? -1 : 1, r);
    }
    if (op == QP_PW_MUL) {
        if (a->kind == S_CONST) return scale_by(c, b, a->c, r);
        if (b->kind == S_CONST) return scale_by(c, a, b->c, r);
        if (!make_unclamped(c, a) || !make_unclamped(c, b)) return 0;
        int d = emit(c, QP_PW_MUL, a->op, b->op, NULL, NULL);
        if (d < 0) return 0;
        *r = vec(d, a->d * b->d, 0.0f, a->bound * b->bound);
        return 1;
    }
    /* Div: by a nonzero constant only (x / 0 and division by a tensor stay exact) */
    if (b->kind != S_CONST || !(fabs(b->c) >= 1e-30) || !isfinite(b->c)) return 0;
    return scale_by(c, a, 1.0 / b->c, r);
}

/* Ops the symbolic form does not absorb: on plain values, as the exact program computes them. */
static int as_is(struct fc *c, const struct pw_instr *in, struct sym *x, struct sym *r) {
    double b = x->bound;
    switch (in->op) {
    case QP_PW_SQUARE:
        if (!make_unclamped(c, x)) return 0;
        {
            int d = emit(c, in->op, x->op, 0, in->p, in);
            if (d < 0) return 0;
            *r = vec(d, x->d * x->d, 0.0f, b * b);
        }
        return 1;
    case QP_PW_LEAKY:
        b *= fmax(1.0, fabs(in->p[0]));
        break;
    case QP_PW_HSIGMOID:
    case QP_PW_SIGMOID:
    case QP_PW_TANH:
    case QP_PW_ERF:
        b = 1.0;
        break;
    case QP_PW_HSWISH:
        break;
    default: /* RoundFloat16: only on the exact path */
        return 0;
    }
    if (!make_plain(c, x)) return 0;
    int d = emit(c, in->op, x->op, 0, in->p, in);
    if (d < 0) return 0;
    *r = vec(d, 1.0f, 0.0f, b);
    return 1;
}

static int unary_op(struct fc *c, const struct pw_instr *in, struct sym *x, struct sym *r) {
    if (x->kind == S_CONST) return 0; /* constant folding of unary ops: not worth a copy */
    switch (in->op) {
    case QP_PW_COPY:
        *r = *x;
        return 1;
    case QP_PW_FQ:
        return fake_quant(c, in, x, r);
    case QP_PW_CLIP:
        return clip(c, in, x, in->p[0], in->p[1], r);
    case QP_PW_RELU:
        return clip(c, in, x, 0.0f, INFINITY, r);
    default:
        return as_is(c, in, x, r);
    }
}

static struct sym *operand(struct fc *c, int v) {
    return v >= 0 ? &c->reg[v] : &c->in[-v - 1];
}

static void inputs(struct fc *c, const struct qp_kprep *p) {
    for (int i = 0; i < c->s->n_in; i++) {
        const struct pw_input *x = &c->s->in[i];
        const struct qp_kt *t = p->in[i];
        double b =
            x->dt == QP_DTYPE_FLOAT || x->dt == QP_DTYPE_FLOAT16 ? PW_TAME : 256.0 * x->scale;
        c->in[i] = vec(-1 - i, 1.0f, 0.0f, b);
        if (t->is_const && t->numel == 1) {
            float v = pw_read_one(x, t->data, 0);
            if (isfinite(v))
                c->in[i] = (struct sym){S_CONST, 0, v, 1, 0, -INFINITY, INFINITY, fabs(v)};
        }
    }
}

/* Within the limits: a value's bound, its content's (value - e) / d, the scale and offset. */
static int sane(const struct sym *x) {
    if (x->kind == S_CONST) return isfinite(x->c);
    return x->d > 0 && finite_in(x->d, 1e-30, PW_LIMIT) && finite_in(fabs(x->e), 0, PW_LIMIT) &&
           finite_in(x->bound, 0, PW_LIMIT) &&
           finite_in((x->bound + fabs(x->e)) / x->d, 0, PW_LIMIT);
}

static int outputs(struct fc *c) {
    unsigned keep = 0;
    for (int o = 0; o < c->s->n_out; o++) {
        const struct sym *x = &c->reg[c->s->out[o].reg];
        if (x->kind != S_VEC) return 0;
        if (x->op >= 0) keep |= 1u << x->op;
    }
    c->k = c->s->n_instr; /* nothing is live any more but what `keep` holds */
    for (int o = 0; o < c->s->n_out; o++) {
        struct pw_output *y = &c->s->out[o];
        struct sym x = c->reg[y->reg];
        y->affine = y->quant && y->full;
        if (y->affine) {
            y->fm = x.d / y->scale;
            y->fo = x.e / y->scale + y->z;
            if (!finite_in(fabs(y->fm), 1e-30, PW_LIMIT) || !finite_in(fabs(y->fo), 0, PW_LIMIT))
                return 0;
            level_bounds(&x, y->fm, y->fo, y->lo, y->hi, &y->flo, &y->fhi);
        } else {
            c->avoid = keep;
            if (!make_plain(c, &x)) return 0;
            if (x.op >= 0) keep |= 1u << x.op;
        }
        y->fop = x.op;
    }
    return 1;
}

void pw_fast_compile(struct pw_state *s, const struct qp_kprep *p) {
    struct fc c = {.s = s, .out = s->ins + s->n_instr, .cap = PW_FAST_CAP(s->n_instr)};
    s->fast = s->n_fast = 0;
    inputs(&c, p);
    for (c.k = 0; c.k < s->n_instr; c.k++) {
        const struct pw_instr *in = &s->ins[c.k];
        struct sym a = *operand(&c, in->a), b = pw_binary(in->op) ? *operand(&c, in->b) : a, r;
        c.avoid = 0;
        if (a.kind == S_VEC && a.op >= 0) c.avoid |= 1u << a.op;
        if (b.kind == S_VEC && b.op >= 0) c.avoid |= 1u << b.op;
        int ok = pw_binary(in->op) ? binary_op(&c, in, &a, &b, &r) : unary_op(&c, in, &a, &r);
        if (!ok || !sane(&r)) return;
        c.reg[in->dst] = r;
    }
    if (!outputs(&c)) return;
    s->n_fast = c.n;
    s->fast = 1;
}

/* ---- run ------------------------------------------------------------------------------------ */

/* clamp(x, lo, hi) * m, + o when o is not 0 (as PW_AFFINE's header says). */
QP_CLONES
static void affine(const float *x, float *d, int64_t n, float m, float o, float lo, float hi) {
    int add = o != 0.0f;
    for (int64_t j = 0; j < n; j++) {
        float v = x[j] < lo ? lo : x[j];
        v = (v > hi ? hi : v) * m;
        d[j] = add ? v + o : v;
    }
}

void pw_fast_unary(const struct pw_instr *in, const float *x, float *d, int64_t n) {
    const float *p = in->p;
    if (in->op == PW_FQL) {
        if (qp_qsimd_levels(x, d, n, p[0], p[1], p[2], p[3])) return;
        for (int64_t j = 0; j < n; j++)
            d[j] = pw_level_of(x[j], p[0], p[1], p[2], p[3]);
    } else {
        affine(x, d, n, p[0], p[1], p[2], p[3]);
    }
}

QP_CLONES
void pw_fast_adds(const float *a, float as, const float *b, float bs, float p, float *d,
                  int64_t n) {
    if (a && b)
        for (int64_t j = 0; j < n; j++)
            d[j] = a[j] + b[j] * p;
    else if (a)
        for (int64_t j = 0; j < n; j++)
            d[j] = a[j] + bs * p;
    else
        for (int64_t j = 0; j < n; j++)
            d[j] = as + b[j] * p;
}

QP_CLONES
int pw_tame(const float *v, int64_t n) {
    int ok = 1;
    for (int64_t j = 0; j < n; j++)
        ok &= fabsf(v[j]) <= PW_TAME;
    return ok;
}
