#include "plugin/plugin_check.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "config/config.h"
#include "plugin/loader.h"
#include "runtime/error.h"

#define END_OF(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))

/* Minimum function-table sizes of ABI v1.0, one per kind. */
static size_t min_ops_size(uint32_t kind) {
    switch (kind) {
    case PLAIT_KIND_COMM: return END_OF(plait_comm_ops, stream_destroy);
    case PLAIT_KIND_PARALLEL: return END_OF(plait_parallel_ops, destroy);
    case PLAIT_KIND_OPTIM: return END_OF(plait_optim_ops, destroy);
    case PLAIT_KIND_DEVICE: return END_OF(plait_device_ops, kernels); /* ABI 1.3's first */
    default: return 0;
    }
}

/* Name of the first required function that is NULL, or NULL if all present. */
static const char *missing_required(uint32_t kind, const void *ops) {
    switch (kind) {
    case PLAIT_KIND_COMM: {
        const plait_comm_ops *o = ops;
        if (!o->init) return "init";
        if (!o->derive) return "derive";
        if (!o->destroy) return "destroy";
        if (!o->isend) return "isend";
        if (!o->irecv) return "irecv";
        if (!o->test) return "test";
        if (!o->wait) return "wait";
        return NULL;
    }
    case PLAIT_KIND_PARALLEL: {
        const plait_parallel_ops *o = ops;
        if (!o->create) return "create";
        if (!o->plan) return "plan";
        if (!o->destroy) return "destroy";
        return NULL;
    }
    case PLAIT_KIND_OPTIM: {
        const plait_optim_ops *o = ops;
        if (!o->create) return "create";
        if (!o->materialize) return "materialize";
        if (!o->step) return "step";
        if (!o->export_tensor) return "export_tensor";
        if (!o->memory) return "memory";
        if (!o->destroy) return "destroy";
        return NULL;
    }
    case PLAIT_KIND_DEVICE: {
        const plait_device_ops *o = ops;
        if (!o->count) return "count";
        if (!o->open) return "open";
        if (!o->close) return "close";
        if (!o->alloc) return "alloc";
        if (!o->free) return "free";
        if (!o->copy) return "copy";
        if (!o->fill_zero) return "fill_zero";
        if (!o->synchronize) return "synchronize";
        if (!o->memory_stats) return "memory_stats";
        if (!o->kernels) return "kernels";
        return NULL;
    }
    }
    return "ops";
}

/* A device's events (ABI 1.4) are all or none, and a device declaring 1.4
 * has them: what is wrong, or NULL. A 1.3 device (its table ends before
 * them) has none and is fine. */
static const char *missing_events(const plait_device_ops *o, uint16_t abi_minor) {
    if (o->struct_size < END_OF(plait_device_ops, event_native))
        return abi_minor >= 4 ? "its function table ends before the event functions" : NULL;
    int set = !!o->event_create + !!o->event_destroy + !!o->event_record + !!o->event_wait +
              !!o->event_synchronize + !!o->copy_on + !!o->event_native;
    if (set == 7 || (set == 0 && abi_minor < 4)) return NULL;
    return set == 0 ? "it has no event functions" : "it sets only some of its event functions";
}

static int valid_name(const char *s) {
    if (!s || !*s || strlen(s) > 48) return 0;
    for (; *s; s++)
        if (!(islower((unsigned char)*s) || isdigit((unsigned char)*s) || *s == '_')) return 0;
    return 1;
}

