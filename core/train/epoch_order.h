/*
 * The order in which [data] sampling = epochs reads a split's windows:
 * sample g (counted over the whole run: step × global batch + its place in
 * the step) is window perm_e(g mod W) of W, where e = g / W is its epoch
 * and perm_e a permutation of 0 .. W-1 drawn from the seed and the epoch.
 * So every window is read once an epoch, each epoch in an order of its
 * own, and any sample's window is computed alone (nothing carried from
 * sample to sample, as the random sampling's hash), in a few hashes.
 *
 * The permutation is a four-round Feistel network over the smallest even
 * power of two not below W, its outputs at or past W walked on (cycle
 * walking) until one falls below: a bijection of 0 .. W-1, at most four
 * passes expected. Pure; thread-safe.
 */
#ifndef PLAIT_CORE_TRAIN_EPOCH_ORDER_H
#define PLAIT_CORE_TRAIN_EPOCH_ORDER_H

#include <stdint.h>

/* The window of sample g among `windows` (>= 1) under `seed`. */
int64_t plait_epoch_window(uint64_t seed, int64_t g, int64_t windows);

#endif
