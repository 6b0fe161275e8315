-- expect: ProgrammingError cost
/* dpsql: epsilon=0.2 */ SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon = 0.3) race, COUNT(*) FROM adult GROUP BY race
