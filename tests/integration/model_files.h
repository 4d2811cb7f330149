/* Finding model files for the integration tests. */
#ifndef QP_TESTS_MODEL_FILES_H
#define QP_TESTS_MODEL_FILES_H

#include <stddef.h>

struct model_files {
    char **paths; /* sorted, malloc'd */
    size_t n;
};

/* Collects every *.onnx file under `dir` (recursively, symlinks not followed) in sorted order.
 * Returns 0 on success, -1 when `dir` cannot be walked. */
int model_files_find(const char *dir, struct model_files *out);
void model_files_free(struct model_files *mf);

/* Reads a whole file into a malloc'd buffer. Returns NULL on failure. */
unsigned char *read_whole_file(const char *path, size_t *size_out);

/* Creates a fresh temporary folder (under $TMPDIR or /tmp) and returns its malloc'd path, or
 * NULL. remove_tree deletes a folder and everything in it. */
char *make_temp_dir(const char *tag);
void remove_tree(const char *dir);

#endif
