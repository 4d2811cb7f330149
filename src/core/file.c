#include "core/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum qp_status qp_file_read_text(const char *path, size_t max_bytes, char **text_out,
                                 size_t *len_out, struct qp_error *err) {
    /* O_NONBLOCK so that opening a FIFO cannot hang; it is then refused as not regular. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return qp_error_set(err, QP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    enum qp_status st = QP_OK;
    char *text = NULL;
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = qp_error_set(err, QP_ERR_IO, "%s: not a regular file", path);
        goto done;
    }
    if ((uint64_t)sb.st_size > (uint64_t)max_bytes) {
        st = qp_error_set(err, QP_ERR_BAD_INPUT, "%s: %lld bytes, over the %zu-byte limit", path,
                          (long long)sb.st_size, max_bytes);
        goto done;
    }
    size_t size = (size_t)sb.st_size;
    text = malloc(size + 1);
    if (!text) {
        st = qp_error_set(err, QP_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, text + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            st = qp_error_set(err, QP_ERR_IO, "%s: read failed: %s", path,
                              r < 0 ? strerror(errno) : "the file shrank while being read");
            goto done;
        }
        got += (size_t)r;
    }
    text[size] = '\0';
    *text_out = text;
    *len_out = size;
    text = NULL;
done:
    free(text);
    close(fd);
    return st;
}

static atomic_uint tmp_counter;

enum qp_status qp_file_check_output(const char *path, const char *what, struct qp_error *err) {
    struct stat st;
    if (path && stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return qp_error_set(err, QP_ERR_BAD_INPUT, "%s '%s' is a directory; give a file path",
                            what ? what : "output", path);
    return QP_OK;
}

enum qp_status qp_file_write_atomic_parts(const char *path, const struct qp_file_part *parts,
                                          size_t n_parts, struct qp_error *err) {
    if (!path || !*path) return qp_error_set(err, QP_ERR_USAGE, "write: empty output path");
    size_t plen = strlen(path);
    if (plen > SIZE_MAX - 64) return qp_error_set(err, QP_ERR_USAGE, "write: path too long");
    char *tmp = malloc(plen + 64);
    if (!tmp) return qp_error_set(err, QP_ERR_NOMEM, "%s: cannot allocate a path", path);
    enum qp_status st = QP_OK;
    int fd = -1;
    /* O_EXCL with a fresh name rather than mkstemp: the file gets the usual 0666 & ~umask. */
    for (int attempt = 0; attempt < 100 && fd < 0; attempt++) {
        snprintf(tmp, plen + 64, "%s.tmp.%ld.%u", path, (long)getpid(),
                 atomic_fetch_add(&tmp_counter, 1u));
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) {
        st = qp_error_set(err, QP_ERR_IO, "%s: cannot create a temporary file next to it: %s", path,
                          strerror(errno));
        free(tmp);
        return st;
    }
    for (size_t i = 0; i < n_parts && st == QP_OK; i++) {
        const unsigned char *p = parts[i].data;
        size_t left = parts[i].size;
        while (left > 0) {
            ssize_t k = write(fd, p, left);
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) {
                st = qp_error_set(err, QP_ERR_IO, "%s: write failed: %s", path,
                                  k < 0 ? strerror(errno) : "no progress");
                break;
            }
            p += k;
            left -= (size_t)k;
        }
    }
    if (st == QP_OK && fsync(fd) != 0)
        st = qp_error_set(err, QP_ERR_IO, "%s: fsync failed: %s", path, strerror(errno));
    if (close(fd) != 0 && st == QP_OK)
        st = qp_error_set(err, QP_ERR_IO, "%s: close failed: %s", path, strerror(errno));
    if (st == QP_OK && rename(tmp, path) != 0)
        st = qp_error_set(err, QP_ERR_IO, "%s: cannot rename the temporary file over it: %s", path,
                          strerror(errno));
    if (st != QP_OK) unlink(tmp);
    free(tmp);
    return st;
}

enum qp_status qp_file_write_atomic(const char *path, const void *data, size_t len,
                                    struct qp_error *err) {
    struct qp_file_part part = {data, len};
    return qp_file_write_atomic_parts(path, &part, 1, err);
}
