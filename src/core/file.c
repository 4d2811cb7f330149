#include "core/file.h"

#include <errno.h>
#include <fcntl.h>
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

enum qp_status qp_file_write_atomic(const char *path, const void *data, size_t len,
                                    struct qp_error *err) {
    size_t plen = strlen(path);
    if (plen > SIZE_MAX - 16) return qp_error_set(err, QP_ERR_NOMEM, "%s: path too long", path);
    char *tmp = malloc(plen + 16);
    if (!tmp) return qp_error_set(err, QP_ERR_NOMEM, "%s: out of memory", path);
    snprintf(tmp, plen + 16, "%s.tmpXXXXXX", path);
    enum qp_status st = QP_OK;
    int fd = mkstemp(tmp);
    if (fd < 0) {
        st = qp_error_set(err, QP_ERR_IO, "%s: cannot create a temporary file beside it: %s", path,
                          strerror(errno));
        goto done;
    }
    /* mkstemp makes 0600; these are ordinary outputs, so give them the umask's mode. */
    mode_t mask = umask(0);
    umask(mask);
    (void)fchmod(fd, 0666 & ~mask);
    const char *p = data;
    size_t done_n = 0;
    int ok = 1;
    while (ok && done_n < len) {
        ssize_t w = write(fd, p + done_n, len - done_n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0)
            ok = 0;
        else
            done_n += (size_t)w;
    }
    int saved = errno;
    ok = ok && fsync(fd) == 0;
    if (!ok) saved = errno;
    if (close(fd) != 0 && ok) {
        ok = 0;
        saved = errno;
    }
    if (ok && rename(tmp, path) != 0) {
        ok = 0;
        saved = errno;
    }
    if (!ok) {
        st = qp_error_set(err, QP_ERR_IO, "%s: write failed: %s", path, strerror(saved));
        unlink(tmp);
    }
done:
    free(tmp);
    return st;
}
