"""Whether the server answers correctly: known answers, golden outputs, code run in a
sandbox, the greedy twin."""
