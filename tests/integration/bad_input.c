/*
 * bad_input QPLACE WORKDIR SEED.onnx...
 *
 * Process-level robustness of model loading: writes malformed models into WORKDIR and runs
 * `QPLACE info FILE` on each in a child process with a time limit (and, outside sanitizer
 * builds, an address-space limit), then checks how it ended:
 *   - malformed input: exit status 2 and a message on stderr;
 *   - never a signal, a sanitizer report, another exit status, a hang or a peak RSS over
 *     RSS_LIMIT_MB (a "huge allocation").
 * Cases: every truncation of each small SEED (sampled for larger ones), random bytes, wrong wire
 * types (a varint where a message is expected, ...), lengths past the end, tensors whose dims
 * claim terabytes or overflow, bad external data (outside the folder, absolute, symlinked out,
 * past the end of its file, missing, unparsable offsets). Well-formed controls (the seeds, a
 * generated model with inline and with in-folder external data) must exit 0, so the malformed
 * cases fail for the reason they were built for.
 * Prints "N passed, N failed" and exits 1 when anything failed. WORKDIR is removed after a
 * clean run unless QP_KEEP_BAD_INPUT=1.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "model_files.h"

#if defined(__SANITIZE_ADDRESS__)
#define QP_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define QP_UNDER_ASAN 1
#endif
#endif
#ifndef QP_UNDER_ASAN
#define QP_UNDER_ASAN 0
#endif

#define TIME_LIMIT_S 60
#define RSS_LIMIT_MB 1024
#define AS_LIMIT_MB  4096

/* What a case may end with. */
enum expect {
    EXPECT_OK,       /* exit 0 */
    EXPECT_ERROR,    /* exit 2 with a message */
    EXPECT_OK_OR_ERR /* either (a truncation at a field boundary is still a well-formed file) */
};

static const char *qplace_bin;
static const char *workdir;
static size_t n_passed, n_failed;

/* ---- a minimal protobuf writer ------------------------------------------------------------ */

struct pb {
    uint8_t *p;
    size_t n, cap;
};

