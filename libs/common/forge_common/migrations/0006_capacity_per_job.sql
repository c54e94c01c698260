-- owner: scheduler. The most devices one attempt can get (on Kubernetes: the most free on one
-- node); NULL means the whole total. A job asking for more can never run and is refused.
ALTER TABLE accelerator_capacity ADD COLUMN per_job integer;
