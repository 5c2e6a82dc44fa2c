/*
** status.h: the status codes every library function of dflc returns (SQLite style): 0 is success,
** anything else says what kind of failure, after the function has printed what and where.
** It depends on nothing, so every stage can return them.
*/
#ifndef DFL_STATUS_H
#define DFL_STATUS_H

enum {
  DFL_OK = 0,
  DFL_ERR = 1,      /* generic failure; a message was already reported */
  DFL_ENOMEM = 2,
  DFL_EIO = 3,      /* file missing / unreadable / truncated */
  DFL_EFORMAT = 4,  /* malformed input */
  DFL_ESHAPE = 5,   /* shapes that do not agree */
  DFL_ETOL = 6      /* numbers outside tolerance */
};

#endif
