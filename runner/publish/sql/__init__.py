"""The SQL and the readers: the bottom floor of the generator and the only code that reads
DuckDB for pages. The SQL is text (`pages.py` for cells, runs and requests; `passes.py`,
`sweeps.py`, `views.py`, `provenance.py`, `drafts.py` for their subjects); `reader.Reader`
runs it through one read-only connection and hands out named rows (`rows.py`), its
questions grouped by subject in small query objects it holds (`judging`, `passes`,
`sweeps`, `arms`). `home.py` says which runs a post judges. Nothing here computes an
interval or renders anything.
"""
