/* Clocks (clock.h). */
#include "core/clock.h"

#include <time.h>

static double read_clock(clockid_t id) {
    struct timespec ts;
    if (clock_gettime(id, &ts) != 0) return 0.0;
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double qp_clock_seconds(void) {
    return read_clock(CLOCK_MONOTONIC);
}

double qp_clock_cpu_seconds(void) {
    return read_clock(CLOCK_PROCESS_CPUTIME_ID);
}
