#include "plugin/loader.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <plait/comm.h>
#include <plait/optim.h>
#include <plait/parallel.h>

#include "plugin/plugin_check.h"
#include "runtime/bounded_call.h"
#include "runtime/clock.h"
#include "runtime/error.h"
#include "runtime/exit_guard.h"
#include "runtime/fork_call.h"
#include "runtime/log.h"
#include "runtime/regular_file.h"

#ifndef PLAIT_INSTALL_PLUGIN_DIR_ABS
#define PLAIT_INSTALL_PLUGIN_DIR_ABS "/usr/local/lib/plait"
#endif

struct loaded_file {
    char *path;
    void *handle;
    const plait_plugin_desc *const *descs;
    size_t n;
};

static struct {
    pthread_mutex_t lock;
    struct loaded_file *files;
    size_t n_files;
    char **dirs;
    size_t n_dirs;
    int dirs_ready;
} g_loader = {PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP, NULL, 0, NULL, 0, 0};

/* Handed to every plugin's entry, probe and (through plait_plugin_host)
 * init functions; set once at start-up, before any load. */
static const plait_host *g_plugin_host;

void plait_loader_set_host(const plait_host *host) { g_plugin_host = host; }
const plait_host *plait_plugin_host(void) { return g_plugin_host; }

static char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

static void add_dir(const char *dir) {
    if (!dir || !*dir) return;
    char real[PATH_MAX];
    const char *use = realpath(dir, real) ? real : dir;
    for (size_t i = 0; i < g_loader.n_dirs; i++)
        if (strcmp(g_loader.dirs[i], use) == 0) return;
    char **nd = realloc(g_loader.dirs, (g_loader.n_dirs + 1) * sizeof *nd);
    if (!nd) return;
    g_loader.dirs = nd;
    g_loader.dirs[g_loader.n_dirs++] = xstrdup(use);
}

/* A plugin directory or file that every user may write lets any of them
 * put code into every plait run that searches it. A directory's sticky bit
 * (/tmp's) does not help: it stops others from removing or renaming files
 * they do not own, not from creating the plugin file that is not there yet.
 * So either is warned about, once a path, when plugins are looked up there.
 * Called with g_loader.lock held. */
static char **g_warned;
static size_t g_n_warned;

static void warn_world_writable(const char *path, const struct stat *sb) {
    if (!(sb->st_mode & S_IWOTH)) return;
    const char *rank = getenv("PLAIT_RANK"); /* a launched job's ranks: the launcher and rank 0 say it */
    if (rank && *rank && strcmp(rank, "0") != 0) return;
    for (size_t i = 0; i < g_n_warned; i++)
        if (strcmp(g_warned[i], path) == 0) return;
    char **nw = realloc(g_warned, (g_n_warned + 1) * sizeof *nw);
    if (nw) {
        g_warned = nw;
        g_warned[g_n_warned++] = xstrdup(path);
    }
    int dir = S_ISDIR(sb->st_mode);
    PLAIT_WARN("loader",
               "%s%s is writable by every user (mode %04o): %s, and plait runs its code; make it writable by its "
               "owner only (chmod o-w %s)%s",
               dir ? "plugin directory " : "plugin file ", path, (unsigned)(sb->st_mode & 07777),
               dir ? "anyone can put a plugin file there (the sticky bit does not stop a new file)"
                   : "anyone can replace what it does",
               path, dir && getenv("PLAIT_PLUGIN_PATH") ? ", or take it out of PLAIT_PLUGIN_PATH" : "");
}

static void check_dir_writers(const char *dir) {
    struct stat sb;
    if (stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode)) warn_world_writable(dir, &sb);
}

static void setup_dirs(void) {
    if (g_loader.dirs_ready) return;
    g_loader.dirs_ready = 1;
    /* 1. next to libplait (the build tree's lib/plait, or the install prefix's) */
    Dl_info info;
    if (dladdr((void *)&plait_plugin_load, &info) && info.dli_fname) {
        char buf[PATH_MAX];
        snprintf(buf, sizeof buf, "%s", info.dli_fname);
        char *slash = strrchr(buf, '/');
        if (slash) {
            snprintf(slash, sizeof buf - (size_t)(slash - buf), "/plait");
            add_dir(buf);
        }
    }
    /* 2. the configured install prefix */
    add_dir(PLAIT_INSTALL_PLUGIN_DIR_ABS);
    /* 3. PLAIT_PLUGIN_PATH */
    const char *env = getenv("PLAIT_PLUGIN_PATH");
    if (env) {
        char *copy = xstrdup(env), *save = NULL;
        for (char *d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save)) add_dir(d);
        free(copy);
    }
}

size_t plait_plugin_dirs(const char *const **dirs) {
    pthread_mutex_lock(&g_loader.lock);
    setup_dirs();
    pthread_mutex_unlock(&g_loader.lock);
    *dirs = (const char *const *)g_loader.dirs;
    return g_loader.n_dirs;
}

