/*
 * .npz reading and writing: archives numpy and Python's zipfile wrote
 * (tests/data/npy/gen_npy.py), hostile archives, and write/read round trips.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#include "qplace/npy.h"

#define DATA QP_TEST_DATA_DIR "/npy/"

static const float f4_values[6] = {-1.5f, 0.0f, 0.25f, 3.0f, 1024.0f, -0.125f};

static void make_tmpdir(char *dir, size_t size) {
    snprintf(dir, size, "%s/npz_test_XXXXXX", QP_TEST_BINARY_DIR);
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

static struct qp_npz *open_ok(const char *rel, uint64_t max_bytes) {
    struct qp_error err = {0};
    struct qp_npz *npz = NULL;
    if (qp_npz_open(rel, max_bytes, &npz, &err) != QP_OK) fail_msg("%s: %s", rel, err.msg);
    return npz;
}

static void check_f4_2x3(const struct qp_array *a) {
    assert_int_equal(a->dtype, QP_DTYPE_FLOAT);
    assert_int_equal(a->rank, 2);
    assert_int_equal(a->dims[0], 2);
    assert_int_equal(a->dims[1], 3);
    assert_memory_equal(a->data, f4_values, sizeof f4_values);
}

static void check_arange_i8(const struct qp_array *a, int n) {
    assert_int_equal(a->dtype, QP_DTYPE_INT64);
    assert_int_equal(a->rank, 1);
    assert_int_equal(a->dims[0], n);
    for (int i = 0; i < n; i++)
        assert_int_equal(((int64_t *)a->data)[i], i);
}

/* ---- reading what numpy wrote ------------------------------------------------------------- */

static void test_read_stored_and_deflated(void **state) {
    (void)state;
    struct qp_error err = {0};
    struct qp_array a;

    struct qp_npz *npz = open_ok(DATA "ok/stored.npz", 0);
    assert_int_equal(qp_npz_count(npz), 2);
    assert_string_equal(qp_npz_name(npz, 0), "a");
    assert_string_equal(qp_npz_name(npz, 1), "b");
    assert_null(qp_npz_name(npz, 2));
    assert_true(qp_npz_contains(npz, "a"));
    assert_false(qp_npz_contains(npz, "a.npy"));
    assert_int_equal(qp_npz_read(npz, "a", &a, &err), QP_OK);
    check_f4_2x3(&a);
    qp_array_release(&a);
    assert_int_equal(qp_npz_read(npz, "b", &a, &err), QP_OK);
    check_arange_i8(&a, 4);
    qp_array_release(&a);
    /* reading twice works (each read reopens the member) */
    assert_int_equal(qp_npz_read(npz, "a", &a, &err), QP_OK);
    check_f4_2x3(&a);
    qp_array_release(&a);
    struct qp_array untouched;
    memset(&untouched, 0x5a, sizeof untouched);
    a = untouched;
    assert_int_equal(qp_npz_read(npz, "c", &a, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "stored.npz: no member 'c' (members: 'a', 'b')"));
    assert_memory_equal(&a, &untouched, sizeof a);
    qp_npz_close(npz);

    npz = open_ok(DATA "ok/deflated.npz", 0);
    assert_int_equal(qp_npz_count(npz), 2);
    assert_string_equal(qp_npz_name(npz, 0), "x");
    assert_string_equal(qp_npz_name(npz, 1), "idx");
    assert_int_equal(qp_npz_read(npz, "idx", &a, &err), QP_OK);
    check_arange_i8(&a, 4);
    qp_array_release(&a);
    assert_int_equal(qp_npz_read(npz, "x", &a, &err), QP_OK);
    check_f4_2x3(&a);
    qp_array_release(&a);
    qp_npz_close(npz);

    npz = open_ok(DATA "ok/empty.npz", 0);
    assert_int_equal(qp_npz_count(npz), 0);
    assert_int_equal(qp_npz_read(npz, "a", &a, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "(members: none)"));
    qp_npz_close(npz);
    qp_npz_close(NULL);
}

