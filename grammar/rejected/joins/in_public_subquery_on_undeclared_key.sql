-- expect: NotSupportedError declare foreign_keys: {cost: clinics.id}
SELECT COUNT(*) FROM visits WHERE cost IN (SELECT id FROM clinics)
