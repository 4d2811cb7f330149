/* qplace info MODEL [--json]: what a model holds, without reading its external data. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/size.h"
#include "ir/ir.h"
#include "onnx/describe.h"
#include "qplace/dtype.h"
#include "qplace/model.h"

const struct cli_opt cli_info_opts[] = {
    {"json", CLI_BOOL, NULL, "print one JSON object instead of text (keys in docs/cli.md)"},
    {0},
};

const char cli_info_details[] =
    "Loads MODEL without reading external data files and prints its IR version, producer,\n"
    "opset imports, graph inputs and outputs (dtype and shape; symbolic dimensions by name,\n"
    "unknown ones as ?), node counts per op type, initializer count and bytes, parameter count,\n"
    "subgraphs, model-local functions, metadata and external data files.\n";

/* Subgraphs nested deeper than this are counted but not listed (a hostile model could nest
 * thousands deep; printing them helps nobody). */
#define INFO_MAX_DEPTH 32

struct op_count {
    const char *domain;
    const char *op_type;
    uint64_t count;
};

struct info {
    const struct qp_model *m;
    const struct qp_graph *g;
    size_t n_ops;
    struct op_count *ops; /* sorted by count desc, then domain and op type */
    uint64_t n_nodes;     /* live nodes of the top graph */
    uint64_t n_nodes_total;
    uint64_t n_subgraphs_total;
    uint64_t n_inits, init_bytes, n_external_inits, n_init_inputs, n_params;
};

static const char *str_or(const char *s, const char *fallback) {
    return s && s[0] ? s : fallback;
}

static const char *opset_domain(const char *d) {
    return d && d[0] ? d : "ai.onnx";
}

static uint64_t live_nodes(const struct qp_graph *g) {
    uint64_t n = 0;
    for (size_t i = 0; i < g->n_nodes; i++)
        n += !g->nodes[i].dead;
    return n;
}

/* Calls visit(node, attribute, index, subgraph) for every subgraph directly under `g`;
 * index is -1 for a GRAPH attribute, the list position for GRAPHS. */
typedef void (*subgraph_fn)(const struct qp_node *n, const struct qp_attr *a, long index,
                            const struct qp_graph *sub, void *user);

static void each_subgraph(const struct qp_graph *g, subgraph_fn fn, void *user) {
    for (size_t i = 0; i < g->n_nodes; i++) {
        const struct qp_node *n = &g->nodes[i];
        if (n->dead) continue;
        for (int k = 0; k < n->n_attrs; k++) {
            const struct qp_attr *a = &n->attrs[k];
            if (a->type == QP_ATTR_GRAPH && a->g) fn(n, a, -1, a->g, user);
            if (a->type == QP_ATTR_GRAPHS && a->graphs)
                for (size_t j = 0; j < a->n; j++)
                    if (a->graphs[j]) fn(n, a, (long)j, a->graphs[j], user);
        }
    }
}

struct totals {
    uint64_t nodes, subgraphs;
    int depth;
};

static void count_subgraph(const struct qp_node *n, const struct qp_attr *a, long index,
                           const struct qp_graph *sub, void *user) {
    struct totals *t = user;
    t->subgraphs++;
    t->nodes += live_nodes(sub);
    if (t->depth >= 1000) return; /* the loader bounds nesting; this only guards the stack */
    t->depth++;
    each_subgraph(sub, count_subgraph, t);
    t->depth--;
}

static int op_cmp(const void *pa, const void *pb) {
    const struct op_count *a = pa, *b = pb;
    if (a->count != b->count) return a->count > b->count ? -1 : 1;
    int c = strcmp(a->op_type, b->op_type);
    if (c) return c;
    return strcmp(a->domain, b->domain);
}

static uint64_t tensor_bytes(const struct qp_tensor *t) {
    if (t->dtype == QP_DTYPE_STRING) {
        uint64_t n = 0;
        if (t->strings)
            for (uint64_t i = 0; i < t->numel; i++)
                n += t->strings[i].len;
        return n;
    }
    int ok;
    size_t nb = qp_dtype_nbytes(t->dtype, t->numel, &ok);
    return ok ? nb : t->nbytes;
}