static struct loaded_file *find_file(const char *path) {
    for (size_t i = 0; i < g_loader.n_files; i++)
        if (strcmp(g_loader.files[i].path, path) == 0) return &g_loader.files[i];
    return NULL;
}

static const plait_plugin_desc *find_registered(uint32_t kind, const char *name, const char **path) {
    for (size_t i = 0; i < g_loader.n_files; i++) {
        struct loaded_file *f = &g_loader.files[i];
        for (size_t j = 0; j < f->n; j++)
            if (f->descs[j]->kind == kind && strcmp(f->descs[j]->name, name) == 0) {
                if (path) *path = f->path;
                return f->descs[j];
            }
    }
    return NULL;
}

/* "the comm plugin 'tcp'" into `buf`. */
static const char *plugin_named(uint32_t kind, const void *ops, char *buf, size_t cap) {
    const char *name = plait_plugin_name_of_ops(kind, ops);
    if (name) snprintf(buf, cap, "the %s plugin '%s'", plait_kind_name(kind), name);
    else snprintf(buf, cap, "the %s plugin", plait_kind_name(kind));
    return buf;
}

/* `st`, or PLAIT_ERR_ABI with the error set when the process's working
 * directory or PLAIT_* variables differ from `before` (freed here): what
 * changed, after `subject` ("PATH: loading the plugin file"), and the
 * plugin's own failure, if `st` was one. */
static plait_status refuse_if_changed(plait_process_state *before, plait_status st, const char *subject) {
    char failed[1024] = "";
    if (st != PLAIT_OK) snprintf(failed, sizeof failed, "; it also failed: %s", plait_last_error());
    plait_status refused = plait_process_state_refuse(before, subject, failed);
    plait_process_state_free(before);
    return refused != PLAIT_OK ? refused : st;
}

/* The most plugins one file may declare (plugin.h): a larger count is a
 * plugin's mistake (its array's count), never read. */
#define MAX_DESCRIPTORS 64

/* The thread whose faults while a file loads are named as the file's
 * (0: none); see on_load_crash below. */
static volatile pid_t crash_tid;

/* The entry function, called in a thread of its own (bounded_call.h): one
 * that never returns is named rather than hanging the command. */
typedef struct entry_call {
    plait_plugin_entry_v1_fn entry;
    int claim_crash; /* a crash in it is named as the file's */
    const plait_plugin_desc *const *descs;
    size_t n;
} entry_call;

static plait_status call_entry(void *arg) {
    entry_call *c = arg;
    if (c->claim_crash) crash_tid = (pid_t)syscall(SYS_gettid);
    return c->entry(PLAIT_ABI_VERSION, g_plugin_host, &c->descs, &c->n);
}

static int parse_file_name(const char *file, char *kind, size_t kl, char *name, size_t nl);

/* A file named libplait-<kind>-<name>.so holds a plugin of that kind:
 * checked before the descriptors' function tables, which are read as the
 * kind the descriptor says (a table of another kind would be refused for
 * lacking that kind's functions, naming neither kind). */
static plait_status check_file_kind(const char *path, const plait_plugin_desc *const *descs, size_t n) {
    const char *base = strrchr(path, '/');
    char kind[64], name[128];
    if (parse_file_name(base ? base + 1 : path, kind, sizeof kind, name, sizeof name) != 0) return PLAIT_OK;
    uint32_t k = plait_kind_parse(kind);
    if (!k) return PLAIT_OK; /* check_file_name names the unknown kind */
    for (size_t i = 0; i < n; i++)
        if (descs[i]->kind == k) return PLAIT_OK;
    return plait_set_error(PLAIT_ERR_ABI,
                           "%s: file name says %s/%s but the plugin inside calls itself %s/%s; rename "
                           "the file libplait-%s-%s.so or fix the descriptor's kind",
                           path, kind, name, plait_kind_name(descs[0]->kind), descs[0]->name,
                           plait_kind_name(descs[0]->kind), descs[0]->name);
}

/* Each descriptor a file's entry handed over checked, and its kind and
 * name unique in the file and among the plugins already loaded; the
 * caller closes the file on an error (the message may name strings of the
 * plugin's). */
