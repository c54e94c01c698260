-- owner: scheduler. What a profile could ever offer (allocatable, whatever is requested now); NULL
-- means the total. A profile that is merely busy (total 0, allocatable > 0) still takes jobs.
ALTER TABLE accelerator_capacity ADD COLUMN allocatable integer;

-- Whether the executor can run a custom trainer image (Kubernetes; the local executor with a
-- container runtime configured).
ALTER TABLE accelerator_capacity ADD COLUMN runs_images boolean NOT NULL DEFAULT false;
