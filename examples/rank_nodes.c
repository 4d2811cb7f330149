/*
 * rank_nodes MODEL.onnx CALIB.npz: which nodes of MODEL hurt accuracy most when quantized.
 * Places Q/DQ with the trt policy, calibrates on CALIB.npz (arrays named as the model's inputs),
 * scores every quantized node alone (KL divergence of the outputs from the float model's) and
 * prints the ten highest, one a line: rank, node, op type, score. The same ranking as
 *
 *     qplace sensitivity --onnx_path MODEL.onnx --calibration_data_path CALIB.npz \
 *         --granularity node
 *
 * Built in CI against the installed library:
 *
 *     cc rank_nodes.c $(pkg-config --cflags --libs qplace) -o rank_nodes
 */
#include <qplace.h>
#include <stdio.h>

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: rank_nodes MODEL.onnx CALIB.npz\n");
        return 1;
    }
    struct qp_error err = {0};
    struct qp_model *model = NULL;
    struct qp_provider *data = NULL;
    struct qp_sensitivity *s = NULL;
    int rc = 2;
    if (qp_model_load_file(argv[1], NULL, &model, &err) != QP_OK) goto done;
    if (qp_provider_open_model(model, argv[2], NULL, NULL, &data, &err) != QP_OK) goto done;
    /* No placement: the trt policy; no ranges: one calibration here (entropy). */
    struct qp_sensitivity_options o = {.granularity = QP_SENSITIVITY_NODE};
    if (qp_sensitivity_score(model, NULL, data, NULL, &o, &s, &err) != QP_OK) goto done;
    struct qp_sensitivity_summary sum;
    qp_sensitivity_get_summary(s, &sum);
    for (size_t i = 0; i < sum.n_scored && i < 10; i++) {
        struct qp_sensitivity_target t;
        qp_sensitivity_target(s, i, &t);
        printf("%2zu  %-40s %-20s %.6g\n", t.rank, t.name, t.op_type, t.score);
    }
    if (sum.n_failed)
        fprintf(stderr, "rank_nodes: %zu of %zu nodes could not be scored\n", sum.n_failed,
                sum.n_targets);
    rc = 0;
done:
    if (rc) fprintf(stderr, "rank_nodes: %s\n", err.msg);
    qp_sensitivity_free(s);
    qp_provider_free(data);
    qp_model_free(model);
    return rc;
}
