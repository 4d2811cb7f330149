/* qplace run MODEL --input NAME=FILE.npy ... | --inputs FILE.npz --output OUT.npz [--threads N] */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ir/ir.h"
#include "qplace/dtype.h"
#include "qplace/model.h"
#include "qplace/npy.h"
#include "qplace/session.h"

const struct cli_opt cli_run_opts[] = {
    {"input", CLI_MULTI, "NAME=FILE.npy", "a graph input from a .npy file (repeatable)"},
    {"inputs", CLI_VALUE, "FILE.npz", "graph inputs from an .npz archive, keyed by input name"},
    {"output", CLI_VALUE, "OUT.npz", "where to write the outputs (required)"},
    {"threads", CLI_VALUE, "N", "kernel threads (default: all cores; results do not change)"},
    {"int8", CLI_VALUE, "auto|off|exact",
     "the integer path on Q/DQ models (default auto; exact: off's bits, faster)"},
    {0},
};

const char cli_run_details[] =
    "Runs MODEL once on the CPU engine. Every graph input (initializers excluded) must be given,\n"
    "either with --input NAME=FILE.npy or as a member NAME.npy of --inputs FILE.npz (both may\n"
    "be combined; a name given twice is an error). Dtypes must match the model exactly, and\n"
    "ranks and static dimensions must agree with it. The outputs are written to --output as an\n"
    ".npz archive (atomically), one member per graph output named after it; characters an\n"
    "archive key cannot hold ('/', '\\\\', control characters) become '_'.\n";

struct feed {
    const char *name; /* borrowed from argv or the archive */
    struct qp_array a;
    int set;
};

static char *key_for(const char *name) {
    size_t n = strlen(name);
    char *k = malloc(n + 2);
    if (!k) return NULL;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        k[i] = (c == '/' || c == '\\' || c < 0x20 || c == 0x7f) ? '_' : (char)c;
    }
    k[n] = 0;
    if (n == 0 || strcmp(k, ".") == 0 || strcmp(k, "..") == 0) {
        k[0] = '_';
        k[1] = 0;
    }
    return k;
}

/* Checks a feed against the model's declared dtype, rank and static dims (exit 2 when off). */
static enum qp_status check_feed(const struct qp_value *v, const struct qp_array *a,
                                 const char *src, struct qp_error *err) {
    if (a->dtype != v->dtype)
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "run: input '%s' (%s) is %s, the model expects %s", v->name, src,
                            qp_dtype_name(a->dtype), qp_dtype_name(v->dtype));
    if (v->rank >= 0 && a->rank != v->rank)
        return qp_error_set(err, QP_ERR_BAD_INPUT,
                            "run: input '%s' (%s) has rank %d, the model expects %d", v->name, src,
                            a->rank, v->rank);
    for (int d = 0; v->rank >= 0 && d < v->rank; d++)
        if (v->dims[d].value >= 0 && v->dims[d].value != a->dims[d]) {
            char have[128];
            qp_array_shape_str(a, have, sizeof have);
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "run: input '%s' (%s) has shape %s; dimension %d must be %lld",
                                v->name, src, have, d, (long long)v->dims[d].value);
        }
    return QP_OK;
}

/* --input NAME=FILE.npy flags into feeds (one per session input). */
static enum qp_status read_input_flags(const struct cli_args *args, const struct qp_session *s,
                                       struct feed *feeds, struct qp_error *err) {
    size_t n_in = qp_session_n_inputs(s);
    for (size_t i = 0; i < cli_count(args, "input"); i++) {
        const char *spec = cli_value_at(args, "input", i);
        const char *eq = strchr(spec, '=');
        if (!eq || eq == spec || !eq[1])
            return qp_error_set(err, QP_ERR_USAGE, "run: --input '%s' is not NAME=FILE.npy", spec);
        size_t nlen = (size_t)(eq - spec);
        int idx = -1;
        for (size_t k = 0; k < n_in; k++) {
            const char *nm = qp_session_input_name(s, k);
            if (strlen(nm) == nlen && memcmp(nm, spec, nlen) == 0) idx = (int)k;
        }
        if (idx < 0)
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "run: --input '%.*s': the model has no input of that name",
                                (int)nlen, spec);
        if (feeds[idx].set)
            return qp_error_set(err, QP_ERR_BAD_INPUT, "run: input '%s' is given twice",
                                qp_session_input_name(s, (size_t)idx));
        if (qp_npy_read_file(eq + 1, &feeds[idx].a, err) != QP_OK) return err->status;
        feeds[idx].set = 1;
        feeds[idx].name = eq + 1;
    }
    return QP_OK;
}