static plait_status check_descriptors(const char *real, const plait_plugin_desc *const *descs, size_t n) {
    for (size_t i = 0; i < n; i++) {
        plait_status st = plait_check_descriptor_head(real, descs[i]);
        if (st != PLAIT_OK) return st;
    }
    plait_status kst = check_file_kind(real, descs, n);
    if (kst != PLAIT_OK) return kst;
    for (size_t i = 0; i < n; i++) {
        plait_status st = plait_check_descriptor(real, descs[i]);
        if (st != PLAIT_OK) return st;
        for (size_t j = 0; j < i; j++)
            if (descs[j]->kind == descs[i]->kind && strcmp(descs[j]->name, descs[i]->name) == 0)
                return plait_set_error(PLAIT_ERR_ABI, "%s: declares two plugins named %s/%s; names must be unique",
                                       real, plait_kind_name(descs[i]->kind), descs[i]->name);
        const char *other = NULL;
        if (find_registered(descs[i]->kind, descs[i]->name, &other))
            return plait_set_error(PLAIT_ERR_ABI,
                                   "two plugins named %s/%s: %s and %s; remove one of them or fix PLAIT_PLUGIN_PATH",
                                   plait_kind_name(descs[i]->kind), descs[i]->name, other, real);
    }
    return PLAIT_OK;
}

