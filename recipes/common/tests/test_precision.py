"""recipes.common.precision: bfloat16 autocast is chosen for a CPU training run only where it is measured faster."""

import math

import pytest
import torch

from recipes.common.precision import (
    LEAST_BFLOAT16_SPEEDUP,
    bfloat16_speedup,
    choose_precision,
    main,
    probe_model,
)

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
        (LEAST_BFLOAT16_SPEEDUP, "cpu_bf16"),
        (1.9, "cpu_bf16"),
    ],
)
def test_a_cpu_with_bfloat16_arithmetic_takes_it_only_where_it_is_clearly_faster(speedup, expected):
    choice, why = choose_precision(lambda: speedup, gpu=False, cpu_bf16=True)
    assert choice == expected
    assert f"{speedup:.2f}x float32's steps per second" in why


@pytest.mark.parametrize("task", ["masked-lm", "seq2seq"])
def test_the_probe_trains_a_model_of_the_given_shape_in_both_precisions(task):
    model, batch = probe_model(task, **SHAPE)
    config = model.config
    assert (config.vocab_size, config.d_model, config.encoder_layers, config.num_attention_heads) == (50, 16, 1, 2)
    assert (config.intermediate_size, config.max_position_embeddings) == (32, 6)
    assert batch["input_ids"].shape == (3, 6) and batch["input_ids"].min() >= 4  # no special or padding tokens
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    speedup = bfloat16_speedup(model, batch, rounds=1, steps=1)
    assert math.isfinite(speedup) and speedup > 0
    # The steps trained it (float32 weights, as autocast keeps them), and left autocast off.
    assert all(parameter.dtype == torch.float32 for parameter in model.parameters())
    assert any(not torch.equal(before[name], tensor) for name, tensor in model.state_dict().items())
    assert not torch.is_autocast_enabled("cpu")


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
