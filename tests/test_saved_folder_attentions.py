"""The per-head attention probabilities of the folders saved before (``tests/fixtures/saved-folders``) are what they
were when the encoder and decoder stacks still collected them by hand: ``expected_attentions.json`` holds, from that
version, the first query rows of every layer's probabilities for each kind of attention. transformers' output capture
(``_can_record_outputs``, ``capture_outputs``) must record the same tensors, in the same order, under the same names
(the attention explorer and the seed tutorial's checkpoints read them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForMaskedLM, AutoModelForSeq2SeqLM, AutoModelForSequenceClassification

SAVED = Path(__file__).resolve().parent / "fixtures" / "saved-folders"
EXPECTED = json.loads((SAVED / "expected.json").read_text())
EXPECTED_ATTENTIONS = json.loads((SAVED / "expected_attentions.json").read_text())
AUTO = {
    "seq2seq": AutoModelForSeq2SeqLM,
    "seq2seq-pre-ln-learned": AutoModelForSeq2SeqLM,
    "classifier": AutoModelForSequenceClassification,
    "masked-lm": AutoModelForMaskedLM,
}


@pytest.mark.parametrize("name", sorted(AUTO))
@pytest.mark.parametrize("attn_implementation", ["sdpa", "eager"])
def test_a_saved_folder_records_the_attention_probabilities_it_recorded_before(name, attn_implementation):
    model = AUTO[name].from_pretrained(SAVED / name, attn_implementation=attn_implementation).eval()
    inputs = {key: torch.tensor(EXPECTED[key]) for key in ("input_ids", "attention_mask")}
    if name.startswith("seq2seq"):
        inputs["decoder_input_ids"] = torch.tensor(EXPECTED[name]["generated"])[:, :4]
    with torch.no_grad():
        outputs = model(**inputs, output_attentions=True)
    rows = EXPECTED_ATTENTIONS["query_rows"]
    for kind, layers in EXPECTED_ATTENTIONS[name].items():
        recorded = getattr(outputs, kind)
        assert len(recorded) == len(layers), kind
        for layer, (probabilities, expected) in enumerate(zip(recorded, layers)):
            # Saved and recomputed on possibly different CPUs and kernels: equal to rounding, not bit for bit.
            torch.testing.assert_close(
                probabilities[:, :, :rows], torch.tensor(expected), rtol=1e-4, atol=1e-6, msg=f"{kind}[{layer}]"
            )
