/*
 * MatMul (numpy semantics: batch broadcasting, 1-D operands promoted and squeezed), Gemm and
 * Einsum (with ellipsis; float32 and double). Reference kernels: each output element is one dot
 * product accumulated in k order, so results do not depend on the thread split.
 */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/dnnl_matmul.h"
#include "kernels/kcheck.h"
#include "kernels/kernels.h"

/* C[m x n] (+)= A[m x k] * B[k x n] with strides; rows [r0, r1). Accumulates over k in order for
 * each output element (i-k-j loops keep that order per element). */
static void gemm_rows(int64_t r0, int64_t r1, int64_t n, int64_t k, const float *a, int64_t lda,
                      int64_t sak, const float *b, int64_t ldb, int64_t sbn, float *c,
                      int64_t ldc) {
    for (int64_t i = r0; i < r1; i++) {
        float *ci = c + i * ldc;
        for (int64_t j = 0; j < n; j++)
            ci[j] = 0.0f;
        for (int64_t p = 0; p < k; p++) {
            float av = a[i * lda + p * sak];
            const float *bp = b + p * ldb;
            if (sbn == 1)
                for (int64_t j = 0; j < n; j++)
                    ci[j] += av * bp[j];
            else
                for (int64_t j = 0; j < n; j++)
                    ci[j] += av * bp[j * sbn];
        }
    }
}

enum qp_status qp_k_matmul_prepare(struct qp_kprep *p) {
    enum qp_status st = qp_kneed(p, 0);
    if (!st) st = qp_kneed(p, 1);
    if (st) return st;
    const struct qp_kt *a = p->in[0], *b = p->in[1];
    if (a->dtype != QP_DTYPE_FLOAT || b->dtype != QP_DTYPE_FLOAT)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "dtypes %s x %s (float only)",
                            qp_dtype_name(a->dtype), qp_dtype_name(b->dtype));
    if (a->rank < 1 || b->rank < 1) return qp_error_set(p->err, QP_ERR_BAD_INPUT, "scalar operand");
    int64_t ad[QP_MAX_RANK + 1], bd[QP_MAX_RANK + 1];
    int ar = a->rank, br = b->rank;
    memcpy(ad, a->dims, sizeof(int64_t) * (size_t)ar);
    memcpy(bd, b->dims, sizeof(int64_t) * (size_t)br);
    int a_vec = ar == 1, b_vec = br == 1;
    if (a_vec) {
        ad[1] = ad[0];
        ad[0] = 1;
        ar = 2;
    }
    if (b_vec) {
        bd[1] = 1;
        br = 2;
    }
    struct qp_mm_state s;
    memset(&s, 0, sizeof s);
    s.m = ad[ar - 2];
    s.k = ad[ar - 1];
    s.n = bd[br - 1];
    if (bd[br - 2] != s.k)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "inner dimensions differ: %lld vs %lld",
                            (long long)s.k, (long long)bd[br - 2]);
    int r;
    st = qp_kbroadcast(ar - 2, ad, br - 2, bd, &r, s.bdims, p->err);
    if (st) return st;
    s.brank = r;
    s.batch = 1;
    int64_t sa = 1, sb = 1;
    for (int i = r - 1; i >= 0; i--) {
        int ia = i - (r - (ar - 2)), ib = i - (r - (br - 2));
        int64_t da = ia >= 0 ? ad[ia] : 1, db = ib >= 0 ? bd[ib] : 1;
        s.astr[i] = da == 1 ? 0 : sa;
        s.bstr[i] = db == 1 ? 0 : sb;
        sa *= da;
        sb *= db;
        s.batch *= s.bdims[i];
    }
    int64_t od[QP_MAX_RANK + 2];
    memcpy(od, s.bdims, sizeof(int64_t) * (size_t)r);
    int orank = r;
    if (!a_vec) od[orank++] = s.m;
    if (!b_vec) od[orank++] = s.n;
    st = qp_kt_set(p->out[0], QP_DTYPE_FLOAT, orank, od, p->err);
    if (st) return st;
    return qp_ksave_state(p, &s, sizeof s);
}

