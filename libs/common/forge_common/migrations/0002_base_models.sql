-- The base-model pool (owner: api), and dataset versions that can be deleted once no model
-- depends on them.

CREATE TABLE base_models (
    id           uuid PRIMARY KEY,
    project_id   uuid NOT NULL REFERENCES projects(id),
    name         text NOT NULL,
    family       text NOT NULL,
    tasks        text[] NOT NULL,
    source       jsonb NOT NULL,
    license      text NOT NULL DEFAULT '',
    description  text NOT NULL DEFAULT '',
    size_bytes   bigint,
    files        jsonb,
    digest       text,
    builtin      boolean NOT NULL DEFAULT false,
    created_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (project_id, name)
);

-- A job keeps its spec (dataset name and version) when the version row goes away.
ALTER TABLE jobs DROP CONSTRAINT jobs_dataset_version_id_fkey,
    ADD CONSTRAINT jobs_dataset_version_id_fkey FOREIGN KEY (dataset_version_id) REFERENCES dataset_versions(id) ON DELETE SET NULL;
