-- expect: NotSupportedError SELECT COUNT
SELECT COUNT(age + race) FROM adult
