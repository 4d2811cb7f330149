#include <string.h>

#include "kernels/kernels.h"

static const struct qp_kernel registry[] = {
#define QP_KERNEL(dom, op, lo, hi, dts, dti, fl, prep, run)                                        \
    {dom, op, lo, hi, dts, dti, fl, prep, run},
#include "kernels/registry.def"
#undef QP_KERNEL
};

static int same_domain(const char *a, const char *b) {
    if (!a || strcmp(a, "ai.onnx") == 0) a = "";
    if (!b || strcmp(b, "ai.onnx") == 0) b = "";
    return strcmp(a, b) == 0;
}

const struct qp_kernel *qp_kernel_find(const char *domain, const char *op, int opset) {
    for (size_t i = 0; i < sizeof registry / sizeof registry[0]; i++) {
        const struct qp_kernel *k = &registry[i];
        if (strcmp(k->op, op) == 0 && same_domain(k->domain, domain) && opset >= k->since_min &&
            opset <= k->since_max)
            return k;
    }
    return NULL;
}

int qp_kernel_has_op(const char *domain, const char *op) {
    for (size_t i = 0; i < sizeof registry / sizeof registry[0]; i++)
        if (strcmp(registry[i].op, op) == 0 && same_domain(registry[i].domain, domain)) return 1;
    return 0;
}

size_t qp_kernel_count(void) {
    return sizeof registry / sizeof registry[0];
}

const struct qp_kernel *qp_kernel_at(size_t i) {
    return i < qp_kernel_count() ? &registry[i] : NULL;
}
