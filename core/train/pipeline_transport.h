/*
 * Which pipelines a comm plugin can carry: the executor's posting order
 * of a pipeline of several model chunks a stage against a transport that
 * batches what is posted between two waits (docs/transport.md, "Posting
 * order"). Asked by every rank once its plan is made (run_setup.c), which
 * the launcher's preflight and `plait plan` do too.
 */
#ifndef PLAIT_TRAIN_PIPELINE_TRANSPORT_H
#define PLAIT_TRAIN_PIPELINE_TRANSPORT_H

#include <plait/types.h>

#include "config/config.h"

/* A pipeline of pp >= 2 stages with `chunks` >= 2 model chunks a stage
 * (the interleaved schedule, or gpipe looped over virtual stages) over a
 * comm plugin on device streams
 * (PLAIT_COMM_CUDA_STREAMS: nccl), which hands what is posted between two
 * waits to the network as one batch on one stream: the executor's posting
 * order of such a pipeline breaks the rule [grouping] of plait/comm.h there
 * (docs/transport.md, "Posting order"), and its ranks would wait on each
 * other until [comm] timeout. PLAIT_ERR_INVALID_CONFIG naming where
 * virtual_stages was set and what works; PLAIT_OK otherwise, or when the
 * comm plugin does not load here (the run names it). Not thread-safe
 * (loads the plugin, the thread's error slot). */
plait_status plait_check_pipeline_transport(const plait_config *cfg, int pp, int chunks);

#endif
