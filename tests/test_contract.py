"""What transformers and the tools around it assume of a model: saved configs with extra attributes load,
weights can be given as a (partial) state dict, beam search caches have one row per beam, the classifier's outputs
carry what its head computed, tracing keeps the masks, and malformed inputs get a clear error."""

from __future__ import annotations

import json
import logging as std_logging

import numpy as np
import pytest
import torch
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
    Trainer,
    TrainingArguments,
)
from transformers.testing_utils import CaptureLogger
from transformers.utils import logging

from hf_transformer import (
    TransformerConfig,
    TransformerForConditionalGeneration,
    TransformerForMaskedLM,
    TransformerForSequenceClassification,
    TransformerModel,
)
from hf_transformer.checkpoint import CheckpointError
from hf_transformer.generation import CACHE_NAME, TransformerGenerationMixin
from hf_transformer.modeling_transformer import EncoderSequenceClassifierOutput, sinusoid_table
from tests.helpers.models import batch_with_padding, tiny_config

# --- 1. configs with attributes added before saving ------------------------------------------------------------


def test_a_config_attribute_added_before_saving_survives_loading_and_another_save(tmp_path):
    config = tiny_config()
    # What transformers' `set_config_for_less_flaky_test` sets on a config before its mixins build, save and reload.
    for name in ("rms_norm_eps", "norm_eps", "layer_norm_eps", "batch_norm_eps"):
        setattr(config, name, 1.0)
    model = TransformerForConditionalGeneration(config)
    model.config.my_note = "x"  # an attribute added to a built model's config
    model.save_pretrained(tmp_path / "first")

    reloaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "first")
    assert reloaded.config.my_note == "x" and reloaded.config.norm_eps == 1.0
    reloaded.save_pretrained(tmp_path / "second")
    assert json.loads((tmp_path / "second" / "config.json").read_text())["my_note"] == "x"
    for load in (
        lambda: AutoConfig.from_pretrained(tmp_path / "second"),
        lambda: TransformerConfig.from_pretrained(tmp_path / "second"),
        lambda: TransformerConfig.from_json_file(tmp_path / "second" / "config.json"),
        lambda: TransformerConfig.from_dict(json.loads((tmp_path / "second" / "config.json").read_text())),
    ):
        assert load().my_note == "x"


def test_a_typo_typed_into_the_constructor_still_raises_and_one_read_from_a_file_is_flagged(tmp_path):
    with pytest.raises(ValueError, match=r"`dropuot` \(did you mean `dropout`\?\)"):
        TransformerConfig(dropuot=0.3)
    saved = tiny_config().to_dict()
    saved["dropuot"] = 0.3
    (tmp_path / "config.json").write_text(json.dumps(saved))
    logger = std_logging.getLogger("hf_transformer.configuration_transformer")
    with CaptureLogger(logger) as captured:
        config = AutoConfig.from_pretrained(tmp_path)
    assert config.dropuot == 0.3 and config.dropout == 0.0
    assert "`dropuot` (did you mean `dropout`?)" in captured.out


def test_the_keys_the_base_class_owns_are_read_off_the_base_class():
    # Not a hand-kept list: every key a default PretrainedConfig writes, and its settable properties.
    from transformers import PretrainedConfig

    from hf_transformer.configuration_transformer import _BASE_KEYS

    assert set(PretrainedConfig().to_dict()) <= _BASE_KEYS
    assert {"num_labels", "attn_implementation", "torch_dtype", "output_attentions", "name_or_path"} <= _BASE_KEYS
    config = TransformerConfig(num_labels=3, attn_implementation="eager", output_attentions=True)
    assert config.num_labels == 3 and config._attn_implementation == "eager" and config.output_attentions


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"layer_norm_position": "pre"}, "layer_norm_position 'post' when built, 'pre' now"),
        ({"activation_function": "gelu"}, "activation_function 'relu' when built, 'gelu' now"),
        ({"layer_norm_eps": 1.0}, "layer_norm_epsilon 1e-12 when built, 1.0 now"),
        ({"classifier_pooling": "mean"}, "classifier_pooling 'first' when built, 'mean' now"),
        ({"d_model": 64}, "d_model 32 when built, 64 now"),
    ],
)
def test_a_config_changed_after_the_model_was_built_is_not_saved_as_the_model_s(change, named, tmp_path):
    """The modules keep what they were built with: a folder saved with the changed config would load as another model
    (another layout or arithmetic, silently) or not at all (other sizes). Refused before anything is written; the
    settings the modules read at each call, and a resized vocabulary, change with the model and save."""
    model = TransformerForSequenceClassification(
        tiny_config(num_labels=2, layer_norm_position="post", activation_function="relu", classifier_pooling="first")
    )
    for name, value in change.items():
        setattr(model.config, name, value)
    with pytest.raises(ValueError, match=f"the config was changed after the model was built \\({named}\\)"):
        model.save_pretrained(tmp_path / "changed")
    assert not (tmp_path / "changed").exists()
    model = TransformerForSequenceClassification(tiny_config(num_labels=2))
    model.config.id2label = {0: "negative", 1: "positive"}
    model.config.dropout = 0.3
    model.resize_token_embeddings(model.config.vocab_size + 8)
    model.save_pretrained(tmp_path / "saved")
    assert AutoModelForSequenceClassification.from_pretrained(tmp_path / "saved").config.id2label[1] == "positive"


