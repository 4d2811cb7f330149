/* Test driver for the opset converter: loads IN, converts it to TARGET and saves OUT.
 *
 *     opset_convert_tool IN.onnx OUT.onnx TARGET
 *
 * Prints one line on failure and exits with the status's exit code. Used by
 * tests/integration/opset_ort.mjs, which compares IN and OUT in ONNX Runtime. */
#include <stdio.h>
#include <stdlib.h>

#include "ir/opset_convert.h"
#include "qplace/model.h"

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s IN.onnx OUT.onnx TARGET\n", argv[0]);
        return 1;
    }
    char *end;
    long target = strtol(argv[3], &end, 10);
    if (*end || end == argv[3]) {
        fprintf(stderr, "opset_convert_tool: bad target '%s'\n", argv[3]);
        return 1;
    }
    struct qp_error err = {0};
    struct qp_model *m = NULL;
    enum qp_status st = qp_model_load_file(argv[1], NULL, &m, &err);
    if (st == QP_OK) st = qp_model_convert_opset(m, target, &err);
    if (st == QP_OK) st = qp_model_save_file(m, argv[2], NULL, &err);
    qp_model_free(m);
    if (st != QP_OK) {
        fprintf(stderr, "opset_convert_tool: %s: %s\n", argv[1], err.msg);
        return qp_status_exit_code(st);
    }
    return 0;
}
