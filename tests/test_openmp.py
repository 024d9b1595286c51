"""How torch's OpenMP threads wait on a busy machine (hf_transformer.openmp): chosen where a job starts, never by
importing the package.

The speed it buys is measured by ``benchmarks/load.py``, not here; these tests pin what it rests on: torch's CPU build
runs GNU OpenMP (libgomp, which reads ``OMP_WAIT_POLICY``), importing the package changes no environment variable
(beside a busy process, where it once set one), other processes' CPU use is measured, the job scripts export passive
waiting where other processes keep a core busy, the training scripts restart under it when started without it, and
the user's own setting wins everywhere.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from hf_transformer import openmp

REPO = Path(__file__).resolve().parent.parent
WAIT_POLICY = REPO / "recipes" / "common" / "wait_policy.sh"
TRAINING_ENTRY_POINTS = [
    REPO / "scripts" / "train_classifier.py",
    REPO / "scripts" / "pretrain_denoising.py",
    REPO / "scripts" / "train_translation.py",
    REPO / "recipes" / "multi30k" / "train.py",
]
JOB_SCRIPTS = [
    path
    for path in [REPO / "scripts" / "main_job.sh", *sorted((REPO / "recipes").glob("*/*.sh"))]
    if "set -euo pipefail" in path.read_text()  # a job, not a file the jobs source
]
needs_proc_stat = pytest.mark.skipif(
    not openmp.PROC_STAT.is_file(), reason="measures other processes through /proc/stat (Linux)"
)


@pytest.fixture
def busy_core():
    """Another process keeping one core busy for the duration of the test."""
    process = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    time.sleep(0.3)
    yield
    process.kill()
    process.wait()


def clean_environment(**settings: str) -> dict[str, str]:
    """This process's environment without any OpenMP waiting setting or job rank variable, plus `settings`."""
    left_out = (*openmp.USER_SETTINGS, *openmp.JOB_RANK_VARIABLES)
    env = {name: value for name, value in os.environ.items() if name not in left_out}
    return env | settings


