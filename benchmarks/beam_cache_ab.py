"""Beam search with the cross-attention reordering skipped where it changes nothing (the package's
``_reorder_cache``) against transformers' plain reordering of both caches, side by side in one process.

    python benchmarks/beam_cache_ab.py --output benchmarks/results/performance-beam-cache.json

Both give the same tokens, scores and cache contents (checked here on every configuration before timing).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch
from transformers.utils import logging

from hf_transformer import TransformerConfig, TransformerForConditionalGeneration
from hf_transformer.generation import TransformerGenerationMixin

CONFIGS = {
    "base-small": dict(vocab_size=8000, n_layer=3, length=64),
    "seed": dict(vocab_size=8007, n_layer=6, length=256),
}


def build(name: str) -> tuple[TransformerForConditionalGeneration, torch.Tensor]:
    settings = CONFIGS[name]
    config = TransformerConfig(
        vocab_size=settings["vocab_size"], d_model=256, num_attention_heads=4, intermediate_size=1024,
        n_layer=settings["n_layer"], max_position_embeddings=300, dropout=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = TransformerForConditionalGeneration(config).eval()
    generator = torch.Generator().manual_seed(1)
    source = torch.randint(4, settings["vocab_size"], (8, settings["length"]), generator=generator)
    source[:, -1] = config.eos_token_id
    return model, source


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", default="base-small,seed")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output", default=None, help="JSON file for the results")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    logging.set_verbosity_error()
    own_hook = TransformerGenerationMixin._reorder_cache

    def use(mode: str) -> None:
        TransformerGenerationMixin._reorder_cache = own_hook
        if mode == "reorder both":  # without the model's hook, generate calls the cache's own reorder_cache
            del TransformerGenerationMixin._reorder_cache

    results = {"machine": platform.processor() or platform.machine(), "torch": torch.__version__, "rows": []}
    modes = ("skip where unchanged", "reorder both")
    try:
        for name in args.configs.split(","):
            model, source = build(name)
            options = dict(
                attention_mask=source.ne(0), num_beams=4, max_new_tokens=32, min_new_tokens=32, do_sample=False,
                return_dict_in_generate=True, output_scores=True,
            )  # fmt: skip
            outputs, times = {}, {mode: [] for mode in modes}
            with torch.no_grad():
                for mode in modes:
                    use(mode)
                    outputs[mode] = model.generate(source, **options)
                same = torch.equal(outputs[modes[0]].sequences, outputs[modes[1]].sequences) and all(
                    torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)
                    for a, b in zip(
                        outputs[modes[0]].past_key_values.cross_attention_cache.layers,
                        outputs[modes[1]].past_key_values.cross_attention_cache.layers,
                    )
                )
                if not same:
                    raise SystemExit(f"{name}: the two reorderings disagree")
                for round_index in range(args.rounds):
                    for mode in modes if round_index % 2 == 0 else modes[::-1]:
                        use(mode)
                        start = time.perf_counter()
                        model.generate(source, **options)
                        times[mode].append(time.perf_counter() - start)
            medians = {mode: statistics.median(times[mode]) for mode in modes}
            row = {
                "config": name,
                **{f"{mode} ms": round(1000 * medians[mode], 1) for mode in modes},
                "reorder both / skip": round(medians["reorder both"] / medians["skip where unchanged"], 3),
            }
            results["rows"].append(row)
            print(row, flush=True)
    finally:
        TransformerGenerationMixin._reorder_cache = own_hook
    if args.output:
        Path(args.output).write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
