"""The deployed forms of a trained translation folder against `generate`, on Multi30k test2016.

    python scripts/evaluate_exports.py runs/m30k-en-de --data_dir ../shared/data --output docs/deployment-en-de.json

Every engine decodes the same test sources, in the same length-sorted batches, greedy and with beam search
(the folder's beam size and length penalty):

- `ctranslate2` (fp32) and `onnx` (ONNX Runtime): the share of sentences whose tokens are identical to
  `generate`'s. CTranslate2's beam search stops once `num_beams` hypotheses are finished (transformers'
  `early_stopping=True`), so its beam tokens are compared with `generate(early_stopping=True)`; the count
  against the folder's own setting is reported too.
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
from hf_transformer.data import load_multi30k, load_multi30k_tok_references
from hf_transformer.inference import input_length_limit
from hf_transformer.metrics import bleu, bleu_lc_tok

logger = logging.getLogger("evaluate_exports")


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


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir", help="a translation folder written by scripts/train_translation.py")
    parser.add_argument("--data_dir", default=None, help="folder holding multi30k/ (else $HF_TRANSFORMER_DATA)")
    parser.add_argument("--source_lang", default=None, help="en or de (default: from the folder's results.json)")
    parser.add_argument("--target_lang", default=None)
    parser.add_argument("--max_samples", type=int, default=None, help="the first N test sentences only")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument(
        "--engines", nargs="+", default=["ctranslate2", "ctranslate2_int8", "onnx", "onnx_int8", "torch_int8"]
    )
    parser.add_argument("--output", default="deployment.json", help="JSON results; a .md table is written beside")
    args = parser.parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)

    model_dir = Path(args.model_dir)
    saved = json.loads((model_dir / "results.json").read_text()) if (model_dir / "results.json").is_file() else {}
    source = args.source_lang or saved.get("source_lang")
    target = args.target_lang or saved.get("target_lang")
    if not source or not target:
        parser.error("give --source_lang and --target_lang (the folder has no results.json naming them)")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir).eval()
    config, generation = model.config, model.generation_config
    pad, eos, start = config.pad_token_id, config.eos_token_id, config.decoder_start_token_id

    pairs = load_multi30k(args.data_dir, source_lang=source, target_lang=target)["test"]["translation"]
    pairs = pairs[: args.max_samples] if args.max_samples else pairs
    sources, references = [pair[source] for pair in pairs], [pair[target] for pair in pairs]
    try:
        tokenized_references = load_multi30k_tok_references("test", target, args.data_dir)[: len(pairs)]
    except FileNotFoundError:
        tokenized_references = None
    limit = input_length_limit(config, tokenizer)
    input_ids = tokenizer(sources, truncation=True, max_length=limit)["input_ids"]
    max_new_tokens = (config.decoder_max_position_embeddings or config.max_position_embeddings) - 1
    beams = generation.num_beams if generation.num_beams > 1 else 4
    length_penalty = generation.length_penalty if generation.length_penalty is not None else 1.0
    settings = {
        "greedy": dict(num_beams=1),
        "beam": dict(num_beams=beams, length_penalty=length_penalty),
    }

    def scores(rows: list[list[int]]) -> dict:
        texts = [t.strip() for t in tokenizer.batch_decode(rows, skip_special_tokens=True)]
        result = {"bleu": bleu(texts, references)}
        if tokenized_references is not None:
            result["bleu_lc_tok"] = bleu_lc_tok(texts, tokenized_references, target)
        return result

    def hf_generate(module, **options):
        def run(ids, mask):
            with torch.no_grad():
                # max_length (with the start token), the field the saved generation config sets: giving
                # max_new_tokens beside it makes generate warn at every batch that both are set.
                output = module.generate(ids, attention_mask=mask, max_length=max_new_tokens + 1, **options)
            return [clean(row, start, eos, pad) for row in output]

        return run

    def same(rows, reference) -> float:
        return float(np.mean([a == b for a, b in zip(rows, reference)]))

    report: dict = {
        "model_dir": str(model_dir),
        "direction": f"{source}->{target}",
        "sentences": len(sources),
        "num_beams": beams,
        "length_penalty": length_penalty,
        "threads": torch.get_num_threads(),
        "engines": {},
    }
    logger.info("generate (torch fp32) on %d sentences", len(sources))
    reference = {}
    for name, options in settings.items():
        reference[name], seconds = decode_all(hf_generate(model, **options), input_ids, args.batch_size, pad)
        report["engines"].setdefault("torch", {})[name] = {"seconds": round(seconds, 2), **scores(reference[name])}
    reference["beam_early"], _ = decode_all(
        hf_generate(model, early_stopping=True, **settings["beam"]), input_ids, args.batch_size, pad
    )
    report["engines"]["torch"]["beam_early_stopping"] = scores(reference["beam_early"])
    report["engines"]["torch"]["weights_bytes"] = state_dict_bytes(model)

    with tempfile.TemporaryDirectory(prefix="exports-") as scratch:
        scratch = Path(scratch)
        for engine in args.engines:
            logger.info("engine %s", engine)
            entry: dict = {}
            if engine in ("ctranslate2", "ctranslate2_int8"):
                from hf_transformer.export import to_ctranslate2
                from hf_transformer.export.ctranslate2_export import CTranslate2Generator

                quantization = "int8" if engine.endswith("int8") else None
                folder = to_ctranslate2(model_dir, scratch / engine, quantization=quantization)
                generator = CTranslate2Generator.for_cpu(folder, torch.get_num_threads())
                entry["weights_bytes"] = (folder / "model.bin").stat().st_size

                def run_engine(options, generator=generator):
                    def run(ids, mask):
                        rows = generator.generate(ids, mask, max_new_tokens=max_new_tokens, **options)
                        return [clean(row, None, eos, pad) for row in rows]

                    return run
            elif engine in ("onnx", "onnx_int8"):
                from hf_transformer.export import quantize_onnx, to_onnx
                from hf_transformer.export.onnx_export import OnnxSeq2SeqGenerator

                if engine == "onnx_int8" and (scratch / "onnx").is_dir():  # the float32 export, quantized
                    folder = quantize_onnx(scratch / "onnx", scratch / engine)
                else:
                    quantization = "int8" if engine == "onnx_int8" else None
                    folder = to_onnx(model_dir, scratch / engine, quantization=quantization)
                generator = OnnxSeq2SeqGenerator.for_cpu(folder, torch.get_num_threads())
                entry["weights_bytes"] = sum(p.stat().st_size for p in folder.glob("*.onnx*"))

                def run_engine(options, generator=generator):
                    def run(ids, mask):
                        rows = generator.generate(ids.numpy(), mask.numpy(), max_new_tokens=max_new_tokens, **options)
                        return [clean(row, start, eos, pad) for row in rows]

                    return run
            elif engine == "torch_int8":
                quantized = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
                entry["weights_bytes"] = state_dict_bytes(quantized)

                def run_engine(options, quantized=quantized):
                    return hf_generate(quantized, **options)
            else:
                parser.error(f"unknown engine {engine!r}")
            for name, options in settings.items():
                rows, seconds = decode_all(run_engine(options), input_ids, args.batch_size, pad)
                entry[name] = {"seconds": round(seconds, 2), **scores(rows), "identical": same(rows, reference[name])}
                if name == "beam":
                    entry[name]["identical_to_early_stopping"] = same(rows, reference["beam_early"])
            report["engines"][engine] = entry
            logger.info("%s: %s", engine, json.dumps(entry))

    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n")
    output.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))
    return report


def markdown(report: dict) -> str:
    lines = [
        f"# Deployed engines on Multi30k test2016, {report['direction']}",
        "",
        f"{report['sentences']} sentences, batches of up to 32 sorted by length, {report['threads']} threads; beam "
        f"{report['num_beams']} with length penalty {report['length_penalty']}. `identical`: share of sentences "
        "whose tokens equal `generate`'s with the same settings; `early`: against `generate(early_stopping=True)`, "
        "CTranslate2's stopping rule.",
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
    main()
