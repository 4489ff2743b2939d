"""What a user pays for `probe.analyze`: the whole call (data, fingerprint, display patterns, the
pass, bins, per-sequence values, loss, tables, intervals) against a plain forward over the same
ids, on SmolLM2-135M (real_overhead.MODEL_TEXT; real text repeated up to T, one sequence).

    analyze  - probe.analyze(lm, ids, seq_len=T, bos="none", batch_size=1, progress=False):
               every default option, intervals at their default resamples (1000)
    anatomy  - the same with anatomy=True (probe analyze --anatomy)
    plain    - lm.model(input_ids=ids, use_cache=False), logits included

At each length a fresh, niced process (common.run_child) times the three side by side, alternating,
best of `--repeat`: the process's CPU time with one torch thread (wall time beside it: a niced
process on a shared machine waits for the CPU). The line under each row gives the least and greatest
ratio of one round to the plain forward of the same round: how much this machine moved while it ran;
the next gives the ratios of user time alone (CPU time less the system's, which the plain forward's
fresh logit pages make move). Three more fresh processes, one per method, measure the peak resident
memory each call adds (warm-up call at 64 tokens first, high-water mark reset after it, glibc's heap
held steady: common.clocks, common.STEADY_HEAP).
One more process times the stages of one analysis (stage_clocks: CPU time inside each named
function, inclusive; the pass's own overhead is "pass" less the plain forward), then, in a second
analysis, the metrics on the events by metric (metric_clocks). Then the README
quickstart's `probe analyze` (tiny elementwise arm, 8 x 128 tokens), best wall time of three
fresh processes, imports included (one alone read 5.55 s right after the 8192-token runs,
3.6-4.6 s on its own).
The load average (`uptime`) is printed first and last.

    python benchmarks/whole_analysis.py [--lengths 128 512 2048 8192] [--repeat 3] [--no-anatomy]
    python benchmarks/whole_analysis.py --device cuda --dtype bfloat16     # and float32

On a GPU (--device cuda) time is wall time around torch.cuda.synchronize and memory is
torch.cuda.max_memory_allocated beyond what the loaded model holds; expected outputs:
docs/benchmarks.md. Nothing here imports CUDA-only code, so the CPU benchmark runs anywhere.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))
from common import child_args, clocks, run_child  # noqa: E402

METHODS = ("plain", "analyze", "anatomy")
QUICKSTART = ["analyze", "examples/checkpoints/elementwise", "--seq-len", "128", "--max-sequences", "8",
              "--bos", "prepend"]
# Where the time of one analysis goes: (label, module, attribute), patched at the place probe.analyze
# calls it from, timed inclusive (a child's time is also in its parent's, shown indented).
STAGES = (
    ("read and cut the data", "probe.api.analyze", "read_data"),
    ("  dataset (tokenize, cut)", "probe.api.analyze", "dataset_for"),
    ("load the source", "probe.api.analyze", "source_for"),
    ("token groups", "probe.api.analyze", "token_group_table"),
    ("metrics set up", "probe.run.source.HFSource", "capture"),
    ("the pass", "probe.api.analyze", "run_pass"),
    ("  metrics on events (hooks)", "probe.capture.bus.Pass", "emit"),
    ("    loss", "probe.metrics.loss.reduce.LossStats", "update"),
    ("  probe attention kernel", "probe.capture.attention", "attention_with_lse"),
    ("  the same with anatomy's column sums", "probe.metrics.anatomy.fused", "attention_with_received"),
    ("  first-key and events", "probe.capture.hf.Capture", "on_attention"),
    ("display patterns", "probe.run.source.HFSource", "display_patterns"),
    ("tables, meta, summary", "probe.api.analyze", "assemble"),
    ("  tables", "probe.capture.bus.Pass", "tables"),
    ("  meta", "probe.run.pipeline", "build_meta"),
    ("    embedding fingerprint", "probe.run.pipeline", "embedding_fingerprint"),
    ("  summary (with intervals)", "probe.run.pipeline", "build_summary"),
    ("    intervals", "probe.intervals", "summary_intervals"),
    ("    anatomy intervals", "probe.intervals", "anatomy_intervals"),
)


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "uptime unavailable"


# -- in a child process --------------------------------------------------------------------------

def setup(T: int, device: str = "cpu", dtype: str = "float32"):
    import torch

    import probe
    from probe.data.corpus import sample_texts
    from probe.load import real_models

    torch.set_num_threads(1)
    lm = probe.load(real_models.fetch("smollm2"), device=device, dtype=dtype)
    ids = lm.tokenizer("\n\n".join(sample_texts()), add_special_tokens=False).input_ids
    ids = (ids * (T // len(ids) + 1))[:T]                       # real text, repeated up to T
    return lm, torch.tensor([ids], device=device)


def calls(lm, ids, dtype: str = "float32") -> dict:
    import probe
    import torch

    def plain():
        with torch.inference_mode():
            return lm.model(input_ids=ids, use_cache=False).logits

    def analyze(**more):
        return probe.analyze(lm, ids.cpu(), seq_len=ids.shape[1], bos="none", batch_size=1, progress=False,
                             dtype=dtype, **more)
    return {"plain": plain, "analyze": analyze, "anatomy": lambda: analyze(anatomy=True)}


def synced(fn, device: str):
    """fn, then wait for the GPU's queue (on the CPU: fn)."""
    if device == "cpu":
        return fn
    import torch

    def run():
        out = fn()
        torch.cuda.synchronize()
        return out
    return run


