/*
 * Time for the whole core: one monotonic clock (what every timeout, deadline
 * and step timing is measured on) and a sleep that survives signals.
 * Thread-safe; no state.
 */
#ifndef PLAIT_CORE_CLOCK_H
#define PLAIT_CORE_CLOCK_H

#include <stdint.h>

/* Seconds on CLOCK_MONOTONIC (an arbitrary origin: use differences only). */
double plait_clock_now(void);
/* The same clock in whole nanoseconds (for counters summed atomically). */
uint64_t plait_clock_now_ns(void);

/* Sleep `seconds` (<= 0: return at once), resuming after signals; uses no CPU. */
void plait_clock_sleep(double seconds);

#endif
