"""Small helpers the training scripts share (hf_transformer.training)."""

import os
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist
from transformers import TrainingArguments

from hf_transformer.cpu import cpu_computes_bfloat16
from hf_transformer.training import (
    ONEDNN_CACHE_CAPACITY,
    ONEDNN_CACHE_VARIABLE,
    check_new_run,
    end_process_group,
    keep_compiled_kernels,
    no_unused_parameters,
    pin_memory_only_with_accelerator,
    score_in_float32,
    warn_of_emulated_bfloat16,
)
from tests.test_cpu import ZEN3_CPUINFO, ZEN4_CPUINFO


@pytest.mark.parametrize("accelerator", [False, True])
def test_pin_memory_stays_on_only_with_an_accelerator(tmp_path, monkeypatch, accelerator):
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: accelerator)
    args = TrainingArguments(output_dir=str(tmp_path), report_to="none")
    assert args.dataloader_pin_memory  # the Trainer's default
    pin_memory_only_with_accelerator(args)
    assert args.dataloader_pin_memory is accelerator


def test_pin_memory_left_off_when_asked_off(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    args = TrainingArguments(output_dir=str(tmp_path), report_to="none", dataloader_pin_memory=False)
    pin_memory_only_with_accelerator(args)
    assert args.dataloader_pin_memory is False


@pytest.mark.parametrize(
    ("bf16", "use_cpu", "cpuinfo", "warned"),
    [
        (True, True, ZEN3_CPUINFO, True),
        (True, True, ZEN4_CPUINFO, False),
        (False, True, ZEN3_CPUINFO, False),
        (True, True, None, None),  # this machine's own /proc/cpuinfo
    ],
)
def test_bf16_on_a_cpu_without_bfloat16_arithmetic_is_warned_of(tmp_path, caplog, bf16, use_cpu, cpuinfo, warned):
    args = TrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=use_cpu, bf16=bf16)
    if warned is None:
        warned = cpu_computes_bfloat16() is False
    with caplog.at_level("WARNING", logger="hf_transformer.training"):
        assert warn_of_emulated_bfloat16(args, cpuinfo) is warned
    assert ("--bf16 on a CPU without bfloat16 arithmetic" in caplog.text) is warned


# Allocates, fills and frees a 64 MB tensor (above glibc's largest mmap threshold) 30 times, and prints the mean
# page faults of the last 20: by default each one maps fresh pages (one fault per page); with keep_freed_memory the
# heap holds the block after a few rounds and it is reused. Transparent huge pages (the kernel's setting `always`)
# would map the block in 2 MB pages, a few dozen faults instead of thousands: the program turns them off for itself
# (PR_SET_THP_DISABLE), and prints the size of the pages its block is mapped in (huge where that fails and the
# kernel maps every block in huge pages).
_FAULTS_PER_ALLOCATION = """
import ctypes, resource, sys, torch
from hf_transformer.training import keep_freed_memory

PR_SET_THP_DISABLE = 41
page = resource.getpagesize()
if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) != 0:
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as enabled, open(
            "/sys/kernel/mm/transparent_hugepage/hpage_pmd_size"
        ) as huge:
            page = int(huge.read()) if "[always]" in enabled.read() else page
    except OSError:
        pass
applied = keep_freed_memory() if sys.argv[1] == "keep" else None
faults = []
for _ in range(30):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = torch.ones(16 * 2**20)
    del block
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(applied, page, sum(faults[10:]) / 20)
"""


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator and page-fault counts")
def test_keep_freed_memory_stops_each_allocation_from_faulting_in_fresh_pages():
    def faults(mode: str) -> tuple[str, int, float]:
        result = subprocess.run(
            [sys.executable, "-c", _FAULTS_PER_ALLOCATION, mode], capture_output=True, text=True, check=True
        )
        applied, page, count = result.stdout.split()
        return applied, int(page), float(count)

    default_applied, page, default_faults = faults("default")
    kept_applied, _, kept_faults = faults("keep")
    assert default_applied == "None" and kept_applied == "True"
    pages = 64 * 2**20 // page  # 16,384 pages of 4 kB
    assert default_faults > pages / 2  # by default the block is mapped anew at each allocation, a fault per page
    assert kept_faults < default_faults / 100  # kept: reused without faulting its pages in again


