/*
 * quantize_model MODEL.onnx CALIB.npz OUT.onnx: quantizes MODEL with the trt policy (INT8,
 * entropy calibration, fp16 elsewhere: `qplace quantize`'s defaults) on the arrays of CALIB.npz,
 * which this program reads into memory itself and hands to libqplace one row at a time through
 * the callback provider (qp_provider_callback_create): nothing goes through a file. Prints the
 * Q/DQ counts and each output's drift, then writes OUT.onnx. The result is byte for byte what
 *
 *     qplace quantize --onnx_path MODEL.onnx --calibration_data_path CALIB.npz \
 *         --calibration_shapes NAME:1xCxHxW --output_path OUT.onnx
 *
 * writes. Built in CI against the installed library:
 *
 *     cc quantize_model.c $(pkg-config --cflags --libs qplace) -o quantize_model
 */
#include <qplace.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The calibration set in memory: one array per model input, rows along axis 0. */
struct calib_set {
    size_t n;
    const char **names;
    struct qp_array *arrays;
    uint64_t rows;
};

/* Batch `index` is row `index` of every input: a view into the caller's arrays (no copy). */
static enum qp_status give_row(void *user, uint64_t index, struct qp_array *inputs,
                               struct qp_error *err) {
    const struct calib_set *cs = user;
    for (size_t i = 0; i < cs->n; i++) {
        const struct qp_array *a = &cs->arrays[i];
        size_t row_bytes = a->nbytes / (size_t)a->dims[0];
        int64_t dims[QP_MAX_RANK];
        memcpy(dims, a->dims, sizeof dims);
        dims[0] = 1;
        enum qp_status st = qp_array_view(&inputs[i], a->dtype, a->rank, dims,
                                          (char *)a->data + index * row_bytes, row_bytes, err);
        if (st != QP_OK) return st;
    }
    return QP_OK;
}

/* Reads the npz member of every model input. */
static enum qp_status read_set(const struct qp_model *m, const char *path, struct calib_set *cs,
                               struct qp_error *err) {
    struct qp_npz *npz = NULL;
    enum qp_status st = qp_npz_open(path, 0, &npz, err);
    if (st != QP_OK) return st;
    cs->n = qp_model_n_inputs(m);
    cs->names = calloc(cs->n, sizeof *cs->names);
    cs->arrays = calloc(cs->n, sizeof *cs->arrays);
    if (!cs->names || !cs->arrays) st = qp_error_set(err, QP_ERR_NOMEM, "out of memory");
    for (size_t i = 0; st == QP_OK && i < cs->n; i++) {
        cs->names[i] = qp_model_input_name(m, i);
        st = qp_npz_read(npz, cs->names[i], &cs->arrays[i], err);
        if (st == QP_OK && (cs->arrays[i].rank < 1 || cs->arrays[i].dims[0] < 1))
            st = qp_error_set(err, QP_ERR_BAD_INPUT, "%s: '%s' has no rows", path, cs->names[i]);
        if (st == QP_OK && i == 0) cs->rows = (uint64_t)cs->arrays[0].dims[0];
        if (st == QP_OK && (uint64_t)cs->arrays[i].dims[0] != cs->rows)
            st = qp_error_set(err, QP_ERR_BAD_INPUT, "%s: the inputs' row counts differ", path);
    }
    qp_npz_close(npz);
    return st;
}

static void print_summary(const struct qp_quantize_summary *s) {
    printf("placement: %s; %zu activation tensors (%zu slots), %zu weights; calibrated on %llu "
           "samples (%s, %s)\n",
           s->placement_source, s->n_tensors, s->n_edges, s->n_weight_tensors,
           (unsigned long long)s->n_calib_samples, s->calibration_source, s->method);
    for (size_t i = 0; i < s->n_outputs; i++)
        printf("output %s: cosine %.6f, max |diff| %.6g over %llu samples%s\n", s->outputs[i].name,
               s->outputs[i].cosine, s->outputs[i].max_abs, (unsigned long long)s->n_eval_samples,
               s->eval_on_calibration ? " (in-sample: the calibration rows)" : "");
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: quantize_model MODEL.onnx CALIB.npz OUT.onnx\n");
        return 1;
    }
    struct qp_error err = {0};
    struct qp_model *m = NULL, *q = NULL;
    struct qp_provider *data = NULL;
    struct qp_quantize_summary *s = NULL;
    struct calib_set cs = {0};
    int rc = 2;
    if (qp_model_load_file(argv[1], NULL, &m, &err) != QP_OK) goto done;
    if (read_set(m, argv[2], &cs, &err) != QP_OK) goto done;
    if (qp_provider_callback_create(cs.names, cs.n, cs.rows, give_row, &cs, &data, &err) != QP_OK)
        goto done;
    struct qp_quantize_config c;
    qp_quantize_config_default(&c);
    if (qp_quantize_model(m, data, &c, &q, &s, &err) != QP_OK) goto done;
    print_summary(s);
    if (qp_model_save_file(q, argv[3], NULL, &err) != QP_OK) goto done;
    rc = 0;
done:
    if (rc) fprintf(stderr, "quantize_model: %s\n", err.msg);
    qp_quantize_summary_free(s);
    qp_model_free(q);
    qp_provider_free(data);
    for (size_t i = 0; i < cs.n; i++)
        qp_array_release(&cs.arrays[i]);
    free(cs.arrays);
    free(cs.names);
    qp_model_free(m);
    return rc;
}
