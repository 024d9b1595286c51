import json
import warnings

import pytest
import torch
from transformers import AutoConfig

from hf_transformer import TransformerConfig, TransformerForConditionalGeneration, TransformerModel
from tests.helpers.models import tiny_config


def settings(config: TransformerConfig) -> dict:
    return {k: v for k, v in config.to_dict().items() if k != "_name_or_path"}


SEED_CONFIG_JSON = {
    "n_enc_vocab": 8007,
    "n_dec_vocab": 8007,
    "n_enc_seq": 256,
    "n_dec_seq": 256,
    "n_layer": 6,
    "d_hidn": 256,
    "i_pad": 0,
    "d_ff": 1024,
    "n_head": 4,
    "d_head": 64,
    "dropout": 0.1,
    "layer_norm_epsilon": 1e-12,
}


def test_seed_config_json_builds_and_reads_in_both_spellings():
    config = TransformerConfig(**SEED_CONFIG_JSON)
    for seed_name, value in SEED_CONFIG_JSON.items():
        assert getattr(config, seed_name) == value, seed_name
    assert (config.vocab_size, config.decoder_vocab_size) == (8007, 8007)
    assert config.hidden_size == config.d_model == 256
    assert config.num_attention_heads == 4 and config.head_dim == 64
    assert config.num_hidden_layers == config.encoder_layers == config.decoder_layers == 6
    assert config.max_position_embeddings == 256 and config.decoder_max_position_embeddings == 256
    assert config.intermediate_size == 1024 and config.pad_token_id == 0
    assert config.is_encoder_decoder and config.decoder_start_token_id == config.bos_token_id


def test_seed_and_hf_spellings_give_the_same_config():
    seed = TransformerConfig(
        d_hidn=64,
        n_head=8,
        d_ff=128,
        n_layer=3,
        n_enc_vocab=100,
        n_dec_vocab=100,
        n_enc_seq=32,
        n_dec_seq=40,
        i_pad=1,
        bos_token_id=2,
    )
    hf = TransformerConfig(
        hidden_size=64,
        num_attention_heads=8,
        intermediate_size=128,
        num_hidden_layers=3,
        vocab_size=100,
        decoder_vocab_size=100,
        max_position_embeddings=32,
        decoder_max_position_embeddings=40,
        pad_token_id=1,
        bos_token_id=2,
    )
    assert seed.to_dict() == hf.to_dict()


def test_round_trip_through_config_json(tmp_path):
    config = TransformerConfig(**SEED_CONFIG_JSON, layer_norm_position="pre", position_embedding_type="learned")
    config.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["model_type"] == "hf_transformer"
    reloaded = AutoConfig.from_pretrained(tmp_path)
    assert type(reloaded) is TransformerConfig
    assert settings(reloaded) == settings(config)
    assert reloaded.d_hidn == 256 and reloaded.layer_norm_position == "pre"
    # a config.json written in the seeds' own names loads too
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "hf_transformer", **SEED_CONFIG_JSON}))
    assert settings(AutoConfig.from_pretrained(tmp_path)) == settings(TransformerConfig(**SEED_CONFIG_JSON))


def test_encoder_and_decoder_depths_may_differ():
    config = TransformerConfig(vocab_size=30, d_model=16, n_head=2, d_ff=32, encoder_layers=3, decoder_layers=1)
    model = TransformerForConditionalGeneration(config)
    assert len(model.model.encoder.layers) == 3 and len(model.model.decoder.layers) == 1
    assert config.get_text_config(decoder=True).num_hidden_layers == 1
    with pytest.raises(AttributeError, match="ambiguous"):
        _ = config.n_layer
    out = model.generate(torch.tensor([[5, 6, 3]]), max_new_tokens=3, do_sample=False)
    assert out.shape == (1, 4)


