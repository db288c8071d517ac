/*
 * plait SDK — umbrella header. A plugin includes this (or the individual
 * headers it needs) and nothing from the core.
 */
#ifndef PLAIT_PLAIT_H
#define PLAIT_PLAIT_H

#include <plait/types.h>
#include <plait/config.h>
#include <plait/coll.h>
#include <plait/kernels.h>
#include <plait/host.h>
#include <plait/model.h>
#include <plait/comm.h>
#include <plait/parallel.h>
#include <plait/optim.h>
#include <plait/plugin.h>

#endif /* PLAIT_PLAIT_H */
