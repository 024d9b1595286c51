"""Fixtures of the library's tests (their helpers are in tests/helpers/, which the recipes' tests import too).
The environment every test runs under (offline, no hub) is set by the repository root's conftest.py."""

import pytest
import torch

import hf_transformer  # noqa: F401  (registers the Auto classes)
from hf_transformer import TransformerConfig
from tests.helpers.models import tiny_config


@pytest.fixture
def config() -> TransformerConfig:
    return tiny_config()


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
