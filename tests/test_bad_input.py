import pytest
import torch

from hf_transformer import (
    TransformerForConditionalGeneration,
    TransformerForMaskedLM,
    TransformerForSequenceClassification,
    TransformerModel,
)
from tests.helpers.models import batch_with_padding


@pytest.fixture
def model(config):
    return TransformerForConditionalGeneration(config).eval()


def test_token_id_beyond_the_vocabulary(model):
    source, target = batch_with_padding()
    source[0, 1] = 40
    with pytest.raises(ValueError, match=r"Token id 40 is outside the vocabulary \[0, 40\)"):
        model(input_ids=source, decoder_input_ids=target)


def test_negative_token_id(model):
    source, target = batch_with_padding()
    target[1, 1] = -3
    with pytest.raises(ValueError, match="Token id -3"):
        model(input_ids=source, decoder_input_ids=target)


@pytest.mark.parametrize(
    ("options", "told"),
    [
        ({"forced_eos_token_id": 40}, "`forced_eos_token_id` 40 is not a token of the output vocabulary of 40"),
        ({"forced_bos_token_id": -1}, "`forced_bos_token_id` -1 is not a token of the output vocabulary of 40"),
        ({"eos_token_id": [2, 99]}, r"`eos_token_id` \[2, 99\] is not a token of the output vocabulary of 40"),
        ({"num_beams": 3, "num_return_sequences": 0}, "`num_return_sequences` must be an integer of at least 1, got 0"),
    ],
)
def test_generate_refuses_tokens_outside_the_output_vocabulary_and_no_sequences(model, options, told):
    # transformers' logits processors would fail by an index out of range at the first step (or, for zero
    # sequences, by max() of nothing); given in the call or saved in the generation config alike.
    source, _ = batch_with_padding()
    with pytest.raises(ValueError, match=told):
        model.generate(source, max_new_tokens=3, **options)
    for name, value in options.items():
        setattr(model.generation_config, name, value)
    with pytest.raises(ValueError, match=told):
        model.generate(source, max_new_tokens=3)


def test_source_longer_than_the_position_table(model):
    source = torch.full((1, 25), 5)
    with pytest.raises(ValueError, match="Sequence length 25 exceeds the position table of 24"):
        model(input_ids=source, decoder_input_ids=torch.tensor([[2]]))


def test_target_longer_than_the_position_table(config):
    config.decoder_max_position_embeddings = 6
    model = TransformerForConditionalGeneration(config).eval()
    source, _ = batch_with_padding()
    with pytest.raises(ValueError, match="Sequence length 7 exceeds the position table of 6"):
        model(input_ids=source, decoder_input_ids=torch.full((3, 7), 5))


@pytest.mark.parametrize(
    ("settings", "told"),
    [
        (dict(max_new_tokens=10, min_new_tokens=10), "`max_new_tokens`=10 .* `max_new_tokens`=6"),
        (dict(max_length=12, min_length=12), "`max_length`=12 .* `max_length`=7"),
        (dict(max_new_tokens=10, min_new_tokens=10, num_beams=2), "`max_new_tokens`=10 .* `max_new_tokens`=6"),
    ],
)
def test_generate_past_the_decoder_position_table_stops_at_its_end_and_says_so(config, settings, told):
    # A 6-position decoder reads the start token and 5 generated ones; the 6th generated token is never read back.
    config.decoder_max_position_embeddings = 6
    model = TransformerForConditionalGeneration(config).eval()
    source, _ = batch_with_padding()
    with pytest.warns(UserWarning, match=f"{told}, the most it holds"):
        capped = model.generate(source, do_sample=False, **settings)
    beams = settings.get("num_beams", 1)
    expected = model.generate(source, max_new_tokens=6, min_new_tokens=6, do_sample=False, num_beams=beams)
    assert capped.shape == (3, 7) and torch.equal(capped, expected)


