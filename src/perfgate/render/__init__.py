"""Outputs for people and tools: tables, CSV, Markdown, plots, the live progress line."""
