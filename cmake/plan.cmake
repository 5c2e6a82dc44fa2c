# Static memory plan, reports (table, YAML, HTML), plan checker.
