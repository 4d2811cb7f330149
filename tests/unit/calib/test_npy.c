/*
 * .npy reading and writing against files numpy wrote (tests/data/npy/gen_npy.py), hand-made
 * headers, and every truncation of a valid file.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "calib/npy.h"
#include "qplace/npy.h"

#define DATA QP_TEST_DATA_DIR "/npy/"

/* ---- helpers ------------------------------------------------------------------------------ */

static const double floats[6] = {-1.5, 0.0, 0.25, 3.0, 1024.0, -0.125};
static const uint8_t bools[6] = {1, 0, 1, 1, 0, 0};
static const double complexes[12] = {1, 2, -0.5, -0.25, 0, 0, 0, 3, -4, 0, 0.125, 8};

static const char *const codes[] = {"f2", "f4", "f8", "i1", "i2", "i4", "i8",
                                    "u1", "u2", "u4", "u8", "b1", "c8", "c16"};
#define N_CODES (sizeof codes / sizeof codes[0])

static enum qp_dtype dtype_of(const char *code) {
    static const struct {
        const char *code;
        enum qp_dtype dt;
    } map[] = {{"f2", QP_DTYPE_FLOAT16},   {"f4", QP_DTYPE_FLOAT},      {"f8", QP_DTYPE_DOUBLE},
               {"i1", QP_DTYPE_INT8},      {"i2", QP_DTYPE_INT16},      {"i4", QP_DTYPE_INT32},
               {"i8", QP_DTYPE_INT64},     {"u1", QP_DTYPE_UINT8},      {"u2", QP_DTYPE_UINT16},
               {"u4", QP_DTYPE_UINT32},    {"u8", QP_DTYPE_UINT64},     {"b1", QP_DTYPE_BOOL},
               {"c8", QP_DTYPE_COMPLEX64}, {"c16", QP_DTYPE_COMPLEX128}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcmp(map[i].code, code) == 0) return map[i].dt;
    fail_msg("unknown code %s", code);
    return QP_DTYPE_UNDEFINED;
}

/* The six integers gen_npy.py's ints() gives, as int64 / uint64. */
static void int_values(const char *code, int64_t *s, uint64_t *u) {
    int bits = 8 * atoi(code + 1);
    if (code[0] == 'i') {
        int64_t max = bits == 64 ? INT64_MAX : (int64_t)((UINT64_C(1) << (bits - 1)) - 1);
        int64_t v[6] = {-max - 1, -1, 0, 1, 2, max};
        memcpy(s, v, sizeof v);
    } else {
        uint64_t max = bits == 64 ? UINT64_MAX : (UINT64_C(1) << bits) - 1;
        uint64_t v[6] = {0, 1, 2, 3, max - 1, max};
        memcpy(u, v, sizeof v);
    }
}

/* Fills `a` (owned) with the (2, 3) test array of type `code`, as numpy holds it. */
static void make_expected(const char *code, struct qp_array *a) {
    int64_t dims[2] = {2, 3};
    struct qp_error err = {0};
    assert_int_equal(qp_array_alloc(a, dtype_of(code), 2, dims, &err), QP_OK);
    int64_t s[6];
    uint64_t u[6];
    for (int i = 0; i < 6; i++) {
        switch (a->dtype) {
        case QP_DTYPE_FLOAT16:
            ((uint16_t *)a->data)[i] = qp_f32_to_fp16((float)floats[i]);
            break;
        case QP_DTYPE_FLOAT:
            ((float *)a->data)[i] = (float)floats[i];
            break;
        case QP_DTYPE_DOUBLE:
            ((double *)a->data)[i] = floats[i];
            break;
        case QP_DTYPE_BOOL:
            ((uint8_t *)a->data)[i] = bools[i];
            break;
        case QP_DTYPE_COMPLEX64:
            ((float *)a->data)[2 * i] = (float)complexes[2 * i];
            ((float *)a->data)[2 * i + 1] = (float)complexes[2 * i + 1];
            break;
        case QP_DTYPE_COMPLEX128:
            ((double *)a->data)[2 * i] = complexes[2 * i];
            ((double *)a->data)[2 * i + 1] = complexes[2 * i + 1];
            break;
        default:
            int_values(code, s, u);
            switch (a->dtype) {
            case QP_DTYPE_INT8:
                ((int8_t *)a->data)[i] = (int8_t)s[i];
                break;
            case QP_DTYPE_INT16:
                ((int16_t *)a->data)[i] = (int16_t)s[i];
                break;
            case QP_DTYPE_INT32:
                ((int32_t *)a->data)[i] = (int32_t)s[i];
                break;
            case QP_DTYPE_INT64:
                ((int64_t *)a->data)[i] = s[i];
                break;
            case QP_DTYPE_UINT8:
                ((uint8_t *)a->data)[i] = (uint8_t)u[i];
                break;
            case QP_DTYPE_UINT16:
                ((uint16_t *)a->data)[i] = (uint16_t)u[i];
                break;
            case QP_DTYPE_UINT32:
                ((uint32_t *)a->data)[i] = (uint32_t)u[i];
                break;
            case QP_DTYPE_UINT64:
                ((uint64_t *)a->data)[i] = u[i];
                break;
            default:
                fail();
            }
        }
    }
}

