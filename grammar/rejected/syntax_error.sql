-- expect: ProgrammingError parse
SELECT COUNT(* FROM adult