/* The members of --inputs FILE.npz into feeds; *npz stays open (the caller closes it). */
static enum qp_status read_input_npz(const char *path, const struct qp_session *s,
                                     struct feed *feeds, struct qp_npz **npz,
                                     struct qp_error *err) {
    if (qp_npz_open(path, 0, npz, err) != QP_OK) return err->status;
    for (size_t j = 0; j < qp_npz_count(*npz); j++) {
        const char *key = qp_npz_name(*npz, j);
        int idx = qp_session_input_index(s, key);
        if (idx < 0)
            return qp_error_set(err, QP_ERR_BAD_INPUT,
                                "run: %s: member '%s.npy' names no input of the model", path, key);
        if (feeds[idx].set)
            return qp_error_set(err, QP_ERR_BAD_INPUT, "run: input '%s' is given twice", key);
        if (qp_npz_read(*npz, key, &feeds[idx].a, err) != QP_OK) return err->status;
        feeds[idx].set = 1;
        feeds[idx].name = path;
    }
    return QP_OK;
}

/* Every output of the session's last run into the .npz at path, one member per output. */
static enum qp_status write_outputs(const struct qp_session *s, const char *path,
                                    struct qp_error *err) {
    size_t n_out = qp_session_n_outputs(s);
    struct qp_array *outs = calloc(n_out + 1, sizeof *outs);
    char **keys = calloc(n_out + 1, sizeof *keys);
    enum qp_status st = QP_OK;
    if (!outs || !keys) {
        st = qp_error_set(err, QP_ERR_NOMEM, "run: out of memory");
        goto done;
    }
    for (size_t o = 0; o < n_out && st == QP_OK; o++) {
        if ((st = qp_session_output(s, o, &outs[o], err)) != QP_OK) break;
        keys[o] = key_for(qp_session_output_name(s, o));
        if (!keys[o]) {
            st = qp_error_set(err, QP_ERR_NOMEM, "run: out of memory");
            break;
        }
        for (size_t p = 0; p < o && st == QP_OK; p++)
            if (strcmp(keys[p], keys[o]) == 0)
                st = qp_error_set(err, QP_ERR_UNSUPPORTED,
                                  "run: outputs '%s' and '%s' map to the same archive key '%s'",
                                  qp_session_output_name(s, p), qp_session_output_name(s, o),
                                  keys[o]);
    }
    if (st == QP_OK)
        st = qp_npz_write_file(path, (const char *const *)keys, outs, n_out, QP_NPZ_STORE, err);
done:
    for (size_t o = 0; keys && o < n_out; o++)
        free(keys[o]);
    free(keys);
    free(outs);
    return st;
}

/* --threads N (1..1024) into *n; 0 when absent. 0, or the exit code of a usage error. */
static int parse_threads(const struct cli_args *args, int *n) {
    const char *threads = cli_value(args, "threads", NULL);
    *n = 0;
    if (!threads) return 0;
    char *end;
    errno = 0;
    long t = strtol(threads, &end, 10);
    if (errno || *end || end == threads || t < 1 || t > 1024) {
        struct qp_error err = {0};
        qp_error_set(&err, QP_ERR_USAGE, "run: --threads '%s' is not a number in 1..1024", threads);
        return cli_fail(&err);
    }
    *n = (int)t;
    return 0;
}

