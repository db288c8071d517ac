/*
 * CRC32C (Castagnoli), the checksum of checkpoint files and tensors.
 * Uses the SSE4.2 crc32 instruction when the CPU has it (checked once at run
 * time), a table otherwise; both give the same values. Thread-safe.
 */
#ifndef PLAIT_CORE_CHECKPOINT_SAFETENSORS_CRC32C_H
#define PLAIT_CORE_CHECKPOINT_SAFETENSORS_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Continue a CRC32C: start with crc = 0; crc32c(crc32c(0, a), b) equals the
 * CRC of a followed by b. crc32c(0, "123456789", 9) = 0xe3069283. */
uint32_t plait_crc32c(uint32_t crc, const void *data, size_t n);
/* The table implementation alone (for tests comparing both paths). */
uint32_t plait_crc32c_portable(uint32_t crc, const void *data, size_t n);

#endif