static void assert_same_array(const struct qp_array *got, const struct qp_array *want) {
    assert_int_equal(got->dtype, want->dtype);
    assert_int_equal(got->rank, want->rank);
    for (int i = 0; i < want->rank; i++)
        assert_int_equal(got->dims[i], want->dims[i]);
    assert_int_equal(got->nbytes, want->nbytes);
    if (want->nbytes) assert_memory_equal(got->data, want->data, want->nbytes);
    assert_true(got->owned);
    assert_non_null(got->data);
}

static void read_ok(const char *rel, struct qp_array *a) {
    char path[1024];
    snprintf(path, sizeof path, DATA "%s", rel);
    struct qp_error err = {0};
    enum qp_status st = qp_npy_read_file(path, a, &err);
    if (st != QP_OK) fail_msg("%s: %s", rel, err.msg);
}

static int read_file_bytes(const char *path, uint8_t **data, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *data = malloc(n > 0 ? (size_t)n : 1);
    *size = fread(*data, 1, (size_t)n, f);
    fclose(f);
    return *size == (size_t)n ? 0 : -1;
}

/* A fresh empty folder for outputs, under the build tree. */
static void make_tmpdir(char *dir, size_t size) {
    snprintf(dir, size, "%s/npy_test_XXXXXX", QP_TEST_BINARY_DIR);
    assert_non_null(mkdtemp(dir));
}

static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

static void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[1024];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode))
            remove_tree(p);
        else
            unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

/* ---- accepted files ----------------------------------------------------------------------- */

static void test_every_dtype_little_and_big_endian(void **state) {
    (void)state;
    for (size_t i = 0; i < N_CODES; i++) {
        struct qp_array want, got;
        make_expected(codes[i], &want);
        char rel[64];
        snprintf(rel, sizeof rel, "ok/le_%s.npy", codes[i]);
        read_ok(rel, &got);
        assert_same_array(&got, &want);
        qp_array_release(&got);
        if (strcmp(codes[i], "i1") && strcmp(codes[i], "u1") && strcmp(codes[i], "b1")) {
            snprintf(rel, sizeof rel, "ok/be_%s.npy", codes[i]);
            read_ok(rel, &got);
            assert_same_array(&got, &want);
            qp_array_release(&got);
        }
        qp_array_release(&want);
    }
}

