-- expect: NotSupportedError UPDATE
UPDATE adult SET age = 30
