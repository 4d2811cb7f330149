/* The calibration data flags every command shares (cli.h: CLI_DATA_OPTS). */
#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calib/data.h"
#include "cli.h"

enum qp_status cli_percentile(const struct cli_args *a, enum qp_calib_method method, double *out,
                              struct qp_error *err) {
    const char *s = cli_value(a, "percentile", NULL);
    if (!s) return QP_OK;
    char *end;
    errno = 0;
    double p = strtod(s, &end);
    if (end == s || *end || errno || !(p > 0 && p <= 100))
        return qp_error_set(err, QP_ERR_USAGE, "--percentile '%s' is not a number in (0, 100]", s);
    if (method != QP_CALIB_PERCENTILE && method != QP_CALIB_AUTO)
        return qp_error_set(err, QP_ERR_USAGE,
                            "--percentile needs --calibration_method percentile or auto");
    *out = p;
    return QP_OK;
}

enum qp_status cli_weight_clip_mse(const struct cli_args *a, int *out, struct qp_error *err) {
    const char *wc = cli_value(a, "weight_clipping", "mse");
    if (strcmp(wc, "mse") != 0 && strcmp(wc, "absmax") != 0)
        return qp_error_set(err, QP_ERR_USAGE, "--weight_clipping must be absmax or mse, not '%s'",
                            wc);
    *out = wc[0] == 'm';
    return QP_OK;
}

void cli_print_auto(const size_t *n_per_method, size_t n_fallback) {
    printf("  auto: tensors per method:");
    for (int m = 0; m < QP_CALIB_AUTO; m++)
        printf("%s %s %zu", m ? "," : "", qp_calib_method_name((enum qp_calib_method)m),
               n_per_method[m]);
    printf(" (%zu of the entropy ones: no consumer could be evaluated)\n", n_fallback);
}

static int bad(const char *cmd, const char *flag, const char *value, const char *what) {
    fprintf(stderr, "qplace %s: --%s '%s' %s\nTry 'qplace help %s'.\n", cmd, flag, value, what,
            cmd);
    return 1;
}

/* "N", "NK", "NMiB", "NG", ... (binary multiples); positive. */
static int parse_size(const char *s, uint64_t *out) {
    errno = 0;
    char *end;
    if (!s || !isdigit((unsigned char)s[0])) return 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno) return 0;
    uint64_t mul = 1;
    if (*end) {
        char c = (char)toupper((unsigned char)*end++);
        if (c == 'K')
            mul = 1ULL << 10;
        else if (c == 'M')
            mul = 1ULL << 20;
        else if (c == 'G')
            mul = 1ULL << 30;
        else if (c == 'T')
            mul = 1ULL << 40;
        else
            return 0;
        if (*end == 'i' || *end == 'I') end++;
        if (*end == 'b' || *end == 'B') end++;
        if (*end) return 0;
    }
    if (v > UINT64_MAX / mul) return 0;
    *out = v * mul;
    return *out > 0;
}

static int parse_triple(const char *s, float out[3]) {
    char *end;
    for (int i = 0; i < 3; i++) {
        errno = 0;
        double v = strtod(s, &end);
        if (end == s || errno || !(v == v) || v > 1e30 || v < -1e30) return 0;
        out[i] = (float)v;
        if (i < 2 && *end != ',') return 0;
        s = end + 1;
    }
    return *end == '\0';
}

int cli_data_options(const struct cli_args *a, const char *cmd, struct qp_data_options *o) {
    qp_data_options_default(o);
    const char *v = cli_value(a, "max_calibration_bytes", NULL);
    if (v && !parse_size(v, &o->max_bytes))
        return bad(cmd, "max_calibration_bytes", v, "is not a positive byte count");
    if ((v = cli_value(a, "image_mean", NULL)) && !parse_triple(v, o->image_mean))
        return bad(cmd, "image_mean", v, "is not three numbers R,G,B");
    if ((v = cli_value(a, "image_std", NULL))) {
        if (!parse_triple(v, o->image_std))
            return bad(cmd, "image_std", v, "is not three numbers R,G,B");
        for (int c = 0; c < 3; c++)
            if (!(o->image_std[c] != 0.0f)) return bad(cmd, "image_std", v, "has a zero entry");
    }
    o->image_bgr = cli_has(a, "image_bgr");
    return 0;
}
