/* Metrics, names, blocks files and the exclusion picker (sensitivity.h). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sensitivity/sensitivity.h"

#include "core/regex.h"

static const char *const granularity_names[] = {"op_type", "node"};
static const char *const metric_names[] = {"kl_div", "mse", "cos"};
static const char *const probe_names[] = {"quantize_one", "exclude_one"};
_Static_assert(sizeof granularity_names / sizeof *granularity_names == QP_SENS_GRANULARITY_COUNT,
               "granularity names");
_Static_assert(sizeof metric_names / sizeof *metric_names == QP_SENS_METRIC_COUNT, "metric names");
_Static_assert(sizeof probe_names / sizeof *probe_names == QP_SENS_PROBE_COUNT, "probe names");

static int parse_name(const char *s, const char *const *names, int n) {
    for (int i = 0; s && i < n; i++)
        if (strcmp(s, names[i]) == 0) return i;
    return -1;
}

const char *qp_sens_granularity_name(enum qp_sens_granularity g) {
    return (unsigned)g < QP_SENS_GRANULARITY_COUNT ? granularity_names[g] : "?";
}
const char *qp_sens_metric_name(enum qp_sens_metric m) {
    return (unsigned)m < QP_SENS_METRIC_COUNT ? metric_names[m] : "?";
}
const char *qp_sens_probe_name(enum qp_sens_probe p) {
    return (unsigned)p < QP_SENS_PROBE_COUNT ? probe_names[p] : "?";
}
int qp_sens_granularity_parse(const char *s) {
    return parse_name(s, granularity_names, QP_SENS_GRANULARITY_COUNT);
}
int qp_sens_metric_parse(const char *s) {
    return parse_name(s, metric_names, QP_SENS_METRIC_COUNT);
}
int qp_sens_probe_parse(const char *s) {
    return parse_name(s, probe_names, QP_SENS_PROBE_COUNT);
}
int qp_block_agg_parse(const char *s) {
    static const char *const names[] = {"sum", "max", "mean"};
    return parse_name(s, names, 3);
}

/* ---- metrics ------------------------------------------------------------------------------- */

#define SENS_EPS 1e-12

static double kl_div(const float *ref, const float *q, size_t n) {
    double mr = -INFINITY, mq = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        if (ref[i] > mr) mr = ref[i];
        if (q[i] > mq) mq = q[i];
    }
    double sr = 0, sq = 0;
    for (size_t i = 0; i < n; i++) {
        sr += exp((double)ref[i] - mr);
        sq += exp((double)q[i] - mq);
    }
    sr += SENS_EPS;
    sq += SENS_EPS;
    double kl = 0;
    for (size_t i = 0; i < n; i++) {
        double p = exp((double)ref[i] - mr) / sr;
        double pq = exp((double)q[i] - mq) / sq;
        kl += p * (log(p + SENS_EPS) - log(pq + SENS_EPS));
    }
    return kl;
}

double qp_sens_metric_sample(enum qp_sens_metric m, const float *ref, const float *q, size_t n) {
    if (n == 0) return 0;
    switch (m) {
    case QP_SENS_KL_DIV:
        return kl_div(ref, q, n);
    case QP_SENS_MSE: {
        double s = 0;
        for (size_t i = 0; i < n; i++) {
            double d = (double)ref[i] - (double)q[i];
            s += d * d;
        }
        return s / (double)n;
    }
    case QP_SENS_COS: {
        double dot = 0, na = 0, nb = 0;
        for (size_t i = 0; i < n; i++) {
            dot += (double)ref[i] * q[i];
            na += (double)ref[i] * ref[i];
            nb += (double)q[i] * q[i];
        }
        if (na == 0 && nb == 0) return 0;
        if (na == 0 || nb == 0) return 1;
        return 1.0 - dot / (sqrt(na) * sqrt(nb) + SENS_EPS);
    }
    default:
        return NAN;
    }
}

/* ---- blocks ---------------------------------------------------------------------------------- */

void qp_sens_blocks_free(struct qp_sens_blocks *b) {
    if (!b) return;
    for (size_t i = 0; i < b->n; i++) {
        free(b->names[i]);
        if (b->patterns && b->patterns[i]) {
            for (size_t k = 0; k < b->n_patterns[i]; k++)
                regfree(&b->patterns[i][k]);
            free(b->patterns[i]);
        }
    }
    free(b->names);
    free(b->n_patterns);
    free(b->patterns);
    free(b);
}

