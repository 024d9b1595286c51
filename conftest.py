"""Settings every test of the repository runs under, the library's (tests/) and the recipes' (recipes/*/tests/)."""

import atexit
import os
import shutil
import tempfile

# Nothing is fetched from a hub during the tests: every model and dataset is built here.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_DISABLED", "true")

# The job scripts' precision check remembers what it measured (recipes.common.precision): the tests, and the jobs they
# run, keep their measurements in a folder of their own for the session, never in the user's cache.
if not os.environ.get("HF_TRANSFORMER_PRECISION_FILE"):
    _measurements = tempfile.mkdtemp(prefix="hf-transformer-tests-")
    atexit.register(shutil.rmtree, _measurements, ignore_errors=True)
    os.environ["HF_TRANSFORMER_PRECISION_FILE"] = os.path.join(_measurements, "precision.json")


def pytest_configure(config):
    """With worker processes (pytest-xdist's ``-n``, two by default: pyproject.toml), each worker is the other's load
    on the cores, which is where torch's OpenMP threads should sleep instead of spinning between parallel regions
    (hf_transformer.openmp). Set here, in the controlling process before it starts its workers, the setting reaches
    them and every process they start, unless the user chose a waiting setting."""
    from hf_transformer.openmp import BUSY_CORES, wait_passively_when_busy

    if getattr(config.option, "numprocesses", None) and "PYTEST_XDIST_WORKER" not in os.environ:
        wait_passively_when_busy(lambda: BUSY_CORES)  # the workers are the busy machine: no need to measure it
