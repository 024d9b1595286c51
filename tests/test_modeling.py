import copy
import itertools
import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from hf_transformer import (
    TransformerForConditionalGeneration,
    TransformerForSequenceClassification,
    TransformerModel,
    speed,
)
from hf_transformer import modeling_transformer as modeling
from hf_transformer.generation import CACHE_NAME
from hf_transformer.modeling_transformer import shift_tokens_right, sinusoid_table
from tests.helpers.generation import SCORED, assert_generations_agree
from tests.helpers.models import batch_with_padding, record_calls, tiny_config


def with_attention(config, attn_implementation):
    """A model whose config is its own copy: the attention kernel is a setting of the config object."""
    return TransformerForConditionalGeneration._from_config(
        copy.deepcopy(config), attn_implementation=attn_implementation
    )


def seed_sinusoid_table(n_seq, d_hidn):
    """The tutorial's formula, written independently with numpy."""
    table = np.array([[pos / np.power(10000, 2 * (i // 2) / d_hidn) for i in range(d_hidn)] for pos in range(n_seq)])
    table[:, 0::2] = np.sin(table[:, 0::2])
    table[:, 1::2] = np.cos(table[:, 1::2])
    return torch.tensor(table, dtype=torch.float32)


def test_sinusoid_table_matches_the_seed_formula():
    table = sinusoid_table(33, 16)
    assert table.shape == (33, 16)
    torch.testing.assert_close(table, seed_sinusoid_table(33, 16), atol=1e-6, rtol=0)


def test_sinusoid_positions_start_at_one_and_padding_uses_row_zero(config):
    model = TransformerModel(config).eval()
    embeddings = model.encoder.embeddings
    ids = torch.tensor([[5, 6, 0]])
    out = embeddings(ids, None, ids.ne(0))
    table = embeddings.position_table
    token = embeddings.embed_tokens.weight
    torch.testing.assert_close(out[0, 0], token[5] + table[1])
    torch.testing.assert_close(out[0, 1], token[6] + table[2])
    torch.testing.assert_close(out[0, 2], token[0] + table[0])
    assert table.shape == (config.max_position_embeddings + 1, config.d_model)
    assert not any("position_table" in name for name, _ in model.named_parameters())


OPTION_GRID = list(itertools.product(["post", "pre"], ["sinusoidal", "learned"], [False, True], [False, True]))


@pytest.mark.parametrize("index, options", list(enumerate(OPTION_GRID)))
def test_every_option_trains_with_finite_gradients(index, options):
    layer_norm_position, position_type, embedding_layer_norm, scale_embedding = options
    share, tie = [(True, True), (False, True), (True, False), (False, False)][index % 4]
    config = tiny_config(
        layer_norm_position=layer_norm_position,
        position_embedding_type=position_type,
        embedding_layer_norm=embedding_layer_norm,
        scale_embedding=scale_embedding,
        activation_function=["relu", "gelu"][index % 2],
        share_embeddings=share,
        tie_word_embeddings=tie,
        dropout=0.1,
        label_smoothing=0.1 * (index % 2),
    )
    model = TransformerForConditionalGeneration(config).train()
    source, target = batch_with_padding()
    labels = target.masked_fill(target == 0, -100)
    out = model(input_ids=source, labels=labels)
    assert torch.isfinite(out.loss)
    out.loss.backward()
    grads = {name: p.grad for name, p in model.named_parameters()}
    assert all(g is not None and torch.isfinite(g).all() for g in grads.values()), [
        n for n, g in grads.items() if g is None
    ]
    assert (model.lm_head.weight is model.model.decoder.embeddings.embed_tokens.weight) == tie
    shared = model.model.decoder.embeddings.embed_tokens is model.model.encoder.embeddings.embed_tokens
    assert shared == share
    assert (model.model.encoder.layer_norm is not None) == (layer_norm_position == "pre")


def test_output_attentions_are_per_head_probabilities(config):
    model = TransformerForConditionalGeneration(config).eval()
    source, target = batch_with_padding()
    out = model(input_ids=source, decoder_input_ids=target, output_attentions=True, output_hidden_states=True)
    batch, heads = source.shape[0], config.num_attention_heads
    assert len(out.encoder_attentions) == config.encoder_layers
    assert out.encoder_attentions[0].shape == (batch, heads, source.shape[1], source.shape[1])
    assert out.decoder_attentions[0].shape == (batch, heads, target.shape[1], target.shape[1])
    assert out.cross_attentions[0].shape == (batch, heads, target.shape[1], source.shape[1])
    assert len(out.encoder_hidden_states) == config.encoder_layers + 1
    for probs in (*out.encoder_attentions, *out.decoder_attentions, *out.cross_attentions):
        torch.testing.assert_close(probs.sum(-1), torch.ones(probs.shape[:-1]))
    # padded source keys get no weight; later target tokens get no weight
    source_pad = source.eq(0)[:, None, None, :]
    assert out.encoder_attentions[0].masked_select(source_pad.expand_as(out.encoder_attentions[0])).max() == 0
    assert out.cross_attentions[1].masked_select(source_pad.expand_as(out.cross_attentions[1])).max() == 0
    future = torch.triu(torch.ones(5, 5, dtype=torch.bool), diagonal=1)
    assert out.decoder_attentions[0][..., future].max() == 0


def test_eager_and_sdpa_agree(config):
    source, target = batch_with_padding()
    eager = with_attention(config, "eager").eval()
    sdpa = with_attention(config, "sdpa").eval()
    sdpa.load_state_dict(eager.state_dict())
    assert eager.config._attn_implementation == "eager" and sdpa.config._attn_implementation == "sdpa"
    a = eager(input_ids=source, decoder_input_ids=target)
    b = sdpa(input_ids=source, decoder_input_ids=target)
    torch.testing.assert_close(a.logits, b.logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(a.encoder_last_hidden_state, b.encoder_last_hidden_state, atol=1e-5, rtol=0)


def test_eager_and_sdpa_agree_on_a_prepared_mask_whose_row_sees_no_key(config):
    # A caller's 4-D boolean decoder mask (as generate prepares one) where a left-padded query sees no key: eager
    # attended uniformly and sdpa gave zeros, so the two kernels (and output_attentions on sdpa) disagreed.
    source, _ = batch_with_padding()
    target = torch.tensor([[2, 5, 6, 7], [0, 2, 8, 9], [2, 10, 11, 12]])
    causal = torch.tril(torch.ones(4, 4, dtype=torch.bool))
    mask = causal[None, None] & target.ne(0)[:, None, None, :]  # (3, 1, 4, 4): row 1's first query sees nothing
    assert not mask[1, 0, 0].any()
    eager = with_attention(config, "eager").eval()
    sdpa = with_attention(config, "sdpa").eval()
    sdpa.load_state_dict(eager.state_dict())
    with torch.no_grad():
        a = eager(input_ids=source, decoder_input_ids=target, decoder_attention_mask=mask).logits
        b = sdpa(input_ids=source, decoder_input_ids=target, decoder_attention_mask=mask).logits
        c = sdpa(input_ids=source, decoder_input_ids=target, decoder_attention_mask=mask, output_attentions=True)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    torch.testing.assert_close(c.logits, b, atol=1e-5, rtol=0)


def test_set_attn_implementation_changes_the_attention_that_runs(monkeypatch):
    # `model.set_attn_implementation(name)` after loading: "eager" (the paper's function), "sdpa" (torch's kernel) or
    # any function registered with transformers' AttentionInterface, and back; every attention call of the model
    # (encoder self, decoder self and cross: 3 per layer pair) goes where the setting says, with the same logits.
    from transformers import AttentionInterface

    recorded = []

    def recording_attention(module, query, key, value, attention_mask, **kwargs):
        recorded.append(module)
        return modeling.scaled_dot_product_attention(module, query, key, value, attention_mask, **kwargs)

    AttentionInterface.register("hf_transformer_recording_test", recording_attention)
    sdpa_calls = record_calls(monkeypatch, F, "scaled_dot_product_attention")
    model = TransformerForConditionalGeneration(tiny_config()).eval()
    source, target = batch_with_padding()
    attention_calls = 3 * model.config.decoder_layers  # tiny_config: as many encoder as decoder layers

    def logits_and_calls(implementation):
        model.set_attn_implementation(implementation)
        assert model.config._attn_implementation == implementation
        recorded.clear(), sdpa_calls.clear()
        with torch.no_grad():
            logits = model(input_ids=source, attention_mask=source.ne(0), decoder_input_ids=target).logits
        return logits, len(recorded), len(sdpa_calls)

    sdpa, recorded_by_sdpa, sdpa_by_sdpa = logits_and_calls("sdpa")
    assert (recorded_by_sdpa, sdpa_by_sdpa) == (0, attention_calls)
    custom, recorded_by_custom, sdpa_by_custom = logits_and_calls("hf_transformer_recording_test")
    assert (recorded_by_custom, sdpa_by_custom) == (attention_calls, 0)
    eager, recorded_by_eager, sdpa_by_eager = logits_and_calls("eager")
    assert (recorded_by_eager, sdpa_by_eager) == (0, 0)
    torch.testing.assert_close(custom, sdpa, atol=1e-5, rtol=0)
    torch.testing.assert_close(eager, sdpa, atol=1e-5, rtol=0)
    assert logits_and_calls("sdpa")[1:] == (0, attention_calls)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_padded_source_tokens_have_no_effect(config, attn):
    model = with_attention(config, attn).eval()
    source, target = batch_with_padding()
    base = model(input_ids=source, decoder_input_ids=target)
    # extra padding columns
    longer = F.pad(source, (0, 4), value=0)
    padded = model(input_ids=longer, decoder_input_ids=target)
    torch.testing.assert_close(padded.logits, base.logits, atol=1e-5, rtol=0)
    real = source.ne(0)
    torch.testing.assert_close(
        padded.encoder_last_hidden_state[:, :7][real], base.encoder_last_hidden_state[real], atol=1e-5, rtol=0
    )
    # whatever sits under a zero attention mask is ignored
    mask = source.ne(0).long()
    garbage = source.masked_fill(mask == 0, 17)
    masked = model(input_ids=garbage, attention_mask=mask, decoder_input_ids=target)
    torch.testing.assert_close(masked.logits, base.logits, atol=1e-5, rtol=0)


def left_padded(source: torch.Tensor) -> torch.Tensor:
    """Each row's real tokens moved to the end of the row, padding (id 0) before them."""
    return torch.stack([torch.cat([row[row.eq(0)], row[row.ne(0)]]) for row in source])


@pytest.mark.parametrize("position_type", ["sinusoidal", "learned"])
def test_a_left_padded_source_reads_as_the_right_padded_one(position_type):
    # Each row's real tokens are numbered from its first real token: left padding (a tokenizer with
    # padding_side="left") changes nothing, where numbering by place shifted every position of the padded rows.
    config = tiny_config(position_embedding_type=position_type)
    model = TransformerForConditionalGeneration(config).eval()
    source, target = batch_with_padding()
    left = left_padded(source)
    assert not torch.equal(left, source)
    right_out = model(input_ids=source, decoder_input_ids=target)
    left_out = model(input_ids=left, attention_mask=left.ne(0).long(), decoder_input_ids=target)
    torch.testing.assert_close(left_out.logits, right_out.logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(
        left_out.encoder_last_hidden_state[left.ne(0)],
        right_out.encoder_last_hidden_state[source.ne(0)],
        atol=1e-5,
        rtol=0,
    )
    # The same tokens, up to a genuine near-tie that rounding of the other padding layout may part.
    assert_generations_agree(
        model,
        lambda: model.generate(source, attention_mask=source.ne(0).long(), max_new_tokens=6, **SCORED),
        lambda: model.generate(left, attention_mask=left.ne(0).long(), max_new_tokens=6, **SCORED),
    )


@pytest.mark.parametrize("pooling", ["mean", "max", "first", "decoder"])
def test_every_pooling_reads_a_left_padded_source_as_the_right_padded_one(pooling):
    model = TransformerForSequenceClassification(tiny_config(classifier_pooling=pooling, num_labels=3)).eval()
    source, _ = batch_with_padding()
    left = left_padded(source)
    torch.testing.assert_close(model(input_ids=left).logits, model(input_ids=source).logits, atol=1e-5, rtol=0)


def test_mask_derived_from_pad_id_equals_explicit_mask(config):
    model = TransformerForConditionalGeneration(config).eval()
    source, target = batch_with_padding()
    derived = model(input_ids=source, decoder_input_ids=target)
    explicit = model(input_ids=source, attention_mask=source.ne(0).long(), decoder_input_ids=target)
    torch.testing.assert_close(derived.logits, explicit.logits, atol=0, rtol=0)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_decoder_never_sees_later_positions(config, attn):
    model = with_attention(config, attn).eval()
    source, target = batch_with_padding()
    base = model(input_ids=source, decoder_input_ids=target).logits
    changed_target = target.clone()
    changed_target[:, 3:] = 30
    changed = model(input_ids=source, decoder_input_ids=changed_target).logits
    torch.testing.assert_close(changed[:, :3], base[:, :3], atol=1e-6, rtol=0)
    assert not torch.allclose(changed[:, 3:], base[:, 3:])


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_all_padding_row_gives_finite_outputs(config, attn):
    model = with_attention(config, attn).eval()
    source = torch.tensor([[5, 6, 3], [0, 0, 0]])
    target = torch.tensor([[2, 7], [2, 0]])
    out = model(input_ids=source, decoder_input_ids=target, output_hidden_states=True)
    assert torch.isfinite(out.logits).all() and torch.isfinite(out.encoder_last_hidden_state).all()
    alone = model(input_ids=source[:1], decoder_input_ids=target[:1])
    torch.testing.assert_close(out.logits[:1], alone.logits, atol=1e-5, rtol=0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(input_ids=source, decoder_input_ids=target)
    assert torch.isfinite(out.logits).all()


@pytest.mark.parametrize("cache_name", ["past_key_values", "cache"])
def test_cached_decoding_matches_full_forward(config, cache_name):
    # The cache goes in under either name (`cache` is transformers 5.24's) and comes out under the installed one.
    model = TransformerForConditionalGeneration(config).eval()
    source, target = batch_with_padding()
    full = model(input_ids=source, decoder_input_ids=target, use_cache=False).logits
    encoder_outputs = model.get_encoder()(input_ids=source)
    past, steps = None, []
    for t in range(target.shape[1]):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = model(
                encoder_outputs=encoder_outputs,
                attention_mask=source.ne(0),
                decoder_input_ids=target[:, t : t + 1],
                use_cache=True,
                **{cache_name: past},
            )
        renamed = [w for w in caught if issubclass(w.category, FutureWarning) and "`past_key_values`" in str(w.message)]
        # The old name warns once a cache is handed over, and only where transformers has renamed it (as its own
        # models do); the installed name never warns.
        assert len(renamed) == (past is not None and cache_name == "past_key_values" != CACHE_NAME)
        assert not renamed or renamed[0].filename == __file__  # the warning points at the caller
        past = getattr(out, CACHE_NAME)
        steps.append(out.logits)
    assert past.get_seq_length() == target.shape[1]
    with pytest.raises(ValueError, match="given twice"):
        model(encoder_outputs=encoder_outputs, decoder_input_ids=target[:, :1], past_key_values=past, cache=past)
    # positions of the padding in the targets differ from full decoding only where the target is padding
    real = target.ne(0)
    torch.testing.assert_close(torch.cat(steps, 1)[real], full[real], atol=1e-5, rtol=0)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("options", [dict(), dict(layer_norm_position="pre", position_embedding_type="learned")])
def test_generate_is_identical_with_and_without_cache(attn, options):
    # The cached step attends over its cache, the uncached one recomputes every position: different products, so
    # the scores agree to rounding and the tokens wherever the scores are not within rounding of a tie.
    config = tiny_config(**options)
    model = with_attention(config, attn).eval()
    source, _ = batch_with_padding()
    for settings in (
        dict(do_sample=False),
        dict(do_sample=False, num_beams=3),
        dict(num_beams=2, num_return_sequences=2),
        dict(do_sample=True, top_k=5),
    ):
        arguments = dict(max_new_tokens=10, **SCORED, **settings)
        cached, _ = assert_generations_agree(
            model,
            lambda arguments=arguments: model.generate(source, use_cache=True, **arguments),
            lambda arguments=arguments: model.generate(source, use_cache=False, **arguments),
            sampling_seed=3 if settings.get("do_sample") else None,
        )
        assert (cached.sequences[:, 0] == config.decoder_start_token_id).all()


def test_generate_returns_attentions_and_scores(config):
    model = TransformerForConditionalGeneration(config).eval()
    source, _ = batch_with_padding()
    out = model.generate(
        source,
        max_new_tokens=4,
        do_sample=False,
        output_attentions=True,
        output_scores=True,
        return_dict_in_generate=True,
    )
    assert len(out.scores) == out.sequences.shape[1] - 1
    assert out.cross_attentions[0][0].shape == (3, config.num_attention_heads, 1, source.shape[1])


def test_labels_are_shifted_into_decoder_inputs_and_loss_ignores_minus_100(config):
    model = TransformerForConditionalGeneration(config).eval()
    source, target = batch_with_padding()
    labels = torch.tensor([[20, 21, 22, 23, 3], [24, 3, -100, -100, -100], [25, 26, 27, 3, -100]])
    shifted = shift_tokens_right(labels, 0, 2)
    assert shifted.tolist() == [[2, 20, 21, 22, 23], [2, 24, 3, 0, 0], [2, 25, 26, 27, 3]]
    out = model(input_ids=source, labels=labels)
    explicit = model(input_ids=source, decoder_input_ids=shifted)
    torch.testing.assert_close(out.logits, explicit.logits)
    manual = F.cross_entropy(explicit.logits.reshape(-1, 40), labels.reshape(-1), ignore_index=-100)
    torch.testing.assert_close(out.loss, manual)
    # num_items_in_batch (gradient accumulation): the sum divided by the given count
    summed = F.cross_entropy(explicit.logits.reshape(-1, 40), labels.reshape(-1), ignore_index=-100, reduction="sum")
    accumulated = model(input_ids=source, labels=labels, num_items_in_batch=torch.tensor(40))
    torch.testing.assert_close(accumulated.loss, summed / 40)


def test_label_smoothing_is_applied():
    config = tiny_config(label_smoothing=0.1)
    model = TransformerForConditionalGeneration(config).eval()
    source, target = batch_with_padding()
    labels = target.masked_fill(target == 0, -100)
    out = model(input_ids=source, labels=labels)
    expected = F.cross_entropy(out.logits.reshape(-1, 40), labels.reshape(-1), ignore_index=-100, label_smoothing=0.1)
    plain = F.cross_entropy(out.logits.reshape(-1, 40), labels.reshape(-1), ignore_index=-100)
    torch.testing.assert_close(out.loss, expected)
    assert not torch.allclose(out.loss, plain)


@pytest.mark.parametrize(
    "overrides", [{}, {"label_smoothing": 0.1}, {"share_embeddings": False, "decoder_vocab_size": 33}]
)
@pytest.mark.parametrize("accumulated", [False, True])
def test_fused_output_loss_gives_the_loss_and_gradients_of_the_logits(overrides, accumulated, monkeypatch):
    monkeypatch.setattr(speed, "_LOGITS_PER_CHUNK", 40 * 4)  # 4 rows per chunk: several chunks, a ragged last
    source, target = batch_with_padding()
    labels = target.masked_fill(target == 0, -100)
    count = {"num_items_in_batch": torch.tensor(17)} if accumulated else {}
    results = []
    for fused in (True, False):
        torch.manual_seed(0)
        model = TransformerForConditionalGeneration(tiny_config(fused_output_loss=fused, **overrides)).train()
        out = model(input_ids=source, labels=labels, **count)
        assert (out.logits is None) == fused
        out.loss.backward()
        results.append((out.loss, {name: p.grad for name, p in model.named_parameters()}))
    (fused_loss, fused_grads), (loss, grads) = results
    torch.testing.assert_close(fused_loss, loss, atol=1e-6, rtol=1e-6)
    assert fused_grads.keys() == grads.keys()
    for name in grads:
        torch.testing.assert_close(fused_grads[name], grads[name], atol=1e-6, rtol=1e-5, msg=name)


def test_fused_output_loss_is_only_used_where_logits_are_not_wanted(config):
    model = TransformerForConditionalGeneration(config)
    source, target = batch_with_padding()
    labels = target.masked_fill(target == 0, -100)
    assert model.train()(input_ids=source, labels=labels).logits is None
    with torch.no_grad():
        assert model(input_ids=source, labels=labels).logits.shape == (3, 5, 40)
    assert model.eval()(input_ids=source, labels=labels).logits.shape == (3, 5, 40)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert model.train()(input_ids=source, labels=labels).logits is not None


@pytest.mark.parametrize("head", ["seq2seq", "masked-lm"])
def test_int32_labels_give_the_loss_of_int64_ones_on_every_path(head):
    # The fused training loss read int32 labels; the plain loss (evaluation, autocast) raised on them.
    from hf_transformer import TransformerForMaskedLM

    source, target = batch_with_padding()
    if head == "seq2seq":
        model_class, inputs, labels = TransformerForConditionalGeneration, {"input_ids": source}, target
    else:
        model_class, inputs, labels = TransformerForMaskedLM, {"input_ids": source}, source
    labels = labels.masked_fill(labels == 0, -100)
    torch.manual_seed(0)
    model = model_class(tiny_config())
    for training in (True, False):
        model.train(training)
        torch.manual_seed(1)
        expected = model(**inputs, labels=labels).loss
        torch.manual_seed(1)
        torch.testing.assert_close(model(**inputs, labels=labels.int()).loss, expected)


def test_the_fused_loss_gives_way_to_hooks_on_the_output_layer_and_to_second_order_gradients():
    # It reads the output weight without calling the layer: a hook there (pruning's recomputed weight, an offload,
    # a user's) would be skipped, so the plain path is taken; and its gradients are constants of the forward.
    source, target = batch_with_padding()
    labels = target.masked_fill(target == 0, -100)
    losses = []
    for fused in (True, False):
        torch.manual_seed(0)
        model = TransformerForConditionalGeneration(tiny_config(fused_output_loss=fused, tie_word_embeddings=False))
        model.lm_head.register_forward_hook(lambda module, inputs, output: output * 10.0)
        losses.append(model.train()(input_ids=source, labels=labels).loss)
    torch.testing.assert_close(losses[0], losses[1])
    hidden, weight = torch.randn(6, 8, requires_grad=True), torch.randn(11, 8, requires_grad=True)
    loss = speed.fused_linear_cross_entropy(hidden, weight, torch.tensor([1, 2, 3, -100, 5, 6]))
    with pytest.raises(RuntimeError, match="first-order gradients only.*fused_output_loss=False"):
        torch.autograd.grad(loss, weight, create_graph=True)
    assert torch.autograd.grad(loss, weight)[0].shape == weight.shape


@pytest.mark.parametrize("bad", [40, -2])
def test_fused_output_loss_rejects_labels_outside_the_vocabulary(config, bad):
    model = TransformerForConditionalGeneration(config).train()
    source, target = batch_with_padding()
    labels = target.clone()
    labels[1, 2] = bad  # the decoder reads valid ids: only the labels are wrong
    with pytest.raises(ValueError, match=r"labels.*\[0, 40\)"):
        model(input_ids=source, decoder_input_ids=target, labels=labels)


@pytest.mark.parametrize("pooling", ["mean", "max", "first", "decoder"])
def test_classification_pooling(pooling):
    config = tiny_config(classifier_pooling=pooling, num_labels=3)
    model = TransformerForSequenceClassification(config).eval()
    assert (model.model.decoder is not None) == (pooling == "decoder")
    source, _ = batch_with_padding()
    out = model(input_ids=source, labels=torch.tensor([0, 2, 1]))
    assert out.logits.shape == (3, 3) and torch.isfinite(out.loss)
    torch.testing.assert_close(out.loss, F.cross_entropy(out.logits, torch.tensor([0, 2, 1])))
    assert config.problem_type == "single_label_classification"
    if pooling != "first":  # the first token is never padding here; the others must ignore padding
        longer = F.pad(source, (0, 3), value=0)
        torch.testing.assert_close(model(input_ids=longer).logits, out.logits, atol=1e-5, rtol=0)
    out.loss.backward()


def test_classification_pooling_values():
    config = tiny_config(classifier_pooling="mean", num_labels=2)
    model = TransformerForSequenceClassification(config).eval()
    source, _ = batch_with_padding()
    states = model.get_encoder()(input_ids=source).last_hidden_state
    real = source.ne(0).unsqueeze(-1).float()
    mean = (states * real).sum(1) / real.sum(1)
    torch.testing.assert_close(model(input_ids=source).logits, model.classifier(mean))
    model.config.classifier_pooling = "max"
    maximum = states.masked_fill(real == 0, -1e30).max(1).values
    torch.testing.assert_close(model(input_ids=source).logits, model.classifier(maximum))


def test_classification_problem_types():
    source, _ = batch_with_padding()
    regression = TransformerForSequenceClassification(tiny_config(num_labels=1))
    out = regression(input_ids=source, labels=torch.tensor([0.5, -1.0, 2.0]))
    torch.testing.assert_close(out.loss, F.mse_loss(out.logits.squeeze(-1), torch.tensor([0.5, -1.0, 2.0])))
    multi = TransformerForSequenceClassification(tiny_config(num_labels=4))
    targets = torch.tensor([[1.0, 0, 1, 0], [0, 0, 0, 1], [1, 1, 1, 1]])
    out = multi(input_ids=source, labels=targets)
    torch.testing.assert_close(out.loss, F.binary_cross_entropy_with_logits(out.logits, targets))
    with pytest.raises(ValueError, match=r"`labels` must be in \[0, 2\) or -100 \(ignored\), got values from 0 to 2"):
        TransformerForSequenceClassification(tiny_config(num_labels=2))(
            input_ids=source, labels=torch.tensor([0, 1, 2])
        )


@pytest.mark.parametrize(
    "settings, labels, told",
    [
        (
            dict(num_labels=3),
            torch.tensor([[0, 1, 1], [1, 0, 0], [0, 0, 1]]),
            r"one integer class id per row.*\(3, 3\)",
        ),
        (dict(num_labels=3, problem_type="single_label_classification"), torch.tensor([0.0, 2, 1]), "torch.float32"),
        (dict(num_labels=3), torch.tensor([0, 1]), r"shape \(2,\)"),
        (
            dict(num_labels=3, problem_type="multi_label_classification"),
            torch.ones(3, 2),
            r"\(3, 3\).*got shape \(3, 2\)",
        ),
        (dict(num_labels=1), torch.ones(3, 2), r"regression takes labels of shape \(3, 1\)"),
    ],
    ids=["multi-hot-integers", "float-class-ids", "short-batch", "multi-label-width", "regression-width"],
)
def test_labels_the_problem_cannot_take_are_refused_and_leave_the_problem_type_open(settings, labels, told):
    model = TransformerForSequenceClassification(tiny_config(**settings))
    source, _ = batch_with_padding()
    with pytest.raises(ValueError, match=told):
        model(input_ids=source, labels=labels)
    assert model.config.problem_type == settings.get("problem_type")  # not fixed by labels that were refused


def test_gradient_checkpointing_gives_the_same_gradients(config):
    source, target = batch_with_padding()
    labels = target.masked_fill(target == 0, -100)
    model = TransformerForConditionalGeneration(config).train()
    model(input_ids=source, labels=labels).loss.backward()
    reference = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    model.activation_checkpointing_enable()
    assert model.is_activation_checkpointing
    model(input_ids=source, labels=labels).loss.backward()
    for name, param in model.named_parameters():
        torch.testing.assert_close(param.grad, reference[name], atol=1e-6, rtol=1e-5, msg=name)


def test_resize_token_embeddings_keeps_the_tie(config):
    model = TransformerForConditionalGeneration(config)
    old = model.get_input_embeddings().weight.detach().clone()
    model.resize_token_embeddings(48)
    assert model.config.vocab_size == model.config.decoder_vocab_size == 48
    assert model.lm_head.weight is model.get_input_embeddings().weight
    assert model.model.decoder.embeddings.embed_tokens is model.get_input_embeddings()
    torch.testing.assert_close(model.get_input_embeddings().weight[:40], old)
    out = model(input_ids=torch.tensor([[47, 3]]), decoder_input_ids=torch.tensor([[2, 46]]))
    assert out.logits.shape == (1, 2, 48)


def test_the_headless_model_resized_keeps_one_vocabulary_and_saves(config, tmp_path):
    # AutoModel loads the headless model: its config must name the resized vocabulary for both stacks, or
    # save_pretrained refuses it (share_embeddings needs one vocabulary).
    model = TransformerModel(config)
    model.resize_token_embeddings(48)
    assert model.config.vocab_size == model.config.decoder_vocab_size == 48
    model.save_pretrained(tmp_path)
    assert TransformerModel.from_pretrained(tmp_path).get_input_embeddings().weight.shape[0] == 48
    with pytest.raises(ValueError, match="resizes the one shared vocabulary"):
        TransformerModel(tiny_config(share_embeddings=False)).resize_token_embeddings(48)


@pytest.mark.parametrize("model_class", [TransformerForConditionalGeneration, TransformerForSequenceClassification])
def test_resizing_separate_encoder_and_decoder_tables_is_refused(model_class):
    # The decoder's own table would keep its size under a config naming the new one: a folder that cannot load.
    config = tiny_config(share_embeddings=False, classifier_pooling="decoder")
    with pytest.raises(ValueError, match="resizes the one shared vocabulary"):
        model_class(config).resize_token_embeddings(48)
    encoder_pooled = TransformerForSequenceClassification(tiny_config(share_embeddings=False))  # no decoder table
    encoder_pooled.resize_token_embeddings(48)
    assert encoder_pooled.get_input_embeddings().weight.shape[0] == encoder_pooled.config.vocab_size == 48


@pytest.mark.parametrize("share_embeddings", [True, False])
def test_encoder_and_decoder_reach_their_own_token_tables(share_embeddings):
    # As BART's: `model.get_encoder().get_input_embeddings()` is how code handed only a stack embeds its inputs.
    config = tiny_config(share_embeddings=share_embeddings)
    model = TransformerForConditionalGeneration(config).eval()
    encoder, decoder = model.get_encoder(), model.get_decoder()
    assert encoder.get_input_embeddings() is model.get_input_embeddings()
    assert (decoder.get_input_embeddings() is encoder.get_input_embeddings()) == share_embeddings
    source, target = batch_with_padding()
    by_ids = model(input_ids=source, decoder_input_ids=target, decoder_attention_mask=target.ne(0)).logits
    by_embeds = model(
        inputs_embeds=encoder.get_input_embeddings()(source),
        attention_mask=source.ne(0),
        decoder_inputs_embeds=decoder.get_input_embeddings()(target),
        decoder_attention_mask=target.ne(0),
    ).logits
    real = target.ne(0)
    torch.testing.assert_close(by_embeds[real], by_ids[real])

    replacement = torch.nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_token_id)
    decoder.set_input_embeddings(replacement)
    assert model.model.decoder.embeddings.embed_tokens is replacement
    assert encoder.get_input_embeddings() is not replacement


@pytest.mark.parametrize("position_type", ["sinusoidal", "learned"])
def test_embedding_tables_start_at_std_inverse_sqrt_d_model(position_type):
    config = tiny_config(d_model=64, vocab_size=400, position_embedding_type=position_type, max_position_embeddings=200)
    embeddings = TransformerForConditionalGeneration(config).model.encoder.embeddings
    assert abs(embeddings.embed_tokens.weight[1:].std().item() - 64**-0.5) < 0.01
    if position_type == "learned":
        assert abs(embeddings.position_embeddings.weight.std().item() - 64**-0.5) < 0.01
    else:
        torch.testing.assert_close(embeddings.position_table, sinusoid_table(201, 64))


def test_initialisation_follows_the_config():
    config = tiny_config(init_std=0.05, d_model=64, intermediate_size=256)
    model = TransformerForConditionalGeneration(config)
    weight = model.model.encoder.layers[0].feed_forward.fc1.weight
    assert abs(weight.std().item() - 0.05) < 0.005
    assert torch.count_nonzero(model.model.encoder.layers[0].self_attn.q_proj.bias) == 0
    assert torch.count_nonzero(model.get_input_embeddings().weight[config.pad_token_id]) == 0
    norm = model.model.encoder.layers[0].self_attn_sublayer.layer_norm
    assert torch.equal(norm.weight, torch.ones_like(norm.weight))


def test_xavier_initialisation_draws_the_layers_projections_and_leaves_the_rest(tmp_path):
    # init_method="xavier_uniform": U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out)), gain 1/sqrt(2) for the
    # query, key and value projections (fairseq), 1 for the attention output and the feed-forward layers.
    config = tiny_config(d_model=128, intermediate_size=512, num_attention_heads=4, init_method="xavier_uniform")
    model = TransformerForSequenceClassification(config)
    projections = {name: module for name, module in model.named_modules() if name.endswith(("_proj", "fc1", "fc2"))}
    assert len(projections) == 6 * config.encoder_layers  # the classifier's encoder: q, k, v, out, fc1, fc2
    for name, projection in projections.items():
        gain = 2**-0.5 if name.endswith(("q_proj", "k_proj", "v_proj")) else 1.0
        fan_out, fan_in = projection.weight.shape
        bound = gain * math.sqrt(6 / (fan_in + fan_out))
        assert projection.weight.abs().max().item() <= bound * (1 + 1e-6), name  # float32 rounding of the bound
        assert projection.weight.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.05), name
        assert torch.count_nonzero(projection.bias) == 0, name
    assert model.classifier.weight.std().item() == pytest.approx(config.init_std, rel=0.2)  # the head's own: normal
    assert model.get_input_embeddings().weight[1:].std().item() == pytest.approx(128**-0.5, rel=0.05)
    # The default draws every projection from N(0, init_std); loaded weights are never drawn again.
    normal = TransformerForSequenceClassification(tiny_config(d_model=128, intermediate_size=512))
    assert normal.model.encoder.layers[0].self_attn.out_proj.weight.std().item() == pytest.approx(0.02, rel=0.1)
    model.save_pretrained(tmp_path)
    loaded = TransformerForSequenceClassification.from_pretrained(tmp_path)
    assert loaded.config.init_method == "xavier_uniform"
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name


def test_scaled_embeddings_multiply_by_sqrt_d_model():
    config = tiny_config(scale_embedding=True)
    model = TransformerModel(config).eval()
    embeddings = model.encoder.embeddings
    ids = torch.tensor([[7]])
    out = embeddings(ids, None, ids.ne(0))
    torch.testing.assert_close(
        out[0, 0], embeddings.embed_tokens.weight[7] * math.sqrt(32) + embeddings.position_table[1]
    )


def test_bfloat16_autocast_forward_and_backward_stay_finite(config):
    model = TransformerForConditionalGeneration(config).train()
    source, target = batch_with_padding()
    labels = target.masked_fill(target == 0, -100)
    full_length = torch.randint(4, 40, (2, config.max_position_embeddings))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = (
            model(input_ids=source, labels=labels).loss + model(input_ids=full_length, labels=full_length[:, :24]).loss
        )
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())


def test_masks_are_left_out_only_where_they_hide_nothing():
    real = torch.ones(2, 5, dtype=torch.bool)
    padded = real.clone()
    padded[1, 3:] = False
    assert modeling._key_padding_mask(real) is None
    assert modeling._key_padding_mask(padded).shape == (2, 1, 1, 5)
    cpu = torch.device("cpu")
    assert modeling._causal_mask(1, 4, 5, None, cpu) is None  # a decoding step sees every key
    assert modeling._causal_mask(1, 4, 5, real, cpu) is None
    assert modeling._causal_mask(1, 4, 5, padded, cpu)[1, 0, 0].tolist() == [True] * 3 + [False] * 2
    causal = modeling._causal_mask(3, 2, 5, None, cpu)
    assert causal.tolist() == [[True] * 3 + [False] * 2, [True] * 4 + [False], [True] * 5]
    # A static cache: 7 slots read, 4 tokens cached (a 0-d tensor); the unwritten slots stay hidden.
    static_step = modeling._causal_mask(1, torch.tensor(4), 7, None, cpu)
    assert static_step.tolist() == [[True] * 5 + [False] * 2]
    assert modeling._causal_mask(1, 4, 7, None, cpu).tolist() == [[True] * 5 + [False] * 2]


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_inverted_dropout_drops_at_rate_p_scales_the_rest_and_routes_gradients(p):
    x = torch.rand(200, 500) + 0.5
    x.requires_grad_(True)
    y = speed.inverted_dropout(x, p, training=True)
    kept = y != 0
    assert abs((~kept).float().mean().item() - p) < 0.01  # 100k draws: a few standard deviations
    torch.testing.assert_close(y[kept], x.detach()[kept] / (1 - p))
    y.sum().backward()
    torch.testing.assert_close(x.grad, kept.float() / (1 - p))
    assert not torch.equal(kept, speed.inverted_dropout(x, p, training=True) != 0)  # fresh draws each call
    assert speed.inverted_dropout(x, p, training=False) is x
    assert speed.inverted_dropout(x, 0.0, training=True) is x
    half = speed.inverted_dropout(x.detach().bfloat16(), p, training=True)  # the byte mask keeps the dtype
    assert half.dtype == torch.bfloat16 and 0 < (half == 0).float().mean().item() < 2 * p


def test_inverted_dropout_draws_are_independent_at_every_offset_of_a_word():
    """Four draws share each 64-bit word of the generator: each offset must drop at rate p, independently."""
    p = 0.2
    x = torch.ones(301, 333)  # 100,233 elements: not a multiple of four
    dropped = (speed.inverted_dropout(x, p, training=True) == 0).flatten().float()
    for offset in range(4):
        assert abs(dropped[offset::4].mean().item() - p) < 0.01  # 25k draws each: about 5 standard deviations
    both = (dropped[:-1] * dropped[1:]).mean().item()
    assert abs(both - p * p) < 0.004  # neighbours in a word or across words: P(both dropped) = p^2


@pytest.mark.parametrize("layer_norm_position", ["post", "pre"])
def test_every_dropout_applies_in_training_and_none_changes_anything_otherwise(monkeypatch, layer_norm_position):
    called = record_calls(monkeypatch, speed.Dropout, "forward")
    source, target = batch_with_padding()

    def run(model):
        called.clear()
        return model(input_ids=source, decoder_input_ids=target).logits

    with_dropout = tiny_config(layer_norm_position=layer_norm_position, dropout=0.2, activation_dropout=0.2)
    model = TransformerForConditionalGeneration(with_dropout).train()
    first = run(model)
    dropouts = [m for m in model.modules() if isinstance(m, speed.Dropout)]
    # Embeddings (2), each encoder sub-layer and its feed-forward activation (2 x 3), each decoder one (2 x 4).
    assert len(dropouts) == 2 + 2 * 3 + 2 * 4
    assert {id(m) for m in called} == {id(m) for m in dropouts}
    assert not torch.equal(first, run(model))  # fresh masks
    model.eval()
    evaluated = run(model)
    assert torch.equal(evaluated, run(model))
    undropped = TransformerForConditionalGeneration(tiny_config(layer_norm_position=layer_norm_position)).eval()
    undropped.load_state_dict(model.state_dict())
    assert torch.equal(evaluated, run(undropped))  # in evaluation every dropout is the identity

    without = TransformerForConditionalGeneration(tiny_config(layer_norm_position=layer_norm_position)).train()
    without.load_state_dict(model.state_dict())
    trained_without_dropout = run(without)
    assert called and all(m.p == 0.0 for m in called)  # p = 0 in training: the identity
    torch.testing.assert_close(trained_without_dropout, evaluated, rtol=0, atol=0)
