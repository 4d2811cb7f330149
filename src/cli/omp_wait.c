/* Choosing libgomp's waiting policy for the qplace process (see cli.h). */
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int cli_omp_spin_ok(double load1, int running_others, long n_cpus) {
    if (n_cpus < 1 || load1 < 0 || running_others < 0) return 0;
    /* Our own previous command (a script's, say) leaves up to its thread count in the 1-minute
     * average for a minute after it ends, so the average alone must not decide: a machine that
     * is busy now shows runnable tasks in the snapshots. The average only catches a load of
     * bursts too short for the snapshots, beyond twice the CPUs. */
    return running_others == 0 && load1 < 2.0 * (double)n_cpus;
}

/* One reading of /proc/loadavg: the 1-minute load and the runnable tasks other than this
 * process. 0 when unreadable. */
static int read_loadavg(double *load1, int *running_others) {
    FILE *f = fopen("/proc/loadavg", "r");
    if (!f) return 0;
    double l1 = -1, l5, l15;
    int running = -1, total;
    int n = fscanf(f, "%lf %lf %lf %d/%d", &l1, &l5, &l15, &running, &total);
    fclose(f);
    if (n != 5) return 0;
    *load1 = l1;
    *running_others = running - 1; /* `running` counts this process itself */
    return 1;
}

/* 1 when /proc/loadavg says the machine is idle (cli_omp_spin_ok), 0 otherwise or unreadable.
 * The runnable count is a snapshot: a process that has just exited (the previous command of a
 * script) or a kernel thread waking can show as running for a moment, which made a quiet
 * machine look busy to one reading in ten. So up to 5 readings 2 ms apart, the fewest others
 * counting: a machine whose cores are really taken shows them in every reading. */
static int machine_idle(void) {
    double l1 = -1;
    int others = -1;
    for (int k = 0; k < 5; k++) {
        double l;
        int o;
        if (!read_loadavg(&l, &o)) return 0;
        if (others < 0 || o < others) others = o;
        l1 = l;
        if (others == 0) break;
        usleep(2000);
    }
    return cli_omp_spin_ok(l1, others, sysconf(_SC_NPROCESSORS_ONLN));
}

void cli_choose_omp_wait(char **argv) {
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
    /* Idle machine: libgomp's default (spin ~300000 iterations, then sleep), set explicitly so
     * that the process executed again keeps it and does not ask again. Otherwise passive. */
    int idle = machine_idle();
    if (setenv(idle ? "GOMP_SPINCOUNT" : "OMP_WAIT_POLICY", idle ? "300000" : "passive", 1) != 0)
        return;
    execv("/proc/self/exe", argv);
    /* exec failed (no /proc, say): carry on with libgomp's default policy. */
}
