/*
** check_internal.h: what the checker's driver (check.c) and its section checks (check_model.c:
** target, taps, drafter; check_train.c: data, loss, train, compile) share: the sections' schemas,
** the checks the driver calls in order, and the accessors for required keys, sub-blocks and
** spec-relative paths (check_schema.c, whose walker and other accessors are in front_internal.h).
*/
#ifndef DFL_CHECK_INTERNAL_H
#define DFL_CHECK_INTERNAL_H

#include "compiler/front_internal.h"

#define IMAX 2147483647.0
#define I64MAX 9.2e18

/* check_model.c */
extern const dfl_sdef dfl_target_schema, dfl_drafter_schema;
void dfl_check_target(dfl_check *c);
void dfl_check_taps(dfl_check *c);     /* after the drafter: the default taps depend on its layers */
void dfl_check_drafter(dfl_check *c);
/* check_train.c */
extern const dfl_sdef dfl_data_schema, dfl_loss_schema, dfl_train_schema, dfl_compile_schema, dfl_adamw_schema,
    dfl_ckpt_schema;
void dfl_check_data(dfl_check *c);
void dfl_check_loss(dfl_check *c);
void dfl_check_train(dfl_check *c);
void dfl_check_compile(dfl_check *c);
/* check_schema.c */
dfl_sect *dfl_check_sub(const dfl_sect *s, const char *key);   /* a K_BLOCK child, NULL if absent */
/* "missing key" for a required key, at the section header; 1 when the key has a valid value. */
int dfl_check_require(dfl_check *c, const dfl_sect *s, const char *key);
/* dir of the spec + p, with "." and ".." folded lexically; out holds DFL_PATH_MAX bytes. */
void dfl_check_resolve(const dfl_check *c, const char *p, char *out);
/* A string value as a spec-relative path into out (DFL_PATH_MAX bytes); 0 after an error. */
int dfl_check_path(dfl_check *c, dfl_node *v, char *out);

#endif
