-- owner: scheduler. What each executor can offer beyond a count of free slots:
--   per_job      the most devices one attempt can ever get (Kubernetes: one node's allocatable);
--                NULL means the total. A job asking for more can never run and is refused.
--   allocatable  what the profile offers at all, whatever is requested now; NULL means the total.
--                A profile that is merely busy (total 0, allocatable > 0) still takes jobs.
--   runs_images  whether it can run a custom trainer image (Kubernetes; the local executor with
--                a container runtime configured).
ALTER TABLE accelerator_capacity
    ADD COLUMN per_job integer,
    ADD COLUMN allocatable integer,
    ADD COLUMN runs_images boolean NOT NULL DEFAULT false;

-- owner: registrar. What else a version consists of beyond weights and ONNX, by name: the
-- adapter folder, a merged model, the base model a from-config adapter needs, ...
ALTER TABLE model_versions ADD COLUMN files jsonb NOT NULL DEFAULT '{}';
