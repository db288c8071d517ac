/*
 * User point-to-point requests (comm_p2p.c), as the executor's wait and
 * test finish them (comm_exec.c).
 */
#ifndef PLAIT_CORE_COMM_P2P_H
#define PLAIT_CORE_COMM_P2P_H

#include "commstate/request.h"

/* Describe a p2p request for messages. */
void plait_p2p_describe(const plait_request *r, char *buf, size_t len);
/* Finish a p2p request (comm_p2p.c). */
plait_status plait_p2p_wait(plait_request *r);
plait_status plait_p2p_test(plait_request *r, int *done);

#endif
