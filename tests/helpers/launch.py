"""Loading the scripts in-process, and running them in subprocesses (torchrun, accelerate launch, plain python),
on generated data."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import re
import shlex
import socket
import subprocess
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts"
PRECISION_ARGS = REPO / "recipes" / "common" / "precision_args.sh"
POSITIVE = ["정말 재미있다", "최고의 영화", "감동적이고 좋았다", "배우 연기가 훌륭하다", "또 보고 싶다"]
NEGATIVE = ["너무 지루하다", "최악의 영화", "시간이 아깝다", "연기가 어색하다", "다시는 안 본다"]
WORDS = {
    "en": ["a", "dog", "cat", "man", "woman", "runs", "sits", "on", "the", "grass", "red", "ball", "big", "small"],
    "de": ["ein", "hund", "katze", "mann", "frau", "läuft", "sitzt", "auf", "dem", "gras", "roter", "ball", "groß"],
}


def load_benchmark_module(name: str):
    """``benchmarks/<name>.py`` as a module."""
    return _load(name, SCRIPTS.parent / "benchmarks" / f"{name}.py")


def load_script(name: str):
    """``scripts/<name>.py`` as a module, so tests can call its functions."""
    return _load(name, SCRIPTS / f"{name}.py")


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve a script's annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def precision_choices() -> list:
    """Every value ``recipes/common/precision_args.sh`` can give the job scripts' array ``precision_args``, as pytest
    params; the GPU's (``--bf16 true`` alone) is skipped without a GPU, where TrainingArguments refuses it."""
    import pytest
    import torch

    text = PRECISION_ARGS.read_text()
    choices = [shlex.split(value) for value in re.findall(r"^\s*precision_args=\((.*)\)$", text, re.M)]
    return [
        pytest.param(
            choice,
            id=" ".join(choice) or "float32",
            marks=pytest.mark.skipif(
                "--bf16" in choice and "--use_cpu" not in choice and not torch.cuda.is_available(),
                reason="bfloat16 without --use_cpu needs a GPU",
            ),
        )
        for choice in choices
    ]


def job_arrays(script: Path) -> dict[str, list[str]]:
    """The bash arrays a job script sets at its top level (``name=(...)``), by name."""
    text = script.read_text().replace("\\\n", " ")
    return {name: shlex.split(value) for name, value in re.findall(r"^(\w+)=\((.*)\)$", text, re.M)}


def script_calls(shell_text: str) -> list[tuple[str, str]]:
    """``(name, the rest of the line)`` for each ``python scripts/<name>.py ...`` or ``python -m <module> ...`` line of
    shell text (a job script, a README's bash block), in order, continuation lines joined: a script is named by its
    file's stem (``train_classifier``), a module by its dotted name (``recipes.multi30k.train``)."""
    lines = shell_text.replace("\\\n", " ").splitlines()
    matches = (re.match(r"\s*python (?:scripts/(\w+)\.py|-m ([\w.]+)) (.*)", line) for line in lines)
    return [(match.group(1) or match.group(2), match.group(3)) for match in matches if match]


def job_commands(
    script: Path,
    variables: dict[str, str],
    precision: list[str],
    arrays: dict[str, list[str]] | None = None,
    passed: tuple[str, ...] | list[str] = (),
) -> dict[str, list[str]]:
    """A script's or module's name (``script_calls``) -> its arguments in a bash job script, with the script's shell
    variables (``$name``) and arrays (``"${name[@]}"``) filled in, ``precision_args``
    (recipes/common/precision_args.sh) and any array set inside a branch (``arrays``) given, the script's own
    arguments passed on (``"${@:N}"``) as ``passed``, and output redirections and a trailing ``&`` left out."""
    arrays = job_arrays(script) | (arrays or {})
    arrays["precision_args"] = precision
    commands = {}
    for name, rest in script_calls(script.read_text()):
        words = []
        shell_words = iter(shlex.split(rest, comments=True))
        for word in shell_words:
            if word in (">", ">>", "2>", "&>"):  # a redirection and its file: the shell's, not the script's
                next(shell_words, None)
                continue
            if word in ("&", "2>&1"):
                continue
            if re.fullmatch(r"\$\{@:\d+\}", word):  # the options a caller gives after the script's positionals
                words += passed
                continue
            array = re.fullmatch(r"\$\{(\w+)\[@\]\}", word)
            if array:  # an array's words may name variables too; one not given stays as written
                words += [
                    re.sub(r"\$(\w+)", lambda m: variables.get(m.group(1), m.group(0)), w)
                    for w in arrays[array.group(1)]
                ]
            else:
                words.append(re.sub(r"\$(\w+)", lambda m: variables[m.group(1)], word))
        commands[name] = words
    return commands


