# Front end: grammar (flex + bison), diagnostics, checker, config.json reading -> dfl_spec.
# Owned by the front-end work; see docs/language.md.
