"""Putting load on the server: one level, a sweep of levels, workers and Ray shards.

Runs requests and records them; decides nothing."""
