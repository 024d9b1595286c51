"""Settings every test of the repository runs under, the library's (tests/) and the recipes' (recipes/*/tests/)."""

import os

# Nothing is fetched from a hub during the tests: every model and dataset is built here.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_DISABLED", "true")
