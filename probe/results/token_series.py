"""The per-token series of a run directory (docs/run-directory.md, "Per-token series"): the
values probe/metrics/token_series/ captured, quantised once, kept as tokens.json (what each
array is) and tokens.npz (the arrays), read back as the same codes. The viewer
(reports/viewer/) shows exactly these codes decoded, so a value on screen is the stored value.

Quantisation, by a series' kind (tokens.json `series.<name>.kind`):

    unit    uint8   value = code / 254 (0 .. 1, steps of 1/254); 255: no value
    cent    uint8   value = code / 100 (0 .. 1, steps of 0.01): the per-head series; 255: no value
    log     uint16  0: the value 0; 65535: no value; else value = exp(lo + (code - 1) * step),
                    step = (hi - lo) / 4093 (codes 1 .. 4094, 12 bits), lo / hi the natural logs
                    of the series' smallest and largest positive values: a relative error of at
                    most step / 2 (0.23% for a range of 8 decades)
    log8    uint8   the same in 8 bits: step = (hi - lo) / 253, codes 1 .. 254, 255: no value
                    (1.6% for SmolLM2's largest activations, 2.1 .. 10.2 in logs; the exact
                    largest ones are in massive_top.csv)
    index   uint16  value = code (a dimension); 65535: no value
    span    uint16  value = lo + code * (hi - lo) / 4093 (codes 0 .. 4093), lo / hi the series'
                    smallest and largest values: signed values (a GDN layer's SiLU(z)); 65535: no
                    value
    span8   uint8   the same in 8 bits: (hi - lo) / 253, codes 0 .. 253; 255: no value
    decay   uint16  a decay exp(g) in (0, 1], kept as d = -g = -ln(value) on the `log` kind's
                    scale: 0: d = 0 (value 1); else value = exp(-exp(lo + (code - 1) * step)),
                    lo / hi the natural logs of the smallest and largest positive d: a relative
                    error of at most step / 2 in d (so in the half-life ln 2 / d), which a
                    linear scale of the value would lose for decays near 1; 65535: no value
    decay8  uint8   the same in 8 bits (step = (hi - lo) / 253); 255: no value

The per-head series and the activations are the coarsest: they are what a viewer page of 16k
tokens x 30 layers carries most of (SmolLM2's first-token attention per head holds 6 bits of
entropy per value in steps of 0.01), and the page must stay under 5 MB.
A hybrid's per-head GDN series (gdn_beta_heads, gdn_gate_heads: span8; gdn_decay_heads: decay8;
gdn_key0_heads: share8) are 8-bit too, their head means 12-bit (span, decay, share); they
are still most of a hybrid's page (51% of the shipped trained hybrid's at 16,384 tokens), as a
value head's beta, decay and SiLU(z) change from token to token (docs/gdn.md, "Token by token").

numpy only (reports/ reads it without torch).
"""
from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.atomic import write_text, write_with
from .run_files import RunDirectoryError

HEADER_FILE = "tokens.json"
ARRAYS_FILE = "tokens.npz"
FORMAT = "probe token series 1"
KINDS = {"unit": np.uint8, "cent": np.uint8, "log": np.uint16, "log8": np.uint8, "index": np.uint16,
         "span": np.uint16, "span8": np.uint8, "decay": np.uint16, "decay8": np.uint8,
         "share": np.uint16, "share8": np.uint8}
NONE = {k: int(np.iinfo(t).max) for k, t in KINDS.items()}
STEPS = {"unit": 254, "cent": 100}          # linear kinds: value = code / steps
LOG_STEPS = {"log": 4093, "log8": 253, "decay": 4093, "decay8": 253,   # log kinds: steps between lo and hi
             "share": 4093, "share8": 253}
# Shares (share kinds: log kinds otherwise) below this are stored as 0: a GDN key-0 share decays
# geometrically with the query's distance and reaches 1e-40 within a few hundred tokens, which
# would stretch the log scale over dozens of decades nobody reads (coarser steps, a paler page).
SHARE_FLOOR = 1e-9
SPAN_STEPS = {"span": 4093, "span8": 253}   # value = lo + code * (hi - lo) / steps
DECAYS = ("decay", "decay8")                # log kinds of d = -ln(value)


