/* The trtexec latency backend: command line, output parser, runner (autotune/trtexec.h). */
#include "autotune/trtexec.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autotune/spawn.h"
#include "core/grow.h"

/* ---- a NULL-terminated string array under construction ---------------------------------- */

struct strv {
    char **v;
    size_t n, cap;
};

/* Appends a copy of s[0..len); 0 when out of memory. */
static int strv_push_n(struct strv *a, const char *s, size_t len) {
    if (!qp_grow((void **)&a->v, &a->cap, a->n + 2, sizeof *a->v)) return 0;
    char *c = malloc(len + 1);
    if (!c) return 0;
    memcpy(c, s, len);
    c[len] = 0;
    a->v[a->n++] = c;
    a->v[a->n] = NULL;
    return 1;
}

static int strv_pushf(struct strv *a, const char *fmt, ...) {
    char buf[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0) return 0;
    if ((size_t)n < sizeof buf) return strv_push_n(a, buf, (size_t)n);
    char *big = malloc((size_t)n + 1);
    if (!big) return 0;
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    int ok = strv_push_n(a, big, (size_t)n);
    free(big);
    return ok;
}

void qp_trtexec_argv_free(char **argv) {
    for (size_t i = 0; argv && argv[i]; i++)
        free(argv[i]);
    free(argv);
}

/* ---- shell-like splitting --------------------------------------------------------------- */

/* Appends the word starting at *p to `word` (a scratch buffer as long as s) and advances *p
 * past it; 0 on an unterminated quote or trailing backslash. */
static int split_word(const char **p, char *word, size_t *len_out) {
    const char *s = *p;
    size_t n = 0;
    while (*s && *s != ' ' && *s != '\t' && *s != '\n') {
        if (*s == '\'') {
            const char *end = strchr(s + 1, '\'');
            if (!end) return 0;
            memcpy(word + n, s + 1, (size_t)(end - s - 1));
            n += (size_t)(end - s - 1);
            s = end + 1;
        } else if (*s == '"') {
            for (s++; *s != '"'; s++) {
                if (!*s) return 0;
                if (*s == '\\' && s[1] && strchr("\\\"$`\n", s[1])) s++;
                word[n++] = *s;
            }
            s++;
        } else if (*s == '\\') {
            if (!s[1]) return 0;
            word[n++] = s[1];
            s += 2;
        } else {
            word[n++] = *s++;
        }
    }
    *p = s;
    *len_out = n;
    return 1;
}

enum qp_status qp_trtexec_split_args(const char *s, char ***words_out, size_t *n_out,
                                     struct qp_error *err) {
    if (!s || !words_out || !n_out)
        return qp_error_set(err, QP_ERR_USAGE, "trtexec: arguments: NULL argument");
    struct strv a = {0};
    char *word = malloc(strlen(s) + 1);
    enum qp_status st = QP_OK;
    if (!word || !qp_grow((void **)&a.v, &a.cap, 1, sizeof *a.v)) goto nomem;
    a.v[0] = NULL;
    for (const char *p = s;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n')
            p++;
        if (!*p) break;
        size_t len = 0;
        if (!split_word(&p, word, &len)) {
            st = qp_error_set(err, QP_ERR_USAGE,
                              "trtexec: arguments \"%s\": unterminated quote or trailing "
                              "backslash",
                              s);
            goto fail;
        }
        if (!strv_push_n(&a, word, len)) goto nomem;
    }
    free(word);
    *words_out = a.v;
    *n_out = a.n;
    return QP_OK;
nomem:
    st = qp_error_set(err, QP_ERR_NOMEM, "trtexec: out of memory");
fail:
    free(word);
    qp_trtexec_argv_free(a.v);
    return st;
}

/* ---- the command line ------------------------------------------------------------------- */

void qp_latency_trtexec_options_default(struct qp_latency_trtexec_options *o) {
    memset(o, 0, sizeof *o);
    o->warmup_ms = 200;
}

static const char *program(const struct qp_latency_trtexec_options *o) {
    if (o->trtexec && o->trtexec[0]) return o->trtexec;
    const char *e = getenv("TRTEXEC");
    return e && e[0] ? e : "trtexec";
}

