"""The shape of the repository: the installed library apart from the recipes, and the rules that keep it so.

The library (``hf_transformer/``) names no corpus and imports itself without a circle; ``import hf_transformer``
leaves the optional libraries unloaded; the general scripts and the recipes import modules, never other scripts,
and never edit ``sys.path``; the pages a reader opens stay short.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "hf_transformer"
CORPUS_NAMES = re.compile(r"nsmc|multi30k|test2016|flickr|movie review", re.IGNORECASE)
OPTIONAL_LIBRARIES = ("ctranslate2", "onnx", "onnxruntime", "peft", "sacrebleu", "sacremoses", "matplotlib", "gradio")


def package_modules() -> dict[str, Path]:
    """Dotted name -> file of every module of the installed package."""
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's own modules that module ``name`` imports anywhere in its file (lazy imports inside functions
    included: a circle through one still ties the two modules together)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            candidates = [target] + [f"{target}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        else:
            continue
        for candidate in candidates:
            while candidate and candidate not in known:
                candidate = candidate.rpartition(".")[0]
            if candidate and candidate != name:
                found.add(candidate)
    return found


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` as a list of module names, or None."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_find_cycle_sees_a_circle_and_its_absence():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_package_imports_itself_without_a_circle():
    modules = package_modules()
    graph = {}
    for name, path in modules.items():
        # A package's __init__ re-exporting its submodules is not a circle: the submodules' own imports are.
        children = {m for m in modules if m.startswith(name + ".")} if path.name == "__init__.py" else set()
        graph[name] = imported_modules(name, path, set(modules)) - children
    for name, path in modules.items():  # importing a submodule runs its package's __init__ first
        if path.name != "__init__.py" and "." in name:
            graph[name] -= {name.rpartition(".")[0]}
    assert find_cycle(graph) is None, f"import circle: {' -> '.join(find_cycle(graph))}"


def test_the_package_names_no_corpus():
    named = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for path in PACKAGE.rglob("*.py")
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if CORPUS_NAMES.search(line)
    ]
    assert not named, "the installed package names a corpus:\n" + "\n".join(named[:20])


@pytest.mark.slow
def test_importing_the_package_leaves_the_optional_libraries_unloaded():
    code = f"import sys, hf_transformer; print(','.join(m for m in {OPTIONAL_LIBRARIES!r} if m in sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "", f"`import hf_transformer` imports {loaded}"


def python_files(*folders: str) -> list[Path]:
    return sorted(path for folder in folders for path in (REPO / folder).rglob("*.py"))


@pytest.mark.parametrize("folder", ["scripts", "recipes", "benchmarks"])
def test_no_sys_path_edits(folder):
    edits = [
        f"{path.relative_to(REPO)}:{number}"
        for path in python_files(folder)
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"sys\.path\.(insert|append|extend)|sys\.path\s*[+]?=", line)
    ]
    assert not edits, f"sys.path edited at {edits}"


def absolute_imports(source: str) -> list[str]:
    """The modules ``source`` imports by absolute name, anywhere in it: ``import a.b`` and ``from a.b import c``
    both give ``a.b`` (relative imports are left out)."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.append(node.module)
    return names


def test_absolute_imports_sees_both_forms():
    source = "import os, recipes.multi30k.data as d\nfrom recipes.nsmc import x\nfrom . import y\n"
    source += "def f():\n    import recipes.common\n"
    assert absolute_imports(source) == ["os", "recipes.multi30k.data", "recipes.nsmc", "recipes.common"]


def test_no_script_imports_another_script():
    scripts = {path.stem for path in (REPO / "scripts").glob("*.py")}
    offenders = []
    for path in python_files("scripts", "recipes"):
        names = absolute_imports(path.read_text(encoding="utf-8"))
        offenders += [f"{path.relative_to(REPO)} imports {n}" for n in names if n.split(".")[0] in scripts]
        offenders += [f"{path.relative_to(REPO)} imports {n}" for n in names if n.startswith("scripts")]
    assert not offenders, offenders


def test_general_scripts_import_only_the_library():
    """Every Python script in scripts/ runs on a user's data with the installed package alone."""
    offenders = [
        f"{path.relative_to(REPO)} imports the recipe module {name}"
        for path in python_files("scripts")
        for name in absolute_imports(path.read_text(encoding="utf-8"))
        if name.split(".")[0] == "recipes"
    ]
    assert not offenders, offenders


# Budgets, not targets: well above today's sizes, they catch a page that sprawls, not a change that adds a paragraph.
# What matters is that a reader finds the right file for a question at the first try.
MODEL_FILE_LINES = 1500
README_BYTES = 12 * 1024
DOCS_PAGE_BYTES = 48 * 1024


def test_the_model_file_stays_a_readable_length():
    lines = len((PACKAGE / "modeling_transformer.py").read_text(encoding="utf-8").splitlines())
    assert lines <= MODEL_FILE_LINES, f"modeling_transformer.py has {lines} lines"


def test_pages_stay_short():
    assert (REPO / "README.md").stat().st_size <= README_BYTES
    long_pages = {
        p.name: p.stat().st_size
        for p in (REPO / "docs").rglob("*")
        if p.is_file() and p.stat().st_size > DOCS_PAGE_BYTES
    }
    assert not long_pages, f"pages over {DOCS_PAGE_BYTES // 1024} KB in docs/: {long_pages}"