/* Open `path` and run every check; on success register its descriptors. */
static plait_status load_file(const char *path, struct loaded_file **out) {
    char real[PATH_MAX];
    if (!realpath(path, real))
        return plait_set_error(PLAIT_ERR_UNSUPPORTED, "%s: %s", path, strerror(errno));
    struct loaded_file *have = find_file(real);
    if (have) {
        *out = have;
        return PLAIT_OK;
    }
    /* dlopen opens the file with a plain open(): a FIFO in the plugin path
     * would block it for ever (and `plait plugins` would blame a plugin
     * that never returns), and a link to a device is named only by the
     * device. What is not a regular file is refused first, by the name given. */
    int regular_fd;
    uint64_t size;
    plait_status regular = plait_open_regular(path, "plugin file", PLAIT_ERR_UNSUPPORTED, &regular_fd, &size);
    if (regular != PLAIT_OK) return regular;
    struct stat file_sb;
    if (fstat(regular_fd, &file_sb) == 0) warn_world_writable(real, &file_sb);
    close(regular_fd);
    dlerror();
    void *h = dlopen(real, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return plait_set_error(PLAIT_ERR_SYSTEM, "%s: cannot load: %s (check that the libraries it "
                                                 "needs are installed: ldd %s)",
                               real, dlerror(), real);
    plait_plugin_entry_v1_fn entry = (plait_plugin_entry_v1_fn)(uintptr_t)dlsym(h, PLAIT_PLUGIN_ENTRY_NAME);
    if (!entry) {
        for (int major = 0; major < 32; major++) {
            if (major == PLAIT_ABI_MAJOR) continue;
            char sym[32];
            snprintf(sym, sizeof sym, "plait_plugin_v%d", major);
            if (dlsym(h, sym)) {
                dlclose(h);
                return plait_set_error(PLAIT_ERR_ABI,
                                       "%s: built for plait plugin ABI v%d (exports %s), but this plait "
                                       "speaks ABI v%d.%d; rebuild the plugin against this plait's SDK "
                                       "or use a plait that speaks ABI v%d",
                                       real, major, sym, PLAIT_ABI_MAJOR, PLAIT_ABI_MINOR, major);
            }
        }
        dlclose(h);
        return plait_set_error(PLAIT_ERR_ABI,
                               "%s: not a plait plugin: it does not export the entry symbol %s (build "
                               "it with the plait SDK and define PLAIT_PLUGIN_ENTRY with PLAIT_EXPORT)",
                               real, PLAIT_PLUGIN_ENTRY_NAME);
    }
    if (!g_plugin_host) {
        dlclose(h);
        return plait_set_error(PLAIT_ERR_INTERNAL, "%s: no host table was installed before loading plugins "
                                                   "(call plait_host_install() at start-up)", real);
    }
    pid_t loader_tid = crash_tid;
    entry_call ec = {.entry = entry, .claim_crash = loader_tid != 0};
    plait_status st;
    double limit = plait_plugin_scan_seconds();
    int returned = plait_bounded_call(call_entry, &ec, sizeof ec, limit, &st);
    crash_tid = loader_tid;
    if (!returned && st == PLAIT_ERR_TIMEOUT) /* its code still runs: the file stays open, unused */
        return plait_set_error(PLAIT_ERR_TIMEOUT,
                               "%s: the plugin's entry function %s did not return within %g s (it only hands over "
                               "the plugin's descriptors, at once); it was left running and the file is not used: "
                               "fix the plugin or remove it from the plugin path (PLAIT_PLUGIN_SCAN_TIMEOUT sets "
                               "the limit)",
                               real, PLAIT_PLUGIN_ENTRY_NAME, limit);
    if (!returned) {
        dlclose(h);
        return plait_wrap_error(st, "%s: calling its entry function", real);
    }
    const plait_plugin_desc *const *descs = ec.descs;
    size_t n = ec.n;
    if (st != PLAIT_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", plait_last_error());
        dlclose(h);
        return plait_set_error(st == PLAIT_ERR_ABI ? PLAIT_ERR_ABI : PLAIT_ERR_SYSTEM,
                               "%s: the plugin's entry refused to load (%s): %s", real,
                               plait_status_name(st), *msg ? msg : "no message");
    }
    if (!descs || n == 0) {
        dlclose(h);
        return plait_set_error(PLAIT_ERR_ABI, "%s: the entry returned no plugin descriptors", real);
    }
    /* a count past the plugin's own array would be read as descriptors */
    if (n > MAX_DESCRIPTORS) {
        dlclose(h);
        return plait_set_error(PLAIT_ERR_ABI, "%s: the entry returned %zu plugin descriptors (at most %d in one file: "
                                              "the count of its array?)",
                               real, n, MAX_DESCRIPTORS);
    }
    if ((st = check_descriptors(real, descs, n)) != PLAIT_OK) {
        dlclose(h); /* only after the message: it may point into the plugin */
        return st;
    }
    struct loaded_file *nf = realloc(g_loader.files, (g_loader.n_files + 1) * sizeof *nf);
    if (!nf) {
        dlclose(h);
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    }
    g_loader.files = nf;
    struct loaded_file *f = &g_loader.files[g_loader.n_files++];
    f->path = xstrdup(real);
    f->handle = h;
    f->descs = descs;
    f->n = n;
    PLAIT_DEBUG("loader", "loaded %s (%zu plugin%s)", real, n, n == 1 ? "" : "s");
    *out = f;
    return PLAIT_OK;
}

/* load_file, refusing a file whose constructors or entry changed the
 * process's working directory or PLAIT_* variables. */
static plait_status open_file_unguarded(const char *path, struct loaded_file **out) {
    size_t had = g_loader.n_files;
    plait_process_state before;
    plait_process_state_take(&before);
    plait_status loaded = load_file(path, out);
    char subject[PATH_MAX + 64];
    snprintf(subject, sizeof subject, "%s: loading the plugin file", path);
    plait_status st = refuse_if_changed(&before, loaded, subject);
    if (st != PLAIT_OK && loaded == PLAIT_OK && g_loader.n_files > had) { /* registered just now: taken back */
        struct loaded_file *f = &g_loader.files[--g_loader.n_files];
        dlclose(f->handle);
        free(f->path);
    }
    if (st != PLAIT_OK) *out = NULL;
    return st;
}

/* ---- a file that crashes while it is loaded: the process cannot go on
 * (the crash may have damaged anything), but its last words name the file,
 * so that `plait train` with a broken plugin does not die of SIGSEGV in
 * silence. Only the loading thread's own faults are claimed. */

static const int crash_signals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
#define N_CRASH (sizeof crash_signals / sizeof crash_signals[0])
static struct sigaction crash_previous[N_CRASH];
static char crash_path[PATH_MAX];

static void on_load_crash(int sig) {
    size_t i = 0;
    while (i < N_CRASH && crash_signals[i] != sig) i++;
    if ((pid_t)syscall(SYS_gettid) == crash_tid) {
        static const char a[] = "plait: the plugin file ", b[] = " crashed while it was loaded (signal ";
        static const char c[] = "); rebuild it, or remove it from the plugin path ('plait plugins' lists the others)\n";
        char num[4] = {(char)('0' + sig / 10 % 10), (char)('0' + sig % 10), 0, 0};
        ssize_t w = write(STDERR_FILENO, a, sizeof a - 1);
        w = write(STDERR_FILENO, crash_path, strlen(crash_path));
        w = write(STDERR_FILENO, b, sizeof b - 1);
        w = write(STDERR_FILENO, sig >= 10 ? num : num + 1, sig >= 10 ? 2 : 1);
        w = write(STDERR_FILENO, c, sizeof c - 1);
        (void)w;
    }
    /* the handler before, for this signal raised again: it is delivered
     * when this handler returns (a fault, by re-running the instruction) */
    if (i < N_CRASH) sigaction(sig, &crash_previous[i], NULL);
    raise(sig);
}

static plait_status open_file(const char *path, struct loaded_file **out) {
    if (find_file(path)) return open_file_unguarded(path, out);
    snprintf(crash_path, sizeof crash_path, "%s", path);
    crash_tid = (pid_t)syscall(SYS_gettid);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_load_crash;
    for (size_t i = 0; i < N_CRASH; i++) sigaction(crash_signals[i], &sa, &crash_previous[i]);
    /* its constructors and entry may exit the process too */
    plait_exit_guard_enter("while loading the plugin file %s", path);
    plait_status st = open_file_unguarded(path, out);
    plait_exit_guard_leave();
    for (size_t i = 0; i < N_CRASH; i++) sigaction(crash_signals[i], &crash_previous[i], NULL);
    crash_tid = 0;
    return st;
}

uint32_t plait_kind_parse(const char *name) {
    for (uint32_t k = PLAIT_KIND_COMM; k <= PLAIT_KIND_DEVICE; k++)
        if (strcmp(plait_kind_name(k), name) == 0) return k;
    return 0;
}

/* libplait-<kind>-<name>.so -> name must match one descriptor of that kind. */
static plait_status check_file_name(const struct loaded_file *f, const char *kind_text, const char *name) {
    uint32_t kind = plait_kind_parse(kind_text);
    const plait_plugin_desc *inside = f->descs[0];
    if (!kind)
        return plait_set_error(PLAIT_ERR_ABI,
                               "%s: the file name says kind '%s', which this plait does not know (comm, "
                               "parallel, optim, device); rename the file libplait-%s-%s.so after the plugin inside",
                               f->path, kind_text, plait_kind_name(inside->kind), inside->name);
    for (size_t j = 0; j < f->n; j++)
        if (f->descs[j]->kind == kind && strcmp(f->descs[j]->name, name) == 0) return PLAIT_OK;
    return plait_set_error(PLAIT_ERR_ABI,
                           "%s: file name says %s/%s but the plugin inside calls itself %s/%s; rename "
                           "the file libplait-%s-%s.so or fix the descriptor's name",
                           f->path, kind_text, name, plait_kind_name(inside->kind), inside->name,
                           plait_kind_name(inside->kind), inside->name);
}

const plait_plugin_desc *plait_plugin_load(uint32_t kind, const char *name) {
    if (kind < PLAIT_KIND_COMM || kind > PLAIT_KIND_DEVICE) {
        plait_set_error(PLAIT_ERR_INVALID_ARG, "plugin '%s': unknown plugin kind %u (this plait knows comm=%d, "
                                               "parallel=%d, optim=%d, device=%d)",
                        name, kind, PLAIT_KIND_COMM, PLAIT_KIND_PARALLEL, PLAIT_KIND_OPTIM, PLAIT_KIND_DEVICE);
        return NULL;
    }
    pthread_mutex_lock(&g_loader.lock);
    setup_dirs();
    const plait_plugin_desc *result = NULL;
    struct loaded_file *f = NULL;
    if (strchr(name, '/')) {
        if (open_file(name, &f) == PLAIT_OK) {
            for (size_t j = 0; j < f->n && !result; j++)
                if (f->descs[j]->kind == kind) result = f->descs[j];
            const char *holds = plait_kind_name(f->descs[0]->kind), *want = plait_kind_name(kind);
            if (!result)
                plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                "%s: holds no %s plugin (it holds %s/%s): it can serve as [%s] plugin; for [%s] "
                                "plugin give a %s plugin ('plait plugins' lists them)",
                                f->path, want, holds, f->descs[0]->name, holds, want, want);
        }
        pthread_mutex_unlock(&g_loader.lock);
        return result;
    }
    /* The name's own file is looked for even when another file already
     * registered the name, so a conflicting pair is reported, not hidden. */
    char file[512];
    snprintf(file, sizeof file, "libplait-%s-%s.so", plait_kind_name(kind), name);
    for (size_t i = 0; i < g_loader.n_dirs; i++) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", g_loader.dirs[i], file);
        check_dir_writers(g_loader.dirs[i]);
        if (access(path, F_OK) != 0) continue;
        if (open_file(path, &f) == PLAIT_OK && check_file_name(f, plait_kind_name(kind), name) == PLAIT_OK)
            result = find_registered(kind, name, NULL);
        pthread_mutex_unlock(&g_loader.lock);
        return result;
    }
    result = find_registered(kind, name, NULL); /* from a file holding several plugins */
    if (result) {
        pthread_mutex_unlock(&g_loader.lock);
        return result;
    }
    char searched[4096];
    size_t w = 0;
    searched[0] = '\0';
    for (size_t i = 0; i < g_loader.n_dirs && w < sizeof searched; i++)
        w += (size_t)snprintf(searched + w, sizeof searched - w, "%s%s", i ? ", " : "", g_loader.dirs[i]);
    plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                    "%s plugin '%s' not found: no %s in %s%s; run 'plait plugins' to list what is "
                    "installed, or add its directory to PLAIT_PLUGIN_PATH",
                    plait_kind_name(kind), name, file, searched,
                    getenv("PLAIT_PLUGIN_PATH") ? "" : " (PLAIT_PLUGIN_PATH is not set)");
    pthread_mutex_unlock(&g_loader.lock);
    return NULL;
}