static void test_versions_and_header_spellings(void **state) {
    (void)state;
    static const struct {
        const char *file, *code;
    } cases[] = {{"ok/v2_f4.npy", "f4"},      {"ok/v3_i4.npy", "i4"},  {"ok/hdr_order.npy", "f4"},
                 {"ok/hdr_dquote.npy", "f4"}, {"ok/hdr_ws.npy", "f4"}, {"ok/hdr_nopad.npy", "f4"},
                 {"ok/hdr_align16.npy", "f4"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct qp_array want, got;
        make_expected(cases[i].code, &want);
        read_ok(cases[i].file, &got);
        assert_same_array(&got, &want);
        qp_array_release(&got);
        qp_array_release(&want);
    }
}

static void test_fortran_order_is_transposed(void **state) {
    (void)state;
    struct qp_array a;
    read_ok("ok/fortran_f4.npy", &a);
    assert_int_equal(a.dtype, QP_DTYPE_FLOAT);
    assert_int_equal(a.rank, 3);
    assert_int_equal(a.dims[0], 2);
    assert_int_equal(a.dims[1], 3);
    assert_int_equal(a.dims[2], 4);
    for (int i = 0; i < 24; i++)
        assert_true(((float *)a.data)[i] == (float)i);
    qp_array_release(&a);

    read_ok("ok/fortran_be_i2.npy", &a);
    assert_int_equal(a.dtype, QP_DTYPE_INT16);
    assert_int_equal(a.rank, 2);
    assert_int_equal(a.dims[0], 3);
    assert_int_equal(a.dims[1], 4);
    for (int i = 0; i < 12; i++)
        assert_int_equal(((int16_t *)a.data)[i], i);
    qp_array_release(&a);
}

static void test_scalar_empty_vector_rank8_bool(void **state) {
    (void)state;
    struct qp_array a;
    read_ok("ok/scalar_f8.npy", &a);
    assert_int_equal(a.dtype, QP_DTYPE_DOUBLE);
    assert_int_equal(a.rank, 0);
    assert_int_equal(a.nbytes, 8);
    assert_true(*(double *)a.data == 3.5);
    qp_array_release(&a);

    read_ok("ok/empty_f4.npy", &a);
    assert_int_equal(a.rank, 2);
    assert_int_equal(a.dims[0], 0);
    assert_int_equal(a.dims[1], 3);
    assert_int_equal(a.nbytes, 0);
    assert_non_null(a.data);
    qp_array_release(&a);

    read_ok("ok/empty_mid_i8.npy", &a);
    assert_int_equal(a.dtype, QP_DTYPE_INT64);
    assert_int_equal(a.rank, 3);
    assert_int_equal(a.dims[1], 0);
    assert_int_equal(a.dims[2], 5);
    assert_int_equal(a.nbytes, 0);
    qp_array_release(&a);

    read_ok("ok/vec_u2.npy", &a);
    assert_int_equal(a.dtype, QP_DTYPE_UINT16);
    assert_int_equal(a.rank, 1);
    assert_int_equal(a.dims[0], 5);
    for (int i = 0; i < 5; i++)
        assert_int_equal(((uint16_t *)a.data)[i], i);
    qp_array_release(&a);

    read_ok("ok/rank8_i1.npy", &a);
    assert_int_equal(a.rank, 8);
    static const int64_t dims8[8] = {1, 2, 1, 2, 1, 2, 1, 2};
    for (int i = 0; i < 8; i++)
        assert_int_equal(a.dims[i], dims8[i]);
    for (int i = 0; i < 16; i++)
        assert_int_equal(((int8_t *)a.data)[i], i);
    qp_array_release(&a);

    read_ok("ok/bool_bytes.npy", &a);
    assert_int_equal(a.dtype, QP_DTYPE_BOOL);
    static const uint8_t want[4] = {0, 1, 1, 1};
    assert_memory_equal(a.data, want, 4);
    qp_array_release(&a);
}

/* ---- refused files ------------------------------------------------------------------------ */

static void test_refused_files(void **state) {
    (void)state;
    static const struct {
        const char *file;
        enum qp_status status;
        const char *words; /* must appear in the message */
    } cases[] = {
        {"bad/object.npy", QP_ERR_UNSUPPORTED, "object array"},
        {"bad/structured.npy", QP_ERR_UNSUPPORTED, "structured"},
        {"bad/unicode.npy", QP_ERR_UNSUPPORTED, "strings"},
        {"bad/bytes.npy", QP_ERR_UNSUPPORTED, "strings"},
        {"bad/datetime.npy", QP_ERR_UNSUPPORTED, "datetime"},
        {"bad/void.npy", QP_ERR_UNSUPPORTED, "raw bytes"},
        {"bad/longdouble.npy", QP_ERR_UNSUPPORTED, "'<f16' is not supported"},
        {"bad/rank9.npy", QP_ERR_UNSUPPORTED, "more than 8 dimensions"},
        {"bad/short_data.npy", QP_ERR_BAD_INPUT, "needs 24 (truncated)"},
        {"bad/long_data.npy", QP_ERR_BAD_INPUT, "needs 24 (trailing bytes)"},
        {"bad/overflow_shape.npy", QP_ERR_BAD_INPUT, "overflows"},
        {"bad/huge_shape.npy", QP_ERR_BAD_INPUT, "needs 8000000000000"},
        {"bad/bad_magic.npy", QP_ERR_BAD_INPUT, "not an .npy file"},
        {"bad/version4.npy", QP_ERR_UNSUPPORTED, "version 4.0"},
        {"bad/header_past_end.npy", QP_ERR_BAD_INPUT, "the header claims 60000 bytes"},
        {"bad/missing_key.npy", QP_ERR_BAD_INPUT, "key 'fortran_order' is missing"},
        {"bad/extra_key.npy", QP_ERR_BAD_INPUT, "unknown key 'x'"},
        {"bad/dup_key.npy", QP_ERR_BAD_INPUT, "key 'descr' appears twice"},
        {"bad/shape_not_tuple.npy", QP_ERR_BAD_INPUT, "is not a tuple"},
        {"bad/negative_dim.npy", QP_ERR_BAD_INPUT, "negative dimension"},
        {"bad/no_byteorder.npy", QP_ERR_BAD_INPUT, "byte order"},
        {"bad/pipe_f4.npy", QP_ERR_BAD_INPUT, "multi-byte"},
        {"bad/lowercase_bool.npy", QP_ERR_BAD_INPUT, "not True or False"},
        {"bad/trailing_garbage.npy", QP_ERR_BAD_INPUT, "after the header dict"},
        {"bad/unterminated.npy", QP_ERR_BAD_INPUT, "malformed header"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[512];
        snprintf(path, sizeof path, DATA "%s", cases[i].file);
        struct qp_error err = {0};
        struct qp_array a;
        memset(&a, 0x5a, sizeof a);
        struct qp_array untouched = a;
        enum qp_status st = qp_npy_read_file(path, &a, &err);
        if (st != cases[i].status || !strstr(err.msg, cases[i].words) || !strstr(err.msg, path))
            fail_msg("%s: status %s, message '%s'", cases[i].file, qp_status_name(st), err.msg);
        assert_memory_equal(&a, &untouched, sizeof a); /* outputs only on success */
    }
}

static void test_read_file_io_errors(void **state) {
    (void)state;
    struct qp_error err = {0};
    struct qp_array a;
    assert_int_equal(qp_npy_read_file(DATA "no/such.npy", &a, &err), QP_ERR_IO);
    assert_non_null(strstr(err.msg, "no/such.npy: cannot open"));
    assert_int_equal(qp_npy_read_file(DATA "ok", &a, &err), QP_ERR_IO);
    assert_non_null(strstr(err.msg, "is a directory"));
    assert_int_equal(qp_npy_read_file(NULL, &a, &err), QP_ERR_USAGE);
}

/* Builds an .npy image with header dict `dict` (unpadded) and `data`. */
static size_t build(uint8_t *buf, const char *dict, const void *data, size_t n) {
    size_t h = strlen(dict);
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (uint8_t)(h & 0xff);
    buf[9] = (uint8_t)(h >> 8);
    memcpy(buf + 10, dict, h);
    if (n) memcpy(buf + 10 + h, data, n);
    return 10 + h + n;
}

static void test_header_grammar(void **state) {
    (void)state;
    static const struct {
        const char *dict;
        enum qp_status status;
        const char *words;
    } cases[] = {
        {"{'descr': '<u1', 'fortran_order': False, 'shape': (4,), }\n", QP_OK, ""},
        {"{'descr':'<u1','fortran_order':False,'shape':(4,)}", QP_OK, ""},
        {"{'descr': '=u1', 'fortran_order': True, 'shape': (2, 2)}   \n", QP_OK, ""},
        {"{'descr': '>u1', 'fortran_order': False, 'shape': (1, 4, )}", QP_OK, ""},
        {"", QP_ERR_BAD_INPUT, "expected '{'"},
        {"{", QP_ERR_BAD_INPUT, "expected a quoted string"},
        {"{'descr': '<u1', 'fortran_order': False, 'shape': (4,)", QP_ERR_BAD_INPUT,
         "expected ',' or '}'"},
        {"{'descr': '<u1', 'fortran_order': False, 'shape': (4,)}}", QP_ERR_BAD_INPUT,
         "after the header dict"},
        {"{'descr': '<u1', 'fortran_order': Falsey, 'shape': (4,)}", QP_ERR_BAD_INPUT,
         "not True or False"},
        {"{'descr': '<u1', 'fortran_order': 0, 'shape': (4,)}", QP_ERR_BAD_INPUT,
         "not True or False"},
        {"{'descr': '<u1', 'fortran_order': False, 'shape': [4]}", QP_ERR_BAD_INPUT, "not a tuple"},
        {"{'descr': '<u1', 'fortran_order': False, 'shape': (04,)}", QP_ERR_BAD_INPUT,
         "leading zero"},
        {"{'descr': '<u1', 'fortran_order': False, 'shape': (+4,)}", QP_ERR_BAD_INPUT,
         "expected an integer"},
        {"{'descr': '<u1', 'fortran_order': False, 'shape': (4,,)}", QP_ERR_BAD_INPUT,
         "expected an integer"},
        {"{'descr': '<u1', 'fortran_order': False, 'shape': (4 4)}", QP_ERR_BAD_INPUT,
         "expected ',' or ')'"},
        {"{'descr': '<u1', 'fortran_order': False, 'shape': (9223372036854775808,)}",
         QP_ERR_BAD_INPUT, "over 2^63-1"},
        {"{'descr': '<u1', 'fortran_order': False, 'shape': (4L,)}", QP_ERR_BAD_INPUT,
         "expected ',' or ')'"},
        {"{'descr': \"<u1', 'fortran_order': False, 'shape': (4,)}", QP_ERR_BAD_INPUT,
         "malformed header"},
        {"{'descr': '<u\\x31', 'fortran_order': False, 'shape': (4,)}", QP_ERR_BAD_INPUT,
         "escape sequence"},
        {"{'descr': '<u1' 'fortran_order': False, 'shape': (4,)}", QP_ERR_BAD_INPUT,
         "expected ',' or '}'"},
        {"{'descr' '<u1', 'fortran_order': False, 'shape': (4,)}", QP_ERR_BAD_INPUT,
         "expected ':'"},
        {"{'descr': [('a', '<u1')], 'fortran_order': False, 'shape': (4,)}", QP_ERR_UNSUPPORTED,
         "structured"},
        {"{'descr': '|O', 'fortran_order': False, 'shape': (4,)}", QP_ERR_UNSUPPORTED,
         "never unpickles"},
        {"{'descr': 'O', 'fortran_order': False, 'shape': (4,)}", QP_ERR_UNSUPPORTED,
         "object array"},
        {"{'descr': '<u3', 'fortran_order': False, 'shape': (4,)}", QP_ERR_UNSUPPORTED,
         "'<u3' is not supported"},
        {"{'descr': '<u1x', 'fortran_order': False, 'shape': (4,)}", QP_ERR_UNSUPPORTED,
         "not supported"},
        {"{'descr': '<', 'fortran_order': False, 'shape': (4,)}", QP_ERR_UNSUPPORTED,
         "not supported"},
        {"{'descr': '', 'fortran_order': False, 'shape': (4,)}", QP_ERR_BAD_INPUT, "byte order"},
        {"{'descr': 'float32', 'fortran_order': False, 'shape': (4,)}", QP_ERR_BAD_INPUT,
         "byte order"},
        {"{'descr': '<u00001', 'fortran_order': False, 'shape': (4,)}", QP_ERR_UNSUPPORTED,
         "not supported"},
        {"{'Descr': '<u1', 'fortran_order': False, 'shape': (4,)}", QP_ERR_BAD_INPUT,
         "unknown key 'Descr'"},
        {"{'descr': '<u1', 'fortran_order': False, 'shape': (4,), 'shape': (4,)}", QP_ERR_BAD_INPUT,
         "appears twice"},
        {"{'descr': '<u1', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 4)}",
         QP_ERR_UNSUPPORTED, "more than 8"},
        {"{'descr': '<u1', 'fortran_order': False, 'shape': (2,)}", QP_ERR_BAD_INPUT,
         "trailing bytes"},
        {"{'descr': '<u1', 'fortran_order': False, 'shape': (8,)}", QP_ERR_BAD_INPUT, "truncated"},
        {"{'descr': '<u1', 'fortran_order': False, 'shape': (-4,)}", QP_ERR_BAD_INPUT,
         "negative dimension"},
        {"{'descr': '<u1', 'fortran_order': False, 'shape': (4,)}\x01", QP_ERR_BAD_INPUT,
         "after the header dict"},
        {"{'descr': '<\xe9"
         "1', 'fortran_order': False, 'shape': (4,)}",
         QP_ERR_BAD_INPUT, "non-ASCII"},
    };
    static const uint8_t data[4] = {1, 2, 3, 4};
    uint8_t buf[512];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = build(buf, cases[i].dict, data, 4);
        struct qp_error err = {0};
        struct qp_array a = {0};
        enum qp_status st = qp_npy_read_buffer(buf, n, "mem.npy", &a, &err);
        if (st != cases[i].status || (st != QP_OK && (!strstr(err.msg, cases[i].words) ||
                                                      strncmp(err.msg, "mem.npy: ", 9) != 0)))
            fail_msg("case %zu (%s): status %s, message '%s'", i, cases[i].dict, qp_status_name(st),
                     err.msg);
        if (st == QP_OK) {
            assert_int_equal(a.dtype, QP_DTYPE_UINT8);
            assert_int_equal(a.nbytes, 4);
            /* (2, 2) in Fortran order: [[1, 3], [2, 4]] */
            static const uint8_t transposed[4] = {1, 3, 2, 4};
            assert_memory_equal(a.data, strstr(cases[i].dict, "True") ? transposed : data, 4);
        }
        qp_array_release(&a);
    }
}

/* Every proper prefix of a valid file fails cleanly as bad input; so does every byte appended. */
static void test_every_truncation_fails(void **state) {
    (void)state;
    static const char *const files[] = {"ok/le_f4.npy", "ok/v2_f4.npy", "ok/scalar_f8.npy",
                                        "ok/empty_f4.npy"};
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        char path[512];
        snprintf(path, sizeof path, DATA "%s", files[f]);
        uint8_t *buf = NULL;
        size_t size = 0;
        assert_int_equal(read_file_bytes(path, &buf, &size), 0);
        for (size_t n = 0; n < size; n++) {
            struct qp_error err = {0};
            struct qp_array a = {0};
            enum qp_status st = qp_npy_read_buffer(n ? buf : NULL, n, "cut.npy", &a, &err);
            if (st != QP_ERR_BAD_INPUT) fail_msg("%s cut at %zu: %s", files[f], n, err.msg);
        }
        uint8_t *longer = malloc(size + 1);
        memcpy(longer, buf, size);
        longer[size] = 0;
        struct qp_error err = {0};
        struct qp_array a = {0};
        assert_int_equal(qp_npy_read_buffer(longer, size + 1, NULL, &a, &err), QP_ERR_BAD_INPUT);
        assert_non_null(strstr(err.msg, "npy: "));
        assert_int_equal(qp_npy_read_buffer(buf, size, NULL, &a, &err), QP_OK);
        qp_array_release(&a);
        free(longer);
        free(buf);
    }
}

