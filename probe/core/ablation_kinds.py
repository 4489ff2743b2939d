"""The sink ablations a user can ask for (`--ablate SPEC`), read and checked without torch (the
options check a spec before anything is loaded; probe/run/ablations.py runs them).

A spec is terms separated by spaces (or by ';' when a term holds a space):

    all                        windows=64,256,1024 sinks=0,1,4 key0 value0 first=remove massive=zero,mean
    windows=64,256,1024        a sliding window of W keys over every query ...
    sinks=0,1,4                ... plus the first k keys (StreamingLLM's "k sinks + W recent")
    key0                       key 0 masked for every query t >= 1, the softmax renormalised
    value0                     key 0's value zeroed, its attention kept
    first=remove,bos,replace:TOKEN   the first token removed (the sequence shifted), a BOS
                               prepended, the first token replaced by TOKEN (text that is one
                               token, or id:N; last in the list: the rest of the term is the token)
    massive=zero,mean          massive activations set to zero / to their mean over the data, in
                               the layer where they first appear and in every layer
    layers=all | 0,3           the layers the masks (windows, key0, value0) apply to
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

from .errors import ProbeError, flag

ALL_SPEC = "windows=64,256,1024 sinks=0,1,4 key0 value0 first=remove massive=zero,mean"
FIRST_KINDS = ("remove", "bos", "replace")
MASSIVE_KINDS = ("zero", "mean")
ALL_LAYERS = -1          # the `layer` of an ablation applied in every (attention) layer at once


@dataclass(frozen=True)
class Ablation:
    kind: str                   # window, key0_mask, key0_value, first_remove, first_bos, first_replace,
                                # massive_zero, massive_mean
    window: int | None = None
    sinks: int = 0
    token: str | None = None    # first_replace: the token, as the user wrote it
    scope: str = "all"          # massive: "first" (the layer where they appear) or "all"

    @property
    def label(self) -> str:
        """The row's name in ablations.csv and the report."""
        if self.kind == "window":
            return f"window {self.window}" + (f" + {self.sinks} sink{'s' * (self.sinks != 1)}" if self.sinks else "")
        if self.kind == "first_replace":
            return f"first token -> {self.token!r}"
        if self.kind.startswith("massive"):
            what = "zeroed" if self.kind == "massive_zero" else "at their mean"
            return f"massive {what} ({'every layer' if self.scope == 'all' else 'where they appear'})"
        return {"key0_mask": "key 0 masked", "key0_value": "key 0 value zeroed",
                "first_remove": "first token removed", "first_bos": "BOS prepended"}[self.kind]

    @property
    def masks(self) -> bool:
        return self.kind in ("window", "key0_mask", "key0_value")


@dataclass(frozen=True)
class AblationPlan:
    ablations: tuple[Ablation, ...]
    layers: tuple[int, ...] | None = None   # the layers masks apply to; None: every attention layer


def _ints(name: str, text: str, minimum: int) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ProbeError(f"{flag('ablate')}: {name}= takes a comma list of integers (got {text!r})") from None
    if not values or min(values) < minimum:
        raise ProbeError(f"{flag('ablate')}: {name}= needs integers of at least {minimum} (got {text!r})")
    return sorted(set(values))


