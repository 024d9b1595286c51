"""The decoding shortcuts give what the plain path gives: linear layers multiplying by oneDNN-packed weights
inside ``generate`` on CPU, and beam search skipping the cross-attention reorderings that change nothing."""

import contextlib

import pytest
import torch
import torch.nn.functional as F
from transformers import DynamicCache, GenerationMixin

from hf_transformer import TransformerForConditionalGeneration, generation, speed
from hf_transformer.speed import is_packing, packed_linear_weights, packed_weight
from tests.helpers.generation import SCORED, assert_generations_agree
from tests.helpers.models import batch_with_padding, record_calls, tiny_config


@pytest.fixture
def pack_every_weight(monkeypatch):
    """The tiny test models' weights are far below the size worth packing."""
    monkeypatch.setattr(speed, "PACKED_MIN_WEIGHT_ELEMENTS", 0)


def test_the_cpu_build_can_pack_weights():
    assert torch.backends.mkldnn.is_available()


@pytest.mark.parametrize("bias", [True, False])
def test_packed_linear_matches_linear_for_few_rows_and_falls_back_otherwise(pack_every_weight, bias):
    layer = torch.nn.Linear(48, 40, bias=bias)
    few = torch.randn(2, 3, 48)  # 6 rows
    many = torch.randn(speed.PACKED_MAX_ROWS + 1, 48)
    with packed_linear_weights(layer):
        assert type(layer) is torch.nn.Linear and is_packing(layer)
        with torch.no_grad():
            assert packed_weight(layer) is None  # packed at the first few-row product only
            assert torch.equal(layer(many), F.linear(many, layer.weight, layer.bias))
            assert packed_weight(layer) is None
            packed = layer(few)
            assert packed_weight(layer) is not None
        torch.testing.assert_close(packed, F.linear(few, layer.weight, layer.bias), rtol=1e-5, atol=1e-6)
        assert packed.shape == (2, 3, 40)
        with_grad = layer(few)  # training or any gradient: always the plain product
        assert with_grad.requires_grad
        assert torch.equal(with_grad, F.linear(few, layer.weight, layer.bias))
    assert packed_weight(layer) is None and not is_packing(layer) and "forward" not in vars(layer)


def test_nested_blocks_share_the_outer_packing(pack_every_weight):
    layer = torch.nn.Linear(16, 16)
    with packed_linear_weights(layer), torch.no_grad():
        layer(torch.randn(2, 16))
        outer = packed_weight(layer)
        with packed_linear_weights(layer):
            layer(torch.randn(2, 16))
            assert packed_weight(layer) is outer
        assert is_packing(layer) and packed_weight(layer) is outer
    assert packed_weight(layer) is None


def test_only_exact_linear_layers_are_packed(pack_every_weight):
    class Scaled(torch.nn.Linear):
        def forward(self, hidden_states):
            return 2 * super().forward(hidden_states)

    model = torch.nn.Sequential(torch.nn.Linear(16, 16), Scaled(16, 16))
    with packed_linear_weights(model):
        assert is_packing(model[0]) and not is_packing(model[1])


def plain_generate(model, *args, **kwargs):
    """``GenerationMixin.generate`` without this model's weight packing (its beam reordering still applies)."""
    return GenerationMixin.generate(model, *args, **kwargs)


@pytest.mark.parametrize("settings", [dict(), dict(num_beams=3, num_return_sequences=2)])
def test_generate_with_packed_weights_equals_plain_generate(pack_every_weight, monkeypatch, settings):
    model = TransformerForConditionalGeneration(tiny_config()).eval()
    source, _ = batch_with_padding()
    packed_modules = []
    original = generation.packed_linear_weights

    @contextlib.contextmanager
    def recording(module):
        with original(module):
            yield
            packed_modules.extend(m for m in module.modules() if packed_weight(m) is not None)

    monkeypatch.setattr(generation, "packed_linear_weights", recording)
    # With the mask: transformers' own generate derives none for an encoder-decoder model.
    arguments = dict(attention_mask=source.ne(0), max_new_tokens=8, do_sample=False, **SCORED, **settings)
    # oneDNN's packed products and MKL's sgemm sum in other orders: logits equal to rounding, and the same tokens
    # wherever no two candidates are within rounding of a tie.
    assert_generations_agree(
        model, lambda: model.generate(source, **arguments), lambda: plain_generate(model, source, **arguments)
    )
    assert model.lm_head in packed_modules and len(packed_modules) > 1  # (the plain run packs nothing)
    assert not any(is_packing(m) for m in model.modules())


def test_weights_edited_in_place_between_generate_calls_are_used(pack_every_weight):
    model = TransformerForConditionalGeneration(tiny_config()).eval()
    source, _ = batch_with_padding()
    arguments = dict(attention_mask=source.ne(0), max_new_tokens=6, do_sample=False, **SCORED)
    before = model.generate(source, **arguments)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Linear):
                module.weight.data.mul_(-1.5)  # `.data` edits leave the version counter alone
    # Packed products of the edited weights: the plain path's logits to rounding (stale packed weights would give
    # the logits of `before`).
    after, _ = assert_generations_agree(
        model, lambda: model.generate(source, **arguments), lambda: plain_generate(model, source, **arguments)
    )
    assert not torch.equal(after.sequences, before.sequences)
    assert not torch.allclose(after.logits[0], before.logits[0], atol=1e-2)


