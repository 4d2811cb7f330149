/*
 * Pointwise: one pass for a group of elementwise nodes (int8_pw.h describes the op).
 *
 * prepare checks the program (registers defined before use, operands and parameters in range),
 * computes the main shape and each output's shape, and picks the split axis; run walks tiles
 * of one row: it resolves each operand to a vector (a register, a float input read in place, or
 * an input converted into a per-input tile buffer) or a scalar (an input constant over the
 * row), runs the instructions, and stores the outputs.
 */
#include "kernels/int8_pw.h"
#include "kernels/int8_pw_impl.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/clones.h"
#include "core/half.h"
#include "kernels/dnnl_util.h"
#include "kernels/kcheck.h"
#include "kernels/kernels.h"
#include "kernels/vecmath.h"
#include "qmath/qparams.h"
#include "qmath/qsimd.h"

_Static_assert(QP_PW_TILE <= QP_QSIMD_BLOCK, "a tile is one SIMD quantizer block");

int qp_pw_n_params(int op) {
    switch (op) {
    case QP_PW_CLIP:
    case QP_PW_HSIGMOID:
        return 2;
    case QP_PW_LEAKY:
        return 1;
    case QP_PW_FQ:
        return 3;
    default:
        return 0;
    }
}

/* ---- prepare -------------------------------------------------------------------------------- */

/* Broadcasts shape (rank r, dims d) into the main shape; 0 when incompatible. */
static int broadcast_into(int64_t *main, int *mrank, int r, const int64_t *d) {
    if (r > *mrank) {
        int sh = r - *mrank;
        memmove(main + sh, main, (size_t)*mrank * sizeof *main);
        for (int i = 0; i < sh; i++)
            main[i] = 1;
        *mrank = r;
    }
    for (int i = 0; i < r; i++) {
        int64_t *m = &main[*mrank - r + i];
        if (d[i] == *m || d[i] == 1) continue;
        if (*m != 1) return 0;
        *m = d[i];
    }
    return 1;
}

/* Main axis i of a channels-last main shape of rank r holds logical axis nhwc_axis(r, i):
 * (N, C, D1..Dk) is computed as (N, D1..Dk, C). */
static int nhwc_axis(int r, int i) {
    return i == 0 ? 0 : i == r - 1 ? 1 : i + 1;
}

/* Strides of a tensor of rank r, dims d (in main coordinates), viewed in the main shape (0 on
 * broadcast axes). `phys_nchw`: in a channels-last main shape, the tensor is stored in its
 * logical order (channels first), so its strides are those of that order. */
static void view_strides(const struct pw_state *s, int r, const int64_t *d, int phys_nchw,
                         int64_t *stride) {
    int64_t n[QP_MAX_RANK], st[QP_MAX_RANK], acc = 1;
    for (int i = 0; i < s->rank; i++) {
        int j = i - (s->rank - r);
        n[i] = j >= 0 ? d[j] : 1;
    }
    for (int k = s->rank - 1; k >= 0; k--) { /* k: storage order */
        int i = phys_nchw ? (k == 0 ? 0 : k == 1 ? s->rank - 1 : k - 1) : k;
        st[i] = acc;
        acc *= n[i];
    }
    for (int i = 0; i < s->rank; i++)
        stride[i] = n[i] == 1 && s->main[i] != 1 ? 0 : st[i];
}

/* 1 when axes from..rank of a tensor with dims d (aligned) and strides st are the main shape's,
 * stored contiguously in main order. */
static int main_order(const struct pw_state *s, int from, const int64_t *d, const int64_t *st) {
    int64_t acc = 1;
    for (int i = s->rank - 1; i >= from; i--) {
        if (d[i] != s->main[i] || (s->main[i] != 1 && st[i] != acc)) return 0;
        acc *= s->main[i];
    }
    return 1;
}

static int zp_byte(enum qp_dtype dt, float zp, uint8_t *out) {
    if (dt == QP_DTYPE_INT8 && zp >= -128 && zp <= 127) {
        int8_t v = (int8_t)zp;
        memcpy(out, &v, 1);
        return 1;
    }
    if (dt == QP_DTYPE_UINT8 && zp >= 0 && zp <= 255) {
        *out = (uint8_t)zp;
        return 1;
    }
    return 0;
}

/* The zero point (raw byte zp of dtype dt, int8 or uint8) and the type's range, as floats. */
static void q8_floats(enum qp_dtype dt, uint8_t zp, float *z, float *lo, float *hi) {
    int sgn = dt == QP_DTYPE_INT8;
    *z = sgn ? (float)(int8_t)zp : (float)zp;
    *lo = sgn ? -128.0f : 0.0f;
    *hi = sgn ? 127.0f : 255.0f;
}