def quantise(values: np.ndarray, kind: str) -> tuple[np.ndarray, dict]:
    """(codes, {lo, hi} for a log series) of float values; NaN becomes the kind's `no value`."""
    v = np.asarray(values, np.float64)
    missing = ~np.isfinite(v)
    if kind in STEPS:
        codes = np.rint(np.clip(np.nan_to_num(v), 0.0, 1.0) * STEPS[kind])
        return np.where(missing, NONE[kind], codes).astype(np.uint8), {}
    if kind == "index":
        return np.where(missing, NONE[kind], np.clip(np.nan_to_num(v), 0, 65534)).astype(np.uint16), {}
    if kind in SPAN_STEPS:
        finite = v[~missing]
        lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 0.0)
        scaled = (np.nan_to_num(v) - lo) / (hi - lo) * SPAN_STEPS[kind] if hi > lo else np.zeros_like(v)
        codes = np.rint(np.clip(scaled, 0, SPAN_STEPS[kind]))
        return np.where(missing, NONE[kind], codes).astype(KINDS[kind]), {"lo": lo, "hi": hi}
    if kind in ("share", "share8"):
        v = np.where(v < SHARE_FLOOR, 0.0, v)                 # NaN stays NaN (missing)
    if kind in DECAYS:
        # d = -ln(value) >= 0 on the log scale (a decay that underflowed to 0: the largest d).
        with np.errstate(divide="ignore"):
            d = -np.log(np.clip(np.nan_to_num(v, nan=1.0), np.finfo(np.float64).tiny, 1.0))
        v = np.where(missing, np.nan, d)
    positive = v[~missing & (v > 0)]
    lo, hi = (float(np.log(positive.min())), float(np.log(positive.max()))) if positive.size else (0.0, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        scaled = (np.log(v) - lo) / (hi - lo) * LOG_STEPS[kind] if hi > lo else np.zeros_like(v)
    codes = np.where(v > 0, 1 + np.rint(np.clip(np.nan_to_num(scaled), 0, LOG_STEPS[kind])), 0)
    return np.where(missing, NONE[kind], codes).astype(KINDS[kind]), {"lo": lo, "hi": hi}


def decode(codes: np.ndarray, kind: str, lo: float = 0.0, hi: float = 0.0) -> np.ndarray:
    """float64 values of `codes`, NaN where there is no value (the viewer's decode, in numpy)."""
    missing = np.asarray(codes) == NONE[kind]
    c = np.where(missing, 0, codes).astype(np.float64)      # the no-value code never reaches exp()
    if kind in STEPS:
        out = c / STEPS[kind]
    elif kind == "index":
        out = c.copy()
    elif kind in SPAN_STEPS:
        out = lo + c * ((hi - lo) / SPAN_STEPS[kind])
    else:
        out = np.where(c == 0, 0.0, np.exp(lo + (c - 1) * ((hi - lo) / LOG_STEPS[kind])))
        if kind in DECAYS:
            out = np.exp(-out)
    return np.where(missing, np.nan, out)


@dataclass
class TokenSeries:
    """The per-token series of one run: `header` (tokens.json) and `arrays` (tokens.npz:
    token_ids, positions and each series' codes)."""

    header: dict
    arrays: dict[str, np.ndarray]

    @classmethod
    def from_capture(cls, captured: dict, about: dict) -> "TokenSeries":
        """From TokenSeriesCapture.captured(): float series quantised; `about`: name ->
        (description, per head, kind), probe.metrics.token_series.SERIES."""
        series, arrays = {}, {"token_ids": np.asarray(captured["token_ids"], np.int64),
                              "positions": np.asarray(captured["positions"], np.int32)}
        for name, values in captured["series"].items():
            description, _, kind = about[name]
            codes, extra = quantise(values, kind)
            arrays[name] = codes
            series[name] = {"kind": kind, "shape": list(codes.shape), "about": description, **extra}
        header = {"format": FORMAT, "tokens": int(len(arrays["token_ids"])),
                  "rows": [[int(r), int(n)] for r, n in captured["rows"]],
                  "layer_types": list(captured["layer_types"]), "heads": int(captured["heads"]),
                  "texts": {str(k): v for k, v in sorted(captured["texts"].items())}, "series": series}
        return cls(header, arrays)

    # -- reading ---------------------------------------------------------------------------------
    @property
    def tokens(self) -> int:
        return int(self.header["tokens"])

    @property
    def names(self) -> list[str]:
        return list(self.header["series"])

    def values(self, name: str) -> np.ndarray:
        """The stored values of series `name`, decoded: (layers, [heads,] N) float64, NaN where
        none."""
        s = self.header["series"][name]
        return decode(self.arrays[name], s["kind"], s.get("lo", 0.0), s.get("hi", 0.0))

    def texts(self) -> list[str]:
        """Each token's text, in order."""
        table = self.header["texts"]
        return [table.get(str(int(t)), str(int(t))) for t in self.arrays["token_ids"]]

    def sequences(self) -> np.ndarray:
        """(N,) the dataset row of each token."""
        return np.repeat([r for r, _ in self.header["rows"]], [n for _, n in self.header["rows"]])

    # -- disk --------------------------------------------------------------------------------------
    def write(self, folder: Path) -> None:
        buffer = io.BytesIO()
        np.savez_compressed(buffer, **self.arrays)
        data = buffer.getbuffer()
        write_with(Path(folder) / ARRAYS_FILE, lambda f: f.write(data))
        write_text(Path(folder) / HEADER_FILE, json.dumps(_finite(self.header), indent=1) + "\n")

    @classmethod
    def read(cls, folder) -> "TokenSeries | None":
        """The series of a run directory, None when it has none; RunDirectoryError when they do
        not fit docs/run-directory.md."""
        folder = Path(folder)
        header_path, arrays_path = folder / HEADER_FILE, folder / ARRAYS_FILE
        if not header_path.is_file() and not arrays_path.is_file():
            return None
        damaged = "the run directory is damaged: write it again with probe analyze"
        if not header_path.is_file() or not arrays_path.is_file():
            missing = header_path if not header_path.is_file() else arrays_path
            raise RunDirectoryError(f"{missing} is missing (the per-token series need both {HEADER_FILE} "
                                    f"and {ARRAYS_FILE}); {damaged}")
        try:
            header = json.loads(header_path.read_text(encoding="utf-8"))
            with np.load(arrays_path, allow_pickle=False) as loaded:
                arrays = {name: loaded[name] for name in loaded.files}
        except (OSError, ValueError, UnicodeDecodeError) as err:
            raise RunDirectoryError(f"cannot read the per-token series of {folder} ({err}); {damaged}") from None
        _check(folder, header, arrays, damaged)
        return cls(header, arrays)


def _check(folder: Path, header, arrays: dict, damaged: str) -> None:
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise RunDirectoryError(f"{folder / HEADER_FILE} is not a {FORMAT!r} header; {damaged}")
    n = header.get("tokens")
    for name in ("token_ids", "positions"):
        if name not in arrays or arrays[name].shape != (n,):
            raise RunDirectoryError(f"{folder / ARRAYS_FILE}: {name} is missing or not of {n} tokens; {damaged}")
    for name, s in header.get("series", {}).items():
        codes = arrays.get(name)
        kind = s.get("kind") if isinstance(s, dict) else None
        if kind not in KINDS or codes is None or codes.dtype != KINDS[kind] or list(codes.shape) != s.get("shape") \
                or codes.shape[-1] != n:
            raise RunDirectoryError(f"{folder / ARRAYS_FILE}: series {name} does not match {HEADER_FILE} "
                                    f"(kind, dtype or shape); {damaged}")


def _finite(obj):
    """NaN / inf as null: strict JSON."""
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
