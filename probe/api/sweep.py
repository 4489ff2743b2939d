"""A context sweep: the same text analysed at several sequence lengths, one run per length.

    probe analyze CHECKPOINT --seq-len 512,2048,8192,32768
    probe.api.sweep("ckpt", data, lengths=(512, 2048, 8192))

The data is cut at the longest length L first: n full sequences of L tokens (max_sequences
caps n). Every shorter length T analyses the same token stream cut into T-token sequences: the
first k_T = n x (L - b) // (T - b) sequences of `probe analyze --seq-len T` (b = 1 when a BOS
token is put first, else 0), so every length sees the same tokens and each length's tokens are
a prefix of the next's. Rows given as they are (2-D token ids, per-document sequences) are cut
to their first T tokens instead. Each run is exactly `analyze(seq_len=T, max_sequences=k_T)`
on the one loaded model: equal, bit for bit, to that length analysed alone
(tests/api/test_sweep.py), streamed one length at a time.

With a partial folder (`partial=`; the CLI's OUT.partial/) each length's run directory is saved
there as soon as that length is done, and its pass's state while it runs (resume.py); with
resume=True the lengths saved there are read back instead of analysed (after checking they were
made from the same model, data and options, sweep_saved.py) and the pass that was interrupted
continues from its saved state. keep_runs=False holds only each length's summary in the Sweep,
not its tables (the CLI writes --out from the saved run directories): one length's Analysis is
in memory at a time.

A RoPE model runs past its config's positions (past_positions): that is what a sweep past the
training length measures; a model with a table of learned positions is refused there.
"""
from __future__ import annotations

import math
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from . import sweep_saved as saved_runs
from ..core.errors import ProbeError, flag
from ..core.options import AnalysisOptions, check_int


@dataclass
class Sweep:
    """The runs of a sweep, by length, and the table across lengths (context_length.csv)."""

    name: str
    lengths: tuple[int, ...]
    runs: dict[int, object] = field(default_factory=dict)            # length -> Analysis (keep_runs)
    summaries: dict[int, dict] = field(default_factory=dict)         # length -> summary.json
    folders: dict[int, Path] = field(default_factory=dict)           # length -> its saved run directory

    def run_names(self) -> dict[str, object]:
        """{NAME@LENGTH: the Analysis, or its saved run directory where it is not held}."""
        return {run_name(self.name, T): self.runs.get(T, self.folders.get(T)) for T in self.summaries}

    def table(self) -> pd.DataFrame:
        """context_length.csv, one run at a time (a run's rows depend on that run only)."""
        from probe.reports.context import context_table

        parts = [context_table(self.runs[T] if T in self.runs else self.folders[T]) for T in self.summaries]
        return pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]


def run_name(name: str, length: int) -> str:
    """The run (and folder) name of one length: NAME@LENGTH."""
    return f"{name}@{length}"


def parse_lengths(value) -> tuple[int, ...]:
    """512,2048 / [512, 2048] -> (512, 2048): distinct, ascending, each at least 2."""
    values = list(value) if isinstance(value, (tuple, list)) else [value]
    for v in values:
        check_int("seq_len", v, 2)
    if len(set(values)) < 2:
        raise ProbeError(f"{flag('seq_len')}: a sweep needs at least two different lengths "
                         f"(got {', '.join(map(str, values))})")
    return tuple(sorted(set(values)))