def precision_probe(script: Path):
    """The shape a job script asks ``recipes/common/precision_args.sh`` to time (its
    ``. recipes/common/precision_args.sh ...`` line, the script's top-level arrays filled in), parsed by
    ``python -m recipes.common.precision``'s parser."""
    from recipes.common.precision import argument_parser

    text = script.read_text().replace("\\\n", " ")
    (line,) = re.findall(r"^\. recipes/common/precision_args\.sh (.*)$", text, re.M)
    arrays = job_arrays(script)
    words = []
    for word in shlex.split(line, comments=True):
        array = re.fullmatch(r"\$\{(\w+)\[@\]\}", word)
        words += arrays[array.group(1)] if array else [word]
    return argument_parser().parse_args(words)


def write_nsmc(root: Path, rows: int, seed: int, name: str, empty_rows: int = 0) -> None:
    """Reviews in the NSMC file format whose label follows from their words; ``empty_rows`` rows have no text."""
    rng = random.Random(seed)
    lines = ["id\tdocument\tlabel"]
    for i in range(rows):
        label = rng.randint(0, 1)
        words = rng.sample(POSITIVE if label else NEGATIVE, 2)
        lines.append(f"{seed * 100000 + i}\t{' '.join(words)}\t{label}")
    lines += [f"{seed * 100000 + rows + i}\t\t1" for i in range(empty_rows)]
    (root / "nsmc").mkdir(parents=True, exist_ok=True)
    (root / "nsmc" / name).write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_reviews(root: Path, rows: int, seed: int, name: str, empty_rows: int = 0) -> Path:
    """Reviews as JSON lines (``text``, ``label`` negative / positive) whose label follows from their words, for the
    general scripts' ``--train_file`` / ``--test_file``; ``empty_rows`` rows have no text. Returns the file."""
    rng = random.Random(seed)
    rows_out = []
    for _ in range(rows):
        label = rng.randint(0, 1)
        words = rng.sample(POSITIVE if label else NEGATIVE, 2)
        rows_out.append({"text": " ".join(words), "label": ["negative", "positive"][label]})
    rows_out += [{"text": "", "label": "positive"} for _ in range(empty_rows)]
    root.mkdir(parents=True, exist_ok=True)
    path = root / name
    path.write_text("\n".join(json.dumps(row, ensure_ascii=False) for row in rows_out) + "\n", encoding="utf-8")
    return path


def review_files(root: Path) -> list[str]:
    """The general scripts' arguments for the files ``write_reviews`` wrote as train.jsonl and test.jsonl."""
    return ["--train_file", str(root / "train.jsonl"), "--test_file", str(root / "test.jsonl")]


def write_multi30k(root: Path, rows: dict[str, int], seed: int = 0) -> None:
    """Multi30k-format line files whose German side is a word-for-word image of the English side."""
    rng = random.Random(seed)
    folder = root / "multi30k"
    folder.mkdir(parents=True, exist_ok=True)
    for split, count in rows.items():
        english, german = [], []
        for _ in range(count):
            positions = [rng.randrange(len(WORDS["de"])) for _ in range(rng.randint(3, 7))]
            english.append(" ".join(WORDS["en"][p] for p in positions))
            german.append(" ".join(WORDS["de"][p] for p in positions))
        (folder / f"{split}.en").write_text("\n".join(english) + "\n", encoding="utf-8")
        (folder / f"{split}.de").write_text("\n".join(german) + "\n", encoding="utf-8")


