"""README.md: its example runs as printed, and its commands are the ones CI runs."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, re.S)


@pytest.mark.slow
def test_the_example_runs_and_trains(tmp_path, monkeypatch):
    (example,) = blocks("python")
    monkeypatch.chdir(tmp_path)  # the example saves "my-model" where it runs
    namespace: dict = {}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(example, "README.md", "exec"), namespace)

    folder = tmp_path / "my-model"
    assert (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()
    assert (folder / "tokenizer.json").is_file()
    generated, translated = [eval(line) for line in printed.getvalue().strip().splitlines()[-2:]]
    assert len(generated) == 1 and len(translated) == 2 and all(isinstance(text, str) for text in translated)

    # The reloaded model is the trained one: far below a new model's loss on the example's batch.
    model, batch = namespace["model"].eval(), namespace["batch"]
    fresh = namespace["TransformerForConditionalGeneration"](namespace["config"]).eval()
    with torch.no_grad():
        assert model(**batch).loss < 0.5 * fresh(**batch).loss


def test_the_commands_are_those_ci_runs():
    ci = (REPO / ".ci" / "run").read_text()
    install, commands = blocks("bash")[:2]
    for line in ("pip install torch==2.13.0", 'pip install -e ".[dev,export,demo]"'):
        assert line in install and line in ci, line
    for command in ("ruff check .", "ruff format --check .", "python -m pytest"):
        assert command in commands and command in ci, command
    assert "bash scripts/main_job.sh" in commands and (REPO / "scripts" / "main_job.sh").is_file()


def test_every_head_is_in_the_class_table():
    import hf_transformer

    heads = [name for name in hf_transformer.__all__ if name.startswith("TransformerFor")]
    assert heads and all(f"| `{name}` |" in README for name in heads), heads


def test_relative_links_resolve():
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    missing = [link for link in links if not link.startswith("http") and not (REPO / link).exists()]
    assert not missing, missing