/* ---- pipes: size unknown up front --------------------------------------------------------- */

struct pipe_job {
    const char *fifo;
    const uint8_t *data;
    size_t size;
};

static void *pipe_writer(void *arg) {
    struct pipe_job *j = arg;
    FILE *f = fopen(j->fifo, "wb");
    if (f) {
        fwrite(j->data, 1, j->size, f);
        fclose(f);
    }
    return NULL;
}

static enum qp_status read_through_fifo(const uint8_t *data, size_t size, struct qp_array *a,
                                        struct qp_error *err) {
    char dir[512], fifo[600];
    make_tmpdir(dir, sizeof dir);
    snprintf(fifo, sizeof fifo, "%s/in.npy", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    struct pipe_job job = {fifo, data, size};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, pipe_writer, &job), 0);
    enum qp_status st = qp_npy_read_file(fifo, a, err);
    pthread_join(t, NULL);
    remove_tree(dir);
    return st;
}

static void test_read_from_pipe(void **state) {
    (void)state;
    signal(SIGPIPE, SIG_IGN); /* a reader that stops early must not kill the test */
    /* 3 MiB of float32, bigger than one growth step */
    const size_t n = 3 << 18;
    char dict[128];
    snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (%zu,), }", n);
    float *vals = malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        vals[i] = (float)i * 0.5f;
    uint8_t *buf = malloc(200 + n * 4);
    size_t size = build(buf, dict, vals, n * 4);
    struct qp_error err = {0};
    struct qp_array a;
    assert_int_equal(read_through_fifo(buf, size, &a, &err), QP_OK);
    assert_int_equal(a.dims[0], (int64_t)n);
    assert_memory_equal(a.data, vals, n * 4);
    qp_array_release(&a);

    /* short, and long by one byte */
    assert_int_equal(read_through_fifo(buf, size - 1, &a, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "truncated"));
    buf[size] = 0;
    assert_int_equal(read_through_fifo(buf, size + 1, &a, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "trailing bytes"));

    /* a header claiming 8 TB followed by 16 bytes: refused without allocating the claim */
    size =
        build(buf, "{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000000,)}", vals, 16);
    assert_int_equal(read_through_fifo(buf, size, &a, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "truncated: 16 bytes of data"));
    free(buf);
    free(vals);
}

