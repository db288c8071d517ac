/*
 * Glue between the job (comm/bootstrap.h: launcher detection, rendezvous
 * store, world bootstrap) and the core communicator (comm/comm.h).
 */
#ifndef PLAIT_CORE_COMM_JOB_H
#define PLAIT_CORE_COMM_JOB_H

#include "comm/bootstrap.h"
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

#endif
