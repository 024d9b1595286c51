"""The recipes: one folder per task (its steps, README and run records), run from the repository root as
`python -m recipes.<task>.<step>` or `bash recipes/<task>/<job>.sh`; not part of the installed package."""
