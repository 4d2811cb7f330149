/* The ort latency backend: onnxruntime-node in a `node` child (autotune/latency.h). */
#include <cjson/cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autotune/latency.h"
#include "autotune/spawn.h"
#include "calib/provider.h"
#include "core/size.h"
#include "ir/ir.h"
#include "qplace/model.h"
#include "qplace/session.h"
#include "runtime/bench.h"

#define ORT_PATH 4096

struct ort {
    struct qp_latency_backend base;
    int n_threads, warmup;
    struct qp_calib_shapes shapes;
    char node[ORT_PATH], script[ORT_PATH], npm[ORT_PATH];
};

void qp_latency_ort_options_default(struct qp_latency_ort_options *o) {
    memset(o, 0, sizeof *o);
    o->warmup = 3;
}

/* The option, else $env, else `rel` under the parent of the executable's folder. */
static void default_path(const char *given, const char *env, const char *rel, char *out,
                         size_t size) {
    const char *e = getenv(env);
    if (given && given[0]) {
        snprintf(out, size, "%s", given);
    } else if (e && e[0]) {
        snprintf(out, size, "%s", e);
    } else {
        char exe[ORT_PATH];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        exe[n > 0 ? n : 0] = 0;
        for (int k = 0; k < 2; k++) {
            char *slash = strrchr(exe, '/');
            if (slash) *slash = 0;
        }
        /* A path too long for `out` is cut; the child then says it is missing. */
        if (snprintf(out, size, "%s%s%s", exe, exe[0] ? "/" : "", rel) < 0) out[0] = 0;
    }
}

const char *qp_latency_ort_type(enum qp_dtype dt) {
    switch (dt) {
    case QP_DTYPE_FLOAT:
        return "float32";
    case QP_DTYPE_DOUBLE:
        return "float64";
    case QP_DTYPE_INT64:
        return "int64";
    case QP_DTYPE_INT32:
        return "int32";
    case QP_DTYPE_INT8:
        return "int8";
    case QP_DTYPE_UINT8:
        return "uint8";
    case QP_DTYPE_BOOL:
        return "bool";
    default:
        return NULL;
    }
}

static enum qp_dtype input_dtype(const struct qp_model *m, const char *name) {
    const struct qp_graph *g = qp_model_graph(m);
    for (size_t i = 0; i < g->n_values; i++)
        if (g->values[i].is_graph_input && g->values[i].name &&
            strcmp(g->values[i].name, name) == 0)
            return g->values[i].dtype;
    return QP_DTYPE_UNDEFINED;
}

/* The spec the script reads: model, threads, counts, inputs with type and dims. */
static enum qp_status ort_spec(const struct ort *o, const char *model_path, size_t n_runs,
                               char **json_out, struct qp_error *err) {
    struct qp_model *m = NULL;
    struct qp_shape *given = NULL, *all = NULL;
    size_t n_all = 0;
    cJSON *spec = NULL;
    enum qp_status st = qp_model_load_file(model_path, NULL, &m, err);
    if (st == QP_OK && !(given = qp_malloc_n(o->shapes.n ? o->shapes.n : 1, sizeof *given)))
        st = qp_error_set(err, QP_ERR_NOMEM, "ort: out of memory");
    for (size_t i = 0; st == QP_OK && i < o->shapes.n; i++) {
        given[i].name = o->shapes.items[i].name;
        given[i].rank = o->shapes.items[i].rank;
        memcpy(given[i].dims, o->shapes.items[i].dims, sizeof given[i].dims);
    }
    if (st == QP_OK) st = qp_bench_input_shapes(m, o->shapes.n, given, &all, &n_all, err);
    cJSON *ins = NULL;
    if (st == QP_OK &&
        (!(spec = cJSON_CreateObject()) || !(ins = cJSON_AddArrayToObject(spec, "inputs"))))
        st = qp_error_set(err, QP_ERR_NOMEM, "ort: out of memory");
    for (size_t i = 0; st == QP_OK && i < n_all; i++) {
        const char *ty = qp_latency_ort_type(input_dtype(m, all[i].name));
        cJSON *e = cJSON_CreateObject(), *dims = NULL;
        if (e) cJSON_AddItemToArray(ins, e);
        if (!ty) {
            st = qp_error_set(err, QP_ERR_UNSUPPORTED, "ort: input '%s' has dtype %s", all[i].name,
                              qp_dtype_name(input_dtype(m, all[i].name)));
        } else if (!e || !cJSON_AddStringToObject(e, "name", all[i].name) ||
                   !cJSON_AddStringToObject(e, "type", ty) ||
                   !(dims = cJSON_AddArrayToObject(e, "dims"))) {
            st = qp_error_set(err, QP_ERR_NOMEM, "ort: out of memory");
        }
        for (int d = 0; st == QP_OK && d < all[i].rank; d++)
            if (!cJSON_AddItemToArray(dims, cJSON_CreateNumber((double)all[i].dims[d])))
                st = qp_error_set(err, QP_ERR_NOMEM, "ort: out of memory");
    }
    if (st == QP_OK && (!cJSON_AddStringToObject(spec, "model", model_path) ||
                        !cJSON_AddNumberToObject(spec, "threads", o->n_threads) ||
                        !cJSON_AddNumberToObject(spec, "warmup", o->warmup) ||
                        !cJSON_AddNumberToObject(spec, "runs", (double)n_runs) ||
                        !(*json_out = cJSON_PrintUnformatted(spec))))
        st = qp_error_set(err, QP_ERR_NOMEM, "ort: out of memory");
    cJSON_Delete(spec);
    free(all);
    free(given);
    qp_model_free(m);
    return st;
}

