"""Folders saved by an earlier version of the package load with this one and compute what they computed then.

``tests/fixtures/saved-folders`` holds tiny models (random weights, a tokenizer) saved before the library and its
recipes were separated, with the outputs they gave when saved (``expected.json``): the weights' names, the
configuration's keys and the arithmetic must all still agree for the outputs to match.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForMaskedLM, AutoModelForSeq2SeqLM, AutoModelForSequenceClassification

from hf_transformer import Predictor

SAVED = Path(__file__).resolve().parent / "fixtures" / "saved-folders"
EXPECTED = json.loads((SAVED / "expected.json").read_text())
AUTO = {
    "seq2seq": AutoModelForSeq2SeqLM,
    "seq2seq-pre-ln-learned": AutoModelForSeq2SeqLM,
    "classifier": AutoModelForSequenceClassification,
    "masked-lm": AutoModelForMaskedLM,
}


def inputs() -> dict[str, torch.Tensor]:
    return {key: torch.tensor(EXPECTED[key]) for key in ("input_ids", "attention_mask")}


def sequence_log_probs(model, sequences: torch.Tensor) -> torch.Tensor:
    """Each row's summed log-probability of its tokens after the start token, under ``model``."""
    logits = model(**inputs(), decoder_input_ids=sequences[:, :-1]).logits
    return logits.log_softmax(-1).gather(-1, sequences[:, 1:, None]).squeeze(-1).sum(-1)


@pytest.mark.parametrize("name", sorted(AUTO))
def test_a_folder_saved_before_loads_every_weight_and_computes_the_same(name):
    model, info = AUTO[name].from_pretrained(SAVED / name, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    model.eval()
    expected = EXPECTED[name]
    with torch.no_grad():
        if name.startswith("seq2seq"):
            generated = model.generate(**inputs(), num_beams=3, max_new_tokens=6, do_sample=False)
            saved = torch.tensor(expected["generated"])
            # The same tokens, or, where another CPU's rounding broke a tie, tokens exactly as likely.
            assert generated.shape == saved.shape
            assert torch.equal(generated, saved) or torch.allclose(
                sequence_log_probs(model, generated), sequence_log_probs(model, saved), rtol=0, atol=1e-4
            )
            logits = model(**inputs(), decoder_input_ids=saved[:, :4]).logits[:, -1, :8]
        else:
            logits = model(**inputs()).logits
            logits = logits[:, :3, :8] if logits.dim() == 3 else logits
    # Saved and loaded on possibly different CPUs and kernels: equal to rounding, not bit for bit.
    torch.testing.assert_close(logits, torch.tensor(expected["logits"]), rtol=1e-4, atol=1e-5)


def test_a_folder_saved_before_serves_with_the_predictor():
    translator = Predictor.from_pretrained(str(SAVED / "seq2seq"))
    assert len(translator.translate(["a dog runs", "eine kleine katze"], max_new_tokens=4)) == 2
    classifier = Predictor.from_pretrained(str(SAVED / "classifier"))
    labels = [result["label"] for result in classifier.classify(["a dog runs"])]
    assert labels[0] in {"LABEL_0", "LABEL_1", "LABEL_2"}
