import pytest
import torch
from conftest import batch_with_padding

from hf_transformer import TransformerForConditionalGeneration, TransformerForSequenceClassification


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
    with pytest.raises(ValueError, match="exceeds the position table of 6"):
        model.generate(source, max_new_tokens=10, min_new_tokens=10, do_sample=False)


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
