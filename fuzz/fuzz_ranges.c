/*
 * libFuzzer harness for the calibrated-ranges readers (calib/ranges.h): the same bytes go to
 * the JSON reader and to the TensorRT calibration cache reader. Beyond "does not crash", an
 * accepted input must survive a round trip: JSON written from what was read reads back and
 * writes the same text again; a cache written from what was read reads back and writes the same
 * bytes again (amax is chosen so that amax / 127 is exactly the cached scale).
 *
 *     scripts/build.sh fuzz && build-fuzz/fuzz/fuzz_ranges fuzz/corpus/ranges
 *
 * Seeds are in fuzz/corpus/ranges; inputs that once crashed go to
 * tests/data/fuzz-regressions/ranges/ (both replayed by ctest).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calib/ranges.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "fuzz_ranges: invariant broken: %s\n", what);
        abort();
    }
}

static void json_round_trip(const struct qp_ranges *r) {
    struct qp_error err = {0};
    char *t1 = NULL, *t2 = NULL;
    struct qp_ranges *back = NULL;
    check(qp_ranges_write_json(r, NULL, &t1, &err) == QP_OK, "accepted JSON cannot be written");
    check(qp_ranges_read_json(t1, strlen(t1), "again", &back, &err) == QP_OK,
          "written JSON does not read back");
    check(qp_ranges_count(back) == qp_ranges_count(r), "JSON round trip changed the count");
    check(qp_ranges_write_json(back, NULL, &t2, &err) == QP_OK, "JSON rewrite failed");
    check(strcmp(t1, t2) == 0, "JSON round trip changed the text");
    free(t1);
    free(t2);
    qp_ranges_free(back);
}

static void cache_round_trip(const struct qp_ranges *r) {
    struct qp_error err = {0};
    char *t1 = NULL, *t2 = NULL;
    struct qp_ranges *back = NULL;
    check(qp_ranges_write_trt_cache(r, NULL, 8601, &t1, &err) == QP_OK,
          "accepted cache cannot be written");
    check(qp_ranges_read_trt_cache(t1, strlen(t1), "again", &back, &err) == QP_OK,
          "written cache does not read back");
    check(qp_ranges_write_trt_cache(back, NULL, 8601, &t2, &err) == QP_OK, "cache rewrite failed");
    check(strcmp(t1, t2) == 0, "cache round trip changed the bytes");
    free(t1);
    free(t2);
    qp_ranges_free(back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct qp_error err = {0};
    struct qp_ranges *r = NULL;
    if (qp_ranges_read_json((const char *)data, size, "fuzz", &r, &err) == QP_OK) {
        json_round_trip(r);
        qp_ranges_free(r);
    } else {
        check(err.msg[0] != '\0', "JSON refusal without a message");
    }
    r = NULL;
    if (qp_ranges_read_trt_cache((const char *)data, size, "fuzz", &r, &err) == QP_OK) {
        cache_round_trip(r);
        json_round_trip(r);
        qp_ranges_free(r);
    } else {
        check(err.msg[0] != '\0', "cache refusal without a message");
    }
    return 0;
}
