"""Benchmarks: scripts that measure, write runs/bench/<name>.json (with provenance) and print a table."""