enum qp_status qp_k_matmul_run(const struct qp_krun *r) {
    const struct qp_mm_state *s = r->state;
    const float *a = r->in[0]->data, *b = r->in[1]->data;
    float *c = r->out[0]->data;
    int64_t rows = s->batch * s->m;
    int nt = rows * s->n * s->k < 65536 ? 1 : r->n_threads;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t row = 0; row < rows; row++) {
        int64_t bi = row / s->m, i = row % s->m;
        int64_t rem = bi, ao = 0, bo = 0;
        for (int d = s->brank - 1; d >= 0; d--) {
            int64_t x = rem % s->bdims[d];
            rem /= s->bdims[d];
            ao += x * s->astr[d];
            bo += x * s->bstr[d];
        }
        gemm_rows(i, i + 1, s->n, s->k, a + ao * s->m * s->k, s->k, 1, b + bo * s->k * s->n, s->n,
                  1, c + bi * s->m * s->n, s->n);
    }
    return QP_OK;
}

/* ---- Gemm ------------------------------------------------------------------------------------ */

enum qp_status qp_k_gemm_prepare(struct qp_kprep *p) {
    enum qp_status st = qp_kneed(p, 0);
    if (!st) st = qp_kneed(p, 1);
    if (st) return st;
    const struct qp_kt *a = p->in[0], *b = p->in[1];
    if (a->dtype != QP_DTYPE_FLOAT || b->dtype != QP_DTYPE_FLOAT)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "dtype %s (float only)",
                            qp_dtype_name(a->dtype));
    if (a->rank != 2 || b->rank != 2)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "A and B must be 2-D (ranks %d, %d)", a->rank,
                            b->rank);
    struct qp_gemm_state s;
    memset(&s, 0, sizeof s);
    s.ta = (int)qp_kattr_int(p->node, "transA", 0);
    s.tb = (int)qp_kattr_int(p->node, "transB", 0);
    s.alpha = qp_kattr_float(p->node, "alpha", 1.0f);
    s.beta = qp_kattr_float(p->node, "beta", 1.0f);
    s.m = s.ta ? a->dims[1] : a->dims[0];
    s.k = s.ta ? a->dims[0] : a->dims[1];
    int64_t kb = s.tb ? b->dims[1] : b->dims[0];
    s.n = s.tb ? b->dims[0] : b->dims[1];
    if (kb != s.k)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "inner dimensions differ: %lld vs %lld",
                            (long long)s.k, (long long)kb);
    if (p->n_in > 2 && p->in[2]) {
        const struct qp_kt *c = p->in[2];
        if (c->dtype != QP_DTYPE_FLOAT || c->rank > 2)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "C must be float of rank <= 2");
        int64_t cm = c->rank == 2 ? c->dims[0] : 1;
        int64_t cn = c->rank >= 1 ? c->dims[c->rank - 1] : 1;
        if ((cm != 1 && cm != s.m) || (cn != 1 && cn != s.n))
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "C cannot broadcast to %lldx%lld",
                                (long long)s.m, (long long)s.n);
        s.has_c = 1;
        s.c_sn = cn == 1 ? 0 : 1;
        s.c_sm = cm == 1 ? 0 : cn;
    }
    int64_t od[2] = {s.m, s.n};
    st = qp_kt_set(p->out[0], QP_DTYPE_FLOAT, 2, od, p->err);
    if (st) return st;
    return qp_ksave_state(p, &s, sizeof s);
}

enum qp_status qp_k_gemm_run(const struct qp_krun *r) {
    const struct qp_gemm_state *s = r->state;
    const float *a = r->in[0]->data, *b = r->in[1]->data;
    const float *c = s->has_c ? r->in[2]->data : NULL;
    float *y = r->out[0]->data;
    int64_t lda = s->ta ? 1 : s->k, sak = s->ta ? s->m : 1;
    int64_t ldb = s->tb ? 1 : s->n, sbn = s->tb ? s->k : 1;
    int nt = s->m * s->n * s->k < 65536 ? 1 : r->n_threads;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t i = 0; i < s->m; i++) {
        gemm_rows(i, i + 1, s->n, s->k, a, lda, sak, b, ldb, sbn, y, s->n);
        float *yi = y + i * s->n;
        for (int64_t j = 0; j < s->n; j++) {
            float v = s->alpha * yi[j];
            if (c) v += s->beta * c[i * s->c_sm + j * s->c_sn];
            yi[j] = v;
        }
    }
    return QP_OK;
}

/* ---- Einsum ---------------------------------------------------------------------------------
 * Every label (a letter, or one dimension covered by "...") gets a slot with a size and, per
 * operand, an element stride (0 where that operand broadcasts a size-1 ellipsis dimension; the
 * sum of the strides where a letter repeats in one operand, which walks the diagonal). Output
 * slots are iterated, the others summed, in double, in one fixed order per output element. */

