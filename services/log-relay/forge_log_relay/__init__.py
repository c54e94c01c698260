"""Forge log-relay: follows trainer output, persists logs and metrics, publishes progress events."""
