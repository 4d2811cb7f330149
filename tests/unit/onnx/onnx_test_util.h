/* Helpers shared by the src/onnx unit tests: data paths, temp folders, deep model comparison. */
#ifndef QP_TEST_ONNX_UTIL_H
#define QP_TEST_ONNX_UTIL_H

#include <ftw.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <setjmp.h>

#include <cmocka.h>

#include "ir/ir.h"
#include "onnx.pb-c.h"
#include "onnx/onnx_io.h"
#include "qplace/model.h"

#define ONNX_DATA QP_TEST_DATA_DIR "/onnx/"

static inline char *tu_fmt(const char *fmt, ...) {
    static char bufs[8][4096];
    static int next;
    char *b = bufs[next++ % 8];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b, sizeof bufs[0], fmt, ap);
    va_end(ap);
    return b;
}

/* Loads tests/data/onnx/<name>; fails the test with the loader's message on error. */
static inline struct qp_model *tu_load(const char *path) {
    struct qp_error err = {0};
    struct qp_model *m = NULL;
    enum qp_status st = qp_model_load_file(path, NULL, &m, &err);
    if (st != QP_OK) fail_msg("loading %s: %s", path, err.msg);
    return m;
}

/* Expects loading `path` to fail with `status` and a message containing every NULL-terminated
 * `needle`. */
static inline void tu_expect_load_error(const char *path, enum qp_status status, ...) {
    struct qp_error err = {0};
    struct qp_model *m = NULL;
    enum qp_status st = qp_model_load_file(path, NULL, &m, &err);
    if (st == QP_OK) {
        qp_model_free(m);
        fail_msg("%s: loaded, expected %s", path, qp_status_name(status));
    }
    assert_null(m);
    if (st != status)
        fail_msg("%s: got %s (%s), expected %s", path, qp_status_name(st), err.msg,
                 qp_status_name(status));
    va_list ap;
    va_start(ap, status);
    for (const char *s; (s = va_arg(ap, const char *));)
        if (!strstr(err.msg, s)) fail_msg("%s: message '%s' lacks '%s'", path, err.msg, s);
    va_end(ap);
}

static inline int tu_rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static inline char *tu_mkdtemp(void) {
    char *t = strdup("/tmp/qp-onnx-test-XXXXXX");
    assert_non_null(t);
    assert_non_null(mkdtemp(t));
    return t;
}

static inline void tu_rmtree(char *dir) {
    if (!dir) return;
    nftw(dir, tu_rm_one, 16, FTW_DEPTH | FTW_PHYS);
    free(dir);
}

/* Number of entries in a folder (without . and ..). */
static inline int tu_count_entries(const char *dir) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "ls -A '%s' | wc -l", dir);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    int n = -1;
    if (fscanf(p, "%d", &n) != 1) n = -1;
    pclose(p);
    return n;
}

static inline uint8_t *tu_read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *size = (size_t)n;
    return b;
}

static inline void tu_write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) fail_msg("cannot create %s", path);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static inline void tu_copy_file(const char *from, const char *to) {
    size_t n;
    uint8_t *b = tu_read_file(from, &n);
    tu_write_file(to, b, n);
    free(b);
}

static inline int tu_exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* ---- deep comparison ------------------------------------------------------------------------ */

static inline void tu_cmp_str(const char *what, const char *a, const char *b) {
    if (strcmp(a ? a : "", b ? b : ""))
        fail_msg("%s differs: '%s' vs '%s'", what, a ? a : "", b ? b : "");
}

static inline void tu_cmp_unknown(const char *what, const void *oa, const void *ob) {
    const ProtobufCMessage *a = oa, *b = ob;
    size_t na = a ? a->n_unknown_fields : 0, nb = b ? b->n_unknown_fields : 0;
    if (na != nb) fail_msg("%s: %zu vs %zu unknown fields", what, na, nb);
    for (size_t i = 0; i < na; i++) {
        const ProtobufCMessageUnknownField *x = &a->unknown_fields[i], *y = &b->unknown_fields[i];
        if (x->tag != y->tag || x->wire_type != y->wire_type || x->len != y->len ||
            memcmp(x->data, y->data, x->len))
            fail_msg("%s: unknown field %zu differs", what, i);
    }
}

