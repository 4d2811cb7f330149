/*
 * engine_run_cli QPLACE WORKDIR TESTDATA: `qplace run` at the process level on ONNX test
 * models (node/test_add: x + y; node/test_if: an If on a bool input): outputs written as .npz
 * hold the right values; bad inputs exit 2 with a message naming the input, and leave no
 * output file behind.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "qplace/npy.h"

static int failures;

static void fail(const char *what) {
    printf("FAIL %s\n", what);
    failures++;
}

/* Runs a shell command, stderr into `errfile`; returns the exit status. */
static int sh(const char *cmd, const char *errfile) {
    char buf[20480];
    snprintf(buf, sizeof buf, "%s 2>%s", cmd, errfile);
    int rc = system(buf);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static int file_has(const char *path, const char *needle) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return strstr(buf, needle) != NULL;
}

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static void write_f32(const char *path, int rank, const int64_t *dims, const float *v) {
    struct qp_error err = {0};
    struct qp_array a;
    size_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= (size_t)dims[i];
    if (qp_array_view(&a, QP_DTYPE_FLOAT, rank, dims, (void *)v, n * sizeof(float), &err) ||
        qp_npy_write_file(path, &a, &err))
        printf("cannot write %s: %s\n", path, err.msg);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: engine_run_cli QPLACE WORKDIR TESTDATA\n");
        return 2;
    }
    const char *q = argv[1], *wd = argv[2], *td = argv[3];
    char cmd[16384], p_x[1024], p_y[1024], p_bad[1024], p_out[1024], p_err[1024], add[1024],
        ifm[1024], p_c[1024], p_in[1024];
    mkdir(wd, 0755);
    snprintf(p_x, sizeof p_x, "%s/x.npy", wd);
    snprintf(p_y, sizeof p_y, "%s/y.npy", wd);
    snprintf(p_bad, sizeof p_bad, "%s/bad.npy", wd);
    snprintf(p_c, sizeof p_c, "%s/c.npy", wd);
    snprintf(p_in, sizeof p_in, "%s/in.npz", wd);
    snprintf(p_out, sizeof p_out, "%s/out.npz", wd);
    snprintf(p_err, sizeof p_err, "%s/stderr.txt", wd);
    snprintf(add, sizeof add, "%s/node/test_add/model.onnx", td);
    snprintf(ifm, sizeof ifm, "%s/node/test_if/model.onnx", td);
    if (!exists(add) || !exists(ifm)) {
        printf("FAIL: ONNX test models missing under %s (libonnx-testdata)\n", td);
        return 1;
    }
    float x[60], y[60], bad[20];
    int64_t d3[3] = {3, 4, 5}, d2[2] = {4, 5};
    for (int i = 0; i < 60; i++) {
        x[i] = (float)i * 0.5f - 7.0f;
        y[i] = (float)(i % 7) * 1.25f;
    }
    for (int i = 0; i < 20; i++)
        bad[i] = 1;
    write_f32(p_x, 3, d3, x);
    write_f32(p_y, 3, d3, y);
    write_f32(p_bad, 2, d2, bad);

    /* Good run: values. */
    remove(p_out);
    snprintf(cmd, sizeof cmd, "%s run %s --input x=%s --input y=%s --output %s --threads 2", q, add,
             p_x, p_y, p_out);
    if (sh(cmd, p_err) != 0) fail("test_add: qplace run failed");
    struct qp_error err = {0};
    struct qp_npz *z = NULL;
    if (qp_npz_open(p_out, 0, &z, &err) != QP_OK) {
        fail("test_add: output archive unreadable");
    } else {
        struct qp_array s;
        if (qp_npz_read(z, "sum", &s, &err) != QP_OK) {
            fail("test_add: no member 'sum'");
        } else {
            const float *v = s.data;
            int ok = s.dtype == QP_DTYPE_FLOAT && s.rank == 3 && s.nbytes == sizeof x;
            for (int i = 0; ok && i < 60; i++)
                ok = v[i] == x[i] + y[i];
            if (!ok) fail("test_add: wrong values");
            qp_array_release(&s);
        }
        qp_npz_close(z);
    }

    /* If: cond from an .npz archive; both values of the condition. */
    for (int cond = 0; cond < 2; cond++) {
        struct qp_array c;
        uint8_t cv = (uint8_t)cond;
        qp_array_view(&c, QP_DTYPE_BOOL, 0, NULL, &cv, 1, &err);
        const char *names[1] = {"cond"};
        if (qp_npz_write_file(p_in, names, &c, 1, QP_NPZ_STORE, &err) != QP_OK) fail("write npz");
        remove(p_out);
        snprintf(cmd, sizeof cmd, "%s run %s --inputs %s --output %s", q, ifm, p_in, p_out);
        if (sh(cmd, p_err) != 0) fail("test_if: qplace run failed");
        if (qp_npz_open(p_out, 0, &z, &err) != QP_OK) {
            fail("test_if: output archive unreadable");
            continue;
        }
        struct qp_array r;
        if (qp_npz_read(z, "res", &r, &err) == QP_OK) {
            /* test_if: then -> [1,2,3,4,5], else -> [5,4,3,2,1] */
            const float *v = r.data;
            int ok = r.nbytes == 5 * sizeof(float);
            for (int i = 0; ok && i < 5; i++)
                ok = v[i] == (cond ? (float)(i + 1) : (float)(5 - i));
            if (!ok) fail("test_if: wrong values");
            qp_array_release(&r);
        } else {
            fail("test_if: no member 'res'");
        }
        qp_npz_close(z);
    }

    /* Bad inputs: exit 2, the message names the input, no output left. */
    struct {
        const char *args, *needle, *what;
    } cases[] = {
        {"--input x=%s --input y=%s --input zz=%s", "'zz'", "unknown input name"},
        {"--input x=%s", "'y'", "missing input"},
        {"--input x=%s --input y=%s", "'y'", "wrong shape"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char a[4096];
        if (k == 0)
            snprintf(a, sizeof a, cases[k].args, p_x, p_y, p_y);
        else if (k == 1)
            snprintf(a, sizeof a, cases[k].args, p_x);
        else
            snprintf(a, sizeof a, cases[k].args, p_x, p_bad);
        remove(p_out);
        snprintf(cmd, sizeof cmd, "%s run %s %s --output %s", q, add, a, p_out);
        int rc = sh(cmd, p_err);
        if (rc != 2 || !file_has(p_err, cases[k].needle) || exists(p_out)) {
            printf("  (%s: exit %d)\n", cases[k].what, rc);
            fail(cases[k].what);
        }
    }
    /* Wrong dtype: a float file for the bool condition. */
    write_f32(p_c, 0, NULL, bad);
    snprintf(cmd, sizeof cmd, "%s run %s --input cond=%s --output %s", q, ifm, p_c, p_out);
    if (sh(cmd, p_err) != 2 || !file_has(p_err, "'cond'") || !file_has(p_err, "bool"))
        fail("wrong dtype");
    printf("%s\n", failures ? "FAILED" : "PASSED");
    return failures ? 1 : 0;
}
