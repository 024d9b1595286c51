"""recipes.common.plotting: learning curves from a Trainer log history, a checkpoint's state or a run folder."""

import json
from pathlib import Path

import pytest
from matplotlib import image as mpimg

from recipes.common import plotting

pytestmark = pytest.mark.slow


def assert_real_png(path: Path, size: tuple[int, int]):
    pixels = mpimg.imread(path)
    assert pixels.shape[1] == size[0] and pixels.shape[0] == size[1]
    assert pixels[..., :3].std() > 0.05  # not a blank canvas


def trainer_history():
    history = [{"loss": 3.0 - 0.2 * step, "learning_rate": 1e-3, "epoch": step / 4, "step": step} for step in (1, 2, 3)]
    history.insert(
        2, {"eval_loss": 2.5, "eval_accuracy": 0.6, "eval_f1": 0.5, "eval_runtime": 0.1, "epoch": 1.0, "step": 2}
    )
    history.append(
        {"eval_loss": 2.2, "eval_accuracy": 0.7, "eval_f1": 0.6, "eval_runtime": 0.1, "epoch": 2.0, "step": 4}
    )
    history.append({"train_runtime": 5.0, "train_loss": 2.6, "epoch": 2.0, "step": 4})
    history.append(
        {"eval_loss": 2.0, "eval_accuracy": 0.9, "eval_runtime": 0.2, "epoch": 2.0, "step": 4}
    )  # final scoring
    return history


def test_curves_from_a_log_history_and_a_checkpoint_folder(tmp_path):
    module = plotting
    (tmp_path / "log_history.json").write_text(json.dumps(trainer_history()))
    result = module.main([str(tmp_path / "log_history.json"), "--output", str(tmp_path / "curves.png")])
    assert result["panels"] == 4  # loss, learning rate, accuracy, f1 (runtime is not a metric)
    assert_real_png(tmp_path / "curves.png", result["size"])

    figure, panels = module.plot_curves(trainer_history())
    assert [axes.get_title() for axes in panels] == ["loss", "learning rate", "eval accuracy", "eval f1"]
    train_line, eval_line = panels[0].get_lines()
    assert list(train_line.get_xdata()) == [1, 2, 3] and list(eval_line.get_ydata()) == [2.5, 2.2]
    assert list(panels[2].get_lines()[0].get_ydata()) == [0.6, 0.7]  # the post-training evaluation is left out

    run = tmp_path / "run"
    (run / "checkpoint-10").mkdir(parents=True)
    (run / "checkpoint-10" / "trainer_state.json").write_text(json.dumps({"log_history": trainer_history()[:2]}))
    (run / "checkpoint-2").mkdir()
    (run / "checkpoint-2" / "trainer_state.json").write_text(json.dumps({"log_history": []}))
    assert module.read_log_history(run) == trainer_history()[:2]  # the latest checkpoint, by number
    (run / "trainer_state.json").write_text(json.dumps({"log_history": trainer_history()}))
    assert module.read_log_history(run) == trainer_history()  # the run's own state, written at its end, first
    with pytest.raises(FileNotFoundError):
        module.read_log_history(tmp_path / "run" / "checkpoint-2" / "missing")


def test_curves_of_a_run_folder_with_a_title(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "log_history.json").write_text(json.dumps(trainer_history()))
    output = tmp_path / "figures" / "run.png"
    result = plotting.main([str(tmp_path / "run"), "--output", str(output), "--title", "a run", "--dpi", "50"])
    assert result["output"] == str(output) and result["panels"] == 4
    assert_real_png(output, result["size"])
    with pytest.raises(ValueError, match="no training or evaluation loss"):
        plotting.plot_curves([{"eval_accuracy": 0.5, "epoch": 1.0, "step": 2}])