const char *plait_plugin_path(const plait_plugin_desc *desc) {
    const char *path = NULL;
    pthread_mutex_lock(&g_loader.lock);
    for (size_t i = 0; i < g_loader.n_files && !path; i++)
        for (size_t j = 0; j < g_loader.files[i].n; j++)
            if (g_loader.files[i].descs[j] == desc) path = g_loader.files[i].path;
    pthread_mutex_unlock(&g_loader.lock);
    return path;
}

const char *plait_plugin_name_of_ops(uint32_t kind, const void *ops) {
    const char *name = NULL;
    if (!ops || pthread_mutex_trylock(&g_loader.lock) != 0) return NULL;
    for (size_t i = 0; i < g_loader.n_files && !name; i++)
        for (size_t j = 0; j < g_loader.files[i].n && !name; j++) {
            const plait_plugin_desc *d = g_loader.files[i].descs[j];
            if (d && d->kind == kind && d->ops == ops) name = d->name;
        }
    pthread_mutex_unlock(&g_loader.lock);
    return name;
}

void plait_plugin_call_enter(plait_plugin_call *call, uint32_t kind, const void *ops, const char *fn) {
    char who[128];
    plugin_named(kind, ops, who, sizeof who);
    plait_exit_guard_enter("inside %s's %s()", who, fn);
    *call = (plait_plugin_call){.kind = kind, .ops = ops, .fn = fn};
    plait_process_state_take(&call->before);
    call->sets = plait_error_sets();
}

