/* qplace quantize --autotune: the search's placement, quantized exactly (quantize_autotune.h). */
#include "pipeline/quantize_autotune.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/file.h"
#include "quant/writer.h"

void qp_quantize_autotune_report_free(struct qp_quantize_autotune_report *r) {
    if (!r) return;
    qp_autotune_report_free(r->search);
    qp_quantize_report_free(r->quantize);
    free(r);
}

/* A fresh folder under $TMPDIR (else /tmp) for the search; *dir_out malloc'd. */
static enum qp_status make_temp_dir(char **dir_out, struct qp_error *err) {
    const char *base = getenv("TMPDIR");
    if (!base || !*base) base = "/tmp";
    size_t n = strlen(base) + 32;
    char *dir = malloc(n);
    if (!dir) return qp_error_set(err, QP_ERR_NOMEM, "quantize --autotune: out of memory");
    snprintf(dir, n, "%s/qplace-autotune-XXXXXX", base);
    if (!mkdtemp(dir)) {
        qp_error_set(err, QP_ERR_IO,
                     "quantize --autotune: cannot create a temporary folder under '%s': %s "
                     "(set TMPDIR, or give --autotune_output_dir)",
                     base, strerror(errno));
        free(dir);
        return err->status;
    }
    *dir_out = dir;
    return QP_OK;
}

/* Removes the temporary folder and the files the search left in it (it makes no subfolders). */
static void remove_temp_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            size_t n = strlen(dir) + strlen(e->d_name) + 2;
            char *p = malloc(n);
            if (!p) continue;
            snprintf(p, n, "%s/%s", dir, e->d_name);
            unlink(p);
            free(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

/* What the quantize options may not hold with a search, and the output paths: checked before
 * the search, so a mistake costs nothing. */
static enum qp_status check_inputs(const struct qp_quantize_options *q,
                                   const struct qp_autotune_options *a, struct qp_error *err) {
    if (!q->onnx_path || !a->backend)
        return qp_error_set(err, QP_ERR_USAGE,
                            "quantize --autotune: the model path and a latency backend are needed");
    if (a->onnx_path && strcmp(a->onnx_path, q->onnx_path) != 0)
        return qp_error_set(err, QP_ERR_USAGE,
                            "quantize --autotune: the search and quantize name different models "
                            "('%s', '%s')",
                            a->onnx_path, q->onnx_path);
    if (q->placement_in || q->placement || q->select || q->rules_path || q->disable_mha_qdq)
        return qp_error_set(err, QP_ERR_USAGE,
                            "quantize --autotune: the search chooses the placement; it cannot be "
                            "combined with --placement_in, include/exclude lists, --rules or "
                            "--disable_mha_qdq (give a Q/DQ model to --autotune_qdq_baseline "
                            "to seed the search instead)");
    char *out = q->output_path ? NULL : qp_quant_default_output(q->onnx_path);
    if (!q->output_path && !out)
        return qp_error_set(err, QP_ERR_NOMEM, "quantize --autotune: out of memory");
    enum qp_status st =
        qp_file_check_output(q->output_path ? q->output_path : out, "quantize: --output_path", err);
    free(out);
    if (st == QP_OK) st = qp_file_check_output(q->placement_out, "quantize: --placement_out", err);
    return st;
}

/* The quantization of the chosen placement: the search's best when the guard kept it, else the
 * empty placement (what the search's placement.json says). */
static enum qp_status quantize_chosen(const struct qp_quantize_options *q,
                                      struct qp_quantize_autotune_report *r, struct qp_error *err) {
    struct qp_placement *none = NULL;
    const struct qp_placement *pl = r->search->best;
    if (!r->search->guard_passed) {
        if (!(none = qp_placement_create()))
            return qp_error_set(err, QP_ERR_NOMEM, "quantize --autotune: out of memory");
        pl = none;
        r->empty_placement = 1;
    }
    struct qp_quantize_options qo = *q;
    qo.placement = pl;
    qo.placement_label =
        r->empty_placement ? "autotune (guard failed: the empty placement)" : "autotune";
    enum qp_status st = qp_quantize(&qo, &r->quantize, err);
    qp_placement_free(none);
    return st;
}

enum qp_status qp_quantize_autotune(const struct qp_quantize_options *q,
                                    const struct qp_autotune_options *a,
                                    struct qp_quantize_autotune_report **report_out,
                                    struct qp_error *err) {
    if (report_out) *report_out = NULL;
    if (!q || !a) return qp_error_set(err, QP_ERR_USAGE, "quantize --autotune: options are needed");
    enum qp_status st = check_inputs(q, a, err);
    if (st != QP_OK) return st;
    struct qp_quantize_autotune_report *r = calloc(1, sizeof *r);
    if (!r) return qp_error_set(err, QP_ERR_NOMEM, "quantize --autotune: out of memory");
    char *tmp = NULL;
    struct qp_autotune_options ao = *a;
    ao.onnx_path = q->onnx_path;
    if (!ao.output_dir) {
        if ((st = make_temp_dir(&tmp, err)) != QP_OK) goto done;
        ao.output_dir = tmp;
        r->temporary_dir = 1;
    }
    if ((st = qp_autotune(&ao, &r->search, err)) != QP_OK) goto done;
    if (r->search->interrupted || (a->stop && *a->stop)) {
        r->interrupted = 1;
        goto done;
    }
    st = quantize_chosen(q, r, err);
done:
    if (tmp) {
        remove_temp_dir(tmp);
        free(tmp);
    }
    if (st == QP_OK && report_out)
        *report_out = r;
    else
        qp_quantize_autotune_report_free(r);
    return st;
}
