"""The recipes: one folder per task (its steps, README and run records), run from the repository root as
`python -m recipes.<task>.<step>` or `bash recipes/<task>/<job>.sh`; not part of the installed package."""

# Every recipe step runs this first: the package, imported before torch, makes torch's OpenMP threads wait briefly
# before they sleep (hf_transformer.openmp), which keeps training fast beside other work.
import hf_transformer  # noqa: E402, F401
