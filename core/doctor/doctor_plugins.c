/* plait doctor: the plugins found, what each would use here (its report,
 * ABI 1.6, made in a child), the devices opened to ask what they are
 * (doctor.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <plait/plugin.h>

#include "device/device.h"
#include "doctor/doctor.h"
#include "plugin/loader.h"
#include "runtime/error.h"
#include "runtime/fork_call.h"
#include "runtime/host_memory.h"

/* The configuration for a plugin's report: the doctor's when it holds the
 * plugin's section (its keys as configured), else none (their defaults). */
static const plait_config *config_for(const plait_doctor *d, const char *kind, const char *name) {
    char section[96];
    snprintf(section, sizeof section, "%s.%s", kind, name);
    return d->cfg && plait_config_has_section(d->cfg, section) ? d->cfg : NULL;
}

/* Is `name` the plugin the configuration selects for `kind`? */
static int selected(const plait_doctor *d, const char *kind, const char *name) {
    return d->cfg && strcmp(plait_config_str(d->cfg, kind, "plugin"), name) == 0;
}

/* A device plugin that is available: open its first device to ask what it
 * is (doctor forks nothing afterwards, so a driver context does no harm). */
static void device_details(plait_doctor *d, const char *name) {
    plait_config *cfg = plait_config_new();
    char sel[96];
    snprintf(sel, sizeof sel, "device.plugin=%s", name);
    plait_status st = cfg ? plait_config_declare_core(cfg) : PLAIT_ERR_NO_MEMORY;
    if (st == PLAIT_OK) st = plait_config_add_override(cfg, sel);
    if (st == PLAIT_OK) st = plait_config_finalize(cfg, (char *[]){NULL});
    int32_t count = 0;
    if (st == PLAIT_OK && plait_device_preflight_count(cfg, &count) != PLAIT_OK) {
        /* the plugin's own words, without the key's origin doctor set */
        const char *why = plait_last_error(), *own = strstr(why, ": [device] plugin = ");
        plait_doctor_line(d, "", "no device found%s", own ? strchr(own + 2, ':') : why);
        st = PLAIT_ERR_UNSUPPORTED;
    } else if (st == PLAIT_OK && (st = plait_device_open(plait_plugin_host(), cfg, 0, 1)) != PLAIT_OK) {
        plait_doctor_line(d, "", "%d device%s; the first did not open: %s", count, count == 1 ? "" : "s",
                          plait_last_error());
    }
    if (st == PLAIT_OK) {
        const plait_device_info *info = plait_device_info_open();
        char mem[32] = "host memory", peaks[128] = "";
        if (info->mem_kind != PLAIT_MEM_HOST && info->memory_bytes)
            plait_bytes_text((double)info->memory_bytes, mem, sizeof mem);
        else if (info->mem_kind != PLAIT_MEM_HOST)
            snprintf(mem, sizeof mem, "memory of its own (size unknown)");
        if (info->peak_flops_bf16 > 0 || info->peak_flops_tf32 > 0)
            snprintf(peaks, sizeof peaks, "; datasheet %.0f TFLOP/s bf16, %.0f tf32", info->peak_flops_bf16 / 1e12,
                     info->peak_flops_tf32 / 1e12);
        plait_doctor_line(d, "", "%d device%s; the first: %s, %s%s", count, count == 1 ? "" : "s", info->name, mem,
                          peaks);
        plait_device_close();
    }
    plait_clear_error();
    plait_config_free(cfg);
}

/* ---- a plugin's report, made in a child ------------------------------------
 * A report() that crashes, exits or never returns takes down the child, not
 * the doctor: the doctor names what happened as the plugin's problem and
 * goes on. Each line comes back as a record: 'L' or 'P' (a problem), the
 * fact, NUL, the fix (empty for a line), NUL; 'E' once report() returned
 * (a report that calls exit(0) is not one that finished). */

typedef struct report_arg {
    const plait_plugin_desc *desc;
    const plait_config *cfg;
} report_arg;

static void write_record(void *ctx, const char *fact, const char *fix) {
    int fd = *(const int *)ctx;
    char kind = fix ? 'P' : 'L';
    const char *f = fact ? fact : "";
    const char *x = fix ? fix : "";
    (void)(plait_write_all(fd, &kind, 1) || plait_write_all(fd, f, strlen(f) + 1) ||
           plait_write_all(fd, x, strlen(x) + 1));
}

static int report_child(int fd, void *arg) {
    const report_arg *a = arg;
    a->desc->report(plait_plugin_host(), a->cfg, write_record, &fd);
    return plait_write_all(fd, "E", 1) == 0 ? 0 : 1;
}

/* The report's lines and problems under `label`, then what ended it if it
 * did not end well (the lines it sent first still count). */
