/*
 * The compressed allgather (plait/coll.h, coll/compress.h): ZeRO-3's
 * parameter gather in bf16. Each rank encodes its block once and decodes
 * its own as the others do, so every rank computes with the same values;
 * the encoded blocks travel as bytes through the allgather AUTO picks for
 * their size (hierarchical across hosts), so its bytes_sent are the
 * compressed ones.
 */
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"
#include "coll/compress.h"
#include "runtime/error.h"

plait_status plait_compress_allgather(plait_coll_ctx *c) {
    const plait_coll_args *a = c->a;
    size_t n = (size_t)c->size, eb = plait_compress_bytes(a->compression, a->count);
    size_t ebp = (eb + 63) & ~(size_t)63; /* each encoded block 64-byte aligned (its scales are floats) */
    /* not the communicator's scratch: the inner allgather may use that */
    char *enc = malloc(ebp * n);
    if (!enc) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory for a compressed allgather");
    plait_compress_encode(a->compression, enc + (size_t)c->rank * ebp, a->send, a->count, NULL);
    plait_coll_args g = *a;
    g.compression = PLAIT_COMPRESS_NONE;
    g.residual = NULL;
    g.dtype = PLAIT_U8;
    g.count = ebp;
    g.send = enc + (size_t)c->rank * ebp;
    g.recv = enc;
    g.algo = PLAIT_ALGO_AUTO;
    g.internal = 1; /* the call as made was checked */
    g.req = NULL;
    plait_status st = plait_coll_execute(c->comm, &g);
    for (size_t q = 0; st == PLAIT_OK && q < n; q++)
        plait_compress_decode(a->compression, (float *)a->recv + q * a->count, enc + q * ebp, a->count);
    if (st == PLAIT_OK || !c->comm->scratch_leaked) free(enc); /* else a failed transfer may still write it */
    return st;
}