static inline void tu_cmp_msg_bytes(const char *what, const void *a, const void *b) {
    if (!a && !b) return;
    if (!a || !b) fail_msg("%s: present in one model only", what);
    size_t na = protobuf_c_message_get_packed_size(a), nb = protobuf_c_message_get_packed_size(b);
    if (na != nb) fail_msg("%s: %zu vs %zu packed bytes", what, na, nb);
    uint8_t *x = malloc(na + 1), *y = malloc(nb + 1);
    protobuf_c_message_pack(a, x);
    protobuf_c_message_pack(b, y);
    int same = !memcmp(x, y, na);
    free(x);
    free(y);
    if (!same) fail_msg("%s: packed bytes differ", what);
}

static inline void tu_cmp_tensor(const char *what, const struct qp_tensor *a,
                                 const struct qp_tensor *b) {
    tu_cmp_str(tu_fmt("%s name", what), a->name, b->name);
    tu_cmp_str(tu_fmt("%s doc", what), a->doc_string, b->doc_string);
    if (a->dtype != b->dtype) fail_msg("%s: dtype %d vs %d", what, a->dtype, b->dtype);
    if (a->rank != b->rank) fail_msg("%s: rank %d vs %d", what, a->rank, b->rank);
    for (int i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i]) fail_msg("%s: dim %d differs", what, i);
    if (a->numel != b->numel || a->nbytes != b->nbytes)
        fail_msg("%s: numel/nbytes %llu/%zu vs %llu/%zu", what, (unsigned long long)a->numel,
                 a->nbytes, (unsigned long long)b->numel, b->nbytes);
    if (a->dtype == QP_DTYPE_STRING) {
        for (uint64_t i = 0; i < a->numel; i++)
            if (a->strings[i].len != b->strings[i].len ||
                (a->strings[i].len &&
                 memcmp(a->strings[i].data, b->strings[i].data, a->strings[i].len)))
                fail_msg("%s: string %llu differs", what, (unsigned long long)i);
    } else if (a->nbytes && (!a->data || !b->data || memcmp(a->data, b->data, a->nbytes))) {
        fail_msg("%s: data bytes differ", what);
    }
}

static inline void tu_cmp_graph(const char *what, const struct qp_graph *a,
                                const struct qp_graph *b, int cmp_unknown);

static inline void tu_cmp_value(const char *what, const struct qp_graph *ga, int va,
                                const struct qp_graph *gb, int vb) {
    const struct qp_value *a = &ga->values[va], *b = &gb->values[vb];
    tu_cmp_str(tu_fmt("%s name", what), a->name, b->name);
    tu_cmp_str(tu_fmt("%s '%s' doc", what, a->name), a->doc_string, b->doc_string);
    if (a->kind != b->kind || a->dtype != b->dtype || a->rank != b->rank)
        fail_msg("%s '%s': kind/dtype/rank %d/%d/%d vs %d/%d/%d", what, a->name, a->kind, a->dtype,
                 a->rank, b->kind, b->dtype, b->rank);
    for (int i = 0; i < a->rank; i++) {
        if (a->dims[i].value != b->dims[i].value)
            fail_msg("%s '%s': dim %d value differs", what, a->name, i);
        tu_cmp_str(tu_fmt("%s '%s' dim %d param", what, a->name, i), a->dims[i].param,
                   b->dims[i].param);
    }
    tu_cmp_msg_bytes(tu_fmt("%s '%s' type", what, a->name), a->origin_type, b->origin_type);
}