static void replay_report(plait_doctor *d, const char *label, const plait_fork_result *fr, double limit) {
    const char *p = fr->out, *end = fr->out ? fr->out + fr->len : NULL;
    int returned = 0;
    while (p && p < end) {
        if (*p == 'E' && p + 1 == end) {
            returned = 1;
            break;
        }
        const char *fact = p + 1, *nul = memchr(fact, '\0', (size_t)(end - fact));
        const char *fix = nul ? nul + 1 : NULL, *nul2 = fix && fix < end ? memchr(fix, '\0', (size_t)(end - fix)) : NULL;
        if (!nul2 || (*p != 'L' && *p != 'P')) break; /* cut short by the child's end */
        char shown[1024], shown_fix[512]; /* the plugin's words, printable */
        plait_printable_copy(shown, sizeof shown, fact);
        plait_printable_copy(shown_fix, sizeof shown_fix, fix);
        if (*p == 'P') plait_doctor_problem(d, label, shown_fix, "%s", shown);
        else plait_doctor_line(d, "", "%s", shown);
        p = nul2 + 1;
    }
    if (plait_fork_ok(fr) && returned) return;
    const char *fix = "fix the plugin's report(), or remove the plugin from the plugin path";
    if (fr->hung)
        plait_doctor_problem(d, label, fix, "its report() did not finish within %g s and was stopped "
                             "(PLAIT_PLUGIN_SCAN_TIMEOUT sets the limit)", limit);
    else if (WIFSIGNALED(fr->status))
        plait_doctor_problem(d, label, fix, "its report() crashed (%s, signal %d)", strsignal(WTERMSIG(fr->status)),
                             WTERMSIG(fr->status));
    else
        plait_doctor_problem(d, label, fix, "its report() ended the process (exit status %d)",
                             WIFEXITED(fr->status) ? WEXITSTATUS(fr->status) : -1);
}

/* Each directory PLAIT_PLUGIN_PATH names: one that is missing or not a
 * directory holds no plugin, so the plugins meant to be there are not
 * found (a typo says nothing otherwise). */
static void check_plugin_path(plait_doctor *d) {
    const char *env = getenv("PLAIT_PLUGIN_PATH");
    char *copy = env ? strdup(env) : NULL, *save = NULL;
    for (char *dir = copy ? strtok_r(copy, ":", &save) : NULL; dir; dir = strtok_r(NULL, ":", &save)) {
        struct stat sb;
        int found = stat(dir, &sb) == 0, e = errno;
        if (found && S_ISDIR(sb.st_mode)) continue;
        plait_doctor_problem(d, "plugins", "correct PLAIT_PLUGIN_PATH (directories, separated by ':')",
                             "PLAIT_PLUGIN_PATH names %s, which %s: no plugin is found there", dir,
                             found         ? "is not a directory"
                             : e == ENOENT ? "does not exist"
                                           : strerror(e));
    }
    free(copy);
}

void plait_doctor_plugins(plait_doctor *d) {
    check_plugin_path(d);
    plait_plugin_row *rows = NULL;
    size_t n = plait_plugins_scan(&rows);
    /* every report first, each in a child, before this process opens any
     * device below (a driver context does not survive fork) */
    plait_fork_result *reports = n ? calloc(n, sizeof *reports) : NULL;
    double limit = plait_plugin_scan_seconds();
    for (size_t i = 0; reports && i < n; i++) {
        const plait_plugin_row *r = &rows[i];
        if (!r->loaded) continue;
        const plait_plugin_desc *desc = plait_plugin_load(plait_kind_parse(r->kind), r->name);
        plait_clear_error();
        if (!desc || !PLAIT_PLUGIN_HAS(desc, report)) continue;
        report_arg a = {desc, config_for(d, r->kind, r->name)};
        plait_fork_call(report_child, &a, limit, &reports[i]);
        if (!reports[i].started) /* no child: the doctor's own process asks */
            plait_doctor_problem(d, "doctor", "free memory or processes, and run plait doctor again",
                                 "%s %s's report was not made: no child process (%s)", r->kind, r->name,
                                 strerror(errno));
    }
    /* devices first, then transports, then the rest: what a run runs on */
    static const char *const order[] = {"device", "comm", "parallel", "optim"};
    for (size_t k = 0; k < sizeof order / sizeof order[0]; k++)
        for (size_t i = 0; i < n; i++) {
            const plait_plugin_row *r = &rows[i];
            if (strcmp(r->kind, order[k]) != 0) continue;
            char label[96];
            snprintf(label, sizeof label, "%s %s", r->kind, r->name);
            const char *chosen = selected(d, r->kind, r->name) ? " (the configuration's)" : "";
            if (!r->loaded) {
                if (r->status[0] == 's') continue; /* shadowed by one found earlier: that one is listed */
                plait_doctor_problem(d, label, "rebuild it for this plait, or remove it from the plugin path",
                                     "%s %s", r->path, r->status); /* the status says "refused: ..." */
                continue;
            }
            const plait_plugin_desc *desc = plait_plugin_load(plait_kind_parse(r->kind), r->name);
            plait_clear_error();
            if (!r->available) {
                plait_doctor_line(d, label, "unavailable%s: %s", chosen, r->status);
            } else {
                char description[512];
                plait_printable_copy(description, sizeof description, desc ? desc->description : "");
                plait_doctor_line(d, label, "available%s: %s (%s, ABI %s)", chosen, description, r->version, r->abi);
                if (!strcmp(r->kind, "device") && strcmp(r->name, "cpu") != 0) device_details(d, r->name);
            }
            if (reports && reports[i].started) replay_report(d, label, &reports[i], limit);
            if (!r->available && *chosen)
                plait_doctor_problem(d, label, "choose an available one, or run where it is",
                                     "the configuration selects it, but it cannot run here");
        }
    if (n == 0) plait_doctor_problem(d, "plugins", "build plait (make), or set PLAIT_PLUGIN_PATH to where they are",
                                     "no plugins found");
    for (size_t i = 0; reports && i < n; i++) free(reports[i].out);
    free(reports);
    free(rows);
}
