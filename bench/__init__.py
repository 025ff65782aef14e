"""Benchmarks that print figures, never timed tests: `python -m bench` (see bench/__main__.py)."""