# Runs a oneDNN product (a linear layer over oneDNN tensors: oneDNN's kernels on every x86 CPU, whatever its vector
# width) for 700 row counts, each a new shape with two kernels of its own (the input's reorder and the product), then
# the first shape again, and prints the variable as oneDNN saw it and whether that last product's kernel was found
# in oneDNN's cache ("cache_hit") or compiled anew ("cache_miss"), from oneDNN's log of each kernel it creates.
_KERNEL_CACHE_PROBE = """
import os, sys, torch
from hf_transformer.training import keep_compiled_kernels

applied = keep_compiled_kernels() if sys.argv[1] == "keep" else None
weight = torch.randn(8, 16).to_mkldnn()
for rows in [*range(1, 701), 1]:
    torch.nn.functional.linear(torch.randn(rows, 16).to_mkldnn(), weight)
print(applied, os.environ.get("ONEDNN_PRIMITIVE_CACHE_CAPACITY"))
"""


@pytest.mark.slow
@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="a torch build without oneDNN")
def test_keep_compiled_kernels_keeps_every_shape_of_a_run_in_onednns_cache():
    def last_product(mode: str) -> tuple[str, str]:
        env = {**os.environ, "ONEDNN_VERBOSE": "all"}
        env.pop(ONEDNN_CACHE_VARIABLE, None)
        result = subprocess.run(
            [sys.executable, "-c", _KERNEL_CACHE_PROBE, mode], capture_output=True, text=True, check=True, env=env
        )
        created = [line for line in result.stdout.splitlines() if ",create:" in line and ",inner_product," in line]
        assert len(created) == 701, result.stdout[-2000:]
        return result.stdout.splitlines()[-1], created[-1].split(",create:")[1].split(",")[0]

    # oneDNN's default keeps 1,024 kernels: the first shape's was evicted by the 1,400 after it.
    assert last_product("default") == ("None None", "cache_miss")
    assert last_product("keep") == (f"True {ONEDNN_CACHE_CAPACITY}", "cache_hit")


def test_keep_compiled_kernels_keeps_a_capacity_the_user_chose(monkeypatch):
    monkeypatch.setenv(ONEDNN_CACHE_VARIABLE, "64")
    assert keep_compiled_kernels() is False
    assert os.environ[ONEDNN_CACHE_VARIABLE] == "64"
    monkeypatch.delenv(ONEDNN_CACHE_VARIABLE)
    assert keep_compiled_kernels(capacity=4096) is True
    assert os.environ[ONEDNN_CACHE_VARIABLE] == "4096"


def test_end_process_group_closes_the_group_and_is_a_no_op_without_one(tmp_path):
    end_process_group()  # no group: nothing to do, no error
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        assert dist.is_initialized()
        end_process_group()
        assert not dist.is_initialized()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


@pytest.mark.parametrize("script_name", ["train_translation", "train_classifier", "pretrain_denoising"])
def test_training_scripts_check_bf16_before_any_work(script_name, tmp_path, monkeypatch):
    import hf_transformer.training
    from tests.helpers.launch import load_script

    script = load_script(script_name)
    checked = []

    class Stopped(Exception):
        pass

    def record_and_stop(training_args, cpuinfo=None):
        checked.append(training_args.bf16)
        raise Stopped  # nothing after the check runs

    monkeypatch.setattr(hf_transformer.training, "warn_of_emulated_bfloat16", record_and_stop)  # the set-up's
    with pytest.raises(Stopped):
        script.main(
            ["--output_dir", str(tmp_path), "--train_file", str(tmp_path / "unread.jsonl")]
            + ["--use_cpu", "true", "--bf16", "true", "--report_to", "none"]
        )
    assert checked == [True] and not any(tmp_path.iterdir())


@pytest.mark.parametrize("script_name", ["train_translation", "train_classifier", "pretrain_denoising"])
def test_training_scripts_load_a_given_tokenizer_before_reading_the_rows(script_name, tmp_path):
    """A tokenizer name that is no folder here is looked up on the Hub (offline in the tests): its failure comes
    before the rows are read (here, a missing training file), not after a long read."""
    from tests.helpers.launch import load_script

    argv = ["--output_dir", str(tmp_path / "run"), "--train_file", str(tmp_path / "unread.jsonl")]
    argv += ["--report_to", "none", "--tokenizer", "no_such_tokenizer_name"]
    with pytest.raises(OSError, match="no_such_tokenizer_name: no such tokenizer folder, and no Hub tokenizer"):
        load_script(script_name).main(argv)