enum qp_status qp_sens_blocks_parse(const char *text, size_t len, const char *source,
                                    struct qp_sens_blocks **out, struct qp_error *err) {
    const char *src = source ? source : "blocks";
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (!root)
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "%s: not valid JSON (expected an object of "
                            "group name -> list of regexes)",
                            src);
    enum qp_status st = QP_OK;
    struct qp_sens_blocks *b = calloc(1, sizeof *b);
    if (!b) goto oom;
    if (!cJSON_IsObject(root)) {
        st = qp_error_set(err, QP_ERR_BAD_INPUT,
                          "%s: expected an object of group name -> list of regexes", src);
        goto fail;
    }
    size_t n = (size_t)cJSON_GetArraySize(root);
    if (n == 0) {
        st = qp_error_set(err, QP_ERR_BAD_INPUT, "%s: no groups", src);
        goto fail;
    }
    b->names = calloc(n, sizeof *b->names);
    b->n_patterns = calloc(n, sizeof *b->n_patterns);
    b->patterns = calloc(n, sizeof *b->patterns);
    if (!b->names || !b->n_patterns || !b->patterns) goto oom;
    const cJSON *grp;
    cJSON_ArrayForEach(grp, root) {
        size_t gi = b->n;
        for (size_t k = 0; k < gi; k++)
            if (strcmp(b->names[k], grp->string) == 0) {
                st = qp_error_set(err, QP_ERR_BAD_INPUT, "%s: group '%s' is repeated", src,
                                  grp->string);
                goto fail;
            }
        if (!(b->names[gi] = strdup(grp->string))) goto oom;
        b->n++;
        size_t np = cJSON_IsString(grp)  ? 1
                    : cJSON_IsArray(grp) ? (size_t)cJSON_GetArraySize(grp)
                                         : 0;
        if (np == 0) {
            st = qp_error_set(err, QP_ERR_BAD_INPUT,
                              "%s: group '%s': expected a regex or a non-empty list of regexes",
                              src, grp->string);
            goto fail;
        }
        if (!(b->patterns[gi] = calloc(np, sizeof(regex_t)))) goto oom;
        for (size_t k = 0; k < np; k++) {
            const cJSON *p = cJSON_IsString(grp) ? grp : cJSON_GetArrayItem(grp, (int)k);
            if (!cJSON_IsString(p)) {
                st = qp_error_set(err, QP_ERR_BAD_INPUT,
                                  "%s: group '%s': pattern %zu is not a string", src, grp->string,
                                  k);
                goto fail;
            }
            char why[256];
            if (!qp_regex_compile(&b->patterns[gi][k], p->valuestring,
                                  QP_REGEX_ANCHORED | QP_REGEX_NOSUB, why, sizeof why)) {
                st = qp_error_set(err, QP_ERR_BAD_INPUT,
                                  "%s: group '%s': regex '%.200s' does not compile: %s", src,
                                  grp->string, p->valuestring, why);
                goto fail;
            }
            b->n_patterns[gi]++;
        }
    }
    cJSON_Delete(root);
    *out = b;
    return QP_OK;
oom:
    st = qp_error_set(err, QP_ERR_NOMEM, "%s: out of memory", src);
fail:
    cJSON_Delete(root);
    qp_sens_blocks_free(b);
    return st;
}

enum qp_status qp_sens_blocks_load(const char *path, struct qp_sens_blocks **out,
                                   struct qp_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return qp_error_set(err, QP_ERR_IO, "blocks file '%s': cannot open", path);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 > cap) {
            if (cap > ((size_t)64 << 20)) {
                free(buf);
                fclose(f);
                return qp_error_set(err, QP_ERR_BAD_INPUT, "blocks file '%s': over 64 MiB", path);
            }
            cap = cap ? cap * 2 : 8192;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return qp_error_set(err, QP_ERR_NOMEM, "blocks file '%s': out of memory", path);
            }
            buf = nb;
        }
        size_t r = fread(buf + len, 1, cap - len, f);
        len += r;
        if (r == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return qp_error_set(err, QP_ERR_IO, "blocks file '%s': read error", path);
    }
    enum qp_status st = qp_sens_blocks_parse(buf, len, path, out, err);
    free(buf);
    return st;
}

