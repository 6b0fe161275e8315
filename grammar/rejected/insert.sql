-- expect: NotSupportedError INSERT
INSERT INTO adult (sex) VALUES ('F')
