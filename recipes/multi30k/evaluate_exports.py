"""The deployed forms of a trained translation folder against `generate`, on Multi30k test2016.

    python -m recipes.multi30k.evaluate_exports runs/m30k-en-de --data_dir ../shared/data \\
        --output benchmarks/results/deployment-en-de.json

Every engine decodes the same test sources, in the same length-sorted batches, greedy and with beam search
(the folder's beam size and length penalty):

- `ctranslate2` (fp32) and `onnx` (ONNX Runtime): the share of sentences whose tokens are identical to
  `generate`'s with the folder's settings, and for beam search also with `generate(early_stopping=True)`:
  CTranslate2 has that stopping rule exactly and the folder's (transformers' default, `early_stopping=False`) only
  approximately (`hf_transformer.export.ctranslate2_export`).
- `ctranslate2_int8`, `onnx_int8` (ONNX Runtime's dynamic quantization) and `torch_int8`
  (`torch.ao.quantization.quantize_dynamic` of every `nn.Linear`): BLEU (cased
  sacreBLEU, and lowercased tokenised against the official references when `multi30k/tok/` is present) next to
  fp32's, and the size of the weights.

Results go to a JSON file, and a Markdown table beside it.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

import hf_transformer  # noqa: F401  (registers the Auto classes)
from hf_transformer.commands import run_command
from hf_transformer.folders import SEQ2SEQ
from hf_transformer.inference import input_length_limit
from hf_transformer.metrics import bleu
from hf_transformer.saved_folder import read_folder
from recipes.multi30k.bleu import bleu_lc_tok
from recipes.multi30k.data import load_multi30k
from recipes.multi30k.scoring import tokenised_references

logger = logging.getLogger("recipes.multi30k.evaluate_exports")

ENGINES = ("ctranslate2", "ctranslate2_int8", "onnx", "onnx_int8", "torch_int8")


def batches_by_length(input_ids: list[list[int]], batch_size: int) -> list[list[int]]:
    order = sorted(range(len(input_ids)), key=lambda i: len(input_ids[i]))
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


def padded(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(row) for row in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
    return ids, ids.ne(pad).long()


def clean(sequence, start: int | None, eos: int, pad: int) -> list[int]:
    """Generated ids without the start token, up to and including the first end token, no padding."""
    tokens = [int(t) for t in sequence]
    if start is not None and tokens and tokens[0] == start:
        tokens = tokens[1:]
    if eos in tokens:
        tokens = tokens[: tokens.index(eos) + 1]
    return [t for t in tokens if t != pad]


def decode_all(generate, input_ids: list[list[int]], batch_size: int, pad: int) -> tuple[list, float]:
    """`generate(ids, mask) -> rows of ids` over length-sorted batches; rows back in input order, and seconds."""
    outputs: list = [None] * len(input_ids)
    started = time.perf_counter()
    for indices in batches_by_length(input_ids, batch_size):
        ids, mask = padded([input_ids[i] for i in indices], pad)
        for index, row in zip(indices, generate(ids, mask)):
            outputs[index] = row
    return outputs, time.perf_counter() - started


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def state_dict_bytes(model: torch.nn.Module) -> int:
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    return buffer.tell()


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir", help="a translation folder written by python -m recipes.multi30k.train")
    parser.add_argument("--data_dir", default=None, help="folder holding multi30k/ (else $HF_TRANSFORMER_DATA)")
    parser.add_argument("--source_lang", default=None, help="en or de (default: from the folder's results.json)")
    parser.add_argument("--target_lang", default=None)
    parser.add_argument("--max_samples", type=int, default=None, help="the first N test sentences only")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES))
    parser.add_argument("--output", default="deployment.json", help="JSON results; a .md table is written beside")
    return parser


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Before any work: a translation folder with its tokenizer, counts of 1 or more, and an --output whose table
    beside it (the same name, .md) is not the output itself."""
    try:
        read_folder(args.model_dir, hub=False).check("recipes.multi30k.evaluate_exports", (SEQ2SEQ,), tokenizer=True)
    except (OSError, ValueError) as error:
        parser.error(str(error))
    counts = {"--max_samples": args.max_samples, "--batch_size": args.batch_size}
    wrong = [f"{option} {value}" for option, value in counts.items() if value is not None and value < 1]
    if wrong:
        parser.error(f"{', '.join(wrong)}: give 1 or more")
    if Path(args.output).suffix.lower() == ".md":
        parser.error(f"--output {args.output}: give the JSON file (its Markdown table is written beside it, as .md)")