@pytest.mark.parametrize("options", [dict(), dict(layer_norm_position="pre")])
def test_beam_search_reordering_only_the_self_attention_cache_changes_nothing(monkeypatch, options):
    model = TransformerForConditionalGeneration(tiny_config(**options)).eval()
    source, _ = batch_with_padding()
    arguments = dict(
        max_new_tokens=10, num_beams=4, num_return_sequences=3, do_sample=False, output_scores=True,
        return_dict_in_generate=True, length_penalty=0.5,
    )  # fmt: skip
    reordered = record_calls(monkeypatch, DynamicCache, "reorder_cache")
    fast = model.generate(source, **arguments)
    assert reordered and len({id(cache) for cache in reordered}) == 1  # the self-attention cache only
    reordered.clear()
    # The plain path: both caches reordered at every step.
    monkeypatch.delattr(generation.TransformerGenerationMixin, "_reorder_cache")
    full = model.generate(source, **arguments)
    assert len({id(cache) for cache in reordered}) == 2
    assert torch.equal(fast.sequences, full.sequences)
    # The same kernels on the same rows: a skipped reordering is one that changes nothing, so the scores are equal.
    torch.testing.assert_close(fast.sequences_scores, full.sequences_scores, rtol=0, atol=0)


def test_sampling_several_sequences_per_input():
    model = TransformerForConditionalGeneration(tiny_config()).eval()
    source, _ = batch_with_padding()
    torch.manual_seed(1)
    sampled = model.generate(source, do_sample=True, num_return_sequences=4, max_new_tokens=5)
    assert sampled.shape == (4 * source.shape[0], 6)


def test_beam_outputs_with_states_and_attentions_have_a_row_per_beam():
    model = TransformerForConditionalGeneration(tiny_config()).eval()
    source, _ = batch_with_padding()
    arguments = dict(
        num_beams=2, max_new_tokens=4, return_dict_in_generate=True, output_hidden_states=True,
        output_attentions=True, attention_mask=source.ne(0),
    )  # fmt: skip
    out = model.generate(source, **arguments)
    for step in out.cross_attentions:
        for layer in step:
            assert layer.shape == (2 * source.shape[0], model.config.num_attention_heads, 1, source.shape[1])


def test_decoder_rows_that_differ_from_the_encoder_rows_are_rejected():
    model = TransformerForConditionalGeneration(tiny_config()).eval()
    source, target = batch_with_padding()  # 3 rows
    encoded = model.get_encoder()(input_ids=source[:2])
    with pytest.raises(ValueError, match="decoder has 3 rows but the encoder output 2"):
        model(encoder_outputs=encoded, decoder_input_ids=target)


def sdpa_cross_attention_case(keys: int, **config):
    """A tiny model's first cross-attention set to sdpa (in eval mode), 3 rows of 4 queries, 3 sources of ``keys``
    keys and a mask hiding the second row's last half."""
    model = TransformerForConditionalGeneration(tiny_config(**config)).eval()
    model.set_attn_implementation("sdpa")
    torch.manual_seed(0)
    queries, sources = torch.randn(3, 4, 32), torch.randn(3, keys, 32)
    mask = torch.ones(3, 1, 1, keys, dtype=torch.bool)
    mask[1, ..., keys // 2 :] = False
    return model.model.decoder.layers[0].cross_attn, queries, sources, mask


@pytest.mark.parametrize("keys", [6, 20])
def test_bfloat16_cpu_training_over_few_keys_takes_the_math_path(monkeypatch, keys):
    # Training in bfloat16 on CPU (gradients on), attention over at most BFLOAT16_CPU_TRAINING_MATH_ATTENTION_MAX_KEYS
    # keys runs as product-softmax-product instead of sdpa's kernel; the same output and gradients to bfloat16's
    # rounding. Without gradients, or in float32, sdpa as configured.
    monkeypatch.setattr(speed, "BFLOAT16_CPU_TRAINING_MATH_ATTENTION_MAX_KEYS", 10)
    attention, queries, sources, mask = sdpa_cross_attention_case(keys, dropout=0.0, attention_dropout=0.0)
    attention.train()

    def output_and_gradient(dtype, *, grad=True):
        attention.zero_grad()
        inputs = queries.clone().requires_grad_(grad)
        with torch.set_grad_enabled(grad), torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
            output, _ = attention(inputs, key_value_states=sources, attention_mask=mask)
        if not grad:
            return output.float(), None
        output.float().square().sum().backward()
        return output.float(), inputs.grad

    reference, reference_gradient = output_and_gradient(torch.float32)
    sdpa_calls = record_calls(monkeypatch, F, "scaled_dot_product_attention")
    output, gradient = output_and_gradient(torch.bfloat16)
    assert len(sdpa_calls) == (keys > 10)
    torch.testing.assert_close(output, reference, rtol=0.05, atol=0.05)
    torch.testing.assert_close(gradient, reference_gradient, rtol=0.05, atol=0.1)
    output_and_gradient(torch.bfloat16, grad=False)  # evaluation
    output_and_gradient(torch.float32)
    assert len(sdpa_calls) == (keys > 10) + 2


@pytest.mark.parametrize("keys", [6, 20])
def test_compiled_cpu_attention_over_few_keys_takes_the_fused_math_path(monkeypatch, keys):
    # Under torch.compile on CPU, attention over at most COMPILED_CPU_MATH_ATTENTION_MAX_KEYS keys runs as
    # product-softmax-product (which inductor fuses) instead of sdpa's kernel; same result either way.
    monkeypatch.setattr(speed, "COMPILED_CPU_MATH_ATTENTION_MAX_KEYS", 10)
    attention, queries, sources, mask = sdpa_cross_attention_case(keys)
    with torch.no_grad():
        plain, _ = attention(queries, key_value_states=sources, attention_mask=mask)
        sdpa_calls = record_calls(monkeypatch, F, "scaled_dot_product_attention")
        monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
        traced_path, _ = attention(queries, key_value_states=sources, attention_mask=mask)
    assert bool(sdpa_calls) == (keys > 10)
    torch.testing.assert_close(traced_path, plain, rtol=1e-5, atol=1e-6)
