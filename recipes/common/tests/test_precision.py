"""recipes.common.precision: bfloat16 autocast is chosen for a CPU training run only where it is measured faster."""

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from recipes.common import precision
from recipes.common.precision import (
    LEAST_BFLOAT16_SPEEDUP,
    MEASUREMENTS_FILE_VARIABLE,
    PRECISION_VARIABLE,
    bfloat16_speedup,
    choose_precision,
    main,
    measurement_key,
    package_cpu_module,
    probe_model,
    remembered_measurements_file,
    remembered_speedup,
)

REPO = Path(__file__).resolve().parents[3]
SHAPE = {
    "vocab_size": 50,
    "max_length": 6,
    "batch_size": 3,
    "d_model": 16,
    "num_layers": 1,
    "num_heads": 2,
    "intermediate_size": 32,
}


def _never_timed():
    raise AssertionError("timed where the answer needs no timing")


def test_a_gpu_or_a_cpu_without_bfloat16_arithmetic_is_answered_without_timing():
    assert choose_precision(_never_timed, gpu=True, cpu_bf16=True)[0] == "gpu"
    choice, why = choose_precision(_never_timed, gpu=False, cpu_bf16=False)
    assert choice == "float32" and "no bfloat16 arithmetic" in why


@pytest.mark.parametrize(
    ("speedup", "expected"),
    [
        (0.47, "float32"),
        (1.0, "float32"),
        (LEAST_BFLOAT16_SPEEDUP - 0.01, "float32"),
        (LEAST_BFLOAT16_SPEEDUP - 0.004, "float32"),  # 1.046: said as 1.046x, not as the 1.05x it falls short of
        (LEAST_BFLOAT16_SPEEDUP, "cpu_bf16"),
        (1.9, "cpu_bf16"),
    ],
)
def test_a_cpu_with_bfloat16_arithmetic_takes_it_only_where_it_is_clearly_faster(speedup, expected):
    choice, why = choose_precision(lambda: speedup, gpu=False, cpu_bf16=True)
    assert choice == expected
    assert f"{speedup:.3f}x float32's steps per second" in why


@pytest.mark.parametrize(
    ("asked", "gpu", "cpu_bf16", "expected"),
    [
        ("float32", False, True, "float32"),  # a CPU whose check would time, and might pick bfloat16
        ("float32", True, True, "float32"),
        ("bfloat16", False, True, "cpu_bf16"),
        ("bfloat16", False, False, "cpu_bf16"),  # asked for, though slow there: said so
        ("bfloat16", True, False, "gpu"),
    ],
)
def test_the_environment_overrides_the_check_without_timing(asked, gpu, cpu_bf16, expected):
    choice, why = choose_precision(_never_timed, gpu=gpu, cpu_bf16=cpu_bf16, asked=asked)
    assert choice == expected
    if not gpu or asked == "float32":
        assert why.startswith(f"{PRECISION_VARIABLE}={asked}: ")
        assert ("many times slower" in why) is (asked == "bfloat16" and not cpu_bf16)
    # "auto" is the measured choice.
    assert choose_precision(lambda: 0.5, gpu=False, cpu_bf16=True, asked="auto")[0] == "float32"
    assert choose_precision(lambda: 1.5, gpu=False, cpu_bf16=True, asked="auto")[0] == "cpu_bf16"


def test_the_command_line_takes_the_environment_and_names_a_bad_value(monkeypatch, capsys):
    arguments = ["--task", "masked-lm"] + [f"--{name}={value}" for name, value in SHAPE.items()]
    monkeypatch.setattr(precision, "bfloat16_speedup", lambda *args, **kwargs: _never_timed())
    monkeypatch.setenv(PRECISION_VARIABLE, "float32")
    assert main(arguments) == 0
    printed = capsys.readouterr()
    assert printed.out.strip() == "float32" and f"{PRECISION_VARIABLE}=float32" in printed.err
    monkeypatch.setenv(PRECISION_VARIABLE, "fp32")
    with pytest.raises(SystemExit) as stopped:
        main(arguments)
    assert stopped.value.code == 2
    assert f"{PRECISION_VARIABLE} must be one of auto, float32, bfloat16, not 'fp32'" in capsys.readouterr().err


