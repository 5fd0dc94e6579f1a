"""The correctness suite: the backend answers right before any speed is reported."""
