"""Classify or translate text with any saved model folder (or Hub id), loaded through the Auto classes.

    python scripts/predict.py runs/nsmc "정말 재미있는 영화였어요" "시간이 아깝다"
    python scripts/predict.py runs/multi30k-en-de --num_beams 4 < sentences.txt
    echo "A man is riding a bike." | python scripts/predict.py runs/multi30k-en-de --json

The head comes from `config.architectures`: a sequence classifier prints `label<TAB>probability<TAB>text`
per input, a seq2seq model prints one translation per line. Without TEXT arguments every non-empty line
of stdin is an input. `--json` prints one JSON object per input instead (classifiers: every label's
probability). Inputs longer than the model's position table are truncated.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoModelForSequenceClassification, AutoTokenizer

import hf_transformer  # noqa: F401  (registers the Auto classes)

CLASSIFICATION, SEQ2SEQ = "classification", "seq2seq"


def task_of(config) -> str:
    """`classification` or `seq2seq`, from `config.architectures` (an encoder-decoder config without one is seq2seq)."""
    names = config.architectures or []
    if any(name.endswith("ForSequenceClassification") for name in names):
        return CLASSIFICATION
    if any(name.endswith(("ForConditionalGeneration", "ForSeq2SeqLM")) for name in names) or getattr(
        config, "is_encoder_decoder", False
    ):
        return SEQ2SEQ
    raise ValueError(f"cannot tell a classifier from a translator: config.architectures is {names}")


@dataclass
class Predictor:
    """A loaded model folder: `predictor(texts)` gives one result dict per text."""

    model: torch.nn.Module
    tokenizer: object
    task: str
    num_beams: int | None = None
    max_new_tokens: int | None = None
    batch_size: int = 32

    @classmethod
    def from_pretrained(cls, model_dir: str, *, device: str = "cpu", **options) -> Predictor:
        config = AutoConfig.from_pretrained(model_dir)
        task = task_of(config)
        auto = AutoModelForSequenceClassification if task == CLASSIFICATION else AutoModelForSeq2SeqLM
        model = auto.from_pretrained(model_dir, config=config).to(device).eval()
        return cls(model=model, tokenizer=AutoTokenizer.from_pretrained(model_dir), task=task, **options)

    def _max_input_length(self) -> int:
        limits = [self.model.config.max_position_embeddings, getattr(self.tokenizer, "model_max_length", None)]
        return min(limit for limit in limits if isinstance(limit, int) and limit > 0)

    def _generation_length(self) -> int:
        """`--max_new_tokens`, else the folder's generation config, else the decoder's position table."""
        config = self.model.config
        table = config.decoder_max_position_embeddings or config.max_position_embeddings
        saved = self.model.generation_config.to_diff_dict()
        if self.max_new_tokens is not None:
            wanted = self.max_new_tokens
        elif saved.get("max_new_tokens"):
            wanted = saved["max_new_tokens"]
        elif saved.get("max_length"):
            wanted = saved["max_length"] - 1  # max_length counts the start token
        else:
            wanted = table
        return max(1, min(wanted, table))

    @torch.no_grad()
    def __call__(self, texts: Sequence[str]) -> list[dict]:
        results = []
        for start in range(0, len(texts), self.batch_size):
            chunk = list(texts[start : start + self.batch_size])
            batch = self.tokenizer(
                chunk, return_tensors="pt", padding=True, truncation=True, max_length=self._max_input_length()
            ).to(self.model.device)
            batch.pop("token_type_ids", None)
            if self.task == CLASSIFICATION:
                results.extend(self._classify(chunk, batch))
            else:
                results.extend(self._translate(chunk, batch))
        return results

    def _classify(self, texts: list[str], batch) -> list[dict]:
        probabilities = self.model(**batch).logits.float().softmax(-1)
        id2label = self.model.config.id2label
        results = []
        for text, row in zip(texts, probabilities.tolist()):
            best = max(range(len(row)), key=row.__getitem__)
            results.append(
                {
                    "text": text,
                    "label": id2label[best],
                    "score": row[best],
                    "scores": {id2label[i]: p for i, p in enumerate(row)},
                }
            )
        return results

    def _translate(self, texts: list[str], batch) -> list[dict]:
        length = self._generation_length()
        # The limit goes in the field the saved generation config uses; setting the other one as well
        # makes generate() warn that both are set.
        if self.model.generation_config.to_diff_dict().get("max_new_tokens"):
            options = {"max_new_tokens": length}
        else:
            options = {"max_length": length + 1}  # an encoder-decoder's max_length counts the start token
        if self.num_beams is not None:
            options["num_beams"] = self.num_beams
        generated = self.model.generate(**batch, **options)
        decoded = self.tokenizer.batch_decode(generated, skip_special_tokens=True)
        return [{"text": text, "translation": output.strip()} for text, output in zip(texts, decoded)]


def format_result(result: dict, as_json: bool = False) -> str:
    if as_json:
        return json.dumps(result, ensure_ascii=False)
    if "translation" in result:
        return result["translation"]
    return f"{result['label']}\t{result['score']:.4f}\t{result['text']}"


def read_lines(stream: Iterable[str]) -> list[str]:
    return [line.strip() for line in stream if line.strip()]


def _looks_like_a_path(name: str) -> bool:
    """A Hub id is `name` or `owner/name`; anything else (`./runs/x`, `runs/a/b`, `~/x`) can only be a folder."""
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or "\\" in name


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir", help="a saved model folder (with its tokenizer) or a Hub id")
    parser.add_argument("texts", nargs="*", help="inputs; without any, lines are read from stdin")
    parser.add_argument("--num_beams", type=int, default=None, help="beam size (default: the model's own)")
    parser.add_argument("--max_new_tokens", type=int, default=None, help="longest translation in tokens")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, mps ...")
    parser.add_argument("--json", action="store_true", help="one JSON object per input")
    # Intermixed: options may come after or between the texts (`predict.py runs/x "a text" --json`).
    args = parser.parse_intermixed_args(argv)

    if not Path(args.model_dir).is_dir() and _looks_like_a_path(args.model_dir):
        parser.error(f"{args.model_dir}: no such model folder")
    texts = args.texts or read_lines(sys.stdin)
    try:
        predictor = Predictor.from_pretrained(
            args.model_dir,
            device=args.device,
            num_beams=args.num_beams,
            max_new_tokens=args.max_new_tokens,
            batch_size=args.batch_size,
        )
    except (OSError, ValueError) as error:
        if Path(args.model_dir).is_dir():
            raise  # a folder that exists but does not load: the full error is the useful one
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        parser.error(f"{args.model_dir}: no such model folder, and not a Hub model that loads here ({first_line})")
    results = predictor(texts)
    for result in results:
        print(format_result(result, as_json=args.json))
    return results


if __name__ == "__main__":
    main()
