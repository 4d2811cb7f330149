/* The integer-path flags shared by `qplace run` and `qplace bench` (cli.h). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "qplace/session.h"

int cli_int8_mode(const struct cli_args *args, const char *command) {
    const char *v = cli_value(args, "int8", "auto");
    if (strcmp(v, "auto") == 0) return QP_INT8_AUTO;
    if (strcmp(v, "off") == 0) return QP_INT8_OFF;
    if (strcmp(v, "exact") == 0) return QP_INT8_EXACT;
    fprintf(stderr, "qplace %s: --int8: '%s' is not auto, off or exact\n", command, v);
    return -1;
}

const char *cli_int8_name(int mode) {
    return mode == QP_INT8_AUTO ? "auto" : mode == QP_INT8_EXACT ? "exact" : "off";
}

void cli_int8_summary(const struct qp_session *s, int explain) {
    const struct qp_int8_decision *d;
    const char *fallback;
    size_t n = qp_session_int8_decisions(s, &d, &fallback);
    if (fallback && fallback[0]) {
        printf("int8 path   off for this model: %s\n", fallback);
        return;
    }
    size_t fused = 0, partly = 0;
    for (size_t i = 0; i < n; i++) {
        fused += (size_t)d[i].fused;
        partly += (size_t)(d[i].fused && d[i].reason[0]);
    }
    if (!n) {
        printf("int8 path   no Q/DQ nodes: the model runs in float\n");
        return;
    }
    printf("int8 path   %zu Q/DQ nodes: %zu fused (%zu of them also run on their own for other "
           "readers), %zu run on their own%s\n",
           n, fused, partly, n - fused, explain ? "" : " (--explain lists them)");
    const char *why;
    size_t widened = qp_session_int8_widened(s, &why);
    if (widened)
        printf("float16     computed as float32 on the integer path (%zu constants, casts and "
               "declared tensors widened)\n",
               widened);
    else if (why)
        printf("float16     kept as written: %s\n", why);
    if (!explain) return;
    for (size_t i = 0; i < n; i++) {
        const char *op = strcmp(d[i].op_type, "QuantizeLinear") == 0 ? "Q " : "DQ";
        if (d[i].fused)
            printf("  %s %-40s fused into %s%s%s\n", op, d[i].node, d[i].into,
                   d[i].reason[0] ? "; " : "", d[i].reason);
        else
            printf("  %s %-40s runs on its own: %s\n", op, d[i].node, d[i].reason);
    }
}