#define EIN_MAX_OPS    8
#define EIN_MAX_LABELS (EIN_MAX_OPS * QP_MAX_RANK)

struct ein_state {
    int n_ops;
    int is_double;
    int n_labels;
    int64_t ldim[EIN_MAX_LABELS];
    int n_out;
    int out_l[QP_MAX_RANK];
    int n_sum;
    int sum_l[EIN_MAX_LABELS];
    int64_t stride[EIN_MAX_OPS][EIN_MAX_LABELS];
};

/* One operand's term: letters in order, and where "..." stands (-1: absent). */
struct ein_term {
    char l[QP_MAX_RANK + 1];
    int n, ell_at;
};

/* Parses the term in [b, e) (spaces ignored). */
static enum qp_status ein_term_parse(const char *b, const char *e, struct ein_term *t,
                                     const char *eq, struct qp_error *err) {
    memset(t, 0, sizeof *t);
    t->ell_at = -1;
    for (const char *c = b; c < e; c++) {
        if (*c == ' ') continue;
        if (*c == '.') {
            if (e - c < 3 || c[1] != '.' || c[2] != '.' || t->ell_at >= 0)
                return qp_error_set(err, QP_ERR_BAD_INPUT, "equation '%s': bad ellipsis", eq);
            t->ell_at = t->n;
            c += 2;
            continue;
        }
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z')))
            return qp_error_set(err, QP_ERR_BAD_INPUT, "equation '%s': bad character '%c'", eq, *c);
        if (t->n >= QP_MAX_RANK)
            return qp_error_set(err, QP_ERR_BAD_INPUT, "equation '%s': term longer than %d", eq,
                                QP_MAX_RANK);
        t->l[t->n++] = *c;
    }
    return QP_OK;
}

/* Einsum's operands: 1..EIN_MAX_OPS of them, all float or all double. */
static enum qp_status ein_check_inputs(struct qp_kprep *p) {
    if (p->n_in < 1 || p->n_in > EIN_MAX_OPS)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "%d operands (at most %d)", p->n_in,
                            EIN_MAX_OPS);
    for (int i = 0; i < p->n_in; i++) {
        enum qp_status st = qp_kneed(p, i);
        if (st) return st;
        if (p->in[i]->dtype != QP_DTYPE_FLOAT && p->in[i]->dtype != QP_DTYPE_DOUBLE)
            return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "input %d has dtype %s", i,
                                qp_dtype_name(p->in[i]->dtype));
        if (p->in[i]->dtype != p->in[0]->dtype)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "input %d is %s, input 0 is %s", i,
                                qp_dtype_name(p->in[i]->dtype), qp_dtype_name(p->in[0]->dtype));
    }
    return QP_OK;
}

/* The input terms of eq (up to lhs_end), one per input; then the rank of the ellipsis
 * dimensions (numpy broadcasting, aligned on the right). */
static enum qp_status ein_parse_inputs(struct qp_kprep *p, const char *eq, const char *lhs_end,
                                       struct ein_term *terms, int *ell_rank_out) {
    int n_terms = 0;
    for (const char *b = eq;;) {
        const char *e = b;
        while (e < lhs_end && *e != ',')
            e++;
        if (n_terms >= p->n_in)
            return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                                "equation '%s' has more terms than the "
                                "%d inputs",
                                eq, p->n_in);
        enum qp_status st = ein_term_parse(b, e, &terms[n_terms++], eq, p->err);
        if (st) return st;
        if (e >= lhs_end) break;
        b = e + 1;
    }
    if (n_terms != p->n_in)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT, "equation '%s' has %d terms for %d inputs",
                            eq, n_terms, p->n_in);
    int ell_rank = 0;
    for (int k = 0; k < n_terms; k++) {
        int rk = p->in[k]->rank, ne = rk - terms[k].n;
        if (ne < 0 || (terms[k].ell_at < 0 && ne != 0))
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "equation '%s': input %d has rank %d", eq,
                                k, rk);
        if (ne > ell_rank) ell_rank = ne;
    }
    *ell_rank_out = ell_rank;
    return QP_OK;
}

/* The labels of an equation while it is resolved: slots [0, ell_rank) are the ellipsis
 * dimensions, letters follow. */
