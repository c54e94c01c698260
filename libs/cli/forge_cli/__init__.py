"""forge: the command line of Forge."""

# FORGE_* variables read by the CLI itself (the services' settings classes document theirs).
ENVIRONMENT: tuple[tuple[str, str, str], ...] = (
    ("FORGE_API_URL", "http://127.0.0.1:8000", "The API the forge CLI talks to"),
    ("FORGE_STACK_NATS_PORT", "14222", "Port of the private NATS that `make up` / `forge stack up` starts"),
    (
        "FORGE_STACK_KEEP_TRAINERS",
        "false",
        "Leave running trainers alive when the stack stops, for the next start to re-attach to (default: stop them;"
        " their jobs then resume from their last checkpoint)",
    ),
)