def test_head_size_is_independent_of_model_size():
    config = TransformerConfig(vocab_size=30, d_model=20, n_head=3, d_head=7, d_ff=32, n_layer=1)
    model = TransformerModel(config)
    attention = model.encoder.layers[0].self_attn
    assert attention.q_proj.weight.shape == (21, 20) and attention.out_proj.weight.shape == (20, 21)
    out = model(input_ids=torch.tensor([[4, 5, 6]]), decoder_input_ids=torch.tensor([[2, 7]]))
    assert out.last_hidden_state.shape == (1, 2, 20)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(d_model=0), "d_model"),
        (dict(vocab_size=-5), "vocab_size"),
        (dict(n_layer=0), "encoder_layers"),
        (dict(n_head=0), "num_attention_heads"),
        (dict(d_ff=-1), "intermediate_size"),
        (dict(d_head=0), "head_dim"),
        (dict(n_enc_seq=0), "max_position_embeddings"),
        (dict(d_model=30, n_head=4), "d_model"),
        (dict(dropout=1.0), "dropout"),
        (dict(dropout=-0.1), "dropout"),
        (dict(attention_dropout=1.5), "attention_dropout"),
        (dict(label_smoothing=1.0), "label_smoothing"),
        (dict(layer_norm_position="middle"), "layer_norm_position"),
        (dict(position_embedding_type="rotary"), "position_embedding_type"),
        (dict(activation_function="swish"), "activation_function"),
        (dict(classifier_pooling="cls"), "classifier_pooling"),
        (dict(init_method="xavier"), "init_method"),
        (dict(n_enc_vocab=100, n_dec_vocab=90), "share_embeddings"),
        (dict(layer_norm_epsilon=0.0), "layer_norm_epsilon"),
        (dict(scale_embedding="yes"), "scale_embedding"),
        (dict(pad_token_id=9000), "pad_token_id"),
        (dict(decoder_start_token_id=0), "decoder_start_token_id"),
        (dict(d_hidn=64, d_model=128), "d_hidn"),
        (dict(d_hidn=64, d_model=256), "`d_hidn`=64 conflicts with `d_model`=256"),  # the field at its default
        (dict(n_layer=2, decoder_layers=6), "n_layer.*`decoder_layers`=6"),
        (dict(n_layer=2, decoder_layers=3), "n_layer.*`decoder_layers`=3"),
        (dict(num_hidden_layers=2, n_layer=4), "num_hidden_layers.*conflicts"),
        (dict(problem_type="multi_label"), "problem_type"),
        (dict(is_encoder_decoder="no"), "is_encoder_decoder"),
        (dict(eos_token_id="3"), "eos_token_id"),
        (dict(pad_token_id=None), "pad_token_id"),
    ],
)
def test_invalid_values_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        TransformerConfig(**kwargs)


@pytest.mark.parametrize(
    "name, value, allowed, named",
    [
        ("dropout", 1.5, 0.3, "(?s)field 'dropout'.*in \\[0, 1\\)"),
        # a seed name, checked as the setting it names
        ("d_hidn", 0, 64, "(?s)field 'd_model'.*positive.*assigned as `d_hidn`"),
        ("n_layer", 2.5, 3, "(?s)field 'encoder_layers'.*expected int"),
        ("activation_function", "swish", "relu", "(?s)field 'activation_function'.*'relu', 'gelu'"),
        ("problem_type", "regresion", "regression", "(?s)field 'problem_type'"),
        ("tie_word_embeddings", "yes", False, "(?s)field 'tie_word_embeddings'.*expected bool"),
        ("pad_token_id", None, 1, "(?s)field 'pad_token_id'"),
        ("eos_token_id", -1, 5, "(?s)field 'eos_token_id'.*token id"),
    ],
)
def test_an_assignment_is_checked_as_the_constructor_checks_it(name, value, allowed, named):
    config = TransformerConfig(vocab_size=40, d_model=32, num_attention_heads=4)
    before = getattr(config, name)
    with pytest.raises(ValueError, match=named):
        setattr(config, name, value)
    assert getattr(config, name) == before  # refused, not half-applied
    setattr(config, name, allowed)
    assert getattr(config, name) == allowed


