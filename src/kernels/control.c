/*
 * Control flow. If is a registry row so that sessions resolve it like any op, but its branches
 * are whole graphs: src/runtime plans them (both branches, or the taken one when the condition
 * is a plan-time constant) and runs the taken one, so these functions are never reached
 * through a session. They fail cleanly for any other caller.
 */
#include "kernels/kernels.h"

enum qp_status qp_k_if_prepare(struct qp_kprep *p) {
    return qp_error_set(p->err, QP_ERR_INTERNAL, "If is planned by the runtime, not as a kernel");
}

enum qp_status qp_k_if_run(const struct qp_krun *r) {
    return qp_error_set(r->err, QP_ERR_INTERNAL, "If is run by the runtime, not as a kernel");
}
