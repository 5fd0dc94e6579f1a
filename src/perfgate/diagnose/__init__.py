"""Why figures failed: the server's facts, what changed, and the likely causes ranked."""