static void pb_put(struct pb *b, const void *data, size_t len) {
    if (b->n + len > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + len)
            cap *= 2;
        uint8_t *grown = realloc(b->p, cap);
        if (!grown) {
            fprintf(stderr, "bad_input: out of memory\n");
            exit(3);
        }
        b->p = grown;
        b->cap = cap;
    }
    if (len) memcpy(b->p + b->n, data, len);
    b->n += len;
}
static void pb_varint(struct pb *b, uint64_t v) {
    uint8_t tmp[10];
    size_t k = 0;
    do {
        tmp[k] = (uint8_t)(v & 127);
        v >>= 7;
        if (v) tmp[k] |= 128;
        k++;
    } while (v);
    pb_put(b, tmp, k);
}
static void pb_tag(struct pb *b, unsigned field, unsigned wire) {
    pb_varint(b, ((uint64_t)field << 3) | wire);
}
static void pb_int(struct pb *b, unsigned field, uint64_t v) {
    pb_tag(b, field, 0);
    pb_varint(b, v);
}
static void pb_bytes(struct pb *b, unsigned field, const void *data, size_t len) {
    pb_tag(b, field, 2);
    pb_varint(b, len);
    pb_put(b, data, len);
}
static void pb_str(struct pb *b, unsigned field, const char *s) {
    pb_bytes(b, field, s, strlen(s));
}
static void pb_msg(struct pb *b, unsigned field, const struct pb *m) {
    pb_bytes(b, field, m->p, m->n);
}
static void pb_free(struct pb *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

/* ValueInfoProto: a float tensor of shape [n]. */
static void value_info(struct pb *out, unsigned field, const char *name, uint64_t n) {
    struct pb dim = {0}, shape = {0}, tt = {0}, type = {0}, vi = {0};
    pb_int(&dim, 1, n);
    pb_msg(&shape, 1, &dim);
    pb_int(&tt, 1, 1 /* FLOAT */);
    pb_msg(&tt, 2, &shape);
    pb_msg(&type, 1, &tt);
    pb_str(&vi, 1, name);
    pb_msg(&vi, 2, &type);
    pb_msg(out, field, &vi);
    pb_free(&dim);
    pb_free(&shape);
    pb_free(&tt);
    pb_free(&type);
    pb_free(&vi);
}

/* ModelProto: y = x + w, with x, y float[2] and the TensorProto `w` as given (already encoded,
 * its name must be "w"). `graph_extra` (may be NULL) is appended to the GraphProto's bytes. */
static void model_with_init(struct pb *out, const struct pb *w, const struct pb *graph_extra) {
    struct pb node = {0}, graph = {0}, opset = {0};
    pb_str(&node, 1, "x");
    pb_str(&node, 1, "w");
    pb_str(&node, 2, "y");
    pb_str(&node, 3, "add");
    pb_str(&node, 4, "Add");
    pb_msg(&graph, 1, &node);
    pb_str(&graph, 2, "bad_input");
    if (w) pb_msg(&graph, 5, w);
    value_info(&graph, 11, "x", 2);
    value_info(&graph, 12, "y", 2);
    if (graph_extra) pb_put(&graph, graph_extra->p, graph_extra->n);
    pb_str(&opset, 1, "");
    pb_int(&opset, 2, 13);
    pb_int(out, 1, 8);
    pb_str(out, 2, "qplace-bad-input");
    pb_msg(out, 7, &graph);
    pb_msg(out, 8, &opset);
    pb_free(&node);
    pb_free(&graph);
    pb_free(&opset);
}

/* TensorProto "w" of FLOAT with the given dims and `raw_len` bytes of raw_data (-1: none). */
static void tensor_raw(struct pb *t, int rank, const int64_t *dims, long raw_len) {
    for (int k = 0; k < rank; k++)
        pb_int(t, 1, (uint64_t)dims[k]);
    pb_int(t, 2, 1 /* FLOAT */);
    pb_str(t, 8, "w");
    if (raw_len >= 0) {
        uint8_t *zeros = calloc(1, (size_t)raw_len + 1);
        if (!zeros) exit(3);
        pb_bytes(t, 9, zeros, (size_t)raw_len);
        free(zeros);
    }
}

static void kv(struct pb *t, const char *key, const char *value) {
    struct pb e = {0};
    pb_str(&e, 1, key);
    pb_str(&e, 2, value);
    pb_msg(t, 13, &e);
    pb_free(&e);
}

/* TensorProto "w" FLOAT [n] stored externally; NULL keys are left out. */
static void tensor_ext(struct pb *t, uint64_t n, const char *location, const char *offset,
                       const char *length) {
    pb_int(t, 1, n);
    pb_int(t, 2, 1);
    pb_str(t, 8, "w");
    if (location) kv(t, "location", location);
    if (offset) kv(t, "offset", offset);
    if (length) kv(t, "length", length);
    pb_int(t, 14, 1 /* EXTERNAL */);
}

/* ---- files ----------------------------------------------------------------------------------- */

static void write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f || (len && fwrite(data, 1, len, f) != len) || fclose(f) != 0) {
        fprintf(stderr, "bad_input: cannot write %s: %s\n", path, strerror(errno));
        exit(3);
    }
}

/* A fresh folder WORKDIR/<name>/ for one case; returns its path in `dir`. */
static void case_dir(char *dir, size_t size, const char *name) {
    snprintf(dir, size, "%s/%s", workdir, name);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "bad_input: mkdir %s: %s\n", dir, strerror(errno));
        exit(3);
    }
}

/* ---- running one case ---------------------------------------------------------------------- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void fail(const char *name, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void fail(const char *name, const char *fmt, ...) {
    char what[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    printf("FAIL %s: %s\n", name, what);
    n_failed++;
}

/* First line of the child's stderr (for messages), and whether it looks like a sanitizer report. */
static void read_stderr(const char *path, char *first, size_t size, int *sanitizer) {
    first[0] = 0;
    *sanitizer = 0;
    size_t len = 0;
    unsigned char *all = read_whole_file(path, &len);
    if (!all) return;
    char *text = malloc(len + 1);
    if (!text) {
        free(all);
        return;
    }
    memcpy(text, all, len);
    text[len] = 0;
    free(all);
    if (strstr(text, "Sanitizer") || strstr(text, "runtime error:")) *sanitizer = 1;
    size_t k = 0;
    while (k < len && (text[k] == '\n' || text[k] == ' ' || text[k] == '\t'))
        k++;
    size_t j = 0;
    while (k < len && text[k] != '\n' && j + 1 < size)
        first[j++] = text[k++];
    first[j] = 0;
    free(text);
}

