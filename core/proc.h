/*
 * Processes as /proc tells them: whether one runs, and which one it is
 * (its start time tells a reused pid apart).  For the table that several
 * processes share: the GPU registry (stats/registry.c).
 */
#ifndef CUCACHE_CORE_PROC_H
#define CUCACHE_CORE_PROC_H

#include <stdbool.h>
#include <stdint.h>

/* Reads /proc/PID/stat: its start time (clock ticks since boot), its
 * state letter and (comm not NULL) its command name; false when there is
 * no such process. */
bool proc_stat(int32_t pid, uint64_t *start, char *state, char comm[16]);

/* Whether pid runs, started at `start`, and is not a zombie (the driver
 * gives a process's memory back before its parent reaps it). */
bool proc_alive(int32_t pid, uint64_t start);

#endif
