"""Helpers of the tests: tiny configurations and batches, and recording calls (``from model_helpers import ...``;
a module name of its own, where ``conftest`` would name the repository root's conftest.py in the recipes' tests)."""

import torch

import hf_transformer  # noqa: F401  (registers the Auto classes)
from hf_transformer import TransformerConfig

# The test models are tiny: one thread is fastest, and it cannot be starved by another busy process.
torch.set_num_threads(1)


def record_calls(monkeypatch, owner: type, method: str) -> list:
    """Wraps ``owner.method`` for the test: each call still runs it, and appends its first argument (``self`` for a
    method; for a module's function, such as ``F.scaled_dot_product_attention``, its first input) to the returned
    list."""
    calls = []
    original = getattr(owner, method)

    def recording(obj, *args, **kwargs):
        calls.append(obj)
        return original(obj, *args, **kwargs)

    monkeypatch.setattr(owner, method, recording)
    return calls


def tiny_config(**overrides) -> TransformerConfig:
    """A model small enough for many forward/backward passes per second on a CPU."""
    settings = dict(
        vocab_size=40,
        d_model=32,
        n_layer=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=24,
        dropout=0.0,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=3,
    )
    if {"encoder_layers", "decoder_layers"} & set(overrides) and "n_layer" not in overrides:
        depth = settings.pop("n_layer")  # the depth of the stack not given
        settings.update(encoder_layers=depth, decoder_layers=depth)
    settings.update(overrides)
    return TransformerConfig(**settings)


def batch_with_padding():
    """Source (B=3, S=7) and target (B=3, T=5), right-padded with id 0; row 2 of the source is the longest."""
    source = torch.tensor([[5, 6, 7, 8, 3, 0, 0], [9, 10, 3, 0, 0, 0, 0], [11, 12, 13, 14, 15, 16, 3]])
    target = torch.tensor([[2, 20, 21, 22, 23], [2, 24, 0, 0, 0], [2, 25, 26, 27, 0]])
    return source, target
