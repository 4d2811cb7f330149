/*
 * roundtrip [--optional] DIR...
 *
 * For every *.onnx under each DIR: load, save to a temporary folder, load the saved file again,
 * and compare the two IRs deeply (tests/integration/ir_compare.h). Prints one line per failure
 * and closes with "N passed, N failed"; exits 1 when anything failed.
 *
 * A DIR that is missing or holds no model fails the run, except with --optional (models fetched
 * by scripts/setup.sh), where the run is skipped (exit 77) unless QP_REQUIRE_REAL_MODELS=1.
 *
 * A self-check at the end proves the comparison can fail: a model compared with a copy whose
 * node op type or initializer byte was changed must be reported as different.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "ir_compare.h"
#include "model_files.h"
#include "qplace.h"

#define EXIT_SKIP 77

static int require_models(void) {
    const char *v = getenv("QP_REQUIRE_REAL_MODELS");
    return v && strcmp(v, "1") == 0;
}

/* 0: round trip equal; 1: failure (printed). */
static int roundtrip_one(const char *path, const char *tmp_path, int *has_inits_out) {
    struct qp_error err = {0};
    struct qp_model *a = NULL, *b = NULL;
    char msg[2048];
    int failed = 1;
    enum qp_status st = qp_model_load_file(path, NULL, &a, &err);
    if (st != QP_OK) {
        printf("FAIL %s: load: %s: %s\n", path, qp_status_name(st), err.msg);
        goto out;
    }
    st = qp_model_save_file(a, tmp_path, NULL, &err);
    if (st != QP_OK) {
        printf("FAIL %s: save: %s: %s\n", path, qp_status_name(st), err.msg);
        goto out;
    }
    st = qp_model_load_file(tmp_path, NULL, &b, &err);
    if (st != QP_OK) {
        printf("FAIL %s: reload of the saved model: %s: %s\n", path, qp_status_name(st), err.msg);
        goto out;
    }
    if (qp_test_model_compare(a, b, msg, sizeof msg)) {
        printf("FAIL %s: saved model differs: %s\n", path, msg);
        goto out;
    }
    failed = 0;
    *has_inits_out = a->graph && a->graph->n_inits > 0;
out:
    qp_model_free(a);
    qp_model_free(b);
    return failed;
}

/* Returns 0 when the comparison notices a changed node op type and a changed initializer byte in
 * a copy of `path` (changes it cannot notice in this model are not tried). */
static int self_check(const char *path) {
    struct qp_error err = {0};
    struct qp_model *a = NULL, *b = NULL;
    char msg[2048];
    int bad = 0, tried = 0;
    if (qp_model_load_file(path, NULL, &a, &err) != QP_OK ||
        qp_model_load_file(path, NULL, &b, &err) != QP_OK) {
        printf("FAIL self-check: cannot load %s: %s\n", path, err.msg);
        bad = 1;
        goto out;
    }
    if (qp_test_model_compare(a, b, msg, sizeof msg)) {
        printf("FAIL self-check: %s loaded twice compares different: %s\n", path, msg);
        bad = 1;
        goto out;
    }
    struct qp_graph *g = b->graph;
    for (size_t k = 0; g && k < g->n_nodes; k++) {
        if (g->nodes[k].dead) continue;
        const char *saved = g->nodes[k].op_type;
        g->nodes[k].op_type = "QpSelfCheckMutated";
        tried++;
        if (!qp_test_model_compare(a, b, msg, sizeof msg)) {
            printf("FAIL self-check: a changed op type went unnoticed in %s\n", path);
            bad = 1;
        }
        g->nodes[k].op_type = saved;
        break;
    }
    for (size_t k = 0; g && k < g->n_inits; k++) {
        struct qp_tensor *t = &g->inits[k];
        if (!t->data || t->nbytes == 0) continue;
        unsigned char *copy = malloc(t->nbytes);
        if (!copy) break;
        memcpy(copy, t->data, t->nbytes);
        copy[t->nbytes - 1] ^= 0x5a;
        const void *saved = t->data;
        t->data = copy;
        tried++;
        if (!qp_test_model_compare(a, b, msg, sizeof msg)) {
            printf("FAIL self-check: a changed initializer byte went unnoticed in %s\n", path);
            bad = 1;
        }
        t->data = saved;
        free(copy);
        break;
    }
    if (!bad && tried == 0) printf("note: self-check found nothing to change in %s\n", path);
out:
    qp_model_free(a);
    qp_model_free(b);
    return bad;
}

int main(int argc, char **argv) {
    int optional = 0, argi = 1;
    if (argi < argc && strcmp(argv[argi], "--optional") == 0) {
        optional = 1;
        argi++;
    }
    if (argi >= argc) {
        fprintf(stderr, "usage: roundtrip [--optional] DIR...\n");
        return 1;
    }
    if (require_models()) optional = 0;

    char *tmp = make_temp_dir("roundtrip");
    if (!tmp) {
        perror("roundtrip: mkdtemp");
        return 1;
    }
    char tmp_path[4096];
    snprintf(tmp_path, sizeof tmp_path, "%s/resaved.onnx", tmp);

    size_t passed = 0, failed = 0;
    const char *check_model = NULL;
    char *check_copy = NULL;
    int check_has_inits = 0;
    for (; argi < argc; argi++) {
        struct model_files mf;
        if (model_files_find(argv[argi], &mf) != 0 || mf.n == 0) {
            if (optional) {
                printf("SKIP: no models under %s (run scripts/setup.sh; set "
                       "QP_REQUIRE_REAL_MODELS=1 to make this a failure)\n",
                       argv[argi]);
                remove_tree(tmp);
                free(tmp);
                return EXIT_SKIP;
            }
            printf("FAIL %s: no models found\n", argv[argi]);
            failed++;
            if (mf.n == 0) model_files_free(&mf);
            continue;
        }
        for (size_t k = 0; k < mf.n; k++) {
            fflush(stdout); /* a crash still shows how far we got */
            int has_inits = 0;
            if (roundtrip_one(mf.paths[k], tmp_path, &has_inits)) {
                failed++;
                continue;
            }
            passed++;
            /* Self-check on the first model with initializers, else the first one. */
            if (!check_copy || (has_inits && !check_has_inits)) {
                free(check_copy);
                check_copy = strdup(mf.paths[k]);
                check_has_inits = has_inits;
            }
        }
        model_files_free(&mf);
    }
    check_model = check_copy;
    if (check_model && self_check(check_model)) failed++;
    free(check_copy);
    remove_tree(tmp);
    free(tmp);
    printf("%zu passed, %zu failed\n", passed, failed);
    return failed ? 1 : 0;
}
