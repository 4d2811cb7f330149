/*
 * Conformance runner: runs one ONNX backend test directory (model.onnx, test_data_set_N/
 * input_*.pb and output_*.pb) through the engine and compares with the expected outputs:
 * |a - b| <= atol + rtol * |b| for floats (NaN equals NaN), exact for integers and bool.
 * Old test data stores bfloat16 as uint16: such tensors are read as the bfloat16 the model
 * declares for that input or output.
 *
 *   qp_conformance [--name GROUP/NAME --expected FILE] [--report] DIR
 *
 * With --expected, a test listed in FILE ("GROUP/NAME  reason" lines) must fail, and passing
 * is reported as a surprise pass (exit 1). --report prints PASS or FAIL with the reason and
 * always exits 0 (for regenerating the list).
 */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx.pb-c.h"
#include "qplace/array.h"
#include "qplace/model.h"
#include "qplace/session.h"

#define RTOL   1e-3
#define ATOL   1e-7
#define MAX_IO 64

static char reason[2048];

static int fail(const char *fmt, const char *a, const char *b) {
    snprintf(reason, sizeof reason, fmt, a ? a : "", b ? b : "");
    return 1;
}

static int read_file(const char *path, unsigned char **buf, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    if (fseek(f, 0, SEEK_END) != 0) {
        fclose(f);
        return 0;
    }
    long n = ftell(f);
    rewind(f);
    if (n < 0) {
        fclose(f);
        return 0;
    }
    *buf = malloc((size_t)n + 1);
    if (!*buf || fread(*buf, 1, (size_t)n, f) != (size_t)n) {
        free(*buf);
        fclose(f);
        return 0;
    }
    fclose(f);
    *len = (size_t)n;
    return 1;
}

/* TensorProto file -> owned qp_array. Returns 0 with `reason` set on failure. */
static int load_tensor(const char *path, struct qp_array *out) {
    unsigned char *buf = NULL;
    size_t len = 0;
    struct qp_error err = {0};
    if (!read_file(path, &buf, &len)) return !fail("cannot read %s%s", path, NULL);
    Onnx__TensorProto *t = onnx__tensor_proto__unpack(NULL, len, buf);
    free(buf);
    if (!t) return !fail("cannot parse %s%s", path, NULL);
    int ok = 0;
    int64_t dims[QP_MAX_RANK];
    int dt = t->data_type;
    if (t->n_dims > QP_MAX_RANK || !qp_dtype_valid(dt) || dt == QP_DTYPE_STRING) {
        fail("%s: unsupported tensor (dtype %s)", path,
             qp_dtype_valid(dt) ? qp_dtype_name(dt) : "?");
        goto done;
    }
    for (size_t i = 0; i < t->n_dims; i++)
        dims[i] = t->dims[i];
    if (qp_array_alloc(out, (enum qp_dtype)dt, (int)t->n_dims, dims, &err) != QP_OK) {
        fail("%s: %s", path, err.msg);
        goto done;
    }
    int okn;
    uint64_t n = qp_array_numel(out, &okn);
    if (t->has_raw_data) {
        if (t->raw_data.len != out->nbytes) {
            fail("%s: raw data size mismatch%s", path, NULL);
            qp_array_release(out);
            goto done;
        }
        if (out->nbytes) memcpy(out->data, t->raw_data.data, out->nbytes);
        ok = 1;
        goto done;
    }
    size_t es = (size_t)qp_dtype_traits(out->dtype)->bits / 8;
    for (uint64_t i = 0; i < n; i++) {
        unsigned char *p = (unsigned char *)out->data + i * es;
        switch (out->dtype) {
        case QP_DTYPE_FLOAT:
            if (i >= t->n_float_data) goto short_data;
            memcpy(p, &t->float_data[i], 4);
            break;
        case QP_DTYPE_DOUBLE:
            if (i >= t->n_double_data) goto short_data;
            memcpy(p, &t->double_data[i], 8);
            break;
        case QP_DTYPE_INT64:
            if (i >= t->n_int64_data) goto short_data;
            memcpy(p, &t->int64_data[i], 8);
            break;
        case QP_DTYPE_UINT32:
        case QP_DTYPE_UINT64:
            if (i >= t->n_uint64_data) goto short_data;
            if (es == 8)
                memcpy(p, &t->uint64_data[i], 8);
            else {
                uint32_t v = (uint32_t)t->uint64_data[i];
                memcpy(p, &v, 4);
            }
            break;
        default: {
            if (i >= t->n_int32_data) goto short_data;
            int32_t v = t->int32_data[i];
            if (es == 1) {
                uint8_t b = (uint8_t)v;
                memcpy(p, &b, 1);
            } else if (es == 2) {
                uint16_t h = (uint16_t)v;
                memcpy(p, &h, 2);
            } else {
                memcpy(p, &v, 4);
            }
        }
        }
    }
    ok = 1;
    goto done;
short_data:
    fail("%s: fewer typed values than the shape needs%s", path, NULL);
    qp_array_release(out);
done:
    onnx__tensor_proto__free_unpacked(t, NULL);
    return ok;
}