def test_a_generation_config_transformers_would_refuse_is_refused_before_the_folder_changes(tmp_path):
    # transformers checks a changed generation config as it writes it, after config.json and before the weights: a
    # resized model saved over its own folder would be left with the new config beside the old weights.
    model = TransformerForConditionalGeneration(tiny_config())
    model.save_pretrained(tmp_path)
    before = {path.name: path.read_bytes() for path in tmp_path.iterdir()}
    model.resize_token_embeddings(model.config.vocab_size + 8)
    model.generation_config.num_beams, model.generation_config.num_return_sequences = 2, 3
    with pytest.raises(ValueError, match="num_return_sequences"):
        model.save_pretrained(tmp_path)
    assert {path.name: path.read_bytes() for path in tmp_path.iterdir()} == before
    AutoModelForSeq2SeqLM.from_pretrained(tmp_path)


def test_tokenizer_class_is_a_setting_transformers_reads_and_it_is_saved(tmp_path):
    # PretrainedConfig no longer declares `tokenizer_class`, but AutoTokenizer still reads it off a model's config
    # when tokenizer_config.json names no class: typed into the constructor it is kept, and a near miss still raises.
    config = tiny_config(tokenizer_class="PreTrainedTokenizerFast")
    config.save_pretrained(tmp_path)
    assert AutoConfig.from_pretrained(tmp_path).tokenizer_class == "PreTrainedTokenizerFast"
    with pytest.raises(ValueError, match=r"`tokenizer_clas` \(did you mean `tokenizer_class`\?\)"):
        TransformerConfig(tokenizer_clas="PreTrainedTokenizerFast")


# --- 2. weights given as a state dict, re-initialised mismatched weights -----------------------------------------


def _assert_initialised(model: TransformerForConditionalGeneration) -> None:
    for name, tensor in model.state_dict().items():
        assert torch.isfinite(tensor).all(), name
    table = model.model.encoder.embeddings.position_table
    torch.testing.assert_close(table, sinusoid_table(*table.shape))
    tokens = model.get_input_embeddings().weight
    assert tokens.std().item() == pytest.approx(model.config.d_model**-0.5, rel=0.2)  # `_init_weights`' table
    assert model.model.encoder.layers[0].self_attn_sublayer.layer_norm.weight.eq(1).all()


def test_from_pretrained_with_an_empty_state_dict_initialises_every_weight():
    config = tiny_config()
    model = TransformerForConditionalGeneration.from_pretrained(None, config=config, state_dict={})
    _assert_initialised(model)
    source, target = batch_with_padding()
    assert torch.isfinite(model(input_ids=source, decoder_input_ids=target).logits).all()


def test_from_pretrained_with_a_partial_state_dict_loads_what_it_has_and_initialises_the_rest():
    config = tiny_config()
    reference = TransformerForConditionalGeneration(config)
    partial = {k: v for k, v in reference.state_dict().items() if k.startswith("model.encoder.layers.0.")}
    model = TransformerForConditionalGeneration.from_pretrained(None, config=config, state_dict=partial)
    for name, tensor in partial.items():
        assert torch.equal(model.state_dict()[name], tensor), name
    decoder_weight = "model.decoder.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(model.state_dict()[decoder_weight], reference.state_dict()[decoder_weight])
    _assert_initialised(model)


