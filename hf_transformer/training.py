"""Helpers the training scripts share: multi-process and resumed runs, metrics, checkpoint averaging, memory reuse on
CPU."""

from __future__ import annotations

import hashlib
import logging
import math
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
from transformers import AutoTokenizer, TrainerCallback

from .cpu import BFLOAT16_CPU_FLAGS, cpu_computes_bfloat16
from .saved_folder import TOKENIZER_FILES, tokenizer_place

logger = logging.getLogger(__name__)


@dataclass
class SplitLimits:
    """Command-line arguments (through HfArgumentParser) that cut each split for quick runs and smoke tests."""

    max_train_samples: int | None = field(default=None, metadata={"help": "use only this many training rows"})
    max_eval_samples: int | None = field(default=None, metadata={"help": "use only this many validation rows"})
    max_test_samples: int | None = field(default=None, metadata={"help": "use only this many test rows"})

    def __post_init__(self):
        # 0 would leave a split without rows, which fails later naming a column instead of the setting.
        for name in ("max_train_samples", "max_eval_samples", "max_test_samples"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"--{name} is a number of rows, at least 1; got {value}")

    def split_limits(self) -> dict[str, int | None]:
        """The limits by split name, as `hf_transformer.data.first_rows` takes them."""
        return {"train": self.max_train_samples, "validation": self.max_eval_samples, "test": self.max_test_samples}


def check_validation_size(share: float) -> None:
    """``--validation_size``, the share of the training rows held out where no validation file is given, lies
    strictly between 0 and 1 (datasets would refuse it only once the files are read)."""
    if not 0 < share < 1:
        raise ValueError(f"--validation_size is the share of the training rows held out, between 0 and 1; got {share}")


def pin_memory_only_with_accelerator(training_args) -> None:
    """Turn ``dataloader_pin_memory`` off when no accelerator is present.

    Pinned host memory only speeds up copies to an accelerator; on a CPU-only machine the Trainer's default
    (on) buys nothing and torch warns about it every time a data loader starts iterating.
    """
    if training_args.dataloader_pin_memory and not torch.accelerator.is_available():
        training_args.dataloader_pin_memory = False


def warn_of_emulated_bfloat16(training_args, cpuinfo: str | None = None) -> bool:
    """Warns, and returns True, when ``--bf16`` would train on a CPU that has no bfloat16 arithmetic.

    Autocast then runs the products through torch's reference bfloat16 kernels, many times slower than float32
    (benchmarks/results/notes.md, "bfloat16 on a CPU without it"); the job scripts choose float32 there themselves
    (recipes/common/precision_args.sh). A warning, not an error: the numbers are right, only slow.
    """
    on_cpu = training_args.use_cpu or not torch.accelerator.is_available()
    if not (training_args.bf16 and on_cpu and cpu_computes_bfloat16(cpuinfo) is False):
        return False
    logger.warning(
        "--bf16 on a CPU without bfloat16 arithmetic (none of the flags %s): its products run in torch's reference "
        "kernels, many times slower than float32. Leave out --bf16 on this machine.",
        ", ".join(BFLOAT16_CPU_FLAGS),
    )
    return True


# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def keep_freed_memory() -> bool:
    """Let the process keep the memory a training step frees, for the next step to reuse (glibc's malloc only).

    By default glibc hands large freed blocks back to the kernel (those above its mmap threshold, at most 32 MB,
    and a heap top above its trim threshold), and each step then gets them back one zeroed page at a time, a
    page fault per 4 kB page. With blocks up to 1 GB taken from the heap and its top never trimmed, the step's
    memory stays mapped between steps and is reused without faults (the gain per step: docs/performance.md).

    The price is memory: the heap is never given back, and where batch shapes change from step to step (batches
    grouped by length) freed blocks do not fit the next step's tensors exactly, so the heap keeps growing past a
    step's peak, faster than glibc's own, which also grows (``benchmarks/training_memory.py``). Leave it out
    where resident memory matters more than step time. Returns False where the C library is not glibc (nothing
    is changed then).
    """
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, 1 << 30)) and bool(mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))


# oneDNN reads this variable once, when it first compiles a kernel; it keeps this many compiled kernels (1,024 unset).
ONEDNN_CACHE_VARIABLE = "ONEDNN_PRIMITIVE_CACHE_CAPACITY"
ONEDNN_CACHE_CAPACITY = 16384


