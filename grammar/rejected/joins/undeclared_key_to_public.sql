-- expect: NotSupportedError declare foreign_keys: {kind: regions.region}
SELECT COUNT(*) FROM visits v JOIN regions r ON v.kind = r.region