enum qp_status qp_trtexec_argv(const struct qp_latency_trtexec_options *o, const char *model_path,
                               size_t n_runs, char ***argv_out, size_t *argc_out,
                               struct qp_error *err) {
    if (!o || !model_path || !argv_out || !argc_out || (o->n_plugins && !o->plugins))
        return qp_error_set(err, QP_ERR_USAGE, "trtexec: NULL argument");
    if (n_runs == 0 || n_runs > INT_MAX || o->warmup_ms < 0)
        return qp_error_set(err, QP_ERR_USAGE, "trtexec: %zu runs and warm-up %d ms", n_runs,
                            o->warmup_ms);
    char **extra = NULL;
    size_t n_extra = 0;
    if (o->extra_args) {
        enum qp_status st = qp_trtexec_split_args(o->extra_args, &extra, &n_extra, err);
        if (st != QP_OK) return st;
    }
    struct strv a = {0};
    const char *prog = program(o);
    int ok = strv_push_n(&a, prog, strlen(prog)) && strv_pushf(&a, "--onnx=%s", model_path) &&
             strv_pushf(&a, "--stronglyTyped") && strv_pushf(&a, "--warmUp=%d", o->warmup_ms) &&
             strv_pushf(&a, "--iterations=%zu", n_runs) && strv_pushf(&a, "--duration=0") &&
             strv_pushf(&a, "--avgRuns=1");
    if (ok && o->timing_cache) ok = strv_pushf(&a, "--timingCacheFile=%s", o->timing_cache);
    for (size_t i = 0; ok && i < o->n_plugins; i++)
        ok = o->plugins[i] && strv_pushf(&a, "--staticPlugins=%s", o->plugins[i]);
    for (size_t i = 0; ok && i < n_extra; i++)
        ok = strv_push_n(&a, extra[i], strlen(extra[i]));
    qp_trtexec_argv_free(extra);
    if (!ok) {
        qp_trtexec_argv_free(a.v);
        return qp_error_set(err, QP_ERR_NOMEM, "trtexec: out of memory (or a NULL plugin)");
    }
    *argv_out = a.v;
    *argc_out = a.n;
    return QP_OK;
}

/* ---- the output parser ------------------------------------------------------------------ */

void qp_trtexec_report_release(struct qp_trtexec_report *r) {
    if (!r) return;
    free(r->run_ms);
    memset(r, 0, sizeof *r);
}

/* The line's text after its "[date-time] [I] " tags. */
static const char *skip_tags(const char *line, const char *end) {
    const char *p = line;
    for (;;) {
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        if (p >= end || *p != '[') return p;
        const char *close = memchr(p, ']', (size_t)(end - p));
        if (!close) return p;
        p = close + 1;
    }
}

/* The number after `key` in line[..end) ("min = " -> 0.123), or 0 when absent. */
static int number_after(const char *line, const char *end, const char *key, double *v) {
    size_t kl = strlen(key);
    for (const char *p = line; p + kl <= end; p++)
        if (memcmp(p, key, kl) == 0) {
            char *stop = NULL;
            *v = strtod(p + kl, &stop);
            return stop != p + kl && stop <= end;
        }
    return 0;
}

static int parse_summary(const char *p, const char *end, struct qp_trtexec_report *r) {
    return number_after(p, end, "min = ", &r->min_ms) &&
           number_after(p, end, "max = ", &r->max_ms) &&
           number_after(p, end, "mean = ", &r->mean_ms) &&
           number_after(p, end, "median = ", &r->median_ms);
}

/* A per-inference trace line's host latency: "Average on 1 runs - ... Host latency: H ms". */
static int parse_trace(const char *p, const char *end, double *host_ms) {
    static const char key[] = "Average on 1 runs ";
    size_t kl = sizeof key - 1;
    return (size_t)(end - p) > kl && memcmp(p, key, kl) == 0 &&
           number_after(p, end, "Host latency: ", host_ms);
}

enum qp_status qp_trtexec_parse(const char *text, size_t len, struct qp_trtexec_report *out,
                                struct qp_error *err) {
    if (!text || !out) return qp_error_set(err, QP_ERR_USAGE, "trtexec: parse: NULL argument");
    struct qp_trtexec_report r = {0};
    size_t cap = 0;
    int have_summary = 0, bad_summary = 0;
    for (const char *line = text, *stop = text + len; line < stop;) {
        const char *end = memchr(line, '\n', (size_t)(stop - line));
        if (!end) end = stop;
        const char *p = skip_tags(line, end);
        double host = 0;
        if ((size_t)(end - p) >= 9 && memcmp(p, "Latency: ", 9) == 0) {
            have_summary = parse_summary(p, end, &r);
            bad_summary = !have_summary;
        } else if (parse_trace(p, end, &host)) {
            if (!qp_grow((void **)&r.run_ms, &cap, r.n_runs + 1, sizeof *r.run_ms)) {
                qp_trtexec_report_release(&r);
                return qp_error_set(err, QP_ERR_NOMEM, "trtexec: parse: out of memory");
            }
            r.run_ms[r.n_runs++] = host;
        }
        line = end + 1;
    }
    if (!have_summary) {
        qp_trtexec_report_release(&r);
        return qp_error_set(err, QP_ERR_BAD_INPUT, "trtexec: %s",
                            bad_summary ? "its 'Latency:' line lacks min/max/mean/median"
                                        : "no 'Latency: min = ...' line in its output");
    }
    *out = r;
    return QP_OK;
}

/* ---- the backend ------------------------------------------------------------------------ */

