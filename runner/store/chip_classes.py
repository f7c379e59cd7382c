"""Writing chips' machine classes (`machine_class.py` says what a class is).

A chip added by a run gets its class there and then (declared or computed); a chip
stored before classes existed, or loaded from a folder written before them, gets the
computed class of its own stored fields. A class whose chips disagree on core count is
refused: a declared name put on two different machines is a mistake, and pooling their
rounds would compare unlike things. Called by `Store` (add, migrate) and `exchange`
(import), inside their transactions, so a refusal leaves the database as it was.
"""

from __future__ import annotations

import json

from runner.store.errors import StoreError
from runner.store.machine_class import MachineClass, computed, of_fingerprint


def insert_chip(con, chip_id: str, fingerprint: dict, columns: tuple[str, ...], declared: str | None) -> None:
    """Add the chip (a no-op when present) with its class; a chip already stored under
    another declared class is refused, naming both."""
    try:
        cls = of_fingerprint(fingerprint, declared)
    except ValueError as e:
        raise StoreError(str(e)) from None
    stored = con.execute("SELECT class_label, class_id FROM chips WHERE chip_id = ?", [chip_id]).fetchall()
    if stored:
        if declared and stored[0][1] != cls.class_id:
            raise StoreError(
                f"chip {chip_id[:8]} is already stored in machine class {stored[0][0]!r}; "
                f"it cannot also be {cls.label!r} (a fresh database, or no --machine-class)"
            )
        return
    names = ", ".join(("chip_id", *columns, "fingerprint", "class_id", "class_label", "class_declared"))
    values = [
        chip_id,
        *(fingerprint[k] for k in columns),
        json.dumps(fingerprint, sort_keys=True, default=str),
    ]
    con.execute(
        f"INSERT INTO chips ({names}) VALUES ({', '.join('?' * (len(values) + 3))})",
        [*values, cls.class_id, cls.label, cls.declared],
    )
    refuse_mixed_cores(con, f"chip {chip_id[:8]}")


def classify_unclassified(con, source: str) -> int:
    """Fill the class of every chip stored without one, from its own fields; then refuse a
    class whose chips disagree on core count (naming `source`). Returns the chips filled."""
    rows = con.execute(
        "SELECT chip_id, name, device, cores, memory_bytes, "
        "coalesce(json_extract_string(fingerprint, '$.blas'), '') FROM chips WHERE class_id IS NULL"
    ).fetchall()
    for chip_id, name, device, cores, memory, blas in rows:
        cls: MachineClass = computed(name, device, cores, memory, blas)
        con.execute(
            "UPDATE chips SET class_id = ?, class_label = ?, class_declared = false WHERE chip_id = ?",
            [cls.class_id, cls.label, chip_id],
        )
    refuse_mixed_cores(con, source)
    return len(rows)


def refuse_mixed_cores(con, source: str) -> None:
    mixed = con.execute(
        "SELECT class_label, string_agg(DISTINCT cores::VARCHAR || ' cores on ' || left(chip_id, 8), '; ' "
        "ORDER BY cores::VARCHAR || ' cores on ' || left(chip_id, 8)) FROM chips "
        "WHERE class_id IS NOT NULL GROUP BY class_id, class_label HAVING count(DISTINCT cores) > 1"
    ).fetchall()
    if mixed:
        label, chips = mixed[0]
        raise StoreError(
            f"{source}: machine class {label!r} would hold chips that disagree on core count ({chips}); "
            "a class is one kind of machine: give one of them another --machine-class"
        )
