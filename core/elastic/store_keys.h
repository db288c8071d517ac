/*
 * Small helpers over the membership store's keys (membership_wire.h),
 * shared by the launchers' side (membership.c) and the coordinator.
 * Internal to elastic/. Thread-safe (the store client is).
 */
#ifndef PLAIT_CORE_ELASTIC_STORE_KEYS_H
#define PLAIT_CORE_ELASTIC_STORE_KEYS_H

#include <stddef.h>
#include <stdint.h>

#include "launch/store.h"

/* "<prefix><lid as 16 hex digits>" into buf. */
void elastic_key_lid(char *buf, size_t cap, const char *prefix, uint64_t lid);

/* Read `key` without waiting: 1 and its value (at most cap bytes; *len its
 * full length) when present, 0 when absent (no error left set), -1 when
 * the store failed (the error set). buf may be NULL with cap 0. */
int elastic_get_now(plait_store *st, const char *key, void *buf, size_t cap, size_t *len);

#endif
