"""The store's errors: one message naming the file (or run) and what is wrong."""

from __future__ import annotations


class StoreError(Exception):
    """A readable problem with the database or the rows given to it."""


class StoreLocked(StoreError):
    """Another writer holds the database."""