def keep_compiled_kernels(capacity: int = ONEDNN_CACHE_CAPACITY) -> bool:
    """Let oneDNN keep up to ``capacity`` of the kernels it compiles, one per shape of each product, for the later
    steps that meet the same shapes (``ONEDNN_PRIMITIVE_CACHE_CAPACITY`` in this process's environment).

    On a CPU torch runs bfloat16 products (autocast) through oneDNN, which compiles a kernel the first time it meets
    a shape and keeps the last 1,024 by default. Batches grouped by length meet many shapes: each length's products,
    forward and backward, and a masked-token step's head as many rows as the batch has masked tokens, a new count
    nearly every step. Past 1,024 kernels each new one evicts one that a later batch needs, and a step spends more
    time compiling its products than computing them; with room for every shape of a run, each is compiled once.
    The kernels are the same either way, so are the results (the gain per step: docs/performance.md).

    oneDNN reads the variable once, at its first compiled kernel: call this before the process's first product (the
    training scripts' ``set_up_training_process`` does, before any work). Returns False where it changes nothing: a
    capacity the user has set is kept."""
    if ONEDNN_CACHE_VARIABLE in os.environ:
        return False
    os.environ[ONEDNN_CACHE_VARIABLE] = str(capacity)
    return True


def end_process_group() -> None:
    """Close a multi-process run's process group (torchrun, accelerate) once every process is done; nothing without one.

    Each process first waits for the others (process 0 may still be writing the model), then the group and its
    threads are shut down before the interpreter exits. Left to the exit, a gloo group's threads can abort a
    finished process: a two-process translation run once ended with "terminate called without an active
    exception" (SIGABRT) in process 1 after every file was written, and torchrun reported the run as failed.
    """
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def check_tokenizer_source(path: str, option: str = "--tokenizer") -> None:
    """Refuses, before any text is read, a tokenizer ``path`` (given as ``option``) that is a folder holding no
    tokenizer, or a path to no folder; a name that could be a Hub id is left to the Hub."""
    from .folders import looks_like_a_path

    folder = Path(path)
    if folder.is_dir():
        if tokenizer_place(folder) is None:
            raise ValueError(f"{option} {path}: the folder holds no tokenizer ({' or '.join(TOKENIZER_FILES)})")
    elif looks_like_a_path(path) or folder.exists():
        raise FileNotFoundError(f"{option} {path}: no such folder")


def given_tokenizer(training_args, tokenizer_path: str | None = None):
    """The tokenizer a run is given: ``tokenizer_path`` when given (a folder, or a name looked up on the Hub), else the
    tokenizer saved in the checkpoint being resumed; None for a run that trains its own. The scripts call it before
    they read the rows, so that a wrong name fails at once. A run resumed with ``tokenizer_path`` is refused where that
    tokenizer is not the checkpoint's (other ids would be read by the saved weights)."""
    checkpoint = getattr(training_args, "resume_from_checkpoint", None)
    if tokenizer_path:
        check_tokenizer_source(tokenizer_path)
        try:
            tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
        except OSError as error:  # a name that is no folder here, looked up on the Hub: offline, or no such repo
            reason = str(error).strip().splitlines()[0]
            message = f"{tokenizer_path}: no such tokenizer folder, and no Hub tokenizer that loads ({reason})"
            raise OSError(message) from error
        if isinstance(checkpoint, str) and checkpoint and tokenizer_place(Path(checkpoint)) is not None:
            saved = AutoTokenizer.from_pretrained(checkpoint)
            if tokenizer_fingerprint(saved) != tokenizer_fingerprint(tokenizer):
                raise ValueError(
                    f"{tokenizer_path} is not the tokenizer of --resume_from_checkpoint {checkpoint} (its pieces or "
                    "their ids differ): resume with the tokenizer the run was started with"
                )
        return tokenizer
    if isinstance(checkpoint, str) and checkpoint:
        folder = Path(checkpoint)
        if tokenizer_place(folder) is None:
            raise ValueError(
                f"Resuming from {checkpoint}, which holds no tokenizer ({' or '.join(TOKENIZER_FILES)}): a newly "
                "trained one would give other token ids to the saved weights. Pass --tokenizer with the "
                "tokenizer the run was started with."
            )
        return AutoTokenizer.from_pretrained(folder)
    return None


