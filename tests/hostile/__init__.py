"""The hostile corpus: a table of hostile inputs over every command, run in one forked tree.

  cases_files.py    bad files where the commands read data
  cases_flags.py    bad flag values, one row per (command, flag, value)
  cases_faults.py   environment, full disk, read-only tree, SIGINT, hostile servers, controls
  cases_cache.py    cache entries (code, links), a hostile index's sdists and pages, archives
  commands.py       the command lines the cases spoil (each works on the pristine tree)
  cases.py          every table in one list (CASES), ids unique
  harness.py        one case: setup actions, the run, every assertion
  forkserver.py     the process that imports forge/verify once and forks a child per case
  tree.py           the session tree, its snapshot and the reset between cases
  server.py         the hostile HTTP server on 127.0.0.1
  mirror.py         the hostile package index on 127.0.0.1 (cases_cache.py's)
  session.py        all of the above, set up once per run
  runner.py         the selected cases on two sessions at once
  __main__.py       `python3 -m tests.hostile [-v] [ID-SUBSTRING...]`: the same, without pytest
  test_corpus.py    the pytest face: one test per case
  test_properties.py  hypothesis over the parsers (YAML, diffs, Prometheus, versions, index, reports)

Adding a case is adding a row (docs/development.md, "The hostile corpus", says the keys).
"""
