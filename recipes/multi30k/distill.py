"""Sequence-level knowledge distillation (Kim and Rush, 2016), the teacher's half: translate Multi30k's training
sources once with a teacher and keep the translations, for a student to train on.

    python -m recipes.multi30k.distill --teacher runs/m30k-en-de-ensemble --output_dir runs/distilled-en-de \
        --data_dir ../shared/data --source_lang en --target_lang de --num_beams 5 --batch_size 64
    python -m recipes.multi30k.train --distilled_targets runs/distilled-en-de --distillation_mix both ...

The teacher is a model folder, several (decoded as their ensemble, :mod:`hf_transformer.ensemble`), an ensemble
folder ``recipes.multi30k.evaluate`` wrote (its members, and the length penalty its scoring chose on validation unless
``--length_penalty`` is given), or a reranking's folder ``recipes.multi30k.rerank`` wrote: then each source's n-best
list from its forward models is rescored with its channel models and the setting its validation grid chose (channel
weight and length exponent, or MBR), as that step chose its test outputs. Decoding is beam search over sentences
batched by length, with progress; it runs on ``--device`` (a GPU decodes it many times faster where there is one)
and on ``--engine`` (torch, or CTranslate2 for one model: many times faster on a CPU). A reranking decodes on the
engine it was run with (recipes.multi30k.rerank --engine), whose scores chose its setting.

The output folder holds ``train.<target>`` (one translation per training source, line for line) and
``distillation.json``: what was decoded (the direction, the training sources' count and SHA-256), by which teacher
(each member's folder and the SHA-256 of its weights, a reranking's channel models too) and how (beam size, length
penalty, length limit, a reranking's chosen setting), and the time it took: each run of the step as a session (host,
device, sentences translated, seconds, sentences a second; updated after every chunk) and their total. The
translations are appended chunk by chunk as they finish: a run stopped part way continues where it stopped, on this
machine or another; a folder decoded from other sources, by another teacher or with other settings is refused, naming
what differs, and a finished one is reused as it is.
"""

from __future__ import annotations

import hashlib
import json
import logging
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from transformers import HfArgumentParser

from hf_transformer.commands import parse_arguments, run_command
from recipes.multi30k.data import DataArguments
from recipes.multi30k.rerank import ENGINE_DEFAULTS, load, model_folders, recorded_setting, weights_sha256
from recipes.multi30k.reranking import candidates, mbr_utilities, rerank, score_both_ways
from recipes.multi30k.scoring import check_direction

logger = logging.getLogger("recipes.multi30k.distill")

RECORD_FILE = "distillation.json"
# What must be equal, with the teacher's weights, for a folder's translations to be reused or continued (the rest of
# the record is its history).
DECODING_KEYS = (
    "source_lang",
    "target_lang",
    "sources",
    "sources_sha256",
    "num_beams",
    "length_penalty",
    "max_new_tokens",
    "reranking",
    "engine",
    "quantization",
)
# The setting a reranking's folder (recipes.multi30k.rerank's results.json) records as chosen on validation.
RERANKING_KEYS = ("channel_weight", "length_exponent", "mbr_scale")


@dataclass
class DistillArguments:
    teacher: list[str] = field(
        metadata={
            "help": "model folders (one, or several decoded as their ensemble), an ensemble folder, or a reranking's "
            "folder (recipes.multi30k.rerank: its n-best lists rescored with its channel and chosen setting)"
        }
    )
    output_dir: str = field(metadata={"help": "where train.<target> and distillation.json go (or are continued)"})
    num_beams: int | None = field(
        default=None,
        metadata={"help": "beam size of the teacher's decoding (default 5; a reranking's: its n-best size)"},
    )
    length_penalty: float | None = field(
        default=None,
        metadata={"help": "beam search's length penalty (default: the ensemble folder's choice, else the teacher's)"},
    )
    max_new_tokens: int | None = field(
        default=None, metadata={"help": "length limit of a translation (default: the teacher's own rule)"}
    )
    batch_size: int = field(default=64, metadata={"help": "sentences per decoding batch"})
    chunk_size: int = field(
        default=2048, metadata={"help": "sentences decoded between two appends to the output (the most a stop loses)"}
    )
    device: str = field(default="cpu", metadata={"help": "cpu, cuda, ..."})
    engine: str | None = field(
        default=None,
        metadata={
            "help": "torch or ctranslate2 (one model, converted on loading; many times faster on a CPU); default: a "
            "reranking's own (the engine whose scores chose its setting), else torch"
        },
    )
    quantization: str | None = field(
        default=None, metadata={"help": "with --engine ctranslate2: int8 and the like (default: a reranking's own)"}
    )


