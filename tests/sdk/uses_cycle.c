/*
 * Two transports that each name the other in `uses` (a cycle), each a
 * pass-through to tcp: plait must refuse the cycle, naming it, where
 * following it for ever crashed the command (tests/sdk/uses_cycle.sh).
 */
#include <plait/plait.h>
static const plait_host *host;
static const char *const uses[] = {OTHER, "tcp", 0};
static const plait_comm_ops *t(void) { return host->plugin_ops(PLAIT_KIND_COMM, "tcp"); }
static plait_status w_init(const plait_comm_init *a, void **out) { return t()->init(a, out); }
static plait_status w_derive(void *p, const plait_comm_derive *a, void **out) { return t()->derive(p, a, out); }
static void w_destroy(void *c) { t()->destroy(c); }
static plait_status w_isend(void *c, const plait_buffer *b, int p, uint32_t tag, void *mr, void **r) { return t()->isend(c, b, p, tag, mr, r); }
static plait_status w_irecv(void *c, const plait_buffer *b, int p, uint32_t tag, void *mr, void **r) { return t()->irecv(c, b, p, tag, mr, r); }
static plait_status w_test(void *c, void *r, int *d, size_t *n) { return t()->test(c, r, d, n); }
static plait_status w_wait(void *c, void *r, double s, size_t *n) { return t()->wait(c, r, s, n); }
static const plait_comm_ops ops = {.struct_size = sizeof(plait_comm_ops), .mem_kinds = PLAIT_MEM_KIND_BIT(PLAIT_MEM_HOST), .init = w_init, .derive = w_derive, .destroy = w_destroy, .isend = w_isend, .irecv = w_irecv, .test = w_test, .wait = w_wait};
static const plait_plugin_desc desc = {.struct_size = sizeof(plait_plugin_desc), .magic = PLAIT_PLUGIN_MAGIC, .abi_major = PLAIT_ABI_MAJOR, .abi_minor = 0, .kind = PLAIT_KIND_COMM, .name = BROKEN_NAME, .version = "1", .description = "cycle", .ops = &ops, .uses = uses};
static const plait_plugin_desc *const list[] = {&desc};
PLAIT_EXPORT plait_status PLAIT_PLUGIN_ENTRY(uint32_t v, const plait_host *h, const plait_plugin_desc *const **d, size_t *n) { (void)v; host = h; *d = list; *n = 1; return PLAIT_OK; }
