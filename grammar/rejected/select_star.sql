-- expect: NotSupportedError SELECT *
SELECT * FROM adult