static enum qp_status info_collect(struct info *in, const struct qp_model *m,
                                   struct qp_error *err) {
    memset(in, 0, sizeof *in);
    in->m = m;
    in->g = m->graph;
    const struct qp_graph *g = m->graph;
    if (!g) return qp_error_set(err, QP_ERR_INTERNAL, "info: model has no graph");
    in->ops = qp_malloc_n(g->n_nodes, sizeof *in->ops);
    if (!in->ops) return qp_error_set(err, QP_ERR_NOMEM, "info: out of memory");
    for (size_t i = 0; i < g->n_nodes; i++) {
        const struct qp_node *n = &g->nodes[i];
        if (n->dead) continue;
        in->n_nodes++;
        const char *dom = n->domain ? n->domain : "";
        const char *op = n->op_type ? n->op_type : "";
        if (strcmp(dom, "ai.onnx") == 0) dom = "";
        size_t k = 0;
        while (k < in->n_ops && (strcmp(in->ops[k].op_type, op) || strcmp(in->ops[k].domain, dom)))
            k++;
        if (k == in->n_ops) in->ops[in->n_ops++] = (struct op_count){dom, op, 0};
        in->ops[k].count++;
    }
    qsort(in->ops, in->n_ops, sizeof *in->ops, op_cmp);

    struct totals t = {0, 0, 0};
    each_subgraph(g, count_subgraph, &t);
    in->n_nodes_total = in->n_nodes + t.nodes;
    in->n_subgraphs_total = t.subgraphs;

    in->n_inits = g->n_inits;
    for (size_t i = 0; i < g->n_inits; i++) {
        const struct qp_tensor *ti = &g->inits[i];
        in->init_bytes += tensor_bytes(ti);
        if (ti->external_location) in->n_external_inits++;
        if (qp_dtype_traits(ti->dtype)->is_float) in->n_params += ti->numel;
    }
    for (size_t i = 0; i < g->n_inputs; i++) {
        int v = g->inputs[i];
        if (v >= 0 && (size_t)v < g->n_values && g->values[v].initializer >= 0) in->n_init_inputs++;
    }
    return QP_OK;
}

static int is_init_input(const struct qp_graph *g, int v) {
    return v >= 0 && (size_t)v < g->n_values && g->values[v].initializer >= 0;
}

/* The value's type: "tensor" for dense tensors, else the described TypeProto. */
static const char *value_type(const struct qp_value *v, char *buf, size_t size) {
    if (v->kind == QP_VALUE_TENSOR) return "tensor";
    qp_onnx_describe_type(v->origin_type, buf, size);
    return buf;
}

/* ---- text -------------------------------------------------------------------------------- */

/* Model strings are untrusted: control characters would let a file rewrite the terminal. */
static void put_clean(FILE *f, const char *s) {
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        fputc(c < 0x20 || c == 0x7f ? '?' : c, f);
    }
}

static void put_u64(FILE *f, uint64_t v) {
    /* thousands separators: 1,238,200 */
    char digits[32];
    int n = snprintf(digits, sizeof digits, "%llu", (unsigned long long)v);
    for (int i = 0; i < n; i++) {
        if (i && (n - i) % 3 == 0) fputc(',', f);
        fputc(digits[i], f);
    }
}

static void put_shape(FILE *f, const struct qp_value *v) {
    if (v->rank < 0 || (v->rank > 0 && !v->dims)) {
        fputs("?", f);
        return;
    }
    fputc('[', f);
    for (int i = 0; i < v->rank; i++) {
        if (i) fputs(", ", f);
        if (v->dims[i].value >= 0)
            fprintf(f, "%lld", (long long)v->dims[i].value);
        else if (v->dims[i].param && v->dims[i].param[0])
            put_clean(f, v->dims[i].param);
        else
            fputc('?', f);
    }
    fputc(']', f);
}

static const char *value_dtype(const struct qp_value *v) {
    if (v->dtype == QP_DTYPE_UNDEFINED) return "?";
    return qp_dtype_name(v->dtype);
}