def sha256_text(lines: list[str]) -> str:
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()


@dataclass
class Teacher:
    """The folders that translate: the forward members and, for a reranking, the channel's and its chosen setting."""

    members: list[str]
    length_penalty: float | None = None
    channel: list[str] = field(default_factory=list)
    reranking: dict | None = None  # RERANKING_KEYS and num_candidates, for a reranking's folder
    engine: str = "torch"  # a reranking's: the engine whose scores its setting was chosen on
    quantization: str | None = None


def find_teacher(folders: list[str]) -> Teacher:
    """The teacher ``--teacher`` names: a reranking's folder (results.json with channel models and the chosen
    setting, no config.json), else model folders or ensemble folders (recipes.multi30k.rerank.model_folders)."""
    recorded = Path(folders[0]) / "results.json"
    if len(folders) == 1 and not (Path(folders[0]) / "config.json").is_file() and recorded.is_file():
        scored = json.loads(recorded.read_text(encoding="utf-8"))
        if "channel_models" in scored:
            missing = [
                key for key in ("models", "num_candidates", "length_penalty", *RERANKING_KEYS) if key not in scored
            ]
            if missing:
                raise ValueError(f"teacher {folders[0]}: its reranking record lacks {', '.join(missing)}")
            members, _ = model_folders(scored["models"])
            channel, _ = model_folders(scored["channel_models"])
            reranking = {key: scored[key] for key in (*RERANKING_KEYS, "num_candidates")}
            engine = {key: recorded_setting(scored, key) for key in ENGINE_DEFAULTS}
            return Teacher(members, scored["length_penalty"], channel, reranking, **engine)
    members, length_penalty = model_folders(folders)
    return Teacher(members, length_penalty)


def member_records(folders: list[str]) -> list[dict]:
    return [{"folder": str(Path(m).resolve()), "weights_sha256": weights_sha256(m)} for m in folders]


def decoding_record(args: DistillArguments, data_args: DataArguments, sources: list[str]) -> tuple[dict, Teacher]:
    """What this run decodes, by which teacher and how; and the teacher's folders."""
    teacher = find_teacher(args.teacher)
    source, target = data_args.source_lang, data_args.target_lang
    check_direction([*args.teacher, *teacher.members], source, target, "--teacher")
    check_direction(teacher.channel, target, source, "the reranking's channel model")
    length_penalty = args.length_penalty if args.length_penalty is not None else teacher.length_penalty
    num_beams = args.num_beams
    if teacher.reranking is not None:
        if num_beams not in (None, teacher.reranking["num_candidates"]):
            raise ValueError(
                f"--num_beams {num_beams}: the reranking {args.teacher[0]} chose among "
                f"{teacher.reranking['num_candidates']}-best lists (leave --num_beams out)"
            )
        num_beams = teacher.reranking["num_candidates"]
        chosen_on = teacher.length_penalty  # the reranking's n-best lists were decoded with it
        if args.length_penalty is not None and chosen_on is not None and args.length_penalty != chosen_on:
            raise ValueError(
                f"--length_penalty {args.length_penalty}: the reranking {args.teacher[0]} chose among n-best lists "
                f"decoded with length penalty {chosen_on} (leave --length_penalty out)"
            )
        for key in ENGINE_DEFAULTS:  # its setting was chosen on these scores
            given, own = getattr(args, key), getattr(teacher, key)
            if given is not None and given != own:
                raise ValueError(
                    f"--{key} {given}: the reranking {args.teacher[0]} chose its setting on {key} {own!r}'s scores "
                    f"(leave --{key} out)"
                )
    engine = args.engine or teacher.engine
    quantization = args.quantization if args.quantization is not None else teacher.quantization
    if engine == "torch" and quantization is not None:
        raise ValueError(f"--quantization {quantization} applies to --engine ctranslate2")
    record = {
        "source_lang": data_args.source_lang,
        "target_lang": data_args.target_lang,
        "sources": len(sources),
        "sources_sha256": sha256_text(sources),
        "teacher": member_records(teacher.members),
        "num_beams": 5 if num_beams is None else num_beams,
        "length_penalty": length_penalty,
        "max_new_tokens": args.max_new_tokens,
        "reranking": teacher.reranking,
        "engine": engine,
        "quantization": quantization,
    }
    if teacher.channel:
        record["channel"] = member_records(teacher.channel)
    return record, teacher