def test_transformers_can_set_and_restore_num_hidden_layers():
    # Assigned after construction, `num_hidden_layers` is BART's alias of `encoder_layers`: transformers sets it
    # for a while and restores what it read (assisted decoding with `assistant_early_exit`), which must give back
    # the config it started from, decoder depth included.
    config = TransformerConfig(vocab_size=40, d_model=32, num_attention_heads=4, encoder_layers=2, decoder_layers=3)
    original = config.num_hidden_layers
    config.num_hidden_layers = 1
    config.num_hidden_layers = original
    assert (config.encoder_layers, config.decoder_layers) == (2, 3)


def test_assigning_none_to_a_derived_setting_derives_it_again():
    config = TransformerConfig(d_model=64, num_attention_heads=4, dropout=0.2, attention_dropout=0.0, head_dim=8)
    config.attention_dropout = None
    config.head_dim = None
    assert config.attention_dropout == 0.2 and config.head_dim == 16
    # With its source None too, there is nothing to derive from: refused by name, as the constructor refuses it.
    config.bos_token_id = None
    with pytest.raises(ValueError, match="`decoder_start_token_id` set to None"):
        config.decoder_start_token_id = None
    config.decoder_start_token_id = 1
    assert "_deriving_defaults" not in config.to_dict()


def test_settings_given_to_from_pretrained_are_checked_as_a_person_s(tmp_path):
    from transformers import AutoConfig, AutoModel

    TransformerConfig(vocab_size=40, d_model=32, num_attention_heads=4, n_layer=1).save_pretrained(tmp_path)
    assert TransformerConfig.from_pretrained(tmp_path, dropout=0.3).dropout == 0.3
    for load in (TransformerConfig.from_pretrained, AutoConfig.from_pretrained, AutoModel.from_pretrained):
        with pytest.raises(ValueError, match=r"no setting `dropuot` \(did you mean `dropout`\?\)"):
            load(tmp_path, dropuot=0.3)  # transformers would drop it without a word
    with pytest.raises(ValueError, match="needs one vocabulary"):  # beside the saved decoder_vocab_size of 40
        TransformerConfig.from_pretrained(tmp_path, vocab_size=50)
    with pytest.raises(ValueError, match="equals `pad_token_id`"):
        TransformerConfig.from_pretrained(tmp_path, pad_token_id=TransformerConfig().decoder_start_token_id)
    # What is no setting of a config (a loading option) is left to the caller, as transformers leaves it.
    config, unused = AutoConfig.from_pretrained(tmp_path, return_unused_kwargs=True, low_cpu_mem_usage=True)
    assert unused == {"low_cpu_mem_usage": True} and config.d_model == 32


def test_a_regression_typo_does_not_train_with_another_loss():
    # problem_type decides the classifier's loss; a misspelt one used to fall through to binary cross-entropy.
    with pytest.raises(ValueError, match="problem_type"):
        TransformerConfig(num_labels=1, problem_type="regresion")


@pytest.mark.parametrize(
    "break_it, named",
    [
        (lambda config: setattr(config, "decoder_vocab_size", 30), "share_embeddings"),
        (lambda config: config.update(dict(vocab_size=3, decoder_vocab_size=3)), "eos_token_id"),
        (lambda config: setattr(config, "decoder_start_token_id", 0), "decoder_start_token_id"),
    ],
)
def test_a_config_that_would_not_load_is_not_saved(tmp_path, break_it, named):
    # Each setting is valid alone; together they are not, and `from_pretrained` would refuse the folder. Saving
    # refuses first, naming the conflict, and writes nothing.
    config = TransformerConfig(vocab_size=40, d_model=32, num_attention_heads=4)
    break_it(config)
    with pytest.raises(ValueError, match=named):
        config.save_pretrained(tmp_path)
    assert not any(tmp_path.iterdir())  # neither the config nor the code written beside it


def test_a_problem_type_saved_before_it_was_checked_still_loads(tmp_path, caplog):
    config = TransformerConfig(vocab_size=40, d_model=32, num_attention_heads=4, num_labels=1)
    config.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**saved, "problem_type": "regresion"}))
    with caplog.at_level("WARNING"):
        loaded = AutoConfig.from_pretrained(tmp_path)
    assert loaded.problem_type is None and "regresion" in caplog.text
    with pytest.raises(ValueError, match="problem_type"):
        TransformerConfig(problem_type="regresion")  # typed by a person, it raises


