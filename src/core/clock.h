/*
 * Clocks: the one place that reads time (sensitivity and bench timings, progress ETAs).
 *
 *     double t0 = qp_clock_seconds(), c0 = qp_clock_cpu_seconds();
 *     work();
 *     printf("%.3f s wall, %.3f s CPU\n", qp_clock_seconds() - t0, qp_clock_cpu_seconds() - c0);
 */
#ifndef QP_CORE_CLOCK_H
#define QP_CORE_CLOCK_H

/* Seconds of CLOCK_MONOTONIC (wall time that never jumps; only differences mean anything). */
double qp_clock_seconds(void);
/* CPU seconds of the whole process, all threads (CLOCK_PROCESS_CPUTIME_ID). */
double qp_clock_cpu_seconds(void);

#endif