def check_reusable(saved: dict, record: dict, output_dir: Path) -> None:
    """Refuse a folder whose translations came from other sources, another teacher or other settings."""
    differing = [
        f"{key} {recorded_setting(saved, key)!r} there, {record[key]!r} here"
        for key in DECODING_KEYS
        if recorded_setting(saved, key) != record[key]
    ]

    def weights(found: dict) -> list:  # the teacher's folders may have moved since: its weights decide
        return [member.get("weights_sha256") for part in ("teacher", "channel") for member in found.get(part) or []]

    if weights(saved) != weights(record):
        differing.append("the teacher's weights differ")
    if differing:
        raise ValueError(
            f"{output_dir} holds translations decoded otherwise ({'; '.join(differing)}): give another --output_dir"
        )


def saved_record(output_dir: Path, record: dict) -> dict | None:
    """The record of an earlier run in ``output_dir`` (None if none), checked against this run's."""
    record_path = output_dir / RECORD_FILE
    if not record_path.is_file():
        # A translation file no record accounts for is not this step's (a corpus's own train.<lang>, say): kept.
        output = f"train.{record['target_lang']}"
        unrecorded = [name for name in (output, f"{output}.partial") if (output_dir / name).exists()]
        if unrecorded:
            raise ValueError(
                f"{output_dir} holds {unrecorded[0]} but no {RECORD_FILE}: it is no distillation's, and this one would "
                "write over it; give another --output_dir"
            )
        return None
    saved = json.loads(record_path.read_text(encoding="utf-8"))
    check_reusable(saved, record, output_dir)
    return saved


def one_line(text: str) -> str:
    """A translation on one line of the output file, whatever line breaks the model wrote."""
    return " ".join(text.splitlines()).strip()


def load_translator(teacher: Teacher, record: dict, args: DistillArguments) -> Callable[[list[str]], list[str]]:
    """Sources -> the teacher's translations: beam search (``record``'s settings), or for a reranking its n-best
    lists rescored with the channel and the chosen setting."""

    loading = (args.batch_size, args.device, record["engine"], record["quantization"])
    forward = load(teacher.members, *loading)
    options = {"num_beams": record["num_beams"], "length_penalty": record["length_penalty"]}
    options["max_new_tokens"] = record["max_new_tokens"]
    if teacher.reranking is None:
        return lambda sources: forward.translate(sources, **options)
    channel = load(teacher.channel, *loading)
    chosen = {key: teacher.reranking[key] for key in RERANKING_KEYS}

    def translate(sources: list[str]) -> list[str]:
        nbest = candidates(forward, sources, record["num_beams"], **options)
        forward_scores, channel_scores = score_both_ways(forward, channel, sources, nbest)
        utilities = mbr_utilities(nbest) if chosen["mbr_scale"] is not None else None
        return rerank(nbest, forward_scores, channel_scores, **chosen, utilities=utilities)

    return translate


def write_record(path: Path, record: dict) -> None:
    """``record`` with its total decoding time (the sum of its sessions') in ``path``."""
    record["seconds"] = round(sum(session["seconds"] for session in record.get("sessions", [])), 2)
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def distill(translate, sources: list[str], record: dict, output_dir: Path, args: DistillArguments) -> list[str]:
    """The teacher's translation of every source: read from ``output_dir`` where finished, else decoded from where
    an earlier run stopped, chunk by chunk, each chunk appended as it finishes."""
    output_dir.mkdir(parents=True, exist_ok=True)
    record_path = output_dir / RECORD_FILE
    output = output_dir / f"train.{record['target_lang']}"
    partial = output.with_name(output.name + ".partial")
    saved = saved_record(output_dir, record)
    if saved:
        if saved.get("finished") and output.is_file():
            lines = output.read_text(encoding="utf-8").split("\n")[:-1]
            if len(lines) == len(sources):
                logger.info("reusing the %d translations in %s", len(lines), output)
                return lines
        record = saved | record  # keeps the sessions already run
        if "sessions" not in saved and saved.get("seconds"):  # a record written before sessions were kept
            record["sessions"] = [{"host": None, "device": None, "translated": None, "seconds": saved["seconds"]}]
    record["finished"] = False
    done = partial.read_text(encoding="utf-8").split("\n")[:-1] if partial.is_file() else []
    if partial.is_file():  # a line cut off by the stop is dropped, not glued to the next translation
        partial.write_text("".join(line + "\n" for line in done), encoding="utf-8")
    if done:
        logger.info("continuing after the %d translations already in %s", len(done), partial)
    # Each run of the step is a session of its own (a stopped run may be continued on another machine and device),
    # recorded after every chunk so that a stop keeps its time.
    session = {"host": platform.node(), "device": args.device, "translated": 0, "seconds": 0.0}
    record["sessions"] = [*record.get("sessions", []), session]
    write_record(record_path, record)
    started, first = time.time(), len(done)
    with open(partial, "a", encoding="utf-8") as stream:
        for start in range(len(done), len(sources), args.chunk_size):
            chunk = sources[start : start + args.chunk_size]
            translations = [one_line(t) for t in translate(chunk)]
            stream.write("".join(t + "\n" for t in translations))
            stream.flush()
            done += translations
            elapsed = time.time() - started
            session.update(translated=len(done) - first, seconds=round(elapsed, 2))
            rate = session["translated"] / elapsed
            session["sentences_per_second"] = round(rate, 2)
            write_record(record_path, record)
            left = (len(sources) - len(done)) / rate
            logger.info("translated %d/%d sources, %.1f a second, %.0f s to go", len(done), len(sources), rate, left)
    partial.replace(output)
    record["finished"] = True
    write_record(record_path, record)
    return done


