/*
 * libFuzzer harness for the placement readers (placement/placement.h, placement/select.h): the same
 * bytes go to the placement JSON reader and to the rules-file parser. Beyond "does not crash",
 * an accepted placement must survive a round trip: the JSON written from it reads back into an
 * equal placement that writes the same text again.
 *
 *     scripts/build.sh fuzz && build-fuzz/fuzz/fuzz_placement fuzz/corpus/placement
 *
 * Seeds are in fuzz/corpus/placement; inputs that once failed go to
 * tests/data/fuzz-regressions/placement/ (both replayed by ctest).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "placement/placement.h"
#include "placement/select.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "fuzz_placement: invariant broken: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct qp_error err = {0};
    struct qp_placement *p = NULL;
    if (qp_placement_read_json((const char *)data, size, "fuzz", &p, &err) == QP_OK) {
        char *t1 = NULL, *t2 = NULL;
        struct qp_placement *back = NULL;
        check(qp_placement_write_json(p, &t1, &err) == QP_OK, "accepted placement not written");
        check(qp_placement_read_json(t1, strlen(t1), "again", &back, &err) == QP_OK,
              "written placement does not read back");
        check(qp_placement_equal(p, back), "round trip changed the placement");
        check(qp_placement_write_json(back, &t2, &err) == QP_OK, "rewrite failed");
        check(strcmp(t1, t2) == 0, "round trip changed the text");
        free(t1);
        free(t2);
        qp_placement_free(back);
        qp_placement_free(p);
    } else {
        check(err.msg[0] != '\0', "placement refusal without a message");
    }
    struct qp_rules *r = NULL;
    err.msg[0] = '\0';
    if (qp_rules_parse((const char *)data, size, "fuzz", &r, &err) == QP_OK)
        qp_rules_free(r);
    else
        check(err.msg[0] != '\0', "rules refusal without a message");
    return 0;
}