def gpu_clock() -> float:
    """Wall time once the GPU's queue is empty: what the stages before it cost on the device too."""
    import torch

    torch.cuda.synchronize()
    return time.perf_counter()


def measure(spec: dict) -> dict:
    """spec["what"]: "time" (best of each method, alternating), a method name (its peak memory),
    "stages" (one analysis, timed by stage)."""
    what, T, device, dtype = spec["what"], spec["T"], spec.get("device", "cpu"), spec.get("dtype", "float32")
    lm, ids = setup(T, device, dtype)
    fns = {m: synced(f, device) for m, f in calls(lm, ids, dtype).items()}
    warm = calls(lm, ids[:, :64], dtype)
    for m in spec["methods"]:
        warm[m]()                  # what a method loads once per process is not what a call at T costs
    if what == "stages":
        clock = time.process_time if device == "cpu" else gpu_clock
        plain = clocks(fns["plain"], 1)["seconds" if device == "cpu" else "wall_seconds"]
        def run():
            return fns["analyze"](anatomy=spec.get("anatomy", False))
        return {"T": T, "stages": stage_clocks(run, clock=clock), "plain": plain,
                "metrics": metric_clocks(run, clock=clock)}        # a second analysis: each timer alone
    if what != "time":
        if device != "cpu":
            import torch

            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            fns[what]()
            return {"T": T, "peak_mb": (torch.cuda.max_memory_allocated() - base) / 2 ** 20}
        return {"T": T, "peak_mb": clocks(fns[what], 1)["peak_mb"]}
    best = {f"{m}_{c}": float("inf") for m in spec["methods"] for c in ("cpu", "wall", "user")}
    rounds = {m: [] for m in spec["methods"]}       # each round's time, on the table's clock
    for _ in range(spec["repeat"]):
        for m in spec["methods"]:
            wall, cpu, user = time.perf_counter(), time.process_time(), os.times().user
            fns[m]()
            cpu, wall, user = time.process_time() - cpu, time.perf_counter() - wall, os.times().user - user
            best[f"{m}_cpu"], best[f"{m}_wall"] = min(best[f"{m}_cpu"], cpu), min(best[f"{m}_wall"], wall)
            best[f"{m}_user"] = min(best[f"{m}_user"], user)
            rounds[m].append(cpu if device == "cpu" else wall)
    return {"T": T, **best, "rounds": rounds}


def round_ratios(rounds: dict[str, list[float]]) -> dict[str, tuple[float, float]]:
    """Per method but the plain forward, (least, greatest) over the rounds of its time / the plain
    forward's time in the same round: how far one round's ratio moves on this machine (the
    table's ratio is best time over best time)."""
    plain = rounds["plain"]
    ratios = {m: [t / p for t, p in zip(times, plain)] for m, times in rounds.items() if m != "plain"}
    return {m: (min(r), max(r)) for m, r in ratios.items() if r}


def round_line(row: dict) -> str | None:
    """"  per round: analyze 1.16-1.21x, anatomy 1.22-1.30x" for a timed row (None without rounds)."""
    spread = round_ratios(row["rounds"]) if row.get("rounds") else {}
    if not spread:
        return None
    return "  per round: " + ", ".join(f"{m} {lo:.2f}-{hi:.2f}x" for m, (lo, hi) in spread.items())


def process_line(rows: list[dict], device: str = "cpu") -> str | None:
    """"  in 3 fresh processes: analyze 1.04-1.12x (median 1.08x), ..." for the timed rows of one T
    measured in several processes (--processes): the plain forward itself moves ~10% between
    processes on a 2-core VM (docs/benchmarks.md, stop 61), as much as the overhead at 512."""
    key = "_wall" if device != "cpu" else "_cpu"
    done = [r for r in rows if "error" not in r]
    if len(done) < 2:
        return None
    parts = []
    for m in [m for m in METHODS[1:] if m + key in done[0]]:
        ratios = sorted(r[m + key] / r["plain" + key] for r in done)
        parts.append(f"{m} {ratios[0]:.2f}-{ratios[-1]:.2f}x (median {statistics.median(ratios):.2f}x)")
    return f"  in {len(done)} fresh processes: " + ", ".join(parts)


