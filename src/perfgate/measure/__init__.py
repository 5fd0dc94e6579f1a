"""What a level run measured: its metrics from the raw request records, and telemetry."""
