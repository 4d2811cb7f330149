#include "onnx/describe.h"

#include <stdio.h>
#include <string.h>

#include "onnx.pb-c.h"
#include "qplace/dtype.h"

static void describe_type(const Onnx__TypeProto *tp, char *buf, size_t size, int depth) {
    size_t len = strlen(buf);
    if (len + 1 >= size) return;
    char *p = buf + len;
    size_t room = size - len;
    if (!tp || depth > 8) {
        snprintf(p, room, "?");
        return;
    }
    switch (tp->value_case) {
    case ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE: {
        int et = tp->tensor_type ? tp->tensor_type->elem_type : 0;
        snprintf(p, room, "tensor(%s)", et && qp_dtype_valid(et) ? qp_dtype_name(et) : "?");
        return;
    }
    case ONNX__TYPE_PROTO__VALUE_SPARSE_TENSOR_TYPE: {
        int et = tp->sparse_tensor_type ? tp->sparse_tensor_type->elem_type : 0;
        snprintf(p, room, "sparse_tensor(%s)", et && qp_dtype_valid(et) ? qp_dtype_name(et) : "?");
        return;
    }
    case ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE:
        snprintf(p, room, "sequence(");
        describe_type(tp->sequence_type ? tp->sequence_type->elem_type : NULL, buf, size,
                      depth + 1);
        break;
    case ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE:
        snprintf(p, room, "optional(");
        describe_type(tp->optional_type ? tp->optional_type->elem_type : NULL, buf, size,
                      depth + 1);
        break;
    case ONNX__TYPE_PROTO__VALUE_MAP_TYPE: {
        int kt = tp->map_type ? tp->map_type->key_type : 0;
        snprintf(p, room, "map(%s,", kt && qp_dtype_valid(kt) ? qp_dtype_name(kt) : "?");
        describe_type(tp->map_type ? tp->map_type->value_type : NULL, buf, size, depth + 1);
        break;
    }
    default:
        snprintf(p, room, "?");
        return;
    }
    len = strlen(buf);
    if (len + 1 < size) snprintf(buf + len, size - len, ")");
}

void qp_onnx_describe_type(const void *origin_type, char *buf, size_t size) {
    if (!size) return;
    buf[0] = 0;
    describe_type(origin_type, buf, size, 0);
}

int qp_onnx_function_info(const void *function, const char **domain_out, const char **name_out,
                          size_t *n_nodes_out) {
    const Onnx__FunctionProto *fp = function;
    if (!fp) return 0;
    *domain_out = fp->domain;
    *name_out = fp->name;
    *n_nodes_out = fp->n_node;
    return 1;
}
