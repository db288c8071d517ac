/*
 * plait SDK — configuration schema.
 *
 * Every key plait accepts is declared once, with a type, default, allowed range
 * or values and a one-line doc, either by the core (sections [run] [model]
 * [data] [comm] [parallel] [optim]) or by the plugin that owns it (section
 * "<kind>.<name>", e.g. [comm.tcp]). The core parses INI files with inih,
 * applies PLAIT_<SECTION>_<KEY> environment variables and `section.key=value`
 * command-line overrides, checks every value against its declaration and
 * remembers where it came from. Plugins never parse text themselves: they read
 * typed, already-validated values through the host API (host.h).
 */
#ifndef PLAIT_CONFIG_H
#define PLAIT_CONFIG_H

#include <plait/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum plait_key_type {
    PLAIT_KEY_INT = 0,    /* 64-bit signed integer; range [min, max] */
    PLAIT_KEY_FLOAT = 1,  /* double; range [min, max] */
    PLAIT_KEY_BOOL = 2,   /* true/false, yes/no, on/off, 1/0 */
    PLAIT_KEY_STRING = 3, /* any text; empty allowed unless REQUIRED */
    PLAIT_KEY_ENUM = 4,   /* one of `choices` */
    PLAIT_KEY_LIST = 5,   /* comma-separated strings; each checked against `choices` when given */
    PLAIT_KEY_BYTES = 6   /* byte size: 4096, 64K, 25M, 1G (binary multiples); range [min, max] */
} plait_key_type;

/* Flags of a declared key (plait_key_decl.flags). Not to be confused with a
 * model parameter's flags (plait_param_flag, model.h): "key" is a
 * configuration entry, "param" a model tensor. */
typedef enum plait_key_flag {
    PLAIT_KEY_REQUIRED = 1u << 0,    /* no default: must be given */
    PLAIT_KEY_SAME_ON_ALL = 1u << 1, /* must be equal on every rank; verified at startup */
    PLAIT_KEY_HIDDEN = 1u << 2       /* debug/testing key: not shown by `plait config show` unless set */
} plait_key_flag;

/* One declared key. Plugins keep a static array of these; the core copies
 * what it needs at load time, so the array only has to live as long as the
 * plugin stays loaded. Later ABI minors may append fields; the core reads at
 * most `struct_size` bytes of each element and steps through the array by
 * the descriptor's `key_size`. */
typedef struct plait_key_decl {
    uint32_t struct_size;      /* sizeof(plait_key_decl) as compiled by the declarer */
    uint32_t flags;            /* PLAIT_KEY_* (plait_key_flag) */
    const char *key;           /* [a-z][a-z0-9_]*, unique in its section */
    plait_key_type type;
    const char *default_value; /* text form, parsed like a file value; NULL only with REQUIRED */
    double min, max;           /* INT, FLOAT, BYTES: inclusive range; ignored when min > max */
    const char *const *choices;/* ENUM/LIST: NULL-terminated allowed values */
    const char *doc;           /* one line shown by `plait config show` and in errors */
} plait_key_decl;

/* A typed value as returned by host->config_get(). Strings and lists point
 * into the core's configuration and stay valid until the run ends. */
typedef struct plait_value {
    plait_key_type type;
    int64_t i;          /* INT, BOOL (0/1), BYTES, ENUM (index into choices) */
    double f;           /* FLOAT (also set for INT and BYTES) */
    const char *s;      /* STRING, ENUM (the chosen text), LIST (the raw text) */
    const char *const *list; /* LIST: NULL-terminated items */
    size_t list_len;
} plait_value;

/* Where an effective value came from (shown by `plait config show`). */
typedef enum plait_value_origin {
    PLAIT_ORIGIN_DEFAULT = 0,
    PLAIT_ORIGIN_FILE = 1,
    PLAIT_ORIGIN_ENV = 2,
    PLAIT_ORIGIN_CLI = 3,
    PLAIT_ORIGIN_DERIVED = 4 /* computed by the core from other keys (e.g. accumulation_steps) */
} plait_value_origin;

/* The SDK 1.0 names of the declarations above ("param" used to name both a
 * configuration key and a model tensor). Source written against SDK 1.0
 * keeps compiling; the binary layout is the same. Define
 * PLAIT_NO_SDK_1_0_NAMES to hide them (plait's own code does). */
#ifndef PLAIT_NO_SDK_1_0_NAMES
typedef plait_key_type plait_param_type;
typedef plait_key_decl plait_param_decl;
#define PLAIT_PARAM_INT PLAIT_KEY_INT
#define PLAIT_PARAM_FLOAT PLAIT_KEY_FLOAT
#define PLAIT_PARAM_BOOL PLAIT_KEY_BOOL
#define PLAIT_PARAM_STRING PLAIT_KEY_STRING
#define PLAIT_PARAM_ENUM PLAIT_KEY_ENUM
#define PLAIT_PARAM_LIST PLAIT_KEY_LIST
#define PLAIT_PARAM_BYTES PLAIT_KEY_BYTES
#define PLAIT_PARAM_REQUIRED PLAIT_KEY_REQUIRED
#define PLAIT_PARAM_SAME_ON_ALL PLAIT_KEY_SAME_ON_ALL
#define PLAIT_PARAM_HIDDEN PLAIT_KEY_HIDDEN
#endif

#ifdef __cplusplus
}
#endif
#endif /* PLAIT_CONFIG_H */