int cli_run_run(const struct cli_args *args) {
    struct qp_error err = {0};
    struct qp_model *m = NULL;
    struct qp_session *s = NULL;
    struct qp_npz *npz = NULL;
    struct feed *feeds = NULL;
    struct qp_array *ins = NULL;
    size_t n_in = 0;
    int rc = 0, n_threads = 0;
    const char *out_path = cli_value(args, "output", NULL);
    const char *npz_path = cli_value(args, "inputs", NULL);
    if (!out_path) {
        qp_error_set(&err, QP_ERR_USAGE, "run: --output OUT.npz is required");
        return cli_fail(&err);
    }
    if ((rc = parse_threads(args, &n_threads))) return rc;
    if (cli_count(args, "input") == 0 && !npz_path) {
        qp_error_set(&err, QP_ERR_USAGE,
                     "run: give the inputs with --input NAME=FILE.npy or "
                     "--inputs FILE.npz");
        return cli_fail(&err);
    }
    if (qp_model_load_file(args->pos[0], NULL, &m, &err) != QP_OK) goto fail;
    int int8 = cli_int8_mode(args, "run");
    if (int8 < 0) {
        rc = 1;
        goto done;
    }
    struct qp_session_options so = {.n_threads = n_threads, .int8 = int8};
    if (qp_session_create(m, &so, 0, NULL, &s, &err) != QP_OK) goto fail;
    const struct qp_graph *g = qp_model_graph(m);
    n_in = qp_session_n_inputs(s);
    feeds = calloc(n_in + 1, sizeof *feeds);
    ins = calloc(n_in + 1, sizeof *ins);
    if (!feeds || !ins) {
        qp_error_set(&err, QP_ERR_NOMEM, "run: out of memory");
        goto fail;
    }
    if (read_input_flags(args, s, feeds, &err) != QP_OK) goto fail;
    if (npz_path && read_input_npz(npz_path, s, feeds, &npz, &err) != QP_OK) goto fail;
    for (size_t k = 0; k < n_in; k++) {
        const struct qp_value *v = &g->values[qp_graph_find_value(g, qp_session_input_name(s, k))];
        if (!feeds[k].set) {
            qp_error_set(&err, QP_ERR_BAD_INPUT,
                         "run: input '%s' is missing (give --input %s=FILE.npy)", v->name, v->name);
            goto fail;
        }
        if (check_feed(v, &feeds[k].a, feeds[k].name, &err) != QP_OK) goto fail;
        ins[k] = feeds[k].a;
    }
    enum qp_status rst = qp_session_run(s, n_in, ins, &err);
    if (rst != QP_OK && rst != QP_ERR_NOMEM && qp_session_int8_decisions(s, NULL, NULL)) {
        /* The integer path planned only now (shapes from the inputs) and failed: the model as
         * written, saying why. */
        fprintf(stderr, "qplace run: warning: the integer path failed (%s); running --int8 off\n",
                err.msg);
        qp_session_free(s);
        s = NULL;
        so.int8 = QP_INT8_OFF;
        err = (struct qp_error){0};
        if (qp_session_create(m, &so, 0, NULL, &s, &err) != QP_OK) goto fail;
        rst = qp_session_run(s, n_in, ins, &err);
    }
    if (rst != QP_OK) {
        if (err.status == QP_ERR_USAGE) err.status = QP_ERR_BAD_INPUT; /* caller data, not flags */
        goto fail;
    }
    if (write_outputs(s, out_path, &err) != QP_OK) goto fail;
    goto done;
fail:
    rc = cli_fail(&err);
done:
    for (size_t k = 0; feeds && k < n_in; k++)
        if (feeds[k].set) qp_array_release(&feeds[k].a);
    free(feeds);
    free(ins);
    qp_npz_close(npz);
    qp_session_free(s);
    qp_model_free(m);
    return rc;
}