@pytest.mark.parametrize("script_name", ["train_translation", "train_classifier", "pretrain_denoising"])
@pytest.mark.parametrize("earlier", ["checkpoint-3", "config.json", "results.json"])
def test_training_scripts_refuse_a_folder_holding_another_run_unless_resuming(script_name, earlier, tmp_path):
    """A new run into an earlier run's folder would write over its model and results, and the checkpoint rotation
    would delete its checkpoints: refused as the arguments parse, the folder left as it was."""
    from tests.helpers.launch import load_script

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "notes.txt").write_text("a user's file")
    script = load_script(script_name)
    argv = ["--output_dir", str(tmp_path / "run"), "--train_file", str(tmp_path / "unread.jsonl")]
    argv += ["--report_to", "none", "--save_total_limit", "1"]
    with pytest.raises(FileNotFoundError, match="unread.jsonl"):  # a folder with other files is used
        script.main(argv)
    held = tmp_path / "run" / earlier
    held.mkdir() if earlier.startswith("checkpoint-") else held.write_text("{}")
    before = sorted(path.name for path in (tmp_path / "run").iterdir())
    with pytest.raises(ValueError, match=rf"--output_dir .*run holds another run \({earlier}\).* --resume_from"):
        script.main(argv)
    assert sorted(path.name for path in (tmp_path / "run").iterdir()) == before
    (tmp_path / "run" / "checkpoint-4").mkdir()
    (tmp_path / "run" / "checkpoint-4" / "trainer_state.json").write_text("{}")
    checkpoint = str(tmp_path / "run" / "checkpoint-4")
    check_new_run(TrainingArguments(output_dir=str(tmp_path / "run"), resume_from_checkpoint=checkpoint))
    for given, told in (("run", r"run is not a checkpoint \(no trainer_state.json\); it holds .*checkpoint-4: give"),
                        ("missing", "missing: no such folder")):  # fmt: skip
        resumed = argv + ["--resume_from_checkpoint", str(tmp_path / given)]
        with pytest.raises(ValueError, match=f"--resume_from_checkpoint .*{told}"):
            script.main(resumed)
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="--output_dir .*file is a file"):
        check_new_run(TrainingArguments(output_dir=str(tmp_path / "file")))
    untrained = argv + ["--num_train_epochs", "0", "--output_dir", str(tmp_path / "new")]
    with pytest.raises(ValueError, match="--num_train_epochs 0.0 and --max_steps -1: this run would save an untrained"):
        script.main(untrained)
    with pytest.raises(FileNotFoundError, match="unread.jsonl"):  # one step is a run
        script.main(untrained + ["--max_steps", "1"])


@pytest.mark.parametrize(
    ("head", "settings"),
    [
        ("TransformerForConditionalGeneration", {}),
        ("TransformerForConditionalGeneration", {"share_embeddings": False, "tie_word_embeddings": False}),
        ("TransformerForConditionalGeneration", {"position_embedding_type": "learned", "layer_norm_position": "pre"}),
        ("TransformerForMaskedLM", {"position_embedding_type": "learned", "embedding_layer_norm": True}),
        ("TransformerForSequenceClassification", {"num_labels": 1}),
        *[("TransformerForSequenceClassification", {"classifier_pooling": p}) for p in ("mean", "max", "first")],
        ("TransformerForSequenceClassification", {"classifier_pooling": "decoder", "dropout": 0.1}),
    ],
)
def test_every_parameter_of_each_head_gets_a_gradient_so_ddp_need_not_search(head, settings, tmp_path):
    import hf_transformer
    from tests.helpers.models import tiny_config

    torch.manual_seed(0)
    model = getattr(hf_transformer, head)(tiny_config(**{"num_labels": 2, **settings})).train()
    input_ids = torch.tensor([[4, 5, 6, 7, 3], [8, 9, 3, 0, 0]])
    if head == "TransformerForSequenceClassification":
        labels = torch.tensor([0.5, 1.0]) if model.config.num_labels == 1 else torch.tensor([0, 1])
    elif head == "TransformerForMaskedLM":
        labels = torch.full_like(input_ids, -100)
        labels[0, 1] = 5
    else:
        labels = torch.tensor([[5, 6, 3], [7, 3, -100]])
    model(input_ids=input_ids, attention_mask=input_ids.ne(0), labels=labels).loss.backward()
    assert [name for name, parameter in model.named_parameters() if parameter.grad is None] == []

    args = TrainingArguments(output_dir=str(tmp_path), report_to="none")
    assert args.ddp_find_unused_parameters is None  # Trainer's default: True for DDP, with torch's warning
    no_unused_parameters(args)
    assert args.ddp_find_unused_parameters is False
    args = TrainingArguments(output_dir=str(tmp_path), report_to="none", ddp_find_unused_parameters=True)
    no_unused_parameters(args)
    assert args.ddp_find_unused_parameters is True  # the user's choice stays


