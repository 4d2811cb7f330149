/* Prototypes of every registry row's prepare and run (generated from registry.def). */
#ifndef QP_KERNELS_KERNELS_H
#define QP_KERNELS_KERNELS_H

#include "kernels/int8_conv.h"
#include "kernels/kernel.h"

#define QP_KERNEL(dom, op, lo, hi, dts, dti, fl, prep, run)                                        \
    enum qp_status prep(struct qp_kprep *p);                                                       \
    enum qp_status run(const struct qp_krun *r);
#include "kernels/registry.def"
#undef QP_KERNEL

#endif
