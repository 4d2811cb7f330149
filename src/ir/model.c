/* Model-level IR: creation, ownership of buffers, release. */
#include <stdlib.h>
#include <string.h>

#include "core/size.h"
#include "core/arena.h"
#include "ir/ir.h"

struct qp_model *qp_model_create(void) {
    struct qp_model *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->arena = qp_arena_create();
    if (!m->arena) goto fail;
    m->graph = qp_graph_create(m, NULL);
    if (!m->graph) goto fail;
    return m;
fail:
    qp_model_free(m);
    return NULL;
}

void qp_model_free(struct qp_model *m) {
    if (!m) return;
    for (size_t i = 0; i < m->n_graphs; i++)
        qp_graph_release(m->graphs[i]);
    free(m->graphs);
    for (size_t i = 0; i < m->n_owned; i++)
        free(m->owned[i]);
    free(m->owned);
    if (m->proto && m->proto_free) m->proto_free(m->proto);
    qp_arena_free(m->arena);
    free(m);
}

struct qp_graph *qp_model_graph(const struct qp_model *m) {
    return m ? m->graph : NULL;
}

int64_t qp_model_opset(const struct qp_model *m, const char *domain) {
    int want_onnx = qp_domain_is_onnx(domain);
    for (size_t i = 0; i < m->n_opsets; i++) {
        const char *d = m->opsets[i].domain ? m->opsets[i].domain : "";
        int is_onnx = qp_domain_is_onnx(d);
        if (want_onnx ? is_onnx : !strcmp(d, domain)) return m->opsets[i].version;
    }
    return 0;
}

enum qp_status qp_model_own(struct qp_model *m, void *p, struct qp_error *err) {
    if (m->n_owned == m->cap_owned) {
        size_t cap = m->cap_owned ? m->cap_owned * 2 : 16;
        void **owned = qp_realloc_n(m->owned, cap, sizeof *owned);
        if (!owned) {
            free(p);
            return qp_error_set(err, QP_ERR_NOMEM, "model: out of memory");
        }
        m->owned = owned;
        m->cap_owned = cap;
    }
    m->owned[m->n_owned++] = p;
    return QP_OK;
}