static enum qp_status read_prog(struct qp_kprep *p, struct pw_state *s, const int64_t *prog,
                                const float *par, int64_t n_par) {
    unsigned char defined[QP_PW_MAX_REGS] = {0};
    for (int k = 0; k < s->n_instr; k++) {
        const int64_t *c = prog + 5 * k;
        struct pw_instr *in = &s->ins[k];
        if (c[0] < 0 || c[0] >= QP_PW_OP_COUNT || c[1] < 0 || c[1] >= s->n_regs)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "instruction %d: bad op or register", k);
        in->op = (int)c[0];
        in->dst = (int)c[1];
        int nop = pw_binary(in->op) ? 2 : 1;
        for (int o = 0; o < nop; o++) {
            int64_t v = c[2 + o];
            int ok = v >= 0 ? v < s->n_regs && defined[v] : -v - 1 < s->n_in;
            if (!ok)
                return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                                    "instruction %d: operand %lld is undefined", k, (long long)v);
        }
        in->a = (int)c[2];
        in->b = nop == 2 ? (int)c[3] : 0;
        int np = qp_pw_n_params(in->op);
        if (np && (c[4] < 0 || c[4] + np > n_par))
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "instruction %d: parameters missing", k);
        for (int i = 0; i < np; i++)
            in->p[i] = par[c[4] + i];
        if (in->op == QP_PW_FQ) {
            in->fq_dt = (enum qp_dtype)(int)in->p[2];
            if (!(in->p[0] > 0) || !zp_byte(in->fq_dt, in->p[1], &in->fq_zp))
                return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                                    "instruction %d: bad fake-quantize parameters", k);
            q8_floats(in->fq_dt, in->fq_zp, &in->fq_z, &in->fq_lo, &in->fq_hi);
        }
        defined[in->dst] = 1;
    }
    for (int o = 0; o < s->n_out; o++)
        if (s->out[o].reg < 0 || s->out[o].reg >= s->n_regs || !defined[s->out[o].reg])
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "output %d: undefined register", o);
    return QP_OK;
}

static enum qp_status read_inputs(struct qp_kprep *p, struct pw_state *s, const float *par,
                                  int64_t n_par) {
    const int64_t *inq;
    if (qp_kattr_ints(p->node, "pw_in_q", &inq) != s->n_in)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "pw_in_q must have one entry per input");
    const int64_t *tame = NULL;
    int64_t n_tame = qp_kattr_ints(p->node, "pw_in_tame", &tame);
    for (int i = 0; i < s->n_in; i++) {
        const struct qp_kt *t = p->in[i];
        if (!t) return qp_error_set(p->err, QP_ERR_BAD_INPUT, "input %d is missing", i);
        struct pw_input *x = &s->in[i];
        x->dt = t->dtype;
        int q8 = t->dtype == QP_DTYPE_INT8 || t->dtype == QP_DTYPE_UINT8;
        if (q8 != (inq[i] >= 0) ||
            (!q8 && t->dtype != QP_DTYPE_FLOAT && t->dtype != QP_DTYPE_FLOAT16))
            return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "input %d: dtype %s", i,
                                qp_dtype_name(t->dtype));
        if (q8 && (inq[i] + 2 > n_par || !(par[inq[i]] > 0) ||
                   !zp_byte(t->dtype, par[inq[i] + 1], &x->zp)))
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "input %d: bad scale or zero point", i);
        if (q8) x->scale = par[inq[i]];
        x->tame = !q8 && i < n_tame && tame[i] == 1;
        if (!broadcast_into(s->main, &s->rank, t->rank, t->dims))
            return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                                "input %d does not broadcast with the others", i);
    }
    return QP_OK;
}

/* The shape of each output: the broadcast of the inputs its register depends on (`lin`: the
 * inputs as the graph has them, p->in their views in main coordinates; `phys` per output as
 * in view_strides). */
