"""One domain error hierarchy, translated only at the edges (HTTP ``{type, detail}``, consumer ack/term)."""

from __future__ import annotations

from typing import Any


class ForgeError(Exception):
    """Base of every error Forge raises on purpose. ``type`` is a stable slug for clients."""

    type = "forge_error"
    status = 400

    def __init__(self, detail: str, *, field: str | None = None, extra: dict[str, Any] | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.field = field
        self.extra = extra or {}


class NotFound(ForgeError):
    type = "not_found"
    status = 404


class Conflict(ForgeError):
    type = "conflict"
    status = 409


class InvalidTransition(Conflict):
    """A state change the job's state machine does not allow (or another replica won the race)."""

    type = "invalid_transition"


class InvalidInput(ForgeError):
    """The caller sent something that cannot be used; ``field`` names where."""

    type = "invalid_input"
    status = 422


class PayloadTooLarge(ForgeError):
    type = "payload_too_large"
    status = 413


class PermanentFailure(ForgeError):
    """Retrying cannot help (a poison message, a malformed event): dead-letter it."""

    type = "permanent_failure"
    status = 500
