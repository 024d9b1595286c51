"""Ensembles of translation models decoding through generate (hf_transformer.ensemble). The Multi30k recipe's
scoring of ensembles (python -m recipes.multi30k.evaluate) is tested with the recipe
(recipes/multi30k/tests/test_multi30k_evaluate.py)."""

import copy

import pytest
import torch

from hf_transformer import TransformerConfig, TransformerForConditionalGeneration
from hf_transformer.ensemble import EnsembleCache, TransformerEnsemble
from hf_transformer.generation import CACHE_NAME

PAD, START, EOS = 0, 1, 2


def random_model(seed: int, **overrides) -> TransformerForConditionalGeneration:
    """A random model whose greedy output varies from step to step: pre-LN, learned positions and larger weights
    than the initialisation's (which would repeat one token)."""
    settings = dict(
        vocab_size=40, d_model=32, n_layer=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=64, pad_token_id=PAD, bos_token_id=START, eos_token_id=EOS, dropout=0.0,
        layer_norm_position="pre", position_embedding_type="learned",
    )  # fmt: skip
    settings.update(overrides)
    torch.manual_seed(seed)
    model = TransformerForConditionalGeneration(TransformerConfig(**settings)).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() == 2:
                parameter.normal_(0.0, 0.5)
    return model


SOURCE = torch.tensor([[5, 6, 7, 8, 9, EOS], [10, 11, 12, EOS, PAD, PAD], [13, 14, 15, 16, EOS, PAD]])
MASK = SOURCE.ne(PAD)


def generate(model, **options):
    return model.generate(input_ids=SOURCE, attention_mask=MASK, max_new_tokens=10, do_sample=False, **options)


@pytest.mark.parametrize("options", [dict(num_beams=1), dict(num_beams=4, length_penalty=1.3)])
def test_source_ids_without_a_mask_decode_with_their_padding_masked(options):
    # The forward masks the padding of ids given without `attention_mask`; so must every decoding step's
    # cross-attention, for a model and for an ensemble, whose forward the steps call with the encoder output.
    model = random_model(2)
    ensemble = TransformerEnsemble([model, random_model(3)])
    for decoder in (model, ensemble):
        unmasked = decoder.generate(SOURCE, max_new_tokens=10, do_sample=False, **options)
        assert torch.equal(unmasked, generate(decoder, **options))  # the same products, the same mask
    decoder_input_ids = generate(model)[:, :4]
    with torch.no_grad():
        masked = ensemble(input_ids=SOURCE, attention_mask=MASK, decoder_input_ids=decoder_input_ids).logits
        derived = ensemble(input_ids=SOURCE, decoder_input_ids=decoder_input_ids).logits
    torch.testing.assert_close(derived, masked, rtol=0, atol=1e-6)


@pytest.mark.parametrize("options", [dict(num_beams=1), dict(num_beams=4, length_penalty=1.3)])
def test_an_ensemble_of_one_decodes_as_its_member(options):
    member = random_model(0)
    assert torch.equal(generate(TransformerEnsemble([member]), **options), generate(member, **options))


@pytest.mark.parametrize("options", [dict(num_beams=1), dict(num_beams=4, length_penalty=1.3)])
def test_two_copies_of_a_model_decode_as_the_model(options):
    # The mean of two equal distributions is that distribution: any difference would come from the second
    # member's cache (not reordered between beams, not repeated for them, or given the first member's rows).
    member = random_model(1)
    expected = generate(member, **options)
    assert len(set(expected[:, 1:].flatten().tolist())) > 3  # the output varies, so a misplaced cache row shows
    assert torch.equal(generate(TransformerEnsemble([member, copy.deepcopy(member)]), **options), expected)


