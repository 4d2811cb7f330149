/* Unit tests of the side-file helpers: bounded reads that never block, atomic writes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/file.h"

static char dir[256];

static int setup(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/qp_test_file_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static int count_entries(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "ls -A '%s' | wc -l", dir);
    FILE *p = popen(cmd, "r");
    int n = -1;
    if (p) {
        if (fscanf(p, "%d", &n) != 1) n = -1;
        pclose(p);
    }
    return n;
}

static void test_write_then_read(void **state) {
    (void)state;
    char path[300];
    snprintf(path, sizeof path, "%s/a.json", dir);
    struct qp_error err = {0};
    assert_int_equal(qp_file_write_atomic(path, "hello\0world", 11, &err), QP_OK);
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(qp_file_read_text(path, 100, &text, &len, &err), QP_OK);
    assert_int_equal(len, 11);
    assert_memory_equal(text, "hello\0world", 11);
    assert_int_equal(text[11], 0);
    free(text);
    /* replaced atomically, nothing else left in the folder */
    assert_int_equal(qp_file_write_atomic(path, "x", 1, &err), QP_OK);
    assert_int_equal(count_entries(), 1);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    mode_t mask = umask(0);
    umask(mask);
    assert_int_equal(sb.st_mode & 0777, 0666 & ~mask);
    /* the size limit */
    assert_int_equal(qp_file_write_atomic(path, "0123456789", 10, &err), QP_OK);
    assert_int_equal(qp_file_read_text(path, 9, &text, &len, &err), QP_ERR_BAD_INPUT);
    assert_non_null(strstr(err.msg, "over the 9-byte limit"));
    assert_int_equal(qp_file_read_text(path, 10, &text, &len, &err), QP_OK);
    free(text);
}

static void test_refusals(void **state) {
    (void)state;
    char path[300];
    struct qp_error err = {0};
    char *text = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "%s/missing", dir);
    assert_int_equal(qp_file_read_text(path, 100, &text, &len, &err), QP_ERR_IO);
    assert_non_null(strstr(err.msg, "cannot open"));
    /* a FIFO is refused at once, never read (it would block or never end) */
    snprintf(path, sizeof path, "%s/fifo", dir);
    assert_int_equal(mkfifo(path, 0600), 0);
    assert_int_equal(qp_file_read_text(path, 100, &text, &len, &err), QP_ERR_IO);
    assert_non_null(strstr(err.msg, "not a regular file"));
    unlink(path);
    assert_int_equal(qp_file_read_text(dir, 100, &text, &len, &err), QP_ERR_IO);
    assert_int_equal(qp_file_read_text("/dev/zero", 100, &text, &len, &err), QP_ERR_IO);
    /* a write into a missing folder fails and leaves nothing */
    snprintf(path, sizeof path, "%s/no/such/dir/x.json", dir);
    assert_int_equal(qp_file_write_atomic(path, "x", 1, &err), QP_ERR_IO);
    assert_int_equal(count_entries(), 1); /* a.json from the first test only */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_write_then_read),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
