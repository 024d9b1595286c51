"""The Multi30k records: every test output the README reports re-scores, from the kept file and the official
references, to the figures its run's record gives (both BLEU forms)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from hf_transformer.data import read_sentence_lines
from hf_transformer.metrics import bleu
from recipes.common.corpus_files import DATA_DIR_ENV
from recipes.multi30k.bleu import bleu_lc_tok
from recipes.multi30k.data import load_multi30k, load_multi30k_tok_references

RECORDS = Path(__file__).resolve().parents[1] / "records"
OUTPUTS = sorted((RECORDS / "outputs").glob("m30k-*.test.*"))
REAL_DATA_DIR = Path(os.environ.get(DATA_DIR_ENV) or Path(__file__).resolve().parents[4] / "shared" / "data")


def recorded(run: str, metric: str) -> float:
    (value,) = [
        record["value"]
        for record in json.loads((RECORDS / "results.json").read_text())
        if record.get("run") == run and record["metric"] == metric and record["split"] == "test2016"
    ]
    return value


def test_the_readme_reports_only_kept_outputs_and_they_are_there():
    readme = (RECORDS.parent / "README.md").read_text()
    linked = set(re.findall(r"records/outputs/([\w.-]+?\.test\.(?:de|en))", readme))
    assert linked and linked <= {path.name for path in OUTPUTS}
    assert all(recorded(path.name.split(".test.")[0], "bleu_lc_tok") > 0 for path in OUTPUTS)


@pytest.mark.slow
@pytest.mark.skipif(
    not (REAL_DATA_DIR / "multi30k" / "tok").is_dir(),
    reason=f"no Multi30k references in {REAL_DATA_DIR} (set {DATA_DIR_ENV} to a folder with multi30k/)",
)
@pytest.mark.parametrize("output", OUTPUTS, ids=[path.name for path in OUTPUTS])
def test_a_kept_output_rescores_to_its_recorded_figures(output):
    run, target = output.name.split(".test.")
    source = {"de": "en", "en": "de"}[target]
    hypotheses = read_sentence_lines(output)
    references = [
        pair[target]
        for pair in load_multi30k(REAL_DATA_DIR, source_lang=source, target_lang=target, download=False)["test"][
            "translation"
        ]
    ]
    tokenized = load_multi30k_tok_references("test", target, REAL_DATA_DIR, download=False)
    assert len(hypotheses) == len(references) == len(tokenized) == 1000
    assert bleu(hypotheses, references) == pytest.approx(recorded(run, "bleu"), abs=1e-9)
    assert bleu_lc_tok(hypotheses, tokenized, target) == pytest.approx(recorded(run, "bleu_lc_tok"), abs=1e-9)
