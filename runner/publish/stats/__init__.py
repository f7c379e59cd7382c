"""The statistics floor: every 95% interval (`intervals.py`), the views that hold a moment's
cells with their intervals, the A/A margin, claims and their verdicts, and the models
judged on the rows the readers hand in (the pass-cost fit and its predictions, capacity
under an SLO, regime completeness). Pure computations over rows: it reads through
`publish/sql/` and renders no HTML.
"""