plait_status plait_check_descriptor_head(const char *path, const plait_plugin_desc *d) {
    if (!d) return plait_set_error(PLAIT_ERR_ABI, "%s: the entry returned a NULL descriptor", path);
    if (d->struct_size < PLAIT_DESC_V1_0_SIZE)
        return plait_set_error(PLAIT_ERR_ABI,
                               "%s: plugin descriptor is %u bytes, smaller than the %zu bytes of ABI v1.0; "
                               "the plugin was built against a broken or foreign SDK; rebuild it",
                               path, d->struct_size, (size_t)PLAIT_DESC_V1_0_SIZE);
    if (d->magic != PLAIT_PLUGIN_MAGIC)
        return plait_set_error(PLAIT_ERR_ABI, "%s: descriptor magic is 0x%08x, not 0x%08x; not a plait plugin "
                                              "descriptor",
                               path, d->magic, PLAIT_PLUGIN_MAGIC);
    if (d->abi_major != PLAIT_ABI_MAJOR)
        return plait_set_error(PLAIT_ERR_ABI,
                               "%s: built for plait plugin ABI v%u.%u, but this plait speaks ABI v%d.%d; "
                               "rebuild the plugin against this plait's SDK",
                               path, d->abi_major, d->abi_minor, PLAIT_ABI_MAJOR, PLAIT_ABI_MINOR);
    if (d->abi_minor > PLAIT_ABI_MINOR)
        return plait_set_error(PLAIT_ERR_ABI,
                               "%s: needs plait ABI v%u.%u but this plait provides v%d.%d; upgrade plait",
                               path, d->abi_major, d->abi_minor, PLAIT_ABI_MAJOR, PLAIT_ABI_MINOR);
    if (d->kind < PLAIT_KIND_COMM || d->kind > PLAIT_KIND_DEVICE)
        return plait_set_error(PLAIT_ERR_ABI, "%s: unknown plugin kind %u (this plait knows comm=1, "
                                              "parallel=2, optim=3, device=4)",
                               path, d->kind);
    if (d->kind == PLAIT_KIND_DEVICE && d->abi_minor < 3)
        return plait_set_error(PLAIT_ERR_ABI, "%s: device plugin %s declares ABI v1.%u, but device plugins "
                                              "exist from v1.3 on; rebuild it against this plait's SDK",
                               path, d->name ? d->name : "?", d->abi_minor);
    if (!valid_name(d->name))
        return plait_set_error(PLAIT_ERR_ABI, "%s: plugin name '%s' is not valid (1-48 of a-z, 0-9, _)", path,
                               d->name ? d->name : "(null)");
    return PLAIT_OK;
}

plait_status plait_check_descriptor(const char *path, const plait_plugin_desc *d) {
    plait_status head = plait_check_descriptor_head(path, d);
    if (head != PLAIT_OK) return head;
    if (d->n_keys && (!d->keys || d->key_size < END_OF(plait_key_decl, doc)))
        return plait_set_error(PLAIT_ERR_ABI, "%s: %s/%s declares %u config keys with a bad table (key_size %u)",
                               path, plait_kind_name(d->kind), d->name, d->n_keys, d->key_size);
    if (d->n_keys) {
        char section[96];
        snprintf(section, sizeof section, "%s.%s", plait_kind_name(d->kind), d->name);
        plait_status st = plait_config_check_declared(section, d->keys, d->n_keys, d->key_size, path);
        if (st != PLAIT_OK) return st;
    }
    if (!d->ops)
        return plait_set_error(PLAIT_ERR_ABI, "%s: %s/%s has no function table", path, plait_kind_name(d->kind),
                               d->name);
    uint32_t ops_size = *(const uint32_t *)d->ops;
    if (ops_size < min_ops_size(d->kind))
        return plait_set_error(PLAIT_ERR_ABI,
                               "%s: %s/%s function table is %u bytes, smaller than ABI v1.0's %zu; rebuild "
                               "the plugin against this plait's SDK",
                               path, plait_kind_name(d->kind), d->name, ops_size, min_ops_size(d->kind));
    const char *missing = missing_required(d->kind, d->ops);
    if (missing)
        return plait_set_error(PLAIT_ERR_ABI, "%s: %s/%s lacks the required function '%s'", path,
                               plait_kind_name(d->kind), d->name, missing);
    if (d->kind == PLAIT_KIND_DEVICE && (missing = missing_events(d->ops, d->abi_minor)) != NULL)
        return plait_set_error(PLAIT_ERR_ABI,
                               "%s: device/%s declares ABI v1.%u but %s; a device's streams and events "
                               "(plait/device.h, ABI 1.4) come all or none",
                               path, d->name, d->abi_minor, missing);
    return PLAIT_OK;
}
