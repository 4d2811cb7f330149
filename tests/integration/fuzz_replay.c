/*
 * fuzz_replay_<name> PATH...
 *
 * A main() for a libFuzzer harness (fuzz/fuzz_<name>.c) built without libFuzzer, so that every
 * build, gcc and ASan included, replays the committed inputs: the regression inputs under
 * tests/data/fuzz-regressions/<name>/ and the seed corpus under fuzz/corpus/<name>/. Each PATH
 * is a file or a folder (its files, recursively, in sorted order). A crash or sanitizer report
 * fails the ctest case; the last "replaying" line names the input.
 * Closes with "N passed, N failed" (an input counts as failed when it cannot be read).
 */
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model_files.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static char **files;
static size_t n_files;

static int on_entry(const char *path, const struct stat *st, int type, struct FTW *ftw) {
    (void)st;
    (void)ftw;
    if (type != FTW_F) return 0;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (base[0] == '.' || strcmp(base, "README.md") == 0) return 0;
    char **grown = realloc(files, (n_files + 1) * sizeof *grown);
    if (!grown) return 1;
    files = grown;
    files[n_files] = strdup(path);
    if (!files[n_files]) return 1;
    n_files++;
    return 0;
}

static int cmp_paths(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv) {
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    size_t passed = 0, failed = 0;
    for (int k = 1; k < argc; k++) {
        size_t first = n_files;
        if (nftw(argv[k], on_entry, 16, FTW_PHYS) != 0) {
            printf("FAIL %s: cannot read\n", argv[k]);
            failed++;
            continue;
        }
        qsort(files + first, n_files - first, sizeof *files, cmp_paths);
    }
    for (size_t k = 0; k < n_files; k++) {
        size_t size = 0;
        unsigned char *data = read_whole_file(files[k], &size);
        if (!data) {
            printf("FAIL %s: cannot read\n", files[k]);
            failed++;
            continue;
        }
        printf("replaying %s (%zu bytes)\n", files[k], size);
        fflush(stdout);
        LLVMFuzzerTestOneInput(data, size);
        free(data);
        passed++;
    }
    for (size_t k = 0; k < n_files; k++)
        free(files[k]);
    free(files);
    printf("%zu passed, %zu failed\n", passed, failed);
    return failed ? 1 : 0;
}
