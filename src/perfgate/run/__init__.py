"""One perfgate run: the session that starts the backend, measures, judges and records."""
