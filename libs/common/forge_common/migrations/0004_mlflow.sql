-- owner: log-relay. Which MLflow run mirrors which job.
CREATE TABLE mlflow_runs (
    job_id         uuid PRIMARY KEY,
    run_id         text NOT NULL,
    experiment_id  text NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now()
);