@pytest.mark.parametrize("task", ["masked-lm", "seq2seq"])
def test_the_probe_trains_a_model_of_the_given_shape_in_both_precisions(task):
    model, batch = probe_model(task, **SHAPE)
    config = model.config
    assert (config.vocab_size, config.d_model, config.encoder_layers, config.num_attention_heads) == (50, 16, 1, 2)
    assert (config.intermediate_size, config.max_position_embeddings) == (32, 6)
    assert batch["input_ids"].shape == (3, 6) and batch["input_ids"].min() >= 4  # no special or padding tokens
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    computed_in = []  # the dtype of a projection's output, at each forward pass
    projection = next(module for module in model.modules() if isinstance(module, torch.nn.Linear))
    projection.register_forward_hook(lambda module, args, output: computed_in.append(output.dtype))
    speedup = bfloat16_speedup(model, batch, rounds=2, steps=1)
    # One untimed step in each, then each round float32's step, then bfloat16 autocast's.
    assert computed_in == [torch.float32, torch.bfloat16] * 3
    # The same steps in two precisions: a finite positive ratio (0 or inf: a broken timing). Wide bounds: one
    # millisecond-long step beside a busy process can take many times its usual time.
    assert 1e-3 < speedup < 1e3
    # The steps trained it (float32 weights, as autocast keeps them), and left autocast off.
    assert all(parameter.dtype == torch.float32 for parameter in model.parameters())
    assert any(not torch.equal(before[name], tensor) for name, tensor in model.state_dict().items())
    assert not torch.is_autocast_enabled("cpu")


def test_the_speedup_is_the_median_of_float32_seconds_over_bfloat16_seconds_per_round(monkeypatch):
    timings = iter([9.0, 9.0] + [2.0, 1.0, 3.0, 1.0, 1.0, 4.0])  # untimed steps, then rounds of 2x, 3x and 0.25x
    asked = []

    def fake_seconds(model, batch, optimizer, bfloat16, steps):
        asked.append((bfloat16, steps))
        return next(timings)

    monkeypatch.setattr(precision, "_training_step_seconds", fake_seconds)
    model, batch = probe_model("masked-lm", **SHAPE)
    assert bfloat16_speedup(model, batch, rounds=3, steps=2) == 2.0
    assert asked == [(False, 1), (True, 1)] + [(False, 2), (True, 2)] * 3


def _time_rounds_as(monkeypatch, ratios):
    """Make each timed round of ``bfloat16_speedup`` give the next of ``ratios`` (a bfloat16 step takes a second,
    float32's the ratio; the untimed steps a second); returns the list of the precisions asked for, bfloat16 or not."""
    float32_seconds = iter(ratios)
    asked = []

    def fake_seconds(model, batch, optimizer, bfloat16, steps):
        asked.append(bfloat16)
        if steps == 1 or bfloat16:
            return 1.0
        return next(float32_seconds)

    monkeypatch.setattr(precision, "_training_step_seconds", fake_seconds)
    return asked


def test_a_few_slow_rounds_at_the_start_do_not_decide(monkeypatch):
    # Per-round ratios as a 2-core virtual machine gives them: four straying rounds first (their median 0.975 would
    # pick float32), then the CPU's usual 1.3x. The default number of rounds outvotes them.
    ratios = [0.93, 1.01, 0.94, 1.07] + [1.3] * (precision.SPEEDUP_ROUNDS - 4)
    asked = _time_rounds_as(monkeypatch, ratios)
    model, batch = probe_model("masked-lm", **SHAPE)
    assert precision.SPEEDUP_ROUNDS >= 8
    assert choose_precision(lambda: bfloat16_speedup(model, batch), gpu=False, cpu_bf16=True)[0] == "cpu_bf16"
    assert len(asked) == 2 + 2 * len(ratios)  # every round was timed


@pytest.mark.parametrize(
    ("first_rounds", "timed"),
    [
        ([0.55, 0.60, 0.62, 0.54], precision.CLEAR_ROUNDS),  # far slower in each: decided
        ([1.4, 1.5, 1.35, 1.6], precision.CLEAR_ROUNDS),  # far faster in each: decided
        ([0.55, 0.60, 0.62, 0.90], precision.SPEEDUP_ROUNDS),  # one round near the threshold: every round
        ([1.4, 1.5, 1.25, 1.6], precision.SPEEDUP_ROUNDS),
    ],
)
def test_rounds_that_all_lie_far_from_the_threshold_decide_early(monkeypatch, first_rounds, timed):
    ratios = first_rounds + [1.0] * (precision.SPEEDUP_ROUNDS - len(first_rounds))
    asked = _time_rounds_as(monkeypatch, ratios)
    model, batch = probe_model("masked-lm", **SHAPE)
    speedup = bfloat16_speedup(model, batch)
    assert len(asked) == 2 + 2 * timed
    assert speedup == pytest.approx(statistics.median(ratios[:timed]))


def test_the_probe_refuses_an_unknown_task():
    with pytest.raises(ValueError, match="task must be one of"):
        probe_model("classification", **SHAPE)


