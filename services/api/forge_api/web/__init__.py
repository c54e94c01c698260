"""Forge's web pages: jobs, the new-job form, a job's live page, and the model registry."""
