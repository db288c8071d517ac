/*
 * Glue between the job (launch/bootstrap.h: launcher detection, rendezvous
 * store, world bootstrap) and the core communicator (comm/comm.h).
 *
 * Thread-safety: creating the world is collective over the job's ranks and
 * made by one thread per rank; the bootstrap factory may be called from any
 * thread that creates a communicator (splits serialise on the job's store).
 */
#ifndef PLAIT_CORE_COMM_JOB_H
#define PLAIT_CORE_COMM_JOB_H

#include <plait/plugin.h>

#include "launch/bootstrap.h"
#include "comm/comm.h"

/* A factory whose bootstraps are plait_job_bootstrap_for() views of the
 * job's store (keys namespaced by comm id). `job` must outlive every
 * communicator created with it. */
plait_bootstrap_factory plait_job_bootstrap_factory(plait_job *job);

/* The world communicator over every rank of `job`, through the comm plugin
 * `ops` (collective over all ranks). Free it with plait_comm_free() before
 * plait_job_leave(). */
plait_status plait_comm_create_job_world(plait_job *job, const plait_comm_ops *ops, const plait_config *cfg,
                                         const plait_comm_settings *settings, plait_comm **out);

/* The comm plugins' card where the user left it unset: [comm.tcp] ifname
 * and [comm.verbs] device (where those sections are declared) become the
 * card nearest the rank's GPU, or its NUMA node, that its place chose
 * (`nearest`, plait_job_bind_result: filled for a job on several hosts
 * only, so that one on a single host keeps loopback and the first active
 * RDMA port). A value from a file, the environment or the command line is
 * kept. Origin "derived", shown by `plait config show`; logged. Call it
 * before plait_comm_create_job_world. Errors: those of
 * plait_config_set_derived. */
plait_status plait_comm_nearest_card_defaults(plait_config *cfg, const plait_bind_result *nearest, int rank);

/* Can the comm plugin `desc` serve a run on this machine whose buffers are
 * `kind` memory? Runs its probe (no GPU, no RDMA device, ...), then checks
 * that it moves that kind of memory (the core stages device memory through
 * the host for a host-only plugin, never the other way). PLAIT_OK, or
 * PLAIT_ERR_UNSUPPORTED with "[comm] plugin = nccl cannot run here: <reason>".
 * Call it before joining the job, so every rank fails at once. */
plait_status plait_comm_plugin_usable(const plait_plugin_desc *desc, plait_mem_kind kind);

#endif