def one_tokenizer(training_args, build: Callable[[], object], tokenizer_path: str | None = None):
    """The tokenizer of a run, identical in every process and across a resume.

    Unigram training is not deterministic from run to run (its pieces keep their ids, but their scores differ
    slightly), so a tokenizer trained independently in each process, or again when a run is resumed, could cut a
    text otherwise under the same weights. Order: the `given_tokenizer` (``tokenizer_path``, or the checkpoint's);
    else ``build()`` in process 0, whose files are broadcast to the other processes.
    """
    given = given_tokenizer(training_args, tokenizer_path)
    if given is not None:
        return given

    # Reading world_size sets up the process group (TrainingArguments does it lazily).
    if training_args.world_size == 1 or not dist.is_initialized():
        return build()
    payload: list = [None]
    if dist.get_rank() == 0:
        tokenizer = build()
        with tempfile.TemporaryDirectory() as folder:
            tokenizer.save_pretrained(folder)
            payload = [{path.name: path.read_bytes() for path in Path(folder).iterdir() if path.is_file()}]
    # Objects travel through the default process group (gloo on CPU, NCCL on GPU), so no shared disk is needed.
    dist.broadcast_object_list(payload, src=0)
    if dist.get_rank() == 0:
        return tokenizer
    with tempfile.TemporaryDirectory() as folder:
        for name, data in payload[0].items():
            (Path(folder) / name).write_bytes(data)
        return AutoTokenizer.from_pretrained(folder)


def tokenizer_fingerprint(tokenizer) -> str:
    """A short hash of the vocabulary and pipeline: equal in every process of a run, or the ids disagree."""
    # A tokenizer with a pre-tokenizer written in Python (MorphemeTokenizerFast) hashes its saved form.
    backend = tokenizer.saved_backend() if hasattr(tokenizer, "saved_backend") else tokenizer.backend_tokenizer
    return hashlib.sha256(backend.to_str().encode()).hexdigest()[:12]


def process_report(trainer, tokenizer) -> str:
    """One line per process after training: which process of how many, its optimizer steps, and the
    tokenizer it used; the multi-process tests read this line from every rank."""
    args = trainer.args
    return (
        f"process {args.process_index} of {args.world_size}: {trainer.state.global_step} optimizer steps, "
        f"tokenizer {tokenizer_fingerprint(tokenizer)}"
    )


def no_unused_parameters(training_args) -> None:
    """Every parameter of the package's heads takes part in each training step's loss (checked for every head in
    ``tests/test_training_helpers.py``), so DistributedDataParallel need not search the graph for unused ones: where
    the command line leaves ``--ddp_find_unused_parameters`` unset, it is set to False. Trainer's own default (True)
    costs a walk of the graph at every step and makes torch warn that it "did not find any unused parameters"."""
    if training_args.ddp_find_unused_parameters is None:
        training_args.ddp_find_unused_parameters = False


def set_up_training_process(training_args) -> None:
    """What every training script does once its arguments are parsed, before any work: pinned memory only with an
    accelerator (``pin_memory_only_with_accelerator``), no search for unused parameters (``no_unused_parameters``),
    freed memory kept for the next step (``keep_freed_memory``), room for every compiled product kernel of the run
    (``keep_compiled_kernels``), log lines with their time and logger at INFO, and a
    warning where ``--bf16`` would compute in emulated bfloat16 (``warn_of_emulated_bfloat16``).

    How torch's threads wait on a busy machine is chosen before torch loads, not here (``hf_transformer.openmp``)."""
    pin_memory_only_with_accelerator(training_args)
    no_unused_parameters(training_args)
    keep_freed_memory()  # each step reuses the last one's memory instead of faulting it in anew
    keep_compiled_kernels()  # each shape's product kernel compiled once, however many shapes the batches have
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    warn_of_emulated_bfloat16(training_args)


