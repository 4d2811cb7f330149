/* Helpers shared by the IR's own files; not for other modules. */
#ifndef QP_IR_INTERNAL_H
#define QP_IR_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "ir/ir.h"

/* Grows a malloc'd array to hold `need` elements of `elem` bytes. 0 on overflow/OOM. */
int qp_ir_grow(void **arr, size_t *cap, size_t need, size_t elem);
uint64_t qp_ir_hash_str(const char *s);
int qp_ir_use_add(struct qp_value *val, int node, int input);
void qp_ir_use_remove(struct qp_value *val, int node, int input);
int qp_ir_node_hash_rebuild(struct qp_graph *g);

#endif
