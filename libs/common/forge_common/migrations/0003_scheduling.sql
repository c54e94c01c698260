-- Scheduling for real: executors other than local processes, what each can offer, retries and
-- resumed attempts, and one model version per attempt.

ALTER TABLE attempts RENAME COLUMN run_dir TO run_ref;
ALTER TABLE attempts
    ADD COLUMN resume_from text,
    ADD COLUMN accelerator text NOT NULL DEFAULT 'cpu',
    ADD COLUMN pending_reason text,
    ADD COLUMN retried boolean NOT NULL DEFAULT false;

-- owner: scheduler. What each executor can run, refreshed as it discovers devices and nodes.
CREATE TABLE accelerator_capacity (
    executor     text NOT NULL,
    profile      text NOT NULL,
    total        integer NOT NULL,
    detail       text NOT NULL DEFAULT '',
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (executor, profile)
);

-- A resumed job registers the version its new attempt produced.
ALTER TABLE model_versions DROP CONSTRAINT model_versions_job_id_key;
ALTER TABLE model_versions ADD CONSTRAINT model_versions_job_attempt_key UNIQUE (job_id, attempt);

-- owner: scheduler. Where the next attempt resumes from (set by a retry or a resume request).
ALTER TABLE jobs ADD COLUMN resume_from text;
ALTER TABLE attempts ADD COLUMN deadline_at timestamptz, ADD COLUMN devices text;