static void put_values(FILE *f, const char *title, const struct qp_graph *g, const int *idx,
                       size_t n, int skip_inits) {
    size_t shown = 0, width = 0;
    for (size_t i = 0; i < n; i++) {
        int vi = idx[i];
        if (vi < 0 || (size_t)vi >= g->n_values || (skip_inits && is_init_input(g, vi))) continue;
        shown++;
        size_t len = g->values[vi].name ? strlen(g->values[vi].name) : 0;
        if (len > width) width = len;
    }
    if (width > 40) width = 40;
    fprintf(f, "%s (%zu)\n", title, shown);
    for (size_t i = 0; i < n; i++) {
        int vi = idx[i];
        if (vi < 0 || (size_t)vi >= g->n_values || (skip_inits && is_init_input(g, vi))) continue;
        const struct qp_value *v = &g->values[vi];
        size_t len = v->name ? strlen(v->name) : 0;
        fputs("  ", f);
        put_clean(f, v->name);
        fprintf(f, "%*s  ", (int)(len < width ? width - len : 0), "");
        if (v->kind == QP_VALUE_TENSOR) {
            fprintf(f, "%-8s ", value_dtype(v));
            put_shape(f, v);
        } else {
            char type[256];
            put_clean(f, value_type(v, type, sizeof type));
        }
        fputc('\n', f);
    }
}

struct text_walk {
    FILE *f;
    int depth;
};

static void put_node_ref(FILE *f, const struct qp_node *n) {
    fputs(n->op_type ? n->op_type : "?", f);
    fputs(" '", f);
    put_clean(f, n->name);
    fputs("'", f);
}

static void text_subgraph(const struct qp_node *n, const struct qp_attr *a, long index,
                          const struct qp_graph *sub, void *user) {
    struct text_walk *w = user;
    FILE *f = w->f;
    if (w->depth > INFO_MAX_DEPTH) return;
    fprintf(f, "%*s", 2 * w->depth, "");
    if (w->depth == INFO_MAX_DEPTH) {
        fputs("... (deeper subgraphs not listed)\n", f);
        return;
    }
    put_node_ref(f, n);
    fputs(" .", f);
    put_clean(f, a->name);
    if (index >= 0) fprintf(f, "[%ld]", index);
    fputs(": ", f);
    uint64_t nn = live_nodes(sub);
    put_u64(f, nn);
    fputs(nn == 1 ? " node\n" : " nodes\n", f);
    w->depth++;
    each_subgraph(sub, text_subgraph, w);
    w->depth--;
}