static double get_f(const struct qp_array *a, uint64_t i) {
    const void *p = a->data;
    switch (a->dtype) {
    case QP_DTYPE_FLOAT:
        return ((const float *)p)[i];
    case QP_DTYPE_DOUBLE:
        return ((const double *)p)[i];
    case QP_DTYPE_FLOAT16:
        return qp_fp16_to_f32(((const uint16_t *)p)[i]);
    case QP_DTYPE_BFLOAT16:
        return qp_bf16_to_f32(((const uint16_t *)p)[i]);
    default:
        return 0;
    }
}

/* 1 when equal within tolerance; reason set otherwise. */
static int compare(const char *name, const struct qp_array *got, const struct qp_array *want) {
    char a[256], b[256];
    if (got->dtype != want->dtype) {
        snprintf(reason, sizeof reason, "%s: dtype %s, expected %s", name,
                 qp_dtype_name(got->dtype), qp_dtype_name(want->dtype));
        return 0;
    }
    if (got->rank != want->rank ||
        memcmp(got->dims, want->dims, sizeof(int64_t) * (size_t)got->rank)) {
        snprintf(reason, sizeof reason, "%s: shape %s, expected %s", name,
                 qp_array_shape_str(got, a, sizeof a), qp_array_shape_str(want, b, sizeof b));
        return 0;
    }
    int ok;
    uint64_t n = qp_array_numel(want, &ok);
    int is_float = want->dtype == QP_DTYPE_FLOAT || want->dtype == QP_DTYPE_DOUBLE ||
                   want->dtype == QP_DTYPE_FLOAT16 || want->dtype == QP_DTYPE_BFLOAT16;
    if (!is_float) {
        if (got->nbytes != want->nbytes ||
            (want->nbytes && memcmp(got->data, want->data, want->nbytes))) {
            size_t es = (size_t)qp_dtype_traits(want->dtype)->bits;
            uint64_t first = 0;
            if (es >= 8)
                for (; first < n; first++)
                    if (memcmp((const char *)got->data + first * es / 8,
                               (const char *)want->data + first * es / 8, es / 8))
                        break;
            snprintf(reason, sizeof reason, "%s: %s values differ (first at element %llu)", name,
                     qp_dtype_name(want->dtype), (unsigned long long)first);
            return 0;
        }
        return 1;
    }
    uint64_t bad = 0, first = 0;
    double worst = 0;
    for (uint64_t i = 0; i < n; i++) {
        double x = get_f(got, i), y = get_f(want, i);
        if (isnan(x) && isnan(y)) continue;
        if (x == y) continue;
        double d = fabs(x - y);
        if (!(d <= ATOL + RTOL * fabs(y))) {
            if (!bad) first = i;
            bad++;
            if (!(d <= worst)) worst = d;
        }
    }
    if (bad) {
        snprintf(reason, sizeof reason,
                 "%s: %llu of %llu values out of tolerance (first at %llu: "
                 "got %.9g, expected %.9g; max abs diff %.3g)",
                 name, (unsigned long long)bad, (unsigned long long)n, (unsigned long long)first,
                 get_f(got, first), get_f(want, first), worst);
        return 0;
    }
    return 1;
}

