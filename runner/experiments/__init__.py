"""Declared experiments: TOML declaration -> seeded workload -> cells run on the engine ->
raw rows in DuckDB (through runner.store). Nothing here renders pages."""