/* ---- writing ------------------------------------------------------------------------------ */

/* What we write is byte for byte what numpy wrote. */
static void test_write_matches_numpy(void **state) {
    (void)state;
    char dir[512], out[600], want_path[600];
    make_tmpdir(dir, sizeof dir);
    snprintf(out, sizeof out, "%s/out.npy", dir);
    for (size_t i = 0; i < N_CODES + 4; i++) {
        struct qp_array a;
        if (i < N_CODES) {
            make_expected(codes[i], &a);
            snprintf(want_path, sizeof want_path, DATA "ok/le_%s.npy", codes[i]);
        } else {
            static const char *const others[] = {"scalar_f8", "empty_f4", "vec_u2", "rank8_i1"};
            snprintf(want_path, sizeof want_path, DATA "ok/%s.npy", others[i - N_CODES]);
            read_ok(want_path + strlen(DATA), &a);
        }
        struct qp_error err = {0};
        if (qp_npy_write_file(out, &a, &err) != QP_OK) fail_msg("%s", err.msg);
        uint8_t *got = NULL, *want = NULL;
        size_t got_n = 0, want_n = 0;
        assert_int_equal(read_file_bytes(out, &got, &got_n), 0);
        assert_int_equal(read_file_bytes(want_path, &want, &want_n), 0);
        if (got_n != want_n || memcmp(got, want, got_n) != 0)
            fail_msg("%s: written file differs from numpy's", want_path);
        struct qp_array back;
        assert_int_equal(qp_npy_read_file(out, &back, &err), QP_OK);
        assert_same_array(&back, &a);
        qp_array_release(&back);
        free(got);
        free(want);
        qp_array_release(&a);
    }
    assert_int_equal(count_entries(dir), 1);
    remove_tree(dir);
}

