-- expect: NotSupportedError DELETE
DELETE FROM adult
