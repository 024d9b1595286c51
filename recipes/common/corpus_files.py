"""Where a recipe's corpus files live, and fetching a missing one from its public source.

The data directory is the ``data_dir`` argument, else the environment variable ``HF_TRANSFORMER_DATA``, else
``./data``. A missing file is downloaded from its public source (a pinned commit, sha256 checked) unless downloads
are off (``download=False``, or ``HF_DATASETS_OFFLINE`` / ``HF_HUB_OFFLINE`` set); then the error names the path and
what belongs there.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

DATA_DIR_ENV = "HF_TRANSFORMER_DATA"
DEFAULT_DATA_DIR = "data"
_OFFLINE_ENV = ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")


class DataFileNotFoundError(FileNotFoundError):
    """A corpus file is missing and could not be downloaded."""


@dataclass(frozen=True)
class CorpusFile:
    """One file of a public corpus: where it goes under the data directory and where it comes from."""

    relative_path: str
    description: str
    url: str
    sha256: str
    gzipped: bool = False


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """The data directory: the argument, else `$HF_TRANSFORMER_DATA`, else `./data`."""
    if data_dir is not None:
        return Path(data_dir)
    return Path(os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR)


def downloads_allowed(download: bool | None = None) -> bool:
    """`download` when given; otherwise yes unless `HF_DATASETS_OFFLINE` or `HF_HUB_OFFLINE` is set."""
    if download is not None:
        return download
    return not any(os.environ.get(name, "").upper() in {"1", "ON", "YES", "TRUE"} for name in _OFFLINE_ENV)


def file_sha256(path: Path) -> str:
    """The sha256 of a file's bytes, read in blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def download_file(
    url: str,
    destination: str | os.PathLike,
    *,
    sha256: str | None = None,
    gzipped: bool = False,
    timeout: float = 60.0,
) -> Path:
    """Fetch `url` to `destination` (gunzipped when `gzipped`), checking the sha256 of the result.

    The file appears only when complete and verified, so an interrupted download leaves nothing behind: neither a
    partial file nor the folders made for it.
    """
    destination = Path(destination)
    made = [folder for folder in (destination.parent, *destination.parent.parents) if not folder.exists()]
    destination.parent.mkdir(parents=True, exist_ok=True)
    handle, partial_name = tempfile.mkstemp(dir=destination.parent, prefix=f".{destination.name}.", suffix=".part")
    partial = Path(partial_name)
    try:
        try:
            with os.fdopen(handle, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as response:
                source = gzip.GzipFile(fileobj=response) if gzipped else response
                shutil.copyfileobj(source, out)
            if sha256 is not None:
                actual = file_sha256(partial)
                if actual != sha256:
                    raise ValueError(f"{url} gave a file with sha256 {actual}, expected {sha256}")
            partial.replace(destination)
        finally:
            partial.unlink(missing_ok=True)
    except BaseException:
        for folder in made:  # innermost first; one another process has filled since is kept
            try:
                folder.rmdir()
            except OSError:
                break
        raise
    return destination


def ensure_corpus_file(
    spec: CorpusFile, data_dir: str | os.PathLike | None = None, *, download: bool | None = None
) -> Path:
    """The path of a corpus file, downloading it first when it is missing and downloads are allowed."""
    root = resolve_data_dir(data_dir)
    path = root / spec.relative_path
    if path.is_file():
        return path
    if downloads_allowed(download):
        logger.warning("%s is missing; downloading it from %s", path, spec.url)
        try:
            return download_file(spec.url, path, sha256=spec.sha256, gzipped=spec.gzipped)
        except (OSError, ValueError, EOFError, urllib.error.URLError) as error:
            reason = f"downloading it from {spec.url} failed: {error}"
    else:
        reason = "downloads are off (download=False, or HF_DATASETS_OFFLINE / HF_HUB_OFFLINE is set)"
    gz_note = " (the source file is gzipped: gunzip it)" if spec.gzipped else ""
    raise DataFileNotFoundError(
        f"{path} not found, and {reason}.\n"
        f"It should hold: {spec.description}.\n"
        f"Get it from {spec.url}{gz_note} and put it at {path}, or point the data directory elsewhere "
        f"(the data_dir / --data-dir argument or the {DATA_DIR_ENV} environment variable; "
        f"now {root.resolve()})."
    )
