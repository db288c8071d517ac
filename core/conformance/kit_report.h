/*
 * The result table of `plait plugin test`: one row per check, with the rule
 * of the SDK it checks and, for a failure, what went wrong. Every rule has
 * a one-line statement (kit_rule_text) printed under a failing table, so a
 * plugin author sees what the failure means without opening the headers.
 * A report with `live` set prints its title and each row the moment the row
 * is added, so the rows checked survive a plugin that later kills the
 * process (or another rank, which ends the job); kit_report_print then
 * adds the rest.
 * Plain data; not thread-safe (filled by the rank that prints it).
 */
#ifndef PLAIT_CORE_KIT_REPORT_H
#define PLAIT_CORE_KIT_REPORT_H

#include <stdio.h>

#include "runtime/error.h"

typedef enum kit_verdict { KIT_PASS = 0, KIT_FAIL = 1, KIT_SKIP = 2 } kit_verdict;

#define KIT_MAX_CHECKS 48
#define KIT_WHY_LEN 480

typedef struct kit_row {
    char name[32];
    char rule[24];          /* "order", "progress", ... (kit_rule_text) */
    kit_verdict verdict;
    char why[KIT_WHY_LEN];  /* failure or skip: what happened; pass: a short fact ("" allowed) */
} kit_row;

typedef struct kit_report {
    char title[512];
    kit_row rows[KIT_MAX_CHECKS];
    int n;
    FILE *live;  /* NULL: printed whole by kit_report_print; else rows go here as they are added */
} kit_report;

/* Append a row (silently dropped past KIT_MAX_CHECKS); with `live`, print
 * it there (the title and the header first) and flush. */
void kit_report_add(kit_report *r, const char *name, const char *rule, kit_verdict v, const char *fmt, ...)
    PLAIT_PRINTF(5, 6);
/* Print the table (unless printed live), a summary line and the
 * statement of every rule a row failed. */
void kit_report_print(const kit_report *r, FILE *out);
/* Rows that failed. */
int kit_report_failures(const kit_report *r);
/* The statement of a rule and where it is written ("" if unknown). */
const char *kit_rule_text(const char *rule);

#endif
