"""The DuckDB store: the only writer of the raw-data file (see store.py) and the Parquet
exchange between machines (see exchange.py). Pages read through runner.publish.sql.reader."""

from runner.store.store import Store, StoreError, StoreLocked

__all__ = ["Store", "StoreError", "StoreLocked"]