def training_settings(trainer) -> dict:
    """How a finished run trained, for its model card: the optimizer, the peak learning rate and its schedule, the
    warm-up steps and weight decay taken, the rows per optimizer step over all processes and accumulation steps, the
    optimizer steps and epochs done, the arithmetic, and the seed."""
    args, state = trainer.args, trainer.state
    precision = "bfloat16" if args.bf16 else "float16" if args.fp16 else "float32"
    # The schedule's peak as it ran: a run resumed from a checkpoint restores the checkpoint's schedule, whatever
    # --learning_rate its command gave.
    base_rates = getattr(getattr(trainer, "lr_scheduler", None), "base_lrs", None)
    return {
        "optimizer": str(getattr(args.optim, "value", args.optim)),
        "learning_rate": base_rates[0] if base_rates else args.learning_rate,
        "lr_scheduler_type": str(getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type)),
        "warmup_steps": args.get_warmup_steps(state.max_steps),
        "weight_decay": args.weight_decay,
        "train_batch_size": args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size,
        "optimizer_steps": state.global_step,
        "epochs": round(state.epoch, 2) if state.epoch is not None else None,
        "precision": precision,
        "seed": args.seed,
    }


def train_metrics(train_output) -> dict:
    """`Trainer.train`'s metrics, each named with a ``train_`` prefix (some already carry it)."""
    return {k if k.startswith("train_") else f"train_{k}": v for k, v in train_output.metrics.items()}


class BidirectionalEpochs(TrainerCallback):
    """Bidirectional training for the first `epochs` epochs, then the model's own direction only: sets a
    `hf_transformer.data.BidirectionalTranslation` training set's `epoch` and `mixing` at the start of each epoch
    (before its DataLoader workers, if any, are started). A run resumed from a checkpoint gets the epoch it resumes
    in, and so the directions that epoch drew."""

    def __init__(self, dataset, epochs: int):
        if epochs < 0:
            raise ValueError(f"--bidirectional_epochs must be 0 or more, got {epochs}")
        self.dataset = dataset
        self.epochs = epochs

    def on_epoch_begin(self, args, state, control, **kwargs):
        epoch = math.floor(state.epoch + 1e-6) if state.epoch else 0  # the epoch starting (state.epoch: its start)
        self.dataset.epoch = epoch
        self.dataset.mixing = epoch < self.epochs
        if state.is_world_process_zero and epoch == self.epochs and self.epochs:
            logger.info("epoch %d: bidirectional training ends; training on the source -> target pairs only", epoch)


AVERAGE_CHECKPOINTS_HELP = (
    "evaluate and save the mean of the weights of the last N saved checkpoints (1: the final weights as trained); "
    "needs --save_total_limit >= N"
)


def check_checkpoint_averaging(training_args, count: int) -> None:
    """Before training: `--average_checkpoints count` needs that many checkpoints kept, and replaces the best one."""
    if count < 1:
        raise ValueError(f"--average_checkpoints must be 1 or more, got {count}")
    if count == 1:
        return
    kept, strategy = training_args.save_total_limit, training_args.save_strategy
    strategy = getattr(strategy, "value", strategy)  # TrainingArguments turns the string into an enum
    if strategy == "no" or (kept is not None and kept < count):
        raise ValueError(
            f"--average_checkpoints {count} needs that many saved checkpoints: set --save_strategy (now "
            f"{strategy}) and --save_total_limit >= {count} (now {kept})"
        )
    if training_args.load_best_model_at_end:
        raise ValueError(
            f"--average_checkpoints {count} replaces the weights --load_best_model_at_end would load: use one of them"
        )
    earlier = _earlier_checkpoints(training_args)
    if earlier and kept is not None:
        raise ValueError(
            f"--output_dir {training_args.output_dir} holds checkpoints of an earlier run ({', '.join(earlier[:4])}"
            f"{', ...' if len(earlier) > 4 else ''}): transformers keeps the --save_total_limit {kept} checkpoints of "
            f"the highest steps, which can delete this run's before --average_checkpoints {count} reads them; resume "
            "that run with --resume_from_checkpoint, remove them, or give another folder"
        )
    saves = _checkpoints_saved(training_args, strategy)
    if saves is not None and saves < count:
        raise ValueError(
            f"--average_checkpoints {count} needs that many checkpoints, and this run saves {saves} (--save_strategy "
            f"{strategy}, --num_train_epochs {training_args.num_train_epochs}, --max_steps {training_args.max_steps}, "
            f"--save_steps {training_args.save_steps}): train longer or save more often"
        )


# Files a run leaves in its folder (`save_run`'s, and the Trainer's state in a checkpoint saved at the top level).
_RUN_FILES = ("config.json", "model.safetensors", "results.json", "trainer_state.json")


