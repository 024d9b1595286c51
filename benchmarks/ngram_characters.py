"""What the n-gram score's characters cost: the plain packing against `speed.pack_token_characters`.

A character n-gram score (``classifier_ngram_unit="character"``) reads each token's characters from a (V, 16) table
and packs a row's characters one after the other. The plain packing (`token_characters_in_a_row` in the model file)
builds every token's 16 slots, (B, S * 16), most of them empty, and hashes n-grams over all of them; the package's
packing is as wide as the batch's longest row of characters. This script times both, in alternated rounds, on what
the main job does with them:

- ``score``: the score of a batch of 64 rows of about one length (each training step and each prediction pays it,
  the score still zero while the encoder trains);
- ``fit pass``: the fit's pass over the training rows that counts each bucket's rows (`document_frequencies`;
  the fit and the refit hash the rows three times).

Every batch's scores must agree (to float rounding) and the bucket counts be equal.

    python benchmarks/ngram_characters.py --texts runs/nsmc-data/train.jsonl --tokenizer runs/nsmc-pretrained
    python benchmarks/ngram_characters.py --rounds 3 --rows 512 --output /tmp/ngram.md   # seconds: made-up texts

Without ``--tokenizer`` a 2,000-piece BPE tokenizer is trained on the texts; without ``--texts`` the texts are
made up. Writes ``benchmarks/results/ngram-characters.md`` and ``.json`` (``--output``) and prints progress.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

try:  # python -m benchmarks.ngram_characters, or imported from the repository root
    from benchmarks.benchmark import machine_description, speed_up_report, speed_up_result, write_report
    from benchmarks.collation import text_arguments, texts_and_tokenizer
except ModuleNotFoundError:  # python benchmarks/ngram_characters.py: the script's own folder is on the path
    from benchmark import machine_description, speed_up_report, speed_up_result, write_report
    from collation import text_arguments, texts_and_tokenizer

# The report table's first four columns.
HEADINGS = ("work", "per", "plain (ms)", "hf_transformer (ms)")

BATCH_ROWS = 64  # the main job's fine-tuning batch


def plain_packing(input_ids, token_is_real, token_characters, plain):
    return plain(input_ids, token_is_real, token_characters)


def time_packings(work: Callable, packings: dict[str, Callable], rounds: int) -> tuple[dict[str, list[float]], list]:
    """Seconds of ``work()`` under each packing (installed as the model's ``pack_token_characters``) in each round,
    the packings' order alternating; returns them and each packing's last answer."""
    from hf_transformer import modeling_transformer

    installed = modeling_transformer.pack_token_characters
    seconds, answers = {name: [] for name in packings}, {}
    try:
        for round_index in range(rounds):
            for name in list(packings) if round_index % 2 == 0 else list(reversed(packings)):
                modeling_transformer.pack_token_characters = packings[name]
                started = time.perf_counter()
                answers[name] = work()
                seconds[name].append(time.perf_counter() - started)
    finally:
        modeling_transformer.pack_token_characters = installed
    return seconds, [answers[name] for name in packings]


def check_same(answers: list, what: str) -> None:
    first, *others = answers
    for other in others:
        for one, two in zip(first, other, strict=True):
            if one.dtype.is_floating_point:
                close = torch.allclose(one, two, rtol=1e-5, atol=1e-6)
            else:
                close = torch.equal(one, two)
            if not close:
                raise AssertionError(f"the packings gave different {what}")


def main(argv: list[str] | None = None) -> dict:
    from hf_transformer import TransformerConfig
    from hf_transformer.modeling_transformer import NgramClassifier
    from hf_transformer.ngram_classifier import document_frequencies, padded, token_character_table
    from hf_transformer.speed import pack_token_characters

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    text_arguments(parser, output="benchmarks/results/ngram-characters.md")
    parser.add_argument("--rows", type=int, default=20000, help="rows read: the fit pass's, cut into the batches")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(), help="default: torch's")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    texts, tokenizer = texts_and_tokenizer(args, args.rows)
    rows = tokenizer(texts, truncation=True, max_length=args.max_length)["input_ids"]
    config = TransformerConfig(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        num_labels=2,
        classifier_ngram_buckets=1 << 22,
        classifier_ngram_unit="character",
        classifier_ngram_order=4,
    )  # the main job's score
    head = NgramClassifier(config).eval().requires_grad_(False)
    generator = torch.Generator().manual_seed(0)
    head.token_characters.copy_(token_character_table(tokenizer, config.vocab_size))
    head.idf.uniform_(1.0, 10.0, generator=generator)
    head.weight.normal_(generator=generator)

    by_length = sorted(rows, key=len)  # batches of about one length, as the training and evaluation batches
    batches = [padded(by_length[i : i + BATCH_ROWS], config.pad_token_id) for i in range(0, len(rows), BATCH_ROWS)]
    all_rows = padded(rows, config.pad_token_id)
    packings = {"plain": plain_packing, "hf_transformer": pack_token_characters}
    work = {
        "score": (lambda: [head(ids, real) for ids, real in batches], len(batches), "scores"),
        "fit pass": (lambda: [document_frequencies(head, *all_rows)], 1, "bucket counts"),
    }
    results = {}
    with torch.no_grad():
        for kind, (task, count, what) in work.items():
            seconds, answers = time_packings(task, packings, args.rounds)
            check_same(answers, what)
            unit = f"batch of {BATCH_ROWS} rows" if kind == "score" else f"pass over {len(rows):,} rows"
            results[kind] = speed_up_result(seconds, "plain", "hf_transformer", {"per": unit}, per=count)
            medians = results[kind]["median_ms"]
            print(f"{kind}: plain {medians['plain']:.2f} ms, hf_transformer {medians['hf_transformer']:.2f} ms "
                  f"a {unit}", flush=True)  # fmt: skip

    report = {"machine": machine_description(torch.device("cpu")), "threads": args.threads,
              "texts": args.texts or "made up", "rows": len(rows), "rounds": args.rounds,
              "results": results}  # fmt: skip
    intro = (
        f"The character n-gram score (1- to 4-grams, 2^22 buckets) with each packing of its characters, {args.threads} "
        f"thread(s), median of {args.rounds} alternated rounds (texts: {report['texts']}, {len(rows):,} rows; "
        f"{report['machine']}); the two packings' scores agree and their bucket counts are equal."
    )
    markdown = speed_up_report(intro, results, HEADINGS, "per", "plain", "hf_transformer")
    write_report(args.output, markdown, report)
    return report


if __name__ == "__main__":
    main()
