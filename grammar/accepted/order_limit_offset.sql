select sex, race, count(*) as n from adult group by sex, race order by sex desc, race limit 4 offset 2