def in_fresh_python(code: str, **settings: str) -> dict:
    """Run `code` (which prints one JSON value last) in a new interpreter, in `clean_environment(**settings)`."""
    result = subprocess.run(
        [sys.executable, "-c", code], env=clean_environment(**settings), capture_output=True, text=True, cwd=REPO
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


IMPORT_REPORT = """
import importlib, json, os, pathlib, sys, time
sleeps, reads = [], []
time.sleep = lambda seconds: sleeps.append(seconds)
read_text = pathlib.Path.read_text
pathlib.Path.read_text = lambda self, *a, **k: reads.append(str(self)) or read_text(self, *a, **k)
already = set(sys.modules)
for name in {modules!r}:
    try:
        importlib.import_module(name)
    except Exception:
        pass
before = dict(os.environ)
import hf_transformer
maps = open('/proc/self/maps').read() if os.path.exists('/proc/self/maps') else ''
torch_dir = os.path.dirname(sys.modules['torch'].__file__)
print(json.dumps({{
    'environment': dict(os.environ),
    'changed': sorted(set(os.environ.items()) ^ set(before.items())),
    'loaded': [name for name in sys.modules if name not in already and name.partition('.')[0] != 'hf_transformer'],
    'slept': sleeps,
    'read_proc_stat': '/proc/stat' in reads,
    'torch_libgomp': any('libgomp' in line and line.split()[-1].startswith(torch_dir) for line in maps.splitlines()),
    'linux': bool(maps),
}}))
"""


@pytest.mark.slow
@needs_proc_stat
def test_importing_the_package_changes_no_environment_variable_beside_a_busy_process(busy_core):
    # Imported first, where the package once chose a waiting policy for torch's runtime, about to load.
    first = in_fresh_python(IMPORT_REPORT.format(modules=[]))
    # The libraries' own modules that it loads (torch, transformers' modeling and pipelines, ...) imported first
    # give the environment that importing them gives; the package adds nothing to it.
    libraries = in_fresh_python(IMPORT_REPORT.format(modules=first["loaded"]))
    assert libraries["changed"] == []
    assert first["environment"] == libraries["environment"]
    assert not any(name in first["environment"] for name in openmp.USER_SETTINGS)
    # No measuring on import: no pause, no look at the machine's CPU counters.
    assert first["slept"] == [] and not first["read_proc_stat"]
    if first["linux"]:
        # The setting is libgomp's: were torch to ship another OpenMP runtime, it would do nothing (revisit then).
        assert first["torch_libgomp"], "torch's CPU build no longer loads its own libgomp"


@needs_proc_stat
def test_other_processes_cpu_use_is_measured(busy_core):
    assert 0.6 < openmp.others_busy_cores(0.3) < 2.5  # one busy loop, and whatever else the machine runs


def test_busy_seconds_reads_the_processs_own_cores(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text(
        "cpu  900 0 90 5000 10 0 0 0 0 0\ncpu0 100 0 10 2000 5 0 0 0 0 0\ncpu1 800 0 80 3000 5 0 0 0 0 0\nintr 12345\n"
    )
    ticks = os.sysconf("SC_CLK_TCK")
    assert openmp.busy_seconds({1}, stat) == pytest.approx(880 / ticks)  # user + system, not idle or I/O wait
    assert openmp.busy_seconds({0, 1}, stat) == pytest.approx(990 / ticks)


BUSY, QUIET, UNKNOWN = (lambda: 1.2), (lambda: 0.2), (lambda: None)


@pytest.fixture
def no_setting(monkeypatch):
    for name in (*openmp.USER_SETTINGS, *openmp.JOB_RANK_VARIABLES):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_the_decision(no_setting):
    # A quiet machine (or one that cannot tell) keeps the runtime's default: the quiet speed is the one it was.
    assert openmp.busy_machine_policy(QUIET) is None and openmp.busy_machine_policy(UNKNOWN) is None
    assert openmp.busy_machine_policy(BUSY) == "PASSIVE"
    assert openmp.wait_passively_when_busy(QUIET) is False and "OMP_WAIT_POLICY" not in os.environ
    assert openmp.wait_passively_when_busy(BUSY) is True and os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    no_setting.delenv("OMP_WAIT_POLICY")
    no_setting.setenv("GOMP_SPINCOUNT", "5")  # the user's choice: not even measured
    assert openmp.wait_passively_when_busy(lambda: pytest.fail("measured")) is False
    assert "OMP_WAIT_POLICY" not in os.environ


class Exec:
    """os.execv's stand-in: records the command and the policy it would run under."""

    def __init__(self):
        self.calls = []

    def __call__(self, executable, argv):
        self.calls.append((executable, argv, os.environ.get("OMP_WAIT_POLICY")))


def test_a_training_script_restarts_under_passive_waiting_only_when_it_should(no_setting):
    no_setting.setattr(torch, "get_num_threads", lambda: 2)
    execv = Exec()
    assert openmp.restart_waiting_passively_when_busy(QUIET, execv) is False and not execv.calls
    assert openmp.restart_waiting_passively_when_busy(BUSY, execv) is True
    assert execv.calls == [(sys.executable, [sys.executable, *sys.orig_argv[1:]], "PASSIVE")]
    # Restarted, it runs on: the setting is there now. So it does where the user or the job's launcher chose one,
    # in a process of a torchrun job (the ranks would count each other as load), and at one thread.
    assert openmp.restart_waiting_passively_when_busy(BUSY, execv) is False
    no_setting.delenv("OMP_WAIT_POLICY")
    for name, value in [("GOMP_SPINCOUNT", "300000"), ("LOCAL_RANK", "0"), ("TORCHELASTIC_RUN_ID", "x")]:
        with no_setting.context() as scoped:
            scoped.setenv(name, value)
            assert openmp.restart_waiting_passively_when_busy(BUSY, execv) is False
    no_setting.setattr(torch, "get_num_threads", lambda: 1)
    assert openmp.restart_waiting_passively_when_busy(BUSY, execv) is False
    assert len(execv.calls) == 1 and "OMP_WAIT_POLICY" not in os.environ


RESTARTING = """
import os, sys, torch
from hf_transformer import openmp
torch.set_num_threads(2)
print("started with", os.environ.get("OMP_WAIT_POLICY"), sys.argv[1:], flush=True)
openmp.restart_waiting_passively_when_busy(lambda: 1.0)
print("running with", os.environ.get("OMP_WAIT_POLICY"))
"""


@pytest.mark.slow
def test_the_restart_runs_the_same_program_again_under_passive_waiting(tmp_path):
    program = tmp_path / "program.py"
    program.write_text(RESTARTING)
    done = subprocess.run(
        [sys.executable, str(program), "--an", "argument"], env=clean_environment(), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == [
        "started with None ['--an', 'argument']",
        "started with PASSIVE ['--an', 'argument']",
        "running with PASSIVE",
    ]
    assert "restarting with OMP_WAIT_POLICY=PASSIVE" in done.stderr


def source_wait_policy(python_dir: Path | None = None, **settings: str) -> subprocess.CompletedProcess:
    """Source recipes/common/wait_policy.sh as the job scripts do (under `set -euo pipefail`) and print what the job's
    processes get; `python_dir`: a folder whose `python` is found first."""
    script = f'set -euo pipefail; . "{WAIT_POLICY}"; echo "[${{OMP_WAIT_POLICY:-}}] [${{GOMP_SPINCOUNT:-}}]"'
    env = clean_environment(**settings)
    if python_dir is not None:
        env["PATH"] = f"{python_dir}{os.pathsep}{env['PATH']}"
    else:
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, cwd=REPO, timeout=120)


@pytest.mark.slow
@needs_proc_stat
def test_the_job_scripts_line_exports_passive_waiting_beside_a_busy_process(busy_core):
    done = source_wait_policy()
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[PASSIVE] []"
    assert re.search(r"other processes use [0-9.]+ of this process's cores: OMP_WAIT_POLICY=PASSIVE", done.stderr)


def test_the_job_scripts_line_stops_the_job_when_the_check_fails(tmp_path):
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho 'no module named hf_transformer' >&2\nexit 1\n")
    broken.chmod(0o755)
    done = source_wait_policy(tmp_path)
    assert done.returncode != 0 and "no module named hf_transformer" in done.stderr and "[" not in done.stdout


def test_the_job_scripts_line_imports_neither_torch_nor_the_package(tmp_path):
    # A torch and a transformers that refuse to load, found first: the check must not need them (importing the
    # package would load both, seconds before the job's first step).
    for name in ("torch", "transformers"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"raise ImportError('{name} was imported')\n")
    done = source_wait_policy(PYTHONPATH=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() in ("[] []", "[PASSIVE] []") and "OpenMP waiting: other processes use" in done.stderr


def test_the_job_scripts_line_says_when_the_package_is_not_installed(tmp_path):
    # A python that sees neither site-packages nor the current folder (-I -S): no hf_transformer to find.
    bare = tmp_path / "python"
    bare.write_text(f'#!/bin/sh\nexec "{sys.executable}" -I -S "$@"\n')
    bare.chmod(0o755)
    done = source_wait_policy(tmp_path)
    assert done.returncode != 0 and "[" not in done.stdout
    assert done.stderr.strip() == "No module named hf_transformer: install the package first"


def test_the_command_prints_the_policy_and_on_stderr_why(no_setting, capsys):
    no_setting.setattr(openmp, "others_busy_cores", QUIET)
    openmp.main()
    printed = capsys.readouterr()
    assert printed.out == "\n" and "0.20 of this process's cores: libgomp's default waiting" in printed.err
    no_setting.setattr(openmp, "others_busy_cores", BUSY)
    openmp.main()
    printed = capsys.readouterr()
    assert printed.out == "PASSIVE\n" and "1.20 of this process's cores: OMP_WAIT_POLICY=PASSIVE" in printed.err
    no_setting.setenv("GOMP_SPINCOUNT", "7")  # the user's: kept, and the job's line exports nothing
    no_setting.setattr(openmp, "others_busy_cores", lambda: pytest.fail("measured"))
    openmp.main()
    printed = capsys.readouterr()
    assert printed.out == "\n" and "kept as set: GOMP_SPINCOUNT=7" in printed.err


@pytest.mark.parametrize("path", JOB_SCRIPTS, ids=lambda path: str(path.relative_to(REPO)))
def test_every_job_script_chooses_the_waiting_policy_before_its_first_step(path):
    lines = [line.strip() for line in path.read_text().splitlines()]
    steps = [
        n for n, line in enumerate(lines) if re.match(r"python (-m |scripts/)|\. recipes/common/precision_args", line)
    ]
    chosen = [n for n, line in enumerate(lines) if line.startswith(". recipes/common/wait_policy.sh")]
    if not steps:  # a script that only sets a job script's settings and hands over to it (recipes/nsmc/best_model.sh)
        handed = re.findall(r"^\s*exec bash (\S+\.sh)", path.read_text(), re.M)
        assert handed and all(REPO / script in JOB_SCRIPTS for script in handed), f"{path.name} runs no step"
        return
    assert chosen and chosen[0] < steps[0], f"{path.name} runs {lines[steps[0]]!r} first"


def main_block_calls(path: Path) -> list[str]:
    """The names of the functions called, in order, by the statements of `path`'s ``if __name__ == "__main__":``
    block."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            return [
                statement.value.func.id
                for statement in node.body
                if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)
            ]
    return []


@pytest.mark.parametrize("path", TRAINING_ENTRY_POINTS, ids=lambda path: str(path.relative_to(REPO)))
def test_every_training_script_chooses_the_waiting_policy_first(path):
    assert main_block_calls(path)[:2] == ["restart_waiting_passively_when_busy", "run_command"]


def test_the_suites_worker_processes_wait_passively_unless_the_user_chose(no_setting):
    """The repository's conftest.py: pytest-xdist's workers load each other's cores, so the controlling process gives
    them passive waiting before it starts them; one process (`-n 0`), a worker's own configure, or a user's waiting
    setting gets nothing."""
    import importlib.util
    import types

    spec = importlib.util.spec_from_file_location("repository_conftest", REPO / "conftest.py")
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)

    def configure(workers) -> str | None:
        conftest.pytest_configure(types.SimpleNamespace(option=types.SimpleNamespace(numprocesses=workers)))
        return os.environ.pop("OMP_WAIT_POLICY", None)

    no_setting.delenv("PYTEST_XDIST_WORKER", raising=False)
    assert configure(2) == "PASSIVE"
    assert configure(0) is None and configure(None) is None
    no_setting.setenv("GOMP_SPINCOUNT", "1000")
    assert configure(2) is None
    no_setting.delenv("GOMP_SPINCOUNT")
    no_setting.setenv("PYTEST_XDIST_WORKER", "gw0")
    assert configure(2) is None