struct ein_labels {
    int ell_rank;
    char letters[EIN_MAX_LABELS];
    int counts[EIN_MAX_LABELS]; /* how many operand dimensions carry the label */
    int in_out[EIN_MAX_LABELS]; /* the label is an output dimension */
};

/* The label slot of letter ch, or s->n_labels when it has none yet. */
static int ein_find(const struct ein_state *s, const struct ein_labels *lb, char ch) {
    int l;
    for (l = lb->ell_rank; l < s->n_labels; l++)
        if (lb->letters[l] == ch) break;
    return l;
}

/* Operand k's dimensions onto the labels: sizes (checked alike for a letter, broadcast for
 * the ellipsis) and strides. */
static enum qp_status ein_bind_operand(struct qp_kprep *p, const char *eq, const struct ein_term *t,
                                       int k, struct ein_state *s, struct ein_labels *lb) {
    const struct qp_kt *x = p->in[k];
    int ne = x->rank - t->n, ell_rank = lb->ell_rank;
    int64_t xs[QP_MAX_RANK];
    int64_t acc = 1;
    for (int d = x->rank - 1; d >= 0; d--) {
        xs[d] = acc;
        acc *= x->dims[d];
    }
    for (int d = 0; d < x->rank; d++) {
        int64_t dim = x->dims[d];
        int at = t->ell_at;
        if (at >= 0 && d >= at && d < at + ne) {
            int slot = ell_rank - ne + (d - at);
            if (dim != 1 && s->ldim[slot] != 1 && s->ldim[slot] != dim)
                return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                                    "equation '%s': ellipsis dimensions of input %d do not "
                                    "broadcast (%lld vs %lld)",
                                    eq, k, (long long)dim, (long long)s->ldim[slot]);
            if (dim != 1) s->ldim[slot] = dim;
            s->stride[k][slot] = dim == 1 ? 0 : xs[d];
            continue;
        }
        char ch = t->l[at >= 0 && d >= at ? d - ne : d];
        int l = ein_find(s, lb, ch);
        if (l == s->n_labels) {
            lb->letters[l] = ch;
            s->ldim[l] = dim;
            s->n_labels++;
        } else if (s->ldim[l] != dim) {
            return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                                "equation '%s': letter '%c' has sizes %lld and %lld", eq, ch,
                                (long long)s->ldim[l], (long long)dim);
        }
        lb->counts[l]++;
        s->stride[k][l] += xs[d];
    }
    return QP_OK;
}

static enum qp_status ein_add_out(struct qp_kprep *p, struct ein_state *s, struct ein_labels *lb,
                                  int l) {
    if (s->n_out >= QP_MAX_RANK)
        return qp_error_set(p->err, QP_ERR_UNSUPPORTED, "output rank over %d", QP_MAX_RANK);
    lb->in_out[l] = 1;
    s->out_l[s->n_out++] = l;
    return QP_OK;
}

/* The output labels from the term after "->" (arrow, or NULL: implicit, the ellipsis
 * dimensions then the letters seen once, in ASCII order). */
static enum qp_status ein_output(struct qp_kprep *p, const char *eq, const char *arrow,
                                 struct ein_state *s, struct ein_labels *lb) {
    enum qp_status st;
    int ell_rank = lb->ell_rank;
    if (!arrow) {
        for (int j = 0; j < ell_rank; j++) {
            lb->in_out[j] = 1;
            s->out_l[s->n_out++] = j;
        }
        for (char ch = 'A'; ch <= 'z'; ch++)
            for (int l = ell_rank; l < s->n_labels; l++)
                if (lb->letters[l] == ch && lb->counts[l] == 1 && (st = ein_add_out(p, s, lb, l)))
                    return st;
        return QP_OK;
    }
    struct ein_term out_t;
    if ((st = ein_term_parse(arrow + 2, arrow + strlen(arrow), &out_t, eq, p->err))) return st;
    if (ell_rank > 0 && out_t.ell_at < 0)
        return qp_error_set(p->err, QP_ERR_BAD_INPUT,
                            "equation '%s': the output omits the ellipsis dimensions", eq);
    for (int i = 0; i <= out_t.n; i++) {
        if (i == out_t.ell_at)
            for (int j = 0; j < ell_rank; j++)
                if ((st = ein_add_out(p, s, lb, j))) return st;
        if (i == out_t.n) break;
        int l = ein_find(s, lb, out_t.l[i]);
        if (l == s->n_labels || lb->in_out[l])
            return qp_error_set(p->err, QP_ERR_BAD_INPUT, "equation '%s': bad output letter '%c'",
                                eq, out_t.l[i]);
        if ((st = ein_add_out(p, s, lb, l))) return st;
    }
    return QP_OK;
}