def test_generate_within_the_decoder_position_table_is_left_alone(config, recwarn):
    config.decoder_max_position_embeddings = 6
    model = TransformerForConditionalGeneration(config).eval()
    source, _ = batch_with_padding()
    assert model.generate(source, max_new_tokens=6, min_new_tokens=6, do_sample=False).shape == (3, 7)
    prompt = torch.full((3, 3), 2)  # three decoder tokens given: room for four new ones
    assert model.generate(source, decoder_input_ids=prompt, max_new_tokens=4, min_new_tokens=4).shape == (3, 7)
    assert not [w for w in recwarn if "position table" in str(w.message)]
    with pytest.warns(UserWarning, match="`max_new_tokens`=5 .* `max_new_tokens`=4, the most"):
        assert model.generate(source, decoder_input_ids=prompt, max_new_tokens=5, min_new_tokens=5).shape == (3, 7)
    with pytest.raises(ValueError, match="`decoder_input_ids` has 7 tokens, which leaves no room .* of 6 positions"):
        model.generate(source, decoder_input_ids=torch.full((3, 7), 2), max_new_tokens=2)


def test_attention_mask_shape_must_match_the_ids(model):
    source, target = batch_with_padding()
    with pytest.raises(ValueError, match=r"`attention_mask` has shape \(3, 6\).*\(3, 7\)"):
        model(input_ids=source, attention_mask=torch.ones(3, 6), decoder_input_ids=target)
    with pytest.raises(ValueError, match="decoder_attention_mask"):
        model(input_ids=source, decoder_input_ids=target, decoder_attention_mask=torch.ones(3, 4))


def test_attention_mask_shape_checked_by_the_classifier(config):
    classifier = TransformerForSequenceClassification(config)
    source, _ = batch_with_padding()
    with pytest.raises(ValueError, match="attention_mask"):
        classifier(input_ids=source, attention_mask=torch.ones(2, 7))


def test_an_additive_mask_is_refused_instead_of_read_inverted(model):
    source, target = batch_with_padding()
    additive = torch.zeros(source.shape).masked_fill(source.eq(0), float("-inf"))  # 0 real, -inf padding
    with pytest.raises(ValueError, match="`attention_mask` must hold 1 for real tokens and 0 for padding"):
        model(input_ids=source, attention_mask=additive, decoder_input_ids=target)
    with pytest.raises(ValueError, match="`decoder_attention_mask` must hold 1"):
        model(input_ids=source, decoder_input_ids=target, decoder_attention_mask=2 * target.ne(0).long())


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_the_decoder_reads_an_encoder_mask_of_ints_or_floats_as_its_booleans(model, attn_implementation):
    # The mask as transformers' tokenizers give it (int64 0/1), and as floats, to the decoder called on its own.
    model.set_attn_implementation(attn_implementation)
    source, target = batch_with_padding()
    is_real = source.ne(0)
    with torch.no_grad():
        encoded = model.get_encoder()(input_ids=source, attention_mask=is_real).last_hidden_state
        decoded = [
            model.get_decoder()(input_ids=target, encoder_hidden_states=encoded, encoder_attention_mask=mask)[0]
            for mask in (is_real, is_real.long(), is_real.float())
        ]
        whole = model.model(input_ids=source, decoder_input_ids=target).last_hidden_state
    for hidden_states in decoded:
        torch.testing.assert_close(hidden_states, whole)
    with pytest.raises(ValueError, match=r"`encoder_attention_mask` has shape \(3, 6\)"):
        model.get_decoder()(input_ids=target, encoder_hidden_states=encoded, encoder_attention_mask=is_real[:, :6])


def test_masked_token_labels_of_another_shape_or_kind_are_named(config):
    model = TransformerForMaskedLM(config)
    source, _ = batch_with_padding()
    labels = torch.full_like(source, -100)
    labels[:, 0] = 5
    assert model(input_ids=source, labels=labels).loss is not None
    for wrong in (labels[:, :5], labels.float()):
        with pytest.raises(ValueError, match="`labels` must be integer token ids"):
            model(input_ids=source, labels=wrong)