def direction(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[str, str]:
    """The source and target language: as given, else as the folder's results.json names them."""
    results = Path(args.model_dir) / "results.json"
    saved = json.loads(results.read_text()) if results.is_file() else {}
    source = args.source_lang or saved.get("source_lang")
    target = args.target_lang or saved.get("target_lang")
    if not source or not target:
        parser.error("give --source_lang and --target_lang (the folder has no results.json naming them)")
    return source, target


class TestSet:
    """test2016's sources (as token ids for the model) and references, and the BLEU of the engines' outputs."""

    def __init__(self, args: argparse.Namespace, source: str, target: str, tokenizer, config):
        pairs = load_multi30k(args.data_dir, source_lang=source, target_lang=target)["test"]["translation"]
        pairs = pairs[: args.max_samples] if args.max_samples is not None else pairs
        self.sources, self.references = [pair[source] for pair in pairs], [pair[target] for pair in pairs]
        try:
            self.tokenized_references = tokenised_references(self.references, "test", target, args.data_dir)
        except FileNotFoundError:
            self.tokenized_references = None
        limit = input_length_limit(config, tokenizer)
        self.input_ids = tokenizer(self.sources, truncation=True, max_length=limit)["input_ids"]
        self.tokenizer, self.target = tokenizer, target

    def scores(self, rows: list[list[int]]) -> dict:
        texts = [t.strip() for t in self.tokenizer.batch_decode(rows, skip_special_tokens=True)]
        result = {"bleu": bleu(texts, self.references)}
        if self.tokenized_references is not None:
            result["bleu_lc_tok"] = bleu_lc_tok(texts, self.tokenized_references, self.target)
        return result


class Tokens:
    """The model's special token ids and generation length, which every engine's output is cleaned with."""

    def __init__(self, config):
        self.pad, self.eos, self.start = config.pad_token_id, config.eos_token_id, config.decoder_start_token_id
        self.max_new_tokens = (config.decoder_max_position_embeddings or config.max_position_embeddings) - 1


def hf_generate(module, tokens: Tokens, **options):
    """``generate`` of a torch module as an engine: ``run(ids, mask) -> rows of ids``."""

    def run(ids, mask):
        with torch.no_grad():
            # max_length (with the start token), the field the saved generation config sets: giving
            # max_new_tokens beside it makes generate warn at every batch that both are set.
            output = module.generate(ids, attention_mask=mask, max_length=tokens.max_new_tokens + 1, **options)
        return [clean(row, tokens.start, tokens.eos, tokens.pad) for row in output]

    return run


def engine(name: str, model, model_dir: Path, scratch: Path, tokens: Tokens):
    """An engine's runner factory (``options -> run(ids, mask) -> rows``) and the size of its weights in bytes."""
    if name in ("ctranslate2", "ctranslate2_int8"):
        from hf_transformer.export import to_ctranslate2
        from hf_transformer.export.ctranslate2_export import CTranslate2Generator

        quantization = "int8" if name.endswith("int8") else None
        folder = to_ctranslate2(model_dir, scratch / name, quantization=quantization)
        generator = CTranslate2Generator.for_cpu(folder, torch.get_num_threads())

        def runner(options):
            def run(ids, mask):
                rows = generator.generate(ids, mask, max_new_tokens=tokens.max_new_tokens, **options)
                return [clean(row, None, tokens.eos, tokens.pad) for row in rows]

            return run

        return runner, (folder / "model.bin").stat().st_size
    if name in ("onnx", "onnx_int8"):
        from hf_transformer.export import quantize_onnx, to_onnx
        from hf_transformer.export.onnx_export import OnnxSeq2SeqGenerator

        if name == "onnx_int8" and (scratch / "onnx").is_dir():  # the float32 export, quantized
            folder = quantize_onnx(scratch / "onnx", scratch / name)
        else:
            folder = to_onnx(model_dir, scratch / name, quantization="int8" if name == "onnx_int8" else None)
        generator = OnnxSeq2SeqGenerator.for_cpu(folder, torch.get_num_threads())

        def runner(options):
            def run(ids, mask):
                rows = generator.generate(ids.numpy(), mask.numpy(), max_new_tokens=tokens.max_new_tokens, **options)
                return [clean(row, tokens.start, tokens.eos, tokens.pad) for row in rows]

            return run

        return runner, sum(p.stat().st_size for p in folder.glob("*.onnx*"))
    if name == "torch_int8":
        quantized = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
        return (lambda options: hf_generate(quantized, tokens, **options)), state_dict_bytes(quantized)
    raise ValueError(f"unknown engine {name!r}; the engines are {', '.join(ENGINES)}")


def same(rows, reference) -> float:
    """The share of sentences whose tokens are identical."""
    return float(np.mean([a == b for a, b in zip(rows, reference)]))


def torch_reference(model, test: TestSet, settings: dict, tokens: Tokens, batch_size: int) -> tuple[dict, dict]:
    """``generate``'s outputs with each setting (and beam search with ``early_stopping=True``), and its entry
    of the report: seconds and BLEU of each setting, the size of its weights."""
    reference, entry = {}, {}
    for name, options in settings.items():
        reference[name], seconds = decode_all(
            hf_generate(model, tokens, **options), test.input_ids, batch_size, tokens.pad
        )
        entry[name] = {"seconds": round(seconds, 2), **test.scores(reference[name])}
    reference["beam_early"], _ = decode_all(
        hf_generate(model, tokens, early_stopping=True, **settings["beam"]), test.input_ids, batch_size, tokens.pad
    )
    entry["beam_early_stopping"] = test.scores(reference["beam_early"])
    entry["weights_bytes"] = state_dict_bytes(model)
    return reference, entry


def engine_entry(runner, weights_bytes: int, test: TestSet, settings: dict, reference: dict, tokens, batch_size):
    """An engine's entry of the report: seconds, BLEU and tokens identical to ``generate``'s, for each setting."""
    entry: dict = {"weights_bytes": weights_bytes}
    for name, options in settings.items():
        rows, seconds = decode_all(runner(options), test.input_ids, batch_size, tokens.pad)
        entry[name] = {"seconds": round(seconds, 2), **test.scores(rows), "identical": same(rows, reference[name])}
        if name == "beam":
            entry[name]["identical_to_early_stopping"] = same(rows, reference["beam_early"])
    return entry


def write(report: dict, output: str) -> None:
    path = Path(output)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    path.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))


