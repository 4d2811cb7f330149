/* Opset conversion checked in qplace's own engine (the ONNX Runtime side is
 * tests/integration/opset_ort.mjs): every old-opset model under tests/data/opset/ gives the same
 * outputs before and after conversion to opset 19 and 21, on the inputs stored beside it
 * (<model>.inputs.json: {"name": {"dtype": "float32", "dims": [...], "data": [...]}}). */
#include <dirent.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "ir/ir.h"
#include "ir/opset_convert.h"
#include "qplace/model.h"
#include "qplace/session.h"

#define DIR_OPSET QP_TEST_DATA_DIR "/opset/"
#define MAX_IO    16

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

/* Reads the inputs file into arrays; returns their count. */
static size_t read_inputs(const char *path, const char **names, struct qp_array *arrays) {
    char *text = slurp(path);
    if (!text) fail_msg("%s: cannot read", path);
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root) fail_msg("%s: not JSON", path);
    size_t n = 0;
    for (cJSON *it = root->child; it; it = it->next) {
        assert_true(n < MAX_IO);
        const char *dt = cJSON_GetObjectItem(it, "dtype")->valuestring;
        cJSON *dims = cJSON_GetObjectItem(it, "dims"), *data = cJSON_GetObjectItem(it, "data");
        int64_t d[QP_MAX_RANK];
        int rank = cJSON_GetArraySize(dims);
        for (int i = 0; i < rank; i++)
            d[i] = (int64_t)cJSON_GetArrayItem(dims, i)->valuedouble;
        enum qp_dtype t = !strcmp(dt, "float32") ? QP_DTYPE_FLOAT
                          : !strcmp(dt, "int64") ? QP_DTYPE_INT64
                          : !strcmp(dt, "bool")  ? QP_DTYPE_BOOL
                                                 : QP_DTYPE_UNDEFINED;
        if (t == QP_DTYPE_UNDEFINED) fail_msg("%s: dtype %s not handled by this test", path, dt);
        struct qp_error err = {0};
        assert_int_equal(qp_array_alloc(&arrays[n], t, rank, d, &err), QP_OK);
        int k = 0;
        for (cJSON *v = data->child; v; v = v->next, k++) {
            if (t == QP_DTYPE_FLOAT)
                ((float *)arrays[n].data)[k] = (float)v->valuedouble;
            else if (t == QP_DTYPE_INT64)
                ((int64_t *)arrays[n].data)[k] = (int64_t)v->valuedouble;
            else
                ((uint8_t *)arrays[n].data)[k] = cJSON_IsTrue(v) || v->valuedouble != 0;
        }
        names[n] = strdup(it->string);
        n++;
    }
    cJSON_Delete(root);
    return n;
}

/* Runs `m` on the inputs and copies its outputs into `outs` (owned). With `unsupported_ok`, a
 * model the engine does not support returns 0 outputs and its reason in `why`. */
static size_t run_model(const struct qp_model *m, size_t n_in, const char **names,
                        const struct qp_array *ins, struct qp_array *outs, const char *what,
                        int unsupported_ok, char *why, size_t why_size) {
    struct qp_error err = {0};
    struct qp_shape shapes[MAX_IO];
    for (size_t i = 0; i < n_in; i++) {
        shapes[i].name = names[i];
        shapes[i].rank = ins[i].rank;
        memcpy(shapes[i].dims, ins[i].dims, sizeof shapes[i].dims);
    }
    struct qp_session *s = NULL;
    if (qp_session_create(m, NULL, n_in, shapes, &s, &err) != QP_OK) {
        if (unsupported_ok && err.status == QP_ERR_UNSUPPORTED) {
            snprintf(why, why_size, "%s", err.msg);
            return 0;
        }
        fail_msg("%s: %s", what, err.msg);
    }
    /* Feed in the session's input order. */
    struct qp_array ordered[MAX_IO];
    size_t n = qp_session_n_inputs(s);
    assert_int_equal(n, n_in);
    for (size_t i = 0; i < n; i++) {
        const char *name = qp_session_input_name(s, i);
        size_t k = 0;
        while (k < n_in && strcmp(names[k], name))
            k++;
        if (k == n_in) fail_msg("%s: no data for input '%s'", what, name);
        ordered[i] = ins[k];
    }
    if (qp_session_run(s, n, ordered, &err) != QP_OK) fail_msg("%s: %s", what, err.msg);
    size_t n_out = qp_session_n_outputs(s);
    assert_true(n_out <= MAX_IO);
    for (size_t i = 0; i < n_out; i++) {
        struct qp_array v;
        assert_int_equal(qp_session_output(s, i, &v, &err), QP_OK);
        assert_int_equal(qp_array_alloc(&outs[i], v.dtype, v.rank, v.dims, &err), QP_OK);
        memcpy(outs[i].data, v.data, v.nbytes);
    }
    qp_session_free(s);
    return n_out;
}

