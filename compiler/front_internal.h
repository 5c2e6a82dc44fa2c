/*
** front_internal.h: what the scanner, the parser and the checker share inside dfl_front.
** Not part of any other stage's contract.
*/
#ifndef DFL_FRONT_INTERNAL_H
#define DFL_FRONT_INTERNAL_H

#include <stddef.h>
#include "compiler/ast.h"

/* Scanner state (flex "extra"): everything a scan needs, so there is no global state. */
typedef struct dfl_lex {
  dfl_ast *ast;
  const char *base;      /* ast->src.text */
  size_t off;            /* bytes consumed */
  size_t tok_off, tok_len;
  int line, col;
  int depth;             /* open { [ ( */
  dfl_loc open[DFL_MAX_NESTING + 1]; /* where each open bracket is, for "never closed" */
  int stop;              /* nesting cap hit: report nothing more, return end of input */
  int oom;
  int errors;            /* errors the scanner/parser reported */
  int syntax_errors;     /* of which the parser's (entries may be missing) */
} dfl_lex;

int dfl_lex_init(dfl_lex *lx, void **scanner);
void *dfl_lex_scan(void *scanner, const char *bytes, size_t len);
void dfl_lex_done(void *scanner, void *buf);

/* Levenshtein distance, capped: returns cap+1 as soon as it must exceed cap. */
int dfl_edit_distance(const char *a, const char *b, int cap);

/* The reference default taps, build_target_layer_ids(Lt, Ld) (dflash-training.md 1.1). */
void dfl_default_taps(int target_layers, int drafter_layers, int *taps, int *n);

/* ---- checker internals (check.c, check_model.c, check_train.c, check_schema.c, check_topology.c) ---- */
#include "compiler/spec.h"

typedef enum { K_INT, K_FLOAT, K_SIZE, K_BOOL, K_STRING, K_ENUM, K_ANY, K_BLOCK } dfl_ktype;

typedef struct dfl_sdef dfl_sdef;
typedef struct dfl_kdef {
  const char *name;
  dfl_ktype type;
  double min, max;          /* K_INT, K_FLOAT, K_SIZE */
  const char *choices;      /* K_ENUM: "a|b|c" */
  const dfl_sdef *sub;      /* K_BLOCK: its schema; NULL: free-form keys (checked by hand) */
  int repeat;               /* K_BLOCK that may appear several times (node): checked by hand */
  const char *doc;          /* what to write, for "missing key" help */
} dfl_kdef;

struct dfl_sdef {
  const char *name;         /* path shown in messages: "train.optimizer" */
  const dfl_kdef *keys;
  const char *label;        /* NULL: no label; "*": any label required; "a|b": one of these */
};

#define DFL_MAX_KEYS 32
typedef struct dfl_sect dfl_sect;
struct dfl_sect {
  const dfl_sdef *def;
  dfl_node *node;               /* the block entry (NULL if the section is absent) */
  dfl_node *val[DFL_MAX_KEYS];  /* value (or block entry) per key; NULL if absent or invalid */
  int invalid[DFL_MAX_KEYS];    /* present but already reported */
  dfl_sect *kid[DFL_MAX_KEYS];  /* K_BLOCK children */
};

typedef struct dfl_check {
  dfl_ast *ast;
  dfl_spec *spec;
  char dir[DFL_PATH_MAX];       /* directory of the spec, for relative paths */
  dfl_sect *target, *drafter, *data, *loss, *train, *topology, *compile;
  int arch_ok;                  /* target architecture known (for cross checks) */
  int quiet_missing;            /* syntax errors dropped entries: do not call keys missing */
  const dfl_sdef *const *sections; /* every section's schema, for "belongs in section" */
  int n_sections;
} dfl_check;

/* check_schema.c: the walker, the typed accessors, and suggestions */
void dfl_check_walk(dfl_check *c, const dfl_sdef *def, dfl_node *block, dfl_sect *out);
int dfl_check_key_index(const dfl_sdef *def, const char *key);   /* -1 if def has no such key */
/* The name in `names` (NULL-terminated), or in `bar` ("a|b|c"), nearest to word; NULL if none is close. */
const char *dfl_check_nearest(const char *word, const char *const *names, const char *bar, char *buf, size_t n);
dfl_node *dfl_check_get(const dfl_sect *s, const char *key);
int dfl_check_has(const dfl_sect *s, const char *key);     /* present, valid or not */
int64_t dfl_check_int(const dfl_sect *s, const char *key, int64_t dflt);
double dfl_check_float(const dfl_sect *s, const char *key, double dflt);
const char *dfl_check_enum(const dfl_sect *s, const char *key, const char *dflt);
dfl_loc dfl_check_where(const dfl_sect *s, const char *key);   /* value, else section, else file */
void dfl_check_topology(dfl_check *c);
extern const dfl_sdef dfl_topology_schema;

#endif
