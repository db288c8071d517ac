/* Windows read once an epoch, in a seeded order (epoch_order.h). */
#include "train/epoch_order.h"

#include "runtime/hash.h"

/* One pass of the network over 2·half bits: four rounds, each keyed by the
 * epoch's key and its number. */
static uint64_t feistel(uint64_t x, int half, uint64_t key) {
    const uint64_t mask = (1ull << half) - 1;
    uint64_t l = x >> half, r = x & mask;
    for (uint64_t round = 0; round < 4; round++) {
        uint64_t f = plait_mix64(key ^ (r * 0x9e3779b97f4a7c15ull) ^ (round << 56)) & mask;
        uint64_t t = r;
        r = l ^ f;
        l = t;
    }
    return (l << half) | r;
}

int64_t plait_epoch_window(uint64_t seed, int64_t g, int64_t windows) {
    if (windows <= 1 || g < 0) return 0;
    const uint64_t w = (uint64_t)windows, epoch = (uint64_t)g / w;
    int bits = 0;
    while (bits < 62 && (1ull << bits) < w) bits++;
    const int half = (bits + 1) / 2;
    const uint64_t key = plait_mix64(plait_mix64(seed ^ 0x6a09e667f3bcc909ull) + epoch * 0xbb67ae8584caa73bull);
    uint64_t x = (uint64_t)g % w;
    do x = feistel(x, half, key);
    while (x >= w);
    return (int64_t)x;
}