def pair_files(root: Path, splits: dict[str, str] | None = None) -> list[str]:
    """The general translation script's arguments for the line files ``write_multi30k`` wrote under ``root``: each
    split's English file and its German one (``splits``: the script's split -> the file stem; default Multi30k's)."""
    splits = splits or {"train": "train", "validation": "val", "test": "test_2016_flickr"}
    folder = root / "multi30k"
    return [
        word
        for split, stem in splits.items()
        for word in (f"--{split}_file", str(folder / f"{stem}.en"), str(folder / f"{stem}.de"))
    ]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def script_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.update(
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        OMP_NUM_THREADS="1",
        WANDB_DISABLED="true",
        # Only the loopback interface: gloo must not pick an external one.
        GLOO_SOCKET_IFNAME="lo",
        MASTER_ADDR="127.0.0.1",
    )
    return env


def torchrun(nproc: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        str(nproc),
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(free_port()),
    ]


def accelerate_launch(*options: str) -> list[str]:
    return [sys.executable, "-m", "accelerate.commands.launch", "--main_process_port", str(free_port()), *options]


def run(command: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    done = subprocess.run(command, env=script_env(), capture_output=True, text=True, timeout=timeout, cwd=REPO)
    if done.returncode != 0:
        raise AssertionError(
            f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
        )
    return done


PROCESS_LINE = re.compile(r"process (\d+) of (\d+): (\d+) optimizer steps, tokenizer (\w+)")


def process_reports(output: str) -> dict[int, tuple[int, int, str]]:
    """rank -> (world size, optimizer steps, tokenizer fingerprint), from the line each process logs after training."""
    return {int(r): (int(w), int(s), t) for r, w, s, t in PROCESS_LINE.findall(output)}


def logged_losses(output_dir: Path) -> list[float]:
    history = json.loads((output_dir / "log_history.json").read_text())
    return [entry["loss"] for entry in history if "loss" in entry]


def isolated_python(script: Path, *args: str, tmp: Path) -> subprocess.CompletedProcess:
    """Run ``script`` with -I -S (no user site, no .pth files such as an editable install's) and only the
    site-packages folders that do not hold hf_transformer on sys.path."""
    site_dirs = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
    site_dirs = [d for d in sorted(site_dirs) if not (Path(d) / "hf_transformer").exists()]
    bootstrap = f"import sys; sys.path[:0] = {site_dirs!r}\n"
    script.write_text(bootstrap + script.read_text())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "HF_"))}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(tmp / "hf_home"), HF_MODULES_CACHE=str(tmp / "modules"))
    return subprocess.run(
        [sys.executable, "-I", "-S", str(script), *args],
        cwd=tmp,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )


def assert_resumed_run_trains_as_the_whole(main, arguments: list[str], whole: Path, checkpoint: str) -> list[float]:
    """Runs ``main`` again into ``whole``'s sibling ``resumed``, from a copy of the whole run's ``checkpoint``, and
    asserts the same weights (bit for bit: the same computation on one machine) and the same logged losses; returns
    the losses."""
    import shutil

    import torch
    from safetensors.torch import load_file

    resumed = whole.parent / "resumed"
    shutil.copytree(whole / checkpoint, resumed / checkpoint)
    main(["--output_dir", str(resumed), *arguments, "--resume_from_checkpoint", str(resumed / checkpoint)])
    weights = [load_file(str(run / "model.safetensors")) for run in (whole, resumed)]
    for name, tensor in weights[0].items():
        assert torch.equal(tensor, weights[1][name]), name
    losses = [
        [row["loss"] for row in json.loads((run / "log_history.json").read_text()) if "loss" in row]
        for run in (whole, resumed)
    ]
    assert losses[0] == losses[1]
    return losses[0]
