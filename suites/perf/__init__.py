"""The performance suite: single-request speed and the concurrency sweep, gated."""