def test_a_state_dict_with_non_finite_values_is_still_refused():
    config = tiny_config()
    weights = TransformerForConditionalGeneration(config).state_dict()
    weights["model.encoder.layers.0.feed_forward.fc1.weight"][0, 0] = float("nan")
    with pytest.raises(CheckpointError, match="NaN or infinite"):
        TransformerForConditionalGeneration.from_pretrained(None, config=config, state_dict=weights)


def test_a_folder_missing_weights_of_its_own_architecture_is_still_refused(tmp_path):
    from safetensors.torch import load_file, save_file

    TransformerForConditionalGeneration(tiny_config()).save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    del weights["model.decoder.layers.1.feed_forward.fc2.weight"]
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match="weights missing"):
        AutoModelForSeq2SeqLM.from_pretrained(tmp_path)


@pytest.fixture
def transformers_warnings():
    """Another test (or a script it runs in this process) may have quietened transformers' logging."""
    verbosity = logging.get_verbosity()
    logging.set_verbosity_warning()
    yield
    logging.set_verbosity(verbosity)


def test_mismatched_sizes_are_reinitialised_with_transformers_report(tmp_path, transformers_warnings):
    # transformers' own `test_load_with_mismatched_shapes`, on this model.
    config = tiny_config()
    TransformerForSequenceClassification(config).save_pretrained(tmp_path)
    config.vocab_size = 10
    with pytest.raises(RuntimeError):
        AutoModelForSequenceClassification.from_pretrained(tmp_path, num_labels=42)
    with pytest.raises(RuntimeError):
        AutoModel.from_pretrained(tmp_path, config=config)
    logger = logging.get_logger("transformers.modeling_utils")
    with CaptureLogger(logger) as captured:
        classifier = AutoModelForSequenceClassification.from_pretrained(
            tmp_path, num_labels=42, ignore_mismatched_sizes=True
        )
    assert "Reinit due to size mismatch" in captured.out
    source, _ = batch_with_padding()
    assert classifier(input_ids=source).logits.shape == (3, 42)
    assert classifier.classifier.weight.abs().max() < 1.0  # initialised by `_init_weights`, not left empty
    with CaptureLogger(logger) as captured:
        model = AutoModel.from_pretrained(tmp_path, config=config, ignore_mismatched_sizes=True)
    assert "Reinit due to size mismatch" in captured.out
    ids = torch.randint(4, 10, (2, 6))
    assert torch.isfinite(model(input_ids=ids, decoder_input_ids=ids).last_hidden_state).all()


def test_folders_of_other_heads_still_load_as_fine_tuning_starts(tmp_path):
    TransformerForConditionalGeneration(tiny_config()).save_pretrained(tmp_path / "seq2seq")
    classifier = AutoModelForSequenceClassification.from_pretrained(tmp_path / "seq2seq")
    classifier.save_pretrained(tmp_path / "classifier")
    assert isinstance(AutoModel.from_pretrained(tmp_path / "classifier"), TransformerModel)


def test_masked_lm_head_follows_the_output_conventions_and_its_encoder_starts_a_classifier(tmp_path):
    config = tiny_config()
    model = TransformerForMaskedLM.from_pretrained(None, config=config, state_dict={}).eval()
    _assert_initialised(model)
    assert model.output_bias.eq(0).all()
    source, _ = batch_with_padding()
    with torch.no_grad():
        out = model(input_ids=source, output_hidden_states=True, output_attentions=True)
        assert out.logits.shape == (*source.shape, config.vocab_size)
        assert len(out.hidden_states) == config.encoder_layers + 1 and len(out.attentions) == config.encoder_layers
        labels = torch.full_like(source, -100)
        labels[0, 1], labels[2, 0] = 7, 5
        loss, logits = model(input_ids=source, labels=labels, return_dict=False)[:2]
    assert logits.shape == (2, config.vocab_size)  # the predicted positions only
    predicted = labels != -100
    torch.testing.assert_close(logits, out.logits[predicted])
    torch.testing.assert_close(loss, torch.nn.functional.cross_entropy(out.logits[predicted], labels[predicted]))

    model.save_pretrained(tmp_path / "mlm")
    assert type(AutoModelForMaskedLM.from_pretrained(tmp_path / "mlm")) is TransformerForMaskedLM
    classifier = AutoModelForSequenceClassification.from_pretrained(tmp_path / "mlm")  # a fine-tuning start
    encoder = {name: tensor for name, tensor in model.state_dict().items() if name.startswith("model.encoder.")}
    for name, tensor in encoder.items():
        assert torch.equal(classifier.state_dict()[name], tensor), name


