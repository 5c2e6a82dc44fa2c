/*
** ast.c: the arena behind the syntax tree, and dfl_parse_buffer (scanner + parser driver).
*/
#include "compiler/ast.h"

#include <stdlib.h>
#include <string.h>
#include "compiler/front_internal.h"
#include "compiler/status.h"
#include "dfl.tab.h"

typedef struct chunk { struct chunk *prev; size_t used, cap; } chunk;
struct dfl_arena { chunk *top; };

void *dfl_arena_alloc(dfl_arena *a, size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (!a->top || a->top->cap - a->top->used < n) {
    size_t cap = n > 65536 ? n : 65536;
    chunk *c = malloc(sizeof(chunk) + 16 + cap);
    if (!c) return NULL;
    c->prev = a->top;
    c->used = 0;
    c->cap = cap;
    a->top = c;
  }
  /* Data starts 16-aligned after the header (header is padded up to 16 bytes). */
  char *base = (char *)a->top + ((sizeof(chunk) + 15) & ~(size_t)15);
  void *p = base + a->top->used;
  a->top->used += n;
  memset(p, 0, n);
  return p;
}

char *dfl_arena_strndup(dfl_arena *a, const char *s, size_t n) {
  char *d = dfl_arena_alloc(a, n + 1);
  if (!d) return NULL;
  memcpy(d, s, n);
  d[n] = 0;
  return d;
}

const char *dfl_vkind_name(dfl_vkind k) {
  switch (k) {
    case DFL_V_INT: return "an integer";
    case DFL_V_FLOAT: return "a number";
    case DFL_V_SIZE: return "a size";
    case DFL_V_BOOL: return "a boolean";
    case DFL_V_STRING: return "a string";
    case DFL_V_IDENT: return "a name";
    case DFL_V_LIST: return "a list";
    case DFL_V_CALL: return "a call";
    case DFL_V_BLOCK: return "a block";
  }
  return "a value";
}

int dfl_parse_buffer(const char *name, const char *bytes, size_t len, dfl_ast *ast) {
  memset(ast, 0, sizeof *ast);
  ast->arena = calloc(1, sizeof *ast->arena);
  if (!ast->arena) return DFL_ENOMEM;
  char *text = dfl_arena_alloc(ast->arena, len + 1);
  char *nm = dfl_arena_strndup(ast->arena, name, strlen(name));
  if (!text || !nm) return DFL_ENOMEM;
  if (len) memcpy(text, bytes, len);
  ast->src.name = nm;
  ast->src.text = text;
  ast->src.len = len;
  if (len > DFL_MAX_SPEC_BYTES) {
    dfl_diag_error(dfl_loc_file(&ast->src), "file is %zu bytes; a spec may be at most %d bytes", len,
                   DFL_MAX_SPEC_BYTES);
    return DFL_ERR;
  }

  dfl_lex lx = {0};
  lx.ast = ast;
  lx.base = text;
  lx.line = 1;
  lx.col = 1;
  void *scanner = NULL;
  if (dfl_lex_init(&lx, &scanner)) return DFL_ENOMEM;
  void *buf = dfl_lex_scan(scanner, text, len);
  int rc = buf ? dfl_yyparse(scanner) : 2;
  dfl_lex_done(scanner, buf);
  if (lx.oom || rc == 2) return DFL_ENOMEM;
  ast->syntax_errors = lx.syntax_errors;
  ast->partial = rc != 0 || lx.stop;
  return lx.errors || rc ? DFL_ERR : DFL_OK;
}

void dfl_ast_free(dfl_ast *ast) {
  if (!ast->arena) return;
  chunk *c = ast->arena->top;
  while (c) {
    chunk *p = c->prev;
    free(c);
    c = p;
  }
  free(ast->arena);
  memset(ast, 0, sizeof *ast);
}