static void test_write_refusals_leave_nothing(void **state) {
    (void)state;
    char dir[512], out[600], missing[600], sub[600];
    make_tmpdir(dir, sizeof dir);
    snprintf(out, sizeof out, "%s/keep.npy", dir);
    struct qp_array a;
    make_expected("f4", &a);
    struct qp_error err = {0};
    assert_int_equal(qp_npy_write_file(out, &a, &err), QP_OK);
    uint8_t *before = NULL;
    size_t before_n;
    assert_int_equal(read_file_bytes(out, &before, &before_n), 0);

    /* bfloat16 has no numpy type: refused, the existing file untouched */
    struct qp_array bf;
    int64_t dims[1] = {3};
    assert_int_equal(qp_array_alloc(&bf, QP_DTYPE_BFLOAT16, 1, dims, &err), QP_OK);
    assert_int_equal(qp_npy_write_file(out, &bf, &err), QP_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "bfloat16"));
    assert_non_null(strstr(err.msg, out));
    /* nbytes not matching the shape */
    struct qp_array lie = a;
    lie.nbytes = 4;
    assert_int_equal(qp_npy_write_file(out, &lie, &err), QP_ERR_USAGE);
    lie = a;
    lie.rank = 9;
    assert_int_equal(qp_npy_write_file(out, &lie, &err), QP_ERR_USAGE);
    uint8_t *after = NULL;
    size_t after_n;
    assert_int_equal(read_file_bytes(out, &after, &after_n), 0);
    assert_int_equal(after_n, before_n);
    assert_memory_equal(after, before, before_n);

    /* missing folder */
    snprintf(missing, sizeof missing, "%s/no/such/dir/x.npy", dir);
    assert_int_equal(qp_npy_write_file(missing, &a, &err), QP_ERR_IO);
    assert_non_null(strstr(err.msg, missing));

    /* the target is a non-empty folder: the temporary file is made, the rename fails, and
     * the temporary file must be gone */
    snprintf(sub, sizeof sub, "%s/sub", dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    snprintf(missing, sizeof missing, "%s/sub/x", dir);
    assert_int_equal(qp_npy_write_file(missing, &a, &err), QP_OK);
    assert_int_equal(qp_npy_write_file(sub, &a, &err), QP_ERR_IO);
    assert_non_null(strstr(err.msg, "rename"));
    assert_int_equal(count_entries(dir), 2); /* keep.npy and sub */
    assert_int_equal(count_entries(sub), 1);

    free(before);
    free(after);
    qp_array_release(&a);
    qp_array_release(&bf);
    remove_tree(dir);
}

