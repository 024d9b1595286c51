"""What the classifier's unfitted n-gram score costs its fine-tuning: computed, or left out of the forward.

`scripts/train_classifier.py` builds the classifier with its n-gram score (`--ngram_buckets`), zero and frozen until
it is fitted after the training; the training leaves it out of the forward
(`hf_transformer.ngram_classifier.ngram_score_left_out`), which gives the same weights bit for bit without hashing
each batch's n-grams. This script trains two copies of the main job's classifier (d_model 128, 2 layers, 4 heads,
feed-forward 512, mean pooling, the character 1- to 4-gram score in 2^22 buckets, no dropout) on the same
length-grouped batches with fused AdamW, one computing the score and one leaving it out, in alternated rounds in one
process; it reports the median time of a step, and checks that the two copies end with the same weights.

    python benchmarks/ngram_left_out.py --texts runs/nsmc-data/train.jsonl --tokenizer runs/nsmc-pretrained
    python benchmarks/ngram_left_out.py --rounds 2 --steps 4 --batch_size 8 --output /tmp/left_out.md   # seconds

Without ``--tokenizer`` a 2,000-piece BPE tokenizer is trained on the texts; without ``--texts`` the texts are
made up. Writes ``benchmarks/results/ngram_left_out.md`` and ``.json`` (``--output``) and prints progress.
"""

from __future__ import annotations

import argparse
import contextlib
import time

import torch

try:  # python -m benchmarks.ngram_left_out, or imported from the repository root
    from benchmarks.batch_order import main_job_config
    from benchmarks.benchmark import machine_description, speed_up_report, speed_up_result, write_report
    from benchmarks.collation import text_arguments, texts_and_tokenizer
    from benchmarks.kernel_cache import shuffled_batches
except ModuleNotFoundError:  # python benchmarks/ngram_left_out.py: the script's own folder is on the path
    from batch_order import main_job_config
    from benchmark import machine_description, speed_up_report, speed_up_result, write_report
    from collation import text_arguments, texts_and_tokenizer
    from kernel_cache import shuffled_batches

# The report table's first four columns.
HEADINGS = ("precision", "steps a round", "score computed (ms)", "score left out (ms)")


def classifier_training_step(tokenizer, max_length: int, precision: str, *, left_out: bool, buckets: int):
    """A training step of the main job's classifier with its frozen, unfitted character n-gram score (weights drawn
    under seed 0), computing the score or leaving it out: a function of a batch of rows (``{"input_ids": [...],
    "labels": int}``), the model, and the block it is left out in (an ``ExitStack`` to close)."""
    from hf_transformer import TransformerForSequenceClassification
    from hf_transformer.data import classification_collator
    from hf_transformer.ngram_classifier import ngram_score_left_out

    collator = classification_collator(tokenizer)
    config = main_job_config(
        tokenizer, max_length, num_labels=2, classifier_pooling="mean", classifier_ngram_buckets=buckets,
        classifier_ngram_unit="character", classifier_ngram_order=4,
    )  # fmt: skip
    torch.manual_seed(0)
    model = TransformerForSequenceClassification(config).train()
    model.ngram_classifier.requires_grad_(False)  # as train_classifier.py builds it
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4, fused=True)
    # Left out for the model's life, as train_classifier.py leaves it out around the whole training: the block is
    # entered once (its check reads every weight of the score), and closed when the caller closes ``held``.
    held = contextlib.ExitStack()
    if left_out:
        held.enter_context(ngram_score_left_out(model))

    def step(rows: list[dict]) -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bfloat16"):
            loss = model(**collator(rows)).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step, model, held


def time_both(steps: dict, batches: list, rounds: int, steps_a_round: int) -> dict[str, list[float]]:
    """Seconds per step of each round, per way: round r trains batches [r * steps_a_round, (r + 1) * steps_a_round)
    with each way's model; the rounds alternate which goes first."""
    seconds = {name: [] for name in steps}
    for round_index in range(rounds):
        chunk = batches[round_index * steps_a_round : (round_index + 1) * steps_a_round]
        names = list(steps) if round_index % 2 == 0 else list(reversed(steps))
        for name in names:
            started = time.perf_counter()
            for rows in chunk:
                steps[name](rows)
            seconds[name].append((time.perf_counter() - started) / len(chunk))
    return seconds


def main(argv: list[str] | None = None) -> dict:
    from hf_transformer.training import keep_compiled_kernels, keep_freed_memory

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    text_arguments(parser, output="benchmarks/results/ngram_left_out.md")
    parser.add_argument("--steps", type=int, default=100, help="training steps per way and round")
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--buckets", type=int, default=1 << 22, help="the n-gram score's buckets (the job's 2^22)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--precisions", nargs="+", default=["float32", "bfloat16"], choices=["float32", "bfloat16"])
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    keep_freed_memory()  # as the training scripts run
    keep_compiled_kernels()

    rows_needed = int((args.rounds * args.steps + 11) * args.batch_size * 1.05)
    texts, tokenizer = texts_and_tokenizer(args, rows_needed)
    ids = tokenizer(texts, truncation=True, max_length=args.max_length)["input_ids"]
    rows = [{"input_ids": row, "labels": index % 2} for index, row in enumerate(ids)]
    batches = [[rows[i] for i in batch] for batch in shuffled_batches(ids, args.batch_size)]
    if len(batches) < args.rounds * args.steps + 10:
        raise ValueError(f"{len(batches)} batches; the benchmark trains {args.rounds * args.steps + 10}")
    results = {}
    for precision in args.precisions:
        ways, models, blocks = {}, {}, []
        for name, left_out in (("computed", False), ("left out", True)):
            ways[name], models[name], held = classifier_training_step(
                tokenizer, args.max_length, precision, left_out=left_out, buckets=args.buckets
            )
            blocks.append(held)
            for rows_of_a_batch in batches[-10:]:  # warm-up, on batches no round trains
                ways[name](rows_of_a_batch)
        seconds = time_both(ways, batches, args.rounds, args.steps)
        assert models["left out"].ngram_classifier.left_out and not models["computed"].ngram_classifier.left_out
        for held in blocks:
            held.close()
        computed, left_out = models["computed"].state_dict(), models["left out"].state_dict()
        same = all(torch.equal(tensor, left_out[name]) for name, tensor in computed.items())
        results[precision] = speed_up_result(seconds, "computed", "left out", {"steps": args.steps})
        results[precision]["same_weights"] = same
        medians = results[precision]["median_ms"]
        print(f"{precision}: score computed {medians['computed']:.2f} ms, left out {medians['left out']:.2f} ms a "
              f"step; the same weights bit for bit: {same}", flush=True)  # fmt: skip

    report = {"machine": machine_description(torch.device("cpu")), "texts": args.texts or "made up",
              "threads": args.threads, "rounds": args.rounds, "batch_size": args.batch_size,
              "buckets": args.buckets, "results": results}  # fmt: skip
    same = ", ".join(
        f"{precision} {'yes' if result['same_weights'] else 'NO'}" for precision, result in results.items()
    )
    intro = (
        f"A training step of the main job's classifier ({args.batch_size} rows) with its unfitted character n-gram "
        f"score ({args.buckets:,} buckets) computed or left out of the forward, {args.threads} thread(s), median of "
        f"{args.rounds} alternated rounds of {args.steps} steps on the same batches (texts: {report['texts']}; "
        f"{report['machine']}). The two copies ended with the same weights bit for bit: {same}."
    )
    markdown = speed_up_report(intro, results, HEADINGS, "steps", "computed", "left out")
    write_report(args.output, markdown, report)
    return report


if __name__ == "__main__":
    main()
