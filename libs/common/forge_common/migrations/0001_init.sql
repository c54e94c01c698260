-- Forge schema, version 1. One owner writes each table; the others read it or learn through events.

-- owner: api. Every dataset, job and model belongs to a project ('default' until auth lands).
CREATE TABLE projects (
    id          uuid PRIMARY KEY,
    name        text NOT NULL UNIQUE,
    created_at  timestamptz NOT NULL DEFAULT now()
);
INSERT INTO projects (id, name) VALUES ('00000000-0000-0000-0000-000000000001', 'default');

-- owner: api
CREATE TABLE datasets (
    id          uuid PRIMARY KEY,
    project_id  uuid NOT NULL REFERENCES projects(id),
    name        text NOT NULL,
    description text NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (project_id, name)
);

-- owner: api. Immutable once written: content-addressed by a hash over the file manifest.
CREATE TABLE dataset_versions (
    id            uuid PRIMARY KEY,
    dataset_id    uuid NOT NULL REFERENCES datasets(id),
    version       integer NOT NULL CHECK (version >= 1),
    format        text NOT NULL,
    tasks         text[] NOT NULL,
    uri           text NOT NULL,
    content_hash  text NOT NULL,
    size_bytes    bigint NOT NULL,
    file_count    integer NOT NULL,
    stats         jsonb NOT NULL DEFAULT '{}',
    report        jsonb NOT NULL DEFAULT '{}',
    created_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (dataset_id, version),
    UNIQUE (dataset_id, content_hash)
);

-- owner: api writes the spec and the draft -> queued move (a user command, with its outbox row);
-- owner: scheduler writes every later state and the run columns (state, attempts, progress, error).
CREATE TABLE jobs (
    id                  uuid PRIMARY KEY,
    project_id          uuid NOT NULL REFERENCES projects(id),
    name                text NOT NULL,
    task                text NOT NULL,
    spec                jsonb NOT NULL,
    dataset_version_id  uuid REFERENCES dataset_versions(id),
    base_model          text NOT NULL,
    accelerator         text NOT NULL DEFAULT 'cpu',
    priority            integer NOT NULL DEFAULT 0,
    state               text NOT NULL CHECK (state IN ('draft','queued','running','succeeded','stopped','canceled','failed')),
    traceparent         text,
    created_at          timestamptz NOT NULL DEFAULT now(),
    queued_at           timestamptz,
    started_at          timestamptz,
    finished_at         timestamptz,
    updated_at          timestamptz NOT NULL DEFAULT now(),
    stop_requested_at   timestamptz,
    attempt             integer NOT NULL DEFAULT 0,
    total_epochs        integer,
    epochs_completed    integer NOT NULL DEFAULT 0,
    progress            double precision NOT NULL DEFAULT 0,
    best_metrics        jsonb,
    error               jsonb,
    output_uri          text
);
CREATE INDEX jobs_created ON jobs (project_id, created_at DESC);
CREATE INDEX jobs_queue ON jobs (accelerator, priority DESC, queued_at, id) WHERE state = 'queued';
CREATE INDEX jobs_running ON jobs (accelerator) WHERE state = 'running';

-- owner: scheduler. One row per time a job's trainer was started.
CREATE TABLE attempts (
    job_id             uuid NOT NULL REFERENCES jobs(id),
    attempt            integer NOT NULL,
    executor           text NOT NULL,
    run_dir            text,
    log_uri            text,
    output_uri         text NOT NULL,
    pid                integer,
    pid_started        bigint,
    started_at         timestamptz NOT NULL DEFAULT now(),
    finished_at        timestamptz,
    stop_requested_at  timestamptz,
    kill_after         timestamptz,
    exit_code          integer,
    outcome            text,
    PRIMARY KEY (job_id, attempt)
);

-- owner: log-relay
CREATE TABLE metric_points (
    job_id    uuid NOT NULL,
    attempt   integer NOT NULL,
    scope     text NOT NULL CHECK (scope IN ('step','epoch')),
    idx       integer NOT NULL,
    epoch     integer NOT NULL,
    name      text NOT NULL,
    value     double precision NOT NULL,
    ts        timestamptz NOT NULL,
    PRIMARY KEY (job_id, attempt, scope, idx, name)
);

-- owner: log-relay
CREATE TABLE log_lines (
    job_id   uuid NOT NULL,
    attempt  integer NOT NULL,
    line_no  integer NOT NULL,
    ts       timestamptz NOT NULL,
    text     text NOT NULL,
    PRIMARY KEY (job_id, attempt, line_no)
);

-- owner: log-relay. How far each attempt's output has been read and persisted.
CREATE TABLE log_cursors (
    job_id      uuid NOT NULL,
    attempt     integer NOT NULL,
    byte_offset bigint NOT NULL DEFAULT 0,
    line_no     integer NOT NULL DEFAULT 0,
    done        boolean NOT NULL DEFAULT false,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, attempt)
);

-- owner: registrar
CREATE TABLE models (
    id          uuid PRIMARY KEY,
    project_id  uuid NOT NULL REFERENCES projects(id),
    name        text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (project_id, name)
);

-- owner: registrar. One version per job: registering twice is a no-op.
CREATE TABLE model_versions (
    id                  uuid PRIMARY KEY,
    model_id            uuid NOT NULL REFERENCES models(id),
    version             integer NOT NULL,
    job_id              uuid NOT NULL UNIQUE REFERENCES jobs(id),
    attempt             integer NOT NULL,
    artifacts_uri       text NOT NULL,
    weights_uri         text,
    onnx_uri            text,
    metrics             jsonb NOT NULL DEFAULT '{}',
    dataset_version_id  uuid REFERENCES dataset_versions(id),
    base_model          text,
    created_at          timestamptz NOT NULL DEFAULT now(),
    UNIQUE (model_id, version)
);

-- written by every service in the same transaction as its state change; drained by its relay.
CREATE TABLE outbox (
    seq         bigserial PRIMARY KEY,
    producer    text NOT NULL,
    subject     text NOT NULL,
    event_id    uuid NOT NULL,
    body        bytea NOT NULL,
    headers     jsonb NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX outbox_producer ON outbox (producer, seq);