def test_label_names_must_name_the_ids_0_to_n_minus_1(tmp_path):
    """A classifier's logits are indexed 0..n-1: an `id2label` with a gap would fail by a bare KeyError in every
    entry point. Refused as given and before saving; a saved config is read as it is."""
    with pytest.raises(ValueError, match=r"`id2label` must name the label ids 0 to 1, one each; got ids \[0, 5\]"):
        TransformerConfig(num_labels=2, id2label={0: "negative", 5: "positive"})
    config = TransformerConfig(vocab_size=40, d_model=32, num_attention_heads=4, id2label={0: "a", 1: "b", 2: "c"})
    assert config.num_labels == 3
    config.id2label = {0: "a", 3: "b"}
    with pytest.raises(ValueError, match="id2label"):
        config.save_pretrained(tmp_path)
    assert not (tmp_path / "config.json").exists()
    config.id2label = {0: "a", 1: "b"}
    config.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**saved, "id2label": {"0": "a", "3": "b"}}))
    assert AutoConfig.from_pretrained(tmp_path).id2label == {0: "a", 3: "b"}


def test_a_saved_config_with_a_changed_setting_loads_with_it(tmp_path):
    config = TransformerConfig(vocab_size=40, d_model=32, num_attention_heads=4)
    config.dropout, config.problem_type, config.n_layer = 0.3, "regression", 3
    config.save_pretrained(tmp_path)
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert (loaded.dropout, loaded.problem_type) == (0.3, "regression")
    assert (loaded.encoder_layers, loaded.decoder_layers) == (3, 3)


@pytest.mark.parametrize(
    "keys, kept",
    [
        ({"encoder_layers": 6, "decoder_layers": 2, "n_layer": 2}, {"encoder_layers": 6, "decoder_layers": 2}),
        ({"d_model": 256, "hidden_size": 32}, {"d_model": 256}),
        ({"d_model": 64, "d_hidn": 32}, {"d_model": 64}),
    ],
)
def test_a_saved_alias_that_contradicts_a_saved_field_is_ignored_whatever_the_fields_value(
    tmp_path, caplog, keys, kept
):
    # The saved fields are what the weights were saved with, also where one holds its default (6 layers, d_model 256).
    config = TransformerConfig(vocab_size=40, d_model=32, num_attention_heads=4)
    config.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**saved, **keys}))
    with caplog.at_level("WARNING"):
        loaded = AutoConfig.from_pretrained(tmp_path)
    assert {name: getattr(loaded, name) for name in kept} == kept
    assert "ignored" in caplog.text


def test_invalid_option_lists_the_allowed_values():
    with pytest.raises(ValueError, match=r"\('post', 'pre'\), got middle"):
        TransformerConfig(layer_norm_position="middle")


def test_misspelled_keyword_raises_with_a_suggestion():
    with pytest.raises(ValueError, match="d_hiden.*did you mean `d_hidn`"):
        TransformerConfig(d_hiden=128)
    with pytest.raises(ValueError, match="layer_norm_positon"):
        TransformerConfig(layer_norm_positon="pre")


def test_generation_settings_in_the_config_warn():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        TransformerConfig(num_beams=4)
    assert any("generation_config" in str(w.message) for w in caught)


def test_different_vocabularies_without_sharing():
    config = TransformerConfig(
        n_enc_vocab=50, n_dec_vocab=30, share_embeddings=False, d_model=16, n_head=2, d_ff=32, n_layer=1
    )
    model = TransformerForConditionalGeneration(config)
    assert model.model.encoder.embeddings.embed_tokens.num_embeddings == 50
    assert model.lm_head.weight is model.model.decoder.embeddings.embed_tokens.weight
    out = model(input_ids=torch.tensor([[45, 3]]), decoder_input_ids=torch.tensor([[2, 29]]))
    assert out.logits.shape == (1, 2, 30)


