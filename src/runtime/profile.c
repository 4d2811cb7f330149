/* Per-op step times (profile.h). */
#include "runtime/profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct row {
    char label[128];
    double seconds;
    size_t calls;
};

struct rt_profile {
    int by_node;
    size_t n, cap, runs;
    struct row *rows;
};

struct rt_profile *rt_profile_new(void) {
    const char *e = getenv("QP_PROFILE");
    if (!e || !e[0] || strcmp(e, "0") == 0) return NULL;
    struct rt_profile *p = calloc(1, sizeof(struct rt_profile));
    if (p) p->by_node = strcmp(e, "node") == 0;
    return p;
}

int rt_profile_by_node(const struct rt_profile *p) {
    return p && p->by_node;
}

void rt_profile_add(struct rt_profile *p, const char *label, double seconds) {
    if (!p) return;
    for (size_t i = 0; i < p->n; i++)
        if (strncmp(p->rows[i].label, label, sizeof p->rows[i].label - 1) == 0) {
            p->rows[i].seconds += seconds;
            p->rows[i].calls++;
            return;
        }
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 32;
        struct row *r = realloc(p->rows, cap * sizeof *r);
        if (!r) return; /* a profile that misses a row is still a profile */
        p->rows = r;
        p->cap = cap;
    }
    struct row *r = &p->rows[p->n++];
    snprintf(r->label, sizeof r->label, "%s", label);
    r->seconds = seconds;
    r->calls = 1;
}

void rt_profile_clear(struct rt_profile *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n; i++) {
        p->rows[i].seconds = 0;
        p->rows[i].calls = 0;
    }
    p->runs = 0;
}

void rt_profile_run(struct rt_profile *p) {
    if (p) p->runs++;
}

static int by_time(const void *a, const void *b) {
    double x = ((const struct row *)a)->seconds, y = ((const struct row *)b)->seconds;
    return (x < y) - (x > y);
}

void rt_profile_print_free(struct rt_profile *p) {
    if (!p) return;
    if (p->runs) {
        double total = 0;
        for (size_t i = 0; i < p->n; i++)
            total += p->rows[i].seconds;
        qsort(p->rows, p->n, sizeof *p->rows, by_time);
        fprintf(stderr, "profile: %zu runs, %.3f ms per run in steps\n", p->runs,
                1e3 * total / (double)p->runs);
        fprintf(stderr, "%-28s %12s %8s %10s\n", p->by_node ? "step" : "op", "ms per run", "share",
                "steps/run");
        for (size_t i = 0; i < p->n; i++) {
            const struct row *r = &p->rows[i];
            fprintf(stderr, "%-28s %12.3f %7.1f%% %10.1f\n", r->label,
                    1e3 * r->seconds / (double)p->runs, total > 0 ? 100 * r->seconds / total : 0,
                    (double)r->calls / (double)p->runs);
        }
    }
    free(p->rows);
    free(p);
}
