"""FSDP 2 (accelerate's `fsdp_version: 2`) with two CPU processes over gloo on 127.0.0.1:
configs/accelerate/fsdp-cpu.yaml driving scripts/train_translation.py (on line-aligned text files).

torch's `fully_shard` shards CPU tensors over gloo, but accelerate does not: `AcceleratorState` turns the
FSDP settings into `DistributedType.FSDP` only for GPU-like process types (MULTI_GPU, MULTI_XPU, ...). With
`use_cpu` the processes are MULTI_CPU, the FSDP plugin built from the config is dropped without a warning,
and the Trainer wraps the model in DistributedDataParallel (`test_stock_launch_on_cpu_is_ddp`).

This file is therefore also a launcher. `accelerate launch ... tests/test_fsdp.py [WORKAROUND...] SCRIPT
ARGS...` runs SCRIPT in each process and logs one `fsdp report: {json}` line per process after training.
Each WORKAROUND flag lifts one obstacle (docs/distributed.md, "FSDP 2 on CPU", shows what each one avoids):

- `--shard-on-cpu`: a MULTI_CPU `AcceleratorState` keeps the FSDP plugin it is given, as a GPU-like one
  does. Everything after that (sharding, the full-state-dict checkpoint, resuming) is accelerate's and
  transformers' own FSDP 2 code.
- `--load-once-per-module`: resuming from a full state dict fails in torch for a module registered under
  two names, which the shared encoder/decoder token table is.

The saved folder names and carries the package's own code, not torch's FSDP subclass.
"""

from __future__ import annotations

import json
import os
import re
import runpy
import subprocess
import sys
import traceback
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from accelerate.commands.config.config_args import load_config_from_file
from accelerate.state import AcceleratorState
from accelerate.utils import DistributedType, fsdp_utils
from safetensors import safe_open
from torch.distributed.tensor import DTensor
from transformers import AutoConfig, AutoModelForSeq2SeqLM, Trainer

from hf_transformer import TransformerForConditionalGeneration
from hf_transformer.modeling_transformer import TransformerPreTrainedModel
from tests.helpers.launch import (
    REPO,
    SCRIPTS,
    accelerate_launch,
    isolated_python,
    logged_losses,
    pair_files,
    run,
    script_env,
    write_multi30k,
)

CONFIG = REPO / "configs" / "accelerate" / "fsdp-cpu.yaml"
REPORT_LINE = re.compile(r"fsdp report: (\{.*?\})")


# --------------------------------------------------------------------------------------------------
# The launcher (runs inside each process started by accelerate launch)


def shard_on_cpu() -> None:
    """Makes a MULTI_CPU AcceleratorState keep the FSDP plugin it is given, as a GPU-like one does."""
    original = AcceleratorState.__init__

    def __init__(self, *args, fsdp_plugin=None, **kwargs):
        original(self, *args, fsdp_plugin=fsdp_plugin, **kwargs)
        # Every AcceleratorState() copies PartialState's distributed type (MULTI_CPU) over the shared state
        # again, so the plugin kept from the first call decides on each one.
        plugin = fsdp_plugin or getattr(self, "fsdp_plugin", None)
        if plugin is not None and self.distributed_type == DistributedType.MULTI_CPU:
            self.distributed_type = DistributedType.FSDP
            self.fsdp_plugin = plugin

    AcceleratorState.__init__ = __init__


