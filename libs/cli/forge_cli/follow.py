"""What a job's event stream adds up to, for the commands that follow one.

The stream replays a job's whole history before going live, so a resumed job's earlier attempts
pass by first: their terminal status, last log line and model registration must not end a watch
of the attempt that is running now. The snapshot that opens the stream names the current attempt;
anything from an earlier attempt is shown but decides nothing."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

TERMINAL = frozenset({"succeeded", "failed", "canceled", "stopped"})


@dataclass
class JobFollower:
    state: str = "queued"
    attempt: int = 0  # the attempt the decisions are about
    registration: str = "auto"
    registered: dict[str, Any] | None = None
    output_read: bool = False  # the current attempt's output has been read to the end
    job: dict[str, Any] | None = field(default=None, repr=False)
    caught_up: bool = True  # the replay has reached the current attempt's own events

    def feed(self, event: str, data: Any) -> None:
        if event == "snapshot":
            self.job = data
            self.state = data["state"]
            self.attempt = data.get("attempt") or 0
            if self.state == "queued" and self.attempt > 0:
                self.attempt += 1  # resumed or retried, not started yet: the next attempt is the one to follow
            self.registration = data.get("registration") or "auto"
            self.caught_up = self.attempt == 0
            return
        if not isinstance(data, dict) or not isinstance(data.get("data"), dict):
            return
        d = data["data"]
        attempt = d.get("attempt") or 0
        if event == "status":
            if attempt < self.attempt:
                return  # an earlier attempt's history
            if attempt > self.attempt:  # a new attempt began: what the last one did is no answer
                self.attempt, self.registered, self.output_read = attempt, None, False
            self.caught_up = True
            self.state = d["state"]
        elif event == "logs":
            if d.get("eof") and attempt >= self.attempt:
                self.output_read = True
        elif event == "model-registered" and self.caught_up and self.ended:
            self.registered = d  # registrations follow the attempt's end; earlier ones are history

    @property
    def never_ran(self) -> bool:
        return self.state in ("canceled", "failed") and self.attempt == 0

    @property
    def ended(self) -> bool:
        return self.state in TERMINAL

    @property
    def settled(self) -> bool:
        """Ended, and nothing more will come that a watcher waits for (a registration, unless the
        job registers by hand or produced no model)."""
        if not self.ended:
            return False
        return self.registered is not None or self.state in ("failed", "canceled") or self.registration == "manual"
