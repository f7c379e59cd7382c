"""The Arrow schemas of the rows the store appends (requests, per-token times, passes),
and which columns a caller may leave out. The tables' history is `migrations.py`'s; these
are the shapes `Store` hands DuckDB, one Arrow table an append.
"""

from __future__ import annotations

import pyarrow as pa

CHIP_COLUMNS = ("name", "device", "cores", "memory_bytes", "os", "mlx_version")
REQUEST_SCHEMA = pa.schema(
    [
        ("request_id", pa.int32()),
        ("client", pa.int32()),
        ("prompt_tokens", pa.int32()),
        ("output_tokens", pa.int32()),
        ("cached_tokens", pa.int32()),
        ("arrival_ns", pa.int64()),
        ("first_token_ns", pa.int64()),
        ("done_ns", pa.int64()),
        ("output_sha256", pa.string()),
        ("label", pa.string()),
        ("asked_tokens", pa.int32()),
        ("error", pa.string()),
    ]
)
# Request columns a caller may leave out (NULL): added after callers that do not know them.
OPTIONAL_REQUEST_COLUMNS = ("label", "asked_tokens", "error")
TOKEN_SCHEMA = pa.schema([("request_id", pa.int32()), ("token_index", pa.int32()), ("t_ns", pa.int64())])
PASS_SCHEMA = pa.schema(
    [
        ("pass_index", pa.int32()),
        ("start_ns", pa.int64()),
        ("duration_ns", pa.int64()),
        ("kind", pa.string()),
        ("width", pa.int32()),
        ("prefill_tokens", pa.int32()),
        ("decode_tokens", pa.int32()),
        ("drafted", pa.int32()),
        ("accepted", pa.int32()),
        ("emitted", pa.int32()),
        ("state_bytes", pa.int64()),
        ("max_row_state_bytes", pa.int64()),
        ("accepted_lengths", pa.list_(pa.int32())),
        ("draft_lengths", pa.list_(pa.int32())),
        ("draft_reason", pa.string()),
    ]
)
# Pass columns a caller may leave out (NULL): the drafting histograms (schema 7), the
# adaptive policy's reason (schema 11).
OPTIONAL_PASS_COLUMNS = ("accepted_lengths", "draft_lengths", "draft_reason")
