"""A static (preallocated) cache gives what the growing cache gives: in ``generate`` with
``cache_implementation="static"`` (greedy, beam search, sampling, padded sources, both attention kernels), in
direct decoder calls, and in a decoding step compiled by ``generate``."""

import pytest
import torch
from transformers import CompileConfig, DynamicCache, EncoderDecoderCache, StaticCache

from hf_transformer import TransformerForConditionalGeneration, speed
from hf_transformer.generation import CACHE_NAME
from tests.helpers.generation import SCORED, assert_generations_agree
from tests.helpers.models import batch_with_padding, tiny_config


def _model(attention: str = "sdpa", **overrides) -> TransformerForConditionalGeneration:
    model = TransformerForConditionalGeneration(tiny_config(**overrides)).eval()
    model.set_attn_implementation(attention)
    return model


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize(
    "settings",
    [
        dict(),
        dict(num_beams=3, num_return_sequences=2),
        dict(output_attentions=True, output_hidden_states=True),
    ],
)
def test_generate_with_a_static_cache_equals_the_growing_cache(attention, settings):
    model = _model(attention)
    source, _ = batch_with_padding()
    arguments = dict(max_new_tokens=10, min_new_tokens=10, do_sample=False, **SCORED, **settings)
    # The static cache's attention reads all of its slots (masked), the growing one its written keys only: other
    # products, equal to rounding. The same tokens wherever no two candidates are within rounding of a tie.
    growing, static = assert_generations_agree(
        model,
        lambda: model.generate(source, **arguments),
        lambda: model.generate(source, cache_implementation="static", **arguments),
    )
    assert isinstance(static.past_key_values.self_attention_cache, StaticCache)
    assert growing.sequences.shape[1] == 11
    if "output_attentions" in settings:
        # The static cache's self-attention reads all of its slots; the unwritten ones get no weight. (Rows whose
        # tokens parted at a near-tie before this step have other inputs.)
        step = 4
        same = (static.sequences[:, : step + 1] == growing.sequences[:, : step + 1]).all(1)
        static_probs = static.decoder_attentions[step][0]  # (B, H, 1, slots)
        growing_probs = growing.decoder_attentions[step][0]  # (B, H, 1, step + 1)
        assert static_probs.shape[-1] == 10  # one slot per generated token but the last
        torch.testing.assert_close(static_probs[same, ..., : step + 1], growing_probs[same], rtol=1e-5, atol=1e-6)
        assert torch.all(static_probs[..., step + 1 :] == 0)
        for fast, plain in zip(static.decoder_hidden_states[step], growing.decoder_hidden_states[step]):
            torch.testing.assert_close(fast[same], plain[same], rtol=1e-5, atol=1e-5)


def test_sampling_with_a_static_cache_draws_the_same_tokens():
    model = _model()
    source, _ = batch_with_padding()
    arguments = dict(max_new_tokens=8, do_sample=True, top_k=10, num_return_sequences=2, **SCORED)
    # The same random draws from logits equal to rounding (see test_generate_with_a_static_cache_...).
    assert_generations_agree(
        model,
        lambda: model.generate(source, **arguments),
        lambda: model.generate(source, cache_implementation="static", **arguments),
        sampling_seed=5,
    )


def test_a_longer_static_cache_from_an_earlier_call_changes_nothing():
    # generate keeps a static cache at least as long as the longest one it made before: the slots past the
    # current length must stay hidden.
    model = _model()
    source, _ = batch_with_padding()
    model.generate(source, max_new_tokens=20, cache_implementation="static")
    _, short = assert_generations_agree(
        model,
        lambda: model.generate(source, max_new_tokens=5, **SCORED),
        lambda: model.generate(source, max_new_tokens=5, cache_implementation="static", **SCORED),
    )
    assert short.past_key_values.self_attention_cache.layers[0].max_cache_len > 6


@pytest.mark.parametrize("target_padding", [False, True])
def test_decoder_steps_over_a_static_cache_equal_the_full_forward(target_padding):
    model = _model()
    source, target = batch_with_padding()
    decoder_mask = target.ne(0) if target_padding else None
    with torch.no_grad():
        full = model(input_ids=source, decoder_input_ids=target, decoder_attention_mask=decoder_mask).logits
        cache = EncoderDecoderCache(
            StaticCache(config=model.config, max_cache_len=12), StaticCache(config=model.config, max_cache_len=7)
        )
        encoder_outputs = model.get_encoder()(input_ids=source)
        steps = []
        for t in range(target.shape[1]):
            step_mask = decoder_mask[:, : t + 1] if target_padding else None
            output = model(
                attention_mask=source.ne(0),
                encoder_outputs=encoder_outputs,
                decoder_input_ids=target[:, t : t + 1],
                decoder_attention_mask=step_mask,
                **{CACHE_NAME: cache},
                use_cache=True,
            )
            steps.append(output.logits)
        assert int(cache.get_seq_length()) == target.shape[1]
    real = target.ne(0) if target_padding else torch.ones_like(target, dtype=torch.bool)
    torch.testing.assert_close(torch.cat(steps, dim=1)[real], full[real], rtol=1e-5, atol=1e-5)


