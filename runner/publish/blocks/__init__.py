"""What a page shows: the regime and headline tables, the charts (one figure per chip, as
chip tabs), notes, the traffic, capacity and prediction blocks, and the post data they all
read (`PostData`, its `values` and the rendering's `PostState`). `templating.py` is the
only user of jinja2. Blocks render what the statistics floor returns; they never query
SQL of their own beyond the readers and never know about mkdocs.
"""
