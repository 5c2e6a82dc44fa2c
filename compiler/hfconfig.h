/*
** hfconfig.h: a target's Hugging Face files, read with jansson.
**
** config.json gives the architecture (Qwen3 and Llama dense families; `rope_theta` or the newer
** `rope_parameters.rope_theta`; `head_dim` absent -> hidden / heads; multimodal configs with a
** `text_config` read from it). tokenizer.json tells whether a token id is an ordinary BPE token.
** Errors name the file (and line/column for malformed JSON) through the diagnostics reporter.
*/
#ifndef DFL_HFCONFIG_H
#define DFL_HFCONFIG_H

#include <stddef.h>
#include "compiler/diag.h"
#include "compiler/file.h"
#include "compiler/spec.h"

/* Read DIR/config.json into *out. `from` is where the spec names DIR (a note on errors). */
int dfl_hfconfig_load(const char *dir, dfl_arch *out, dfl_loc from);
/* Same from memory; name is the file name to show. */
int dfl_hfconfig_parse(const char *name, const char *text, size_t len, dfl_arch *out);

typedef enum {
  DFL_TOKEN_UNKNOWN = 0,  /* no tokenizer.json, or unreadable: nothing to say */
  DFL_TOKEN_SPECIAL,      /* an added/special token */
  DFL_TOKEN_PAST_VOCAB,   /* past the tokenizer's vocabulary (padding rows) */
  DFL_TOKEN_UNUSED,       /* inside the vocabulary range but no token has it */
  DFL_TOKEN_ORDINARY,     /* an ordinary BPE token: suspicious as a mask token */
  DFL_TOKEN_BROKEN        /* tokenizer.json is there but not a regular file or not JSON (why in buf) */
} dfl_token_class;

/* Classify token `id` with DIR/tokenizer.json; for ordinary tokens copies its text to buf. */
dfl_token_class dfl_tokenizer_classify(const char *dir, int id, char *buf, size_t n);

/* Read a whole file (at most max bytes) into a malloc'd NUL-terminated buffer. Returns DFL_OK,
** DFL_EIO (errno set), or DFL_EFORMAT when it is larger than max or a directory. A FIFO blocks it:
** the target's files go through dfl_file_why first (the spec may be a device: it is read). */
int dfl_read_file(const char *path, size_t max, char **text, size_t *len);

#endif
