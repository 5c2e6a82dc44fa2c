/*
** json_get FILE KEY [LINE]: prints the top-level KEY of the JSON object in FILE (a string as is, a
** number or null as JSON), or of the last line of FILE that is a JSON object when LINE is "last".
** Exit 1 with a message when the file or line is not valid JSON or has no KEY: the path tests use it
** to check what dflc writes, without a JSON tool on the machine.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: json_get FILE KEY [last]\n");
    return 2;
  }
  json_error_t je;
  json_t *o = NULL;
  if (argc > 3 && !strcmp(argv[3], "last")) {
    FILE *f = fopen(argv[1], "r");
    if (!f) { perror(argv[1]); return 1; }
    char line[1 << 16];
    while (fgets(line, sizeof line, f))
      if (line[0] == '{') {
        json_decref(o);
        o = json_loads(line, 0, &je);
        if (!o) { fprintf(stderr, "%s: a line is not JSON: %s\n", argv[1], je.text); fclose(f); return 1; }
      }
    fclose(f);
  } else {
    o = json_load_file(argv[1], JSON_REJECT_DUPLICATES, &je);
  }
  if (!o) { fprintf(stderr, "%s:%d:%d: not JSON: %s\n", argv[1], je.line, je.column, je.text); return 1; }
  json_t *v = json_object_get(o, argv[2]);
  if (!v) { fprintf(stderr, "%s: no key %s\n", argv[1], argv[2]); json_decref(o); return 1; }
  if (json_is_string(v)) {
    printf("%s\n", json_string_value(v));
  } else {
    char *s = json_dumps(v, JSON_ENCODE_ANY);
    printf("%s\n", s ? s : "");
    free(s);
  }
  json_decref(o);
  return 0;
}
