#include "conformance/kit_report.h"

#include <stdarg.h>
#include <string.h>

#include "runtime/process_state.h"

/* The rules, as plait/comm.h, plait/optim.h and plait/parallel.h state them. */
static const struct {
    const char *rule, *text;
} rules[] = {
    {"setup", "plait/comm.h init/derive: collective over the members; every rank gets a working communicator"},
    {"order", "plait/comm.h [order]: messages of one (sender, receiver, communicator, tag) are matched to "
              "receives in the order both sides posted them"},
    {"delivery", "plait/comm.h [delivery]: every send whose request completed is delivered to a matching "
                 "receive, unchanged; no message is lost, duplicated or altered"},
    {"posting", "plait/comm.h [posting]: sends and receives may be posted in either order, at every size; a "
                "message that arrives first is held, never dropped"},
    {"progress", "plait/comm.h [progress]: without PLAIT_COMM_ASYNC_PROGRESS every test() call must move every "
                 "pending request forward; test() alone completes a request whose peer does its part"},
    {"timeout", "plait/comm.h [timeout]: wait() whose timeout expires returns PLAIT_ERR_TIMEOUT and leaves the "
                "request pending; a later wait completes it"},
    {"loss", "plait/comm.h [loss]: a dead peer fails every pending and later request with it "
             "with PLAIT_ERR_PEER_LOST; abort() fails the communicator's requests at once"},
    {"cleanup", "plait/comm.h [cleanup]: after destroy() of every communicator the plugin holds no file "
                "descriptors or threads it created for them"},
    {"tags", "plait/comm.h [tags]: every uint32_t is a valid tag and distinct tags never match each other"},
    {"zero", "plait/comm.h [zero]: zero-byte messages match and complete receives and keep their place in order"},
    {"truncation", "plait/comm.h irecv: a message longer than the receive buffer fails that request "
                   "with PLAIT_ERR_PROTOCOL, never an overrun, and later messages still arrive"},
    {"collectives", "plait/comm.h: the core builds every collective on isend/irecv; each must give the "
                    "exact result (#wrong 0) for every dtype"},
    {"split", "plait/comm.h derive: a child communicator over a subset, in the order given, keeps its "
              "traffic apart from its parent's"},
    {"optim-math", "plait/optim.h step: the update follows the plugin's declared math (AdamW as "
                   "host->kernels->adamw, SGD with momentum as PyTorch)"},
    {"optim-state", "plait/optim.h export_tensor/materialize: state saved and restored continues bit for bit"},
    {"optim-memory", "plait/optim.h memory: the report counts the bytes the rank holds for parameters, "
                     "gradients and optimizer state"},
    {"process", "plait/plugin.h: no call into a plugin may change the process's working directory, its PLAIT_* "
                "environment variables or the others plait reads (" PLAIT_WATCHED_OTHERS ")"},
    {"plan", "plait/parallel.h plait_plan: every layer of the model is computed by exactly one (stage, chunk), "
             "all ranks agree, and chunks run in model order (chunk c of stage s is virtual stage c*pp+s)"},
    {"plan-shards", "plait/parallel.h plait_plan.shards: over a tensor-parallel group a parameter is whole on "
                    "every rank or cut into parts = tp distinct slices along one dimension"},
    {"plan-batches", "plait/parallel.h plait_plan.micro_batches: the data-parallel replicas compute every "
                     "micro-batch of the step exactly once, and the ranks of one replica the same ones"},
    {"plan-schedule", "plait/parallel.h plait_instr: each (chunk, micro-batch) is computed forward then backward "
                      "exactly once, received before use and sent after it is made; REDUCE_GRADS, OPTIM_STEP end "
                      "the list"},
    {"losses", "plait/parallel.h: a layout trains like one process (deterministic mode: the same losses, bit for "
               "bit; within 1e-5 relative with tensor parallelism)"},
};

const char *kit_rule_text(const char *rule) {
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
        if (strcmp(rules[i].rule, rule) == 0) return rules[i].text;
    return "";
}

static const char *const verdict_names[] = {"pass", "FAIL", "skip"};

/* Live rows cannot know the longest entry to come: columns as wide as the
 * longest check and rule names the kit has. */
enum { LIVE_NAME_W = 16, LIVE_RULE_W = 14 };

static void print_head(const kit_report *r, FILE *out, int wn, int wr) {
    char title[sizeof r->title * 4]; /* the plugin's version in it, printable */
    plait_printable_copy(title, sizeof title, r->title);
    fprintf(out, "%s\n", title);
    fprintf(out, "  %-*s %-*s %-6s %s\n", wn, "check", wr, "rule", "result", "detail");
}

static void print_row(const kit_row *row, FILE *out, int wn, int wr) {
    fprintf(out, "  %-*s %-*s %-6s %s\n", wn, row->name, wr, row->rule, verdict_names[row->verdict], row->why);
}

void kit_report_add(kit_report *r, const char *name, const char *rule, kit_verdict v, const char *fmt, ...) {
    if (r->n >= KIT_MAX_CHECKS) return;
    kit_row *row = &r->rows[r->n++];
    snprintf(row->name, sizeof row->name, "%s", name);
    snprintf(row->rule, sizeof row->rule, "%s", rule);
    row->verdict = v;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(row->why, sizeof row->why, fmt, ap);
    va_end(ap);
    if (!r->live) return;
    if (r->n == 1) print_head(r, r->live, LIVE_NAME_W, LIVE_RULE_W);
    print_row(row, r->live, LIVE_NAME_W, LIVE_RULE_W);
    fflush(r->live);
}

int kit_report_failures(const kit_report *r) {
    int n = 0;
    for (int i = 0; i < r->n; i++) n += r->rows[i].verdict == KIT_FAIL;
    return n;
}

void kit_report_print(const kit_report *r, FILE *out) {
    if (!r->live || r->n == 0) {
        /* columns as wide as their longest entry */
        int wn = 14, wr = 12;
        for (int i = 0; i < r->n; i++) {
            int ln = (int)strlen(r->rows[i].name), lr = (int)strlen(r->rows[i].rule);
            if (ln > wn) wn = ln;
            if (lr > wr) wr = lr;
        }
        print_head(r, out, wn, wr);
        for (int i = 0; i < r->n; i++) print_row(&r->rows[i], out, wn, wr);
    }
    int pass = 0, skip = 0;
    for (int i = 0; i < r->n; i++) {
        pass += r->rows[i].verdict == KIT_PASS;
        skip += r->rows[i].verdict == KIT_SKIP;
    }
    int fail = kit_report_failures(r);
    fprintf(out, "  %d checks: %d passed, %d failed, %d skipped\n", r->n, pass, fail, skip);
    /* each failed rule once, with its statement */
    for (int i = 0; i < r->n; i++) {
        if (r->rows[i].verdict != KIT_FAIL) continue;
        int seen = 0;
        for (int j = 0; j < i; j++)
            seen |= r->rows[j].verdict == KIT_FAIL && strcmp(r->rows[j].rule, r->rows[i].rule) == 0;
        if (!seen) fprintf(out, "  rule [%s] %s\n", r->rows[i].rule, kit_rule_text(r->rows[i].rule));
    }
}
