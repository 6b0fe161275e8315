-- expect: ProgrammingError nullable
SELECT COUNT(*) FROM adult WHERE sex IS NULL
