/*
 * Logging: one line per call, prefixed with the time since start, the rank
 * (once known) and the component, written to stderr and, once a run
 * directory exists, to the rank's log file.
 *
 * Levels come from PLAIT_LOG_LEVEL (or [run] log_level): either one level
 * ("info") or a default plus per-component levels ("warn,tcp=debug").
 * All functions are thread-safe; a line is written with one write(2) so
 * lines from threads and ranks never interleave mid-line.
 */
#ifndef PLAIT_CORE_LOG_H
#define PLAIT_CORE_LOG_H

#include <stdarg.h>
#include <plait/types.h>

/* Apply a level spec ("info", "warn,tcp=debug"; spaces around names are
 * ignored; component rules replace earlier ones, a spec without a default
 * level keeps the current one). Returns 0, or -1 for an unknown level, an
 * empty component name or more than 16 components (nothing changed). */
int plait_log_configure(const char *spec);
/* 0 if plait_log_configure(spec) would accept `spec`, else -1; changes nothing. */
int plait_log_check_spec(const char *spec);
/* Read PLAIT_LOG_LEVEL; default "info". Idempotent. */
void plait_log_init_from_env(void);
/* From now on prefix lines with "[r<rank>]". rank < 0 removes the prefix. */
void plait_log_set_rank(int rank);
/* Also append every line to `path` (created, mode 0644; never through a
 * symbolic link, never to a FIFO or a device: runtime/out_file.h). NULL
 * closes it. Returns 0, or -1 with the reason in plait_last_error(). */
int plait_log_set_file(const char *path);
int plait_log_enabled_for(plait_log_level level, const char *component);
int plait_log_enabled(plait_log_level level);
void plait_log(plait_log_level level, const char *component, const char *fmt, ...)
    PLAIT_PRINTF(3, 4);
void plait_vlog(plait_log_level level, const char *component, const char *fmt, va_list ap);
/* Write one line, formatted and prefixed as plait_log does, to the log file
 * only (nothing when none is set), whatever the level filter: for messages
 * the caller already printed its own way (the CLI's final error), so the
 * rank's log holds them too. Thread-safe. */
void plait_log_file_only(plait_log_level level, const char *component, const char *fmt, ...) PLAIT_PRINTF(3, 4);
/* A line drawn in place on a terminal (rank 0's progress line) on file
 * descriptor `fd`: while one is set, a log line written to stderr first
 * clears it (carriage return, clear to the end of the line, on `fd`), then
 * draws it again, so log lines start on a line of their own instead of
 * being appended to it. `text` (copied; without a newline) NULL or fd < 0
 * sets none. Thread-safe; the caller writes the line itself and flushes it
 * before calling. */
void plait_log_set_status_line(int fd, const char *text);
const char *plait_log_level_name(plait_log_level level);
/* Parse "error|warn|info|debug|trace"; -1 if unknown. */
int plait_log_level_parse(const char *name);

#define PLAIT_ERROR(comp, ...) plait_log(PLAIT_LOG_ERROR, comp, __VA_ARGS__)
#define PLAIT_WARN(comp, ...) plait_log(PLAIT_LOG_WARN, comp, __VA_ARGS__)
#define PLAIT_INFO(comp, ...) plait_log(PLAIT_LOG_INFO, comp, __VA_ARGS__)
#define PLAIT_DEBUG(comp, ...)                                                   \
    do {                                                                         \
        if (plait_log_enabled_for(PLAIT_LOG_DEBUG, comp))                        \
            plait_log(PLAIT_LOG_DEBUG, comp, __VA_ARGS__);                       \
    } while (0)

#endif
