#include "model_files.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* nftw has no user pointer; the walk is single-threaded, so a static collector is fine. */
static struct model_files *collect;
static int collect_failed;

static int on_entry(const char *path, const struct stat *st, int type, struct FTW *ftw) {
    (void)st;
    (void)ftw;
    if (type != FTW_F) return 0;
    size_t len = strlen(path);
    if (len < 5 || strcmp(path + len - 5, ".onnx") != 0) return 0;
    char **grown = realloc(collect->paths, (collect->n + 1) * sizeof *grown);
    char *copy = strdup(path);
    if (!grown || !copy) {
        free(copy);
        if (grown) collect->paths = grown;
        collect_failed = 1;
        return 1;
    }
    collect->paths = grown;
    collect->paths[collect->n++] = copy;
    return 0;
}

static int cmp_paths(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int model_files_find(const char *dir, struct model_files *out) {
    out->paths = NULL;
    out->n = 0;
    collect = out;
    collect_failed = 0;
    int r = nftw(dir, on_entry, 16, FTW_PHYS);
    collect = NULL;
    if (r != 0 || collect_failed) {
        model_files_free(out);
        return -1;
    }
    if (out->n) qsort(out->paths, out->n, sizeof *out->paths, cmp_paths);
    return 0;
}

void model_files_free(struct model_files *mf) {
    for (size_t k = 0; k < mf->n; k++)
        free(mf->paths[k]);
    free(mf->paths);
    mf->paths = NULL;
    mf->n = 0;
}

unsigned char *read_whole_file(const char *path, size_t *size_out) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            size_t ncap = cap ? cap * 2 : 65536;
            unsigned char *grown = realloc(buf, ncap);
            if (!grown) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = grown;
            cap = ncap;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return NULL;
    }
    *size_out = len;
    return buf;
}

char *make_temp_dir(const char *tag) {
    const char *base = getenv("TMPDIR");
    if (!base || !*base) base = "/tmp";
    size_t n = strlen(base) + strlen(tag) + 32;
    char *path = malloc(n);
    if (!path) return NULL;
    snprintf(path, n, "%s/qplace-%s-XXXXXX", base, tag);
    if (!mkdtemp(path)) {
        free(path);
        return NULL;
    }
    return path;
}

static int rm_entry(const char *path, const struct stat *st, int type, struct FTW *ftw) {
    (void)st;
    (void)type;
    (void)ftw;
    remove(path);
    return 0;
}

void remove_tree(const char *dir) {
    if (dir) nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}