static enum qp_status output_shapes(struct qp_kprep *p, struct pw_state *s,
                                    const struct qp_kt *const *lin, const int *phys) {
    uint32_t dep[QP_PW_MAX_REGS] = {0}; /* input bit sets */
    for (int k = 0; k < s->n_instr; k++) {
        const struct pw_instr *in = &s->ins[k];
        uint32_t m = 0;
        for (int o = 0; o < (pw_binary(in->op) ? 2 : 1); o++) {
            int v = o ? in->b : in->a;
            m |= v >= 0 ? dep[v] : 1u << (-v - 1);
        }
        dep[in->dst] = m;
    }
    for (int o = 0; o < s->n_out; o++) {
        int64_t d[QP_MAX_RANK], ld[QP_MAX_RANK];
        int r = 0, lr = 0;
        for (int i = 0; i < s->n_in; i++)
            if (dep[s->out[o].reg] >> i & 1) {
                broadcast_into(d, &r, p->in[i]->rank, p->in[i]->dims);
                broadcast_into(ld, &lr, lin[i]->rank, lin[i]->dims);
            }
        int64_t full[QP_MAX_RANK];
        for (int i = 0; i < s->rank; i++)
            full[i] = i < s->rank - r ? 1 : d[i - (s->rank - r)];
        view_strides(s, s->rank, full, phys[o], s->out[o].stride);
        s->out[o].full = main_order(s, 0, full, s->out[o].stride);
        if (s->nhwc && !phys[o] && lr != s->rank)
            return qp_error_set(p->err, QP_ERR_UNSUPPORTED,
                                "output %d is stored channels last but has rank %d, not %d", o, lr,
                                s->rank);
        enum qp_status st = qp_kt_set(p->out[o], s->out[o].dt, lr, ld, p->err);
        if (st) return st;
    }
    return QP_OK;
}

/* How input x (its view t, strides st) reads at split axis sp: 1 when it fits a fast kind (set
 * in *kind). */
static int classify(const struct pw_state *s, const struct qp_kt *t, const int64_t *st, int sp,
                    enum in_kind *kind) {
    int off = s->rank - t->rank, row = 1, col = 1;
    int64_t n[QP_MAX_RANK];
    for (int i = 0; i < s->rank; i++) {
        n[i] = i < off ? 1 : t->dims[i - off];
        if (i >= sp) row &= n[i] == 1;
        if (i < sp) col &= n[i] == 1;
    }
    int full = main_order(s, 0, n, st);
    col &= main_order(s, sp, n, st);
    *kind = t->numel == 1 ? IN_SCALAR : full ? IN_FULL : row ? IN_ROW : col ? IN_COL : IN_GEN;
    return *kind != IN_GEN;
}

/* Rows shorter than this are gathered instead when an input's layout differs (choose_split). */
#define PW_MIN_INNER 64

/* `phys` (per input): stored channels first in a channels-last main shape (view_strides). */
static void choose_split(const struct qp_kprep *p, struct pw_state *s, const int *phys) {
    int all_full = 1;
    for (int o = 0; o < s->n_out; o++)
        all_full &= s->out[o].full;
    for (int i = 0; i < s->n_in; i++)
        view_strides(s, p->in[i]->rank, p->in[i]->dims, phys[i], s->in[i].stride);
    s->general = 1;
    for (int sp = 0; all_full && sp <= s->rank && s->general; sp++) {
        int ok = 1;
        for (int i = 0; ok && i < s->n_in; i++)
            ok = classify(s, p->in[i], s->in[i].stride, sp, &s->in[i].kind);
        if (ok) {
            s->general = 0;
            s->split = sp;
        }
    }
    s->rows = 1;
    s->inner = 1;
    for (int i = 0; i < s->rank; i++)
        *(i < s->split || s->general ? &s->rows : &s->inner) *= s->main[i];
    int mixed = 0; /* an input stored channels first in a channels-last shape, with pixels */
    for (int i = 0; i < s->n_in; i++) {
        int64_t pixels = 1; /* in main coordinates (N, D1..Dk, C); a [N, C, 1, 1] gate is the
                               same in both layouts */
        for (int k = 1; k < p->in[i]->rank - 1; k++)
            pixels *= p->in[i]->dims[k];
        mixed |= phys[i] && pixels > 1;
    }
    if (mixed && !s->general && s->rows > 1 && s->inner < PW_MIN_INNER) {
        /* such an input splits the shape into rows of C: with few channels a tile per row pays
         * the per-tile work (coordinates, calls) for a handful of elements, 5-40 times what
         * gathering whole tiles costs */
        s->general = 1;
        s->rows *= s->inner;
        s->inner = 1;
    }
    if (s->general) { /* one row of everything, every input gathered */
        s->inner = s->rows;
        s->rows = 1;
        for (int i = 0; i < s->n_in; i++)
            s->in[i].kind = p->in[i]->numel == 1 ? IN_SCALAR : IN_GEN;
    }
}

