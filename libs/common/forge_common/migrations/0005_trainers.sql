-- owner: api. Trainer capability profiles users register (the built-in ones are generated).
CREATE TABLE trainer_profiles (
    id          uuid PRIMARY KEY,
    project_id  uuid NOT NULL REFERENCES projects(id),
    name        text NOT NULL,
    profile     jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (project_id, name)
);
