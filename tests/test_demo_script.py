"""scripts/demo.py: the letter-reversing model trains, saves, reloads through the Auto classes and scores the same."""

import json
import sys

import pytest
import torch

from tests.helpers.launch import load_script

pytestmark = pytest.mark.slow


def held_out_loss(model, batch) -> float:
    model.eval()
    with torch.no_grad():
        return model(**batch).loss.item()


def test_demo_trains_saves_and_reloads(tmp_path, monkeypatch):
    demo = load_script("demo")
    # The models the script scores: the trained one, then the one reloaded from its folder.
    scored, exact_match = [], demo.exact_match

    def recording(model, *args, **kwargs):
        scored.append(model)
        return exact_match(model, *args, **kwargs)

    monkeypatch.setattr(demo, "exact_match", recording)
    args = ["demo.py", "--output_dir", str(tmp_path), "--train_examples", "3400", "--epochs", "1"]
    monkeypatch.setattr(sys, "argv", args)
    demo.main()
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["exact_match"] == results["exact_match_after_reload"]  # the saved folder is the trained model
    # After one epoch both models may answer every probe wrongly: their losses on one held-out batch tell a
    # reload of the trained weights from any other weights.
    trained, reloaded = scored
    assert reloaded is not trained
    rows = demo.reversal_dataset(64, seed=123)
    batch = demo.collate([{"input_ids": row["input_ids"], "labels": row["labels"]} for row in rows])
    loss = held_out_loss(trained, batch)
    assert held_out_loss(reloaded, batch) == pytest.approx(loss, abs=1e-6)
    assert abs(held_out_loss(demo.build_model(seed=1), batch) - loss) > 0.1  # the batch tells weights apart
    losses = [loss for _, loss in results["train_loss_curve"]]
    assert len(losses) >= 2 and losses[-1] < losses[0]
    assert set(results["examples"]) == {"abcdef", "hell", "lake"}  # "hello"'s "o" is not among its letters
    assert (tmp_path / "model" / "model.safetensors").is_file()