static enum qp_status read_outputs(struct qp_kprep *p, struct pw_state *s, const float *par,
                                   int64_t n_par) {
    const int64_t *oreg, *oq, *odt;
    if (qp_kattr_ints(p->node, "pw_out", &oreg) != s->n_out ||
        qp_kattr_ints(p->node, "pw_out_q", &oq) != s->n_out ||
        qp_kattr_ints(p->node, "pw_out_dt", &odt) != s->n_out)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                            "pw_out, pw_out_q and pw_out_dt need one entry per output");
    for (int o = 0; o < s->n_out; o++) {
        struct pw_output *y = &s->out[o];
        y->reg = (int)oreg[o];
        y->dt = (enum qp_dtype)odt[o];
        y->quant = oq[o] >= 0;
        int q8 = y->dt == QP_DTYPE_INT8 || y->dt == QP_DTYPE_UINT8;
        int fl = y->dt == QP_DTYPE_FLOAT || y->dt == QP_DTYPE_FLOAT16;
        if (y->quant ? !q8 || oq[o] + 2 > n_par || !(par[oq[o]] > 0) ||
                           !zp_byte(y->dt, par[oq[o] + 1], &y->zp)
                     : !fl)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "output %d: bad dtype or parameters", o);
        if (y->quant) {
            y->scale = par[oq[o]];
            q8_floats(y->dt, y->zp, &y->z, &y->lo, &y->hi);
        }
    }
    return QP_OK;
}

/* A channels-last node (attribute nhwc): each input viewed in main coordinates (N, D1..Dk, C);
 * in_phys / out_phys mark the tensors stored channels first (pw_in_nhwc / pw_out_nhwc 0). */
static enum qp_status nhwc_views(const struct qp_kprep *p, struct qp_kt *view,
                                 const struct qp_kt **vin, int *in_phys, int *out_phys) {
    const int64_t *fi, *fo;
    if (qp_kattr_ints(p->node, "pw_in_nhwc", &fi) != p->n_in ||
        qp_kattr_ints(p->node, "pw_out_nhwc", &fo) != p->n_out)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                            "nhwc needs pw_in_nhwc and pw_out_nhwc, one entry per input / output");
    int r = 0;
    for (int i = 0; i < p->n_in; i++)
        if (p->in[i] && p->in[i]->rank > r) r = p->in[i]->rank;
    if (r < 3)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "nhwc needs rank 3 or more, not %d", r);
    for (int i = 0; i < p->n_in; i++) {
        const struct qp_kt *t = p->in[i];
        if (!t) return qp_error_set(p->err, QP_ERR_BAD_INPUT, "input %d is missing", i);
        if (fi[i] && t->rank != r)
            return qp_error_set(p->err, QP_ERR_UNSUPPORTED,
                                "input %d is stored channels last but has rank %d, not %d", i,
                                t->rank, r);
        int64_t a[QP_MAX_RANK];
        for (int k = 0; k < r; k++)
            a[k] = k < r - t->rank ? 1 : t->dims[k - (r - t->rank)];
        view[i] = *t;
        view[i].rank = r;
        for (int k = 0; k < r; k++)
            view[i].dims[k] = a[nhwc_axis(r, k)];
        vin[i] = &view[i];
        in_phys[i] = !fi[i];
    }
    for (int o = 0; o < p->n_out; o++)
        out_phys[o] = !fo[o];
    return QP_OK;
}

/* QP_PW_FAST=0 keeps the exact program on the integer path too (for comparing the two). */
static int fast_allowed(void) {
    const char *e = getenv("QP_PW_FAST");
    return !e || strcmp(e, "0") != 0;
}