static void test_size_cap(void **state) {
    (void)state;
    /* stored.npz: a is 128 + 24 bytes, b is 128 + 32 */
    const uint64_t total = 128 + 24 + 128 + 32;
    struct qp_error err = {0};
    struct qp_npz *npz = NULL;
    assert_int_equal(qp_npz_open(DATA "ok/stored.npz", total - 1, &npz, &err), QP_ERR_BAD_INPUT);
    assert_null(npz);
    assert_non_null(strstr(err.msg, "stored.npz: members declare more than"));
    assert_non_null(strstr(err.msg, "'b.npy'"));
    npz = open_ok(DATA "ok/stored.npz", total);
    qp_npz_close(npz);
}

/* ---- hostile archives --------------------------------------------------------------------- */

static void test_refused_archives(void **state) {
    (void)state;
    static const struct {
        const char *file;
        enum qp_status status;
        const char *words;
    } cases[] = {
        {"bad/dotdot.npz", QP_ERR_BAD_INPUT, "member '../x.npy' escapes the archive"},
        {"bad/absolute.npz", QP_ERR_BAD_INPUT, "member '/x.npy' is an absolute path"},
        {"bad/folder.npz", QP_ERR_BAD_INPUT, "member 'd/x.npy' is inside a folder"},
        {"bad/not_npy.npz", QP_ERR_BAD_INPUT, "member 'readme.txt' is not an .npy file"},
        {"bad/duplicate.npz", QP_ERR_BAD_INPUT, "member 'x.npy' appears twice"},
        {"bad/bzip2.npz", QP_ERR_UNSUPPORTED, "member 'x.npy' uses compression method 12"},
        {"bad/lie_huge.npz", QP_ERR_BAD_INPUT, "declares 100000000 bytes"},
        {"ok/le_f4.npy", QP_ERR_BAD_INPUT, "not an .npz (zip) archive"},
        {"bad/empty_file.npz", QP_ERR_BAD_INPUT, "empty file"},
        {"no/such.npz", QP_ERR_IO, "cannot open"},
        {"ok", QP_ERR_IO, "not a regular file"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[512];
        snprintf(path, sizeof path, DATA "%s", cases[i].file);
        struct qp_error err = {0};
        struct qp_npz *npz = (struct qp_npz *)&err; /* must stay as is */
        enum qp_status st = qp_npz_open(path, 0, &npz, &err);
        if (st != cases[i].status || !strstr(err.msg, cases[i].words) || !strstr(err.msg, path))
            fail_msg("%s: status %s, message '%s'", cases[i].file, qp_status_name(st), err.msg);
        assert_ptr_equal(npz, &err);
    }
}

/* Members whose content is wrong: the archive opens, the read fails naming the member. */
static void test_refused_members(void **state) {
    (void)state;
    struct qp_error err = {0};
    struct qp_array a;

    struct qp_npz *npz = open_ok(DATA "bad/object_member.npz", 0);
    assert_int_equal(qp_npz_read(npz, "ok", &a, &err), QP_OK);
    check_f4_2x3(&a);
    qp_array_release(&a);
    assert_int_equal(qp_npz_read(npz, "obj", &a, &err), QP_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "object_member.npz: member 'obj.npy': dtype '|O'"));
    qp_npz_close(npz);

    static const struct {
        const char *file, *words;
    } liars[] = {
        {"bad/lie_bigger.npz", "(trailing bytes)"},
        {"bad/lie_smaller.npz", "(truncated)"},
        {"bad/lie_stream_short.npz", "truncated: 24 bytes of data"},
        {"bad/lie_stream_long.npz", "trailing bytes after the 16 bytes"},
        {"bad/bad_crc.npz", "CRC error"},
        {"bad/lie_tiny.npz", "truncated: 5 bytes, fewer than the 10-byte"},
    };
    for (size_t i = 0; i < sizeof liars / sizeof liars[0]; i++) {
        char path[512];
        snprintf(path, sizeof path, DATA "%s", liars[i].file);
        npz = open_ok(path, 0);
        enum qp_status st = qp_npz_read(npz, "x", &a, &err);
        if (st != QP_ERR_BAD_INPUT || !strstr(err.msg, "member 'x.npy': ") ||
            !strstr(err.msg, liars[i].words))
            fail_msg("%s: status %s, message '%s'", liars[i].file, qp_status_name(st), err.msg);
        qp_npz_close(npz);
    }
}

