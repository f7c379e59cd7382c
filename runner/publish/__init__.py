"""The generator: mkdocs-material posts rendered from the bothrows DuckDB file.

`plugin.py` is the mkdocs plugin, `post.py` renders one post, `queries.py` is the only
reader of the database; `runner build` and `runner audit` live in `commands.py`.
"""
