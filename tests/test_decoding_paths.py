"""The decoding shortcuts give what the plain path gives: linear layers multiplying by oneDNN-packed weights
inside ``generate`` on CPU, beam search reordering only the self-attention cache, and the beams of an input
sharing one unrepeated encoder row."""

import contextlib

import pytest
import torch
import torch.nn.functional as F
from conftest import batch_with_padding, record_calls, tiny_config
from transformers import GenerationMixin

from hf_transformer import TransformerForConditionalGeneration
from hf_transformer import modeling_transformer as modeling
from hf_transformer.modeling_transformer import PackableLinear, packed_linear_weights


@pytest.fixture
def pack_every_weight(monkeypatch):
    """The tiny test models' weights are far below the size worth packing."""
    monkeypatch.setattr(modeling, "PACKED_MIN_WEIGHT_ELEMENTS", 0)


def test_the_cpu_build_can_pack_weights():
    assert torch.backends.mkldnn.is_available()


@pytest.mark.parametrize("bias", [True, False])
def test_packed_linear_matches_linear_for_few_rows_and_falls_back_otherwise(pack_every_weight, bias):
    layer = PackableLinear(48, 40, bias=bias)
    few = torch.randn(2, 3, 48)  # 6 rows
    many = torch.randn(modeling.PACKED_MAX_ROWS + 1, 48)
    with packed_linear_weights(layer):
        with torch.no_grad():
            assert layer.packed_weight is None  # packed at the first few-row product only
            assert torch.equal(layer(many), F.linear(many, layer.weight, layer.bias))
            assert layer.packed_weight is None
            packed = layer(few)
            assert layer.packed_weight is not None
        torch.testing.assert_close(packed, F.linear(few, layer.weight, layer.bias), rtol=1e-5, atol=1e-6)
        assert packed.shape == (2, 3, 40)
        with_grad = layer(few)  # training or any gradient: always the plain product
        assert with_grad.requires_grad
        assert torch.equal(with_grad, F.linear(few, layer.weight, layer.bias))
    assert layer.packed_weight is None and not layer.packing


def test_nested_blocks_share_the_outer_packing(pack_every_weight):
    layer = PackableLinear(16, 16)
    with packed_linear_weights(layer), torch.no_grad():
        layer(torch.randn(2, 16))
        outer = layer.packed_weight
        with packed_linear_weights(layer):
            layer(torch.randn(2, 16))
            assert layer.packed_weight is outer
        assert layer.packing and layer.packed_weight is outer
    assert layer.packed_weight is None


def plain_generate(model, *args, **kwargs):
    """``GenerationMixin.generate`` without this model's weight packing (its beam reordering still applies)."""
    return GenerationMixin.generate(model, *args, **kwargs)


@pytest.mark.parametrize("settings", [dict(), dict(num_beams=3, num_return_sequences=2)])
def test_generate_with_packed_weights_equals_plain_generate(pack_every_weight, monkeypatch, settings):
    model = TransformerForConditionalGeneration(tiny_config()).eval()
    source, _ = batch_with_padding()
    packed_modules = []
    original = modeling.packed_linear_weights

    @contextlib.contextmanager
    def recording(module):
        with original(module):
            yield
            packed_modules.extend(m for m in module.modules() if getattr(m, "packed_weight", None) is not None)

    monkeypatch.setattr(modeling, "packed_linear_weights", recording)
    arguments = dict(max_new_tokens=8, do_sample=False, output_scores=True, return_dict_in_generate=True, **settings)
    fast = model.generate(source, **arguments)
    assert model.lm_head in packed_modules and len(packed_modules) > 1
    plain = plain_generate(model, source, **arguments)
    assert torch.equal(fast.sequences, plain.sequences)
    torch.testing.assert_close(torch.stack(fast.scores), torch.stack(plain.scores), rtol=1e-5, atol=1e-5)
    assert all(m.packed_weight is None for m in model.modules() if isinstance(m, PackableLinear))


