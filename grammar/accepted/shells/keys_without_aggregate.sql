SELECT sex FROM adult GROUP BY sex
