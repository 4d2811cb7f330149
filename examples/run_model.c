/*
 * run_model MODEL.onnx [NAME=DxDxD ...]: loads a model with libqplace, runs it once on zeros (as
 * qp_array_alloc makes them) and
 * prints each output's name, dtype and shape. Built in CI against the installed library:
 *
 *     cc run_model.c $(pkg-config --cflags --libs qplace) -o run_model
 *
 * Inputs with dynamic dimensions need their shape: PaddleOCR's classifier takes
 * `x=1x3x48x192`.
 */
#include <qplace.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "NAME=1x3x48x192" into s (name points into arg). 0 when malformed. */
static int parse_shape(char *arg, struct qp_shape *s) {
    char *eq = strchr(arg, '=');
    if (!eq || eq == arg) return 0;
    *eq = 0;
    s->name = arg;
    s->rank = 0;
    for (char *p = eq + 1; *p;) {
        char *end;
        long long d = strtoll(p, &end, 10);
        if (end == p || d < 0 || s->rank == QP_MAX_RANK) return 0;
        s->dims[s->rank++] = d;
        if (*end == 'x')
            end++;
        else if (*end)
            return 0;
        p = end;
    }
    return s->rank > 0;
}

int main(int argc, char **argv) {
    if (argc < 2 || argc - 2 > 16) {
        fprintf(stderr, "usage: run_model MODEL.onnx [NAME=DxDxD ...] (at most 16 shapes)\n");
        return 1;
    }
    struct qp_shape shapes[16];
    for (int i = 2; i < argc; i++)
        if (!parse_shape(argv[i], &shapes[i - 2])) {
            fprintf(stderr, "run_model: '%s' is not NAME=DxDxD\n", argv[i]);
            return 1;
        }
    struct qp_error err = {0};
    struct qp_model *m = NULL;
    struct qp_session *s = NULL;
    struct qp_array in[16];
    size_t n_in = 0;
    int rc = 2;
    if (qp_model_load_file(argv[1], NULL, &m, &err) != QP_OK ||
        qp_session_create(m, NULL, (size_t)(argc - 2), shapes, &s, &err) != QP_OK)
        goto fail;
    n_in = qp_session_n_inputs(s);
    if (n_in > 16) {
        fprintf(stderr, "run_model: %zu inputs, at most 16 handled\n", n_in);
        goto done;
    }
    for (size_t i = 0; i < n_in; i++) {
        /* The plan knows every input's shape: the one given, else the model's static one. */
        const char *name = qp_session_input_name(s, i);
        const struct qp_shape *sh = NULL;
        for (int k = 0; k < argc - 2; k++)
            if (strcmp(shapes[k].name, name) == 0) sh = &shapes[k];
        if (!sh) {
            fprintf(stderr, "run_model: give input '%s' a shape (%s=DxDxD)\n", name, name);
            n_in = i;
            goto done;
        }
        if (qp_array_alloc(&in[i], qp_session_input_dtype(s, i), sh->rank, sh->dims, &err) !=
            QP_OK) {
            n_in = i;
            goto fail;
        }
    }
    if (qp_session_run(s, n_in, in, &err) != QP_OK) goto fail;
    for (size_t o = 0; o < qp_session_n_outputs(s); o++) {
        struct qp_array out;
        if (qp_session_output(s, o, &out, &err) != QP_OK) goto fail;
        printf("%s %s [", qp_session_output_name(s, o), qp_dtype_name(out.dtype));
        for (int d = 0; d < out.rank; d++)
            printf("%s%lld", d ? ", " : "", (long long)out.dims[d]);
        printf("]\n");
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "run_model: %s\n", err.msg);
done:
    for (size_t i = 0; i < n_in; i++)
        qp_array_release(&in[i]);
    qp_session_free(s);
    qp_model_free(m);
    return rc;
}