def test_docs_hold_guides_not_run_records():
    records = [p.name for p in (REPO / "docs").rglob("*") if p.is_file() and p.suffix not in {".md", ".png"}]
    assert not records, f"run records in docs/: {records}"


# The package's layers. The core (the model and what it is made of) imports none of the other layers; the training
# kit (data, training loops, tokenizer training, metrics, figures, conversion from the seeds) and the ways out
# (loading a saved folder, inference, pipelines, ensembles, adapters, the Hub, the exporters) import no demo; the
# leaves import nothing of the package. Every module is in one layer: a new module is placed here.
LEAVES = {"hf_transformer.folders", "hf_transformer.openmp", "hf_transformer.cpu", "hf_transformer.commands"}
CORE = {
    "hf_transformer.configuration_transformer",
    "hf_transformer.modeling_transformer",
    "hf_transformer.generation",
    "hf_transformer.speed",
    "hf_transformer.input_checks",
    "hf_transformer.checkpoint",
}
WAYS_OUT = {
    "hf_transformer.saved_folder",
    "hf_transformer.inference",
    "hf_transformer.pipelines",
    "hf_transformer.ensemble",
    "hf_transformer.adapters",
    "hf_transformer.hub",
    "hf_transformer.export",
}
TRAINING_KIT = {
    "hf_transformer.training",
    "hf_transformer.trainer",
    "hf_transformer.translation_training",
    "hf_transformer.encoder_training",
    "hf_transformer.ngram_classifier",
    "hf_transformer.data",
    "hf_transformer.metrics",
    "hf_transformer.figures",
    "hf_transformer.convert",
    "hf_transformer.tokenization",
}
DEMO = {"hf_transformer.app", "hf_transformer.attention_view"}
LAYERS = {"leaves": LEAVES, "core": CORE, "ways out": WAYS_OUT, "training kit": TRAINING_KIT, "demo": DEMO}
# What each layer may not import.
FORBIDDEN = {
    "leaves": {"core", "ways out", "training kit", "demo"},
    "core": {"ways out", "training kit", "demo"},
    "ways out": {"demo"},
    "training kit": {"demo"},
    "demo": set(),
}


def layer_of(module: str) -> str | None:
    """The layer of a module of the package (a subpackage's modules are in its layer); None for the package."""
    for layer, members in LAYERS.items():
        if any(module == member or module.startswith(member + ".") for member in members):
            return layer
    return None


def arrows(name: str, source: str, known: set[str], is_package: bool = False) -> set[str]:
    """The package's modules (``known``) that module ``name`` (its ``source``; ``is_package``: an ``__init__``)
    imports anywhere in its file, each by its own name: ``from . import x`` is an arrow to ``x``, not to the package
    above it."""
    package = name if is_package else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                target = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            candidates = [f"{target}.{alias.name}" for alias in node.names]
            candidates = [candidate for candidate in candidates if candidate in known] or [target]
        elif isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        else:
            continue
        for candidate in candidates:
            while candidate and candidate not in known:
                candidate = candidate.rpartition(".")[0]
            if candidate and candidate != name:
                found.add(candidate)
    return found


def test_arrows_name_the_module_a_relative_import_reaches():
    known = {"pkg", "pkg.a", "pkg.b", "pkg.sub", "pkg.sub.c"}
    source = "from . import a\nfrom .b import f\nfrom .sub.c import g\ndef h():\n    from .sub import c\n"
    assert arrows("pkg.x", source, known) == {"pkg.a", "pkg.b", "pkg.sub.c"}
    assert arrows("pkg.x", "import pkg\nfrom . import f\n", known) == {"pkg"}  # the package above: an arrow up


def test_every_module_is_in_one_layer():
    modules = set(package_modules())
    unplaced = [name for name in sorted(modules) if name != "hf_transformer" and layer_of(name) is None]
    assert not unplaced, f"modules in no layer (place them in tests/test_layout.py's LAYERS): {unplaced}"
    for layer, members in LAYERS.items():
        assert members <= modules, f"{layer} names modules that are gone: {members - modules}"


def test_the_layers_import_downwards_only():
    modules = package_modules()
    crossing = []
    for name, path in modules.items():
        layer = layer_of(name)
        source = path.read_text(encoding="utf-8")
        for imported in arrows(name, source, set(modules), is_package=path.name == "__init__.py"):
            if imported == "hf_transformer":  # importing a submodule has already run the package's __init__
                crossing.append(f"{name} imports the package itself (an arrow back up)")
            elif layer is not None and layer_of(imported) in FORBIDDEN[layer]:
                crossing.append(f"{name} ({layer}) imports {imported} ({layer_of(imported)})")
    assert not crossing, "\n".join(crossing)


def test_the_library_benchmarks_import_no_recipe():
    offenders = [
        f"{path.relative_to(REPO)} imports {name}"
        for path in python_files("benchmarks")
        for name in absolute_imports(path.read_text(encoding="utf-8"))
        if name.split(".")[0] == "recipes"
    ]
    assert not offenders, offenders
