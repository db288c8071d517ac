/*
 * A whole file mapped read-only (empty files give an empty view), for
 * commands that read large inputs once (tokenizer training, dataset
 * preparation). Only a regular file is mapped: a FIFO, a directory or a
 * device is PLAIT_ERR_INVALID_ARG naming what it is (a FIFO never blocks the
 * open). Other errors: PLAIT_ERR_SYSTEM naming the file and errno text.
 * The caller owns the mapping (plait_mapped_file_close); the bytes may be
 * read from any thread until then.
 */
#ifndef PLAIT_CORE_RUNTIME_MAPPED_FILE_H
#define PLAIT_CORE_RUNTIME_MAPPED_FILE_H

#include <stddef.h>
#include <plait/types.h>

typedef struct plait_mapped_file {
    const unsigned char *data;  /* NULL when len is 0 */
    size_t len;
} plait_mapped_file;

plait_status plait_mapped_file_open(const char *path, plait_mapped_file *out);
void plait_mapped_file_close(plait_mapped_file *m);

#endif
