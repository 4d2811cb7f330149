/*
 * libFuzzer harness for model loading and saving.
 *
 * Feeds the input to qp_model_load_buffer (no base folder, so external data must be refused).
 * Properties checked, beyond the sanitizers' own:
 *   - a failed load leaves a message in the error record;
 *   - a model that loads also saves, the saved file loads again, and the two IRs are the same
 *     (tests/integration/ir_compare.h) — any difference is a finding.
 * Run: build-fuzz/fuzz/fuzz_model fuzz/corpus/model (see scripts/test.sh).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ir_compare.h"
#include "qplace.h"

static char tmp_dir[256];
static char tmp_path[320];

static void cleanup(void) {
    if (!tmp_dir[0]) return;
    unlink(tmp_path);
    rmdir(tmp_dir);
}

static void finding(const char *what, const struct qp_error *err) {
    fprintf(stderr, "fuzz_model: %s: %s\n", what, err ? err->msg : "");
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!tmp_dir[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(tmp_dir, sizeof tmp_dir, "%s/qplace-fuzz-model-XXXXXX",
                 base && *base ? base : "/tmp");
        if (!mkdtemp(tmp_dir)) {
            perror("fuzz_model: mkdtemp");
            abort();
        }
        snprintf(tmp_path, sizeof tmp_path, "%s/model.onnx", tmp_dir);
        atexit(cleanup);
    }

    struct qp_error err = {0};
    struct qp_model *m = NULL, *again = NULL;
    enum qp_status st = qp_model_load_buffer(data, size, NULL, NULL, &m, &err);
    if (st != QP_OK) {
        if (m) finding("failed load left a model behind", &err);
        if (!err.msg[0]) finding("failed load without a message", NULL);
        return 0;
    }
    if (!m) finding("load succeeded without a model", NULL);

    st = qp_model_save_file(m, tmp_path, NULL, &err);
    if (st != QP_OK) {
        if (!err.msg[0]) finding("failed save without a message", NULL);
        qp_model_free(m);
        return 0;
    }
    st = qp_model_load_file(tmp_path, NULL, &again, &err);
    if (st != QP_OK) finding("a saved model does not load again", &err);

    char msg[2048];
    if (qp_test_model_compare(m, again, msg, sizeof msg)) {
        fprintf(stderr, "fuzz_model: save + reload changed the model: %s\n", msg);
        abort();
    }
    qp_model_free(again);
    qp_model_free(m);
    unlink(tmp_path);
    return 0;
}
