"""scripts/check_transformers_contract.py: the harness around transformers' own test mixins (the mixins themselves
come from transformers' source distribution, which the suite does not download)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "check_transformers_contract.py"
spec = importlib.util.spec_from_file_location("check_transformers_contract", SCRIPT)
contract = importlib.util.module_from_spec(spec)
spec.loader.exec_module(contract)

PYTEST_OUTPUT = """
SUBFAILED[TransformerModel] tests/test_hf_transformer.py::TransformerModelTest::test_bc_cache_name_forward - Ass
SUBFAILED[TransformerModel] tests/test_hf_transformer.py::TransformerModelTest::test_bc_cache_name_forward - Ass
FAILED tests/test_hf_transformer.py::TransformerModelTest::test_attention_outputs - AssertionError: 3 != 5
FAILED tests/test_hf_transformer.py::DecoderReadOutClassifierTest::test_attention_outputs - AssertionError
PASSED tests/test_hf_transformer.py::TransformerModelTest::test_save_load
ERROR tests/test_hf_transformer.py::TransformerModelTest::test_save_load_fast_init - RuntimeError
=========== 3 failed, 210 passed, 105 skipped, 25 warnings in 39.73s ============
"""


def test_failures_are_read_once_each_and_only_unlisted_ones_are_unexpected():
    found = contract.failures(PYTEST_OUTPUT)
    assert [(f["test"], f["model"]) for f in found] == [
        ("test_bc_cache_name_forward", "TransformerModel"),
        ("test_attention_outputs", None),
        ("test_save_load_fast_init", None),
    ]
    assert found[0]["known"] is None and found[2]["known"] is None  # regressions the script must report
    assert found[1]["known"] == contract.KNOWN_BY_DESIGN["test_attention_outputs"]
    assert contract.SUMMARY.search(PYTEST_OUTPUT)["summary"] == "3 failed, 210 passed, 105 skipped, 25 warnings"


def test_the_suite_is_built_from_the_two_mixin_files_with_stand_ins_for_the_rest(tmp_path):
    source = tmp_path / "transformers-x"
    (source / "tests").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="test_modeling_common.py is missing"):
        contract.build_suite(source, tmp_path / "suite")
    for name in ("test_modeling_common.py", "test_configuration_common.py"):
        (source / "tests" / name).write_text(f"# {name}\n")
    tester = contract.build_suite(source, tmp_path / "suite")
    tests = tester.parent
    assert (tests / "test_modeling_common.py").read_text() == "# test_modeling_common.py\n"
    for stand_in, defines in [
        ("generation/test_utils.py", "GenerationTesterMixin"),
        ("exporters/test_export.py", "ExportTesterMixin"),
        ("utils/test_configuration_utils.py", "config_common_kwargs"),
    ]:
        namespace = {}
        exec((tests / stand_in).read_text(), namespace)
        assert defines in namespace
    compile(tester.read_text(), str(tester), "exec")  # the tester is valid Python
    assert "classifier_pooling" in tester.read_text() and "DecoderReadOutClassifierTest" in tester.read_text()
