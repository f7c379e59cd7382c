-- bothrows raw-data schema. Append-only: a re-measurement adds runs; only a run's
-- status and finished_at are ever updated. schema_version records migrations.
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);

CREATE TABLE IF NOT EXISTS chips (
    chip_id      VARCHAR PRIMARY KEY,  -- sha256 of the fingerprint JSON, first 16 hex
    name         VARCHAR NOT NULL,     -- human name, e.g. "AMD EPYC 7B13 (2 cores)"
    device       VARCHAR NOT NULL,     -- "cpu" | "gpu"
    cores        INTEGER NOT NULL,
    memory_bytes BIGINT NOT NULL,
    os           VARCHAR NOT NULL,
    mlx_version  VARCHAR NOT NULL,
    fingerprint  JSON NOT NULL         -- everything, incl. BLAS library and Python
);

CREATE TABLE IF NOT EXISTS runs (
    run_id             VARCHAR PRIMARY KEY, -- uuid4 hex
    experiment         VARCHAR NOT NULL,
    declaration_sha256 VARCHAR NOT NULL,
    arm                VARCHAR NOT NULL,
    concurrency        INTEGER NOT NULL,
    round              INTEGER NOT NULL,
    chip_id            VARCHAR NOT NULL,
    model_sha256       VARCHAR NOT NULL,
    code_version       VARCHAR NOT NULL,    -- git commit, "+dirty" suffix when dirty
    knobs              JSON NOT NULL,       -- the arm's full EngineConfig
    seed               BIGINT NOT NULL,
    quick              BOOLEAN NOT NULL,    -- --quick shrank the workload
    started_at         TIMESTAMP NOT NULL,  -- UTC
    finished_at        TIMESTAMP,
    status             VARCHAR NOT NULL     -- running | complete | failed

    -- later columns come from MIGRATIONS in store.py (2: the load figures, 3: runtime,
    -- 4: slo_ttft_ms, slo_tpot_ms; 4 also adds requests.label and the tokens table)
);

CREATE TABLE IF NOT EXISTS requests (
    run_id         VARCHAR NOT NULL,
    request_id     INTEGER NOT NULL,
    client         INTEGER NOT NULL,
    prompt_tokens  INTEGER NOT NULL,
    output_tokens  INTEGER NOT NULL,
    cached_tokens  INTEGER NOT NULL,  -- NULL allowed from version 3 (not reported)
    arrival_ns     BIGINT NOT NULL,   -- relative to the cell's start
    first_token_ns BIGINT NOT NULL,
    done_ns        BIGINT NOT NULL,
    output_sha256  VARCHAR NOT NULL   -- NULL allowed from version 3 (a text-only stream)
);

CREATE TABLE IF NOT EXISTS passes (
    run_id              VARCHAR NOT NULL,
    pass_index          INTEGER NOT NULL,
    start_ns            BIGINT NOT NULL,  -- relative to the cell's start
    duration_ns         BIGINT NOT NULL,
    kind                VARCHAR NOT NULL, -- prefill | decode | mixed
    width               INTEGER NOT NULL,
    prefill_tokens      INTEGER NOT NULL,
    decode_tokens       INTEGER NOT NULL,
    drafted             INTEGER NOT NULL,
    accepted            INTEGER NOT NULL,
    emitted             INTEGER NOT NULL,
    state_bytes         BIGINT NOT NULL,
    max_row_state_bytes BIGINT NOT NULL
);