/* The run times from the last line of `text` that starts with '{'. */
static enum qp_status ort_read(const struct qp_spawn_output *out, size_t n_runs, double *samples_ms,
                               struct qp_error *err) {
    const char *line = NULL;
    for (const char *p = out->text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (*p == '{') line = p;
    cJSON *j = line ? cJSON_Parse(line) : NULL;
    const cJSON *runs = cJSON_GetObjectItemCaseSensitive(j, "run_ms");
    enum qp_status st = QP_OK;
    if (!cJSON_IsArray(runs) || (size_t)cJSON_GetArraySize(runs) != n_runs)
        st = qp_error_set(err, QP_ERR_BAD_INPUT,
                          "ort: no JSON line with %zu run times in the runner's output; its last "
                          "lines:\n%s",
                          n_runs, qp_spawn_tail(out, 8));
    size_t i = 0;
    const cJSON *v = NULL;
    cJSON_ArrayForEach(v, runs) {
        if (st != QP_OK) break;
        if (!cJSON_IsNumber(v))
            st = qp_error_set(err, QP_ERR_BAD_INPUT, "ort: run time %zu is not a number", i);
        else
            samples_ms[i++] = v->valuedouble;
    }
    cJSON_Delete(j);
    return st;
}

static enum qp_status ort_measure(struct qp_latency_backend *base, const char *model_path,
                                  size_t n_runs, double *samples_ms, struct qp_error *err) {
    struct ort *o = (struct ort *)base;
    if (n_runs > INT_MAX)
        return qp_error_set(err, QP_ERR_USAGE, "ort: %zu runs is too many", n_runs);
    char *spec = NULL;
    struct qp_spawn_output out = {0};
    enum qp_status st = ort_spec(o, model_path, n_runs, &spec, err);
    if (st == QP_OK) {
        char *argv[] = {o->node, o->script, "--npm", o->npm, "--spec", spec, NULL};
        st = qp_spawn_capture(argv, &out, err);
    }
    if (st == QP_OK && out.exit_code != 0)
        st = qp_error_set(err, QP_ERR_IO,
                          "ort: '%s %s' on '%s' failed (exit %d); its last "
                          "lines:\n%s",
                          o->node, o->script, model_path, out.exit_code, qp_spawn_tail(&out, 8));
    if (st == QP_OK) st = ort_read(&out, n_runs, samples_ms, err);
    qp_spawn_output_release(&out);
    cJSON_free(spec);
    return st;
}

static void ort_free(struct qp_latency_backend *base) {
    struct ort *o = (struct ort *)base;
    qp_calib_shapes_release(&o->shapes);
    free(o);
}

enum qp_status qp_latency_ort_create(const struct qp_latency_ort_options *opt,
                                     struct qp_latency_backend **out, struct qp_error *err) {
    struct qp_latency_ort_options dflt;
    qp_latency_ort_options_default(&dflt);
    if (!opt) opt = &dflt;
    if (!out) return qp_error_set(err, QP_ERR_USAGE, "ort: NULL argument");
    if (opt->n_threads < 0 || opt->warmup < 0)
        return qp_error_set(err, QP_ERR_USAGE, "ort: n_threads %d and warmup %d must be >= 0",
                            opt->n_threads, opt->warmup);
    struct ort *o = calloc(1, sizeof *o);
    if (!o) return qp_error_set(err, QP_ERR_NOMEM, "ort: out of memory");
    if (opt->shapes && opt->shapes[0] &&
        qp_calib_shapes_parse(opt->shapes, &o->shapes, err) != QP_OK) {
        free(o);
        return qp_error_prefix(err, "ort: shapes: ");
    }
    o->n_threads = opt->n_threads;
    o->warmup = opt->warmup;
    const char *node = opt->node && opt->node[0] ? opt->node : getenv("QP_NODE");
    snprintf(o->node, sizeof o->node, "%s", node && node[0] ? node : "node");
    default_path(opt->script, "QP_ORT_LATENCY_SCRIPT", "src/autotune/ort_latency.js", o->script,
                 sizeof o->script);
    default_path(opt->npm, "QP_ORT_NPM", ".cache/npm", o->npm, sizeof o->npm);
    o->base.name = "ort";
    snprintf(o->base.detail, sizeof o->base.detail, "onnxruntime-node, %d threads%s", o->n_threads,
             o->n_threads ? "" : " (ORT's default)");
    o->base.measure = ort_measure;
    o->base.free = ort_free;
    *out = &o->base;
    return QP_OK;
}
