"""hf_transformer.saved_folder: a folder read once into what it holds, and opened for an entry point that names the
tasks it serves. The folders saved before this reader (tests/fixtures/saved-folders) open through it and compute
what they computed when saved."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
import torch

from hf_transformer import Predictor
from hf_transformer import inference as inference_module
from hf_transformer import saved_folder as saved_folder_module
from hf_transformer.folders import CLASSIFICATION, MASKED_LM, SEQ2SEQ, FolderTaskError
from hf_transformer.saved_folder import ADAPTER, CTRANSLATE2, MODEL, FolderError, read_folder

SAVED = Path(__file__).resolve().parent / "fixtures" / "saved-folders"
EXPECTED = json.loads((SAVED / "expected.json").read_text())
EVERY_TASK = (SEQ2SEQ, CLASSIFICATION, MASKED_LM)
HEADS = {
    "seq2seq": ("TransformerForConditionalGeneration", SEQ2SEQ, "AutoModelForSeq2SeqLM"),
    "seq2seq-pre-ln-learned": ("TransformerForConditionalGeneration", SEQ2SEQ, "AutoModelForSeq2SeqLM"),
    "classifier": ("TransformerForSequenceClassification", CLASSIFICATION, "AutoModelForSequenceClassification"),
    "masked-lm": ("TransformerForMaskedLM", MASKED_LM, "AutoModelForMaskedLM"),
}


@pytest.mark.parametrize("name", sorted(HEADS))
def test_a_model_folder_is_described_by_what_it_holds(name):
    folder = read_folder(SAVED / name)
    head, task, auto_class = HEADS[name]
    assert (folder.kind, folder.head, folder.task, folder.auto_class) == (MODEL, head, task, auto_class)
    assert folder.architectures == (head,) and folder.model_type == "hf_transformer" and folder.base_model is None
    assert folder.tokenizer == str(SAVED / name) and folder.weights == ("model.safetensors",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        folder.task = SEQ2SEQ  # a description, not a state
    assert read_folder(folder) is folder


@pytest.mark.parametrize("name", sorted(HEADS))
def test_a_folder_saved_before_opens_and_computes_the_same(name):
    model, tokenizer = read_folder(SAVED / name).open("this test", EVERY_TASK)
    assert type(model).__name__ == HEADS[name][0] and not model.training
    assert len(tokenizer) >= int(torch.tensor(EXPECTED["input_ids"]).max()) + 1
    inputs = {key: torch.tensor(EXPECTED[key]) for key in ("input_ids", "attention_mask")}
    with torch.no_grad():
        if name.startswith("seq2seq"):
            saved = torch.tensor(EXPECTED[name]["generated"])
            logits = model(**inputs, decoder_input_ids=saved[:, :4]).logits[:, -1, :8]
        else:
            logits = model(**inputs).logits
            logits = logits[:, :3, :8] if logits.dim() == 3 else logits
    torch.testing.assert_close(logits, torch.tensor(EXPECTED[name]["logits"]), rtol=1e-4, atol=1e-5)


def test_an_entry_point_refuses_a_task_it_does_not_serve_in_one_line():
    folder = read_folder(SAVED / "masked-lm")
    message = (
        f"{SAVED / 'masked-lm'} holds TransformerForMaskedLM, a masked-token model: Predictor serves translation "
        "(seq2seq) and classification folders only."
    )
    with pytest.raises(FolderTaskError, match=re.escape(message)):
        folder.open("Predictor", (SEQ2SEQ, CLASSIFICATION))
    assert folder.check("the attention view", EVERY_TASK) == MASKED_LM


def test_what_holds_no_folder_is_refused_in_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "file.txt").write_text("x")
    for path, told in (
        (tmp_path / "missing", f"No folder at {tmp_path / 'missing'}."),
        (tmp_path / "file.txt", "is a file, not a model folder"),
        (tmp_path / "empty", "is not a model folder: it has no config.json"),
    ):
        with pytest.raises(FolderError, match=re.escape(told)) as raised:
            read_folder(path)
        assert isinstance(raised.value, FileNotFoundError) and isinstance(raised.value, ValueError)
        assert "\n" not in str(raised.value)
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "config.json").write_text((SAVED / "seq2seq" / "config.json").read_text())
    with pytest.raises(FolderError, match="has no tokenizer"):
        read_folder(bare).check("the demo app", (SEQ2SEQ,), tokenizer=True)


def test_an_adapter_folder_is_described_by_its_task_type_and_base_model(tmp_path):
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    settings = {"peft_type": "LORA", "base_model_name_or_path": str(SAVED / "seq2seq"), "task_type": "SEQ_CLS"}
    (adapter / "adapter_config.json").write_text(json.dumps(settings))
    folder = read_folder(adapter)
    assert (folder.kind, folder.task, folder.head) == (ADAPTER, CLASSIFICATION, "TransformerForSequenceClassification")
    assert folder.base_model == str(SAVED / "seq2seq") and folder.tokenizer == str(SAVED / "seq2seq")  # the base's
    with pytest.raises(FolderTaskError, match=re.escape("holds a LoRA adapter (SEQ_CLS), a classification model")):
        folder.check("to_ctranslate2", (SEQ2SEQ,))
    # Without a task type, the base model's head.
    (adapter / "adapter_config.json").write_text(json.dumps({**settings, "task_type": None}))
    assert read_folder(adapter).task == SEQ2SEQ
    (adapter / "adapter_config.json").write_text(json.dumps({**settings, "base_model_name_or_path": None}))
    with pytest.raises(FolderError, match="names no base model"):
        read_folder(adapter)


def test_a_ctranslate2_folder_is_told_apart_and_only_ctranslate2_decodes_it(tmp_path):
    pytest.importorskip("ctranslate2")
    from hf_transformer.export import to_ctranslate2

    folder = read_folder(to_ctranslate2(SAVED / "seq2seq", tmp_path / "ct2"))
    assert (folder.kind, folder.task, folder.weights) == (CTRANSLATE2, SEQ2SEQ, ("model.bin",))
    assert folder.load_config().decoder_max_position_embeddings == 32
    with pytest.raises(ValueError, match="holds a CTranslate2 model"):
        Predictor.from_pretrained(folder.path)


def test_the_predictor_asks_the_folder_once(monkeypatch):
    reads, configs = [], []
    read, config = inference_module.read_folder, saved_folder_module._config
    monkeypatch.setattr(inference_module, "read_folder", lambda *a, **k: reads.append(a) or read(*a, **k))
    monkeypatch.setattr(saved_folder_module, "_config", lambda *a, **k: configs.append(a) or config(*a, **k))
    translator = Predictor.from_pretrained(SAVED / "seq2seq")
    assert len(reads) == 1 and len(configs) == 1
    assert translator.task == SEQ2SEQ and translator.config.architectures == ["TransformerForConditionalGeneration"]
