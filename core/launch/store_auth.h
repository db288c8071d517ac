/*
 * The rendezvous store's mutual authentication (protocol version 2): a
 * challenge and response with HMAC-SHA-256 keyed by the job token, so the
 * token never crosses the network and a process squatting on the store's
 * port learns nothing.
 *
 *   client -> HELLO  u32 version, client nonce Nc (32 random bytes)
 *   server -> OK     server nonce Ns, server proof HMAC(token, "plait-store server" Nc Ns)
 *   client            checks the server proof; a mismatch ends the connection
 *                     with nothing more sent (the peer does not know the token)
 *   client -> AUTH   i32 rank, client proof HMAC(token, "plait-store client" Nc Ns rank)
 *   server -> OK | DENIED
 *
 * The labels keep a proof of one side from being replayed as the other's;
 * fresh nonces on both sides keep a recorded exchange from being replayed.
 * Thread-safe (pure functions; nonces from getrandom).
 */
#ifndef PLAIT_CORE_LAUNCH_STORE_AUTH_H
#define PLAIT_CORE_LAUNCH_STORE_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "launch/hmac_sha256.h"

#define STORE_NONCE_BYTES 32
#define STORE_PROOF_BYTES PLAIT_SHA256_BYTES

/* Fill `out` with random bytes; 0, or -1 when the kernel gives none. */
int store_auth_nonce(unsigned char out[STORE_NONCE_BYTES]);
/* The server's proof over both nonces. */
void store_auth_server_proof(const char *token, size_t token_len, const unsigned char *nc, const unsigned char *ns,
                             unsigned char out[STORE_PROOF_BYTES]);
/* The client's proof over both nonces and the rank it joins as. */
void store_auth_client_proof(const char *token, size_t token_len, const unsigned char *nc, const unsigned char *ns,
                             int32_t rank, unsigned char out[STORE_PROOF_BYTES]);

#endif