def user_line(row: dict) -> str | None:
    """"  user time only: analyze 1.14x, ..." for a timed CPU row: the CPU time less the system's.
    The plain forward writes its T x V logits to fresh pages each call, and the system time those
    pages take moves with the machine's memory (docs/benchmarks.md), so this ratio says what the
    analysis's own computation costs beside the CPU ratio a user pays."""
    if "plain_user" not in row or not row["plain_user"] > 0:
        return None
    rest = [m for m in METHODS[1:] if f"{m}_user" in row]
    return "  user time only: " + ", ".join(f"{m} {row[m + '_user'] / row['plain_user']:.2f}x" for m in rest)


def clocked(f, cell: list, clock):
    """f, adding each call's `clock` time and one call to cell [seconds, calls]."""
    def wrapper(*args, **kwargs):
        start = clock()
        try:
            return f(*args, **kwargs)
        finally:
            cell[0] += clock() - start
            cell[1] += 1
    return wrapper


def stage_clocks(fn, stages=STAGES, clock=time.process_time) -> list[tuple[str, float, int]]:
    """fn() with each stage's function wrapped in `clock` (CPU time; on a GPU, wall time after
    waiting for its queue): [(label, seconds, calls)], "total" last. A stage whose function is
    not there (moved, renamed) is left out."""
    import importlib

    spent: dict[str, list] = {}
    undo = []

    for label, where, name in stages:
        owner = None
        for cut in range(where.count(".") + 1, 0, -1):          # a module, or a class inside one
            parts = where.split(".")
            try:
                owner = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            for part in parts[cut:]:
                owner = getattr(owner, part, None)
            break
        if owner is None or not hasattr(owner, name):
            continue
        original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        spent[label] = [0.0, 0]
        setattr(owner, name, clocked(original, spent[label], clock))
        undo.append((owner, name, original))
    start = clock()
    try:
        fn()
    finally:
        total = clock() - start
        for owner, name, original in reversed(undo):
            setattr(owner, name, original)
    return [(label, s, n) for label, (s, n) in spent.items()] + [("total", total, 1)]


def metric_of(fn) -> str:
    """The metric a bus subscriber belongs to: the class of a bound method (HeadNorms.update), or
    the class whose method made the closure (Sparsity._updater.<locals>.update: Sparsity)."""
    owner = getattr(fn, "__self__", None)
    if owner is not None:
        return type(owner).__name__
    parts = [p for p in getattr(fn, "__qualname__", type(fn).__name__).split(".") if p != "<locals>"]
    return parts[-3] if len(parts) >= 3 else parts[0]              # Class, method, closure


def metric_clocks(fn, clock=time.process_time) -> list[tuple[str, float, int]]:
    """fn() with every subscriber of the analysis's event bus (probe.capture.bus.Pass.on) timed:
    [(metric, seconds, events)], largest first. Where the "metrics on events" stage goes, by
    metric; a metric reading a binning another made first in the same event (bins.batch_bins)
    does not pay for it, so the split between those two depends on the order they subscribed."""
    from probe.capture import bus

    spent: dict[str, list] = {}
    original = bus.Pass.__dict__["on"]

    def on(self, event, f):
        return original(self, event, clocked(f, spent.setdefault(metric_of(f), [0.0, 0]), clock))

    bus.Pass.on = on
    try:
        fn()
    finally:
        bus.Pass.on = original
    return sorted(((m, s, n) for m, (s, n) in spent.items() if n), key=lambda r: -r[1])


# -- the parent ----------------------------------------------------------------------------------

def quickstart_seconds(repeat: int = 1) -> float:
    """Best wall time of the README quickstart's `probe analyze`, a fresh process each, imports included."""
    best = float("inf")
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as out:
            cmd = [sys.executable, "-m", "probe", *QUICKSTART, "--out", str(Path(out) / "run"), "--quiet"]
            start = time.perf_counter()
            done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                                  env=dict(os.environ, TOKENIZERS_PARALLELISM="false"))
            best = min(best, time.perf_counter() - start)
            if done.returncode:
                raise RuntimeError(done.stderr.strip().splitlines()[-1])
    return best


