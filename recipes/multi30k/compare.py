"""Whether one Multi30k translation output is better than another beyond chance: paired bootstrap resampling of
BLEU (`hf_transformer.metrics.paired_bootstrap`, sacreBLEU's), both ways Multi30k is scored.

    python -m recipes.multi30k.compare recipes/multi30k/records/outputs/m30k-en-de-linear-ens2-rerank.test.de \\
        recipes/multi30k/records/outputs/m30k-en-de-linear-ens3-gpu-rerank20-mbr.test.de --data_dir ../shared/data \\
        --target_lang de

The first output is the baseline; each other output gets its BLEU, the 95% confidence interval of its mean over
the resamplings, and the p-value of its difference from the baseline, in cased detokenised BLEU (`bleu`) and on the
lowercased Moses-tokenised references (`bleu_lc_tok`). A table goes to the terminal; `--output FILE` writes the
figures as JSON. The outputs are one detokenised sentence per line in the split's order, as
`test_predictions.txt` of every translation run (and recipes/multi30k/records/outputs/) holds them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hf_transformer.commands import run_command
from hf_transformer.data import read_sentence_lines
from hf_transformer.folders import check_output_file
from hf_transformer.metrics import paired_bootstrap, require_scorers
from recipes.common.corpus_files import ensure_corpus_file
from recipes.multi30k.bleu import SCORERS, paired_bootstrap_lc_tok
from recipes.multi30k.data import MULTI30K_FILES, MULTI30K_SPLITS, load_multi30k_tok_references

SPLITS = ("test", "validation")


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("outputs", nargs="+", help="translation output files; the first is the baseline")
    parser.add_argument("--data_dir", required=True, help="the folder holding multi30k/")
    parser.add_argument("--target_lang", required=True, choices=("en", "de"), help="the outputs' language")
    parser.add_argument("--split", default="test", choices=SPLITS, help="test (test2016) or validation")
    parser.add_argument("--samples", type=int, default=1000, help="bootstrap resamplings")
    parser.add_argument("--output", help="a JSON file for the figures")
    return parser


def compare(
    outputs: list[str], data_dir: str, target_lang: str, split: str = "test", samples: int = 1000
) -> dict[str, list[dict]]:
    """{"bleu": records, "bleu_lc_tok": records}, each ``paired_bootstrap``'s records with the files as names."""
    if len(outputs) < 2:
        raise ValueError("give at least two outputs: the baseline, then the systems compared with it")
    if len(set(outputs)) != len(outputs):
        raise ValueError(f"an output is given twice: {outputs}")
    require_scorers(SCORERS)
    reference_file = MULTI30K_FILES[f"{MULTI30K_SPLITS[split]}.{target_lang}"]
    references = read_sentence_lines(ensure_corpus_file(reference_file, data_dir, download=False))
    systems = {output: read_sentence_lines(output) for output in outputs}
    return {
        "bleu": paired_bootstrap(systems, references, samples=samples),
        "bleu_lc_tok": paired_bootstrap_lc_tok(
            systems,
            load_multi30k_tok_references(split, target_lang, data_dir, download=False),
            target_lang,
            samples=samples,
        ),
    }


def table(figures: dict[str, list[dict]]) -> str:
    lines = ["| output | metric | BLEU | mean ± 95% | p (vs the first) |", "|---|---|---|---|---|"]
    for metric, records in figures.items():
        for record in records:
            p_value = "baseline" if record["p_value"] is None else f"{record['p_value']:.4f}"
            lines.append(
                f"| {record['name']} | {metric} | {record['score']:.2f} | {record['mean']:.2f} ± {record['ci']:.2f} "
                f"| {p_value} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, list[dict]]:
    args = argument_parser().parse_args(argv)
    if args.output:
        check_output_file(args.output, inputs=args.outputs)  # before the resampling, which takes a while
    try:
        figures = compare(args.outputs, args.data_dir, args.target_lang, args.split, args.samples)
    except (ValueError, FileNotFoundError) as error:
        sys.exit(f"recipes.multi30k.compare: {error}")
    print(table(figures))
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return figures


if __name__ == "__main__":
    run_command(main)
