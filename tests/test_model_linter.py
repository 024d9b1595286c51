"""transformers' model linter (``transformers-mlinter``: the rules transformers holds its own model files to) on the
package. It reports exactly the exceptions the model and configuration files explain beside the flagged line, so that
a new violation, or an exception that no longer holds, fails here."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The rules change between releases: setup.cfg's dev extra pins the one these exceptions were written for.
LINTER_VERSION = "0.1.5"
# (file, rule) -> words of the comment beside the flagged line that give the reason.
EXCEPTIONS = {
    ("hf_transformer/configuration_transformer.py", "TRF023"): "The paper's name for the model width",
    ("hf_transformer/modeling_transformer.py", "TRF036"): "the folders saved by this head so far hold those names",
}


def lint(tmp_path: Path) -> list[dict]:
    report = tmp_path / "findings.json"
    command = [sys.executable, "-m", "mlinter", "--no-progress", "--no-cache", "--output-json", str(report)]
    subprocess.run(
        [*command, "hf_transformer"],
        cwd=ROOT,
        capture_output=True,
        check=False,
        timeout=600,
    )
    return json.loads(report.read_text())["findings"]


def test_the_linter_is_the_pinned_release():
    assert importlib.metadata.version("transformers-mlinter") == LINTER_VERSION


def test_the_model_linter_reports_only_the_exceptions_explained_in_the_code(tmp_path):
    findings = lint(tmp_path)
    assert sorted((finding["path"], finding["rule"]) for finding in findings) == sorted(EXCEPTIONS), findings
    for finding in findings:
        lines = (ROOT / finding["path"]).read_text().splitlines()[: finding["line"]]
        above = lines[-4:]  # the flagged line and the comment above it, as one text
        beside = " ".join(line.strip().lstrip("#").strip() for line in above)
        assert EXCEPTIONS[finding["path"], finding["rule"]] in beside, (finding, beside)