enum qp_status qp_k_pointwise_prepare(struct qp_kprep *p) {
    const int64_t *prog;
    const float *par;
    int64_t np = qp_kattr_ints(p->node, "pw_prog", &prog);
    int64_t n_par = qp_kattr_floats(p->node, "pw_params", &par);
    int64_t regs = qp_kattr_int(p->node, "pw_regs", 0);
    if (np <= 0 || np % 5 || regs <= 0 || regs > QP_PW_MAX_REGS || p->n_in < 1 ||
        p->n_in > QP_PW_MAX_IN || p->n_out < 1 || p->n_out > QP_PW_MAX_OUT)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                            "needs pw_prog (5 ints per instruction), 1..%d registers, 1..%d "
                            "inputs and 1..%d outputs",
                            QP_PW_MAX_REGS, QP_PW_MAX_IN, QP_PW_MAX_OUT);
    if (n_par < 0) n_par = 0;
    size_t bytes =
        sizeof(struct pw_state) + (size_t)(np / 5 + PW_FAST_CAP(np / 5)) * sizeof(struct pw_instr);
    struct pw_state *s = calloc(1, bytes);
    if (!s) return qp_error_set(p->err, QP_ERR_NOMEM, "out of memory");
    s->n_in = p->n_in;
    s->n_out = p->n_out;
    s->n_instr = (int)(np / 5);
    s->n_regs = (int)regs;
    s->nhwc = qp_kattr_int(p->node, "nhwc", 0) != 0;
    const struct qp_kt *lin[QP_PW_MAX_IN], *vin[QP_PW_MAX_IN];
    struct qp_kt view[QP_PW_MAX_IN];
    int in_phys[QP_PW_MAX_IN] = {0}, out_phys[QP_PW_MAX_OUT] = {0};
    struct qp_kprep q = *p; /* q.in: the inputs in main coordinates */
    enum qp_status st = QP_OK;
    for (int i = 0; i < p->n_in; i++)
        lin[i] = vin[i] = p->in[i];
    if (s->nhwc) st = nhwc_views(p, view, vin, in_phys, out_phys);
    q.in = vin;
    if (!st) st = read_inputs(&q, s, par, n_par);
    if (!st) st = read_outputs(p, s, par, n_par);
    if (!st) st = read_prog(p, s, prog, par, n_par);
    if (!st) st = output_shapes(&q, s, lin, out_phys);
    if (st) {
        free(s);
        return st;
    }
    choose_split(&q, s, in_phys);
    if (qp_kattr_int(p->node, "pw_fast", 0) && fast_allowed()) pw_fast_compile(s, p);
    s->coords = s->general;
    for (int i = 0; i < s->n_in; i++)
        s->coords |= s->in[i].kind == IN_ROW || s->in[i].kind == IN_GEN;
    for (int o = 0; o < s->n_out; o++)
        s->coords |= !s->out[o].full;
    int mt = qp_dnnl_default_threads();
    s->max_threads = mt < 1 ? 1 : mt > 64 ? 64 : mt;
    p->scratch = (size_t)s->max_threads * sizeof(struct tile_bufs);
    p->state = s;
    qp_log(QP_LOG_DEBUG,
           "Pointwise '%s': %d instructions (fast program: %d), %d inputs, %d outputs, %d "
           "registers, %s %lld x %lld%s",
           p->node->name ? p->node->name : "", s->n_instr, s->fast ? s->n_fast : -1, s->n_in,
           s->n_out, s->n_regs, s->general ? "gathered" : "rows x inner", (long long)s->rows,
           (long long)s->inner, s->nhwc ? ", channels last" : "");
    return QP_OK;
}

/* ---- run ------------------------------------------------------------------------------------ */

struct operand {
    const float *v; /* NULL: scalar */
    float s;
};

struct tile {
    int64_t row, j0, len;
    int64_t coord[QP_MAX_RANK]; /* main coordinates of the tile's first element */
};

static void tile_coords(const struct pw_state *s, struct tile *t) {
    int64_t e = t->row * s->inner + t->j0;
    for (int i = s->rank - 1; i >= 0; i--) {
        t->coord[i] = s->main[i] ? e % s->main[i] : 0;
        e = s->main[i] ? e / s->main[i] : 0;
    }
}

/* Index of element j of the tile in a tensor of strides `st` (walks the coordinates). */
static void gather_index(const struct pw_state *s, const struct tile *t, const int64_t *st,
                         int64_t *idx) {
    int64_t c[QP_MAX_RANK], at = 0;
    memcpy(c, t->coord, sizeof c);
    for (int i = 0; i < s->rank; i++)
        at += c[i] * st[i];
    for (int64_t j = 0; j < t->len; j++) {
        idx[j] = at;
        for (int i = s->rank - 1; i >= 0; i--) { /* next coordinate */
            at += st[i];
            if (++c[i] < s->main[i]) break;
            at -= st[i] * c[i];
            c[i] = 0;
        }
    }
}

float pw_read_one(const struct pw_input *x, const void *d, int64_t i) {
    switch (x->dt) {
    case QP_DTYPE_FLOAT:
        return ((const float *)d)[i];
    case QP_DTYPE_FLOAT16:
        return qp_fp16_to_f32(((const uint16_t *)d)[i]);
    case QP_DTYPE_INT8:
        return ((float)((const int8_t *)d)[i] - (float)(int8_t)x->zp) * x->scale;
    default:
        return ((float)((const uint8_t *)d)[i] - (float)x->zp) * x->scale;
    }
}

/* n contiguous elements from d + at into buf as float. */
static void read_run(const struct pw_input *x, const void *d, int64_t at, int64_t n, float *buf) {
    if (x->dt == QP_DTYPE_FLOAT16) {
        qp_fp16_to_f32_n((const uint16_t *)d + at, buf, (size_t)n);
        return;
    }
    struct qp_qspec q = {.qtype = x->dt,
                         .outer = 1,
                         .axis_len = 1,
                         .inner = n,
                         .n_params = 1,
                         .scale = &x->scale,
                         .zero_point = &x->zp};
    qp_dequantize_f32(&q, (const uint8_t *)d + at, buf, 0, n);
}

