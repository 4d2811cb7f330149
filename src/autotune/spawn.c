/* Child processes with captured output (autotune/spawn.h). */
#include "autotune/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

void qp_spawn_output_release(struct qp_spawn_output *o) {
    if (!o) return;
    free(o->text);
    memset(o, 0, sizeof *o);
}

/* Reads fd to EOF into a growing buffer (kept up to QP_SPAWN_MAX_OUTPUT bytes). */
static enum qp_status read_all(int fd, char **text_out, size_t *len_out, struct qp_error *err) {
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    if (!buf) return qp_error_set(err, QP_ERR_NOMEM, "spawn: out of memory");
    for (;;) {
        if (cap - len < 1024 && cap < QP_SPAWN_MAX_OUTPUT + 1) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                return qp_error_set(err, QP_ERR_NOMEM, "spawn: out of memory");
            }
            buf = nb;
            cap *= 2;
        }
        char drop[4096];
        int keep = len < QP_SPAWN_MAX_OUTPUT && cap - len > 1;
        ssize_t n = keep ? read(fd, buf + len, cap - len - 1) : read(fd, drop, sizeof drop);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            free(buf);
            return qp_error_set(err, QP_ERR_IO, "spawn: reading a child's output: %s",
                                strerror(errno));
        }
        if (n == 0) break;
        if (keep) len += (size_t)n;
    }
    buf[len] = 0;
    *text_out = buf;
    *len_out = len;
    return QP_OK;
}

static enum qp_status wait_child(pid_t pid, int *exit_out, struct qp_error *err) {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR)
            return qp_error_set(err, QP_ERR_IO, "spawn: waitpid: %s", strerror(errno));
    }
    *exit_out = WIFEXITED(status)     ? WEXITSTATUS(status)
                : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                      : -1;
    return QP_OK;
}

/* The child's stdin from /dev/null, stdout and stderr into wfd: 0, or an errno value (then
 * `fa` is already destroyed). */
static int file_actions(posix_spawn_file_actions_t *fa, int wfd) {
    int rc = posix_spawn_file_actions_init(fa);
    if (rc != 0) return rc;
    if ((rc = posix_spawn_file_actions_addopen(fa, 0, "/dev/null", O_RDONLY, 0)) != 0 ||
        (rc = posix_spawn_file_actions_adddup2(fa, wfd, 1)) != 0 ||
        (rc = posix_spawn_file_actions_adddup2(fa, wfd, 2)) != 0)
        posix_spawn_file_actions_destroy(fa);
    return rc;
}

enum qp_status qp_spawn_capture(char *const argv[], struct qp_spawn_output *out,
                                struct qp_error *err) {
    if (!argv || !argv[0] || !out) return qp_error_set(err, QP_ERR_USAGE, "spawn: NULL argument");
    int fds[2];
    /* Close-on-exec: neither end leaks into this child (its copies are the dup2'd 1 and 2) nor
     * into another one started meanwhile, or the read below would not see EOF. */
    if (pipe2(fds, O_CLOEXEC) != 0)
        return qp_error_set(err, QP_ERR_IO, "spawn: pipe: %s", strerror(errno));
    posix_spawn_file_actions_t fa;
    int rc = file_actions(&fa, fds[1]);
    if (rc != 0) {
        close(fds[0]);
        close(fds[1]);
        return qp_error_set(err, QP_ERR_NOMEM, "spawn: file actions: %s", strerror(rc));
    }
    pid_t pid = 0;
    rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (rc != 0) {
        close(fds[0]);
        return qp_error_set(err, QP_ERR_IO, "cannot run '%s': %s", argv[0], strerror(rc));
    }
    struct qp_spawn_output o = {0};
    enum qp_status st = read_all(fds[0], &o.text, &o.len, err);
    close(fds[0]);
    int code = -1;
    enum qp_status wst = wait_child(pid, &code, err);
    if (st == QP_OK) st = wst;
    if (st != QP_OK) {
        free(o.text);
        return st;
    }
    o.exit_code = code;
    *out = o;
    return QP_OK;
}

const char *qp_spawn_tail(const struct qp_spawn_output *o, int n_lines) {
    if (!o || !o->text) return "";
    size_t end = o->len;
    while (end > 0 && o->text[end - 1] == '\n')
        end--;
    size_t start = end, floor = o->len > 600 ? o->len - 600 : 0;
    int seen = 0;
    while (start > floor) {
        if (o->text[start - 1] == '\n' && ++seen >= n_lines) break;
        start--;
    }
    return o->text + start;
}