# --- 3. beam search caches ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_beam_search_cache_has_one_row_per_beam_in_both_caches(attention):
    config = tiny_config(attn_implementation=attention)
    model = TransformerForConditionalGeneration(config).eval()
    source, _ = batch_with_padding()
    beams = 4
    out = model.generate(
        source, attention_mask=source.ne(0), num_beams=beams, max_new_tokens=4, min_new_tokens=4,
        return_dict_in_generate=True, do_sample=False,
    )  # fmt: skip
    cache = out.past_key_values
    heads, head_dim = config.num_attention_heads, config.head_dim
    for layer in range(config.decoder_layers):
        self_keys = cache.self_attention_cache.layers[layer].keys
        cross = cache.cross_attention_cache.layers[layer]
        assert self_keys.shape[:2] == (3 * beams, heads) and self_keys.shape[-1] == head_dim
        assert cross.keys.shape == cross.values.shape == (3 * beams, heads, source.shape[1], head_dim)
        # The contents transformers' own path gives: the encoder output of each input, projected, in every beam.
        encoded = model.get_encoder()(input_ids=source, attention_mask=source.ne(0)).last_hidden_state
        attention = model.model.decoder.layers[layer].cross_attn
        expected = attention.k_proj(encoded).view(3, -1, heads, head_dim).transpose(1, 2)
        torch.testing.assert_close(cross.keys, expected.repeat_interleave(beams, dim=0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cache_implementation", [None, "static"])
def test_generation_continues_from_the_cache_of_an_earlier_call(cache_implementation):
    # generate(..., decoder_input_ids=out.sequences, cache=out.cache) must go on as one longer call would: the
    # decoder input is the whole target so far, and the cache holds all of it but the last token.
    torch.manual_seed(0)
    model = TransformerForConditionalGeneration(tiny_config(vocab_size=60)).eval()
    source, _ = batch_with_padding()
    settings = dict(
        attention_mask=source.ne(0), do_sample=False, eos_token_id=None, return_dict_in_generate=True,
        output_scores=True,
    )  # fmt: skip
    whole = model.generate(source, max_new_tokens=9, cache_implementation=cache_implementation, **settings)
    first = model.generate(source, max_new_tokens=4, cache_implementation=cache_implementation, **settings)
    assert getattr(first, CACHE_NAME).get_seq_length() == 4  # the start token and three of the four new ones
    rest = model.generate(
        source,
        decoder_input_ids=first.sequences,
        **{CACHE_NAME: getattr(first, CACHE_NAME)},
        max_new_tokens=5,
        **settings,
    )
    assert torch.equal(rest.sequences, whole.sequences)
    torch.testing.assert_close(torch.stack(first.scores + rest.scores), torch.stack(whole.scores))
    assert getattr(rest, CACHE_NAME).get_seq_length() == getattr(whole, CACHE_NAME).get_seq_length() == 9
    if cache_implementation is None:
        # The whole target with a mask as long (transformers' own cut): the same.
        first = model.generate(source, max_new_tokens=4, **settings)
        masked = model.generate(
            source, decoder_input_ids=first.sequences, decoder_attention_mask=torch.ones_like(first.sequences),
            **{CACHE_NAME: getattr(first, CACHE_NAME)}, max_new_tokens=5, **settings,
        )  # fmt: skip
        assert torch.equal(masked.sequences, whole.sequences)


def test_decoder_rows_must_match_the_encoder_rows():
    model = TransformerForConditionalGeneration(tiny_config()).eval()
    source, target = batch_with_padding()
    encoded = model.get_encoder()(input_ids=source).last_hidden_state
    with pytest.raises(ValueError, match="The decoder has 6 rows but the encoder output 3"):
        model(encoder_outputs=(encoded,), decoder_input_ids=target.repeat_interleave(2, dim=0))


# --- 4. the classifier's outputs -------------------------------------------------------------------------------


@pytest.mark.parametrize("pooling", ["mean", "max", "first"])
def test_encoder_classifier_returns_the_encoder_states_and_attentions(pooling):
    config = tiny_config(classifier_pooling=pooling)
    model = TransformerForSequenceClassification(config).eval()
    source, _ = batch_with_padding()
    out = model(input_ids=source, output_hidden_states=True, output_attentions=True)
    assert isinstance(out, EncoderSequenceClassifierOutput)
    encoder = model.get_encoder()(input_ids=source, output_hidden_states=True, output_attentions=True)
    torch.testing.assert_close(out.last_hidden_state, encoder.last_hidden_state)
    assert len(out.hidden_states) == config.encoder_layers + 1 and len(out.attentions) == config.encoder_layers
    for got, expected in zip(out.hidden_states + out.attentions, encoder.hidden_states + encoder.attentions):
        torch.testing.assert_close(got, expected)
    assert out.attentions[0].shape == (3, config.num_attention_heads, 7, 7)
    plain = model(input_ids=source)
    assert plain.hidden_states is None and plain.attentions is None and plain.last_hidden_state is not None


def test_decoder_read_out_classifier_keeps_its_seq2seq_output():
    config = tiny_config(classifier_pooling="decoder")
    model = TransformerForSequenceClassification(config).eval()
    source, _ = batch_with_padding()
    out = model(input_ids=source, output_hidden_states=True, output_attentions=True)
    assert out.encoder_last_hidden_state.shape == (3, 7, config.d_model)
    assert len(out.decoder_hidden_states) == config.decoder_layers + 1
    assert out.decoder_hidden_states[0].shape == (3, 1, config.d_model)
    assert len(out.cross_attentions) == config.decoder_layers and out.cross_attentions[0].shape[-2:] == (1, 7)
    assert len(out.encoder_hidden_states) == config.encoder_layers + 1
    assert model(input_ids=source).encoder_last_hidden_state is not None


@pytest.mark.parametrize("head", ["classifier", "seq2seq"])
def test_trainer_predictions_hold_only_the_logits(head, tmp_path):
    from datasets import Dataset

    source, target = batch_with_padding()
    if head == "classifier":
        model = TransformerForSequenceClassification(tiny_config())
        rows = {"input_ids": source.tolist(), "labels": [0, 1, 0]}
    else:
        model = TransformerForConditionalGeneration(tiny_config())
        rows = {"input_ids": source.tolist(), "labels": target.masked_fill(target == 0, -100).tolist()}
    args = TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True, per_device_eval_batch_size=3)
    prediction = Trainer(model=model, args=args).predict(Dataset.from_dict(rows))
    assert isinstance(prediction.predictions, np.ndarray)  # the logits alone, no encoder states beside them
    assert prediction.predictions.shape[0] == 3


# --- 6. tracing ----------------------------------------------------------------------------------------------------


class _Logits(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, decoder_input_ids):
        return self.model(
            input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids, use_cache=False
        ).logits


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
def test_a_model_traced_on_unpadded_inputs_keeps_the_padding_masks():
    # What `torch.onnx.export(..., dynamo=False)` records: a trace of one example input.
    model = _Logits(TransformerForConditionalGeneration(tiny_config()).eval())
    source, target = batch_with_padding()
    unpadded_source, unpadded_target = torch.full_like(source, 5), torch.full_like(target, 6)
    with torch.no_grad():
        traced = torch.jit.trace(model, (unpadded_source, unpadded_source.ne(0).long(), unpadded_target))
        expected = model(source, source.ne(0).long(), target)
        torch.testing.assert_close(traced(source, source.ne(0).long(), target), expected, rtol=1e-5, atol=1e-5)


# --- 7. malformed inputs --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        (torch.zeros(0, 4, dtype=torch.long), r"`input_ids` has shape \(0, 4\): an empty batch"),
        (torch.zeros(1, 0, dtype=torch.long), r"`input_ids` has shape \(1, 0\): an empty batch or an empty sequence"),
        (torch.tensor([5, 6, 7]), r"`input_ids` must be 2-D .* shape \(3,\); for one sequence use `input_ids\[None\]`"),
        ([[5, 6, 7]], r"`input_ids` must be a torch.Tensor .* got a list"),
        (torch.tensor([[5.0, 6.0]]), r"`input_ids` must hold \(batch, length\) token ids .*, got dtype torch.float"),
        (torch.tensor([[5, 6]], dtype=torch.uint8), r"`input_ids` must hold .* int32, got dtype torch.uint8"),
    ],
)  # fmt: skip
def test_malformed_ids_are_named(ids, message):
    seq2seq = TransformerForConditionalGeneration(tiny_config()).eval()
    classifier = TransformerForSequenceClassification(tiny_config()).eval()
    with pytest.raises(ValueError, match=message):
        seq2seq(input_ids=ids, decoder_input_ids=torch.tensor([[2, 5]]))
    with pytest.raises(ValueError, match=message):
        classifier(input_ids=ids)
    with pytest.raises(ValueError, match=message.replace("input_ids", "decoder_input_ids")):
        seq2seq(input_ids=torch.tensor([[5, 6]]), decoder_input_ids=ids)