static struct operand load(const struct pw_state *s, const struct qp_krun *r, int i,
                           const struct tile *t, float *buf) {
    const struct pw_input *x = &s->in[i];
    const void *d = r->in[i]->data;
    struct operand o = {NULL, 0.0f};
    int64_t at = 0;
    switch (x->kind) {
    case IN_SCALAR:
        o.s = pw_read_one(x, d, 0);
        return o;
    case IN_ROW:
        for (int k = 0; k < s->split; k++)
            at += t->coord[k] * x->stride[k];
        o.s = pw_read_one(x, d, at);
        return o;
    case IN_FULL:
        at = t->row * s->inner + t->j0;
        break;
    case IN_COL:
        at = t->j0;
        break;
    case IN_GEN: {
        int64_t idx[QP_PW_TILE];
        gather_index(s, t, x->stride, idx);
        for (int64_t j = 0; j < t->len; j++)
            buf[j] = pw_read_one(x, d, idx[j]);
        o.v = buf;
        return o;
    }
    }
    if (x->dt == QP_DTYPE_FLOAT) {
        o.v = (const float *)d + at;
    } else {
        read_run(x, d, at, t->len, buf);
        o.v = buf;
    }
    return o;
}

static inline float bin1(const struct pw_instr *in, float a, float b) {
    switch (in->op) {
    case QP_PW_ADD:
        return a + b;
    case QP_PW_SUB:
        return a - b;
    case QP_PW_MUL:
        return a * b;
    case PW_ADDS:
        return a + b * in->p[0];
    default:
        return a / b;
    }
}

#define BIN_LOOP(EXPR)                                                                             \
    do {                                                                                           \
        if (a.v && b.v)                                                                            \
            for (int64_t j = 0; j < n; j++) {                                                      \
                float x = a.v[j], y = b.v[j];                                                      \
                d[j] = EXPR;                                                                       \
            }                                                                                      \
        else if (a.v)                                                                              \
            for (int64_t j = 0; j < n; j++) {                                                      \
                float x = a.v[j], y = b.s;                                                         \
                d[j] = EXPR;                                                                       \
            }                                                                                      \
        else                                                                                       \
            for (int64_t j = 0; j < n; j++) {                                                      \
                float x = a.s, y = b.v[j];                                                         \
                d[j] = EXPR;                                                                       \
            }                                                                                      \
    } while (0)

QP_CLONES
static void run_binary(const struct pw_instr *in, struct operand a, struct operand b, float *d,
                       int64_t n) {
    switch (in->op) {
    case QP_PW_ADD:
        BIN_LOOP(x + y);
        break;
    case QP_PW_SUB:
        BIN_LOOP(x - y);
        break;
    case QP_PW_MUL:
        BIN_LOOP(x * y);
        break;
    case PW_ADDS:
        pw_fast_adds(a.v, a.s, b.v, b.s, in->p[0], d, n);
        break;
    default:
        BIN_LOOP(x / y);
        break;
    }
}

static void vf(enum qp_vfn f, const float *x, float *d, int64_t n) {
    if (qp_vf_apply(f, x, d, n)) return;
    for (int64_t j = 0; j < n; j++)
        d[j] = f == QP_VF_TANH  ? tanhf(x[j])
               : f == QP_VF_ERF ? erff(x[j])
                                : 1.0f / (1.0f + expf(-x[j]));
}

/* d = op(x) for a unary instruction (x may be d). Ternaries, not fminf/fmaxf, so that
 * the loops vectorize (a NaN stays NaN). */
