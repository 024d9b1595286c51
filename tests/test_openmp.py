"""On a busy machine torch's OpenMP threads wait passively (sleep, not spin) when the package is imported first
(hf_transformer.openmp), and every entry point imports the package before torch, so that the setting reaches the
runtime.

The speed it buys is measured by ``benchmarks/load.py``, not here; these tests pin what it rests on: torch's CPU build
runs GNU OpenMP (libgomp, which reads ``OMP_WAIT_POLICY``), other processes' CPU use is measured, the variable is set
before torch loads where they keep a core busy, the user's own setting wins, and a script that imported torch first
would silently lose it.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hf_transformer import openmp

REPO = Path(__file__).resolve().parent.parent
LOADERS_OF_TORCH = {"torch", "transformers", "datasets", "accelerate", "safetensors", "peft", "evaluate"}


@pytest.fixture
def busy_core():
    """Another process keeping one core busy for the duration of the test."""
    process = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    time.sleep(0.3)
    yield
    process.kill()
    process.wait()


def in_fresh_python(code: str, **settings: str) -> dict:
    """Run `code` (which prints one JSON value) in a new interpreter whose environment has no OpenMP waiting
    setting except `settings`."""
    env = {name: value for name, value in os.environ.items() if name not in openmp.USER_SETTINGS}
    env.update(settings)
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


REPORT = """
import json, os, sys
{imports}
maps = open('/proc/self/maps').read() if os.path.exists('/proc/self/maps') else ''
torch_dir = os.path.dirname(sys.modules['torch'].__file__)
print(json.dumps({{
    'spin': os.environ.get('GOMP_SPINCOUNT'),
    'policy': os.environ.get('OMP_WAIT_POLICY'),
    'set_here': sys.modules['hf_transformer.openmp'].SET_ON_IMPORT,
    'torch_libgomp': any('libgomp' in line and line.split()[-1].startswith(torch_dir) for line in maps.splitlines()),
    'linux': bool(maps),
}}))
"""


@pytest.mark.skipif(not openmp.PROC_STAT.is_file(), reason="measures other processes through /proc/stat (Linux)")
def test_other_processes_cpu_use_is_measured(busy_core):
    assert 0.6 < openmp.others_busy_cores(0.3) < 2.5  # one busy loop, and whatever else the machine runs


@pytest.mark.skipif(not openmp.PROC_STAT.is_file(), reason="measures other processes through /proc/stat (Linux)")
def test_importing_the_package_first_on_a_busy_machine_sets_passive_waiting_before_torch_loads(busy_core):
    report = in_fresh_python(REPORT.format(imports="import hf_transformer\nimport torch"))
    assert report["policy"] == "PASSIVE" and report["spin"] is None and report["set_here"] is True
    if report["linux"]:
        # The setting is libgomp's: were torch to ship another OpenMP runtime, it would do nothing (revisit then).
        assert report["torch_libgomp"], "torch's CPU build no longer loads its own libgomp"


@pytest.mark.parametrize(
    "settings, expected_spin",
    [({"OMP_WAIT_POLICY": "ACTIVE"}, None), ({"OMP_WAIT_POLICY": "PASSIVE"}, None), ({"GOMP_SPINCOUNT": "7"}, "7")],
)
def test_the_users_own_waiting_setting_is_kept(settings, expected_spin, busy_core):
    report = in_fresh_python(REPORT.format(imports="import hf_transformer"), **settings)
    assert report["set_here"] is False and report["spin"] == expected_spin
    assert report["policy"] == settings.get("OMP_WAIT_POLICY")


def test_nothing_is_set_when_torch_was_loaded_first(busy_core):
    # Too late for this process; setting it anyway would give child processes a setting their parent lacks.
    report = in_fresh_python(REPORT.format(imports="import torch\nimport hf_transformer"))
    assert report["set_here"] is False and report["spin"] is None and report["policy"] is None


def test_the_decision_itself(monkeypatch):
    for name in openmp.USER_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    busy, quiet, unknown = (lambda: 1.2), (lambda: 0.2), (lambda: None)
    assert "torch" in sys.modules
    assert openmp.wait_passively_when_busy(busy) is False and "OMP_WAIT_POLICY" not in os.environ
    monkeypatch.delitem(sys.modules, "torch")
    # A quiet machine (or one that cannot tell) keeps the runtime's default: the quiet speed is the one it was.
    assert openmp.wait_passively_when_busy(quiet) is False and "OMP_WAIT_POLICY" not in os.environ
    assert openmp.wait_passively_when_busy(unknown) is False and "OMP_WAIT_POLICY" not in os.environ
    assert openmp.wait_passively_when_busy(busy) is True and os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.delenv("OMP_WAIT_POLICY")
    monkeypatch.setenv("GOMP_SPINCOUNT", "5")
    assert openmp.wait_passively_when_busy(busy) is False and "OMP_WAIT_POLICY" not in os.environ


def test_busy_seconds_reads_the_processs_own_cores(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text(
        "cpu  900 0 90 5000 10 0 0 0 0 0\ncpu0 100 0 10 2000 5 0 0 0 0 0\ncpu1 800 0 80 3000 5 0 0 0 0 0\nintr 12345\n"
    )
    ticks = os.sysconf("SC_CLK_TCK")
    assert openmp.busy_seconds({1}, stat) == pytest.approx(880 / ticks)  # user + system, not idle or I/O wait
    assert openmp.busy_seconds({0, 1}, stat) == pytest.approx(990 / ticks)


def entry_points() -> list[Path]:
    """The files a user runs: the general scripts, and the recipes' package file that every recipe step
    (``python -m recipes.<task>.<step>``) runs first."""
    return sorted((REPO / "scripts").glob("*.py")) + [REPO / "recipes" / "__init__.py"]


def first_import_of_interest(path: Path) -> str | None:
    """The first top-level module among hf_transformer and the libraries that may load torch that `path`
    imports at module level, in the order of the file."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        for name in names:
            top = name.split(".")[0]
            if top == "hf_transformer" or top in LOADERS_OF_TORCH:
                return top
    return None


@pytest.mark.parametrize("path", entry_points(), ids=lambda path: str(path.relative_to(REPO)))
def test_every_entry_point_imports_the_package_before_torch(path):
    first = first_import_of_interest(path)
    assert first in (None, "hf_transformer"), (
        f"{path.relative_to(REPO)} imports {first} before hf_transformer: torch's OpenMP runtime would load with "
        "its default waiting (put `import hf_transformer` first, then `# isort: split`)"
    )
    if path.name == "__init__.py":
        assert first == "hf_transformer"
