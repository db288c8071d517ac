/*
 * `plait doctor`: what plait will use on this machine and why, and what is
 * wrong with it.
 *
 * Sections print one labelled line per fact ("cpu", "blas", "memory",
 * "device cuda", ...); a problem is printed where it is found and listed
 * again, with its fix, in the summary at the end. Plugins add their own
 * facts and problems through their descriptor's report (ABI 1.6).
 *
 * Not thread-safe (one doctor, on the main thread). Writes only to `out`.
 */
#ifndef PLAIT_CORE_DOCTOR_H
#define PLAIT_CORE_DOCTOR_H

#include <stdio.h>

#include "config/config.h"

#define PLAIT_DOCTOR_MAX_PROBLEMS 32

typedef struct plait_doctor {
    FILE *out;
    const plait_config *cfg;   /* the configuration it was given, or the defaults */
    int measure_peak;          /* --peak: measure the MFU peak again */
    int n_problems;
    char problem[PLAIT_DOCTOR_MAX_PROBLEMS][512];
    char fix[PLAIT_DOCTOR_MAX_PROBLEMS][512];
} plait_doctor;

/* One fact: "label   text". */
void plait_doctor_line(plait_doctor *d, const char *label, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A problem found under `label`, with what to do about it (`fix`). */
void plait_doctor_problem(plait_doctor *d, const char *label, const char *fix, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The sections, in the order `plait doctor` prints them. */
void plait_doctor_host(plait_doctor *d);    /* plait itself, the CPU, BLAS, threads, precision, memory, MFU peak */
void plait_doctor_plugins(plait_doctor *d); /* devices, transports and the other plugins, with their reports */
void plait_doctor_launch(plait_doctor *d);  /* the job environment seen: Slurm, torchrun, mpirun, PLAIT_* */
/* --topology: the node's packages, NUMA nodes, GPUs and NICs (PLAIT_TOPOLOGY's
 * file, or this machine) and what is lopsided in them */
void plait_doctor_topology(plait_doctor *d);
/* The problems again with their fixes; returns how many there are. */
int plait_doctor_summary(plait_doctor *d);

#endif
