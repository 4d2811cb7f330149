/*
 * Per-op time of a session's runs, for engineers (docs/engine.md "Profiling"): with
 * QP_PROFILE=1 in the environment, every step's wall time is added to its label (the op type;
 * "Conv+4" for a fused step of five nodes) and the table is printed to stderr, largest first,
 * when the session is freed. With QP_PROFILE=node the rows are the steps themselves (op type,
 * node name, first input's and first output's shape), so one slow node of many stands out. Off
 * (NULL) otherwise, costing one branch per step. `qplace bench` starts the table after its
 * warm-up runs.
 */
#ifndef QP_RUNTIME_PROFILE_H
#define QP_RUNTIME_PROFILE_H

#include <stddef.h>

struct rt_profile;

/* A profile when QP_PROFILE is set (and not "0"), else NULL (also when out of memory). */
struct rt_profile *rt_profile_new(void);
/* 1 when the rows are per node (QP_PROFILE=node), 0 per op type or for NULL. */
int rt_profile_by_node(const struct rt_profile *p);
/* Adds `seconds` to `label`'s row (labels are copied; up to 127 characters kept). */
void rt_profile_add(struct rt_profile *p, const char *label, double seconds);
/* Forgets the times and runs so far, keeping the rows (qplace bench calls it after its
 * warm-up runs, so first-touch costs and oneDNN's first-execution compiles are not averaged
 * in). Nothing for NULL. */
void rt_profile_clear(struct rt_profile *p);
/* Counts one run. */
void rt_profile_run(struct rt_profile *p);
/* Prints the table to stderr (nothing for NULL or no runs) and frees p. */
void rt_profile_print_free(struct rt_profile *p);

#endif