def test_one_dimensional_ids_with_a_mask_blame_the_ids():
    model = TransformerForConditionalGeneration(tiny_config()).eval()
    ids = torch.tensor([5, 6, 7])
    with pytest.raises(ValueError, match=r"^`input_ids` must be 2-D"):
        model(input_ids=ids, attention_mask=torch.ones_like(ids), decoder_input_ids=torch.tensor([[2]]))


def test_malformed_embeddings_are_named():
    model = TransformerForConditionalGeneration(tiny_config()).eval()
    with pytest.raises(ValueError, match=r"`inputs_embeds` must be 3-D"):
        model(inputs_embeds=torch.zeros(3, 32), decoder_input_ids=torch.tensor([[2]]))
    with pytest.raises(ValueError, match=r"`inputs_embeds` must hold .* got dtype torch.int64"):
        model(inputs_embeds=torch.zeros(1, 3, 32, dtype=torch.long), decoder_input_ids=torch.tensor([[2]]))
    with pytest.raises(ValueError, match="the embeddings given have 16 features; this model's tokens have 32"):
        model(inputs_embeds=torch.zeros(1, 3, 16), decoder_input_ids=torch.tensor([[2]]))
    with pytest.raises(ValueError, match="the embeddings given have 16 features"):
        model(input_ids=torch.tensor([[5, 6]]), decoder_inputs_embeds=torch.zeros(1, 2, 16))


