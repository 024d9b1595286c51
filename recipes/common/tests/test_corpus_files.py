"""recipes.common.corpus_files: where a recipe's corpus files live, and fetching a missing one."""

import gzip
import hashlib
import io
import urllib.error
from pathlib import Path

import pytest

from recipes.common import corpus_files
from recipes.common.corpus_files import (
    DATA_DIR_ENV,
    CorpusFile,
    DataFileNotFoundError,
    ensure_corpus_file,
    resolve_data_dir,
)
from recipes.multi30k.data import load_multi30k
from recipes.nsmc.data import load_nsmc


def test_data_dir_comes_from_argument_then_environment_then_default(monkeypatch, tmp_path):
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "from-env"))
    assert resolve_data_dir(tmp_path / "given") == tmp_path / "given"
    assert resolve_data_dir() == tmp_path / "from-env"
    monkeypatch.delenv(DATA_DIR_ENV)
    assert resolve_data_dir() == Path("data")


def test_missing_corpus_offline_names_path_and_contents(tmp_path):
    with pytest.raises(DataFileNotFoundError) as caught:
        load_nsmc(tmp_path, download=False)
    message = str(caught.value)
    assert str(tmp_path / "nsmc" / "ratings_train.txt") in message
    assert "tab-separated id, document, label" in message
    assert "github.com/e9t/nsmc" in message and DATA_DIR_ENV in message
    assert not (tmp_path / "nsmc" / "ratings_train.txt").exists()


def test_offline_environment_turns_downloads_off(monkeypatch, tmp_path):
    def must_not_download(*args, **kwargs):
        raise AssertionError("downloaded while HF_DATASETS_OFFLINE is set")

    monkeypatch.setattr(corpus_files.urllib.request, "urlopen", must_not_download)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(DataFileNotFoundError, match="downloads are off"):
        load_multi30k(tmp_path)


def test_failed_download_says_why_and_where_the_file_goes(monkeypatch, tmp_path):
    def no_network(url, timeout):
        raise urllib.error.URLError("no route to host")

    monkeypatch.setattr(corpus_files.urllib.request, "urlopen", no_network)
    with pytest.raises(DataFileNotFoundError) as caught:
        load_multi30k(tmp_path, download=True)
    message = str(caught.value)
    assert "no route to host" in message
    assert str(tmp_path / "multi30k" / "train.en") in message and "gunzip" in message
    assert not (tmp_path / "multi30k").exists()  # no partial file left behind, nor the folder made for it
    (tmp_path / "multi30k").mkdir()
    with pytest.raises(DataFileNotFoundError):
        load_multi30k(tmp_path / "multi30k" / "..", download=True)
    assert (tmp_path / "multi30k").is_dir()  # a folder that was there is kept
    with pytest.raises(DataFileNotFoundError):
        load_multi30k(tmp_path / "new" / "data", download=True)
    assert not (tmp_path / "new").exists()


def test_download_gunzips_and_checks_the_sha256(monkeypatch, tmp_path):
    content = b"A man runs.\nTwo dogs play.\n"
    spec = CorpusFile(
        "multi30k/x.en",
        "test lines",
        "https://example.invalid/x.en.gz",
        hashlib.sha256(content).hexdigest(),
        gzipped=True,
    )
    monkeypatch.setattr(corpus_files.urllib.request, "urlopen", lambda url, timeout: io.BytesIO(gzip.compress(content)))
    path = ensure_corpus_file(spec, tmp_path, download=True)
    assert path.read_bytes() == content

    corrupted = CorpusFile(spec.relative_path.replace("x", "y"), "test lines", spec.url, "0" * 64, True)
    with pytest.raises(DataFileNotFoundError, match="sha256"):
        ensure_corpus_file(corrupted, tmp_path, download=True)
    assert not (tmp_path / "multi30k" / "y.en").exists()