/* ---- picker ---------------------------------------------------------------------------------- */

void qp_pick_options_default(struct qp_pick_options *o) {
    memset(o, 0, sizeof *o);
    o->coverage = 0.9;
    o->near_tie_ratio = 0.99;
    o->agg = QP_BLOCK_SUM;
}

void qp_pick_result_free(struct qp_pick_result *r) {
    if (!r) return;
    for (size_t i = 0; i < r->n_groups; i++) {
        free(r->groups[i].name);
        free(r->groups[i].members);
    }
    free(r->groups);
    free(r->excluded);
    free(r);
}

static const double *sort_scores;
/* Descending score; ties keep input order (stable, as Python's sort). */
static int cmp_desc(const void *a, const void *b) {
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    double sx = sort_scores[x], sy = sort_scores[y];
    if (sx > sy) return -1;
    if (sx < sy) return 1;
    return x < y ? -1 : x > y;
}

static void sort_desc(size_t *idx, size_t n, const double *scores) {
    sort_scores = scores;
    qsort(idx, n, sizeof *idx, cmp_desc);
}

enum qp_status qp_sens_pick(const char *const *names, const double *scores, size_t n,
                            const struct qp_pick_options *o, struct qp_pick_result **out,
                            struct qp_error *err) {
    if (!o->threshold_mode && !(o->coverage >= 0 && o->coverage <= 1))
        return qp_error_set(err, QP_ERR_USAGE, "picker: coverage %g is outside [0, 1]",
                            o->coverage);
    if (o->threshold_mode && !isfinite(o->threshold))
        return qp_error_set(err, QP_ERR_USAGE, "picker: the threshold must be a finite number");
    if ((unsigned)o->agg > QP_BLOCK_MEAN)
        return qp_error_set(err, QP_ERR_USAGE, "picker: block_agg must be sum, max or mean");
    struct qp_pick_result *r = calloc(1, sizeof *r);
    size_t *group_of = calloc(n ? n : 1, sizeof *group_of);
    size_t *order = calloc(n ? n : 1, sizeof *order);
    double *gscore = NULL;
    if (!r || !group_of || !order) goto oom;
    /* Groups: the first block (file order) with a matching pattern; else the name alone. Block
     * groups come first in file order, then singletons in input order (only the order of ties
     * depends on this). */
    size_t nb = o->blocks ? o->blocks->n : 0;
    r->groups = calloc(nb + n + 1, sizeof *r->groups);
    if (!r->groups) goto oom;
    size_t *block_group = calloc(nb + 1, sizeof *block_group);
    if (!block_group) goto oom;
    for (size_t b = 0; b < nb; b++)
        block_group[b] = (size_t)-1;
    for (size_t i = 0; i < n; i++) {
        size_t hit = (size_t)-1;
        for (size_t b = 0; b < nb && hit == (size_t)-1; b++)
            for (size_t k = 0; k < o->blocks->n_patterns[b]; k++)
                if (regexec(&o->blocks->patterns[b][k], names[i], 0, NULL, 0) == 0) {
                    hit = b;
                    break;
                }
        if (hit != (size_t)-1) {
            if (block_group[hit] == (size_t)-1) {
                block_group[hit] = r->n_groups;
                if (!(r->groups[r->n_groups++].name = strdup(o->blocks->names[hit]))) {
                    free(block_group);
                    goto oom;
                }
            }
            group_of[i] = block_group[hit];
        } else {
            group_of[i] = r->n_groups;
            if (!(r->groups[r->n_groups++].name = strdup(names[i]))) {
                free(block_group);
                goto oom;
            }
        }
    }
    free(block_group);
    /* Members of each group, highest score first. */
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    sort_desc(order, n, scores);
    for (size_t g = 0; g < r->n_groups; g++) {
        struct qp_pick_group *gr = &r->groups[g];
        size_t cnt = 0;
        for (size_t i = 0; i < n; i++)
            cnt += group_of[i] == g;
        if (!(gr->members = calloc(cnt ? cnt : 1, sizeof *gr->members))) goto oom;
        double s = 0, mx = -INFINITY;
        for (size_t k = 0; k < n; k++) {
            size_t i = order[k];
            if (group_of[i] != g) continue;
            gr->members[gr->n_members++] = i;
            s += scores[i];
            if (scores[i] > mx) mx = scores[i];
        }
        gr->score = o->agg == QP_BLOCK_SUM   ? s
                    : o->agg == QP_BLOCK_MAX ? mx
                                             : s / (double)gr->n_members;
    }
    /* Rank the groups (stable) by reordering them. */
    gscore = calloc(r->n_groups + 1, sizeof *gscore);
    size_t *gorder = calloc(r->n_groups + 1, sizeof *gorder);
    struct qp_pick_group *sorted = calloc(r->n_groups + 1, sizeof *sorted);
    if (!gscore || !gorder || !sorted) {
        free(gorder);
        free(sorted);
        goto oom;
    }
    for (size_t g = 0; g < r->n_groups; g++) {
        gscore[g] = r->groups[g].score;
        gorder[g] = g;
    }
    sort_desc(gorder, r->n_groups, gscore);
    for (size_t g = 0; g < r->n_groups; g++)
        sorted[g] = r->groups[gorder[g]];
    free(r->groups);
    r->groups = sorted;
    free(gorder);

    /* The walk. */
    double total = 0;
    for (size_t i = 0; i < n; i++)
        total += scores[i];
    double group_total = 0;
    for (size_t g = 0; g < r->n_groups; g++)
        group_total += r->groups[g].score;
    size_t chosen = 0;
    if (o->threshold_mode) {
        for (size_t g = 0; g < r->n_groups; g++) {
            if (o->max_nodes && chosen >= o->max_nodes) break;
            double s = r->groups[g].score;
            if (!(s > o->threshold) || s < o->min_score_floor) break;
            chosen++;
        }
    } else if (group_total > 0) {
        double target = o->coverage * group_total, cum = 0;
        for (size_t g = 0; g < r->n_groups; g++) {
            if (o->max_nodes && chosen >= o->max_nodes) break;
            double s = r->groups[g].score;
            if (s < o->min_score_floor || cum + s > target) break;
            cum += s;
            chosen++;
        }
    }
    r->n_chosen_groups = chosen;
    if (o->near_tie_ratio > 0 && chosen > 0 && chosen < r->n_groups) {
        double last = r->groups[chosen - 1].score, first_out = r->groups[chosen].score;
        if (last > 0 && first_out / last >= o->near_tie_ratio) {
            r->near_tie = 1;
            snprintf(r->warning, sizeof r->warning,
                     "near-tie at the exclusion cut-off (mode=%s): '%s' (%.6g) is included and "
                     "'%s' (%.6g) is not",
                     o->threshold_mode ? "threshold" : "coverage", r->groups[chosen - 1].name, last,
                     r->groups[chosen].name, first_out);
        }
    }
    size_t ne = 0;
    for (size_t g = 0; g < chosen; g++)
        ne += r->groups[g].n_members;
    if (!(r->excluded = calloc(ne ? ne : 1, sizeof *r->excluded))) goto oom;
    double mass = 0;
    for (size_t g = 0; g < chosen; g++)
        for (size_t k = 0; k < r->groups[g].n_members; k++) {
            size_t i = r->groups[g].members[k];
            r->excluded[r->n_excluded++] = i;
            mass += scores[i];
        }
    r->excluded_mass = mass;
    r->total_mass = total;
    r->coverage_pct = total > 0 ? 100.0 * mass / total : 0;
    r->num_previously_quantized = n;
    r->num_remaining_quantized = n - r->n_excluded;
    free(gscore);
    free(group_of);
    free(order);
    *out = r;
    return QP_OK;
oom:
    free(gscore);
    free(group_of);
    free(order);
    qp_pick_result_free(r);
    return qp_error_set(err, QP_ERR_NOMEM, "picker: out of memory");
}

size_t qp_sens_name_regex(const char *name, char *buf, size_t cap) {
    size_t k = 0;
#define PUT(c)                                                                                     \
    do {                                                                                           \
        if (k + 1 < cap) buf[k] = (c);                                                             \
        k++;                                                                                       \
    } while (0)
    PUT('^');
    for (const char *p = name; *p; p++) {
        if (strchr(".[]{}()\\*+?^$|", *p)) PUT('\\');
        PUT(*p);
    }
    PUT('$');
#undef PUT
    if (cap) buf[k < cap ? k : cap - 1] = '\0';
    return k;
}