def test_weights_edited_in_place_between_generate_calls_are_used(pack_every_weight):
    model = TransformerForConditionalGeneration(tiny_config()).eval()
    source, _ = batch_with_padding()
    before = model.generate(source, max_new_tokens=6, do_sample=False)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, PackableLinear):
                module.weight.data.mul_(-1.5)  # `.data` edits leave the version counter alone
    after = model.generate(source, max_new_tokens=6, do_sample=False)
    assert torch.equal(after, plain_generate(model, source, max_new_tokens=6, do_sample=False))
    assert not torch.equal(after, before)


@pytest.mark.parametrize("options", [dict(), dict(layer_norm_position="pre")])
def test_beam_search_reordering_only_the_self_attention_cache_changes_nothing(monkeypatch, options):
    model = TransformerForConditionalGeneration(tiny_config(**options)).eval()
    source, _ = batch_with_padding()
    arguments = dict(
        max_new_tokens=10, num_beams=4, num_return_sequences=3, do_sample=False, output_scores=True,
        return_dict_in_generate=True, length_penalty=0.5,
    )  # fmt: skip
    reordered = record_calls(monkeypatch, modeling.DynamicCache, "reorder_cache")
    fast = model.generate(source, **arguments)
    assert reordered and len({id(cache) for cache in reordered}) == 1  # the self-attention cache only
    reordered.clear()
    # The plain path: encoder output repeated for every beam, both caches reordered.
    monkeypatch.delattr(TransformerForConditionalGeneration, "_reorder_cache")
    monkeypatch.delattr(TransformerForConditionalGeneration, "_expand_inputs_for_generation")
    full = model.generate(source, **arguments)
    assert len({id(cache) for cache in reordered}) == 2
    assert torch.equal(fast.sequences, full.sequences)
    # The plain path also repeats the encoder rows, and sdpa's CPU kernel may block (and so round) grouped queries
    # differently from repeated keys: equal to float rounding (one unit in the last place seen on AVX-512 machines).
    torch.testing.assert_close(fast.sequences_scores, full.sequences_scores, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_beams_share_one_encoder_row_per_input_with_the_plain_results(monkeypatch, attention):
    model = TransformerForConditionalGeneration(tiny_config(attn_implementation=attention)).eval()
    source, _ = batch_with_padding()
    arguments = dict(
        max_new_tokens=8, num_beams=3, num_return_sequences=2, do_sample=False, output_scores=True,
        return_dict_in_generate=True,
    )  # fmt: skip
    shared = model.generate(source, attention_mask=source.ne(0), **arguments)
    cross_keys = shared.past_key_values.cross_attention_cache.layers[0].keys
    assert cross_keys.shape[0] == source.shape[0]  # one row per input, not per beam
    assert shared.past_key_values.self_attention_cache.layers[0].keys.shape[0] == 3 * source.shape[0]

    monkeypatch.delattr(TransformerForConditionalGeneration, "_expand_inputs_for_generation")  # repeated rows
    plain = model.generate(source, attention_mask=source.ne(0), **arguments)
    assert plain.past_key_values.cross_attention_cache.layers[0].keys.shape[0] == 3 * source.shape[0]
    assert torch.equal(shared.sequences, plain.sequences)
    torch.testing.assert_close(shared.sequences_scores, plain.sequences_scores, rtol=1e-6, atol=1e-6)


def test_sampling_several_sequences_works_with_shared_encoder_rows():
    model = TransformerForConditionalGeneration(tiny_config()).eval()
    source, _ = batch_with_padding()
    torch.manual_seed(1)
    sampled = model.generate(source, do_sample=True, num_return_sequences=4, max_new_tokens=5)
    assert sampled.shape == (4 * source.shape[0], 6)


def test_beam_outputs_with_states_and_attentions_equal_the_plain_path(monkeypatch):
    model = TransformerForConditionalGeneration(tiny_config()).eval()
    source, _ = batch_with_padding()
    arguments = dict(
        num_beams=2, max_new_tokens=4, return_dict_in_generate=True, output_hidden_states=True,
        output_attentions=True, attention_mask=source.ne(0),
    )  # fmt: skip
    shared = model.generate(source, **arguments)
    monkeypatch.delattr(TransformerForConditionalGeneration, "_expand_inputs_for_generation")  # repeated rows
    plain = model.generate(source, **arguments)
    assert torch.equal(shared.sequences, plain.sequences)
    for name in ("encoder_hidden_states", "encoder_attentions"):
        for got, expected in zip(getattr(shared, name), getattr(plain, name), strict=True):
            torch.testing.assert_close(got, expected, msg=name)
    for step_got, step_expected in zip(shared.cross_attentions, plain.cross_attentions, strict=True):
        for got, expected in zip(step_got, step_expected, strict=True):
            assert got.shape == expected.shape  # (batch x beams, heads, 1, source)
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_decoder_rows_grouped_over_encoder_rows_equal_repeated_encoder_rows():
    model = TransformerForConditionalGeneration(tiny_config()).eval()
    source, target = batch_with_padding()
    with torch.no_grad():
        encoded = model.get_encoder()(input_ids=source, attention_mask=source.ne(0))
        decoder_ids = target.repeat_interleave(2, dim=0)
        grouped = model(
            encoder_outputs=encoded, attention_mask=source.ne(0), decoder_input_ids=decoder_ids
        ).logits  # fmt: skip
        repeated = model(
            encoder_outputs=(encoded.last_hidden_state.repeat_interleave(2, dim=0),),
            attention_mask=source.ne(0).repeat_interleave(2, dim=0), decoder_input_ids=decoder_ids,
        ).logits  # fmt: skip
    torch.testing.assert_close(grouped, repeated, rtol=1e-5, atol=1e-6)


def test_decoder_rows_that_are_not_a_multiple_of_the_encoder_rows_are_rejected():
    model = TransformerForConditionalGeneration(tiny_config()).eval()
    source, target = batch_with_padding()  # 3 rows
    encoded = model.get_encoder()(input_ids=source[:2])
    with pytest.raises(ValueError, match="decoder has 3 rows but the encoder output 2"):
        model(encoder_outputs=encoded, decoder_input_ids=target)


@pytest.mark.parametrize("keys", [6, 20])
def test_compiled_cpu_attention_over_few_keys_takes_the_fused_math_path(monkeypatch, keys):
    # Under torch.compile on CPU, attention over at most COMPILED_CPU_MATH_ATTENTION_MAX_KEYS keys runs as
    # product-softmax-product (which inductor fuses) instead of sdpa's kernel; same result either way.
    monkeypatch.setattr(modeling, "COMPILED_CPU_MATH_ATTENTION_MAX_KEYS", 10)
    model = TransformerForConditionalGeneration(tiny_config()).eval()
    model.set_attn_implementation("sdpa")
    attention = model.model.decoder.layers[0].cross_attn
    torch.manual_seed(0)
    queries, sources = torch.randn(3, 4, 32), torch.randn(3, keys, 32)
    mask = torch.ones(3, 1, 1, keys, dtype=torch.bool)
    mask[1, ..., keys // 2 :] = False
    with torch.no_grad():
        plain, _ = attention(queries, key_value_states=sources, attention_mask=mask)
        sdpa_calls = []
        original = F.scaled_dot_product_attention

        def recording(*args, **kwargs):
            sdpa_calls.append(1)
            return original(*args, **kwargs)

        monkeypatch.setattr(F, "scaled_dot_product_attention", recording)
        monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
        traced_path, _ = attention(queries, key_value_states=sources, attention_mask=mask)
    assert bool(sdpa_calls) == (keys > 10)
    torch.testing.assert_close(traced_path, plain, rtol=1e-5, atol=1e-6)
