/* The command table. Each command lives in its own cmd_<name>.c. */
#include "cli/cli.h"

extern const plait_command plait_cmd_help;
extern const plait_command plait_cmd_plugins;
extern const plait_command plait_cmd_plugin;
extern const plait_command plait_cmd_config;
extern const plait_command plait_cmd_bench;
extern const plait_command plait_cmd_train;
extern const plait_command plait_cmd_sample;
extern const plait_command plait_cmd_plan;
extern const plait_command plait_cmd_export;
extern const plait_command plait_cmd_tokenizer;
extern const plait_command plait_cmd_data;
extern const plait_command plait_cmd_doctor;
extern const plait_command plait_cmd_trace;
extern const plait_command plait_cmd_rewind;

const plait_command *const plait_commands[] = {
    &plait_cmd_train, &plait_cmd_sample, &plait_cmd_export,  &plait_cmd_rewind, &plait_cmd_tokenizer,
    &plait_cmd_data,  &plait_cmd_config, &plait_cmd_plugins, &plait_cmd_plugin, &plait_cmd_bench,
    &plait_cmd_plan,  &plait_cmd_trace,  &plait_cmd_doctor,  &plait_cmd_help,   NULL,
};
