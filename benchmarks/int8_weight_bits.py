"""CTranslate2 int8 weights in 8 and in 7 bits, through oneDNN's int8 products and MKL's: how far the int8
log-probabilities of float32's beam tokens move from float32's, on small random translation models.

oneDNN's int8 kernels on a CPU without VNNI (an AVX2-only AMD EPYC; CTranslate2 takes oneDNN's kernels on AMD) sum
pairs of uint8 x int8 products in 16 bits, which saturate with 8-bit weights (255 x 127 x 2 > 32,767); MKL's do not.
8 bits is CTranslate2's own converter's rounding (within +-127), 7 bits the package's int8 export (within +-63).
CTranslate2 reads ``CT2_USE_MKL`` when it is imported, so each library runs in a process of its own.

    python -m benchmarks.int8_weight_bits                  # six models (seeds 0-5), beam 2, about a minute

Writes ``benchmarks/results/int8_weight_bits.md`` and ``.json`` (``--output``) and prints progress.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

# Run as a module from the repository root: the models are the tests' own (tests/helpers/models.py).
from benchmarks.benchmark import machine_description, write_report

REPOSITORY = Path(__file__).resolve().parents[1]

SENTENCES = ["a man rides a red bike .", "two dogs play in the snow .", "ein mann fährt ein rotes fahrrad ."] * 4
INPUTS = ["a man rides a red bike .", "two dogs", "ein mann fährt ein rotes fahrrad .", "a dog in the snow"]
LIBRARIES = {"oneDNN": "0", "MKL": "1"}  # CT2_USE_MKL


def measure(bits: int, models: int) -> dict:
    """In this process (its CT2_USE_MKL as set): per model, the mean |int8 - float32| log-probability of float32's
    beam tokens, and how many of its beams int8 decodes as float32 does."""
    from hf_transformer.export import ctranslate2_export
    from hf_transformer.export.ctranslate2_export import CTranslate2Generator, to_ctranslate2
    from hf_transformer.tokenization import train_tokenizer
    from tests.helpers.models import hf_tokens, random_translator, teacher_forced_log_probs

    ctranslate2_export.INT8_WEIGHT_LIMIT = 2 ** (bits - 1) - 1  # 127: CTranslate2's own rounding
    tokenizer = train_tokenizer(SENTENCES, vocab_size=80, model_type="bpe", model_max_length=48, show_progress=False)
    batch = tokenizer(INPUTS, return_tensors="pt", padding=True)
    distances, same = [], 0
    with tempfile.TemporaryDirectory() as folder:
        for seed in range(models):
            model = random_translator(tokenizer, seed, n_layer=1)
            model.save_pretrained(f"{folder}/{seed}")
            tokenizer.save_pretrained(f"{folder}/{seed}")
            generator = CTranslate2Generator(to_ctranslate2(f"{folder}/{seed}", f"{folder}/{seed}-int8", "int8"))
            rows, _ = hf_tokens(model, batch, num_beams=2, early_stopping=True)
            eos = model.config.eos_token_id
            tokens = generator.generate(
                batch["input_ids"], batch["attention_mask"], num_beams=2, max_new_tokens=10, early_stopping=True
            )
            same += sum(row == reference for row, reference in zip(tokens, rows))
            sources = generator._source_tokens(batch["input_ids"], batch["attention_mask"])
            targets = [[generator.target_tokens[i] for i in row if i != eos] for row in rows]
            scored = generator.translator.score_batch(sources, targets, max_input_length=0)
            float32 = torch.cat(teacher_forced_log_probs(model, batch, rows))
            int8 = torch.cat([torch.tensor(result.log_probs) for result in scored])
            distances.append(round((int8 - float32).abs().mean().item(), 4))
    return {"distances": distances, "same_beams": same, "beams": models * len(INPUTS)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, default=6)
    parser.add_argument("--output", default="benchmarks/results/int8_weight_bits.md")
    parser.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)  # bits, in a process of its own
    args = parser.parse_args(argv)
    if args.worker is not None:
        print(json.dumps(measure(args.worker, args.models)))
        return 0
    started = time.time()
    cells = {}
    for library, use_mkl in LIBRARIES.items():
        for bits in (8, 7):
            command = [
                sys.executable,
                "-m",
                "benchmarks.int8_weight_bits",
                "--worker",
                str(bits),
                "--models",
                str(args.models),
            ]
            done = subprocess.run(
                command,
                env=os.environ | {"CT2_USE_MKL": use_mkl},
                cwd=REPOSITORY,
                capture_output=True,
                text=True,
                check=True,
            )
            cells[f"{library} {bits}"] = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"{library}, {bits}-bit weights: {cells[f'{library} {bits}']}", flush=True)

    def cell(key: str) -> str:
        result = cells[key]
        low, high = min(result["distances"]), max(result["distances"])
        return f"{low:.2f}-{high:.2f}; {result['same_beams']} of {result['beams']}"

    machine = machine_description(torch.device("cpu"))
    lines = [
        "# CTranslate2 int8 weights: 8 bits and 7 bits, oneDNN and MKL",
        "",
        f"Produced by `python -m benchmarks.int8_weight_bits --models {args.models} --output {args.output}` on "
        f"{machine}. Per setting, the range over the random models (one layer each side, seeds 0-{args.models - 1}) "
        "of the mean |int8 - float32| log-probability (nats a token) of float32's beam-2 tokens; and how many "
        "beams int8 decodes as float32 does.",
        "",
        "| int8 weights | oneDNN (`CT2_USE_MKL=0`) | MKL (`CT2_USE_MKL=1`) |",
        "|---|---|---|",
        *(f"| {bits} bits | {cell(f'oneDNN {bits}')} | {cell(f'MKL {bits}')} |" for bits in (8, 7)),
        "",
    ]
    record = {"machine": machine, "models": args.models, "cells": cells, "seconds": round(time.time() - started, 1)}
    write_report(args.output, "\n".join(lines), record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