plait_status plait_plugin_said(uint32_t kind, const void *ops, const char *fn, uint64_t sets, plait_status st) {
    if (st == PLAIT_OK || plait_error_sets() != sets) return st;
    char who[128];
    return plait_set_error(st,
                           "%s's %s() returned '%s' without a message (plait/types.h: a failing function calls "
                           "host->set_error first)",
                           plugin_named(kind, ops, who, sizeof who), fn, plait_status_name(st));
}

plait_status plait_plugin_call_leave(plait_plugin_call *call, plait_status st) {
    plait_exit_guard_leave();
    st = plait_plugin_said(call->kind, call->ops, call->fn, call->sets, st);
    char who[128], subject[192];
    snprintf(subject, sizeof subject, "%s's %s()", plugin_named(call->kind, call->ops, who, sizeof who), call->fn);
    return refuse_if_changed(&call->before, st, subject);
}

static int parse_file_name(const char *file, char *kind, size_t kl, char *name, size_t nl) {
    const char *pre = "libplait-";
    size_t len = strlen(file);
    if (strncmp(file, pre, strlen(pre)) != 0 || len < 4 || strcmp(file + len - 3, ".so") != 0) return -1;
    const char *k = file + strlen(pre);
    const char *dash = strchr(k, '-');
    if (!dash) return -1;
    snprintf(kind, kl, "%.*s", (int)(dash - k), k);
    snprintf(name, nl, "%.*s", (int)(file + len - 3 - dash - 1), dash + 1);
    return 0;
}

static plait_plugin_row *push_row(plait_plugin_row **rows, size_t *n, size_t *cap) {
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 16;
        plait_plugin_row *nr = realloc(*rows, *cap * sizeof *nr);
        if (!nr) return NULL;
        *rows = nr;
    }
    plait_plugin_row *r = &(*rows)[(*n)++];
    memset(r, 0, sizeof *r);
    return r;
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Load and probe one file, filling its rows (one per plugin, or one saying
 * why the file was refused): in a child process (scan_file), or here when
 * no child can be started. */
static void scan_one(const char *path, const char *kind, const char *name, plait_plugin_row **rows,
                     size_t *n, size_t *cap, int in_child) {
    plait_plugin_row *row = push_row(rows, n, cap);
    if (!row) return;
    snprintf(row->kind, sizeof row->kind, "%s", kind);
    snprintf(row->name, sizeof row->name, "%s", name);
    snprintf(row->path, sizeof row->path, "%s", path);
    struct loaded_file *f = NULL;
    /* in a child, a crash is the parent's to report: no last words here */
    plait_status st = in_child ? open_file_unguarded(path, &f) : open_file(path, &f);
    if (st == PLAIT_OK) st = check_file_name(f, kind, name);
    if (st != PLAIT_OK) {
        snprintf(row->status, sizeof row->status, "refused: %s", plait_last_error());
        return;
    }
    for (size_t j = 0; j < f->n; j++) {
        const plait_plugin_desc *desc = f->descs[j];
        if (j > 0 && !(row = push_row(rows, n, cap))) break;
        snprintf(row->kind, sizeof row->kind, "%s", plait_kind_name(desc->kind));
        snprintf(row->name, sizeof row->name, "%s", desc->name);
        plait_printable_copy(row->version, sizeof row->version, desc->version ? desc->version : "?");
        snprintf(row->abi, sizeof row->abi, "%u.%u", desc->abi_major, desc->abi_minor);
        snprintf(row->path, sizeof row->path, "%s", f->path);
        row->loaded = 1;
        row->available = 1;
        if (desc->probe) {
            plait_clear_error();
            if (desc->probe(g_plugin_host) != PLAIT_OK) {
                row->available = 0;
                snprintf(row->status, sizeof row->status, "%s", plait_last_error());
            }
        }
    }
}

