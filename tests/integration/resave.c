/*
 * qp_resave [--time] IN.onnx OUT.onnx
 *
 * Loads a model with qp_model_load_file and writes it back with qp_model_save_file: the helper
 * the ONNX Runtime check and the load/save benchmark use. With --time, prints the load and save
 * wall times and the process's peak RSS to stdout as `key=value` lines.
 * Exit status as the CLI's: 0 ok, 1 usage, 2 bad input, 3 internal failure.
 */
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "qplace.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    int timing = 0, argi = 1;
    if (argi < argc && strcmp(argv[argi], "--time") == 0) {
        timing = 1;
        argi++;
    }
    if (argc - argi != 2) {
        fprintf(stderr, "usage: qp_resave [--time] IN.onnx OUT.onnx\n");
        return 1;
    }
    struct qp_error err = {0};
    struct qp_model *m = NULL;
    double t0 = now_s();
    enum qp_status st = qp_model_load_file(argv[argi], NULL, &m, &err);
    double t1 = now_s();
    if (st != QP_OK) {
        fprintf(stderr, "qp_resave: %s\n", err.msg);
        return qp_status_exit_code(st);
    }
    st = qp_model_save_file(m, argv[argi + 1], NULL, &err);
    double t2 = now_s();
    qp_model_free(m);
    if (st != QP_OK) {
        fprintf(stderr, "qp_resave: %s\n", err.msg);
        return qp_status_exit_code(st);
    }
    if (timing) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        printf("load_s=%.4f\nsave_s=%.4f\npeak_rss_kb=%ld\n", t1 - t0, t2 - t1, ru.ru_maxrss);
    }
    return 0;
}
