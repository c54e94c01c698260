"""What every Forge service shares: contracts (events, subjects, states, job spec), settings,
the bus, the database and its migrations, object storage and telemetry. Nothing else."""

__version__ = "0.1.0"

DEFAULT_PROJECT_ID = "00000000-0000-0000-0000-000000000001"
