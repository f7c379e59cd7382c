"""Provenance of a post: which chips, dates, code versions and hashes its figures come
from, and the per-post downloads (raw rows as Parquet and CSV, the SQL behind each
table) written into the site so a reader can audit without us.

Parquet and CSV are written from sorted Arrow tables with fixed writer options, so the
same database gives the same bytes. The HTML lives in `templates/blocks/provenance.html`.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq


@dataclass
class Downloads:
    """Everything one post offers for download, keyed by file name inside its folder."""

    folder: str  # site-relative, e.g. "downloads/my-post"
    tables: dict[str, pa.Table] = field(default_factory=dict)
    sql: dict[str, str] = field(default_factory=dict)  # file name -> SQL text

    def file_names(self) -> list[str]:
        names = [f"{t}.{ext}" for t in sorted(self.tables) for ext in ("parquet", "csv")]
        return names + sorted(self.sql)


def parquet_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(
        table, buf, compression="zstd", write_statistics=False, store_schema=True, use_dictionary=False
    )
    return buf.getvalue()


def csv_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pacsv.write_csv(_lists_as_text(table), buf)
    return buf.getvalue()


def _lists_as_text(table: pa.Table) -> pa.Table:
    """CSV has no lists: a list column (a pass's drafting histograms) is written as the
    text "[2,1,0,1]", an empty list as "[]", NULL as an empty field."""
    for i, column in enumerate(table.schema):
        if pa.types.is_list(column.type):
            joined = pc.binary_join(table.column(i).cast(pa.list_(pa.string())), ",")
            table = table.set_column(i, column.name, pc.binary_join_element_wise("[", joined, "]", ""))
    return table


def write_downloads(site_dir: Path, downloads: Downloads) -> list[Path]:
    out = site_dir / downloads.folder
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, table in sorted(downloads.tables.items()):
        for ext, encode in (("parquet", parquet_bytes), ("csv", csv_bytes)):
            path = out / f"{name}.{ext}"
            path.write_bytes(encode(table))
            written.append(path)
    for name, text in sorted(downloads.sql.items()):
        path = out / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
