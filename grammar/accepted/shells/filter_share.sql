SELECT sex, 100.0 * COUNT(*) FILTER (WHERE age > 60) / COUNT(*) AS pct_over_60 FROM adult GROUP BY sex ORDER BY sex
-- ordered