enum qp_status qp_k_einsum_prepare(struct qp_kprep *p) {
    if (qp_kinputs_sane(p)) return QP_ERR_BAD_INPUT;
    char eq[512];
    qp_kattr_str(p->node, "equation", "", eq, sizeof eq);
    enum qp_status st = ein_check_inputs(p);
    if (st) return st;
    struct ein_term terms[EIN_MAX_OPS];
    const char *arrow = strstr(eq, "->");
    struct ein_labels lb = {0};
    if ((st = ein_parse_inputs(p, eq, arrow ? arrow : eq + strlen(eq), terms, &lb.ell_rank)))
        return st;
    struct ein_state s;
    memset(&s, 0, sizeof s);
    s.n_ops = p->n_in;
    s.is_double = p->in[0]->dtype == QP_DTYPE_DOUBLE;
    s.n_labels = lb.ell_rank;
    for (int j = 0; j < lb.ell_rank; j++)
        s.ldim[j] = 1;
    for (int k = 0; k < p->n_in; k++)
        if ((st = ein_bind_operand(p, eq, &terms[k], k, &s, &lb))) return st;
    /* Broadcast ellipsis dimensions of size 1 in one operand read that operand's only element;
     * the stride 0 set above says so. */
    if ((st = ein_output(p, eq, arrow, &s, &lb))) return st;
    uint64_t n_sum = 1;
    for (int l = 0; l < s.n_labels; l++) {
        if (lb.in_out[l]) continue;
        s.sum_l[s.n_sum++] = l;
        if (s.ldim[l] && n_sum > (UINT64_C(1) << 62) / (uint64_t)s.ldim[l])
            return qp_error_set(p->err, QP_ERR_UNSUPPORTED,
                                "equation '%s' sums over more than 2^62 terms", eq);
        n_sum *= (uint64_t)s.ldim[l];
    }
    int64_t od[QP_MAX_RANK];
    for (int i = 0; i < s.n_out; i++)
        od[i] = s.ldim[s.out_l[i]];
    st = qp_kt_set(p->out[0], p->in[0]->dtype, s.n_out, od, p->err);
    if (st) return st;
    return qp_ksave_state(p, &s, sizeof s);
}

static double ein_elem(const struct qp_kt *t, int is_double, int64_t off) {
    return is_double ? ((const double *)t->data)[off] : (double)((const float *)t->data)[off];
}

enum qp_status qp_k_einsum_run(const struct qp_krun *r) {
    const struct ein_state *s = r->state;
    uint64_t n_sum = 1;
    for (int i = 0; i < s->n_sum; i++)
        n_sum *= (uint64_t)s->ldim[s->sum_l[i]];
    int64_t n_o = (int64_t)r->out[0]->numel;
    int nt = (uint64_t)n_o * n_sum < 16384 ? 1 : r->n_threads;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t o = 0; o < n_o; o++) {
        int64_t base[EIN_MAX_OPS] = {0};
        uint64_t rem = (uint64_t)o;
        for (int i = s->n_out - 1; i >= 0; i--) {
            int l = s->out_l[i];
            int64_t x = (int64_t)(rem % (uint64_t)s->ldim[l]);
            rem /= (uint64_t)s->ldim[l];
            for (int k = 0; k < s->n_ops; k++)
                base[k] += x * s->stride[k][l];
        }
        double acc = 0;
        for (uint64_t q = 0; q < n_sum; q++) {
            int64_t off[EIN_MAX_OPS];
            memcpy(off, base, sizeof off);
            uint64_t rq = q;
            for (int i = s->n_sum - 1; i >= 0; i--) {
                int l = s->sum_l[i];
                int64_t x = (int64_t)(rq % (uint64_t)s->ldim[l]);
                rq /= (uint64_t)s->ldim[l];
                for (int k = 0; k < s->n_ops; k++)
                    off[k] += x * s->stride[k][l];
            }
            double prod = 1;
            for (int k = 0; k < s->n_ops; k++)
                prod *= ein_elem(r->in[k], s->is_double, off[k]);
            acc += prod;
        }
        if (s->is_double)
            ((double *)r->out[0]->data)[o] = acc;
        else
            ((float *)r->out[0]->data)[o] = (float)acc;
    }
    return QP_OK;
}