def test_a_prepared_four_dimensional_decoder_mask_is_used_as_given():
    model = _model()
    source, target = batch_with_padding()
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    with torch.no_grad():
        plain = model(input_ids=source, decoder_input_ids=target).logits
        as_bool = model(input_ids=source, decoder_input_ids=target, decoder_attention_mask=causal[None, None]).logits
        additive = torch.zeros(3, 1, 5, 5).masked_fill(~causal, torch.finfo(torch.float32).min)
        as_float = model(input_ids=source, decoder_input_ids=target, decoder_attention_mask=additive).logits
        # A mask that hides each token's own key (but the first's) changes the answer: it really is applied.
        strict = torch.ones(5, 5, dtype=torch.bool).tril(-1)
        strict[0, 0] = True
        changed = model(input_ids=source, decoder_input_ids=target, decoder_attention_mask=strict[None, None]).logits
    torch.testing.assert_close(as_bool, plain, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(as_float, plain, rtol=1e-5, atol=1e-5)
    assert torch.isfinite(changed).all()
    torch.testing.assert_close(changed[:, 0], plain[:, 0], rtol=1e-5, atol=1e-5)  # the first row sees the same
    assert not torch.allclose(changed[:, 1:], plain[:, 1:], atol=1e-3)


@pytest.mark.parametrize(
    "mask, message",
    [
        (torch.ones(3, 1, 5, 4, dtype=torch.bool), r"4-D `decoder_attention_mask` has shape \(3, 1, 5, 4\)"),
        (torch.ones(2, 1, 5, 5, dtype=torch.bool), r"expected \(3, 1, 5, 5\)"),
        (torch.ones(3, 1, 5, 5, dtype=torch.long), "must be bool .* or float"),
        (torch.ones(3, 6, dtype=torch.bool), r"has shape \(3, 6\); expected \(3, 5\)"),
    ],
)
def test_decoder_masks_of_the_wrong_shape_or_type_are_rejected(mask, message):
    model = _model()
    source, target = batch_with_padding()
    with pytest.raises(ValueError, match=message):
        model(input_ids=source, decoder_input_ids=target, decoder_attention_mask=mask)


def test_a_static_cache_longer_than_the_position_table_is_stopped_at_the_table_end():
    model = _model(decoder_max_position_embeddings=6)  # the encoder reads the 7-token sources in its 24 positions
    source, _ = batch_with_padding()
    # generate caps its length at the table (tests/test_bad_input.py), and its static cache with it ...
    with pytest.warns(UserWarning, match="`max_new_tokens`=8 goes past the decoder's position table of 6"):
        capped = model.generate(source, max_new_tokens=8, min_new_tokens=8, cache_implementation="static")
    expected = model.generate(source, max_new_tokens=6, min_new_tokens=6, cache_implementation="static")
    assert capped.shape == (3, 7) and torch.equal(capped, expected)  # one code path: the same products
    # ... and a caller's own static cache with more slots than positions is stopped at the step past the table.
    cache = EncoderDecoderCache(
        StaticCache(config=model.config, max_cache_len=8), StaticCache(config=model.config, max_cache_len=7)
    )
    encoder_outputs = model.get_encoder()(input_ids=source)
    with torch.no_grad():
        for _ in range(6):
            model(encoder_outputs=encoder_outputs, decoder_input_ids=torch.full((3, 1), 5), **{CACHE_NAME: cache})
        with pytest.raises(ValueError, match="Sequence length 7 exceeds the position table of 6 positions"):
            model(encoder_outputs=encoder_outputs, decoder_input_ids=torch.full((3, 1), 5), **{CACHE_NAME: cache})


@pytest.mark.slow
def test_generate_compiles_the_decoding_step_over_a_static_cache(monkeypatch):
    torch._dynamo.reset()
    model = _model()
    source = torch.randint(4, 40, (4, 20))  # 80 rows: more than the encoder would pack
    # Every weight is worth packing for eager decoding here; a compiled decoding packs none (it would be wasted).
    monkeypatch.setattr(speed, "PACKED_MIN_WEIGHT_ELEMENTS", 0)
    packed = []
    reorder = torch.ops.mkldnn._reorder_linear_weight
    monkeypatch.setattr(torch.ops.mkldnn, "_reorder_linear_weight", lambda *args: packed.append(1) or reorder(*args))
    compile_config = CompileConfig(fullgraph=True, dynamic=False, backend="aot_eager", mode=None)
    compile_config._compile_all_devices = True  # generate compiles on accelerators only unless told
    arguments = dict(max_new_tokens=6, min_new_tokens=6, do_sample=False, **SCORED)

    def compiled_generate():
        output = model.generate(source, cache_implementation="static", compile_config=compile_config, **arguments)
        assert hasattr(model, "_compiled_call")  # the decoding steps ran through the compiled forward
        assert not packed
        return output

    # The compiled steps multiply by the plain weights, the eager ones by packed copies: other kernels, equal to
    # rounding. The same tokens wherever no two candidates are within rounding of a tie.
    compiled, _ = assert_generations_agree(model, compiled_generate, lambda: model.generate(source, **arguments))
    assert packed  # the eager decoding packed its weights
    # A second call reuses the graph (same shapes): no recompilation, and the same kernels give the same result.
    frames_before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    assert frames_before >= 1
    again = model.generate(source, cache_implementation="static", compile_config=compile_config, **arguments)
    assert torch.equal(again.sequences, compiled.sequences)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == frames_before


def test_the_growing_cache_still_skips_the_mask_at_decoding_steps():
    model = _model()
    masks = []
    original = torch.nn.functional.scaled_dot_product_attention

    def recording(query, key, value, attn_mask=None, **kwargs):
        masks.append(attn_mask)
        return original(query, key, value, attn_mask=attn_mask, **kwargs)

    source = torch.tensor([[5, 6, 7, 8]])
    cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
    with torch.no_grad():
        model(input_ids=source, decoder_input_ids=torch.tensor([[2, 9]]), **{CACHE_NAME: cache}, use_cache=True)
        torch.nn.functional.scaled_dot_product_attention = recording
        try:
            model(input_ids=source, decoder_input_ids=torch.tensor([[10]]), **{CACHE_NAME: cache}, use_cache=True)
        finally:
            torch.nn.functional.scaled_dot_product_attention = original
    assert masks and all(mask is None for mask in masks)


@pytest.mark.parametrize("padded_prefix", [False, True])
def test_a_decoder_prompt_is_prefilled_into_a_static_cache(padded_prefix):
    # Several target tokens in the first step (a forced prefix), with a left-padded row and its mask or without.
    model = _model()
    source, _ = batch_with_padding()
    prefix = torch.tensor([[2, 7, 8], [0, 2, 9] if padded_prefix else [2, 9, 10], [2, 11, 12]])
    arguments = dict(decoder_input_ids=prefix, max_new_tokens=6, do_sample=False, **SCORED)
    if padded_prefix:
        arguments["decoder_attention_mask"] = prefix.ne(0).long()
    growing, _ = assert_generations_agree(  # the same tokens but at near-ties (see the first test)
        model,
        lambda: model.generate(source, **arguments),
        lambda: model.generate(source, cache_implementation="static", **arguments),
    )
    assert growing.sequences.shape == (3, 9)


@pytest.mark.parametrize("target_mask", [False, True])
def test_generate_prepares_a_four_dimensional_mask_only_for_a_target_mask(target_mask):
    # Without target padding the decoder builds its causal mask over the cache's slots itself; a 2-D target mask,
    # which grows at every step, becomes generate's prepared 4-D mask of one shape for the whole generation.
    model = _model()
    source, _ = batch_with_padding()
    prefix = torch.tensor([[2, 7], [0, 2], [2, 11]])
    arguments = dict(decoder_input_ids=prefix, max_new_tokens=5, do_sample=False, cache_implementation="static")
    if target_mask:
        arguments["decoder_attention_mask"] = prefix.ne(0).long()
    seen = []
    decoder_forward = model.model.decoder.forward

    def recording(*args, attention_mask=None, **kwargs):
        seen.append(None if attention_mask is None else tuple(attention_mask.shape))
        return decoder_forward(*args, attention_mask=attention_mask, **kwargs)

    model.model.decoder.forward = recording
    model.generate(source, **arguments)
    assert len(seen) == 5
    if target_mask:
        slots = seen[0][-1]
        assert seen == [(3, 1, 2, slots)] + [(3, 1, 1, slots)] * 4
    else:
        assert seen == [None] * 5