def counts(n: int, lengths, bos: bool, *, as_rows: bool) -> dict[int, int]:
    """Sequences per length: n at the longest; the same stream cut shorter for the others."""
    longest = max(lengths)
    if as_rows:
        return {T: n for T in lengths}
    b = 1 if bos else 0
    return {T: n * (longest - b) // (T - b) for T in lengths}


def sweep(model, data=None, *, lengths, texts=None, options: AnalysisOptions | None = None,
          name: str | None = None, progress_line=print, keep_runs: bool = True, **overrides) -> Sweep:
    """Analyse `model` at each of `lengths` (see the module docstring); returns a Sweep.

    With `partial` a finished sweep removes the folder again when keep_runs (its runs are in
    the Sweep), and leaves it to the caller otherwise (the CLI writes --out from it first)."""
    from ..load import rope
    from ..data.sequences import read_data
    from ..results.analysis import Analysis
    from ..load.loader import text_config
    from ..run.pipeline import dataset_for
    from ..results.run_names import run_name as named
    from ..run.source import load_model

    lengths = parse_lengths(lengths)
    o = AnalysisOptions.of(options, **overrides).replace(seq_len=max(lengths))
    if not keep_runs and o.partial is None:
        raise ProbeError(f"keep_runs=False needs {flag('partial', metavar='FOLDER')} to save the runs in")
    if o.max_length is not None or o.stride is not None:
        raise ProbeError(f"{flag('max_length')} / {flag('stride')} cut sliding windows; a sweep cuts "
                         f"the text at each {flag('seq_len')} itself: leave them out")
    docs = read_data(data, texts=texts, text_field=o.text_field)
    # Loaded once for every length, the way an analysis loads it (run/source.py load_model); the
    # memory check allows positions past the model's, which the longest length may need.
    dtype, device = o.loading()
    loaded = load_model(model, o.replace(past_positions=True), dtype=dtype, device=device)
    config = text_config(loaded.model.config)
    positions = getattr(config, "max_position_embeddings", None)
    past = bool(positions and max(lengths) > positions)
    if past and rope.rope_of(config) is None:
        raise ProbeError(f"{flag('seq_len', max(lengths))} is beyond the model's {positions} positions, and "
                         "it has no rotary embedding to run past them; keep the lengths at most "
                         f"{positions}")
    if past:
        beyond = [str(T) for T in lengths if T > positions]
        warnings.warn(f"length{'s' if len(beyond) > 1 else ''} {', '.join(beyond)} beyond the model's {positions} "
                      "positions: run past them (rotary positions extrapolated), marked beyond_positions in "
                      "the sweep's table")
    o = o.replace(past_positions=o.past_positions or past, loss_by_position=True)
    # The cut's warnings wait for the check below: where it refuses the data, "one sequence of 8
    # tokens is analysed" before the refusal would say the opposite of what happens.
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        longest = dataset_for(docs, None, loaded.tokenizer, config, o)
    as_rows = o.per_document or docs.rows
    full = [s for s in longest.sequences if len(s) == max(lengths)]
    if not full and not as_rows:
        raise ProbeError(f"the data holds {longest.tokens:,} tokens, fewer than one sequence of "
                         f"{max(lengths):,}; give a longer text ({flag('data', metavar='FILE')}) or drop "
                         f"{max(lengths)} from {flag('seq_len')}")
    for warning in said:
        warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    n = len(longest.sequences) if as_rows else len(full)
    per_length = counts(n, lengths, longest.bos_token_id is not None, as_rows=as_rows)
    base = named(name or o.name, loaded.path, type(loaded.model).__name__)
    result = Sweep(base, lengths)
    folder = Path(o.partial) if o.partial is not None else None
    common = dict(rope_scaling=rope.parse(o.rope_scaling) if o.rope_scaling else None,
                  positions=rope.describe(config, (loaded.rope_scaling or {}).get("original_max_position_embeddings")),
                  trained_length=trained_length(loaded.path), config_positions=positions)
    with _held(folder, o.resume, [run_name(base, T) for T in lengths]) as done:
        fingerprint = None if folder is None else saved_runs.sweep_fingerprint(
            loaded, longest, o, lengths, dtype=str(next(loaded.model.parameters()).dtype).replace("torch.", ""))
        plan = {T: o.replace(seq_len=T, max_sequences=per_length[T], name=run_name(base, T), partial=folder,
                             resume=False) for T in lengths}
        # Every saved length is checked before any pass runs: a mismatch costs no time.
        found = {T: path for T in lengths if o.resume and (path := saved_runs.saved(folder, run_name(base, T)))}
        for T, path in found.items():
            saved_runs.check(path, saved_runs.length_fingerprint(fingerprint, plan[T]))
        if folder is not None:
            saved_runs.write_readme(folder, o.command)
        first = True
        for T in lengths:
            if T in found:
                progress_line(f"probe: {run_name(base, T)}: saved in {found[T]}, read back (--resume)")
                analysis = Analysis.load(found[T])
                result.folders[T] = found[T]
            else:
                progress_line(f"probe: {run_name(base, T)}: {per_length[T]} sequence{'s' * (per_length[T] != 1)} "
                              f"of {T:,} tokens")
                # The first length to run may be the one that was interrupted: its pass continues.
                analysis = _one_length(loaded, docs, plan[T].replace(resume=o.resume and first and folder is not None),
                                       base, lengths, per_length[T], T, common)
                first = False
                if folder is not None:
                    result.folders[T] = saved_runs.save(folder, analysis,
                                                        saved_runs.length_fingerprint(fingerprint, plan[T]))
                    saved_runs.write_readme(folder, o.command)
            result.summaries[T] = analysis.summary
            if keep_runs:
                result.runs[T] = analysis
            del analysis              # keep_runs=False: the next length runs without this one's tables
        done.append(keep_runs)
    if keep_runs:
        result.folders.clear()        # the folder went with the finished sweep: its runs are in memory
    return result


def _one_length(loaded, docs, run_options, base, lengths, sequences, T, common):
    """`analyze` of one length, with the context_sweep record in its meta.json."""
    from .analyze import analyze

    started = time.perf_counter()
    analysis = analyze(loaded, docs, options=run_options)
    positions = common["config_positions"]
    analysis.meta["context_sweep"] = {"model": base, "length": T, "lengths": list(lengths),
                                      "sequences": sequences, "rope_scaling": common["rope_scaling"],
                                      "beyond_positions": bool(positions and T > positions),
                                      # the model's rotary positions as run, and its training length
                                      "positions": common["positions"],
                                      "trained_length": common["trained_length"],
                                      "seconds": round(time.perf_counter() - started, 2)}
    return analysis


@contextmanager
def _held(folder: Path | None, resume: bool, runs: list[str]):
    """The partial folder's lock for the sweep (re-entrant: the CLI holds it too). A sweep that
    finishes with its runs in memory (done == [True]) removes the folder; otherwise what it saved
    stays for --resume or for the caller to write."""
    from ..run.partial_lock import claim, refuse_waiting_run, release
    from ..run.resume import start_again

    done: list[bool] = []
    if folder is None:
        yield done
        return
    claim(folder)
    try:
        # Without resume, a waiting pass or this sweep's own saved lengths are not started over;
        # another model's (probe compare: the models share the folder) are not this sweep's to judge.
        refuse_waiting_run(folder, resume, pass_only=True)
        waiting = [r for r in runs if saved_runs.saved(folder, r)]
        if waiting and not resume:
            raise ProbeError(f"an interrupted sweep is waiting in {folder} ({', '.join(waiting)} saved); pass "
                             f"{flag('resume', True)} to continue it or {start_again()}")
        yield done
    finally:
        release(folder, discard=done == [True], runs=done == [True])


def trained_length(path) -> int | None:
    """The sequence length a `probe train` checkpoint was trained at (its train_config.json),
    None for other checkpoints (their config's original positions stand in)."""
    import json

    file = Path(str(path)) / "train_config.json" if path else None
    if file is None or not file.is_file():
        return None
    try:
        value = json.loads(file.read_text()).get("recipe", {}).get("seq_len")
    except (OSError, ValueError, AttributeError):
        return None
    return int(value) if isinstance(value, int) and value > 0 else None


def check_uniform(sweeps) -> None:
    """Several sweeps (probe compare) must not share a run name."""
    names = [run_name(s.name, T) for s in sweeps for T in s.lengths]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ProbeError(f"two sweeps would write {dupes[0]}; give the models distinct names (--name)")


def describe(sweep: Sweep) -> str:
    """One line per length, as the CLI prints it after the runs."""
    lines = []
    for T, s in sweep.summaries.items():
        lines.append(f"{run_name(sweep.name, T):>24}  F-Attn {_f(s.get('f_attn'))}  sink rate "
                     f"{_f(s.get('sink_rate'))}  M-Act {_f(s.get('m_act'), 0)}  loss {_f(s.get('loss'))}")
    return "\n".join(lines)


def _f(v, digits: int = 4) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    return f"{v:,.{digits}f}" if digits == 0 else f"{v:.{digits}g}"
