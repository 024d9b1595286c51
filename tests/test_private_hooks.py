"""The private hooks of transformers that the package overrides or calls. Each must still exist, with the
arguments the override expects, and still be used where the package relies on it: an upgrade that removes or
renames one fails here, naming it, instead of silently changing what users get."""

from __future__ import annotations

import inspect

import pytest
import torch
from transformers import GenerationConfig, GenerationMixin, PreTrainedModel
from transformers.cache_utils import EncoderDecoderCache

from hf_transformer import TransformerForConditionalGeneration, TransformerPreTrainedModel

# (owner, name, parameters the override is written for, where transformers calls it)
HOOKS = [
    (GenerationMixin, "_reorder_cache", None, (GenerationMixin, "_beam_search", "self._reorder_cache(")),
    (GenerationMixin, "_valid_auto_compile_criteria", ["self", "model_kwargs", "generation_config"], None),
    (
        GenerationMixin,
        "create_masks_for_generate",
        None,
        (GenerationMixin, "prepare_inputs_for_generation", 'getattr(self, "create_masks_for_generate"'),
    ),
    (PreTrainedModel, "get_expanded_tied_weights_keys", ["self", "all_submodels"], None),
    (
        PreTrainedModel,
        "mark_tied_weights_as_initialized",
        ["self", "loading_info"],
        (PreTrainedModel, "_finalize_model_loading", "model.mark_tied_weights_as_initialized(loading_info)"),
    ),
    (PreTrainedModel, "_init_weights", ["self", "module"], None),
]


@pytest.mark.parametrize(("owner", "name", "parameters", "caller"), HOOKS, ids=[hook[1] for hook in HOOKS])
def test_overridden_transformers_hook_still_exists(owner, name, parameters, caller):
    if name in ("_reorder_cache", "create_masks_for_generate"):
        # Looked up on the model by generate, which calls the model's own when it has one.
        assert name in TransformerForConditionalGeneration.__dict__
    else:
        assert hasattr(owner, name), f"transformers no longer has {owner.__name__}.{name}"
        if parameters is not None:
            got = list(inspect.signature(getattr(owner, name)).parameters)
            assert got[: len(parameters)] == parameters, f"{owner.__name__}.{name} now takes {got}"
    if caller is not None:
        caller_owner, caller_name, call = caller
        source = inspect.getsource(getattr(caller_owner, caller_name))
        assert call in source, f"{caller_owner.__name__}.{caller_name} no longer calls `{call}`"


def test_overrides_are_defined_where_expected():
    for name in ("get_expanded_tied_weights_keys", "mark_tied_weights_as_initialized", "_init_weights"):
        assert name in TransformerPreTrainedModel.__dict__, name
    for name in ("_reorder_cache", "_valid_auto_compile_criteria", "create_masks_for_generate"):
        assert name in TransformerForConditionalGeneration.__dict__, name


def test_other_private_names_the_package_reads():
    assert callable(GenerationConfig._get_default_generation_params)  # the config's generation-key warning
    assert isinstance(GenerationConfig._get_default_generation_params(), dict)
    assert hasattr(EncoderDecoderCache, "get_mask_sizes")
    assert hasattr(torch.ops.mkldnn, "_reorder_linear_weight") and hasattr(torch.ops.mkldnn, "_linear_pointwise")