typedef struct probe_call {
    const plait_plugin_desc *desc;
} probe_call;

static plait_status call_probe(void *arg) {
    const probe_call *c = arg;
    return c->desc->probe(g_plugin_host);
}

plait_status plait_plugin_probe(const plait_plugin_desc *desc) {
    if (!desc->probe) return PLAIT_OK;
    probe_call c = {desc};
    plait_status st;
    double limit = plait_plugin_scan_seconds();
    if (plait_bounded_call(call_probe, &c, sizeof c, limit, &st)) return st;
    if (st != PLAIT_ERR_TIMEOUT) return st;
    const char *path = plait_plugin_path(desc);
    return plait_set_error(PLAIT_ERR_TIMEOUT,
                           "%s/%s (%s): its probe did not return within %g s (it only says whether the plugin can "
                           "run here, at once); it was left running and the plugin is not used: fix the plugin or "
                           "remove it from the plugin path (PLAIT_PLUGIN_SCAN_TIMEOUT sets the limit)",
                           plait_kind_name(desc->kind), desc->name, path ? path : "?", limit);
}

const plait_plugin_desc *plait_plugin_load_usable(uint32_t kind, const char *name) {
    const plait_plugin_desc *d = plait_plugin_load(kind, name);
    if (!d) return NULL;
    plait_status st = plait_plugin_probe(d);
    if (st == PLAIT_OK) return d;
    if (st != PLAIT_ERR_TIMEOUT)
        plait_wrap_error(PLAIT_ERR_UNSUPPORTED, "the %s plugin %s cannot run here", plait_kind_name(kind), d->name);
    return NULL;
}

double plait_plugin_scan_seconds(void) {
    const char *v = getenv("PLAIT_PLUGIN_SCAN_TIMEOUT");
    char *end = NULL;
    double s = v && *v ? strtod(v, &end) : 0;
    return end && !*end && s > 0 && s <= 86400 ? s : 30;
}

struct scan_arg {
    const char *path, *kind, *name;
};

/* In the child: load and probe, write the row count and the rows. */
static int scan_child(int fd, void *arg) {
    const struct scan_arg *a = arg;
    plait_plugin_row *mine = NULL;
    size_t m = 0, mcap = 0;
    scan_one(a->path, a->kind, a->name, &mine, &m, &mcap, 1);
    uint64_t count = m;
    return plait_write_all(fd, &count, sizeof count) == 0 && plait_write_all(fd, mine, m * sizeof *mine) == 0 ? 0 : 1;
}

/* One file's rows, loaded and probed in a child process (runtime/fork_call.h):
 * a file that crashes while loading (a constructor or probe dereferencing
 * NULL, an abort, an exit) or hangs takes down only the child, and its row
 * names what happened; the other files are still listed. The parent loads
 * nothing. */
