/*
 * Fuzz target for Unicode's Normalization Form C (tokenizer/nfc.h), which
 * a Qwen2-style tokenizer applies to untrusted text: whatever the bytes,
 * the output fits plait_nfc_bound, normalising it again changes nothing
 * (NFC is idempotent), an all-ASCII input comes back as it is, and nothing
 * crashes or reads out of bounds (ASan/UBSan).
 *
 * Built as `fuzz_nfc` (PLAIT_FUZZ=ON) and as the ctest
 * `test_fuzz_nfc_corpus` (replay_main.c over tests/fuzz/corpus/nfc).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/nfc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    unsigned char *once = malloc(plait_nfc_bound(size)), *twice = NULL;
    if (!once) abort();
    const size_t n = plait_nfc(data, size, once);
    if (n > plait_nfc_bound(size)) abort();
    if (plait_nfc_trivial(data, size) && (n != size || memcmp(once, data, size) != 0)) abort();
    if (!(twice = malloc(plait_nfc_bound(n)))) abort();
    const size_t m = plait_nfc(once, n, twice);
    if (m != n || memcmp(once, twice, n) != 0) abort();
    free(once);
    free(twice);
    return 0;
}
