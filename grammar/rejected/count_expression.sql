-- expect: NotSupportedError SELECT COUNT
SELECT COUNT(age + 1) FROM adult
