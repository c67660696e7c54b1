"""The project's measurements as data: one record per measured thing under
benchmarks/results/<id>/result.json (records: the schema and the loader) and the one page
generated from them, docs/evidence.md (page). Recipes and the patch series cite records by id."""