def test_missing_inputs_are_named(model):
    source, _ = batch_with_padding()
    with pytest.raises(ValueError, match="decoder_input_ids"):
        model.model(input_ids=source)
    with pytest.raises(ValueError, match="exactly one of `input_ids` and `inputs_embeds`"):
        model.get_encoder()()


def test_labels_shape_must_match_the_decoder_inputs(model):
    source, target = batch_with_padding()
    with pytest.raises(ValueError, match="labels"):
        model(input_ids=source, decoder_input_ids=target, labels=target[:, :3])


@pytest.mark.parametrize(
    "training, fused", [(False, True), (True, False), (True, True)], ids=["eval", "plain", "fused"]
)
@pytest.mark.parametrize("bad", [40, -1])
def test_token_labels_outside_the_vocabulary_are_named_in_every_loss_path(config, training, fused, bad):
    # Evaluation and the plain loss went to cross-entropy's "Target 40 is out of bounds"; the fused one checked.
    config.fused_output_loss = fused
    source, target = batch_with_padding()
    labels = target.clone()
    labels[0, 1] = bad
    labels[1, -1] = -100  # ignored, as a collator pads
    seq2seq = TransformerForConditionalGeneration(config).train(training)
    named = f"from {bad} to" if bad < 0 else f"from 0 to {bad}\\."  # the offending end of the range
    with pytest.raises(ValueError, match=rf"`labels` must be in \[0, 40\) or -100 \(ignored\), got values {named}"):
        seq2seq(input_ids=source, decoder_input_ids=target, labels=labels)
    masked = TransformerForMaskedLM(config).train(training)
    masked_labels = torch.full_like(source, -100)
    masked_labels[0, 0] = bad
    with pytest.raises(ValueError, match=r"`labels` must be in \[0, 40\) or -100"):
        masked(input_ids=source, labels=masked_labels)
    # -100 alone is no error.
    assert torch.isfinite(seq2seq(input_ids=source, decoder_input_ids=target, labels=target).loss)


@pytest.mark.parametrize(
    "model_class, misspelt, meant",
    [
        (TransformerForConditionalGeneration, "attention_masks", "attention_mask"),
        (TransformerForConditionalGeneration, "lables", "labels"),
        (TransformerForConditionalGeneration, "past_key_value", "past_key_values"),
        (TransformerForConditionalGeneration, "decoder_attention_masks", "decoder_attention_mask"),
        (TransformerModel, "encoder_attention_mask", "attention_mask"),
        (TransformerForSequenceClassification, "output_hidden_state", "output_hidden_states"),
        (TransformerForMaskedLM, "label", "labels"),
    ],
)
def test_a_misspelt_argument_raises_instead_of_being_ignored(config, model_class, misspelt, meant):
    # The forwards take **kwargs for what transformers and its tools pass beside the model's own arguments; a
    # near-miss of one of those arguments is a typo, and ignoring it would, say, leave a mask unapplied.
    model = model_class(config).eval()
    source, target = batch_with_padding()
    inputs = (
        dict(input_ids=source, decoder_input_ids=target)
        if model_class in (TransformerForConditionalGeneration, TransformerModel)
        else dict(input_ids=source)
    )
    with pytest.raises(TypeError, match=rf"unexpected keyword argument '{misspelt}' \(did you mean '{meant}'\?\)"):
        model(**inputs, **{misspelt: target})


def test_what_transformers_and_its_tools_pass_beside_the_arguments_is_still_accepted(config):
    from transformers.utils import TransformersKwargs

    model = TransformerForConditionalGeneration(config).eval()
    source, target = batch_with_padding()
    expected = model(input_ids=source, decoder_input_ids=target).logits
    extras = dict.fromkeys([*TransformersKwargs.__annotations__, "position_ids", "cache_position", "token_type_ids"])
    extras.pop("num_items_in_batch")  # an argument of this forward, used by the loss
    extras.pop("output_attentions"), extras.pop("output_hidden_states")
    assert torch.equal(model(input_ids=source, decoder_input_ids=target, **extras).logits, expected)