QP_CLONES
static void run_unary(const struct pw_instr *in, const float *x, float *d, int64_t n) {
    const float lo = in->p[0], hi = in->p[1];
    switch (in->op) {
    case QP_PW_CLIP:
        for (int64_t j = 0; j < n; j++) {
            float v = x[j] < lo ? lo : x[j];
            d[j] = v > hi ? hi : v;
        }
        break;
    case QP_PW_RELU:
        for (int64_t j = 0; j < n; j++)
            d[j] = x[j] < 0.0f ? 0.0f : x[j];
        break;
    case QP_PW_LEAKY:
        for (int64_t j = 0; j < n; j++)
            d[j] = x[j] >= 0.0f ? x[j] : x[j] * lo;
        break;
    case QP_PW_HSIGMOID:
        for (int64_t j = 0; j < n; j++) {
            float t = lo * x[j] + hi;
            t = t < 0.0f ? 0.0f : t;
            d[j] = t > 1.0f ? 1.0f : t;
        }
        break;
    case QP_PW_HSWISH:
        for (int64_t j = 0; j < n; j++) {
            float t = x[j] / 6.0f + 0.5f;
            t = t < 0.0f ? 0.0f : t;
            d[j] = x[j] * (t > 1.0f ? 1.0f : t);
        }
        break;
    case QP_PW_SQUARE:
        for (int64_t j = 0; j < n; j++)
            d[j] = x[j] * x[j];
        break;
    case QP_PW_SIGMOID:
        vf(QP_VF_SIGMOID, x, d, n);
        break;
    case QP_PW_TANH:
        vf(QP_VF_TANH, x, d, n);
        break;
    case QP_PW_ERF:
        vf(QP_VF_ERF, x, d, n);
        break;
    case QP_PW_FQ: {
        /* n <= QP_PW_TILE == QP_QSIMD_BLOCK: one SIMD block where the CPU has one */
        if (qp_qsimd_fake_quantize(x, d, n, in->p[0], in->fq_z, in->fq_lo, in->fq_hi)) break;
        struct qp_qspec q = {.qtype = in->fq_dt,
                             .outer = 1,
                             .axis_len = 1,
                             .inner = n,
                             .n_params = 1,
                             .scale = &in->p[0],
                             .zero_point = &in->fq_zp};
        qp_fake_quantize_f32(&q, x, d, 0, n);
        break;
    }
    case QP_PW_ROUND16:
        qp_round_fp16_n(x, d, (size_t)n);
        break;
    case PW_FQL:
    case PW_AFFINE:
        pw_fast_unary(in, x, d, n);
        break;
    default: /* COPY */
        if (x != d) memcpy(d, x, (size_t)n * sizeof *d);
        break;
    }
}

static void store_canonical(const struct pw_state *s, const struct pw_output *y, void *out,
                            const struct tile *t, const float *v) {
    int64_t idx[QP_PW_TILE], c[QP_MAX_RANK];
    memcpy(c, t->coord, sizeof c);
    gather_index(s, t, y->stride, idx);
    struct qp_qspec q = {.qtype = y->dt,
                         .outer = 1,
                         .axis_len = 1,
                         .inner = 1,
                         .n_params = 1,
                         .scale = &y->scale,
                         .zero_point = &y->zp};
    for (int64_t j = 0; j < t->len; j++) {
        int canon = 1;
        for (int i = 0; i < s->rank; i++)
            canon &= y->stride[i] != 0 || c[i] == 0;
        if (canon && y->quant)
            qp_quantize_f32(&q, v + j, (uint8_t *)out + idx[j], 0, 1);
        else if (canon && y->dt == QP_DTYPE_FLOAT16)
            ((uint16_t *)out)[idx[j]] = qp_f32_to_fp16(v[j]);
        else if (canon)
            ((float *)out)[idx[j]] = v[j];
        for (int i = s->rank - 1; i >= 0; i--) {
            if (++c[i] < s->main[i]) break;
            c[i] = 0;
        }
    }
}

static void store(const struct pw_state *s, const struct pw_output *y, void *out,
                  const struct tile *t, struct operand v, float *tmp) {
    if (!v.v) { /* a scalar register: spread it */
        for (int64_t j = 0; j < t->len; j++)
            tmp[j] = v.s;
        v.v = tmp;
    }
    if (!y->full) {
        store_canonical(s, y, out, t, v.v);
        return;
    }
    int64_t at = t->row * s->inner + t->j0;
    if (y->quant && qp_qsimd_quantize_q8(v.v, (uint8_t *)out + at, y->dt == QP_DTYPE_INT8, t->len,
                                         y->scale, y->z, y->lo, y->hi)) {
        return;
    } else if (y->quant) {
        struct qp_qspec q = {.qtype = y->dt,
                             .outer = 1,
                             .axis_len = 1,
                             .inner = t->len,
                             .n_params = 1,
                             .scale = &y->scale,
                             .zero_point = &y->zp};
        qp_quantize_f32(&q, v.v, (uint8_t *)out + at, 0, t->len);
    } else if (y->dt == QP_DTYPE_FLOAT16) {
        qp_f32_to_fp16_n(v.v, (uint16_t *)out + at, (size_t)t->len);
    } else if ((const float *)out + at != v.v) {
        memcpy((float *)out + at, v.v, (size_t)t->len * sizeof(float));
    }
}