static void print_text(FILE *f, const struct info *in, const char *path) {
    const struct qp_model *m = in->m;
    const struct qp_graph *g = in->g;
    fputs("model          ", f);
    put_clean(f, path);
    fprintf(f, "\nir_version     %lld\n", (long long)m->ir_version);
    fputs("producer       ", f);
    if (!str_or(m->producer_name, NULL) && !str_or(m->producer_version, NULL)) {
        fputs("-", f);
    } else {
        put_clean(f, m->producer_name);
        if (str_or(m->producer_version, NULL)) {
            fputc(' ', f);
            put_clean(f, m->producer_version);
        }
    }
    fputs("\ndomain         ", f);
    put_clean(f, str_or(m->domain, "-"));
    fprintf(f, "\nmodel_version  %lld\n", (long long)m->model_version);
    fputs("opset_imports  ", f);
    for (size_t i = 0; i < m->n_opsets; i++) {
        if (i) fputs(", ", f);
        put_clean(f, opset_domain(m->opsets[i].domain));
        fprintf(f, " %lld", (long long)m->opsets[i].version);
    }
    if (!m->n_opsets) fputs("-", f);
    fputs("\ngraph          ", f);
    put_clean(f, str_or(g->name, "-"));
    fputc('\n', f);

    put_values(f, "inputs", g, g->inputs, g->n_inputs, 1);
    put_values(f, "outputs", g, g->outputs, g->n_outputs, 0);

    fputs("nodes          ", f);
    put_u64(f, in->n_nodes);
    if (in->n_subgraphs_total) {
        fputs(" (", f);
        put_u64(f, in->n_nodes_total);
        fputs(" with subgraphs)", f);
    }
    fprintf(f, "\nop_types (%zu)\n", in->n_ops);
    for (size_t i = 0; i < in->n_ops; i++) {
        char name[64];
        const struct op_count *o = &in->ops[i];
        fputs("  ", f);
        int len = 0;
        if (o->domain[0]) {
            put_clean(f, o->domain);
            fputc(':', f);
            len += (int)strlen(o->domain) + 1;
        }
        put_clean(f, o->op_type);
        len += (int)strlen(o->op_type);
        snprintf(name, sizeof name, "%*s", len < 24 ? 24 - len : 1, "");
        fputs(name, f);
        put_u64(f, o->count);
        fputc('\n', f);
    }

    fputs("initializers   ", f);
    put_u64(f, in->n_inits);
    fputs(" (", f);
    put_u64(f, in->init_bytes);
    fputs(" bytes", f);
    if (in->init_bytes >= 1024 * 1024)
        fprintf(f, ", %.1f MiB", (double)in->init_bytes / (1024.0 * 1024.0));
    else if (in->init_bytes >= 1024)
        fprintf(f, ", %.1f KiB", (double)in->init_bytes / 1024.0);
    if (in->n_external_inits) {
        fputs("; ", f);
        put_u64(f, in->n_external_inits);
        fputs(" external", f);
    }
    if (in->n_init_inputs) {
        fputs("; ", f);
        put_u64(f, in->n_init_inputs);
        fputs(" also listed as graph inputs", f);
    }
    fputs(")\nparameters     ", f);
    put_u64(f, in->n_params);
    fputc('\n', f);

    fputs("subgraphs      ", f);
    put_u64(f, in->n_subgraphs_total);
    fputc('\n', f);
    struct text_walk w = {f, 1};
    each_subgraph(g, text_subgraph, &w);

    fprintf(f, "functions      %zu\n", m->n_functions);
    for (size_t i = 0; i < m->n_functions; i++) {
        const char *domain, *name;
        size_t n_nodes;
        if (!m->functions || !qp_onnx_function_info(m->functions[i], &domain, &name, &n_nodes))
            continue;
        fputs("  ", f);
        if (domain && domain[0]) {
            put_clean(f, domain);
            fputc(':', f);
        }
        put_clean(f, name);
        fprintf(f, ": %zu node%s\n", n_nodes, n_nodes == 1 ? "" : "s");
    }
    fprintf(f, "metadata       %zu\n", m->n_metadata);
    for (size_t i = 0; i < m->n_metadata; i++) {
        fputs("  ", f);
        put_clean(f, m->metadata[i].key);
        fputs(" = ", f);
        put_clean(f, m->metadata[i].value);
        fputc('\n', f);
    }
    fprintf(f, "external_data  %zu\n", m->n_external_files);
    for (size_t i = 0; i < m->n_external_files; i++) {
        fputs("  ", f);
        put_clean(f, m->external_files[i]);
        fputc('\n', f);
    }
}

/* ---- JSON -------------------------------------------------------------------------------- */

/* cJSON reports allocation failure by returning NULL; every builder below returns NULL when
 * any part failed, and the caller maps that to QP_ERR_NOMEM. */

static int add_str(cJSON *o, const char *key, const char *s) {
    return cJSON_AddStringToObject(o, key, s ? s : "") != NULL;
}

static int add_num(cJSON *o, const char *key, double v) {
    return cJSON_AddNumberToObject(o, key, v) != NULL;
}

