/*
** dfl.y: the .dfl grammar. Generic on purpose: a file is a list of entries, an entry is
** `key = value` or a block `key [label] { entries }`, and values are scalars, lists or calls.
** What keys exist and what they mean is checked against a schema in compiler/check.c, which
** gives far better messages ("did you mean") than a grammar that knows every keyword.
**
** Pure parser + reentrant scanner: no global state. Every syntax error is reported (bison error
** recovery resynchronizes at the next entry), with the token under a caret.
*/
%define api.pure full
%define api.prefix {dfl_yy}
%define api.location.type {dfl_loc}
%define parse.error custom
%locations
%param {void *scanner}

%code requires {
#include "compiler/ast.h"
#include "compiler/front_internal.h"
#define DFL_YYSTYPE dfl_node *
}

%code {
#include <string.h>
int dfl_yylex(DFL_YYSTYPE *lval, DFL_YYLTYPE *lloc, void *scanner);
dfl_lex *dfl_yyget_extra(void *scanner);
static void dfl_yyerror(DFL_YYLTYPE *loc, void *scanner, const char *msg);
static dfl_node *mk(void *scanner, dfl_vkind kind, dfl_loc loc);
static void append(dfl_node *parent, dfl_node *kid);

#define YYLLOC_DEFAULT(Cur, Rhs, N) \
  do { if (N) (Cur) = YYRHSLOC(Rhs, 1); else (Cur) = YYRHSLOC(Rhs, 0); } while (0)
#define NEW(v, kind, loc) do { (v) = mk(scanner, kind, loc); if (!(v)) YYNOMEM; } while (0)
}

%token IDENT "identifier" STRING "string" INT "integer" FLOAT "number" SIZE "size" BOOL "boolean"
%token LBRACE "`{`" RBRACE "`}`" LBRACKET "`[`" RBRACKET "`]`" LPAREN "`(`" RPAREN "`)`"
%token EQUALS "`=`" COMMA "`,`" SEMI "`;`"

%%

file
  : entries                          { dfl_yyget_extra(scanner)->ast->entries = $1 ? $1->kids : NULL; }
  ;

entries
  : %empty                           { NEW($$, DFL_V_BLOCK, @$); }
  | entries entry                    { $$ = $1; append($$, $2); }
  | entries SEMI                     { $$ = $1; }
  | entries error                    { $$ = $1; }
  ;

entry
  : IDENT EQUALS value               { $$ = $1; $$->key = $1->s; $$->key_loc = @1; $$->value = $3; }
  | IDENT LBRACE entries RBRACE      { $$ = $1; $$->key = $1->s; $$->key_loc = @1; $$->kind = DFL_V_BLOCK;
                                       $$->kids = $3->kids; $$->nkids = $3->nkids; $$->last = $3->last; }
  | IDENT IDENT LBRACE entries RBRACE { $$ = $1; $$->key = $1->s; $$->key_loc = @1; $$->kind = DFL_V_BLOCK;
                                       $$->label = $2->s; $$->label_loc = @2;
                                       $$->kids = $4->kids; $$->nkids = $4->nkids; $$->last = $4->last; }
  ;

value
  : INT | FLOAT | SIZE | STRING | BOOL | IDENT
  | LBRACKET items RBRACKET          { $$ = $2; $$->loc = @1; }
  | LBRACKET items1 COMMA RBRACKET   { $$ = $2; $$->loc = @1; }
  | IDENT LPAREN items RPAREN        { $$ = $3; $$->kind = DFL_V_CALL; $$->s = $1->s; $$->loc = @1; }
  ;

items
  : %empty                           { NEW($$, DFL_V_LIST, @$); }
  | items1
  ;

items1
  : value                            { NEW($$, DFL_V_LIST, @1); append($$, $1); }
  | items1 COMMA value               { $$ = $1; append($$, $3); }
  ;

%%

