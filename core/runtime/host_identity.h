/*
 * Which "host" this process runs on, for deciding which ranks share one:
 * the UTS host name, the kernel's boot id and the inode of the process's
 * network namespace. Two processes with equal keys can reach each other
 * over loopback and share memory bandwidth; processes in different network
 * namespaces (containers, the multi-host test harness) are different hosts
 * even on one kernel, since neither loopback nor the address each one
 * advertises is reachable the same way from the other.
 *
 * Pure apart from reading /proc and gethostname(); thread-safe; never fails
 * (an unreadable part counts as empty).
 */
#ifndef PLAIT_CORE_RUNTIME_HOST_IDENTITY_H
#define PLAIT_CORE_RUNTIME_HOST_IDENTITY_H

#include <stddef.h>
#include <stdint.h>

/* "hostname/boot-id/net:[inode]" into buf (truncated to cap). */
void plait_host_identity(char *buf, size_t cap);

/* The machine, lasting across reboots (unlike plait_host_identity): "host
 * name/machine-id" (/etc/machine-id; empty where unreadable), for what is
 * measured once per machine and cached (the MFU peak). */
void plait_machine_identity(char *buf, size_t cap);

/* A 64-bit FNV-1a hash of plait_host_identity(). */
uint64_t plait_host_key(void);

#endif