def check_new_run(training_args) -> None:
    """Refuses a run that would train nothing (no epochs and no steps: its result an untrained model), and an
    ``--output_dir`` that holds another run unless this one resumes (``--resume_from_checkpoint``): the new run would
    write over that run's model, results and card, and the Trainer's checkpoint rotation (``--save_total_limit``)
    would delete that run's checkpoints with its own. A folder with other files is used."""
    check_optimizer_numbers(training_args)
    if training_args.max_steps <= 0 and training_args.num_train_epochs <= 0:
        raise ValueError(
            f"--num_train_epochs {training_args.num_train_epochs} and --max_steps {training_args.max_steps}: this run "
            "would save an untrained model; give a number of epochs or of steps"
        )
    checkpoint = getattr(training_args, "resume_from_checkpoint", None)
    if checkpoint:
        if isinstance(checkpoint, str):
            _check_checkpoint(checkpoint)
        return
    folder = Path(training_args.output_dir)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"--output_dir {folder} is a file; give the folder to write the run into")
    if not folder.is_dir():
        return
    checkpoints = _earlier_checkpoints(training_args)
    held = [name for name in _RUN_FILES if (folder / name).is_file()] + checkpoints[:3]
    if held:
        more = ", ..." if len(checkpoints) > 3 else ""
        raise ValueError(
            f"--output_dir {folder} holds another run ({', '.join(held)}{more}): this one would write over its model "
            "and results, and the checkpoint rotation (--save_total_limit) would delete its checkpoints. Give a new "
            "folder, resume that run with --resume_from_checkpoint, or remove it"
        )


def check_optimizer_numbers(training_args) -> None:
    """Refuses the Trainer's numbers that torch or the data loader would refuse only once the data is read and the
    tokenizer trained: a negative learning rate, weight decay or epsilon, an Adam beta outside [0, 1), and batches or
    accumulation of fewer than one row or step."""
    wrong = [
        f"--{name} {getattr(training_args, name)} (at least 0)"
        for name in ("learning_rate", "weight_decay", "adam_epsilon")
        if getattr(training_args, name) < 0
    ]
    wrong += [
        f"--{name} {getattr(training_args, name)} (from 0 to below 1)"
        for name in ("adam_beta1", "adam_beta2")
        if not 0 <= getattr(training_args, name) < 1
    ]
    wrong += [
        f"--{name} {getattr(training_args, name)} (at least 1)"
        for name in ("per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps")
        if getattr(training_args, name) < 1
    ]
    if wrong:
        raise ValueError(f"impossible training numbers: {'; '.join(wrong)}")


def _check_checkpoint(checkpoint: str) -> None:
    """``--resume_from_checkpoint`` names a checkpoint the Trainer saved (its ``trainer_state.json`` there), or a
    ValueError says what it names instead: nothing, or a run's folder (with the checkpoints it holds)."""
    folder = Path(checkpoint)
    if not folder.is_dir():
        raise ValueError(f"--resume_from_checkpoint {checkpoint}: no such folder (a run's checkpoint-<step> folder)")
    if not (folder / "trainer_state.json").is_file():
        inside = [path.name for path in _checkpoint_folders(folder)]
        held = f"; it holds {', '.join(inside[-3:])}: give one of them" if inside else ""
        raise ValueError(f"--resume_from_checkpoint {checkpoint} is not a checkpoint (no trainer_state.json){held}")


# Config entries that are no setting of the model: where and how it was saved, what a forward call returns by default,
# and the loss a classifier's first labelled batch chose (problem_type).
_NOT_MODEL_SETTINGS = {
    "_name_or_path", "architectures", "auto_map", "dtype", "torch_dtype", "transformers_version", "output_attentions",
    "output_hidden_states", "return_dict", "use_cache", "problem_type", "fused_output_loss",
}  # fmt: skip


