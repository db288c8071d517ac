/*
 * Checks run on every plugin descriptor before anything in it is called:
 * size, magic, ABI major/minor, kind, name, key table, and the kind's
 * function table (minimum size, required functions present).
 *
 * Thread-safety: pure checks of a descriptor (no shared state).
 */
#ifndef PLAIT_CORE_PLUGIN_CHECK_H
#define PLAIT_CORE_PLUGIN_CHECK_H

#include <plait/plait.h>

/* PLAIT_OK, or PLAIT_ERR_ABI with a message naming `path`, the plugin and
 * what to do. */
plait_status plait_check_descriptor(const char *path, const plait_plugin_desc *desc);
/* The checks of plait_check_descriptor up to the name (size, magic, ABI,
 * kind, name), before anything the kind's function table decides. */
plait_status plait_check_descriptor_head(const char *path, const plait_plugin_desc *desc);

#endif