static cJSON *json_value(const struct qp_value *v) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    char type[256];
    int ok = add_str(o, "name", v->name) && add_str(o, "type", value_type(v, type, sizeof type));
    if (v->kind != QP_VALUE_TENSOR || v->dtype == QP_DTYPE_UNDEFINED)
        ok = ok && cJSON_AddNullToObject(o, "dtype");
    else
        ok = ok && cJSON_AddStringToObject(o, "dtype", qp_dtype_name(v->dtype));
    if (v->kind != QP_VALUE_TENSOR || v->rank < 0 || (v->rank > 0 && !v->dims)) {
        ok = ok && cJSON_AddNullToObject(o, "shape");
    } else {
        cJSON *shape = cJSON_AddArrayToObject(o, "shape");
        ok = ok && shape;
        for (int i = 0; ok && i < v->rank; i++) {
            cJSON *d;
            if (v->dims[i].value >= 0)
                d = cJSON_CreateNumber((double)v->dims[i].value);
            else if (v->dims[i].param && v->dims[i].param[0])
                d = cJSON_CreateString(v->dims[i].param);
            else
                d = cJSON_CreateNull();
            ok = d != NULL;
            if (d) cJSON_AddItemToArray(shape, d);
        }
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static int json_values(cJSON *root, const char *key, const struct qp_graph *g, const int *idx,
                       size_t n, int skip_inits) {
    cJSON *arr = cJSON_AddArrayToObject(root, key);
    if (!arr) return 0;
    for (size_t i = 0; i < n; i++) {
        int vi = idx[i];
        if (vi < 0 || (size_t)vi >= g->n_values || (skip_inits && is_init_input(g, vi))) continue;
        cJSON *v = json_value(&g->values[vi]);
        if (!v) return 0;
        cJSON_AddItemToArray(arr, v);
    }
    return 1;
}

struct json_walk {
    cJSON *arr;
    int depth;
    int ok;
};

static void json_subgraph(const struct qp_node *n, const struct qp_attr *a, long index,
                          const struct qp_graph *sub, void *user) {
    struct json_walk *w = user;
    if (!w->ok || w->depth >= INFO_MAX_DEPTH) return;
    cJSON *o = cJSON_CreateObject();
    if (!o) {
        w->ok = 0;
        return;
    }
    cJSON_AddItemToArray(w->arr, o);
    int ok = add_str(o, "node", n->name) && add_str(o, "op_type", n->op_type) &&
             add_str(o, "attribute", a->name) &&
             (index >= 0 ? add_num(o, "index", (double)index)
                         : cJSON_AddNullToObject(o, "index") != NULL) &&
             add_str(o, "graph_name", sub->name) && add_num(o, "n_nodes", (double)live_nodes(sub));
    cJSON *children = ok ? cJSON_AddArrayToObject(o, "subgraphs") : NULL;
    if (!children) {
        w->ok = 0;
        return;
    }
    struct json_walk inner = {children, w->depth + 1, 1};
    each_subgraph(sub, json_subgraph, &inner);
    w->ok = inner.ok;
}

static cJSON *build_json(const struct info *in, const char *path) {
    const struct qp_model *m = in->m;
    const struct qp_graph *g = in->g;
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    int ok = add_str(root, "path", path) && add_num(root, "ir_version", (double)m->ir_version) &&
             add_str(root, "producer_name", m->producer_name) &&
             add_str(root, "producer_version", m->producer_version) &&
             add_str(root, "domain", m->domain) &&
             add_num(root, "model_version", (double)m->model_version);
    cJSON *arr = ok ? cJSON_AddArrayToObject(root, "opset_imports") : NULL;
    ok = arr != NULL;
    for (size_t i = 0; ok && i < m->n_opsets; i++) {
        cJSON *o = cJSON_CreateObject();
        ok = o != NULL;
        if (!o) break;
        cJSON_AddItemToArray(arr, o);
        ok = add_str(o, "domain", opset_domain(m->opsets[i].domain)) &&
             add_num(o, "version", (double)m->opsets[i].version);
    }
    ok = ok && add_str(root, "graph_name", g->name);
    ok = ok && json_values(root, "inputs", g, g->inputs, g->n_inputs, 1);
    ok = ok && json_values(root, "outputs", g, g->outputs, g->n_outputs, 0);
    ok = ok && add_num(root, "n_nodes", (double)in->n_nodes) &&
         add_num(root, "n_nodes_total", (double)in->n_nodes_total);
    arr = ok ? cJSON_AddArrayToObject(root, "op_types") : NULL;
    ok = arr != NULL;
    for (size_t i = 0; ok && i < in->n_ops; i++) {
        cJSON *o = cJSON_CreateObject();
        ok = o != NULL;
        if (!o) break;
        cJSON_AddItemToArray(arr, o);
        ok = add_str(o, "domain", in->ops[i].domain) && add_str(o, "op_type", in->ops[i].op_type) &&
             add_num(o, "count", (double)in->ops[i].count);
    }
    cJSON *inits = ok ? cJSON_AddObjectToObject(root, "initializers") : NULL;
    ok = inits && add_num(inits, "count", (double)in->n_inits) &&
         add_num(inits, "bytes", (double)in->init_bytes) &&
         add_num(inits, "external", (double)in->n_external_inits) &&
         add_num(inits, "listed_as_inputs", (double)in->n_init_inputs) &&
         add_num(root, "n_parameters", (double)in->n_params) &&
         add_num(root, "n_subgraphs_total", (double)in->n_subgraphs_total);
    arr = ok ? cJSON_AddArrayToObject(root, "subgraphs") : NULL;
    if (arr) {
        struct json_walk w = {arr, 0, 1};
        each_subgraph(g, json_subgraph, &w);
        ok = w.ok;
    } else {
        ok = 0;
    }
    arr = ok ? cJSON_AddArrayToObject(root, "functions") : NULL;
    ok = arr != NULL;
    for (size_t i = 0; ok && i < m->n_functions; i++) {
        const char *domain, *name;
        size_t n_nodes;
        if (!m->functions || !qp_onnx_function_info(m->functions[i], &domain, &name, &n_nodes))
            continue;
        cJSON *o = cJSON_CreateObject();
        ok = o != NULL;
        if (!o) break;
        cJSON_AddItemToArray(arr, o);
        ok = add_str(o, "domain", domain) && add_str(o, "name", name) &&
             add_num(o, "n_nodes", (double)n_nodes);
    }
    arr = ok ? cJSON_AddArrayToObject(root, "metadata") : NULL;
    ok = arr != NULL;
    for (size_t i = 0; ok && i < m->n_metadata; i++) {
        cJSON *o = cJSON_CreateObject();
        ok = o != NULL;
        if (!o) break;
        cJSON_AddItemToArray(arr, o);
        ok = add_str(o, "key", m->metadata[i].key) && add_str(o, "value", m->metadata[i].value);
    }
    arr = ok ? cJSON_AddArrayToObject(root, "external_data_files") : NULL;
    ok = arr != NULL;
    for (size_t i = 0; ok && i < m->n_external_files; i++) {
        cJSON *s = cJSON_CreateString(m->external_files[i] ? m->external_files[i] : "");
        ok = s != NULL;
        if (s) cJSON_AddItemToArray(arr, s);
    }
    if (!ok) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

/* ---- command ----------------------------------------------------------------------------- */

int cli_info_run(const struct cli_args *args) {
    struct qp_error err = {0};
    const char *path = args->pos[0];
    struct qp_load_options lo = {0};
    lo.skip_external_data = 1;
    struct qp_model *m = NULL;
    struct info in = {0};
    int rc = 0;
    if (qp_model_load_file(path, &lo, &m, &err) != QP_OK) {
        rc = cli_fail(&err);
        goto done;
    }
    if (info_collect(&in, m, &err) != QP_OK) {
        rc = cli_fail(&err);
        goto done;
    }
    if (cli_has(args, "json")) {
        cJSON *root = build_json(&in, path);
        char *text = root ? cJSON_Print(root) : NULL;
        cJSON_Delete(root);
        if (!text) {
            qp_error_set(&err, QP_ERR_NOMEM, "info: out of memory building JSON");
            rc = cli_fail(&err);
            goto done;
        }
        fputs(text, stdout);
        fputc('\n', stdout);
        cJSON_free(text);
    } else {
        print_text(stdout, &in, path);
    }
    if (fflush(stdout) != 0 || ferror(stdout)) {
        qp_error_set(&err, QP_ERR_IO, "info: cannot write to standard output");
        rc = cli_fail(&err);
    }
done:
    free(in.ops);
    qp_model_free(m);
    return rc;
}