/* 0: pass; 1: fail with `reason`. */
static int run_dir(const char *dir) {
    char path[4096];
    struct qp_error err = {0};
    struct qp_model *m = NULL;
    struct qp_session *s = NULL;
    int rc = 1, n_sets = 0;
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    if (qp_model_load_file(path, NULL, &m, &err) != QP_OK) return fail("load: %s%s", err.msg, NULL);
    if (qp_session_create(m, NULL, 0, NULL, &s, &err) != QP_OK) {
        fail("%s%s", err.msg, NULL);
        goto done;
    }
    for (int set = 0;; set++) {
        struct qp_array ins[MAX_IO], want[MAX_IO];
        int n_in = 0, n_out = 0, ok = 1;
        memset(ins, 0, sizeof ins);
        memset(want, 0, sizeof want);
        snprintf(path, sizeof path, "%s/test_data_set_%d", dir, set);
        DIR *d = opendir(path);
        if (!d) break;
        closedir(d);
        n_sets++;
        for (; n_in < MAX_IO; n_in++) {
            snprintf(path, sizeof path, "%s/test_data_set_%d/input_%d.pb", dir, set, n_in);
            FILE *f = fopen(path, "rb");
            if (!f) break;
            fclose(f);
            if (!load_tensor(path, &ins[n_in])) {
                ok = 0;
                break;
            }
        }
        for (; ok && n_out < MAX_IO; n_out++) {
            snprintf(path, sizeof path, "%s/test_data_set_%d/output_%d.pb", dir, set, n_out);
            FILE *f = fopen(path, "rb");
            if (!f) break;
            fclose(f);
            if (!load_tensor(path, &want[n_out])) {
                ok = 0;
                break;
            }
        }
        /* Test data written before ONNX stored bfloat16 natively holds it as uint16 bit
         * patterns: read it as the bfloat16 the model declares. */
        for (int i = 0; ok && i < n_in && (size_t)i < qp_session_n_inputs(s); i++)
            if (ins[i].dtype == QP_DTYPE_UINT16 &&
                qp_session_input_dtype(s, (size_t)i) == QP_DTYPE_BFLOAT16)
                ins[i].dtype = QP_DTYPE_BFLOAT16;
        if (ok && qp_session_run(s, (size_t)n_in, ins, &err) != QP_OK) {
            fail("run: %s%s", err.msg, NULL);
            ok = 0;
        }
        if (ok && (size_t)n_out != qp_session_n_outputs(s)) {
            snprintf(reason, sizeof reason, "%d expected outputs, the session has %zu", n_out,
                     qp_session_n_outputs(s));
            ok = 0;
        }
        for (int i = 0; ok && i < n_out; i++) {
            struct qp_array got;
            if (qp_session_output(s, (size_t)i, &got, &err) != QP_OK) {
                fail("%s%s", err.msg, NULL);
                ok = 0;
            } else {
                if (want[i].dtype == QP_DTYPE_UINT16 && got.dtype == QP_DTYPE_BFLOAT16)
                    want[i].dtype = QP_DTYPE_BFLOAT16; /* old test data, as for inputs */
                if (!compare(qp_session_output_name(s, (size_t)i), &got, &want[i])) ok = 0;
            }
        }
        for (int i = 0; i < MAX_IO; i++) {
            qp_array_release(&ins[i]);
            qp_array_release(&want[i]);
        }
        if (!ok) goto done;
    }
    if (n_sets == 0) {
        fail("no test_data_set_* in %s%s", dir, NULL);
        goto done;
    }
    rc = 0;
done:
    qp_session_free(s);
    qp_model_free(m);
    return rc;
}

/* Reason listed for `name` in the expected-failures file, or NULL. */
static char *expected_reason(const char *file, const char *name) {
    static char line[4096];
    FILE *f = fopen(file, "r");
    if (!f) return NULL;
    size_t nl = strlen(name);
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        if (strncmp(line, name, nl) == 0 && (line[nl] == ' ' || line[nl] == '\t')) {
            fclose(f);
            line[strcspn(line, "\n")] = 0;
            return line + nl;
        }
    }
    fclose(f);
    return NULL;
}

int main(int argc, char **argv) {
    const char *name = NULL, *expected = NULL, *dir = NULL;
    int report = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--name") == 0 && i + 1 < argc)
            name = argv[++i];
        else if (strcmp(argv[i], "--expected") == 0 && i + 1 < argc)
            expected = argv[++i];
        else if (strcmp(argv[i], "--report") == 0)
            report = 1;
        else
            dir = argv[i];
    }
    if (!dir) {
        fprintf(stderr,
                "usage: qp_conformance [--name GROUP/NAME --expected FILE] [--report] DIR\n");
        return 2;
    }
    int failed = run_dir(dir);
    for (char *p = reason; *p; p++)
        if (*p == '\n' || *p == '\t') *p = ' ';
    if (report) {
        printf("%s %s\n", failed ? "FAIL" : "PASS", failed ? reason : "");
        return 0;
    }
    const char *why = (expected && name) ? expected_reason(expected, name) : NULL;
    if (why) {
        if (failed) {
            printf("expected failure:%s\n  actual: %s\n", why, reason);
            return 0;
        }
        printf("SURPRISE PASS: %s is listed in expected_failures.txt (%s) but passes; remove it\n",
               name, why);
        return 1;
    }
    if (failed) {
        printf("FAIL: %s\n", reason);
        return 1;
    }
    printf("PASS\n");
    return 0;
}
