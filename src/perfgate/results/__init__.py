"""What runs leave behind: the run JSON and the run history."""
