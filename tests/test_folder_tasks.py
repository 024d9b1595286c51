"""Every entry point that takes a saved folder knows its task from the saved class (``config.architectures``) and
refuses, in one line naming the folder, its class and what it serves, a folder it cannot serve: a masked-token folder
(what scripts/pretrain_denoising.py writes) is not a translator, whose decoder would hold random weights."""

import json
import re

import pytest
import torch
from transformers import AutoConfig, pipeline

from hf_transformer import (
    PIPELINE_TASK,
    Predictor,
    TransformerForConditionalGeneration,
    TransformerForMaskedLM,
    TransformerModel,
)
from hf_transformer.folders import CLASSIFICATION, MASKED_LM, SEQ2SEQ, FolderTaskError, check_task, task_of
from hf_transformer.saved_folder import read_folder
from tests.helpers.launch import load_script
from tests.helpers.models import tiny_config

SENTENCES = ["a man rides a red bike .", "two dogs play in the snow .", "ein mann fährt ein rotes fahrrad ."] * 4


@pytest.fixture(scope="module")
def tokenizer():
    from hf_transformer.tokenization import train_tokenizer

    return train_tokenizer(SENTENCES, vocab_size=80, model_type="bpe", model_max_length=48, show_progress=False)


def saved(model_class, folder, tokenizer):
    torch.manual_seed(0)
    model_class(tiny_config(vocab_size=len(tokenizer), n_layer=1, max_position_embeddings=48)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def masked_lm_dir(tmp_path_factory, tokenizer):
    return saved(TransformerForMaskedLM, tmp_path_factory.mktemp("masked-lm"), tokenizer)


@pytest.fixture(scope="module")
def translator_dir(tmp_path_factory, tokenizer):
    return saved(TransformerForConditionalGeneration, tmp_path_factory.mktemp("translator"), tokenizer)


def refusal(folder, serves: str) -> str:
    """The one line an entry point refuses the masked-token folder with (a regex for pytest.raises)."""
    return re.escape(f"{folder} holds TransformerForMaskedLM, a masked-token model: {serves} folders only.")


TRANSLATION_AND_CLASSIFICATION = "translation (seq2seq) and classification"


def test_the_task_comes_from_the_saved_class(masked_lm_dir, translator_dir, tmp_path):
    config = AutoConfig.from_pretrained(masked_lm_dir)
    # A masked-token model's config is an encoder-decoder one like every other of the package: only the saved
    # class tells it apart.
    assert config.is_encoder_decoder and config.architectures == ["TransformerForMaskedLM"]
    assert task_of(config.architectures) == MASKED_LM
    assert task_of(AutoConfig.from_pretrained(translator_dir).architectures) == SEQ2SEQ
    # A config saved on its own, without a model: an encoder-decoder is seq2seq.
    assert task_of(None, is_encoder_decoder=True) == SEQ2SEQ
    with pytest.raises(ValueError, match="architectures"):
        task_of(None)
    assert check_task(["TransformerForSequenceClassification"], "x", "Predictor", (SEQ2SEQ, CLASSIFICATION)) == (
        CLASSIFICATION
    )
    TransformerModel(tiny_config()).save_pretrained(tmp_path / "base")
    message = (
        f"{tmp_path / 'base'} holds TransformerModel, a model without a head: to_ctranslate2 serves translation "
        "(seq2seq) folders only."
    )
    headless = AutoConfig.from_pretrained(tmp_path / "base").architectures
    with pytest.raises(FolderTaskError, match=re.escape(message)):
        check_task(headless, tmp_path / "base", "to_ctranslate2", (SEQ2SEQ,))
    # The reader of a whole folder refuses it in the same words.
    with pytest.raises(FolderTaskError, match=re.escape(message)):
        read_folder(tmp_path / "base").check("to_ctranslate2", (SEQ2SEQ,))


def test_predictor_refuses_a_masked_token_folder(masked_lm_dir, translator_dir):
    with pytest.raises(
        FolderTaskError, match=refusal(masked_lm_dir, f"Predictor serves {TRANSLATION_AND_CLASSIFICATION}")
    ):
        Predictor.from_pretrained(masked_lm_dir)
    with pytest.raises(FolderTaskError, match=refusal(masked_lm_dir, "an ensemble serves translation (seq2seq)")):
        Predictor.from_pretrained([translator_dir, masked_lm_dir])
    assert Predictor.from_pretrained(translator_dir).task == SEQ2SEQ


def test_the_translation_pipeline_refuses_a_masked_token_folder(masked_lm_dir):
    serves = f'pipeline("{PIPELINE_TASK}") serves translation (seq2seq)'
    with pytest.raises(FolderTaskError, match=refusal(masked_lm_dir, serves)):
        pipeline(PIPELINE_TASK, model=str(masked_lm_dir))


def test_predict_script_refuses_a_masked_token_folder_in_one_line(masked_lm_dir, capsys):
    with pytest.raises(SystemExit) as raised:
        load_script("predict").main([str(masked_lm_dir), "a man rides a red bike ."])
    assert raised.value.code == 2
    error = capsys.readouterr().err
    assert "Traceback" not in error
    assert re.search(refusal(masked_lm_dir, f"Predictor serves {TRANSLATION_AND_CLASSIFICATION}"), error), error


def test_to_onnx_refuses_a_masked_token_folder(masked_lm_dir, tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    from hf_transformer.export.__main__ import main
    from hf_transformer.export.onnx_export import to_onnx

    with pytest.raises(
        FolderTaskError, match=refusal(masked_lm_dir, f"to_onnx serves {TRANSLATION_AND_CLASSIFICATION}")
    ):
        to_onnx(masked_lm_dir, tmp_path / "onnx")
    assert not (tmp_path / "onnx").exists()
    with pytest.raises(SystemExit) as raised:  # the command line says it in one line
        main(["onnx", str(masked_lm_dir), str(tmp_path / "onnx")])
    assert raised.value.code == 2
    error = capsys.readouterr().err
    assert "Traceback" not in error and "TransformerForMaskedLM, a masked-token model" in error


def test_to_ctranslate2_and_its_engine_refuse_a_masked_token_folder(masked_lm_dir, tmp_path):
    pytest.importorskip("ctranslate2")
    from hf_transformer.export.ctranslate2_export import to_ctranslate2

    with pytest.raises(FolderTaskError, match=refusal(masked_lm_dir, "to_ctranslate2 serves translation (seq2seq)")):
        to_ctranslate2(masked_lm_dir, tmp_path / "ct2")
    assert not (tmp_path / "ct2").exists()
    with pytest.raises(
        FolderTaskError, match=refusal(masked_lm_dir, "engine='ctranslate2' serves translation (seq2seq)")
    ):
        Predictor.from_pretrained(masked_lm_dir, engine="ctranslate2")


def test_an_adapter_on_a_masked_token_model_is_refused(masked_lm_dir, tmp_path):
    pytest.importorskip("peft")
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    # An adapter saved without a task type takes its base model's head: a masked-token one is served by nothing here.
    (adapter / "adapter_config.json").write_text(
        json.dumps({"peft_type": "LORA", "base_model_name_or_path": str(masked_lm_dir)})
    )
    with pytest.raises(FolderTaskError, match="TransformerForMaskedLM, a masked-token model"):
        Predictor.from_pretrained(adapter)