MIXES = ("replace", "both")


def with_distilled_targets(train, folders, source_lang: str, target_lang: str, mix: str):
    """The student's training pairs: each training source with the teacher's translation (``mix="replace"``), or
    the original pairs followed by those (``"both"``). ``folders``: one folder this step wrote, or several (teachers
    of one direction): each adds its own translation of every source. A source a teacher left untranslated keeps no
    pair of that teacher. Refused, naming the folder and the reason, when a folder's translations are not of these
    sources in this direction."""
    from datasets import Dataset

    if mix not in MIXES:
        raise ValueError(f"--distillation_mix must be one of {', '.join(MIXES)}, got {mix!r}")
    pairs = train["translation"]
    sources = [pair[source_lang] for pair in pairs]
    folders = [folders] if isinstance(folders, (str, Path)) else list(folders)
    if not folders:
        raise ValueError("--distilled_targets: no folder given")
    distilled = []
    for folder in folders:
        translations = _teacher_translations(Path(folder), sources, source_lang, target_lang)
        distilled += [
            {source_lang: source, target_lang: translation}
            for source, translation in zip(sources, translations)
            if translation.strip()
        ]
    rows = distilled if mix == "replace" else list(pairs) + distilled
    logger.info("training pairs: %d (%s; %d teacher translations)", len(rows), mix, len(distilled))
    return Dataset.from_dict({"translation": rows})


def _teacher_translations(folder: Path, sources: list[str], source_lang: str, target_lang: str) -> list[str]:
    """The finished translations of ``sources`` a distillation folder holds, line for line."""
    record_path = folder / RECORD_FILE
    if not record_path.is_file():
        raise FileNotFoundError(f"--distilled_targets {folder}: no {RECORD_FILE} (python -m recipes.multi30k.distill)")
    record = json.loads(record_path.read_text(encoding="utf-8"))
    if (record["source_lang"], record["target_lang"]) != (source_lang, target_lang):
        raise ValueError(
            f"--distilled_targets {folder} translates {record['source_lang']} -> {record['target_lang']}, "
            f"not {source_lang} -> {target_lang}"
        )
    if not record.get("finished"):
        raise ValueError(f"--distilled_targets {folder}: its decoding has not finished (run the distill step again)")
    if record["sources_sha256"] != sha256_text(sources):
        raise ValueError(
            f"--distilled_targets {folder} holds translations of {record['sources']} other sources than these "
            f"{len(sources)} training sources (another --max_train_samples or another data folder?)"
        )
    translations = (folder / f"train.{target_lang}").read_text(encoding="utf-8").split("\n")[:-1]
    if len(translations) != len(sources):
        raise ValueError(f"--distilled_targets {folder}: {len(translations)} translations for {len(sources)} sources")
    return translations


def main(argv: list[str] | None = None) -> dict:
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    args, data_args = parse_arguments(HfArgumentParser((DistillArguments, DataArguments)), argv)
    if (args.num_beams is not None and args.num_beams < 1) or args.batch_size < 1 or args.chunk_size < 1:
        raise ValueError("--num_beams, --batch_size and --chunk_size must be 1 or more")
    sources = [pair[data_args.source_lang] for pair in data_args.splits()["train"]["translation"]]
    record, teacher = decoding_record(args, data_args, sources)
    saved_record(Path(args.output_dir), record)  # refused before the teacher is loaded
    translate = load_translator(teacher, record, args)
    channel = f", reranked with {', '.join(teacher.channel)} ({teacher.reranking})" if teacher.channel else ""
    logger.info("teacher: %s%s; %d training sources to translate", ", ".join(teacher.members), channel, len(sources))
    distill(translate, sources, record, Path(args.output_dir), args)
    return json.loads((Path(args.output_dir) / RECORD_FILE).read_text(encoding="utf-8"))


if __name__ == "__main__":
    run_command(main)