def test_ready_configurations():
    base = TransformerConfig.paper_base()
    assert (base.d_model, base.n_layer, base.num_attention_heads, base.head_dim, base.intermediate_size) == (
        512,
        6,
        8,
        64,
        2048,
    )
    assert base.activation_function == "relu" and base.scale_embedding and base.label_smoothing == 0.1
    assert base.tie_word_embeddings and base.share_embeddings and base.layer_norm_position == "post"
    big = TransformerConfig.paper_big()
    assert (big.d_model, big.num_attention_heads, big.intermediate_size, big.dropout) == (1024, 16, 4096, 0.3)
    seed = TransformerConfig.seed_tutorial()
    assert seed.to_dict() == TransformerConfig(**SEED_CONFIG_JSON).to_dict()
    assert seed.activation_function == "gelu" and not seed.scale_embedding
    assert TransformerConfig.paper_base(vocab_size=1000).vocab_size == 1000


def test_a_ready_configuration_takes_overrides_in_any_spelling():
    """An override given in another spelling than the preset's (``vocab_size`` over the seed's ``n_enc_vocab``)
    replaces that setting instead of conflicting with it; what the preset derives from it follows."""
    seed = TransformerConfig.seed_tutorial(vocab_size=123)
    assert (seed.vocab_size, seed.decoder_vocab_size, seed.d_model) == (123, 123, 256)
    assert TransformerConfig.seed_tutorial(n_enc_vocab=123).decoder_vocab_size == 123
    narrow = TransformerConfig.seed_tutorial(d_model=128)
    assert (narrow.d_model, narrow.head_dim) == (128, 32)
    base = TransformerConfig.paper_base(d_hidn=128, encoder_layers=2)
    assert (base.d_model, base.encoder_layers, base.decoder_layers) == (128, 2, 6)
    big = TransformerConfig.paper_big(n_enc_vocab=123)
    assert (big.vocab_size, big.d_model, big.dropout) == (123, 1024, 0.3)
    assert TransformerConfig.seed_tutorial(n_layer=2).decoder_layers == 2
    with pytest.raises(ValueError, match="conflicts"):
        TransformerConfig.seed_tutorial(vocab_size=123, n_enc_vocab=124)  # two spellings given at once still conflict


def test_settings_are_checked_by_huggingface_hub_as_transformers_configs_are():
    from huggingface_hub.errors import StrictDataclassError

    # The library's error, raised as a ValueError too: callers catching either see a bad setting.
    with pytest.raises(StrictDataclassError, match="field 'dropout'") as caught:
        TransformerConfig(dropout=1.5)
    assert isinstance(caught.value, ValueError)
    # The checks between settings are the library's class validators, run by `validate` (and so before saving).
    config = TransformerConfig(vocab_size=40, d_model=32, num_attention_heads=4)
    config.decoder_vocab_size = 30
    with pytest.raises(StrictDataclassError, match="validate_vocabularies"):
        config.validate()


def test_a_both_stack_depth_and_a_misspelt_key_are_read_alike_by_the_constructor_from_pretrained_and_update(
    tmp_path,
):
    # `num_hidden_layers` sets both stacks in the constructor; transformers' from_dict and update set the attribute
    # it maps to (the encoder's) alone. A misspelt key passed to update was set silently as a new attribute.
    TransformerConfig(vocab_size=40, d_model=32, num_attention_heads=4, n_layer=1).save_pretrained(tmp_path)
    for depth in ("num_hidden_layers", "n_layer"):
        loaded = TransformerConfig.from_pretrained(tmp_path, **{depth: 3})
        assert (loaded.encoder_layers, loaded.decoder_layers) == (3, 3), depth
        loaded.update({depth: 2})
        assert (loaded.encoder_layers, loaded.decoder_layers) == (2, 2), depth
    assert TransformerConfig(num_hidden_layers=3).decoder_layers == 3
    config = TransformerConfig.from_pretrained(tmp_path)
    with pytest.raises(ValueError, match="`dropuot` \\(did you mean `dropout`\\?\\)"):
        config.update({"dropout": 0.2, "dropuot": 0.3})
    assert config.dropout == 0.1 and not hasattr(config, "dropuot")  # nothing set
    config.update({"dropout": 0.2, "a_tool_s_own_note": "kept"})
    assert config.dropout == 0.2 and config.a_tool_s_own_note == "kept"
    with pytest.raises(ValueError, match="two depths"):
        TransformerConfig.from_pretrained(tmp_path, n_layer=2, num_hidden_layers=3)


