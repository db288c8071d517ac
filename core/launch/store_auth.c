#include "launch/store_auth.h"

#include <errno.h>
#include <sys/random.h>

int store_auth_nonce(unsigned char out[STORE_NONCE_BYTES]) {
    size_t got = 0;
    while (got < STORE_NONCE_BYTES) {
        ssize_t r = getrandom(out + got, STORE_NONCE_BYTES - got, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        got += (size_t)r;
    }
    return 0;
}

static const char server_label[] = "plait-store server";
static const char client_label[] = "plait-store client";

void store_auth_server_proof(const char *token, size_t token_len, const unsigned char *nc, const unsigned char *ns,
                             unsigned char out[STORE_PROOF_BYTES]) {
    const void *parts[] = {server_label, nc, ns};
    const size_t lens[] = {sizeof server_label - 1, STORE_NONCE_BYTES, STORE_NONCE_BYTES};
    plait_hmac_sha256(token, token_len, parts, lens, 3, out);
}

void store_auth_client_proof(const char *token, size_t token_len, const unsigned char *nc, const unsigned char *ns,
                             int32_t rank, unsigned char out[STORE_PROOF_BYTES]) {
    unsigned char r[4] = {(unsigned char)rank, (unsigned char)((uint32_t)rank >> 8),
                          (unsigned char)((uint32_t)rank >> 16), (unsigned char)((uint32_t)rank >> 24)};
    const void *parts[] = {client_label, nc, ns, r};
    const size_t lens[] = {sizeof client_label - 1, STORE_NONCE_BYTES, STORE_NONCE_BYTES, 4};
    plait_hmac_sha256(token, token_len, parts, lens, 4, out);
}