struct trtexec {
    struct qp_latency_backend base;
    struct qp_latency_trtexec_options o; /* its strings point into `strings` */
    char **strings;                      /* owned copies: program, cache, extra, plugins */
};

static enum qp_status trtexec_measure(struct qp_latency_backend *base, const char *model_path,
                                      size_t n_runs, double *samples_ms, struct qp_error *err) {
    struct trtexec *t = (struct trtexec *)base;
    char **argv = NULL;
    size_t argc = 0;
    struct qp_spawn_output out = {0};
    struct qp_trtexec_report r = {0};
    enum qp_status st = qp_trtexec_argv(&t->o, model_path, n_runs, &argv, &argc, err);
    if (st == QP_OK) st = qp_spawn_capture(argv, &out, err);
    if (st == QP_OK && out.exit_code != 0)
        st = qp_error_set(err, QP_ERR_IO,
                          "trtexec: '%s' on '%s' failed (exit %d); its last lines:\n%s", argv[0],
                          model_path, out.exit_code, qp_spawn_tail(&out, 8));
    if (st == QP_OK && qp_trtexec_parse(out.text, out.len, &r, err) != QP_OK)
        st = qp_error_set(err, QP_ERR_BAD_INPUT,
                          "trtexec: no 'Latency: min = ...' summary from '%s' on '%s'; its last "
                          "lines:\n%s",
                          argv[0], model_path, qp_spawn_tail(&out, 8));
    if (st == QP_OK && r.n_runs < n_runs)
        st = qp_error_set(err, QP_ERR_BAD_INPUT,
                          "trtexec: %zu per-inference lines ('Average on 1 runs') for %zu runs "
                          "of '%s' (an --avgRuns in the extra arguments?)",
                          r.n_runs, n_runs, model_path);
    if (st == QP_OK) memcpy(samples_ms, r.run_ms, n_runs * sizeof *samples_ms);
    qp_trtexec_report_release(&r);
    qp_spawn_output_release(&out);
    qp_trtexec_argv_free(argv);
    return st;
}

static void trtexec_free(struct qp_latency_backend *base) {
    struct trtexec *t = (struct trtexec *)base;
    qp_trtexec_argv_free(t->strings);
    free((void *)t->o.plugins);
    free(t);
}

/* Copies the option strings into t->strings and points t->o at them; 0 when out of memory. */
static int copy_options(struct trtexec *t, const struct qp_latency_trtexec_options *o) {
    struct strv a = {0};
    const char *src[3] = {program(o), o->timing_cache, o->extra_args};
    const char **dst[3] = {&t->o.trtexec, &t->o.timing_cache, &t->o.extra_args};
    t->o = *o;
    t->o.plugins = NULL;
    t->o.n_plugins = 0;
    const char **plugins = calloc(o->n_plugins ? o->n_plugins : 1, sizeof *plugins);
    int ok = plugins != NULL;
    for (int i = 0; ok && i < 3; i++)
        if (src[i] && (ok = strv_push_n(&a, src[i], strlen(src[i])))) *dst[i] = a.v[a.n - 1];
    for (size_t i = 0; ok && i < o->n_plugins; i++)
        if ((ok = strv_push_n(&a, o->plugins[i], strlen(o->plugins[i])))) plugins[i] = a.v[a.n - 1];
    t->strings = a.v;
    t->o.plugins = plugins;
    t->o.n_plugins = ok ? o->n_plugins : 0;
    return ok;
}

enum qp_status qp_latency_trtexec_create(const struct qp_latency_trtexec_options *o,
                                         struct qp_latency_backend **out, struct qp_error *err) {
    struct qp_latency_trtexec_options dflt;
    qp_latency_trtexec_options_default(&dflt);
    if (!o) o = &dflt;
    if (!out || (o->n_plugins && !o->plugins))
        return qp_error_set(err, QP_ERR_USAGE, "trtexec: NULL argument");
    for (size_t i = 0; i < o->n_plugins; i++)
        if (!o->plugins[i])
            return qp_error_set(err, QP_ERR_USAGE, "trtexec: plugin %zu is NULL", i);
    /* The options are checked (and the extra arguments split) once here, not at each run. */
    char **argv = NULL;
    size_t argc = 0;
    enum qp_status st = qp_trtexec_argv(o, "model.onnx", 1, &argv, &argc, err);
    qp_trtexec_argv_free(argv);
    if (st != QP_OK) return st;
    struct trtexec *t = calloc(1, sizeof *t);
    if (!t) return qp_error_set(err, QP_ERR_NOMEM, "trtexec: out of memory");
    if (!copy_options(t, o)) {
        trtexec_free(&t->base);
        return qp_error_set(err, QP_ERR_NOMEM, "trtexec: out of memory");
    }
    t->base.name = "trtexec";
    snprintf(t->base.detail, sizeof t->base.detail, "%s", t->o.trtexec);
    t->base.measure = trtexec_measure;
    t->base.free = trtexec_free;
    *out = &t->base;
    return QP_OK;
}