def load_full_state_once_per_module() -> None:
    """Loads an FSDP 2 full-state-dict checkpoint with one key per module, as torch expects.

    The model shares one `nn.Embedding` module between encoder and decoder (`share_embeddings`), so
    `model.state_dict()`, the saved full state dict, names its weight twice. torch's `set_model_state_dict`
    walks each module once: with `broadcast_from_rank0` and `cpu_offload` (accelerate's `load_fsdp_model`
    asks for both whenever there is more than one process) it raises
    `KeyError: 'model.decoder.embeddings.embed_tokens.weight'`; without `cpu_offload` it copies the second
    name's plain tensor into the sharded parameter ("got mixed torch.Tensor and DTensor"). Dropping the
    second name loads the table once, through the first; the load is then not strict, because
    `load_state_dict` still counts the second name as missing.
    """
    set_model_state_dict = fsdp_utils._set_model_state_dict

    def once_per_module(model, state_dict, adapter_only=False, sd_options=None):
        seen, aliases = set(), []
        for name, module in model.named_modules(remove_duplicate=False):
            if id(module) in seen:
                aliases.append(f"{name}.")
            seen.add(id(module))
        if aliases and sd_options is not None and sd_options.full_state_dict:
            state_dict = {k: v for k, v in state_dict.items() if not k.startswith(tuple(aliases))}
            sd_options = replace(sd_options, strict=False)
        return set_model_state_dict(model, state_dict, adapter_only=adapter_only, sd_options=sd_options)

    fsdp_utils._set_model_state_dict = once_per_module


def report_after_training() -> None:
    """After `Trainer.train`, each process logs its distributed type and how it holds the parameters."""
    train = Trainer.train

    def train_and_report(self, *args, **kwargs):
        output = train(self, *args, **kwargs)
        params = list(self.model.parameters())
        plugin = self.accelerator.state.fsdp_plugin if self.is_fsdp_enabled else None
        report = {
            "rank": dist.get_rank(),
            "world_size": dist.get_world_size(),
            "backend": dist.get_backend(),
            "distributed_type": self.accelerator.distributed_type.value,
            "fsdp_version": getattr(plugin, "fsdp_version", None),
            "wrapper": type(self.model_wrapped).__name__,
            "parameters": len(params),
            "sharded_parameters": sum(isinstance(p, DTensor) for p in params),
            "full_numel": sum(p.numel() for p in params),
            "local_numel": sum((p.to_local() if isinstance(p, DTensor) else p).numel() for p in params),
            "global_step": self.state.global_step,
        }
        # One write: the two processes share the pipe, and a short single write is not interleaved.
        sys.stderr.write(f"fsdp report: {json.dumps(report)}\n")
        sys.stderr.flush()
        return output

    Trainer.train = train_and_report


WORKAROUNDS = {
    "--shard-on-cpu": shard_on_cpu,
    "--load-once-per-module": load_full_state_once_per_module,
}


def launch() -> None:
    arguments = sys.argv[1:]
    while arguments[0] in WORKAROUNDS:
        WORKAROUNDS[arguments.pop(0)]()
    report_after_training()
    sys.argv = arguments
    status = 0
    try:
        runpy.run_path(arguments[0], run_name="__main__")
    except SystemExit as stop:
        status = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
    except BaseException:
        traceback.print_exc()
        status = 1
    # The script has written everything the tests read, or failed; the interpreter's own teardown (torch's
    # and the data loaders' exit work) is slow and checks nothing, so the process ends here.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


# --------------------------------------------------------------------------------------------------
# The tests

ALL_WORKAROUNDS = list(WORKAROUNDS)
STEPS, SAVE_STEPS, RESUMED_STEPS = 6, 3, 9
MODEL = [
    "--vocab_size", "60", "--d_model", "32", "--num_layers", "1", "--num_heads", "2", "--intermediate_size", "64",
    "--max_source_length", "16", "--max_target_length", "16", "--dropout", "0", "--num_beams", "2",
    "--lr_scheduler_type", "constant", "--max_eval_samples", "8", "--max_test_samples", "8",
]  # fmt: skip
COMMON = [
    "--per_device_train_batch_size", "16", "--learning_rate", "1e-2", "--warmup_steps", "0", "--logging_steps", "1",
    "--train_sampling_strategy", "sequential", "--eval_strategy", "no", "--dataloader_num_workers", "0",
    "--report_to", "none", "--disable_tqdm", "true", "--use_cpu", "--seed", "0",
]  # fmt: skip