static void scan_file(const char *path, const char *kind, const char *name, plait_plugin_row **rows, size_t *n,
                      size_t *cap) {
    struct scan_arg sa = {path, kind, name};
    plait_fork_result fr;
    double limit = plait_plugin_scan_seconds();
    plait_fork_call(scan_child, &sa, limit, &fr);
    if (!fr.started) { /* no child: load here, as before */
        scan_one(path, kind, name, rows, n, cap, 0);
        return;
    }
    const char *buf = fr.out;
    size_t got = fr.len;
    int hung = fr.hung, status = fr.status;
    uint64_t count = 0;
    if (got >= sizeof count) memcpy(&count, buf, sizeof count);
    int whole = plait_fork_ok(&fr) && got >= sizeof count &&
                count <= (got - sizeof count) / sizeof(plait_plugin_row) &&
                got == sizeof count + count * sizeof(plait_plugin_row);
    for (uint64_t i = 0; whole && i < count; i++) {
        plait_plugin_row *row = push_row(rows, n, cap);
        if (!row) break;
        memcpy(row, buf + sizeof count + i * sizeof *row, sizeof *row);
    }
    free(fr.out);
    if (whole) return;
    plait_plugin_row *row = push_row(rows, n, cap);
    if (!row) return;
    snprintf(row->kind, sizeof row->kind, "%s", kind);
    snprintf(row->name, sizeof row->name, "%s", name);
    snprintf(row->path, sizeof row->path, "%s", path);
    if (hung)
        snprintf(row->status, sizeof row->status,
                 "refused: loading or probing it did not finish within %g s (a constructor or probe that never "
                 "returns; PLAIT_PLUGIN_SCAN_TIMEOUT sets the limit); it was stopped",
                 limit);
    else if (WIFSIGNALED(status))
        snprintf(row->status, sizeof row->status,
                 "refused: it crashed while loading or probing (%s, signal %d), in its constructor, its entry or "
                 "its probe; no plait command can use it: rebuild it, or remove it from the plugin path",
                 strsignal(WTERMSIG(status)), WTERMSIG(status));
    else
        snprintf(row->status, sizeof row->status,
                 "refused: it ended the process while loading or probing (exit status %d), in its constructor, "
                 "its entry or its probe; rebuild it, or remove it from the plugin path",
                 WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

/* Rows [first, n) are one file's: a plugin already listed from another
 * file under the same kind and name is refused, as loading both would be
 * (each file was loaded alone, in its own child). */
static void refuse_duplicates(plait_plugin_row *rows, size_t first, size_t n) {
    for (size_t i = first; i < n; i++)
        for (size_t r = 0; r < first && rows[i].loaded; r++)
            if (rows[r].loaded && !strcmp(rows[r].kind, rows[i].kind) && !strcmp(rows[r].name, rows[i].name)) {
                char other[sizeof rows[r].path];
                snprintf(other, sizeof other, "%s", rows[r].path);
                snprintf(rows[i].status, sizeof rows[i].status,
                         "refused: two plugins named %s/%s: %s and %s; remove one of them or fix PLAIT_PLUGIN_PATH",
                         rows[i].kind, rows[i].name, other, rows[i].path);
                rows[i].loaded = 0;
                rows[i].available = 0;
            }
}

size_t plait_plugin_scan_file(const char *path, plait_plugin_row **rows_out) {
    plait_plugin_row *rows = NULL;
    size_t n = 0, cap = 0;
    const char *base = strrchr(path, '/');
    char kind[64], name[256];
    if (parse_file_name(base ? base + 1 : path, kind, sizeof kind, name, sizeof name) != 0) {
        *rows_out = NULL;
        return 0;
    }
    pthread_mutex_lock(&g_loader.lock);
    scan_file(path, kind, name, &rows, &n, &cap);
    pthread_mutex_unlock(&g_loader.lock);
    *rows_out = rows;
    return n;
}

size_t plait_plugins_scan(plait_plugin_row **rows_out) {
    plait_plugin_row *rows = NULL;
    size_t n = 0, cap = 0;
    pthread_mutex_lock(&g_loader.lock);
    setup_dirs();
    for (size_t d = 0; d < g_loader.n_dirs; d++) {
        DIR *dir = opendir(g_loader.dirs[d]);
        if (!dir) continue;
        check_dir_writers(g_loader.dirs[d]);
        char **names = NULL;
        size_t nn = 0;
        struct dirent *e;
        while ((e = readdir(dir))) {
            char kind[64], name[256];
            if (parse_file_name(e->d_name, kind, sizeof kind, name, sizeof name) != 0) continue;
            char **nb = realloc(names, (nn + 1) * sizeof *nb);
            if (!nb) break;
            names = nb;
            names[nn++] = xstrdup(e->d_name);
        }
        closedir(dir);
        qsort(names, nn, sizeof *names, cmp_names);
        for (size_t i = 0; i < nn; i++) {
            char path[PATH_MAX], kind[64], name[256];
            snprintf(path, sizeof path, "%s/%s", g_loader.dirs[d], names[i]);
            parse_file_name(names[i], kind, sizeof kind, name, sizeof name);
            free(names[i]);
            /* shadowed by an earlier directory? */
            int shadowed = 0;
            for (size_t r = 0; r < n; r++)
                if (strcmp(rows[r].kind, kind) == 0 && strcmp(rows[r].name, name) == 0 &&
                    strcmp(rows[r].path, path) != 0)
                    shadowed = 1;
            if (!shadowed) {
                size_t first = n;
                scan_file(path, kind, name, &rows, &n, &cap);
                refuse_duplicates(rows, first, n);
                continue;
            }
            plait_plugin_row *row = push_row(&rows, &n, &cap);
            if (!row) break;
            snprintf(row->kind, sizeof row->kind, "%s", kind);
            snprintf(row->name, sizeof row->name, "%s", name);
            snprintf(row->path, sizeof row->path, "%s", path);
            snprintf(row->status, sizeof row->status, "shadowed by an earlier directory");
        }
        free(names);
    }
    pthread_mutex_unlock(&g_loader.lock);
    *rows_out = rows;
    return n;
}

void plait_plugins_unload_all(void) {
    pthread_mutex_lock(&g_loader.lock);
    for (size_t i = 0; i < g_loader.n_files; i++) {
        dlclose(g_loader.files[i].handle);
        free(g_loader.files[i].path);
    }
    free(g_loader.files);
    g_loader.files = NULL;
    g_loader.n_files = 0;
    for (size_t i = 0; i < g_n_warned; i++) free(g_warned[i]);
    free(g_warned);
    g_warned = NULL;
    g_n_warned = 0;
    pthread_mutex_unlock(&g_loader.lock);
}