/* Runs instructions ins[0 .. n_ins) on the tile: reg[] receives the registers' operands. */
static void exec(const struct pw_instr *ins, int n_ins, const struct operand *in,
                 struct operand *reg, struct tile_bufs *b, int64_t n) {
    for (int k = 0; k < n_ins; k++) {
        const struct pw_instr *i = &ins[k];
        struct operand a = i->a >= 0 ? reg[i->a] : in[-i->a - 1];
        struct operand c = pw_binary(i->op) ? (i->b >= 0 ? reg[i->b] : in[-i->b - 1]) : a;
        float *d = b->reg[i->dst];
        if (!a.v && !c.v) { /* both scalar: stays scalar */
            struct operand o = {NULL, pw_binary(i->op) ? bin1(i, a.s, c.s) : a.s};
            if (!pw_binary(i->op)) {
                float one = o.s;
                run_unary(i, &one, &one, 1);
                o.s = one;
            }
            reg[i->dst] = o;
            continue;
        }
        if (pw_binary(i->op)) {
            run_binary(i, a, c, d, n);
        } else {
            run_unary(i, a.v, d, n);
        }
        reg[i->dst] = (struct operand){d, 0.0f};
    }
}

/* Whether the tile's float inputs let the fast program run (int8_pw_impl.h). */
static int tile_tame(const struct pw_state *s, const struct operand *in, int64_t n) {
    for (int i = 0; i < s->n_in; i++) {
        if ((s->in[i].dt != QP_DTYPE_FLOAT && s->in[i].dt != QP_DTYPE_FLOAT16) || s->in[i].tame)
            continue;
        if (in[i].v ? !pw_tame(in[i].v, n) : !(fabsf(in[i].s) <= PW_TAME)) return 0;
    }
    return 1;
}

/* A full quantized output of the fast program: levels clamp(rint(x * fm + fo), flo, fhi). */
static void store_affine(const struct pw_state *s, const struct pw_output *y, void *out,
                         const struct tile *t, struct operand v, float *tmp) {
    if (!v.v) {
        for (int64_t j = 0; j < t->len; j++)
            tmp[j] = v.s;
        v.v = tmp;
    }
    uint8_t *o = (uint8_t *)out + t->row * s->inner + t->j0;
    int sgn = y->dt == QP_DTYPE_INT8;
    if (qp_qsimd_quantize_affine_q8(v.v, o, sgn, t->len, y->fm, y->fo, y->flo, y->fhi)) return;
    for (int64_t j = 0; j < t->len; j++) {
        float l = pw_level_of(v.v[j], y->fm, y->fo, y->flo, y->fhi);
        if (sgn) {
            int8_t q = (int8_t)l;
            memcpy(o + j, &q, 1);
        } else {
            o[j] = (uint8_t)l;
        }
    }
}

static void run_tile(const struct pw_state *s, const struct qp_krun *r, struct tile *t,
                     struct tile_bufs *b) {
    if (s->coords) tile_coords(s, t); /* divisions by every dim: only where they are read */
    struct operand in[QP_PW_MAX_IN], reg[QP_PW_MAX_REGS];
    for (int i = 0; i < s->n_in; i++)
        in[i] = load(s, r, i, t, b->in[i]);
    int64_t n = t->len;
    if (s->fast && tile_tame(s, in, n)) {
        exec(s->ins + s->n_instr, s->n_fast, in, reg, b, n);
        for (int o = 0; o < s->n_out; o++) {
            const struct pw_output *y = &s->out[o];
            struct operand v = y->fop >= 0 ? reg[y->fop] : in[-y->fop - 1];
            if (y->affine)
                store_affine(s, y, r->out[o]->data, t, v, b->tmp);
            else
                store(s, y, r->out[o]->data, t, v, b->tmp);
        }
        return;
    }
    exec(s->ins, s->n_instr, in, reg, b, n);
    for (int o = 0; o < s->n_out; o++)
        store(s, &s->out[o], r->out[o]->data, t, reg[s->out[o].reg], b->tmp);
}

enum qp_status qp_k_pointwise_run(const struct qp_krun *r) {
    const struct pw_state *s = r->state;
    int64_t per = (s->inner + QP_PW_TILE - 1) / QP_PW_TILE, tasks = s->rows * per;
    int64_t numel = s->rows * s->inner;
    int nt = numel < 32768 || s->general ? 1 : r->n_threads;
    if (nt > s->max_threads) nt = s->max_threads;
    if (numel == 0) return QP_OK;
    struct tile_bufs *bufs = r->scratch;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int me = omp_get_thread_num();
        int64_t lo, hi;
        qp_ksplit(tasks, omp_get_num_threads(), me, &lo, &hi);
        for (int64_t k = lo; k < hi; k++) {
            int64_t j0 = k % per * QP_PW_TILE;
            struct tile t = {
                k / per, j0, s->inner - j0 < QP_PW_TILE ? s->inner - j0 : QP_PW_TILE, {0}};
            run_tile(s, r, &t, &bufs[me]);
        }
    }
    return QP_OK;
}
