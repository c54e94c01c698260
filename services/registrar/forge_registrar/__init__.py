"""Forge registrar: turns uploaded artifacts into model versions."""