def test_skipped_cross_attention_reordering_gives_transformers_results(monkeypatch):
    model = TransformerForConditionalGeneration(tiny_config()).eval()
    source, _ = batch_with_padding()
    arguments = dict(
        attention_mask=source.ne(0), num_beams=3, num_return_sequences=2, max_new_tokens=6,
        return_dict_in_generate=True, output_scores=True, do_sample=False,
    )  # fmt: skip
    skipping = model.generate(source, **arguments)
    monkeypatch.delattr(TransformerGenerationMixin, "_reorder_cache")  # transformers reorders both caches
    reordering = model.generate(source, **arguments)
    assert torch.equal(skipping.sequences, reordering.sequences)
    torch.testing.assert_close(skipping.sequences_scores, reordering.sequences_scores, rtol=0, atol=0)
    for got, expected in zip(skipping.past_key_values.cross_attention_cache.layers,
                             reordering.past_key_values.cross_attention_cache.layers):  # fmt: skip
        assert torch.equal(got.keys, expected.keys) and torch.equal(got.values, expected.values)


def test_a_reordering_across_inputs_is_applied_to_the_cross_attention_cache():
    model = TransformerForConditionalGeneration(tiny_config()).eval()
    source, target = batch_with_padding()
    rows = torch.tensor([0, 0, 1, 1, 2, 2])  # two beams per input
    with torch.no_grad():
        out = model(input_ids=source[rows], attention_mask=source.ne(0)[rows], decoder_input_ids=target[rows, :1])
    cache = out.past_key_values
    before = [layer.keys.clone() for layer in cache.cross_attention_cache.layers]
    within = torch.tensor([1, 0, 3, 2, 4, 5])  # beams swap inside their inputs: nothing changes
    model._reorder_cache(cache, within)
    for layer, keys in zip(cache.cross_attention_cache.layers, before):
        assert torch.equal(layer.keys, keys)
    across = torch.tensor([4, 4, 0, 1, 2, 3])  # rows move to other inputs: they must follow
    model._reorder_cache(cache, across)
    for layer, keys in zip(cache.cross_attention_cache.layers, before):
        assert torch.equal(layer.keys, keys[across])
    assert torch.equal(cache.self_attention_cache.layers[0].keys.shape[0] * torch.ones(1), torch.tensor([6.0]))
    # An in-place edit of the cached tensors is seen: the equal-row runs are found again.
    layer = cache.cross_attention_cache.layers[0]
    layer.keys[1] += 1.0
    edited = layer.keys.clone()
    model._reorder_cache(cache, within)
    assert torch.equal(layer.keys, edited[within])


