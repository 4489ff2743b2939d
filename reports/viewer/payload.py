"""What the viewer page carries: the runs' stored codes, concatenated (each array at a multiple of
4 bytes, little-endian; uint16 codes as a plane of high bytes then one of low bytes),
deflate-compressed (zlib) and written in base 85 (5 characters per 4 bytes: a quarter more than
the bytes, where base64 adds a third; the alphabet is printable ASCII without < > & ' " \\ ` $ ^,
so the text can neither end its <script> element nor start markup), and a JSON description of
them (names, decoding rules, offsets, token texts)."""
from __future__ import annotations

import json
import zlib

import numpy as np

from probe.core.errors import ProbeError, printable

MAX_RUNS = 2
ALPHABET = "".join(c for c in map(chr, range(0x21, 0x7F)) if c not in "<>&'\"\\`$^")   # 85 characters
NO_SERIES = ("has no per-token series (tokens.json); analyse it again with probe analyze "
             "(--token-series N, default 4096)")


def series_of(source) -> list[tuple[str, object]]:
    """[(run name, TokenSeries)] of run directories, analyses, a Runs, or (name, TokenSeries)
    pairs; a run without series is a ProbeError naming it."""
    from probe.reports.runs import Runs, load_runs
    from probe.results.token_series import TokenSeries

    if isinstance(source, tuple) and len(source) == 2 and isinstance(source[1], TokenSeries):
        return [source]
    if isinstance(source, list) and source and all(isinstance(s, tuple) for s in source):
        return [pair for s in source for pair in series_of(s)]
    runs = source if isinstance(source, Runs) else load_runs(source)
    out = []
    for model in runs.models:
        series = runs.token_series.get(model)
        if series is None:
            raise ProbeError(f"run {printable(model)!r} ({printable(runs.sources[model])}) {NO_SERIES}")
        out.append((model, series))
    return out


def check_same_tokens(pairs) -> None:
    """Runs side by side must hold the same token ids on the tokens they share."""
    (first, a), rest = pairs[0], pairs[1:]
    for name, b in rest:
        n = min(a.tokens, b.tokens)
        differ = np.nonzero(a.arrays["token_ids"][:n] != b.arrays["token_ids"][:n])[0]
        if len(differ):
            raise ProbeError(f"runs {printable(first)!r} and {printable(name)!r} differ at token {int(differ[0])} "
                             "(token ids): side by side needs runs of the same tokenizer on the same data")


def script_json(obj) -> str:
    """JSON safe inside <script>: ASCII only, with <, > and & escaped."""
    text = json.dumps(obj, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


class _Blob:
    def __init__(self):
        self.parts: list[bytes] = []
        self.size = 0

    def add(self, array: np.ndarray) -> dict:
        pad = -self.size % 4
        if pad:
            self.parts.append(b"\0" * pad)
            self.size += pad
        data = np.ascontiguousarray(array).ravel()
        if data.dtype.itemsize == 2:        # uint16 codes: the high bytes, then the low ones (deflate
            data = np.concatenate([(data >> 8).astype(np.uint8), (data & 255).astype(np.uint8)])  # packs them better)
        data = data.astype(data.dtype.newbyteorder("<"), copy=False).tobytes()
        where = {"offset": self.size, "length": int(array.size)}
        self.parts.append(data)
        self.size += len(data)
        return where


def base85(data: bytes) -> str:
    """`data` zero-padded to a multiple of 4 bytes, each big-endian 32-bit word as 5 digits of
    ALPHABET, most significant first (the page's unpack() reverses it)."""
    words = np.frombuffer(data + b"\0" * (-len(data) % 4), dtype=">u4").astype(np.uint64)
    digits = np.empty((len(words), 5), np.uint8)
    for place in range(4, -1, -1):
        digits[:, place] = words % 85
        words //= 85
    return np.frombuffer(ALPHABET.encode("ascii"), np.uint8)[digits].tobytes().decode("ascii")


def payload(source) -> tuple[str, str, list[str]]:
    """(the JSON description, the packed codes in base 85, the run names) of the viewer page."""
    pairs = series_of(source)
    if len(pairs) > MAX_RUNS:
        raise ProbeError(f"{len(pairs)} runs given; the viewer shows one run, or two side by side")
    check_same_tokens(pairs)
    blob, runs = _Blob(), []
    for name, series in pairs:
        ids = series.arrays["token_ids"]
        vocab, index = np.unique(ids, return_inverse=True)
        texts = series.header["texts"]
        described = {}
        for key, s in series.header["series"].items():
            described[key] = {"kind": s["kind"], "shape": s["shape"], "about": s.get("about", ""),
                              "lo": s.get("lo") or 0.0, "hi": s.get("hi") or 0.0,
                              **blob.add(series.arrays[key])}
        runs.append({"name": printable(name), "tokens": series.tokens, "rows": series.header["rows"],
                     "layer_types": series.header["layer_types"], "heads": series.header["heads"],
                     "vocab": [printable(texts.get(str(int(t)), str(int(t)))) for t in vocab],
                     "ids": [int(t) for t in vocab],
                     "token": blob.add(index.astype(np.uint32)),
                     "positions": blob.add(series.arrays["positions"].astype(np.int32)),
                     "series": described})
    packed = zlib.compress(b"".join(blob.parts), 9)
    return (script_json({"version": 1, "runs": runs, "packed": len(packed), "alphabet": ALPHABET}),
            base85(packed), [name for name, _ in pairs])
