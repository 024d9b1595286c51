"""Benchmark programs (not installed). Run from the repository root as ``python benchmarks/<name>.py`` or
``python -m benchmarks.<name>``; their reports, one run's record each, are in ``benchmarks/results/``."""
