/*
 * A stand-in device for the staging tests: memory the host cannot
 * dereference (a PROT_NONE reservation; any host access is a segfault) whose
 * bytes live in a shadow mapping that only copy() reaches, as a GPU's do.
 * Communicators take it when created with settings.device =
 * fake_device_comm() (kind PLAIT_MEM_CUDA).
 * Thread-safe. fake_device_fail_after / fake_device_stall_after make the
 * n-th later copy of the calling rank fail or sleep (fault tests).
 */
#ifndef PLAIT_TESTS_FAKE_DEVICE_H
#define PLAIT_TESTS_FAKE_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include <plait/device.h>

#include "commstate/comm_device.h"

void fake_device_open(size_t bytes);  /* reserve */
void fake_device_close(void);         /* unmap; asserts nothing is allocated */
/* The device as a communicator takes it (plait_comm_settings.device). */
const plait_comm_device *fake_device_comm(void);
void *fake_device_alloc(size_t bytes);
void fake_device_free(void *p);
size_t fake_device_in_use(void);
/* host <-> device helpers for tests (through copy()) */
void fake_device_upload(void *dev, const void *host, size_t bytes);
void fake_device_download(void *host, const void *dev, size_t bytes);
/* copies so far, and those made by a thread named "plait-stg-*" */
uint64_t fake_device_copies(void);
uint64_t fake_device_copies_on_stager(void);
/* fault injection for copies whose device address lies in [lo, lo+len):
 * after `skip` such copies, the next fails (or sleeps `stall_s`) */
void fake_device_fault(const void *lo, size_t len, uint64_t skip, double stall_s);
void fake_device_fault_clear(void);
/* every copy takes at least `us` microseconds (a slow bus) */
void fake_device_set_delay(unsigned us);

#endif
