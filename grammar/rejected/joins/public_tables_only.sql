-- expect: NotSupportedError the join reads no private table
SELECT COUNT(*) FROM clinics c JOIN regions r ON c.region = r.region