def check_resumed_model(config, checkpoint: str | Path, model_class: str | None = None) -> None:
    """Refuses to resume from ``checkpoint`` a model built with other settings than the checkpoint's model (its
    ``config.json``), naming each: another width or depth would fail inside torch's ``load_state_dict`` in the
    middle of ``Trainer.train``, and other heads, dropout or layout would silently go on training the checkpoint's
    weights as another model. A checkpoint of another head than ``model_class`` (another script's) is refused as
    such. A checkpoint without a config is left to the Trainer."""
    import json

    if not (Path(checkpoint) / "config.json").is_file():
        return
    saved = type(config).from_pretrained(checkpoint)
    if model_class and saved.architectures and model_class not in saved.architectures:
        raise ValueError(
            f"--resume_from_checkpoint {checkpoint} is a checkpoint of {', '.join(saved.architectures)}; this run "
            f"trains {model_class}: resume a checkpoint of this script's own runs"
        )
    # Both as config.json writes them in full: label ids as strings, dtypes by name.
    ours, saved = (json.loads(settings.to_json_string(use_diff=False)) for settings in (config, saved))
    differ = [
        f"{name} {saved.get(name)!r} there, {ours.get(name)!r} here"
        for name in sorted(set(ours) | set(saved))
        if name not in _NOT_MODEL_SETTINGS and ours.get(name) != saved.get(name)
    ]
    if differ:
        raise ValueError(
            f"--resume_from_checkpoint {checkpoint}: its model was built with other settings ({'; '.join(differ)}): "
            "resume with the arguments the run was started with"
        )


# Beside the model's settings, what a run resumed from a checkpoint must share with the run that saved it, kept in the
# checkpoint as JSON (the Trainer's training_args.bin is a pickle).
RESUME_SETTINGS_FILE = "resume_settings.json"
# The training arguments that decide which rows each step reads: the seeds (which also carve the validation rows out
# of a training file where no validation file is given: another seed would go on training on rows the first part
# scored as validation), the batch's shape and the order of the rows. A `TrainingArguments` subclass names its own
# beside them in a ``resume_arguments`` class attribute (a recipe's R-Drop weight, its bidirectional epochs). What a
# resumed run may change: where and how often it logs, saves and evaluates, and how long it trains.
RESUMED_ARGUMENTS = (
    "seed", "data_seed", "per_device_train_batch_size", "gradient_accumulation_steps", "train_sampling_strategy",
)  # fmt: skip
_RESUME_SETTING_NAMES = {
    "world_size": "processes",
    "train_rows": "training rows",
    "train_rows_sha256": "the training rows' tokens and labels (sha256)",
}


def rows_digest(dataset) -> str | None:
    """A sha256 of a training set's columns (token ids, labels, ...), by value rather than by how Arrow lays them out;
    a dataset's own ``rows_digest()`` where it has one (`hf_transformer.data.SubwordSampledTranslation`, whose rows
    are sampled anew at each draw); None for another dataset that is not a `datasets.Dataset` (a
    `BidirectionalTranslation` is read through its ``forward`` rows)."""
    import datasets
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    dataset = getattr(dataset, "forward", dataset)
    if callable(getattr(dataset, "rows_digest", None)):
        return dataset.rows_digest()
    if not isinstance(dataset, datasets.Dataset):
        return None
    table = dataset.with_format("arrow")[:]  # the rows in order, through any indices mapping
    digest = hashlib.sha256()
    for name in sorted(table.column_names):
        column = table.column(name).combine_chunks()
        digest.update(f"{name}:{column.type}".encode())
        while pa.types.is_list(column.type) or pa.types.is_large_list(column.type):
            digest.update(np.asarray(pc.list_value_length(column).to_numpy(zero_copy_only=False)).tobytes())
            column = pc.list_flatten(column)
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            digest.update("\0".join(map(str, column.to_pylist())).encode())
        else:
            digest.update(np.asarray(column.to_numpy(zero_copy_only=False)).tobytes())
    return digest.hexdigest()


def resume_settings(training_args, train_dataset) -> dict:
    """The settings ``RESUME_SETTINGS_FILE`` keeps: `RESUMED_ARGUMENTS` and the arguments' own ``resume_arguments``,
    the number of processes, and the training rows (their number, and a digest of their content: another data file
    of as many rows, or other distilled targets, would otherwise go on training from the middle of another pass)."""
    names = (*RESUMED_ARGUMENTS, *getattr(training_args, "resume_arguments", ()))
    settings = {name: getattr(training_args, name) for name in names}
    settings["world_size"] = training_args.world_size
    settings["train_rows"] = len(train_dataset) if hasattr(train_dataset, "__len__") else None
    settings["train_rows_sha256"] = rows_digest(train_dataset)
    return {name: value.value if hasattr(value, "value") else value for name, value in settings.items()}  # enums