def test_the_command_line_prints_one_choice_and_why(capsys):
    arguments = ["--task", "seq2seq"] + [f"--{name}={value}" for name, value in SHAPE.items()]
    assert main(arguments) == 0
    printed = capsys.readouterr()
    assert printed.out.strip() in ("gpu", "cpu_bf16", "float32")
    assert printed.err.startswith("precision: ")


def test_the_command_line_refuses_sizes_below_one(capsys):
    arguments = ["--task", "seq2seq"] + [f"--{name}={value}" for name, value in {**SHAPE, "d_model": 0}.items()]
    with pytest.raises(SystemExit):
        main(arguments)
    assert "sizes must be positive: --d_model 0" in capsys.readouterr().err


def test_a_measurement_is_remembered_for_the_same_key_and_made_again_for_another(tmp_path):
    path = tmp_path / "cache" / "precision.json"
    speedup, where = remembered_speedup(lambda: 1.049999, "cpu A | shape 1", path)
    assert speedup == 1.049999 and where == f"measured now, remembered in {path}"
    # The next run on this machine takes it without timing, to the last digit (rounded, it would pick bfloat16).
    speedup, where = remembered_speedup(_never_timed, "cpu A | shape 1", path)
    assert speedup == 1.049999 and where.startswith("measured on 20") and str(path) in where
    assert choose_precision(lambda: speedup, gpu=False, cpu_bf16=True)[0] == "float32"
    # Another CPU, torch, thread count or shape is measured, and both are kept.
    assert remembered_speedup(lambda: 1.3, "cpu B | shape 1", path) == (1.3, f"measured now, remembered in {path}")
    assert set(json.loads(path.read_text())) == {"cpu A | shape 1", "cpu B | shape 1"}
    assert remembered_speedup(_never_timed, "cpu B | shape 1", path)[0] == 1.3
    assert list(path.parent.iterdir()) == [path]  # no partial file left beside it


@pytest.mark.parametrize(
    ("damaged", "said"),
    [
        (b'{"cpu A | shape 1": {"speedup": 1.2', True),  # cut short
        (b"[1.2]", True),  # JSON, but no object of entries
        (b"\xff\xfe", True),  # not text
        (b'{"cpu A | shape 1": {"speedup": "fast"}}', False),  # an entry that is no speedup
        (b'{"cpu A | shape 1": {"speedup": 0}}', False),
    ],
)
def test_a_damaged_file_of_measurements_is_measured_past_and_rewritten(tmp_path, capsys, damaged, said):
    path = tmp_path / "precision.json"
    path.write_bytes(damaged)
    assert remembered_speedup(lambda: 0.9, "cpu A | shape 1", path) == (0.9, f"measured now, remembered in {path}")
    assert json.loads(path.read_text())["cpu A | shape 1"]["speedup"] == 0.9
    assert (f"precision: {path}" in capsys.readouterr().err) is said


def test_a_file_that_cannot_be_written_is_reported_and_the_measurement_used(tmp_path, capsys):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    path = blocker / "precision.json"
    assert remembered_speedup(lambda: 1.3, "cpu A", path) == (1.3, "measured now")
    assert f"could not be remembered in {path}" in capsys.readouterr().err


def test_the_key_names_the_cpu_torch_threads_and_shape():
    from hf_transformer.cpu import cpu_description

    key = measurement_key("masked-lm", SHAPE)
    assert key.startswith(cpu_description()) and f"torch {torch.__version__}" in key
    assert f"{torch.get_num_threads()} thread(s)" in key and "masked-lm" in key
    assert measurement_key("seq2seq", SHAPE) != key
    assert measurement_key("masked-lm", {**SHAPE, "d_model": 32}) != key


@pytest.mark.parametrize("variable", ["ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY"])
def test_the_key_names_the_kernel_settings_of_the_environment_where_they_are_set(monkeypatch, variable):
    # oneDNN held to AVX512_CORE_BF16 on a CPU with AMX (or torch to AVX2) runs other kernels: its own measurement.
    for name in precision.KERNEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    plain = measurement_key("masked-lm", SHAPE)
    monkeypatch.setenv(variable, "avx2")
    held = measurement_key("masked-lm", SHAPE)
    assert held != plain and f"{variable}=avx2" in held
    monkeypatch.setenv(variable, "")  # set but empty: the default kernels, the plain key
    assert measurement_key("masked-lm", SHAPE) == plain


