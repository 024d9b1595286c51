"""Fixtures of the library's tests (their helpers are in model_helpers.py, which the recipes' tests import too).
The environment every test runs under (offline, no hub) is set by the repository root's conftest.py."""

import pytest
import torch
from model_helpers import tiny_config

import hf_transformer  # noqa: F401  (registers the Auto classes)
from hf_transformer import TransformerConfig


@pytest.fixture
def config() -> TransformerConfig:
    return tiny_config()


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
