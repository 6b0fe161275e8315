SELECT sex, COUNT(*) FROM adult WHERE job <> 'nurse' GROUP BY sex
