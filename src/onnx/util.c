/* Path helpers shared by the loader (external data) and the saver (temp files, data files). */
#include <stdlib.h>
#include <string.h>

#include "onnx/onnx_io.h"

int qp_onnx_path_has_dotdot(const char *p) {
    while (*p) {
        size_t n = strcspn(p, "/");
        if (n == 2 && p[0] == '.' && p[1] == '.') return 1;
        p += n;
        while (*p == '/')
            p++;
    }
    return 0;
}

char *qp_onnx_path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    int slash = a > 0 && dir[a - 1] != '/';
    if (a > (size_t)-1 - b - 2) return NULL;
    char *s = malloc(a + b + 2);
    if (!s) return NULL;
    memcpy(s, dir, a);
    if (slash) s[a++] = '/';
    memcpy(s + a, name, b + 1);
    return s;
}

char *qp_onnx_path_dirname(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return strdup(".");
    /* Drop repeated slashes before the base name, keep a lone root slash. */
    const char *end = slash;
    while (end > path && end[-1] == '/')
        end--;
    if (end == path) return strdup("/");
    size_t n = (size_t)(end - path);
    char *s = malloc(n + 1);
    if (!s) return NULL;
    memcpy(s, path, n);
    s[n] = 0;
    return s;
}

const char *qp_onnx_path_basename(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

int qp_onnx_path_inside(const char *p, const char *dir) {
    size_t n = strlen(dir);
    if (n == 1 && dir[0] == '/') return p[0] == '/';
    if (strncmp(p, dir, n) != 0) return 0;
    return p[n] == 0 || p[n] == '/';
}
