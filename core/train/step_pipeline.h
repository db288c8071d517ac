/*
 * The step executor's activation slots and the pipeline's point-to-point
 * (step_pipeline.c): a (chunk, micro-batch) holds a slot of the model's
 * activations from its forward (or the receive of its input) to the end of
 * its backward (or the send of its input gradient); the instructions
 * RECV_ACT, SEND_ACT, RECV_GRAD and SEND_GRAD move a slot's boundary
 * activation or gradient to or from the neighbouring stage. What is sent
 * leaves the slot: a buffer of the model's boundary pool, given back when
 * its send is waited for, at the send `send_window` later of its kind or
 * at the step's end (schedule.h, "Sends in flight").
 *
 * Internal to the step executor (run_step.c); not thread-safe: the thread
 * that drives the run calls it. Errors set the thread's message.
 */
#ifndef PLAIT_CORE_STEP_PIPELINE_H
#define PLAIT_CORE_STEP_PIPELINE_H

#include "train/run.h"

/* The slot of (chunk, mb): its own if it has one this step, else a free
 * slot of the chunk's. */
plait_status plait_step_slot(plait_run *run, int32_t chunk, int32_t mb, int32_t *slot);
/* (chunk, mb) is done with its slot. */
void plait_step_release_slot(plait_run *run, int32_t chunk, int32_t mb);
/* Every slot free, before a pass over the schedule. */
void plait_step_reset_slots(plait_run *run);

/* Wait for every send in flight (time counted as idle), their buffers
 * given back to the pool: at the step's end. */
plait_status plait_step_wait_all_sends(plait_run *run, plait_step_timing *t);

/* Sends of one kind (activations, gradients) a stage keeps in flight
 * under `plan`'s schedule over pp stages: 1 with one chunk a stage, pp + 1
 * where a stage of several chunks runs a backward before its last forward
 * (interleaved), else every send of the step (looped gpipe). A send waits
 * for the one this many before it; cost/stages.c counts the same. */
int32_t plait_step_send_window(const plait_plan *plan, int32_t pp);

/* A pipeline of several model chunks a stage (pp >= 2): its links, a
 * communicator per direction and kind of boundary, made from the pp group
 * by every rank of it (exec.pp_link; a collective over the pp group).
 * PLAIT_OK with none made otherwise. plait_step_links_close frees them. */
plait_status plait_step_links_open(plait_run *run);
void plait_step_links_close(plait_step_exec *exec);

/* Nonzero if this run's stage boundaries (the activations and their
 * gradients between pipeline stages) travel in bf16, a bf16 run ([run]
 * precision) with pp > 1: 1 in the core's wire format, on a transport that
 * carries it (plait_comm_p2p_bf16_carried); 2 as bf16 tensors rounded and
 * widened on the device (to_bf16, from_bf16: ABI 1.23), on a transport
 * that moves device memory itself (nccl); 0 float32 (a device without
 * from_bf16 on such a transport). */
int plait_step_pp_bf16(const plait_run *run);

/* The four pipeline instructions for (chunk, mb); a receive blocks (idle
 * time), a send is posted and left in flight. */
plait_status plait_step_recv_activation(plait_run *run, int32_t chunk, int32_t mb, plait_step_timing *t);
plait_status plait_step_send_activation(plait_run *run, int32_t chunk, int32_t mb, plait_step_timing *t);
plait_status plait_step_recv_gradient(plait_run *run, int32_t chunk, int32_t mb, plait_step_timing *t);
plait_status plait_step_send_gradient(plait_run *run, int32_t chunk, int32_t mb, plait_step_timing *t);

#endif