def check_resumed_settings(settings: dict, checkpoint: str | Path) -> None:
    """Refuses to resume from ``checkpoint`` with other `resume_settings` than those it was saved with, naming each;
    a checkpoint without ``RESUME_SETTINGS_FILE`` (or a setting it does not hold) is left to the Trainer."""
    import json

    path = Path(checkpoint) / RESUME_SETTINGS_FILE
    if not path.is_file():
        return
    saved = json.loads(path.read_text())

    def shown(name: str, value) -> str:
        return value[:12] if name == "train_rows_sha256" and isinstance(value, str) else repr(value)

    differ = [
        f"{_RESUME_SETTING_NAMES.get(name, '--' + name)} {shown(name, saved[name])} there, {shown(name, value)} here"
        for name, value in settings.items()
        if name in saved and saved[name] != value
    ]
    if differ:
        raise ValueError(
            f"--resume_from_checkpoint {checkpoint}: its run read other rows or batches ({'; '.join(differ)}): "
            "resume with the data, the seed and the batches the run was started with"
        )


def _checkpoint_folders(folder: str | Path) -> list[Path]:
    """The Trainer's ``checkpoint-<step>`` folders in ``folder``, by step."""
    found = [path for path in Path(folder).glob("checkpoint-*") if path.is_dir() and path.name[11:].isdigit()]
    return sorted(found, key=lambda path: int(path.name[11:]))


def _earlier_checkpoints(training_args) -> list[str]:
    """The checkpoint folders already in ``--output_dir`` when a run starts rather than resumes, by step."""
    if getattr(training_args, "resume_from_checkpoint", None):
        return []
    return [path.name for path in _checkpoint_folders(training_args.output_dir)]


def _checkpoints_saved(training_args, strategy: str) -> int | None:
    """How many checkpoints a run saves, where its arguments alone tell (the Trainer also saves at the last step);
    None where it depends on the data (epochs counted in steps, steps in epochs)."""
    max_steps, save_steps = training_args.max_steps, training_args.save_steps
    if strategy == "epoch" and max_steps <= 0:
        return math.ceil(training_args.num_train_epochs)
    if strategy == "steps" and max_steps > 0 and save_steps >= 1:
        return math.ceil(max_steps / save_steps)
    return None


def average_last_checkpoints(
    model: torch.nn.Module, output_dir: str | Path, count: int, *, written_since: float | None = None
) -> list[str]:
    """After training with ``--average_checkpoints count``: load into ``model`` the mean of the weights of the last
    ``count`` checkpoints in ``output_dir``; returns their folder names (none for a count of 1: the model is kept).
    ``written_since`` (the run's start, as ``time.time()``; None for a resumed run, whose earlier checkpoints are its
    own): only checkpoints saved since then are this run's, not an earlier run's left in the same folder."""
    if count <= 1:
        return []
    folders = last_checkpoints(output_dir, count, written_since=written_since)
    average_checkpoints(model, folders)
    names = [folder.name for folder in folders]
    logger.info("evaluating the mean of the weights of %s", ", ".join(names))
    return names


def average_this_runs_checkpoints(model: torch.nn.Module, training_args, started: float) -> list[str]:
    """`average_last_checkpoints` with ``--average_checkpoints``, over the checkpoints this run saved: since it
    ``started`` (``time.time()``), or any for a resumed run, whose earlier checkpoints are its own."""
    since = None if training_args.resume_from_checkpoint else started
    return average_last_checkpoints(
        model, training_args.output_dir, training_args.average_checkpoints, written_since=since
    )


def last_checkpoints(output_dir: str | Path, count: int, *, written_since: float | None = None) -> list[Path]:
    """The ``count`` latest ``checkpoint-<step>`` folders the Trainer saved in ``output_dir``, oldest first; with
    ``written_since``, only those whose state the Trainer wrote since then."""
    folders = _checkpoint_folders(output_dir)
    earlier = []
    if written_since is not None:
        earlier = [p for p in folders if not _written_since(p, written_since)]
        folders = [p for p in folders if p not in earlier]
    if len(folders) < count:
        left = f" ({', '.join(sorted(p.name for p in earlier))} of an earlier run left there)" if earlier else ""
        raise ValueError(
            f"averaging {count} checkpoints needs {count} checkpoint folders of this run in {output_dir}, found "
            f"{len(folders)}{left}: save at least that many (--save_strategy epoch or steps, --save_total_limit >= "
            "the count), into an --output_dir of its own"
        )
    return folders[-count:]