def test_an_ensemble_generates_within_its_shortest_members_position_table():
    short, long = random_model(0, decoder_max_position_embeddings=6), random_model(1)
    ensemble = TransformerEnsemble([long, short])
    with pytest.warns(UserWarning, match="`max_new_tokens`=10 goes past the decoder's position table of 6"):
        capped = generate(ensemble, min_new_tokens=10)
    assert torch.equal(
        capped, ensemble.generate(input_ids=SOURCE, attention_mask=MASK, max_new_tokens=6, min_new_tokens=6)
    )


def test_ensemble_scores_are_the_log_of_the_members_mean_probability():
    first, second = random_model(2), random_model(3, d_model=48, n_layer=1, num_attention_heads=3)
    ensemble = TransformerEnsemble([first, second])
    target = torch.tensor([[START, 5, 6, 7], [START, 8, 9, PAD], [START, 10, EOS, PAD]])
    with torch.no_grad():
        probabilities = [
            model(input_ids=SOURCE, attention_mask=MASK, decoder_input_ids=target).logits.softmax(-1)
            for model in (first, second)
        ]
        scores = ensemble(input_ids=SOURCE, attention_mask=MASK, decoder_input_ids=target).logits
    torch.testing.assert_close(scores, ((probabilities[0] + probabilities[1]) / 2).log(), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(probabilities[0], probabilities[1], atol=1e-3)  # the members do differ


def test_ensemble_loss_is_the_cross_entropy_of_its_scores_and_refuses_labels_outside_the_vocabulary():
    ensemble = TransformerEnsemble([random_model(2), random_model(3)])
    target = torch.tensor([[START, 5, 6, 7], [START, 8, 9, PAD], [START, 10, EOS, PAD]])
    labels = torch.tensor([[5, 6, 7, EOS], [8, 9, EOS, -100], [10, EOS, -100, -100]])
    with torch.no_grad():
        output = ensemble(input_ids=SOURCE, attention_mask=MASK, decoder_input_ids=target, labels=labels)
    expected = torch.nn.functional.cross_entropy(output.logits.reshape(-1, 40), labels.reshape(-1), ignore_index=-100)
    torch.testing.assert_close(output.loss, expected)
    labels[0, 0] = 40
    with pytest.raises(ValueError, match=r"`labels` must be in \[0, 40\) or -100 \(ignored\), got values from 2 to 40"):
        ensemble(input_ids=SOURCE, attention_mask=MASK, decoder_input_ids=target, labels=labels)


def test_cached_greedy_decoding_follows_the_ensemble_scores_of_the_whole_prefix():
    ensemble = TransformerEnsemble([random_model(4), random_model(5, d_model=48, num_attention_heads=2)])
    generated = generate(ensemble, num_beams=1)
    prefix = torch.full((SOURCE.shape[0], 1), START)
    with torch.no_grad():
        for _ in range(generated.shape[1] - 1):
            scores = ensemble(input_ids=SOURCE, attention_mask=MASK, decoder_input_ids=prefix, use_cache=False).logits
            prefix = torch.cat([prefix, scores[:, -1].argmax(-1, keepdim=True)], dim=1)
    finished = (prefix == EOS).cumsum(1) - (prefix == EOS).int() > 0  # after each row's first end token
    assert torch.equal(generated[~finished], prefix[~finished])
    assert len(set(generated[:, 1:].flatten().tolist())) > 3


def test_greedy_decoding_continues_from_the_ensemble_cache_of_an_earlier_call():
    ensemble = TransformerEnsemble([random_model(4), random_model(5, d_model=48, num_attention_heads=2)])
    settings = dict(
        attention_mask=MASK, do_sample=False, eos_token_id=None, return_dict_in_generate=True, output_scores=True
    )
    whole = ensemble.generate(SOURCE, max_new_tokens=8, **settings)
    first = ensemble.generate(SOURCE, max_new_tokens=3, **settings)
    cache = getattr(first, CACHE_NAME)
    assert isinstance(cache, EnsembleCache) and all(member.get_seq_length() == 3 for member in cache.members())
    rest = ensemble.generate(
        SOURCE, decoder_input_ids=first.sequences, max_new_tokens=5, **{CACHE_NAME: cache}, **settings
    )
    assert torch.equal(rest.sequences, whole.sequences)
    torch.testing.assert_close(torch.stack(first.scores + rest.scores), torch.stack(whole.scores))


def test_beam_search_returns_an_ensemble_cache_carrying_every_member():
    ensemble = TransformerEnsemble([random_model(6), random_model(7), random_model(8)])
    output = generate(ensemble, num_beams=3, return_dict_in_generate=True)
    cache = output.get("past_key_values", output.get("cache"))
    assert isinstance(cache, EnsembleCache) and len(cache.members()) == 3
    lengths = {member.self_attention_cache.get_seq_length() for member in cache.members()}
    assert lengths == {output.sequences.shape[1] - 1}
    assert {member.self_attention_cache.layers[0].keys.shape[0] for member in cache.members()} == {9}


def test_members_must_share_the_vocabulary_and_special_tokens():
    with pytest.raises(ValueError, match="member 1 has decoder_vocab_size=41"):
        TransformerEnsemble([random_model(0), random_model(1, vocab_size=41)])
    with pytest.raises(ValueError, match="member 1 has eos_token_id=3"):
        TransformerEnsemble([random_model(0), random_model(1, eos_token_id=3)])
    with pytest.raises(TypeError, match="members are TransformerForConditionalGeneration"):
        TransformerEnsemble([random_model(0), torch.nn.Linear(2, 2)])
    with pytest.raises(NotImplementedError, match="its members' folders"):
        TransformerEnsemble([random_model(0)]).save_pretrained("anywhere")
    with pytest.raises(
        ValueError, match="member 1 computes in torch.bfloat16 on cpu, member 0 in torch.float32 on cpu"
    ):
        TransformerEnsemble([random_model(0), random_model(1).to(torch.bfloat16)])


def test_members_that_saved_other_generation_settings_are_named_and_member_0_s_are_used(recwarn):
    first, second = random_model(0), random_model(1)
    first.generation_config.num_beams, second.generation_config.num_beams = 4, 2
    second.generation_config.max_new_tokens = 9
    with pytest.warns(UserWarning, match=r"member 1 saved other generation settings .*\(max_new_tokens 9 there, None "
                      r"used; num_beams 2 there, 4 used\)"):  # fmt: skip
        ensemble = TransformerEnsemble([first, second])
    assert ensemble.generation_config.num_beams == 4
    recwarn.clear()
    TransformerEnsemble([first, copy.deepcopy(first)])  # alike: nothing to say
    assert not [w for w in recwarn if "generation settings" in str(w.message)]


def test_a_static_cache_is_refused_with_a_clear_error():
    ensemble = TransformerEnsemble([random_model(0), random_model(1)])
    with pytest.raises(ValueError, match="dynamic caches"):
        generate(ensemble, num_beams=1, cache_implementation="static")


def test_an_ensemble_reads_texts_cut_at_its_shortest_members_encoder_table(tmp_path):
    from hf_transformer import Predictor
    from tests.helpers.models import save_random_translator, sentence_tokenizer

    tokenizer = sentence_tokenizer()
    long = save_random_translator(tmp_path / "long", tokenizer, max_position_embeddings=64, max_new_tokens=4)
    short = save_random_translator(tmp_path / "short", tokenizer, max_position_embeddings=12, max_new_tokens=4)
    text = "a man rides a red bike near the house and two dogs play in the snow"
    assert len(tokenizer(text)["input_ids"]) > 12
    ensemble = Predictor.from_pretrained([str(long), str(short)])
    assert ensemble.model.config.max_position_embeddings == 12
    # The text cut where the short member alone cuts it, not past that member's table.
    cut = tokenizer.decode(tokenizer(text, truncation=True, max_length=12)["input_ids"], skip_special_tokens=True)
    assert ensemble.translate([text]) == ensemble.translate([cut])
    with pytest.raises(TypeError, match="a list of model folders, not one folder"):
        TransformerEnsemble.from_folders(str(long))
