/*
 * bf16 storage of the Adam-family plugins: the conversions and the
 * moments kept in bf16 (bf16_moments.h).
 */
#include "bf16_moments.h"

#include <stdio.h>
#include <string.h>

#include <plait/optim_util.h>

/* 1 where the kernel table converts both ways itself. */
static int kernels_convert(const plait_kernels *k) { return k->to_bf16 && PLAIT_KERNELS_HAS_FROM_BF16(k); }

int bf16_usable(const plait_host *host) {
    return kernels_convert(host->kernels) || plait_tensor_kind(host) == PLAIT_MEM_HOST;
}

void bf16_widen(const plait_host *host, float *dst, const plait_bf16 *src, size_t n) {
    const plait_kernels *k = host->kernels;
    if (kernels_convert(k)) {
        k->from_bf16(dst, src, n);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t b = (uint32_t)src[i] << 16;
        memcpy(&dst[i], &b, sizeof b);
    }
}

void bf16_narrow(const plait_host *host, plait_bf16 *dst, const float *src, size_t n) {
    const plait_kernels *k = host->kernels;
    if (kernels_convert(k)) {
        k->to_bf16(dst, src, n);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &src[i], sizeof b);
        if ((b & 0x7fffffffu) > 0x7f800000u) b |= 0x00400000u; /* NaN: quiet, never rounded into infinity */
        else b += 0x7fffu + ((b >> 16) & 1u);
        dst[i] = (plait_bf16)(b >> 16);
    }
}

int bf16_moments_wanted(const plait_host *host, const plait_config *cfg, const char *who) {
    plait_value v;
    if (host->config_get(cfg, "optim", "moments", &v) != PLAIT_OK || v.i != 1) return 0;
    if (host->config_get(cfg, "optim", "offload", &v) == PLAIT_OK && v.i != 0) {
        host->set_error(PLAIT_ERR_INVALID_CONFIG,
                        "%s: [optim] moments = bf16 with [optim] offload = %s: the offloaded state is float32; use "
                        "moments = fp32 with offload, or offload = none",
                        who, v.i == 1 ? "host" : "nvme");
        return -1;
    }
    if (!bf16_usable(host)) {
        host->set_error(PLAIT_ERR_UNSUPPORTED,
                        "%s: [optim] moments = bf16 needs to_bf16 and from_bf16 in the device's kernel table (SDK "
                        "1.23), which this device lacks; use moments = fp32",
                        who);
        return -1;
    }
    return 1;
}

plait_status bf16_moments_open(const plait_host *host, size_t n, const char *who, bf16_moments *out) {
    memset(out, 0, sizeof *out);
    char tag[64];
    snprintf(tag, sizeof tag, "%s optimizer state", who);
    plait_bf16 *mv = host->alloc((2 * n + 16) * sizeof(plait_bf16), plait_tensor_kind(host), 64, tag);
    snprintf(tag, sizeof tag, "%s bf16 moments' widening", who);
    float *scratch = plait_tensor_alloc(host, 3 * BF16_PIECE, tag);
    if (!mv || !scratch) {
        host->free(mv);
        host->free(scratch);
        return host->set_error(PLAIT_ERR_NO_MEMORY, "%s: out of memory for the bf16 moments", who);
    }
    /* zeros, the gap before v too (v starts on 16 bytes) */
    for (size_t at = 0; at < 2 * n + 16; at += BF16_PIECE) {
        size_t c = 2 * n + 16 - at < BF16_PIECE ? 2 * n + 16 - at : BF16_PIECE;
        host->kernels->zero(scratch, c);
        bf16_narrow(host, mv + at, scratch, c);
    }
    *out = (bf16_moments){.host = host, .m = mv, .v = mv + (n + 7) / 8 * 8, .n = n, .scratch = scratch};
    return PLAIT_OK;
}

void bf16_moments_close(bf16_moments *mo) {
    if (!mo || !mo->host) return;
    mo->host->free(mo->m);
    mo->host->free(mo->scratch);
    memset(mo, 0, sizeof *mo);
}

void bf16_moments_adamw(bf16_moments *mo, float *param, const float *grad, size_t at, size_t n,
                        const plait_adamw_args *args) {
    const plait_host *h = mo->host;
    float *m = mo->scratch, *v = mo->scratch + BF16_PIECE;
    for (size_t done = 0; done < n; done += BF16_PIECE) {
        size_t c = n - done < BF16_PIECE ? n - done : BF16_PIECE;
        bf16_widen(h, m, mo->m + at + done, c);
        bf16_widen(h, v, mo->v + at + done, c);
        h->kernels->adamw(param + done, grad + done, m, v, c, args);
        bf16_narrow(h, mo->m + at + done, m, c);
        bf16_narrow(h, mo->v + at + done, v, c);
    }
}

plait_status bf16_moments_get(bf16_moments *mo, int which, size_t at, float *dst, size_t count) {
    const plait_bf16 *src = (which ? mo->v : mo->m) + at;
    float *piece = mo->scratch + 2 * BF16_PIECE;
    plait_status st = PLAIT_OK;
    for (size_t done = 0; done < count && st == PLAIT_OK; done += BF16_PIECE) {
        size_t c = count - done < BF16_PIECE ? count - done : BF16_PIECE;
        bf16_widen(mo->host, piece, src + done, c);
        st = plait_tensor_to_host(mo->host, dst + done, piece, c);
    }
    return st;
}

int bf16_moments_load(bf16_moments *mo, int which, size_t at, const plait_value_source *src, int32_t index,
                      const char *name, size_t offset, size_t count) {
    plait_bf16 *dst = (which ? mo->v : mo->m) + at;
    float *piece = mo->scratch + 2 * BF16_PIECE;
    int got = 1;
    for (size_t done = 0; done < count; done += BF16_PIECE) {
        size_t c = count - done < BF16_PIECE ? count - done : BF16_PIECE;
        plait_status st = plait_tensor_read(mo->host, src, index, name, offset + done, c, piece);
        if (st == PLAIT_ERR_UNSUPPORTED) {
            got = 0;
            mo->host->kernels->zero(piece, c);
        } else if (st != PLAIT_OK) {
            return -1;
        }
        bf16_narrow(mo->host, dst + done, piece, c);
    }
    return got;
}
