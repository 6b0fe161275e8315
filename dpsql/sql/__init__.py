"""SQL front end: parse (sqlglot + grammar checks), compile (→ planner workload), bounded (→ backend SQL)."""