def parse_plan(spec, seq_len=None, *, warn: bool = True) -> AblationPlan:
    """Read a spec (above); seq_len (int or a list of lengths) lets windows be checked against it:
    a window given that is not shorter than the sequences is refused (it masks nothing), one of
    the default set (`all`, a bare --ablate) is left out, with a warning where `warn` (the checks
    that read a spec before the run pass False: the run says it once)."""
    if spec is True or spec == "all":
        spec = ALL_SPEC
    if not isinstance(spec, str) or not spec.strip():
        raise ProbeError(f"{flag('ablate')} needs a spec such as 'windows=64,256 sinks=0,4 key0' (or all)")
    terms = [t.strip() for t in (spec.split(";") if ";" in spec else spec.split()) if t.strip()]
    windows, sinks, out, layers = None, [0], [], None
    seen: set[str] = set()
    for term in terms:
        key, _, value = term.partition("=")
        if term == "all":
            spec = ALL_SPEC + "".join(f" {t}" for t in terms if t.startswith("layers="))
            return parse_plan(spec, seq_len, warn=warn)
        if key in ("windows", "sinks", "layers") and value:
            if key in seen:         # a second windows= replaced the first without a word
                raise ProbeError(f"{flag('ablate')}: {key}= is given twice; give its values once, comma-separated "
                                 f"({key}=4,8)")
            seen.add(key)
        if key == "windows":
            windows = _ints("windows", value, 1)
        elif key == "sinks":
            sinks = _ints("sinks", value, 0)
        elif term == "key0":
            out.append(Ablation("key0_mask"))
        elif term == "value0":
            out.append(Ablation("key0_value"))
        elif key == "first":
            out += _first(value)
        elif key == "massive":
            kinds = [k.strip() for k in value.split(",") if k.strip()]
            if not kinds or set(kinds) - set(MASSIVE_KINDS):
                raise ProbeError(f"{flag('ablate')}: massive= takes zero and/or mean (got {value!r})")
            out += [Ablation(f"massive_{k}", scope=s) for k in MASSIVE_KINDS if k in kinds for s in ("first", "all")]
        elif key == "layers":
            layers = None if value == "all" else tuple(_ints("layers", value, 0))
        else:
            raise ProbeError(f"{flag('ablate')}: unknown term {term!r}; use windows=, sinks=, key0, value0, "
                             "first=, massive=, layers= or all")
    longest = max(seq_len) if isinstance(seq_len, (list, tuple)) and seq_len else seq_len
    if spec.startswith(ALL_SPEC) and isinstance(longest, int) and windows and max(windows) >= longest:
        # The default set is written for long sequences: at the default --seq-len 512 its 1024-key
        # window masks nothing, and refusing it refused the documented `--ablate` itself.
        kept = [w for w in windows if w < longest]
        if warn:
            warnings.warn(f"{flag('ablate', 'all')}: window{'s' * (len(windows) - len(kept) > 1)} "
                          f"{', '.join(str(w) for w in windows if w >= longest)} left out, not shorter than "
                          f"the {longest}-token sequences ({flag('seq_len')})")
        windows, sinks = (kept, sinks) if kept else (None, [0])
    if windows is None and sinks != [0]:
        raise ProbeError(f"{flag('ablate')}: sinks= needs windows= (k sinks + W recent keys)")
    masks = []
    for w in windows or ():
        for k in sinks:
            if k > w:
                raise ProbeError(f"{flag('ablate')}: {k} sinks exceed the window of {w} keys; use k <= W")
            masks.append(Ablation("window", window=w, sinks=k))
    out = masks + out
    if isinstance(longest, int) and windows and max(windows) >= longest:
        raise ProbeError(f"{flag('ablate')}: a window of {max(windows)} keys is not shorter than the "
                         f"{longest}-token sequences ({flag('seq_len')}), so it masks nothing; use windows below it")
    if not out:
        raise ProbeError(f"{flag('ablate')}: the spec {spec!r} names no ablation")
    return AblationPlan(tuple(sorted(set(out), key=out.index)), layers)


def _first(value: str) -> list[Ablation]:
    out = []
    rest = value
    while rest:
        item, sep, tail = rest.partition(",")
        if item.startswith("replace:"):
            token = rest[len("replace:"):].encode().decode("unicode_escape")   # \n, \t as escapes
            if not token:
                raise ProbeError(f"{flag('ablate')}: first=replace: needs a token, e.g. replace:the or replace:id:13")
            out.append(Ablation("first_replace", token=token))
            break
        if item not in ("remove", "bos"):
            raise ProbeError(f"{flag('ablate')}: first= takes remove, bos and replace:TOKEN (got {item!r})")
        out.append(Ablation("first_remove" if item == "remove" else "first_bos"))
        rest = tail if sep else ""
    return out
