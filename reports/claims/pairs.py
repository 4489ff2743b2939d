"""Which baseline a gated model may be compared with: a matched pair, or "not comparable" and why.

A verdict on what the gate does needs the gated model beside its own baseline, on the same token
ids. A pair is matched when both runs saw the same token ids (meta.json tokens_sha256) and
  - they are arms of one `probe train` run (meta.json train_recipe equal but for the arm, and
    both arms of one matched set: the Qwen3 arms, or the hybrid arms), or
  - the gated model was grafted onto the baseline (`probe graft`: meta.json graft.base_digest is
    the baseline's config_hash, or graft.base its checkpoint's folder name), or
  - the user declared it (`pairs`, the command line's --pair BASE:GATED).
Every other pair is not comparable, with the reason.
"""

from __future__ import annotations

from pathlib import Path

from probe.load.fingerprint import scheme_of
from probe.reports.runs import Runs, same_token_pairs
from probe.train.config import siblings

NOT_COMPARABLE = "not comparable"


def _same_tokens(runs: Runs, base: str, gated: str) -> bool:
    a, b = (runs.meta[m].get("tokens_sha256") for m in (base, gated))
    return a is not None and a == b


def _same_recipe(runs: Runs, base: str, gated: str) -> bool:
    a, b = (runs.meta[m].get("train_recipe") for m in (base, gated))
    if not isinstance(a, dict) or not isinstance(b, dict):
        return False
    strip = lambda r: {k: v for k, v in r.items() if k != "arm"}          # noqa: E731
    return strip(a) == strip(b) and a.get("arm") != b.get("arm")


def _one_set(runs: Runs, base: str, gated: str) -> bool:
    # The same recipe trains the Qwen3 arms and the hybrid arms: only arms of one set are matched
    # in parameters and architecture (a Qwen3 baseline is no control for a gated hybrid).
    a, b = (runs.meta[m]["train_recipe"].get("arm") for m in (base, gated))
    return b in siblings(str(a))


def _grafted_onto(runs: Runs, base: str, gated: str) -> bool:
    graft = runs.meta[gated].get("graft")
    if not isinstance(graft, dict):
        return False
    meta = runs.meta[base]
    # The embedding's fingerprint tells the graft's own base from any other model, in memory
    # or on disk; the config hash and the file name are the fallbacks of older records.
    # Fingerprints of two schemes (XXH3 "xxh3:..." now, 16 hex digits of SHA-256 before) say
    # nothing of each other: then the fallbacks decide.
    recorded, own = str(graft.get("base_fingerprint") or ""), str(meta.get("embedding_fingerprint") or "")
    if recorded and own and scheme_of(recorded) == scheme_of(own):
        return recorded == own
    if graft.get("base_digest") and meta.get("config_hash"):
        return graft["base_digest"] == meta["config_hash"]
    checkpoint = meta.get("checkpoint")
    return bool(checkpoint) and graft.get("base") in (Path(str(checkpoint)).name, Path(str(checkpoint)).stem)


def parse_pairs(texts) -> list[tuple[str, str]]:
    """--pair BASE:GATED ... -> [(base, gated)]; ValueError naming a malformed one."""
    pairs = []
    for text in texts or ():
        base, sep, gated = str(text).partition(":")
        if not sep or not base or not gated:
            raise ValueError(f"--pair {text}: give BASE:GATED, the two models' names")
        pairs.append((base, gated))
    return pairs


def check_declared(runs: Runs, pairs) -> None:
    """A declared pair must name a baseline and a gated model of these runs."""
    for base, gated in pairs or ():
        if base == gated:
            raise ValueError(f"--pair {base}:{gated} names one run twice; give a baseline and a gated model, "
                             "BASE:GATED")
        for name, want in ((base, False), (gated, True)):
            if name not in runs.models:
                raise ValueError(f"--pair {base}:{gated}: no run is named {name!r} (the runs: "
                                 f"{', '.join(runs.models)})")
            if runs.is_gated(name) != want:
                raise ValueError(f"--pair {base}:{gated}: {name} is {'ungated' if want else 'gated'}; "
                                 "give the baseline first, then the gated model")


def pairing(runs: Runs, base: str, gated: str, declared=None) -> str | None:
    """None when (base, gated) is a matched pair, else why it is not comparable. A declared pair
    of runs that do not record their token ids (written before tokens_sha256) is taken on trust."""
    digests = [runs.meta[m].get("tokens_sha256") for m in (base, gated)]
    unknown = None in digests
    if declared:
        if (base, gated) not in set(declared):
            return "not a declared pair (--pair BASE:GATED)"
        return None if unknown or digests[0] == digests[1] else "not the same token ids (meta.json tokens_sha256)"
    if unknown:
        return "token ids not recorded (no meta.json tokens_sha256); declare the pair with --pair if it is one"
    if not _same_tokens(runs, base, gated):
        return "not the same token ids (meta.json tokens_sha256)"
    if _same_recipe(runs, base, gated):
        if _one_set(runs, base, gated):
            return None
        return "arms of one recipe but not of one matched set (the Qwen3 arms, or the hybrid arms)"
    if _grafted_onto(runs, base, gated):
        return None
    return ("not arms of one probe train run nor a graft of this baseline; declare the pair with "
            f"--pair {base}:{gated} if it is one")


def split_pairs(runs: Runs, declared=None):
    """(matched (base, gated) pairs, not-comparable groups (base, [gated, ...], why)): the gated
    models one baseline is not comparable with for one reason share a group, so that a second
    baseline beside a training run's arms is one line of the claims, not one per arm."""
    matched, groups = [], {}
    for gated in runs.gated_models:
        for base in runs.ungated_models:
            why = pairing(runs, base, gated, declared)
            if why is None:
                matched.append((base, gated))
                continue
            # The --pair hint names the gated model; a group of several says which names go there.
            key = (base, why.replace(f"--pair {base}:{gated} if it is one",
                                     f"--pair {base}:MODEL, MODEL one of the gated models named, if it is one"))
            groups.setdefault(key, []).append((gated, why))
    unmatched = [(base, [g for g, _ in members], members[0][1] if len(members) == 1 else generic)
                 for (base, generic), members in groups.items()]
    return matched, unmatched


def gate_pairs(runs: Runs, declared=None) -> list[tuple[str, str]]:
    """The (baseline, gated) pairs a figure or table of the gate's effect sets side by side: the
    matched pairs where these runs have any (the claims' pairs), else every baseline and gated
    run on the same token ids. Five trained arms pair none with the Qwen3 arms and hybrid-none
    with the gated hybrid, not a softmax baseline with a hybrid."""
    return split_pairs(runs, declared)[0] or same_token_pairs(runs)