static dfl_node *mk(void *scanner, dfl_vkind kind, dfl_loc loc) {
  dfl_lex *lx = dfl_yyget_extra(scanner);
  dfl_node *n = dfl_arena_alloc(lx->ast->arena, sizeof *n);
  if (!n) { lx->oom = 1; return NULL; }
  n->kind = kind;
  n->loc = loc;
  return n;
}

static void append(dfl_node *parent, dfl_node *kid) {
  if (!kid) return;
  kid->next = NULL;
  if (parent->last) parent->last->next = kid;
  else parent->kids = kid;
  parent->last = kid;
  parent->nkids++;
}

static void dfl_yyerror(DFL_YYLTYPE *loc, void *scanner, const char *msg) {
  dfl_lex *lx = dfl_yyget_extra(scanner);
  if (lx->stop) return;
  dfl_diag_error(*loc, "%s", strcmp(msg, "memory exhausted") ? msg : "the file nests too deeply to parse");
  lx->errors++;
  lx->syntax_errors++;
}

/* Token names for messages; `article` for the "expected ..." list. */
static const char *sym_name(yysymbol_kind_t k, int article) {
  switch (k) {
    case YYSYMBOL_YYEOF: return "end of file";
    case YYSYMBOL_IDENT: return article ? "a name" : "name";
    case YYSYMBOL_STRING: return article ? "a string" : "string";
    case YYSYMBOL_INT: return article ? "an integer" : "integer";
    case YYSYMBOL_FLOAT: return article ? "a number" : "number";
    case YYSYMBOL_SIZE: return article ? "a size" : "size";
    case YYSYMBOL_BOOL: return article ? "a boolean" : "boolean";
    default: return yysymbol_name(k);
  }
}

/* "unexpected `}`" with the expected tokens as help: the message names what the user wrote,
** the help says what would have been legal there. */
static int yyreport_syntax_error(const yypcontext_t *ctx, void *scanner) {
  dfl_lex *lx = dfl_yyget_extra(scanner);
  if (lx->stop || lx->oom) return 0;
  yysymbol_kind_t tok = yypcontext_token(ctx);
  dfl_loc loc = *yypcontext_location(ctx);
  const char *text = lx->base + lx->tok_off;
  if (tok == YYSYMBOL_YYEOF) {
    dfl_loc eof = {&lx->ast->src, lx->line, lx->col, 1};
    dfl_diag_error(eof, "unexpected end of file");
  } else if (tok == YYSYMBOL_IDENT || tok == YYSYMBOL_INT || tok == YYSYMBOL_FLOAT || tok == YYSYMBOL_SIZE ||
             tok == YYSYMBOL_BOOL) {
    int n = (int)lx->tok_len;
    dfl_diag_error(loc, "unexpected %s `%.*s`", sym_name(tok, 0), n > 40 ? 40 : n, text);
  } else {
    dfl_diag_error(loc, "unexpected %s", sym_name(tok, 0));
  }
  lx->errors++;
  lx->syntax_errors++;
  yysymbol_kind_t exp[8];
  int n = yypcontext_expected_tokens(ctx, exp, 8);
  if (n > 0) {
    char buf[256] = "expected ";
    for (int i = 0; i < n; i++) {
      if (i) strcat(buf, i == n - 1 ? " or " : ", ");
      strcat(buf, sym_name(exp[i], 1));
    }
    dfl_diag_help("%s", buf);
  }
  if (tok == YYSYMBOL_YYEOF) {
    if (lx->depth > 0 && lx->depth <= DFL_MAX_NESTING) {
      dfl_loc o = lx->open[lx->depth - 1];
      const char *t = lx->base, *p = t;
      for (int l = 1; l < o.line && (p = strchr(p, '\n')); l++) p++;   /* the bracket's byte */
      char ch = p ? p[o.col - 1] : '{';
      dfl_diag_note(o, "this `%c` is never closed", ch);
    }
  }
  return 0;
}
