/* qplace qdq-to-dq IN OUT: weights stored quantized, feeding their DequantizeLinear directly. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "ir/ir.h"
#include "qplace/model.h"
#include "quant/qdq_to_dq.h"

const struct cli_opt cli_qdq_to_dq_opts[] = {
    {0},
};

const char cli_qdq_to_dq_details[] =
    "Every QuantizeLinear whose input is a constant weight and whose output feeds only\n"
    "DequantizeLinear is evaluated once (INT8: round half to even, saturate; FP8: saturate); the\n"
    "quantized weight is stored as an initializer the DQ reads directly, and the Q node and the\n"
    "float weight are removed (a float weight still read elsewhere stays, and the quantized copy\n"
    "is named <weight>_quantized). IN is never modified; OUT is written atomically.\n";

static int same_file(const char *a, const char *b) {
    if (strcmp(a, b) == 0) return 1;
    struct stat sa, sb;
    if (stat(a, &sa) != 0 || stat(b, &sb) != 0) return 0;
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

int cli_qdq_to_dq_run(const struct cli_args *a) {
    struct qp_error err = {0};
    const char *in = a->pos[0], *out = a->pos[1];
    if (same_file(in, out)) {
        qp_error_set(&err, QP_ERR_BAD_INPUT,
                     "qdq-to-dq: output '%s' is the input model; choose another path", out);
        return cli_fail(&err);
    }
    struct qp_model *m = NULL;
    size_t n = 0;
    int rc = 0;
    /* Load and save messages name their file already; the fold's is prefixed with the input. */
    if (qp_model_load_file(in, NULL, &m, &err) != QP_OK ||
        (qp_qdq_to_dq(m, &n, &err) != QP_OK && qp_error_prefix(&err, "%s", in)) ||
        qp_model_save_file(m, out, NULL, &err) != QP_OK) {
        rc = cli_fail(&err);
    } else {
        printf("qplace qdq-to-dq: %s -> %s: %zu weight QuantizeLinear nodes folded\n", in, out, n);
    }
    qp_model_free(m);
    return rc;
}
