"""Run transformers' own model and config test mixins (`ModelTesterMixin`, `ConfigTester`) against this package's
models, as transformers runs them against BART, and report every failure not already known to be a design choice.

    pip download --no-deps --no-binary :all: transformers==$(python -c "import transformers as t; print(t.__version__)")
    tar xzf transformers-*.tar.gz
    pip install parameterized   # what transformers' test files import
    python scripts/check_transformers_contract.py --transformers-src transformers-5.24.0 --output contract.json

For an upgrade of transformers: the mixins encode what the ecosystem assumes of a model (cache names, output fields,
save/load round trips, gradient checkpointing...). The source distribution holds `tests/test_modeling_common.py`
and `tests/test_configuration_common.py` but not the generation and export mixins they import; those two are
replaced by empty classes (generation is covered by this package's own tests). The models are tried at a BART-sized
tiny configuration and entered in transformers' model tables as BART's are (the mixin reads them to skip base models
in training tests and to give heads their labels); the classifier comes last, so that a test which fails on it has
passed the other two. Exit status 1 when a test fails that `KNOWN_BY_DESIGN` does not list.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

# Failures that follow from choices this package made on purpose (see the test names' entries).
KNOWN_BY_DESIGN = {
    # An encoder-pooled classifier has no decoder outputs; the decoder read-out reads one start token (length 1),
    # not BART's whole decoder input.
    "test_attention_outputs": "the classifier's outputs are an encoder classifier's, or of a one-token decoder",
    "test_hidden_states_output": "the classifier's outputs are an encoder classifier's, or of a one-token decoder",
    # from_pretrained refuses a folder whose weights file holds none of the model's weights (CheckpointError).
    "test_model_weights_reload_no_missing_tied_weights": "a checkpoint without the model's weights is refused",
    # The generation mixin is replaced by an empty class here.
    "test_generation_tester_mixin_inheritance": "the generation mixin is not in the source distribution",
}

TESTER = '''
import unittest

from hf_transformer import (
    TransformerConfig,
    TransformerForConditionalGeneration,
    TransformerForSequenceClassification,
    TransformerModel,
)

from transformers.models.auto import modeling_auto

from .test_configuration_common import ConfigTester
from .test_modeling_common import ModelTesterMixin, ids_tensor

# Listed as transformers lists BART's classes: the mixin skips base models in its training tests and gives the heads
# their labels by these tables.
modeling_auto.MODEL_MAPPING_NAMES["hf_transformer"] = "TransformerModel"
modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES["hf_transformer"] = "TransformerForConditionalGeneration"
modeling_auto.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES["hf_transformer"] = "TransformerForSequenceClassification"


class Tester:
    """BART's tester sizes, in this package's config names and special tokens (pad 0, start 2, end 3)."""

    def __init__(self, parent, classifier_pooling="mean"):
        self.parent = parent
        self.batch_size, self.seq_length, self.vocab_size = 13, 7, 99
        self.encoder_seq_length = self.decoder_seq_length = self.seq_length
        self.hidden_size, self.num_hidden_layers, self.num_attention_heads = 16, 2, 4
        self.intermediate_size, self.is_training = 4, True
        self.classifier_pooling = classifier_pooling

    def get_config(self):
        return TransformerConfig(
            vocab_size=self.vocab_size, d_model=self.hidden_size, n_layer=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads, intermediate_size=self.intermediate_size,
            max_position_embeddings=50, dropout=0.1, pad_token_id=0, bos_token_id=2, eos_token_id=3,
            classifier_pooling=self.classifier_pooling,
        )

    def prepare_config_and_inputs_for_common(self):
        input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size).clamp(4)
        input_ids[:, -1] = 3
        decoder_input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size).clamp(4)
        inputs = dict(input_ids=input_ids, decoder_input_ids=decoder_input_ids, attention_mask=input_ids.ne(0),
                      decoder_attention_mask=decoder_input_ids.ne(0))
        return self.get_config(), inputs


class TransformerModelTest(ModelTesterMixin, unittest.TestCase):
    all_model_classes = (TransformerModel, TransformerForConditionalGeneration, TransformerForSequenceClassification)
    is_encoder_decoder = True
    test_pruning = False
    pooling = "mean"

    def setUp(self):
        self.model_tester = Tester(self, self.pooling)
        self.config_tester = ConfigTester(self, config_class=TransformerConfig)

    def test_config(self):
        self.config_tester.run_common_tests()


class DecoderReadOutClassifierTest(TransformerModelTest):
    all_model_classes = (TransformerForSequenceClassification,)
    pooling = "decoder"
'''

# The keyword arguments transformers' ConfigTester sets to non-default values (tests/utils in the repository, which
# the source distribution lacks): the common attributes of a transformers 5 config.
CONFIG_COMMON_KWARGS = """config_common_kwargs = {
    "return_dict": False,
    "output_hidden_states": True,
    "output_attentions": True,
    "dtype": "float16",
    "chunk_size_feed_forward": 5,
    "architectures": ["BertModel"],
    "id2label": {0: "label"},
    "label2id": {"label": "0"},
    "problem_type": "regression",
}
"""

# `FAILED path::Class::test_name - reason`, `ERROR ...` (an error outside the test body) and, for subtests,
# `SUBFAILED[ModelClass] path::Class::test_name`.
FAILURE = re.compile(r"^(?:SUB)?(?:FAILED|ERROR)(?:\[(?P<model>[^\]]*)\])? \S*::(?P<test>test\w+)", re.MULTILINE)
SUMMARY = re.compile(r"=+ (?P<summary>.*(?:passed|failed).*?) in [\d.]+s")


def build_suite(source: Path, folder: Path) -> Path:
    """A `tests` package in ``folder`` holding transformers' two mixin files, stand-ins for what they import from
    the rest of transformers' repository, and this package's tester."""
    tests = folder / "tests"
    for part in ("", "generation", "exporters", "utils"):
        (tests / part).mkdir(parents=True, exist_ok=True)
        (tests / part / "__init__.py").write_text("")
    for name in ("test_modeling_common.py", "test_configuration_common.py"):
        path = source / "tests" / name
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing: give the unpacked transformers source distribution")
        (tests / name).write_text(path.read_text())
    (tests / "generation" / "test_utils.py").write_text("class GenerationTesterMixin:\n    pass\n")
    (tests / "exporters" / "test_export.py").write_text("class ExportTesterMixin:\n    pass\n")
    (tests / "utils" / "test_configuration_utils.py").write_text(CONFIG_COMMON_KWARGS)
    (tests / "test_hf_transformer.py").write_text(TESTER)
    return tests / "test_hf_transformer.py"


def failures(pytest_output: str) -> list[dict]:
    """The failed tests in pytest's `-rfE -v` output: test name, model class (subtests) and whether it is known."""
    seen, found = set(), []
    for match in FAILURE.finditer(pytest_output):
        key = (match["test"], match["model"])
        if key in seen:
            continue
        seen.add(key)
        found.append({"test": match["test"], "model": match["model"], "known": KNOWN_BY_DESIGN.get(match["test"])})
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--transformers-src", type=Path, required=True, help="the unpacked source distribution")
    parser.add_argument("--output", type=Path, default=None, help="a JSON report of the failures")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as folder:
        test_file = build_suite(args.transformers_src, Path(folder))
        print(f"running transformers' mixins from {args.transformers_src} against hf_transformer ...", flush=True)
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-v", "-rfE", "-p", "no:cacheprovider", str(test_file)],
            cwd=folder,
            capture_output=True,
            text=True,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )
    output = result.stdout + result.stderr
    summary = SUMMARY.search(output)
    if summary is None:
        print(output[-3000:])
        print("pytest did not run the mixins (above); is `parameterized` installed?", file=sys.stderr)
        return 1
    found = failures(output)
    unexpected = [f for f in found if not f["known"]]
    for failure in found:
        where = f"[{failure['model']}]" if failure["model"] else ""
        print(f"  {failure['test']}{where}: {failure['known'] or 'NOT KNOWN: look at it'}")
    print(f"pytest: {summary['summary']}; {len(unexpected)} failure(s) not known to be by design")
    if args.output:
        args.output.write_text(json.dumps({"summary": summary["summary"], "failures": found}, indent=2) + "\n")
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