static inline void tu_cmp_attr(const char *what, const struct qp_attr *a, const struct qp_attr *b,
                               int cmp_unknown) {
    tu_cmp_str(tu_fmt("%s name", what), a->name, b->name);
    tu_cmp_str(tu_fmt("%s ref", what), a->ref_attr_name, b->ref_attr_name);
    tu_cmp_str(tu_fmt("%s doc", what), a->doc_string, b->doc_string);
    if (a->type != b->type) fail_msg("%s: type %d vs %d", what, a->type, b->type);
    if (a->n != b->n) fail_msg("%s: n %zu vs %zu", what, a->n, b->n);
    switch (a->type) {
    case QP_ATTR_FLOAT:
        if (memcmp(&a->f, &b->f, sizeof a->f)) fail_msg("%s: f differs", what);
        break;
    case QP_ATTR_INT:
        if (a->i != b->i) fail_msg("%s: i differs", what);
        break;
    case QP_ATTR_STRING:
        if (a->s.len != b->s.len || (a->s.len && memcmp(a->s.data, b->s.data, a->s.len)))
            fail_msg("%s: s differs", what);
        break;
    case QP_ATTR_TENSOR:
        tu_cmp_tensor(tu_fmt("%s tensor", what), a->t, b->t);
        break;
    case QP_ATTR_GRAPH:
        tu_cmp_graph(tu_fmt("%s graph", what), a->g, b->g, cmp_unknown);
        break;
    case QP_ATTR_FLOATS:
        if (a->n && memcmp(a->floats, b->floats, a->n * sizeof *a->floats))
            fail_msg("%s: floats differ", what);
        break;
    case QP_ATTR_INTS:
        if (a->n && memcmp(a->ints, b->ints, a->n * sizeof *a->ints))
            fail_msg("%s: ints differ", what);
        break;
    case QP_ATTR_STRINGS:
        for (size_t i = 0; i < a->n; i++)
            if (a->strings[i].len != b->strings[i].len ||
                (a->strings[i].len &&
                 memcmp(a->strings[i].data, b->strings[i].data, a->strings[i].len)))
                fail_msg("%s: strings[%zu] differ", what, i);
        break;
    case QP_ATTR_TENSORS:
        for (size_t i = 0; i < a->n; i++)
            tu_cmp_tensor(tu_fmt("%s tensor %zu", what, i), a->tensors[i], b->tensors[i]);
        break;
    case QP_ATTR_GRAPHS:
        for (size_t i = 0; i < a->n; i++)
            tu_cmp_graph(tu_fmt("%s graph %zu", what, i), a->graphs[i], b->graphs[i], cmp_unknown);
        break;
    default:
        break;
    }
    if (cmp_unknown) tu_cmp_unknown(what, a->origin, b->origin);
}