def test_the_command_line_measures_once_per_machine_and_then_says_it_remembers(monkeypatch, capsys, tmp_path):
    path = tmp_path / "precision.json"
    monkeypatch.setenv(MEASUREMENTS_FILE_VARIABLE, str(path))
    monkeypatch.delenv(PRECISION_VARIABLE, raising=False)
    monkeypatch.setattr(precision, "choose_precision", _choosing_on_a_bfloat16_cpu)
    timed = []
    monkeypatch.setattr(precision, "bfloat16_speedup", lambda *args, **kwargs: timed.append(1) or 1.2)
    arguments = ["--task", "masked-lm"] + [f"--{name}={value}" for name, value in SHAPE.items()]
    assert main(arguments) == 0
    first = capsys.readouterr()
    assert first.out.strip() == "cpu_bf16" and f"(measured now, remembered in {path})" in first.err
    monkeypatch.setattr(precision, "bfloat16_speedup", lambda *args, **kwargs: _never_timed())
    assert main(arguments) == 0
    again = capsys.readouterr()
    assert again.out.strip() == "cpu_bf16" and "1.200x" in again.err and f"remembered in {path})" in again.err
    assert timed == [1]
    # Asked for a precision, the file is neither read nor written.
    path.unlink()
    monkeypatch.setenv(PRECISION_VARIABLE, "float32")
    assert main(arguments) == 0
    assert "remembered" not in capsys.readouterr().err and not path.exists()


def test_a_remembered_precision_is_answered_without_importing_transformers(tmp_path):
    # The job scripts' check, run as they run it, where the measurement is remembered: it needs torch (its version
    # and threads name the measurement) and the package's CPU questions, not transformers, which the package's own
    # import loads first (seconds of every job's start).
    path = tmp_path / "precision.json"
    environment = {**os.environ, MEASUREMENTS_FILE_VARIABLE: str(path)}
    environment.pop(PRECISION_VARIABLE, None)
    arguments = ["--task", "masked-lm"] + [f"--{name}={value}" for name, value in SHAPE.items()]
    # The key as a job's process computes it, written with a clear speedup: nothing is timed below.
    key = subprocess.run(
        [sys.executable, "-c", f"from recipes.common.precision import measurement_key; print(measurement_key("
         f"'masked-lm', {SHAPE!r}))"],
        env=environment, cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    path.write_text(json.dumps({key: {"speedup": 1.5, "measured": "earlier"}}))
    refusing = tmp_path / "refusing"
    (refusing / "transformers").mkdir(parents=True)
    (refusing / "transformers" / "__init__.py").write_text("raise ImportError('transformers was imported')\n")
    environment["PYTHONPATH"] = os.pathsep.join([str(refusing), str(REPO)])
    done = subprocess.run(
        [sys.executable, "-m", "recipes.common.precision", *arguments],
        env=environment, cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    if torch.cuda.is_available():
        assert done.stdout.strip() == "gpu"
    elif package_cpu_module().cpu_computes_bfloat16():
        assert done.stdout.strip() == "cpu_bf16" and "1.500x" in done.stderr and "remembered in" in done.stderr
    else:  # no bfloat16 arithmetic: float32, nothing looked up
        assert done.stdout.strip() == "float32"


def test_the_cpu_questions_are_the_packages_whether_or_not_it_is_imported():
    from hf_transformer import cpu

    assert package_cpu_module() is cpu  # imported here: the package's own module
    described = subprocess.run(
        [sys.executable, "-c", "import sys; from recipes.common.precision import package_cpu_module as m; "
         "print(m().cpu_description(), m().__name__, 'hf_transformer' in sys.modules, sep='|')"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert described == f"{cpu.cpu_description()}|hf_transformer_cpu|False"


def _choosing_on_a_bfloat16_cpu(measure_speedup, asked="auto"):
    return choose_precision(measure_speedup, gpu=False, cpu_bf16=True, asked=asked)


def test_the_file_is_named_by_the_environment_else_in_the_users_cache(monkeypatch, tmp_path):
    # The suite (conftest.py) keeps its measurements out of the user's cache, for every test and job it runs.
    during_the_tests = remembered_measurements_file()
    monkeypatch.delenv(MEASUREMENTS_FILE_VARIABLE)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    users = remembered_measurements_file()
    assert users == Path.home() / ".cache" / "hf_transformer" / "precision.json"
    assert during_the_tests != users and not during_the_tests.is_relative_to(Path.home() / ".cache")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert remembered_measurements_file() == tmp_path / "hf_transformer" / "precision.json"


def test_a_file_that_cannot_replace_the_old_one_leaves_no_partial_file(tmp_path, capsys):
    path = tmp_path / "precision.json"
    path.mkdir()  # a folder where the file should be: the new file is written beside it but cannot replace it
    assert remembered_speedup(lambda: 1.3, "cpu A", path) == (1.3, "measured now")
    assert "could not be remembered" in capsys.readouterr().err
    assert sorted(item.name for item in tmp_path.iterdir()) == ["precision.json"]