static void run_case(const char *name, const char *model_path, enum expect expect) {
    char err_path[4096];
    snprintf(err_path, sizeof err_path, "%s/stderr.txt", workdir);
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        fail(name, "fork: %s", strerror(errno));
        return;
    }
    if (pid == 0) {
        int out = open("/dev/null", O_WRONLY);
        int err = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (out < 0 || err < 0) _exit(126);
        dup2(out, 1);
        dup2(err, 2);
        struct rlimit cpu = {TIME_LIMIT_S, TIME_LIMIT_S + 5};
        setrlimit(RLIMIT_CPU, &cpu);
        if (!QP_UNDER_ASAN) {
            /* ASan reserves terabytes of shadow address space, so only other builds cap it. */
            struct rlimit as = {(rlim_t)AS_LIMIT_MB << 20, (rlim_t)AS_LIMIT_MB << 20};
            setrlimit(RLIMIT_AS, &as);
        }
        execl(qplace_bin, qplace_bin, "info", model_path, (char *)NULL);
        _exit(127);
    }
    double start = now_s();
    int status = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    for (;;) {
        pid_t r = wait4(pid, &status, WNOHANG, &ru);
        if (r == pid) break;
        if (r < 0 && errno != EINTR) {
            fail(name, "wait: %s", strerror(errno));
            return;
        }
        if (now_s() - start > TIME_LIMIT_S) {
            kill(pid, SIGKILL);
            wait4(pid, &status, 0, &ru);
            fail(name, "no answer after %d s (hang)", TIME_LIMIT_S);
            return;
        }
        struct timespec ts = {0, 2 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    char first[512];
    int sanitizer = 0;
    read_stderr(err_path, first, sizeof first, &sanitizer);
    long rss_mb = ru.ru_maxrss / 1024;
    if (WIFSIGNALED(status)) {
        fail(name, "killed by signal %d (%s) %s", WTERMSIG(status), strsignal(WTERMSIG(status)),
             first);
        return;
    }
    int code = WEXITSTATUS(status);
    if (code == 127 || code == 126) {
        fail(name, "could not run %s", qplace_bin);
        return;
    }
    if (sanitizer) {
        fail(name, "sanitizer report (exit %d): %s", code, first);
        return;
    }
    if (rss_mb > RSS_LIMIT_MB) {
        fail(name, "peak RSS %ld MB over the %d MB limit", rss_mb, RSS_LIMIT_MB);
        return;
    }
    int ok_allowed = expect == EXPECT_OK || expect == EXPECT_OK_OR_ERR;
    int err_allowed = expect == EXPECT_ERROR || expect == EXPECT_OK_OR_ERR;
    if (code == 0 && ok_allowed) {
        n_passed++;
        return;
    }
    if (code == 2 && err_allowed) {
        if (!first[0]) {
            fail(name, "exit 2 without a message on stderr");
            return;
        }
        n_passed++;
        return;
    }
    fail(name, "exit %d, expected %s%s%s", code,
         expect == EXPECT_OK      ? "0"
         : expect == EXPECT_ERROR ? "2 (bad input)"
                                  : "0 or 2",
         first[0] ? ": " : "", first);
}

/* Writes `data` as WORKDIR/<name>/model.onnx and runs it. */
static void run_bytes(const char *name, const void *data, size_t len, enum expect expect) {
    char dir[4096], path[4200];
    case_dir(dir, sizeof dir, name);
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    write_file(path, data, len);
    run_case(name, path, expect);
}

/* ---- cases ----------------------------------------------------------------------------------- */

/* Offsets at which top-level ModelProto fields start (plus the end): a truncation exactly there
 * is still well-formed protobuf, anywhere else it cuts a field short. Returns the count. */
static size_t top_level_boundaries(const uint8_t *p, size_t n, size_t *out, size_t cap) {
    size_t k = 0, count = 0;
    while (count < cap) {
        out[count++] = k;
        if (k >= n) break;
        uint64_t key = 0;
        int shift = 0;
        while (k < n && shift < 64) {
            key |= (uint64_t)(p[k] & 127) << shift;
            shift += 7;
            if (!(p[k++] & 128)) break;
        }
        unsigned wire = key & 7;
        if (wire == 0) {
            while (k < n && (p[k] & 128))
                k++;
            k++;
        } else if (wire == 1) {
            k += 8;
        } else if (wire == 5) {
            k += 4;
        } else if (wire == 2) {
            uint64_t len = 0;
            shift = 0;
            while (k < n && shift < 64) {
                len |= (uint64_t)(p[k] & 127) << shift;
                shift += 7;
                if (!(p[k++] & 128)) break;
            }
            if (len > n) break;
            k += len;
        } else {
            break;
        }
        if (k > n) break;
    }
    return count;
}

static void truncations(const char *seed_path, int seed_index) {
    size_t n = 0;
    uint8_t *data = read_whole_file(seed_path, &n);
    if (!data) {
        fail(seed_path, "cannot read seed model");
        return;
    }
    char name[256];
    snprintf(name, sizeof name, "seed%d", seed_index);
    run_bytes(name, data, n, EXPECT_OK);

    size_t bounds[4096];
    size_t nb = top_level_boundaries(data, n, bounds, 4096);
    /* Every cut for small models, about 160 spread evenly for larger ones (each case is a
     * process, which costs under ASan). */
    size_t step = n <= 400 ? 1 : n / 160;
    size_t cases = 0, before = n_failed;
    for (size_t cut = 0; cut < n; cut += step) {
        int at_boundary = 0;
        for (size_t b = 0; b < nb; b++)
            if (bounds[b] == cut) at_boundary = 1;
        snprintf(name, sizeof name, "seed%d-trunc-%zu", seed_index, cut);
        run_bytes(name, data, cut, at_boundary ? EXPECT_OK_OR_ERR : EXPECT_ERROR);
        cases++;
    }
    printf("%s: %zu truncations, %zu failed\n", seed_path, cases, n_failed - before);
    free(data);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng(void) {
    /* xorshift64*: deterministic, so a failure reproduces. */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}

static void random_bytes(void) {
    for (int k = 0; k < 24; k++) {
        size_t len = 64 + (size_t)(rng() % 8192);
        uint8_t *buf = malloc(len);
        if (!buf) exit(3);
        for (size_t j = 0; j < len; j++)
            buf[j] = (uint8_t)(rng() >> 32);
        char name[64];
        snprintf(name, sizeof name, "random-%d", k);
        run_bytes(name, buf, len, EXPECT_ERROR);
        free(buf);
    }
}

static void wrong_wire_types(void) {
    struct pb m = {0}, g = {0}, t = {0};
    int64_t two = 2;

    /* ModelProto.graph (a message) as a varint. */
    pb_int(&m, 1, 8);
    pb_int(&m, 7, 12345);
    run_bytes("graph-as-varint", m.p, m.n, EXPECT_ERROR);
    pb_free(&m);

    /* GraphProto.node (a message) as a varint, inside an otherwise fine model. */
    pb_int(&g, 1, 7);
    model_with_init(&m, NULL, &g);
    run_bytes("node-as-varint", m.p, m.n, EXPECT_ERROR);
    pb_free(&m);
    pb_free(&g);

    /* GraphProto.initializer as a fixed32. */
    pb_tag(&g, 5, 5);
    pb_put(&g, "\x01\x02\x03\x04", 4);
    model_with_init(&m, NULL, &g);
    run_bytes("initializer-as-fixed32", m.p, m.n, EXPECT_ERROR);
    pb_free(&m);
    pb_free(&g);

    /* ModelProto.ir_version (a varint) as a length-delimited field. */
    pb_str(&m, 1, "eight");
    run_bytes("ir-version-as-bytes", m.p, m.n, EXPECT_ERROR);
    pb_free(&m);

    /* A varint that never ends (11 continuation bytes). */
    pb_tag(&m, 1, 0);
    pb_put(&m, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 11);
    run_bytes("endless-varint", m.p, m.n, EXPECT_ERROR);
    pb_free(&m);

    /* A graph whose length claims 2^62 bytes. */
    pb_int(&m, 1, 8);
    pb_tag(&m, 7, 2);
    pb_varint(&m, 1ull << 62);
    pb_put(&m, "\x0a\x00", 2);
    run_bytes("length-past-end", m.p, m.n, EXPECT_ERROR);
    pb_free(&m);

    /* Wire types 3/4 (groups) and 6/7 (invalid) at the top level. */
    for (unsigned wire = 3; wire <= 7; wire++) {
        char name[64];
        pb_int(&m, 1, 8);
        pb_tag(&m, 7, wire);
        pb_put(&m, "\x00\x00\x00\x00\x00\x00\x00\x00", 8);
        snprintf(name, sizeof name, "wire-type-%u", wire);
        run_bytes(name, m.p, m.n, EXPECT_ERROR);
        pb_free(&m);
    }

    /* TensorProto.dims given as a packed run that ends mid-varint. */
    pb_bytes(&t, 1, "\x02\x80", 2);
    pb_int(&t, 2, 1);
    pb_str(&t, 8, "w");
    pb_bytes(&t, 9, "\0\0\0\0\0\0\0\0", 8);
    model_with_init(&m, &t, NULL);
    run_bytes("packed-dims-cut", m.p, m.n, EXPECT_ERROR);
    pb_free(&m);
    pb_free(&t);

    /* Control: the same model with a well-formed initializer loads. */
    tensor_raw(&t, 1, &two, 8);
    model_with_init(&m, &t, NULL);
    run_bytes("control-inline", m.p, m.n, EXPECT_OK);
    pb_free(&m);
    pb_free(&t);
}

static void huge_dims(void) {
    struct pb m = {0}, t = {0};
    int64_t tera[3] = {1 << 20, 1 << 20, 1 << 20}; /* 2^60 floats */
    int64_t overflow[2] = {(int64_t)1 << 40, (int64_t)1 << 40};
    int64_t negative[2] = {-1, 2};
    int64_t three = 3;

    tensor_raw(&t, 3, tera, 8);
    model_with_init(&m, &t, NULL);
    run_bytes("terabyte-dims-small-raw", m.p, m.n, EXPECT_ERROR);
    pb_free(&m);
    pb_free(&t);

    tensor_raw(&t, 3, tera, -1);
    model_with_init(&m, &t, NULL);
    run_bytes("terabyte-dims-no-data", m.p, m.n, EXPECT_ERROR);
    pb_free(&m);
    pb_free(&t);

    tensor_raw(&t, 2, overflow, 8);
    model_with_init(&m, &t, NULL);
    run_bytes("dims-product-overflow", m.p, m.n, EXPECT_ERROR);
    pb_free(&m);
    pb_free(&t);

    tensor_raw(&t, 2, negative, 8);
    model_with_init(&m, &t, NULL);
    run_bytes("negative-dim", m.p, m.n, EXPECT_ERROR);
    pb_free(&m);
    pb_free(&t);

    /* float_data with fewer values than the dims ask for. */
    pb_int(&t, 1, (uint64_t)three);
    pb_int(&t, 2, 1);
    pb_bytes(&t, 4, "\0\0\x80\x3f\0\0\0\x40", 8);
    pb_str(&t, 8, "w");
    model_with_init(&m, &t, NULL);
    run_bytes("float-data-count", m.p, m.n, EXPECT_ERROR);
    pb_free(&m);
    pb_free(&t);

    /* Terabyte dims on an int64 tensor held in int64_data. */
    for (int k = 0; k < 3; k++)
        pb_int(&t, 1, (uint64_t)tera[k]);
    pb_int(&t, 2, 7);
    pb_bytes(&t, 7, "\x01\x02", 2);
    pb_str(&t, 8, "w");
    model_with_init(&m, &t, NULL);
    run_bytes("terabyte-dims-int64-data", m.p, m.n, EXPECT_ERROR);
    pb_free(&m);
    pb_free(&t);

    /* A rank far above any real tensor (10000 dims of 1). */
    for (int k = 0; k < 10000; k++)
        pb_int(&t, 1, 1);
    pb_int(&t, 2, 1);
    pb_str(&t, 8, "w");
    pb_bytes(&t, 9, "\0\0\0\0", 4);
    model_with_init(&m, &t, NULL);
    run_bytes("rank-10000", m.p, m.n, EXPECT_OK_OR_ERR);
    pb_free(&m);
    pb_free(&t);
}

/* One external-data case: `location` etc. as in tensor_ext for FLOAT[n]; the case folder gets
 * weights.bin (16 bytes). */
static void ext_case(const char *name, uint64_t n, const char *location, const char *offset,
                     const char *length, enum expect expect) {
    char dir[4096], path[4200];
    case_dir(dir, sizeof dir, name);
    snprintf(path, sizeof path, "%s/weights.bin", dir);
    write_file(path, "0123456789abcdef", 16);
    struct pb m = {0}, t = {0};
    tensor_ext(&t, n, location, offset, length);
    model_with_init(&m, &t, NULL);
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    write_file(path, m.p, m.n);
    pb_free(&m);
    pb_free(&t);
    run_case(name, path, expect);
}

static void external_data(void) {
    char path[4200], dir[4096], abs_loc[4300];
    snprintf(path, sizeof path, "%s/outside.bin", workdir);
    write_file(path, "0123456789abcdef", 16);

    ext_case("ext-control", 2, "weights.bin", "8", "8", EXPECT_OK);
    ext_case("ext-control-no-offset", 4, "weights.bin", NULL, NULL, EXPECT_OK);
    ext_case("ext-parent-dir", 2, "../outside.bin", NULL, "8", EXPECT_ERROR);
    ext_case("ext-parent-dir-nested", 2, "sub/../../outside.bin", NULL, "8", EXPECT_ERROR);
    snprintf(abs_loc, sizeof abs_loc, "%s/ext-absolute/weights.bin", workdir);
    ext_case("ext-absolute", 2, abs_loc, NULL, "8", EXPECT_ERROR);
    ext_case("ext-etc-passwd", 2, "/etc/passwd", NULL, "8", EXPECT_ERROR);
    ext_case("ext-offset-past-end", 2, "weights.bin", "1000", "8", EXPECT_ERROR);
    ext_case("ext-length-past-end", 2, "weights.bin", "8", "16", EXPECT_ERROR);
    ext_case("ext-file-too-short", 8, "weights.bin", NULL, NULL, EXPECT_ERROR);
    ext_case("ext-terabyte-dims", (uint64_t)1 << 40, "weights.bin", NULL, NULL, EXPECT_ERROR);
    ext_case("ext-length-mismatch", 2, "weights.bin", "0", "12", EXPECT_ERROR);
    ext_case("ext-offset-overflow", 2, "weights.bin", "18446744073709551615", "8", EXPECT_ERROR);
    ext_case("ext-offset-negative", 2, "weights.bin", "-8", "8", EXPECT_ERROR);
    ext_case("ext-offset-garbage", 2, "weights.bin", "8abc", "8", EXPECT_ERROR);
    ext_case("ext-missing-file", 2, "missing.bin", NULL, "8", EXPECT_ERROR);
    ext_case("ext-no-location", 2, NULL, NULL, "8", EXPECT_ERROR);
    ext_case("ext-empty-location", 2, "", NULL, "8", EXPECT_ERROR);
    ext_case("ext-location-is-folder", 2, ".", NULL, "8", EXPECT_ERROR);

    /* A symlink inside the folder that points outside it. */
    case_dir(dir, sizeof dir, "ext-symlink-out");
    snprintf(path, sizeof path, "%s/link.bin", dir);
    unlink(path);
    snprintf(abs_loc, sizeof abs_loc, "%s/outside.bin", workdir);
    if (symlink(abs_loc, path) != 0) {
        fail("ext-symlink-out", "symlink: %s", strerror(errno));
    } else {
        ext_case("ext-symlink-out", 2, "link.bin", NULL, "8", EXPECT_ERROR);
    }
}

/* Subgraphs nested `depth` deep: If nodes whose then/else branches hold the next If. */
static void nested(struct pb *graph, int depth) {
    struct pb g = {0};
    if (depth > 0) {
        struct pb inner = {0}, attr = {0}, node = {0};
        nested(&inner, depth - 1);
        pb_str(&node, 1, "c");
        pb_str(&node, 2, "o");
        pb_str(&node, 4, "If");
        pb_str(&attr, 1, "then_branch");
        pb_int(&attr, 20, 5 /* GRAPH */);
        pb_msg(&attr, 6, &inner);
        pb_msg(&node, 5, &attr);
        pb_free(&attr);
        pb_str(&attr, 1, "else_branch");
        pb_int(&attr, 20, 5);
        pb_msg(&attr, 6, &inner);
        pb_msg(&node, 5, &attr);
        pb_msg(&g, 1, &node);
        pb_free(&inner);
        pb_free(&attr);
        pb_free(&node);
    }
    pb_str(&g, 2, "g");
    pb_put(graph, g.p, g.n);
    pb_free(&g);
}

static void deep_nesting(void) {
    /* Branch graphs are written twice per level, so the size doubles with depth: keep the
     * doubling version shallow and make the deep one with a single branch. */
    struct pb g = {0}, m = {0};
    struct pb opset = {0};
    nested(&g, 12);
    pb_str(&opset, 1, "");
    pb_int(&opset, 2, 13);
    pb_int(&m, 1, 8);
    pb_msg(&m, 7, &g);
    pb_msg(&m, 8, &opset);
    pb_free(&opset);
    run_bytes("nested-if-12", m.p, m.n, EXPECT_OK_OR_ERR);
    pb_free(&m);
    pb_free(&g);

    /* 100000 levels of graph -> node -> attribute -> graph: loading may refuse it, but must
     * not run out of stack on it. Each level is a header (whose lengths depend only on the size
     * of what it wraps) followed by the level inside, so the headers are made inside out and
     * written outside in. */
    enum { LEVELS = 100000 };
    struct pb *headers = calloc(LEVELS, sizeof *headers);
    if (!headers) exit(3);
    struct pb inner = {0};
    pb_str(&inner, 2, "g");
    size_t len = inner.n; /* size of the GraphProto at the current level */
    for (int k = 0; k < LEVELS; k++) {
        struct pb attr_head = {0}, node_head = {0};
        pb_str(&attr_head, 1, "then_branch");
        pb_int(&attr_head, 20, 5);
        pb_tag(&attr_head, 6, 2);
        pb_varint(&attr_head, len);
        size_t attr_len = attr_head.n + len;
        pb_str(&node_head, 4, "If");
        pb_tag(&node_head, 5, 2);
        pb_varint(&node_head, attr_len);
        size_t node_len = node_head.n + attr_len;
        pb_tag(&headers[k], 1, 2); /* GraphProto.node */
        pb_varint(&headers[k], node_len);
        pb_put(&headers[k], node_head.p, node_head.n);
        pb_put(&headers[k], attr_head.p, attr_head.n);
        len = headers[k].n + len;
        pb_free(&attr_head);
        pb_free(&node_head);
    }
    pb_int(&m, 1, 8);
    pb_tag(&m, 7, 2);
    pb_varint(&m, len);
    for (int k = LEVELS - 1; k >= 0; k--) {
        pb_put(&m, headers[k].p, headers[k].n);
        pb_free(&headers[k]);
    }
    pb_put(&m, inner.p, inner.n);
    free(headers);
    pb_free(&inner);
    run_bytes("nested-100000", m.p, m.n, EXPECT_OK_OR_ERR);
    pb_free(&m);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: bad_input QPLACE WORKDIR [SEED.onnx...]\n");
        return 1;
    }
    qplace_bin = argv[1];
    workdir = argv[2];
    if (access(qplace_bin, X_OK) != 0) {
        printf("FAIL: %s is not an executable\n0 passed, 1 failed\n", qplace_bin);
        return 1;
    }
    remove_tree(workdir);
    if (mkdir(workdir, 0755) != 0) {
        fprintf(stderr, "bad_input: mkdir %s: %s\n", workdir, strerror(errno));
        return 1;
    }
    for (int k = 3; k < argc; k++)
        truncations(argv[k], k - 3);
    random_bytes();
    wrong_wire_types();
    huge_dims();
    external_data();
    deep_nesting();
    printf("%zu passed, %zu failed\n", n_passed, n_failed);
    /* Kept after a failure (and with QP_KEEP_BAD_INPUT=1) to look at the cases. */
    if (n_failed == 0 && !getenv("QP_KEEP_BAD_INPUT")) remove_tree(workdir);
    return n_failed ? 1 : 0;
}
