/*
** ast.h: the generic syntax tree of a .dfl file.
**
** The grammar knows only sections, keys and values; what they mean is the checker's business
** (schema-driven, compiler/check*.c). Every node carries its source span. All nodes and strings
** live in one arena that dfl_ast_free releases at once, so error recovery never leaks.
*/
#ifndef DFL_AST_H
#define DFL_AST_H

#include <stdint.h>
#include "compiler/diag.h"

typedef enum {
  DFL_V_INT,      /* 42, -1, 49_152 */
  DFL_V_FLOAT,    /* 6e-4, 0.9 */
  DFL_V_SIZE,     /* 40GiB, 80GB: i = bytes */
  DFL_V_BOOL,     /* true / false */
  DFL_V_STRING,   /* "path" */
  DFL_V_IDENT,    /* bf16, gpu0, n0.gpu5 */
  DFL_V_LIST,     /* [a, b, c]: kids */
  DFL_V_CALL,     /* sliding(2048): s = name, kids = arguments */
  DFL_V_BLOCK     /* key [label] { entries }: kids = entries */
} dfl_vkind;

typedef struct dfl_node dfl_node;
struct dfl_node {
  dfl_vkind kind;
  dfl_loc loc;          /* the value's span (a block: its key) */
  int64_t i;
  double f;
  char *s;              /* string contents, identifier, call name */
  dfl_node *kids;       /* list elements, call args, block entries */
  int nkids;
  dfl_node *next;       /* sibling */
  dfl_node *last;       /* last kid, so appending is O(1) while parsing */
  int bad;              /* a value the lexer already reported (overflow...): skip silently */
  /* entries (children of a block or of the file) */
  char *key;
  dfl_loc key_loc;
  char *label;          /* `node n0 { }`: "n0"; NULL if none */
  dfl_loc label_loc;
  dfl_node *value;      /* `key = value`; NULL for a block entry (then kind == DFL_V_BLOCK) */
};

typedef struct dfl_arena dfl_arena;

typedef struct dfl_ast {
  dfl_source src;
  dfl_node *entries;    /* top-level entries, in source order */
  dfl_arena *arena;
  int syntax_errors;    /* entries may have been dropped by error recovery */
  int partial;          /* parsing stopped early: the tree is incomplete, do not check it */
} dfl_ast;

/* Nesting of blocks, lists and calls deeper than this is refused (documented limit). */
#define DFL_MAX_NESTING 32
/* Spec files larger than this are refused before reading (documented limit). */
#define DFL_MAX_SPEC_BYTES (1 << 20)

/* Parse len bytes named name (the bytes are copied). Syntax errors are reported through the
** reporter; the tree holds everything that parsed. Returns DFL_OK or DFL_ERR (errors reported)
** or DFL_ENOMEM. *ast must be released with dfl_ast_free in every case. */
int dfl_parse_buffer(const char *name, const char *bytes, size_t len, dfl_ast *ast);
void dfl_ast_free(dfl_ast *ast);

/* Arena allocation (zeroed); strings copied into the arena. NULL on exhaustion. */
void *dfl_arena_alloc(dfl_arena *a, size_t n);
char *dfl_arena_strndup(dfl_arena *a, const char *s, size_t n);

/* Human name of a value kind, for messages: "an integer", "a list". */
const char *dfl_vkind_name(dfl_vkind k);

#endif