/* ---- writing ------------------------------------------------------------------------------ */

static void fill_arrays(struct qp_array *arrs) {
    struct qp_error err = {0};
    int64_t d23[2] = {2, 3}, d0[2] = {0, 7}, big[1] = {4096};
    assert_int_equal(qp_array_alloc(&arrs[0], QP_DTYPE_FLOAT, 2, d23, &err), QP_OK);
    memcpy(arrs[0].data, f4_values, sizeof f4_values);
    assert_int_equal(qp_array_alloc(&arrs[1], QP_DTYPE_INT64, 0, NULL, &err), QP_OK);
    *(int64_t *)arrs[1].data = -42;
    assert_int_equal(qp_array_alloc(&arrs[2], QP_DTYPE_UINT8, 2, d0, &err), QP_OK);
    assert_int_equal(qp_array_alloc(&arrs[3], QP_DTYPE_FLOAT16, 1, big, &err), QP_OK);
    for (int i = 0; i < 4096; i++)
        ((uint16_t *)arrs[3].data)[i] = (uint16_t)(i % 7);
}

static void test_write_round_trip(void **state) {
    (void)state;
    static const char *const names[4] = {"input", "scalar", "empty", "x.y z"};
    struct qp_array arrs[4];
    fill_arrays(arrs);
    char dir[512], out[600];
    make_tmpdir(dir, sizeof dir);
    snprintf(out, sizeof out, "%s/out.npz", dir);
    for (int m = 0; m < QP_NPZ_METHOD_COUNT; m++) {
        struct qp_error err = {0};
        if (qp_npz_write_file(out, names, arrs, 4, (enum qp_npz_method)m, &err) != QP_OK)
            fail_msg("%s", err.msg);
        struct qp_npz *npz = open_ok(out, 0);
        assert_int_equal(qp_npz_count(npz), 4);
        for (int i = 0; i < 4; i++) {
            assert_string_equal(qp_npz_name(npz, (size_t)i), names[i]);
            struct qp_array a;
            assert_int_equal(qp_npz_read(npz, names[i], &a, &err), QP_OK);
            assert_int_equal(a.dtype, arrs[i].dtype);
            assert_int_equal(a.rank, arrs[i].rank);
            for (int k = 0; k < a.rank; k++)
                assert_int_equal(a.dims[k], arrs[i].dims[k]);
            assert_int_equal(a.nbytes, arrs[i].nbytes);
            if (a.nbytes) assert_memory_equal(a.data, arrs[i].data, a.nbytes);
            qp_array_release(&a);
        }
        qp_npz_close(npz);

        /* the members really are stored / deflated */
        int zerr = 0;
        zip_t *z = zip_open(out, ZIP_RDONLY, &zerr);
        assert_non_null(z);
        zip_stat_t zs;
        assert_int_equal(zip_stat(z, "x.y z.npy", 0, &zs), 0);
        assert_int_equal(zs.comp_method, m == QP_NPZ_DEFLATE ? ZIP_CM_DEFLATE : ZIP_CM_STORE);
        if (m == QP_NPZ_DEFLATE)
            assert_true(zs.comp_size < zs.size / 4);
        else
            assert_int_equal(zs.comp_size, zs.size);
        zip_discard(z);
        assert_int_equal(count_entries(dir), 1); /* no temporary files left */
    }

    /* no arrays: an empty archive, as np.savez() writes */
    struct qp_error err = {0};
    assert_int_equal(qp_npz_write_file(out, NULL, NULL, 0, QP_NPZ_STORE, &err), QP_OK);
    struct qp_npz *npz = open_ok(out, 0);
    assert_int_equal(qp_npz_count(npz), 0);
    qp_npz_close(npz);
    for (int i = 0; i < 4; i++)
        qp_array_release(&arrs[i]);
    remove_tree(dir);
}

