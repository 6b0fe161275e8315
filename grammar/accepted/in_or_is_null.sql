SELECT job, sex, COUNT(*) AS n FROM adult WHERE job IN ('clerk', 'nurse') OR job IS NULL GROUP BY job, sex;