/* ---- non-finite counts -------------------------------------------------------------------- */

static void test_count_nonfinite(void **state) {
    (void)state;
    struct qp_error err = {0};
    struct qp_array a;
    uint64_t nan = 99, inf = 99;
    read_ok("ok/nonfinite_f4.npy", &a);
    assert_int_equal(qp_array_count_nonfinite(&a, &nan, &inf, &err), QP_OK);
    assert_int_equal(nan, 2);
    assert_int_equal(inf, 2);
    qp_array_release(&a);
    read_ok("ok/nonfinite_f2.npy", &a);
    assert_int_equal(qp_array_count_nonfinite(&a, &nan, &inf, &err), QP_OK);
    assert_int_equal(nan, 1);
    assert_int_equal(inf, 2);
    qp_array_release(&a);
    read_ok("ok/le_f8.npy", &a);
    assert_int_equal(qp_array_count_nonfinite(&a, &nan, &inf, &err), QP_OK);
    assert_int_equal(nan + inf, 0);
    ((double *)a.data)[1] = NAN;
    ((double *)a.data)[2] = -INFINITY;
    ((double *)a.data)[3] = HUGE_VAL;
    assert_int_equal(qp_array_count_nonfinite(&a, &nan, &inf, &err), QP_OK);
    assert_int_equal(nan, 1);
    assert_int_equal(inf, 2);
    qp_array_release(&a);

    int64_t dims[1] = {6};
    assert_int_equal(qp_array_alloc(&a, QP_DTYPE_BFLOAT16, 1, dims, &err), QP_OK);
    static const uint16_t bf[6] = {0x7f80, 0xff80, 0x7fc0, 0xffc1, 0x3f80, 0x7f7f};
    memcpy(a.data, bf, sizeof bf);
    assert_int_equal(qp_array_count_nonfinite(&a, &nan, &inf, &err), QP_OK);
    assert_int_equal(nan, 2);
    assert_int_equal(inf, 2);
    qp_array_release(&a);

    static const struct {
        enum qp_dtype dt;
        uint64_t nan, inf;
    } fp8[] = {{QP_DTYPE_FLOAT8E4M3FN, 2, 0}, {QP_DTYPE_FLOAT8E4M3FNUZ, 1, 0},
               {QP_DTYPE_FLOAT8E5M2, 3, 2},   {QP_DTYPE_FLOAT8E5M2FNUZ, 1, 0},
               {QP_DTYPE_INT8, 0, 0},         {QP_DTYPE_UINT4, 0, 0}};
    static const uint8_t bytes[6] = {0x7f, 0xff, 0x80, 0x7c, 0xfc, 0x7d};
    for (size_t i = 0; i < sizeof fp8 / sizeof fp8[0]; i++) {
        int64_t d = fp8[i].dt == QP_DTYPE_UINT4 ? 12 : 6;
        assert_int_equal(qp_array_alloc(&a, fp8[i].dt, 1, &d, &err), QP_OK);
        memcpy(a.data, bytes, 6);
        nan = inf = 99;
        assert_int_equal(qp_array_count_nonfinite(&a, &nan, &inf, &err), QP_OK);
        if (nan != fp8[i].nan || inf != fp8[i].inf)
            fail_msg("%s: nan %llu inf %llu", qp_dtype_name(fp8[i].dt), (unsigned long long)nan,
                     (unsigned long long)inf);
        qp_array_release(&a);
    }

    assert_int_equal(qp_array_alloc(&a, QP_DTYPE_FLOAT, 1, dims, &err), QP_OK);
    a.nbytes = 5;
    nan = 7;
    assert_int_equal(qp_array_count_nonfinite(&a, &nan, NULL, &err), QP_ERR_USAGE);
    assert_int_equal(nan, 7);
    a.nbytes = 24;
    assert_int_equal(qp_array_count_nonfinite(&a, NULL, NULL, &err), QP_OK);
    qp_array_release(&a);
    assert_int_equal(qp_array_count_nonfinite(NULL, NULL, NULL, &err), QP_ERR_USAGE);
}