@pytest.mark.parametrize("bf16", [True, False])
def test_after_mixed_precision_training_the_model_computes_in_float32_again(tmp_path, bf16):
    from datasets import Dataset
    from transformers import Trainer

    from hf_transformer import TransformerForSequenceClassification
    from tests.helpers.models import tiny_config

    torch.manual_seed(0)
    model = TransformerForSequenceClassification(tiny_config(num_labels=2))
    rows = Dataset.from_dict({"input_ids": [[4, 5, 6, 3]] * 8, "attention_mask": [[1] * 4] * 8, "labels": [0, 1] * 4})
    args = TrainingArguments(
        output_dir=str(tmp_path), use_cpu=True, bf16=bf16, max_steps=1, per_device_train_batch_size=4, report_to="none"
    )
    trainer = Trainer(model=model, args=args, train_dataset=rows)
    trainer.train()
    batch = {"input_ids": torch.tensor([[4, 5, 6, 7, 3], [8, 9, 3, 0, 0]])}
    batch["attention_mask"] = batch["input_ids"].ne(0).long()
    with torch.no_grad():
        plain = type(model).forward(model.eval(), **batch).logits  # the class's own forward: float32
        trained = model(**batch).logits
        score_in_float32(trainer)
        after = model(**batch).logits
    # Training in bfloat16 left the model's forward under autocast; afterwards it is the float32 forward again.
    assert torch.equal(trained, plain) is (not bf16)
    assert torch.equal(after, plain)


def test_a_checkpoint_of_another_head_is_refused_as_such(tmp_path):
    """A classifier's checkpoint resumed by the pretraining script: no argument would mend the settings that differ,
    so the refusal names the two heads instead."""
    from hf_transformer import TransformerConfig, TransformerForSequenceClassification
    from hf_transformer.training import check_resumed_model

    config = TransformerConfig(vocab_size=40, d_model=16, n_layer=1, num_attention_heads=2, intermediate_size=32)
    TransformerForSequenceClassification(config).save_pretrained(tmp_path / "checkpoint-3")
    told = "checkpoint-3 is a checkpoint of TransformerForSequenceClassification; this run trains TransformerForMasked"
    with pytest.raises(ValueError, match=told):
        check_resumed_model(config, tmp_path / "checkpoint-3", "TransformerForMaskedLM")
    check_resumed_model(config, tmp_path / "checkpoint-3", "TransformerForSequenceClassification")


def test_the_rows_digest_reads_values_not_layout():
    """The digest a checkpoint keeps of its training rows: the same rows give the same digest however Arrow holds them
    (one chunk or several, selected through an index); a changed token or label, or rows in another order, another."""
    import datasets

    from hf_transformer.data import BidirectionalTranslation
    from hf_transformer.training import rows_digest

    rows = {"input_ids": [[5, 6, 7], [8, 9], [10]], "label": [0, 1, 0]}
    whole = datasets.Dataset.from_dict(rows)
    chunked = datasets.concatenate_datasets([whole.select([0]), whole.select([1, 2])])
    selected = datasets.Dataset.from_dict({k: v + v for k, v in rows.items()}).select([0, 1, 2])
    assert rows_digest(whole) == rows_digest(chunked) == rows_digest(selected)
    assert rows_digest(whole) != rows_digest(datasets.Dataset.from_dict({**rows, "label": [0, 1, 1]}))
    recut = datasets.Dataset.from_dict({**rows, "input_ids": [[5, 6], [7, 8, 9], [10]]})
    assert rows_digest(whole) != rows_digest(recut)
    assert rows_digest(whole) != rows_digest(whole.select([1, 0, 2]))
    assert rows_digest(BidirectionalTranslation(whole, whole)) == rows_digest(whole)
    assert rows_digest([{"input_ids": [1]}]) is None
