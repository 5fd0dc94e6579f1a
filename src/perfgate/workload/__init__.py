"""What to ask the server: prompts of each kind, datasets, and request arrivals."""