pytestmark = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(), reason="torch.distributed with gloo is not available"
)


def command(data_dir: Path, output_dir: Path, workarounds: list[str], *extra: str) -> list[str]:
    """`accelerate launch` with configs/accelerate/fsdp-cpu.yaml of train_translation.py through this launcher."""
    return accelerate_launch("--config_file", str(CONFIG)) + [
        __file__, *workarounds, str(SCRIPTS / "train_translation.py"), "--output_dir", str(output_dir),
        *pair_files(data_dir), *MODEL, *COMMON, *extra,
    ]  # fmt: skip


def reports(output: str) -> dict[int, dict]:
    found = [json.loads(line) for line in REPORT_LINE.findall(output)]
    return {report["rank"]: report for report in found}


def losses_by_step(output_dir: Path) -> dict[int, float]:
    history = json.loads((output_dir / "log_history.json").read_text())
    return {entry["step"]: entry["loss"] for entry in history if "loss" in entry}


def launch_expecting_failure(cmd: list[str], timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=script_env(), capture_output=True, text=True, timeout=timeout, cwd=REPO)


def test_config_asks_for_fsdp2_with_a_full_state_dict_on_two_cpu_processes():
    config = load_config_from_file(str(CONFIG))
    assert config.distributed_type == "FSDP" and config.use_cpu and config.num_processes == 2
    assert config.mixed_precision == "no" and config.main_process_ip == "127.0.0.1"
    fsdp = config.fsdp_config
    assert fsdp["fsdp_version"] == 2 and fsdp["fsdp_state_dict_type"] == "FULL_STATE_DICT"
    assert fsdp["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
    wrapped = set(fsdp["fsdp_transformer_layer_cls_to_wrap"].split(","))
    assert wrapped == set(TransformerPreTrainedModel._no_split_modules)


def test_the_launch_commands_of_the_config_and_the_guide_are_this_launchers(data_dir, tmp_path):
    """The commands that configs/accelerate/fsdp-cpu.yaml's comment and docs/distributed.md give run this file with
    the flags it takes, as the FSDP tests below run it."""
    comment = " ".join(line.lstrip("#") for line in CONFIG.read_text().splitlines() if line.startswith("#"))
    guide = (REPO / "docs" / "distributed.md").read_text()
    pattern = r"tests/test_fsdp\.py((?: --[\w-]+)+) scripts/train_translation\.py --use_cpu"
    for text in (comment, guide):
        found = re.findall(pattern, re.sub(r"[\s\\]+", " ", text))  # continued lines joined
        assert found and all(flags.split() == ALL_WORKAROUNDS for flags in found), (found, ALL_WORKAROUNDS)
    launched = command(data_dir, tmp_path, ALL_WORKAROUNDS)
    after = launched[launched.index(__file__) + 1 :]
    assert after[: len(ALL_WORKAROUNDS) + 1] == [*ALL_WORKAROUNDS, str(SCRIPTS / "train_translation.py")]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    write_multi30k(root, {"train": 256, "val": 16, "test_2016_flickr": 16})
    return root


@pytest.fixture(scope="module")
def fsdp_run(data_dir, tmp_path_factory):
    """Six optimizer steps under FSDP 2 on two CPU processes, checkpoints at steps 3 and 6."""
    output_dir = tmp_path_factory.mktemp("fsdp") / "run"
    steps = ["--max_steps", str(STEPS), "--save_strategy", "steps", "--save_steps", str(SAVE_STEPS)]
    done = run(command(data_dir, output_dir, ALL_WORKAROUNDS, *steps))
    return output_dir, reports(done.stderr + done.stdout)


@pytest.mark.slow
def test_fsdp2_shards_the_model_over_two_cpu_processes(fsdp_run):
    output_dir, found = fsdp_run
    assert sorted(found) == [0, 1], found
    for report in found.values():
        assert report["world_size"] == 2 and report["backend"] == "gloo", report
        assert report["distributed_type"] == "FSDP" and report["fsdp_version"] == 2, report
        assert report["global_step"] == STEPS, report
        # fully_shard turns every parameter into a DTensor sharded on dim 0: each process holds about half.
        assert report["sharded_parameters"] == report["parameters"] > 0, report
        assert report["local_numel"] < 0.6 * report["full_numel"], report
    assert found[0]["local_numel"] + found[1]["local_numel"] == found[0]["full_numel"], found
    assert json.loads((output_dir / "results.json").read_text())["world_size"] == 2

    losses = logged_losses(output_dir)
    shards = [(r["local_numel"], r["full_numel"]) for r in found.values()]
    print("FSDP 2 losses:", losses, "parameters held / full, per process:", shards)
    assert len(losses) == STEPS and losses[-1] < 0.8 * losses[0], losses


@pytest.mark.slow
@pytest.mark.parametrize("folder", ["run", f"run/checkpoint-{STEPS}"])
def test_fsdp2_saves_one_full_safetensors_file(fsdp_run, folder):
    output_dir, _ = fsdp_run
    path = output_dir.parent / folder
    # FULL_STATE_DICT: one model.safetensors, no distributed-checkpoint (DCP) shards.
    assert (path / "model.safetensors").is_file()
    assert not list(path.glob("**/*.distcp")) and not list(path.glob("pytorch_model_fsdp_*")), sorted(path.iterdir())

    model = AutoModelForSeq2SeqLM.from_pretrained(path)
    assert isinstance(model, TransformerForConditionalGeneration)
    reference = TransformerForConditionalGeneration(AutoConfig.from_pretrained(path)).state_dict()
    loaded = model.state_dict()
    assert loaded.keys() == reference.keys()
    for name, tensor in loaded.items():
        assert tensor.shape == reference[name].shape, name
        assert torch.isfinite(tensor).all(), name
    with safe_open(str(path / "model.safetensors"), "pt") as weights:
        assert weights.keys(), "empty weights file"
        for name in weights.keys():
            assert torch.equal(weights.get_tensor(name), loaded[name]), name
    # The tied table is one tensor after loading, as before sharding.
    assert model.lm_head.weight is model.model.encoder.embeddings.embed_tokens.weight


@pytest.mark.slow
def test_fsdp2_final_model_is_the_last_checkpoint(fsdp_run):
    output_dir, _ = fsdp_run
    with (
        safe_open(str(output_dir / "model.safetensors"), "pt") as final,
        safe_open(str(output_dir / f"checkpoint-{STEPS}" / "model.safetensors"), "pt") as last,
    ):
        assert set(final.keys()) == set(last.keys())
        for name in final.keys():
            assert torch.equal(final.get_tensor(name), last.get_tensor(name)), name


@pytest.mark.slow
def test_fsdp2_resumes_from_a_checkpoint(fsdp_run, data_dir, tmp_path):
    output_dir, _ = fsdp_run
    checkpoint = output_dir / f"checkpoint-{SAVE_STEPS}"
    resumed = tmp_path / "resumed"
    steps = [
        "--max_steps", str(RESUMED_STEPS), "--save_strategy", "steps", "--save_steps", str(SAVE_STEPS),
        "--resume_from_checkpoint", str(checkpoint),
    ]  # fmt: skip
    done = run(command(data_dir, resumed, ALL_WORKAROUNDS, *steps))
    found = reports(done.stderr + done.stdout)
    assert sorted(found) == [0, 1], found
    assert all(r["distributed_type"] == "FSDP" and r["global_step"] == RESUMED_STEPS for r in found.values()), found
    assert (resumed / f"checkpoint-{RESUMED_STEPS}" / "model.safetensors").is_file()
    assert (resumed / "model.safetensors").is_file()

    before, after = losses_by_step(output_dir), losses_by_step(resumed)
    print("losses before resuming:", before, "after:", after)
    assert sorted(after) == list(range(1, RESUMED_STEPS + 1)), after
    # Sequential data and no dropout: steps 4-6 repeat the first run's exactly when the weights and the
    # Adam moments were restored from the sharded run's checkpoint.
    for step in range(SAVE_STEPS + 1, STEPS + 1):
        assert after[step] == pytest.approx(before[step], abs=1e-5), (step, before, after)
    assert after[RESUMED_STEPS] < before[1]


@pytest.mark.slow
def test_stock_launch_on_cpu_is_ddp(fsdp_run, data_dir, tmp_path):
    """Without `--shard-on-cpu` accelerate silently trains with DDP; same rows per step, so the same losses."""
    output_dir, _ = fsdp_run
    ddp = tmp_path / "ddp"
    done = run(
        command(data_dir, ddp, [], "--max_steps", str(STEPS), "--save_strategy", "no", "--tokenizer", str(output_dir))
    )
    found = reports(done.stderr + done.stdout)
    assert sorted(found) == [0, 1], found
    for report in found.values():
        assert report["world_size"] == 2 and report["distributed_type"] == "MULTI_CPU", report
        assert report["wrapper"] == "DistributedDataParallel" and report["sharded_parameters"] == 0, report
        assert report["local_numel"] == report["full_numel"], report
    # Sharded and replicated training compute the same update from the same global batch.
    fsdp_losses, ddp_losses = logged_losses(output_dir), logged_losses(ddp)
    print("FSDP 2 losses:", fsdp_losses, "DDP losses:", ddp_losses)
    assert ddp_losses == pytest.approx(fsdp_losses, abs=2e-4)


@pytest.mark.slow
def test_saved_folder_names_the_package_code(fsdp_run):
    # fully_shard swaps the model's class for a subclass defined in torch; the saved folder must still name and
    # carry the package's own code, so that trust_remote_code loads it where the package is not installed.
    output_dir, _ = fsdp_run
    config = json.loads((output_dir / "config.json").read_text())
    assert config["architectures"] == ["TransformerForConditionalGeneration"]
    assert config["auto_map"]["AutoModelForSeq2SeqLM"] == "modeling_transformer.TransformerForConditionalGeneration"
    assert config["auto_map"]["AutoModel"] == "modeling_transformer.TransformerModel"
    copied = sorted(p.name for p in output_dir.glob("*.py"))
    assert "modeling_transformer.py" in copied and "configuration_transformer.py" in copied, copied
    assert not any(name.startswith("_fsdp") for name in copied), copied

    # Where hf_transformer cannot be imported, the copied code loads it and it decodes as the package does.
    tmp = output_dir.parent / "isolated"
    tmp.mkdir(exist_ok=True)
    script = tmp / "load.py"
    script.write_text(REMOTE_CODE_SCRIPT)
    run = isolated_python(script, str(output_dir), str(tmp / "generated.pt"), tmp=tmp)
    assert run.returncode == 0, run.stderr[-4000:]
    model = AutoModelForSeq2SeqLM.from_pretrained(output_dir).eval()
    source = torch.tensor([[5, 6, 7, 8], [9, 10, 0, 0]])
    with torch.no_grad():
        expected = model.generate(source, attention_mask=source.ne(0), num_beams=2, max_new_tokens=5)
    assert torch.equal(torch.load(tmp / "generated.pt"), expected)


REMOTE_CODE_SCRIPT = """
import importlib.util, sys
assert importlib.util.find_spec("hf_transformer") is None, "hf_transformer is importable"
import torch
from transformers import AutoModelForSeq2SeqLM

torch.set_num_threads(1)
model = AutoModelForSeq2SeqLM.from_pretrained(sys.argv[1], trust_remote_code=True).eval()
assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
source = torch.tensor([[5, 6, 7, 8], [9, 10, 0, 0]])
with torch.no_grad():
    torch.save(model.generate(source, attention_mask=source.ne(0), num_beams=2, max_new_tokens=5), sys.argv[2])
"""


if __name__ == "__main__":
    launch()
