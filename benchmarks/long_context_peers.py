"""probe and its peers at long context on SmolLM2-135M: time and peak memory, or the memory a
peer would need where it cannot run.

The methods are those of peers.py (their children run as they are there): plain SDPA forward,
probe's full pass, Hugging Face eager attention with output_attentions, TransformerLens 4.3
run_with_cache and run_with_hooks. Before a method runs at a length, the memory it needs is
predicted; one that would not fit under --memory-gb is reported with that need and not started
(a T x T softmax per layer and head does not fit: at T = 32768 one layer's pattern is 39 GB),
so no process ever grows past the cap. Each that runs does so in its own niced process, one
thread, under the same address-space cap (common.run_child).

Predicted need, float32, one sequence (H query heads, L layers; probe.load.memory.predict for the
weights, logits and linear activations):
  plain       weights + full logits + activations
  probe       weights + activations (logits block by block, probe/capture/logits.py)
  eager       plain + L x H x T^2 (output_attentions returns every layer's pattern) + 2 H T^2
  tl_cache    plain + L x H x T^2 (the cached patterns) + 3 H T^2 (scores, mask, pattern)
  tl_hooks    plain + 3 H T^2 (one layer's scores, mask and pattern at a time)

Time is CPU seconds of the child's one thread (wall seconds beside it: on a shared machine they
measure the queue too). With --json every finished row is written at once (atomically), with the
load average at the start and at the latest row; --resume keeps the rows already in that file
that were measured and runs only the rest, so an interrupted 32k run loses one row at most.
--together runs the methods of a length at once (one core each, the same load on both).

    python benchmarks/long_context_peers.py [--lengths 2048 8192 16384 32768] [--memory-gb 8] [--measure-up-to T]
    python benchmarks/long_context_peers.py --lengths 32768 --methods plain probe --memory-gb 12 --together --json rows.json --resume
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
# This checkout's probe, here and (main sets PYTHONPATH) in the children, whether or not one is installed.
sys.path.insert(1, str(HERE.parent))
from common import run_child  # noqa: E402

PEERS = str(HERE / "peers.py")
METHODS = ("plain", "probe", "eager", "tl_cache", "tl_hooks")
TIME_RATIO, MEMORY_RATIO = 1.3, 1.5          # probe against plain at the longest length
GiB = 2 ** 30


def predicted(method: str, config, params: int, T: int) -> int:
    """Bytes `method` needs for one sequence of T tokens (the module docstring's formulas)."""
    from probe.load import memory

    c = getattr(config, "text_config", None) or config
    H, L = c.num_attention_heads, c.num_hidden_layers
    full = memory.predict(config, batch=1, length=T, params=params)["total"]
    square = 4 * H * T * T                    # one layer's (1, H, T, T) float32
    if method == "probe":
        return memory.predict(config, batch=1, length=T, params=params, logits_rows=1024)["total"]
    return full + {"plain": 0, "eager": L * square + 2 * square, "tl_cache": L * square + 3 * square,
                   "tl_hooks": 3 * square}[method]


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--lengths", type=int, nargs="+", default=[2048, 8192, 16384, 32768])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--memory-gb", type=float, default=8, help="cap per process (and the prediction's limit)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per measurement")
    parser.add_argument("--measure-up-to", type=int, default=None, metavar="T",
                        help="longer lengths get the predicted need only (nothing is run there)")
    parser.add_argument("--json", help="also write every row to this file, as each finishes")
    parser.add_argument("--resume", action="store_true", help="keep the measured rows already in --json")
    parser.add_argument("--together", action="store_true",
                        help="run the methods of one length at the same time (their caps add up: check free memory)")
    args = parser.parse_args()
    if args.resume and not args.json:
        parser.error("--resume needs --json FILE (the rows to keep)")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE.parent), os.environ.get("PYTHONPATH")]))
    import torch

    from probe.load import memory, real_models
    from peers import token_ids_for

    from probe.run.memory_checks import read_config

    path = real_models.fetch("smollm2")
    config = read_config(path)                   # the GGUF file's metadata, no weights
    params = memory.parameter_count(config)
    print(f"SmolLM2-135M (Q4_1 GGUF dequantised to float32), {params / 1e6:.0f}M parameters; one thread; "
          f"cap {args.memory_gb:g} GiB per process; CPU seconds, peak RSS added over a warm-up at T = 64")
    print(f"{'T':>6} {'method':>9} {'need GiB':>9} {'CPU s':>8} {'x plain':>8} {'wall s':>8} {'peak MB':>9} {'x plain':>8}")
    kept = {(r["T"], r["method"]): r for r in previous_rows(args.json) if "seconds" in r} if args.resume else {}
    record = {"command": " ".join(sys.argv), "load_start": loadavg(), "rows": []}
    rows, ok = record["rows"], True
    print(f"load average at start: {record['load_start']}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for T in args.lengths:
            ids_file = str(Path(tmp) / f"ids{T}.pt")
            if args.measure_up_to is None or T <= args.measure_up_to:
                torch.save(token_ids_for("smollm2", T), ids_file)
            done, todo = {}, []
            for m in args.methods:
                need = predicted(m, config, params, T)
                row = {"method": m, "T": T, "predicted_gib": round(need / GiB, 2)}
                if (T, m) in kept:
                    row = {**kept[(T, m)], "kept": True}
                elif need > args.memory_gb * GiB:
                    row["error"] = f"would need about {need / GiB:.1f} GiB, over the {args.memory_gb:g} GiB cap: not run"
                elif args.measure_up_to is not None and T > args.measure_up_to:
                    row["error"] = "predicted only (--measure-up-to)"
                else:
                    todo.append(row)
                    continue
                done[m] = row
            spec = {"repeat": 1, "ids": ids_file, "model": "smollm2", "past_positions": True}

            def measure(row):
                row.update(run_child(PEERS, {**spec, "method": row["method"], "T": T}, args.timeout,
                                     args.memory_gb, steady_heap=True))
                return row

            # --together: the children of one length at once, each on its own core, so that the
            # machine's load is the same for all of them; else one after another.
            with ThreadPoolExecutor(max_workers=max(1, len(todo)) if args.together else 1) as pool:
                for finished in as_completed([pool.submit(measure, row) for row in todo]):
                    row = finished.result()
                    done[row["method"]] = row
                    if args.json:
                        record["load_latest"] = loadavg()
                        write_atomic(args.json, {**record, "rows": rows + list(done.values())})
            for m in args.methods:
                rows.append(row := done[m])
                if "error" in row:
                    print(f"{T:>6} {m:>9} {row['predicted_gib']:>9.1f}  {row['error']}", flush=True)
                    continue
                plain = done.get("plain", {})
                tr = row["seconds"] / plain["seconds"] if "seconds" in plain else float("nan")
                mr = row["peak_mb"] / plain["peak_mb"] if plain.get("peak_mb") else float("nan")
                wall = row.get("wall_seconds", float("nan"))
                print(f"{T:>6} {m:>9} {row['predicted_gib']:>9.1f} {row['seconds']:>8.1f} {tr:>8.2f} {wall:>8.1f} "
                      f"{row['peak_mb']:>9.0f} {mr:>8.2f}" + ("  (kept from --json)" if row.get("kept") else ""),
                      flush=True)
            mine, plain = done.get("probe", {}), done.get("plain", {})
            if T == max(args.lengths) and "seconds" in mine and "seconds" in plain:
                within = (mine["seconds"] <= TIME_RATIO * plain["seconds"]
                          and mine["peak_mb"] <= MEMORY_RATIO * plain["peak_mb"])
                print(f"probe at T = {T}: time x{mine['seconds'] / plain['seconds']:.2f} (limit {TIME_RATIO}), "
                      f"memory x{mine['peak_mb'] / plain['peak_mb']:.2f} (limit {MEMORY_RATIO}): "
                      f"{'within' if within else 'NOT within'}")
                ok = ok and within
    print(f"load average at end: {loadavg()}")
    if args.json:
        write_atomic(args.json, {**record, "load_end": loadavg()})
    return 0 if ok else 1


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().strip()


def previous_rows(path: str) -> list:
    """The rows of an earlier --json file (none when there is no file yet)."""
    if not Path(path).exists():
        return []
    return json.loads(Path(path).read_text())["rows"]


def write_atomic(path: str, record: dict) -> None:
    """Written to a temporary file beside it, then renamed: a reader never sees half a file."""
    tmp = Path(path).with_name(Path(path).name + ".tmp")
    tmp.write_text(json.dumps(record, indent=1))
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