@pytest.mark.parametrize("decoder", ["model", "model-static-cache", "ensemble"])
def test_beam_search_under_inference_mode_decodes_as_under_no_grad(decoder):
    # torch.inference_mode is how many callers wrap generate; its tensors keep no version counter, which the
    # cross-attention reordering check must not read.
    from hf_transformer.ensemble import TransformerEnsemble

    model = TransformerForConditionalGeneration(tiny_config()).eval()
    if decoder == "ensemble":
        model = TransformerEnsemble([model, TransformerForConditionalGeneration(tiny_config()).eval()])
    source, _ = batch_with_padding()
    arguments = dict(
        attention_mask=source.ne(0), num_beams=3, num_return_sequences=2, max_new_tokens=6,
        return_dict_in_generate=True, output_scores=True, do_sample=False,
    )  # fmt: skip
    if decoder == "model-static-cache":
        arguments["cache_implementation"] = "static"
    with torch.no_grad():
        expected = model.generate(source, **arguments)
    with torch.inference_mode():
        got = model.generate(source, **arguments)
    assert torch.equal(got.sequences, expected.sequences)
    torch.testing.assert_close(got.sequences_scores, expected.sequences_scores, rtol=0, atol=0)


def test_an_edited_cross_attention_cache_made_under_inference_mode_is_reordered():
    model = TransformerForConditionalGeneration(tiny_config()).eval()
    source, target = batch_with_padding()
    rows = torch.tensor([0, 0, 1, 1, 2, 2])  # two beams per input
    within = torch.tensor([1, 0, 3, 2, 4, 5])  # beams swap inside their inputs
    with torch.inference_mode():
        out = model(input_ids=source[rows], attention_mask=source.ne(0)[rows], decoder_input_ids=target[rows, :1])
        cache = out.past_key_values
        layer = cache.cross_attention_cache.layers[0]
        before = layer.keys.clone()
        model._reorder_cache(cache, within)  # equal rows: nothing to move
        assert torch.equal(layer.keys, before)
        layer.keys[1] += 1.0  # an in-place edit no version counter records: rows 0 and 1 now differ
        edited = layer.keys.clone()
        model._reorder_cache(cache, within)
        assert torch.equal(layer.keys, edited[within])


@pytest.mark.parametrize("assistance", ["assistant_model", "prompt_lookup"])
def test_assisted_decoding_gives_greedy_search_tokens(assistance):
    # Assisted decoding feeds several candidate tokens over the cache at once and crops the cache back to the
    # accepted ones; with greedy verification the result is greedy search's (transformers takes one input a call).
    model = TransformerForConditionalGeneration(tiny_config()).eval()
    if assistance == "assistant_model":
        options = {"assistant_model": TransformerForConditionalGeneration(tiny_config()).eval()}
    else:
        options = {"prompt_lookup_num_tokens": 3}
    source, _ = batch_with_padding()
    for row in source:
        row = row[row.ne(0)][None]  # (1, S) without padding
        greedy = model.generate(row, max_new_tokens=12, do_sample=False)
        assisted = model.generate(row, max_new_tokens=12, do_sample=False, **options)
        assert torch.equal(assisted, greedy)


def test_encoder_classifier_output_answers_to_the_seq2seq_names_of_its_config():
    model = TransformerForSequenceClassification(tiny_config()).eval()
    source, _ = batch_with_padding()
    out = model(input_ids=source, output_hidden_states=True, output_attentions=True)
    assert model.config.is_encoder_decoder
    assert out.encoder_last_hidden_state is out.last_hidden_state
    assert out.encoder_hidden_states is out.hidden_states and out.encoder_attentions is out.attentions
    assert len(out.to_tuple()) == 4  # logits, hidden states, attentions, last hidden state: nothing twice


def test_a_config_rebuilt_from_its_dictionary_keeps_extra_attributes():
    config = tiny_config()
    config.my_note = "x"
    assert TransformerConfig(**config.to_dict()).my_note == "x"