def table(rows: list[dict], methods: tuple[str, ...], device: str) -> list[str]:
    clock = "wall s" if device != "cpu" else "CPU s (wall)"
    head = f"{'T':>6} {'plain ' + clock:>18}" + "".join(f" {m + ' ' + clock:>20} {'x plain':>8}" for m in methods[1:])
    head += f" {'plain MB':>9}" + "".join(f" {m + ' MB':>11} {'x plain':>8}" for m in methods[1:])
    lines = [head]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['T']:>6} did not finish: {r['error']}")
            continue
        cell = {m: f"{r[m + '_cpu']:.2f} ({r[m + '_wall']:.2f})" for m in methods}
        key = "_wall" if device != "cpu" else "_cpu"
        line = f"{r['T']:>6} {cell['plain']:>18}" + "".join(
            f" {cell[m]:>20} {r[m + key] / r['plain' + key]:>8.2f}" for m in methods[1:])
        mb = {m: r[m + "_mb"] for m in methods}
        line += f" {mb['plain']:>9.0f}" + "".join(f" {mb[m]:>11.0f} {mb[m] / mb['plain']:>8.2f}" for m in methods[1:])
        lines.append(line)
    return lines


def stage_lines(result: dict) -> list[str]:
    plain = result["plain"]
    lines = [f"stages of one analysis at T = {result['T']} (CPU s, inclusive; plain forward {plain:.2f} s):"]
    for label, seconds, n in result["stages"]:
        lines.append(f"  {label:<34} {seconds:>7.3f} s  x{n}")
    total = dict((label, s) for label, s, _ in result["stages"])
    if "the pass" in total:
        lines.append(f"  {'the pass less the plain forward':<34} {total['the pass'] - plain:>7.3f} s")
        lines.append(f"  {'beyond the forward in all':<34} {total['total'] - plain:>7.3f} s")
    if result.get("metrics"):
        lines.append("  metrics on events, by metric (a second analysis):")
        for metric, seconds, n in result["metrics"]:
            lines.append(f"    {metric:<32} {seconds:>7.3f} s  {n} events")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 512, 2048, 8192])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--processes", type=int, default=1, metavar="K",
                        help="time each length in K fresh processes, the table's row from the first; "
                             "prints the ratios' range and median over them")
    parser.add_argument("--no-anatomy", action="store_true", help="leave the --anatomy analysis out")
    parser.add_argument("--stages", type=int, nargs="*", metavar="T", default=None,
                        help="lengths to break down by stage (default: every length; none: --stages)")
    parser.add_argument("--no-quickstart", action="store_true")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument("--memory-gb", type=float, default=24, help="address-space cap per process (CPU)")
    args = parser.parse_args()
    methods = METHODS[:2] if args.no_anatomy else METHODS
    gpu = args.device != "cpu"
    print(f"load: {uptime()}")
    print(f"SmolLM2-135M, {args.dtype} on {args.device}, one sequence of T tokens, best of {args.repeat}", flush=True)

    def child(spec, heap=False):
        memory = None if gpu else args.memory_gb        # CUDA maps far more address space than it uses
        return run_child(__file__, {**spec, "device": args.device, "dtype": args.dtype, "methods": methods},
                         args.timeout, memory, steady_heap=heap and not gpu)

    rows = []
    for T in args.lengths:
        timed = [child({"what": "time", "T": T, "repeat": args.repeat}) for _ in range(max(1, args.processes))]
        r = timed[0]
        for m in methods:
            if "error" not in r:
                mem = child({"what": m, "T": T}, heap=True)
                r = {**r, m + "_mb": mem["peak_mb"]} if "error" not in mem else {"T": T, "error": mem["error"]}
        rows.append(r)
        print("\n".join(table(rows, methods, args.device)[-1:] if len(rows) > 1 else table(rows, methods, args.device)),
              flush=True)
        if (spread := round_line(r)) is not None:
            print(spread, flush=True)
        if (across := process_line(timed, args.device)) is not None:
            print(across, flush=True)
        if not gpu and (user := user_line(r)) is not None:
            print(user, flush=True)
    for T in args.lengths if args.stages is None else args.stages:
        for anatomy in (False, True)[:len(methods) - 1]:
            s = child({"what": "stages", "T": T, "anatomy": anatomy})
            print(("anatomy: " if anatomy else "") + ("\n".join(stage_lines(s)) if "error" not in s else f"{T}: {s['error']}"),
                  flush=True)
    if not args.no_quickstart:
        print(f"quickstart `probe {' '.join(QUICKSTART)}`: {quickstart_seconds(3):.2f} s wall, imports included")
    print(f"load: {uptime()}")


if __name__ == "__main__":
    spec = child_args()
    if spec is not None:
        print(json.dumps(measure(spec)))
    else:
        main()