/* ---- fuzz regressions --------------------------------------------------------------------- */

/* Inputs the fuzzer once crashed on (tests/data/npy/fuzz-*): they must now be refused or read
 * cleanly, by both readers. */
static void test_fuzz_regressions(void **state) {
    (void)state;
    DIR *d = opendir(DATA);
    assert_non_null(d);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "fuzz-", 5) != 0) continue;
        char path[600];
        snprintf(path, sizeof path, DATA "%s", e->d_name);
        uint8_t *buf = NULL;
        size_t size = 0;
        assert_int_equal(read_file_bytes(path, &buf, &size), 0);
        struct qp_error err = {0};
        struct qp_array a = {0};
        if (qp_npy_read_buffer(buf, size, e->d_name, &a, &err) == QP_OK) qp_array_release(&a);
        struct qp_npz *npz = NULL;
        if (qp_npz_open(path, 1 << 20, &npz, &err) == QP_OK) {
            for (size_t i = 0; i < qp_npz_count(npz); i++)
                if (qp_npz_read(npz, qp_npz_name(npz, i), &a, &err) == QP_OK) qp_array_release(&a);
            qp_npz_close(npz);
        }
        free(buf);
        n++;
    }
    closedir(d);
    print_message("%d fuzz regression inputs\n", n);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_dtype_little_and_big_endian),
        cmocka_unit_test(test_versions_and_header_spellings),
        cmocka_unit_test(test_fortran_order_is_transposed),
        cmocka_unit_test(test_scalar_empty_vector_rank8_bool),
        cmocka_unit_test(test_refused_files),
        cmocka_unit_test(test_read_file_io_errors),
        cmocka_unit_test(test_header_grammar),
        cmocka_unit_test(test_every_truncation_fails),
        cmocka_unit_test(test_read_from_pipe),
        cmocka_unit_test(test_write_matches_numpy),
        cmocka_unit_test(test_write_refusals_leave_nothing),
        cmocka_unit_test(test_count_nonfinite),
        cmocka_unit_test(test_fuzz_regressions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
