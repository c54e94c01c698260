-- owner: scheduler. What a profile could ever offer (allocatable, whatever is requested now); NULL
-- means the total. A profile that is merely busy (total 0, allocatable > 0) still takes jobs.
ALTER TABLE accelerator_capacity ADD COLUMN allocatable integer;
