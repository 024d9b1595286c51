"""What the order of length-grouped training batches costs: transformers' sweep against random order.

transformers' `LengthGroupedSampler` yields each mega-batch's batches from the longest rows to the shortest; the
package's `ShuffledLengthGroupedSampler` (the encoder scripts' Trainer) yields the same batches in random order, so
consecutive steps change shape more often. This script trains the main job's masked-token model (d_model 128, 2
layers, 4 heads, feed-forward 512, AdamW) on the same batches in both orders, in alternated rounds in one process,
and reports the median time of a step in each precision asked for.

    python benchmarks/batch_order.py --texts runs/nsmc-data/train.jsonl --tokenizer runs/nsmc-pretrained
    python benchmarks/batch_order.py --rounds 2 --steps 4 --batch_size 8 --output /tmp/order.md   # seconds

Without ``--tokenizer`` a 2,000-piece BPE tokenizer is trained on the texts; without ``--texts`` the texts are
made up. Writes ``benchmarks/results/batch_order.md`` and ``.json`` (``--output``) and prints progress.
"""

from __future__ import annotations

import argparse
import time

import torch

try:  # python -m benchmarks.batch_order, or imported from the repository root
    from benchmarks.benchmark import machine_description, speed_up_report, speed_up_result, write_report
    from benchmarks.collation import text_arguments, texts_and_tokenizer
except ModuleNotFoundError:  # python benchmarks/batch_order.py: the script's own folder is on the path
    from benchmark import machine_description, speed_up_report, speed_up_result, write_report
    from collation import text_arguments, texts_and_tokenizer

# The report table's first four columns.
HEADINGS = ("precision", "steps a round", "transformers' order (ms)", "random order (ms)")


def sweep_batches(lengths: list[int], batch_size: int, seed: int = 0) -> list[list[int]]:
    """transformers' length-grouped batches, in its order (full batches only)."""
    from transformers.trainer_pt_utils import get_length_grouped_indices

    order = get_length_grouped_indices(lengths, batch_size, generator=torch.Generator().manual_seed(seed))
    return [order[start : start + batch_size] for start in range(0, len(order) - batch_size + 1, batch_size)]


def time_orders(step, batches: list, rounds: int, steps: int) -> dict[str, list[float]]:
    """Seconds per step of each round, per order: round r trains batches [r*steps, (r+1)*steps) once as
    transformers yields them and once in random order; the rounds alternate which order goes first."""
    seconds = {"transformers": [], "hf_transformer": []}
    for round_index in range(rounds):
        chunk = batches[round_index * steps : (round_index + 1) * steps]
        shuffled = [chunk[i] for i in torch.randperm(len(chunk), generator=torch.Generator().manual_seed(round_index))]
        orders = {"transformers": chunk, "hf_transformer": shuffled}
        assert sorted(map(id, chunk)) == sorted(map(id, shuffled))  # the same batches
        names = list(orders) if round_index % 2 == 0 else list(reversed(orders))
        for name in names:
            started = time.perf_counter()
            for rows in orders[name]:
                step(rows)
            seconds[name].append((time.perf_counter() - started) / len(chunk))
    return seconds


def main_job_config(tokenizer, max_length: int, **head_settings):
    """The main job's encoder (d_model 128, 2 layers, 4 heads, feed-forward 512, learned positions, no dropout) for
    ``tokenizer``'s vocabulary, with a head's settings beside it (e.g. the classifier's)."""
    from hf_transformer import TransformerConfig

    return TransformerConfig(
        vocab_size=len(tokenizer), d_model=128, n_layer=2, num_attention_heads=4, intermediate_size=512,
        max_position_embeddings=max_length, dropout=0.0, attention_dropout=0.0, embedding_layer_norm=True,
        position_embedding_type="learned", pad_token_id=tokenizer.pad_token_id, **head_settings,
    )  # fmt: skip


def masked_lm_training_step(tokenizer, max_length: int, precision: str):
    """One training step of the main job's masked-token model (d_model 128, 2 layers, 4 heads, feed-forward 512, no
    dropout; weights drawn under seed 0) with fused AdamW, in float32 or bfloat16 autocast: a function of a batch of
    rows (``{"input_ids": [...]}``), which the job's collator masks."""
    from hf_transformer import TransformerForMaskedLM
    from hf_transformer.data import masked_token_collator

    collator = masked_token_collator(tokenizer, mlm_probability=0.15)
    torch.manual_seed(0)
    model = TransformerForMaskedLM(main_job_config(tokenizer, max_length)).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

    def step(rows: list[dict]) -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bfloat16"):
            loss = model(**collator(rows)).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def main(argv: list[str] | None = None) -> dict:
    from hf_transformer.training import keep_freed_memory

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    text_arguments(parser, output="benchmarks/results/batch_order.md")
    parser.add_argument("--steps", type=int, default=100, help="training steps per order and round")
    parser.add_argument("--batch_size", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--precisions", nargs="+", default=["float32", "bfloat16"], choices=["float32", "bfloat16"])
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    keep_freed_memory()  # as the training scripts run

    rows_needed = int((args.rounds * args.steps + 11) * args.batch_size * 1.05)  # rows of one token left out
    texts, tokenizer = texts_and_tokenizer(args, rows_needed)
    ids = [row for row in tokenizer(texts, truncation=True, max_length=args.max_length)["input_ids"] if len(row) > 1]
    batches = [[{"input_ids": ids[i]} for i in batch] for batch in sweep_batches(list(map(len, ids)), args.batch_size)]
    if len(batches) < args.rounds * args.steps + 10:
        raise ValueError(f"{len(batches)} batches; the benchmark trains {args.rounds * args.steps + 10}")
    results = {}
    for precision in args.precisions:
        step = masked_lm_training_step(tokenizer, args.max_length, precision)
        for rows in batches[-10:]:  # warm-up, on batches no round trains
            step(rows)
        seconds = time_orders(step, batches, args.rounds, args.steps)
        results[precision] = speed_up_result(seconds, "transformers", "hf_transformer", {"steps": args.steps})
        medians = results[precision]["median_ms"]
        print(f"{precision}: transformers' order {medians['transformers']:.2f} ms, random order "
              f"{medians['hf_transformer']:.2f} ms a step", flush=True)  # fmt: skip

    report = {"machine": machine_description(torch.device("cpu")), "texts": args.texts or "made up",
              "threads": args.threads, "rounds": args.rounds, "batch_size": args.batch_size,
              "results": results}  # fmt: skip
    intro = (
        f"A masked-token training step of the main job's model ({args.batch_size} rows), {args.threads} thread(s), "
        f"median of {args.rounds} alternated rounds of {args.steps} steps on the same batches in transformers' "
        f"order and in random order (`hf_transformer`; texts: {report['texts']}; {report['machine']})."
    )
    markdown = speed_up_report(intro, results, HEADINGS, "steps", "transformers", "hf_transformer")
    write_report(args.output, markdown, report)
    return report


if __name__ == "__main__":
    main()
