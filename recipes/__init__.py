"""The recipes: one folder per task (its steps, README and run records), run from the repository root as
`python -m recipes.<task>.<step>` or `bash recipes/<task>/<job>.sh`; not part of the installed package."""

# Every recipe step runs this first: the package, imported before torch on a machine other processes keep busy,
# makes torch's OpenMP threads sleep instead of spinning while they wait (hf_transformer.openmp).
import hf_transformer  # noqa: E402, F401