static inline void tu_cmp_graph(const char *what, const struct qp_graph *a,
                                const struct qp_graph *b, int cmp_unknown) {
    tu_cmp_str(tu_fmt("%s name", what), a->name, b->name);
    tu_cmp_str(tu_fmt("%s doc", what), a->doc_string, b->doc_string);
    if (cmp_unknown) tu_cmp_unknown(tu_fmt("graph %s", what), a->origin, b->origin);
    if (a->n_topo != b->n_topo) fail_msg("%s: %zu vs %zu nodes", what, a->n_topo, b->n_topo);
    for (size_t k = 0; k < a->n_topo; k++) {
        const struct qp_node *x = &a->nodes[a->topo[k]], *y = &b->nodes[b->topo[k]];
        const char *nw = tu_fmt("%s node '%s'", what, x->name);
        tu_cmp_str(tu_fmt("%s name", nw), x->name, y->name);
        tu_cmp_str(tu_fmt("%s op", nw), x->op_type, y->op_type);
        tu_cmp_str(tu_fmt("%s domain", nw), x->domain, y->domain);
        tu_cmp_str(tu_fmt("%s doc", nw), x->doc_string, y->doc_string);
        if (x->n_inputs != y->n_inputs || x->n_outputs != y->n_outputs || x->n_attrs != y->n_attrs)
            fail_msg("%s: input/output/attr counts differ", nw);
        for (int i = 0; i < x->n_inputs; i++)
            tu_cmp_str(tu_fmt("%s input %d", nw, i),
                       x->inputs[i] >= 0 ? a->values[x->inputs[i]].name : "",
                       y->inputs[i] >= 0 ? b->values[y->inputs[i]].name : "");
        for (int i = 0; i < x->n_outputs; i++)
            tu_cmp_str(tu_fmt("%s output %d", nw, i),
                       x->outputs[i] >= 0 ? a->values[x->outputs[i]].name : "",
                       y->outputs[i] >= 0 ? b->values[y->outputs[i]].name : "");
        for (int i = 0; i < x->n_attrs; i++)
            tu_cmp_attr(tu_fmt("%s attr '%s'", nw, x->attrs[i].name), &x->attrs[i], &y->attrs[i],
                        cmp_unknown);
        if (cmp_unknown) tu_cmp_unknown(nw, x->origin, y->origin);
    }
    if (a->n_inits != b->n_inits) fail_msg("%s: initializer counts differ", what);
    for (size_t i = 0; i < a->n_inits; i++)
        tu_cmp_tensor(tu_fmt("%s initializer %zu", what, i), &a->inits[i], &b->inits[i]);
    if (a->n_inputs != b->n_inputs || a->n_outputs != b->n_outputs ||
        a->n_value_info != b->n_value_info)
        fail_msg("%s: input/output/value_info counts differ", what);
    for (size_t i = 0; i < a->n_inputs; i++)
        tu_cmp_value(tu_fmt("%s input", what), a, a->inputs[i], b, b->inputs[i]);
    for (size_t i = 0; i < a->n_outputs; i++)
        tu_cmp_value(tu_fmt("%s output", what), a, a->outputs[i], b, b->outputs[i]);
    for (size_t i = 0; i < a->n_value_info; i++)
        tu_cmp_value(tu_fmt("%s value_info", what), a, a->value_info[i], b, b->value_info[i]);
}

/* Everything the loader reads must match. `cmp_unknown`: also unknown fields of the origins. */
static inline void tu_cmp_models(const struct qp_model *a, const struct qp_model *b,
                                 int cmp_unknown) {
    if (a->ir_version != b->ir_version) fail_msg("ir_version differs");
    tu_cmp_str("producer_name", a->producer_name, b->producer_name);
    tu_cmp_str("producer_version", a->producer_version, b->producer_version);
    tu_cmp_str("domain", a->domain, b->domain);
    tu_cmp_str("model doc", a->doc_string, b->doc_string);
    if (a->model_version != b->model_version) fail_msg("model_version differs");
    if (a->n_opsets != b->n_opsets) fail_msg("opset counts differ");
    for (size_t i = 0; i < a->n_opsets; i++) {
        tu_cmp_str("opset domain", a->opsets[i].domain, b->opsets[i].domain);
        if (a->opsets[i].version != b->opsets[i].version) fail_msg("opset version differs");
    }
    if (a->n_metadata != b->n_metadata) fail_msg("metadata counts differ");
    for (size_t i = 0; i < a->n_metadata; i++) {
        tu_cmp_str("metadata key", a->metadata[i].key, b->metadata[i].key);
        tu_cmp_str("metadata value", a->metadata[i].value, b->metadata[i].value);
    }
    if (a->n_functions != b->n_functions) fail_msg("function counts differ");
    for (size_t i = 0; i < a->n_functions; i++)
        tu_cmp_msg_bytes(tu_fmt("function %zu", i), a->functions[i], b->functions[i]);
    if (cmp_unknown) tu_cmp_unknown("model", a->proto, b->proto);
    tu_cmp_graph("main", a->graph, b->graph, cmp_unknown);
}

#endif