static void compare(const char *what, const struct qp_array *a, const struct qp_array *b) {
    assert_int_equal(a->dtype, b->dtype);
    assert_int_equal(a->rank, b->rank);
    assert_memory_equal(a->dims, b->dims, sizeof(int64_t) * (size_t)a->rank);
    if (a->dtype != QP_DTYPE_FLOAT) {
        if (memcmp(a->data, b->data, a->nbytes)) fail_msg("%s: integer outputs differ", what);
        return;
    }
    const float *x = a->data, *y = b->data;
    for (size_t i = 0; i < a->nbytes / 4; i++)
        if (!(fabsf(x[i] - y[i]) <= 1e-6f + 1e-5f * fabsf(y[i])) && !(isnan(x[i]) && isnan(y[i])))
            fail_msg("%s: element %zu: %.9g before conversion, %.9g after", what, i, y[i], x[i]);
}

static void test_every_model(void **state) {
    (void)state;
    DIR *d = opendir(DIR_OPSET);
    assert_non_null(d);
    int n_models = 0, n_skipped = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".onnx")) continue;
        char model[1024], inputs[1024];
        snprintf(model, sizeof model, DIR_OPSET "%s", e->d_name);
        snprintf(inputs, sizeof inputs, DIR_OPSET "%.*s.inputs.json", (int)(len - 5), e->d_name);
        const char *names[MAX_IO];
        struct qp_array ins[MAX_IO], want[MAX_IO], got[MAX_IO];
        size_t n_in = read_inputs(inputs, names, ins);
        struct qp_error err = {0};
        struct qp_model *m = NULL;
        if (qp_model_load_file(model, NULL, &m, &err) != QP_OK) fail_msg("%s", err.msg);
        char why[QP_ERROR_MSG_SIZE] = "";
        size_t n_out = run_model(m, n_in, names, ins, want, model, 1, why, sizeof why);
        qp_model_free(m);
        if (n_out == 0) {
            /* Not a conversion problem: the engine cannot run even the original (ONNX Runtime
             * still checks this model's conversion). */
            printf("not checked in the engine: %s\n", why);
            n_skipped++;
        }
        for (int target = 19; n_out > 0 && target <= 21; target += 2) {
            m = NULL;
            assert_int_equal(qp_model_load_file(model, NULL, &m, &err), QP_OK);
            if (qp_model_convert_opset(m, target, &err) != QP_OK)
                fail_msg("%s -> %d: %s", model, target, err.msg);
            char what[1100];
            snprintf(what, sizeof what, "%s at opset %d", e->d_name, target);
            assert_int_equal(run_model(m, n_in, names, ins, got, what, 0, NULL, 0), n_out);
            for (size_t i = 0; i < n_out; i++) {
                compare(what, &got[i], &want[i]);
                qp_array_release(&got[i]);
            }
            qp_model_free(m);
        }
        for (size_t i = 0; i < n_out; i++)
            qp_array_release(&want[i]);
        for (size_t i = 0; i < n_in; i++) {
            qp_array_release(&ins[i]);
            free((void *)names[i]);
        }
        n_models++;
    }
    closedir(d);
    /* Only models the engine cannot run at all may be left out, and few of them. */
    assert_true(n_models - n_skipped >= 10 && n_skipped <= 2);
    printf("opset conversion in the engine: %d of %d models checked at opsets 19 and 21\n",
           n_models - n_skipped, n_models);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
