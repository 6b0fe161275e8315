-- expect: ProgrammingError EXPLAIN
EXPLAIN ANALYZE SELECT COUNT(*) FROM adult