def _written_since(folder: Path, since: float) -> bool:
    state = folder / "trainer_state.json"
    return state.is_file() and state.stat().st_mtime >= since


def average_checkpoints(model: torch.nn.Module, folders: list[str | Path]) -> None:
    """Load into ``model`` the mean of the weights saved in ``folders`` (each holding ``model.safetensors``).

    The mean of the last few checkpoints of a run usually scores better than the last one alone
    (Vaswani et al. 2017 average the last 5 or 20). Weights are summed in float64 and cast back. A tied
    weight (the shared token table) is saved once and loads through its one name.
    """
    from safetensors.torch import load_file

    if not folders:
        raise ValueError("average_checkpoints needs at least one checkpoint folder")
    total: dict[str, torch.Tensor] = {}
    dtypes: dict[str, torch.dtype] = {}
    for folder in folders:
        path = Path(folder) / "model.safetensors"
        if not path.is_file():
            raise FileNotFoundError(f"{folder} holds no model.safetensors to average")
        weights = load_file(str(path))
        if total and weights.keys() != total.keys():
            raise ValueError(f"{folder} holds other weights than {folders[0]}: the checkpoints are of different models")
        for name, tensor in weights.items():
            if name not in total:
                dtypes[name] = tensor.dtype
                total[name] = tensor.double() if tensor.is_floating_point() else tensor
            elif tensor.is_floating_point():
                total[name] += tensor.double()
            elif not torch.equal(tensor, total[name]):
                raise ValueError(f"{name} is an integer tensor that differs between checkpoints: it cannot be averaged")
    averaged = {
        name: (tensor / len(folders)).to(dtypes[name]) if tensor.is_floating_point() else tensor
        for name, tensor in total.items()
    }
    missing, unexpected = model.load_state_dict(averaged, strict=False)
    own = model.state_dict()
    loaded = {own[name].data_ptr() for name in averaged if name in own}
    untied = [name for name in missing if own[name].data_ptr() not in loaded]
    if unexpected or untied:
        raise ValueError(f"checkpoint weights do not fit the model: unexpected {unexpected[:3]}, missing {untied[:3]}")


def score_in_float32(trainer) -> None:
    """After training in mixed precision, compute what follows as the saved folder computes it: in float32.

    The folder's weights are float32 and every entry point (`pipeline`, `Predictor`, the scripts) runs them so, but
    Trainer's model keeps the autocast accelerate wrapped its forward in for training, so the figures a run records
    after it (validation, test, what is fitted on the model's outputs) would be bfloat16's: a review near the
    boundary could then count otherwise than a user finds. This puts the model's own forward back, in place
    (accelerate's public `unwrap_model` without its fp32 wrapper); a run without mixed precision is unchanged."""
    trainer.accelerator.unwrap_model(trainer.model, keep_fp32_wrapper=False)


def save_run(trainer, results, card=None, files=None) -> Path:
    """A training script's folder (``--output_dir``): the model (safetensors, config, generation config, tokenizer),
    ``results.json``, ``log_history.json``, ``README.md`` (``hf_transformer.hub.model_card`` with the ``CardText``
    ``card``, kept beside it in ``card_text.json`` for an upload's card) and ``files`` (name -> text, e.g. a test
    set's predictions).

    Every process must call it: under FSDP ``save_model`` first gathers the shards, a collective call that would
    wait forever for processes that had already finished; the files are written by process 0 alone."""
    import json

    from .hub import model_card, write_card_text

    output_dir = Path(trainer.args.output_dir)
    trainer.save_model(str(output_dir))
    if trainer.is_world_process_zero():
        text = json.dumps(results, indent=2, default=str, ensure_ascii=False)
        (output_dir / "results.json").write_text(text, encoding="utf-8")
        (output_dir / "log_history.json").write_text(json.dumps(trainer.state.log_history, indent=2))
        for name, content in (files or {}).items():
            (output_dir / name).write_text(content, encoding="utf-8")
        (output_dir / "README.md").write_text(model_card(output_dir, results, card), encoding="utf-8")
        write_card_text(output_dir, card)  # what an upload's card says too (hub.prepare_folder)
    return output_dir
