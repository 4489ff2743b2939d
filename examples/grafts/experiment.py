"""The grafting experiment: gates grafted into SmolLM2-135M, trained on a CPU, measured as they train.

    nohup python examples/grafts/experiment.py --root graft-exp > graft-exp/log.txt 2>&1 &
    python examples/grafts/experiment.py --root graft-exp --scale 2     # extend: twice the steps
    python examples/grafts/experiment.py --root graft-exp --summary     # the table, nothing trained

Arms (docs/grafting.md says why these): headwise gates with an identity init (2 * sigmoid of zero)
trained alone, base frozen, three seeds (the seed orders the rows); the same with a random init
(sigmoid, gates near 0.5 at the start); all weights with identity gates; and all weights of the
ungated base (continued training with no gate: what the text alone does). Each arm is its own
`probe train --from` run in ROOT/ARM, resumable: rerunning the command continues every arm from
its last checkpoint, and --scale extends every arm (the learning rate is constant after warmup, so
a longer run is the same run continued). Torch uses one thread.

At step 0 and at every checkpoint the model is measured with probe.analyze on the same held-out
rows (ROOT/trajectory/ARM/step_NNNNN.json): held-out loss, F-Attn overall and on the layers where
the base has its sink, sink rate, M-Act and where its largest value sits, mean gate and the gate's
saturation. ROOT/trajectory.csv gathers every arm's points (written atomically after each);
the last measurement of each arm is kept as a run directory in ROOT/runs/ARM, and --report writes
ROOT/report/report.html from them and the base (the trajectory section and the claims table).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT_DIR = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT_DIR))                # this checkout's probe

SEQ_LEN, BATCH = 64, 4                           # SmolLM2's sink is there at T = 64
ANALYSIS_ROWS, EVAL_ROWS = 32, 16                # held-out rows measured / in training.csv (at the end)
SINK_LAYER_FATTN = 0.3                           # a base layer "has the sink": F-Attn >= this
MAX_STEPS = 100_000                              # the schedule's horizon: constant lr after warmup


@dataclass(frozen=True)
class Arm:
    name: str
    graft: str | None          # "identity" / "random" headwise graft; None: the ungated base
    train: str                 # gates / all
    seed: int
    lr: float
    steps: int
    save_every: int
    warmup: int


# Steps: each arm about 10-15 minutes at one thread on the shared, loaded 2-core machine (gates
# only 9-12 s a step at 4 x 64 tokens, all weights about twice that; a measurement 45-100 s;
# docs/grafting.md). The seeds s1 and s2 and the all-weights arms are shorter so that the whole
# set fitted the time there was; --scale extends them all.
ARMS = (
    Arm("gates-identity-s0", "identity", "gates", 0, 3e-3, 60, 15, 6),
    Arm("gates-random-s0", "random", "gates", 0, 3e-3, 60, 15, 6),
    Arm("all-identity-s0", "identity", "all", 0, 1e-4, 20, 10, 3),
    Arm("nogate-all-s0", None, "all", 0, 1e-4, 20, 10, 3),
    Arm("gates-identity-s1", "identity", "gates", 1, 3e-3, 45, 15, 6),
    Arm("gates-identity-s2", "identity", "gates", 2, 3e-3, 45, 15, 6),
)


def say(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)


def write_json(path: Path, obj) -> None:
    from probe.core.atomic import write_text

    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(obj, indent=1, default=float) + "\n")


# ----------------------------------------------------------------------------- measuring

def measure(model, rows, sink_layers: list[int] | None, *, name: str = "m", save: Path | None = None) -> dict:
    """One trajectory point: probe.analyze on the held-out rows (N, T), reduced to the numbers
    the write-up needs. sink_layers: the base's sink layers (None: this is the base). save: also
    keep the whole analysis there (a run directory for probe report)."""
    import probe

    a = probe.analyze(model, rows, seq_len=rows.shape[1], batch_size=BATCH, progress=False, name=name)
    if save is not None:
        a.save(save, force=True)
    s = a.summary
    layer_fattn = [float(L["f_attn"]) for L in s["layers"]]
    point = {k: (float(s[k]) if s.get(k) is not None else None)
             for k in ("loss", "f_attn", "f_attn_paper", "f_attn_uniform", "sink_rate", "m_act", "mean_gate")}
    point["layer_f_attn"] = layer_fattn
    point["layer_m_act"] = [float(L["m_act"]["resid_post"]) for L in s["layers"]]
    sinks = sink_layers if sink_layers is not None else [i for i, f in enumerate(layer_fattn) if f >= SINK_LAYER_FATTN]
    point["sink_layers"] = sinks
    point["f_attn_sink_layers"] = sum(layer_fattn[i] for i in sinks) / len(sinks) if sinks else None
    top = a.massive_top[(a.massive_top.site == "resid_post") & (a.massive_top["rank"] == 1)]
    best = top.loc[top.abs_value.idxmax()]
    point["m_act_max"] = {"value": float(best.abs_value), "layer": int(best.layer), "position": int(best.position),
                          "dim": int(best.dim), "token": str(best.token)}
    if s.get("mean_gate") is not None:
        g = a.gates[a.gates.group == "all"].pivot_table(index=["layer", "head"], columns="metric", values="value")
        w = g["count"] / g["count"].sum()
        point["gate"] = {m: float((g[m] * w).sum()) for m in ("mean", "frac_lt_0.1", "frac_lt_0.5", "frac_gt_0.9",
                                                               "frac_gt_0.99")}
        point["gate"]["min"], point["gate"]["max"] = float(g["min"].min()), float(g["max"].max())
        point["layer_mean_gate"] = [float(L["mean_gate"]) for L in s["layers"]]
    return point


# ----------------------------------------------------------------------------- setting up

def grafted(root: Path, init: str) -> Path:
    from probe.train.graft import graft
    from probe.load.real_models import fetch

    out = root / "grafts" / f"headwise-{init}"
    if not (out / "config.json").exists():
        graft(fetch("smollm2", progress=say), gate="headwise", init=init, out=out, seed=0, say=say)
    return out


def prepared_data(root: Path, base_gguf: Path):
    """The built-in text (the standard library's sources) in SmolLM2's tokens, rows of SEQ_LEN,
    no BOS (SmolLM2 was not trained with one), shared by every arm. The packed rows are kept in
    ROOT/corpus.pt: tokenising takes a minute or two, and a resumed run needs the same rows."""
    import torch

    from probe.load.loader import load
    from probe.train.config import TrainConfig
    from probe.train.prepare import Prepared, prepare_data

    tok = load(base_gguf).tokenizer
    cache = root / "corpus.pt"
    if cache.exists():
        return Prepared(tok, torch.load(cache, weights_only=False))      # written by this script
    say("tokenising the built-in text with SmolLM2's tokenizer ...")
    prepared = prepare_data(TrainConfig(seq_len=SEQ_LEN, bos="none"), tok)
    from probe.core.atomic import write_torch

    write_torch(cache, prepared.corpus)
    return prepared


def arm_config(arm: Arm, root: Path, source: Path, steps: int):
    from probe.train.config import TrainConfig
    from probe.train.loop import find_checkpoint

    out = root / arm.name
    return TrainConfig(
        from_dir=str(source), train_params=arm.train, out=str(out), seed=arm.seed, lr=arm.lr,
        warmup=float(arm.warmup), min_lr_ratio=1.0, tokens=MAX_STEPS * BATCH * SEQ_LEN,
        seq_len=SEQ_LEN, batch_size=BATCH, bos="none", eval_every=arm.steps, eval_rows=EVAL_ROWS,
        save_every=arm.save_every, threads=1, name=arm.name, stop_after=steps,
        resume=find_checkpoint(out) is not None, keep_checkpoint=True, progress=False)


def done_steps(out: Path) -> int:
    from probe.train.log import read_log
    from probe.train.loop import find_checkpoint

    ckpt = find_checkpoint(out)
    rows = read_log(ckpt / "training.csv") if ckpt is not None else []
    return rows[-1]["step"] if rows else 0


# ----------------------------------------------------------------------------- the run

def run_arm(arm: Arm, root: Path, base_gguf: Path, prepared, rows, base_point: dict, steps: int) -> None:
    import torch

    from probe.load.loader import load
    from probe.train.loop import train

    out = root / arm.name
    source = grafted(root, arm.graft) if arm.graft else base_gguf
    traj = root / "trajectory" / arm.name
    sinks = base_point["sink_layers"]
    if not (traj / "step_00000.json").exists():
        # Step 0 is the arm's starting model: measured once per source (the three identity seeds
        # and the all-weights identity arm start from the same graft; the base is base.json).
        start = root / "trajectory" / f"start-{source.name}.json"
        if source == base_gguf:
            start = root / "base.json"
        elif not start.exists():
            write_json(start, measure(load(source).model, rows, sinks))
        write_json(traj / "step_00000.json", json.loads(start.read_text()))
    if done_steps(out) >= steps:
        say(f"{arm.name}: at step {done_steps(out)} already (target {steps})")
        return
    t0 = time.time()

    def on_checkpoint(step, model):
        t = time.time()
        final = root / "runs" / arm.name if step >= steps else None      # the report's run directory
        point = measure(model, rows, sinks, name=arm.name, save=final)
        point["elapsed_s"] = round(time.time() - t0, 1)
        write_json(traj / f"step_{step:05d}.json", point)
        gate = point.get("gate", {}).get("mean")
        say(f"{arm.name} step {step}: loss {point['loss']:.4f}, F-Attn {point['f_attn']:.4f} "
            f"(sink layers {point['f_attn_sink_layers']:.4f}), M-Act {point['m_act']:.0f}"
            + (f", mean gate {gate:.4f}" if gate is not None else "") + f" (measured in {time.time() - t:.0f} s)")
        write_table(root)

    cfg = arm_config(arm, root, source, steps)
    say(f"{arm.name}: training {cfg.train_params} of {source.name} from step {done_steps(out)} to {steps} "
        f"(lr {arm.lr:g}, seed {arm.seed}, {torch.get_num_threads()} thread)")
    result = train(cfg, prepared, command=" ".join(sys.argv), on_checkpoint=on_checkpoint)
    say(f"{arm.name}: stopped at step {result.steps}; {result.seconds:.0f} s training, "
        f"{result.seconds_per_step:.2f} s a step")


def trajectory_rows(root: Path) -> list[dict]:
    out = []
    for arm in ARMS:
        for f in sorted((root / "trajectory" / arm.name).glob("step_*.json")):
            p = json.loads(f.read_text())
            gate = p.get("gate") or {}
            top = p.get("m_act_max") or {}
            out.append({"arm": arm.name, "step": int(f.stem.split("_")[1]), "tokens": int(f.stem.split("_")[1]) * BATCH * SEQ_LEN,
                        "loss": p["loss"], "f_attn": p["f_attn"], "f_attn_sink_layers": p["f_attn_sink_layers"],
                        "f_attn_uniform": p["f_attn_uniform"], "sink_rate": p["sink_rate"], "m_act": p["m_act"],
                        "m_act_max": top.get("value"), "m_act_layer": top.get("layer"),
                        "m_act_position": top.get("position"), "m_act_dim": top.get("dim"),
                        "mean_gate": gate.get("mean"), "gate_lt_0.1": gate.get("frac_lt_0.1"),
                        "gate_lt_0.5": gate.get("frac_lt_0.5"), "gate_gt_0.99": gate.get("frac_gt_0.99"),
                        "gate_min": gate.get("min"), "gate_max": gate.get("max")})
    return out


def write_table(root: Path) -> None:
    import pandas as pd

    from probe.core.atomic import write_text

    rows = trajectory_rows(root)
    if rows:
        write_text(root / "trajectory.csv", pd.DataFrame(rows).to_csv(index=False))


BASE_NAME = "SmolLM2-135M"


def write_report(root: Path, base_gguf: Path, rows, base_point: dict) -> int:
    """ROOT/report/: probe report of the base and every arm's last measured model (their run
    directories, each with its trajectory.csv and training.csv), claims table included."""
    import pandas as pd

    from probe.core.atomic import write_text
    from probe.api.cli import main as probe_cli
    from probe.load.loader import load
    from probe.train.loop import find_checkpoint

    runs = root / "runs"
    if not (runs / BASE_NAME / "summary.json").exists():
        measure(load(base_gguf).model, rows, base_point["sink_layers"], name=BASE_NAME, save=runs / BASE_NAME)
    table = pd.DataFrame(trajectory_rows(root))
    names = [BASE_NAME]
    for arm in ARMS:
        ckpt = find_checkpoint(root / arm.name)
        if not (runs / arm.name / "summary.json").exists():
            if ckpt is None:
                continue
            say(f"measuring {arm.name} at step {done_steps(root / arm.name)} for the report")
            measure(load(ckpt).model, rows, base_point["sink_layers"], name=arm.name, save=runs / arm.name)
        names.append(arm.name)
        log = pd.read_csv(ckpt / "training.csv").assign(model=arm.name)
        write_text(runs / arm.name / "training.csv", log.to_csv(index=False))
    base_row = {"arm": BASE_NAME, "step": 0, "tokens": 0, **{m: base_point.get(m) for m in TRAJECTORY_METRICS}}
    table = pd.concat([table, pd.DataFrame([base_row])], ignore_index=True)
    for name in names:
        long = table[table.arm == name].melt(id_vars=["arm", "step", "tokens"], value_vars=list(TRAJECTORY_METRICS),
                                             var_name="metric").rename(columns={"arm": "model"})
        write_text(runs / name / "trajectory.csv", long.dropna(subset=["value"])
                   [["model", "step", "tokens", "metric", "value"]].to_csv(index=False))
    return probe_cli(["report", *[str(runs / n) for n in names], "--out", str(root / "report"),
                      "--format", "html", "--force",
                      "--title", "SmolLM2-135M with grafted gates, trained on a CPU (docs/grafting.md)"])


TRAJECTORY_METRICS = ("loss", "f_attn", "f_attn_sink_layers", "sink_rate", "m_act", "mean_gate")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("--root", default="graft-exp", help="where the arms go (outside git)")
    p.add_argument("--scale", type=float, default=1.0, help="train every arm to this multiple of its steps")
    p.add_argument("--arms", nargs="+", help="only these arms (default: all, in order)")
    p.add_argument("--summary", action="store_true", help="only gather trajectory.csv and print it")
    p.add_argument("--report", action="store_true",
                   help="only write ROOT/report/report.html (base and arms, trajectories, claims)")
    args = p.parse_args(argv)
    root = Path(args.root)
    root.mkdir(parents=True, exist_ok=True)
    if args.summary:
        write_table(root)
        import pandas as pd

        print(pd.DataFrame(trajectory_rows(root)).to_string(index=False))
        return 0
    import torch

    torch.set_num_threads(1)
    from probe.load.loader import load
    from probe.load.real_models import fetch

    base_gguf = fetch("smollm2", progress=say)
    prepared = prepared_data(root, base_gguf)
    rows = prepared.corpus.heldout[:ANALYSIS_ROWS]
    say(f"{len(prepared.corpus.train):,} training rows, {len(prepared.corpus.heldout):,} held-out rows of {SEQ_LEN}")
    if not (root / "base.json").exists():
        write_json(root / "base.json", measure(load(base_gguf).model, rows, None))
    base_point = json.loads((root / "base.json").read_text())
    say(f"base: loss {base_point['loss']:.4f}, F-Attn {base_point['f_attn']:.4f}, sink layers "
        f"{base_point['sink_layers']}, M-Act {base_point['m_act']:.0f}")
    if args.report:
        return write_report(root, base_gguf, rows, base_point)
    for arm in ARMS:
        if args.arms and arm.name not in args.arms:
            continue
        run_arm(arm, root, base_gguf, prepared, rows, base_point, math.ceil(arm.steps * args.scale))
    write_table(root)
    say("all arms done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