static void test_write_refusals_leave_nothing(void **state) {
    (void)state;
    struct qp_array arrs[4];
    fill_arrays(arrs);
    char dir[512], out[600], bad[600];
    make_tmpdir(dir, sizeof dir);
    snprintf(out, sizeof out, "%s/out.npz", dir);
    struct qp_error err = {0};
    static const char *const good[2] = {"a", "b"};
    assert_int_equal(qp_npz_write_file(out, good, arrs, 2, QP_NPZ_STORE, &err), QP_OK);
    struct stat before;
    assert_int_equal(stat(out, &before), 0);

    static const struct {
        const char *names[2];
        const char *words;
    } keys[] = {
        {{"a", "a"}, "key 'a' is given twice"},
        {{"a", ""}, "is empty"},
        {{"a/b", "c"}, "holds a '/'"},
        {{"..", "c"}, "is '.' or '..'"},
        {{"a", "b\\c"}, "holds a '/' or '\\'"},
        {{"a", "b\nc"}, "control character"},
        {{"a", NULL}, "is NULL"},
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        enum qp_status st = qp_npz_write_file(out, keys[i].names, arrs, 2, QP_NPZ_STORE, &err);
        if (st != QP_ERR_USAGE || !strstr(err.msg, keys[i].words) || !strstr(err.msg, out))
            fail_msg("keys %zu: status %s, message '%s'", i, qp_status_name(st), err.msg);
    }
    struct qp_array bf;
    int64_t dims[1] = {2};
    assert_int_equal(qp_array_alloc(&bf, QP_DTYPE_FLOAT8E4M3FN, 1, dims, &err), QP_OK);
    struct qp_array two[2] = {arrs[0], bf};
    assert_int_equal(qp_npz_write_file(out, good, two, 2, QP_NPZ_DEFLATE, &err),
                     QP_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "array 'b'"));
    assert_non_null(strstr(err.msg, "float8e4m3fn"));
    assert_int_equal(qp_npz_write_file(out, good, arrs, 2, (enum qp_npz_method)7, &err),
                     QP_ERR_USAGE);
    assert_int_equal(qp_npz_write_file(out, NULL, arrs, 2, QP_NPZ_STORE, &err), QP_ERR_USAGE);

    /* the earlier archive is untouched */
    struct stat after;
    assert_int_equal(stat(out, &after), 0);
    assert_int_equal(after.st_size, before.st_size);
    assert_int_equal(after.st_ino, before.st_ino);

    /* missing folder, and a target that is a folder: I/O errors, nothing left behind */
    snprintf(bad, sizeof bad, "%s/no/such/out.npz", dir);
    assert_int_equal(qp_npz_write_file(bad, good, arrs, 2, QP_NPZ_STORE, &err), QP_ERR_IO);
    assert_non_null(strstr(err.msg, bad));
    snprintf(bad, sizeof bad, "%s/sub", dir);
    assert_int_equal(mkdir(bad, 0700), 0);
    enum qp_status st = qp_npz_write_file(bad, good, arrs, 2, QP_NPZ_STORE, &err);
    assert_int_not_equal(st, QP_OK);
    assert_non_null(strstr(err.msg, bad));
    assert_int_equal(qp_npz_write_file(bad, NULL, NULL, 0, QP_NPZ_STORE, &err), QP_ERR_IO);
    assert_int_equal(count_entries(dir), 2); /* out.npz and sub */
    assert_int_equal(count_entries(bad), 0);

    qp_array_release(&bf);
    for (int i = 0; i < 4; i++)
        qp_array_release(&arrs[i]);
    remove_tree(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read_stored_and_deflated),
        cmocka_unit_test(test_size_cap),
        cmocka_unit_test(test_refused_archives),
        cmocka_unit_test(test_refused_members),
        cmocka_unit_test(test_write_round_trip),
        cmocka_unit_test(test_write_refusals_leave_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
