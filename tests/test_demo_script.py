"""scripts/demo.py: the letter-reversing model trains, saves, reloads through the Auto classes and scores the same."""

import json
import sys

from launch_utils import load_script


def test_demo_trains_saves_and_reloads(tmp_path, monkeypatch):
    demo = load_script("demo")
    args = ["demo.py", "--output_dir", str(tmp_path), "--train_examples", "3400", "--epochs", "1"]
    monkeypatch.setattr(sys, "argv", args)
    demo.main()
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["exact_match"] == results["exact_match_after_reload"]  # the saved folder is the trained model
    losses = [loss for _, loss in results["train_loss_curve"]]
    assert len(losses) >= 2 and losses[-1] < losses[0]
    assert set(results["examples"]) == {"abcdef", "hell", "lake"}  # "hello"'s "o" is not among its letters
    assert (tmp_path / "model" / "model.safetensors").is_file()