def test_a_misspelt_setting_assigned_to_a_built_config_raises_and_another_tool_s_attribute_is_set(tmp_path):
    config = TransformerConfig(vocab_size=40, d_model=32, num_attention_heads=4, n_layer=1)
    for misspelt, meant in (("dropuot", "dropout"), ("num_layers", "n_layer"), ("d_modle", "d_model")):
        with pytest.raises(ValueError, match=f"`{misspelt}` \\(did you mean `{meant}`\\?\\)"):
            setattr(config, misspelt, 2)
        assert not hasattr(config, misspelt)  # nothing set
    # Names that are no misspelling are set and saved as they are: another tool's own attribute, another special
    # token's id, the aliases (which set the field they name) and a field itself.
    config.a_tool_s_own_note = "kept"
    config.mask_token_id = 4
    config.d_hidn = 48
    config.dropout = 0.2
    assert (config.a_tool_s_own_note, config.mask_token_id, config.d_model, config.dropout) == ("kept", 4, 48, 0.2)
    config.save_pretrained(tmp_path)
    loaded = TransformerConfig.from_pretrained(tmp_path)
    assert (loaded.a_tool_s_own_note, loaded.mask_token_id, loaded.d_model) == ("kept", 4, 48)
    # A misspelt key read back from a hand-edited config.json is kept, as `PretrainedConfig` keeps it.
    saved = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**saved, "dropuot": 0.3}))
    assert TransformerConfig.from_pretrained(tmp_path).dropuot == 0.3


def test_a_config_naming_several_end_tokens_loads_and_generation_stops_at_each(tmp_path):
    # transformers' configs take a list of end tokens (generate stops at any); a config.json naming several loads.
    from transformers import AutoModelForSeq2SeqLM

    from hf_transformer.hub import check_tokenizer_fits

    config = tiny_config(eos_token_id=[3, 7])
    assert config.end_token_ids == (3, 7) and tiny_config().end_token_ids == (3,)
    assert tiny_config(eos_token_id=None).end_token_ids == ()
    for wrong, message in (([3, 40], r"must be an id in \[0, 40\)"), ([], "at least one"), ([3, -1], "token id")):
        with pytest.raises(ValueError, match=message):
            tiny_config(eos_token_id=wrong)
    torch.manual_seed(0)
    plain = TransformerForConditionalGeneration(tiny_config(init_std=0.5)).eval()
    source = torch.tensor([[5, 6, 7, 8, 3]])
    with torch.no_grad():
        rows = plain.generate(source, max_new_tokens=12, min_new_tokens=12, do_sample=False)[0, 1:].tolist()
    second_end = next(token for token in rows if token != 3)  # a token the plain translation goes through
    plain.config.eos_token_id = [3, second_end]
    plain.generation_config.eos_token_id = [3, second_end]
    plain.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["eos_token_id"] == [3, second_end]
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    assert loaded.config.end_token_ids == (3, second_end)
    assert loaded.generation_config.eos_token_id == [3, second_end]
    with torch.no_grad():
        ended = loaded.generate(source, max_new_tokens=12, do_sample=False)[0, 1:].tolist()
    assert ended == rows[: rows.index(second_end) + 1]
    # The model's own end token is the first: a tokenizer ending with it fits, one ending with another does not.
    fitting = type("Tokenizer", (), dict(pad_token_id=0, bos_token_id=2, eos_token_id=3, __len__=lambda self: 40))
    check_tokenizer_fits(fitting(), loaded.config, "the folder")
    fitting.eos_token_id = second_end
    with pytest.raises(ValueError, match=f"eos_token_id {second_end} there, 3 in the model"):
        check_tokenizer_fits(fitting(), loaded.config, "the folder")