def main(argv: list[str] | None = None) -> dict:
    parser = argument_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    check_arguments(parser, args)
    source, target = direction(parser, args)
    model_dir = Path(args.model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir).eval()
    tokens, generation = Tokens(model.config), model.generation_config
    test = TestSet(args, source, target, tokenizer, model.config)
    beams = generation.num_beams if generation.num_beams > 1 else 4
    length_penalty = generation.length_penalty if generation.length_penalty is not None else 1.0
    settings = {"greedy": dict(num_beams=1), "beam": dict(num_beams=beams, length_penalty=length_penalty)}
    report: dict = {
        "model_dir": str(model_dir),
        "direction": f"{source}->{target}",
        "sentences": len(test.sources),
        "num_beams": beams,
        "length_penalty": length_penalty,
        "threads": torch.get_num_threads(),
        "engines": {},
    }
    logger.info("generate (torch fp32) on %d sentences", len(test.sources))
    reference, report["engines"]["torch"] = torch_reference(model, test, settings, tokens, args.batch_size)
    with tempfile.TemporaryDirectory(prefix="exports-") as scratch:
        for name in args.engines:
            logger.info("engine %s", name)
            runner, weights_bytes = engine(name, model, model_dir, Path(scratch), tokens)
            entry = engine_entry(runner, weights_bytes, test, settings, reference, tokens, args.batch_size)
            report["engines"][name] = entry
            logger.info("%s: %s", name, json.dumps(entry))
    write(report, args.output)
    return report


def markdown(report: dict) -> str:
    lines = [
        f"# Deployed engines on Multi30k test2016, {report['direction']}",
        "",
        f"{report['sentences']} sentences, batches of up to 32 sorted by length, {report['threads']} threads; beam "
        f"{report['num_beams']} with length penalty {report['length_penalty']}. `identical`: share of sentences "
        "whose tokens equal `generate`'s with the same settings; `early`: against `generate(early_stopping=True)`.",
        "",
        "| engine | weights MB | greedy BLEU | greedy identical | beam BLEU | beam lc-tok BLEU | beam identical "
        "| beam identical (early) | greedy s | beam s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]

    def cell(value, digits=2):
        return "" if value is None else f"{value:.{digits}f}"

    for engine, entry in report["engines"].items():
        greedy, beam = entry.get("greedy", {}), entry.get("beam", {})
        lines.append(
            f"| {engine} | {entry['weights_bytes'] / 2**20:.1f} | {cell(greedy.get('bleu'))} "
            f"| {cell(greedy.get('identical'), 3)} | {cell(beam.get('bleu'))} | {cell(beam.get('bleu_lc_tok'))} "
            f"| {cell(beam.get('identical'), 3)} | {cell(beam.get('identical_to_early_stopping'), 3)} "
            f"| {cell(greedy.get('seconds'), 1)} | {cell(beam.get('seconds'), 1)} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    run_command(main)
