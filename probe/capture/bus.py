"""The event bus of one pass: `Batch` (where each row of a forward pass comes from) and `Pass`
(the metrics of the pass and their subscriptions to the events of probe/core/events.py).

A source (capture.Capture, bridge.BridgeCapture) is a Pass that also owns the model's hooks:
it emits the events, the bus hands each to the metrics that subscribed.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from ..core.events import EVENTS, LOGITS
from ..metrics import build_metrics
from ..metrics.base import Done
from ..core.options import AnalysisOptions


@dataclass
class Batch:
    """Where each row of the current forward pass comes from."""

    input_ids: torch.Tensor          # (B, T)
    valid: torch.Tensor              # (B, T) bool: positions that count (real tokens, padding on
                                     # the right is False; so is a sliding window's context)
    seq_index: torch.Tensor          # (B,) index of each row in the dataset

    def __post_init__(self):
        self.all_valid = bool(self.valid.all())
        B, T = self.input_ids.shape
        pos = torch.arange(T, device=self.input_ids.device).expand(B, T)
        seq = self.seq_index[:, None].expand(B, T)
        self.pos, self.seq, self.tok = self.rows(pos), self.rows(seq), self.rows(self.input_ids)
        self.rest_valid = self.valid[:, 1:]
        self._where = {self.input_ids.device: (self.seq, self.pos, self.tok)}
        self._derived: dict = {}
        self._held: tuple | None = None      # (x, {name: value}): what Pass.emit(keep=...) kept
        self._numpy: dict = {}

    def derived(self, name: str, x: torch.Tensor, make):
        """make(), once per event: a value derived from the event's tensor x that several
        metrics read (its row maxima, its bins: probe/metrics/bins.py), so each activation is read once
        for it. Pass.emit forgets these values after the event; another tensor gets its own."""
        seen = self._derived.get(name)
        if seen is None or seen[0] is not x:
            seen = self._derived[name] = (x, make())
        return seen[1]

    def provide(self, name: str, x: torch.Tensor, value) -> None:
        """Hand the next event's metrics a derived value made already (sink anatomy's column sums,
        made by the attention back-end with the output): derived(name, x, ...) returns it."""
        self._derived[name] = (x, value)

    def numpy(self, name: str) -> np.ndarray:
        """A CPU field of the batch (input_ids, seq_index, valid) as numpy, made once per batch:
        compiled metrics read single entries, which numpy gives at a fraction of torch's cost."""
        seen = self._numpy.get(name)
        if seen is None:
            seen = self._numpy[name] = getattr(self, name).cpu().numpy()
        return seen

    def rows(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, ...) -> (N, ...) keeping valid positions only."""
        return x.reshape(-1, *x.shape[2:]) if self.all_valid else x[self.valid.to(x.device)]

    def rest_rows(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, ...) -> valid rows at positions >= 1."""
        x = x[:, 1:]
        return x.reshape(-1, *x.shape[2:]) if self.all_valid else x[self.rest_valid.to(x.device)]

    def where(self, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(seq, pos, tok) of the valid rows, on `device` (cached: layers may sit on several GPUs)."""
        if device not in self._where:
            self._where[device] = (self.seq.to(device), self.pos.to(device), self.tok.to(device))
        return self._where[device]


class Pass:
    """The metrics of one analysis pass and the events that feed them (no model hooks here:
    a source, capture.Capture or bridge.BridgeCapture, emits the events).

    The reducers are reachable by metric name, for every declared metric: `gates[L]`,
    `first_token[L]`, `sparsity[L]`, `massive[(L, site)]`, `token_types[L]`, `loss`.
    """

    def __init__(self, layout, options=None, *, vocab_size: int | None = None, sequences: int | None = None,
                 token_groups=None, token_ids=None):
        """options: the AnalysisOptions of the pass (None: every default; the metrics read what
        they need: thresholds, anatomy, loss_by_position); vocab_size: the model's vocabulary
        (sink anatomy needs it); sequences: the dataset's row count (the per-sequence state's
        size, metrics/per_sequence/); token_groups: the data's token groups
        (pipeline.token_group_table: built from the tokenizer and the data, not an option);
        token_ids: every token id of the data, when known (the by-token tables' rows)."""
        self.layout = layout
        self.token_groups = token_groups
        self.options = AnalysisOptions() if options is None else options
        self.metrics = build_metrics(layout, self.options, vocab_size=vocab_size, sequences=sequences,
                                     token_groups=token_groups, token_ids=token_ids)
        self._subscribers: dict[str, list] = {}
        # Each metric's declared events (probe/metrics/<m>/__init__.py), those it listens to in
        # this pass, in the metrics' order: the order in which every event reaches them.
        for metric in self.metrics.values():
            for event, method in metric.declaration.events.items():
                if metric.listens(event):
                    self.on(event, getattr(metric, method))
        self._batch: Batch | None = None

    def on(self, event: str, fn) -> None:
        if event not in EVENTS:
            raise ValueError(f"unknown event {event!r}; events: {', '.join(EVENTS)}")
        self._subscribers.setdefault(event, []).append(fn)

    def wants(self, event: str) -> bool:
        """Whether a metric listens (a source may skip work nobody reads)."""
        return event in self._subscribers

    def emit(self, event: str, layer, x: torch.Tensor, *, keep: tuple[str, ...] = (),
             same_as: torch.Tensor | None = None, **extra) -> None:
        """Hand x (and `extra`) to every metric that listens to `event`.

        keep: names of values the metrics derive from x (Batch.derived: its bins, its norms) that
        stay for one later event whose tensor holds the same values, emitted with same_as=x: that
        event's metrics read them instead of deriving them again (the o_proj input of an ungated
        layer is the attention output itself, capture/hf.py). The source vouches that the values
        are the same, and names only values that do not depend on how the tensor's last
        dimensions are split; nothing derived from another tensor is carried. `forget_kept`
        drops what was kept when the later event does not come."""
        b = self._batch
        if b is None:
            return
        if same_as is not None:
            held, b._held = b._held, None
            if held is not None and held[0] is same_as:
                b._derived.update((name, (x, value)) for name, value in held[1].items())
        try:
            for fn in self._subscribers.get(event, ()):
                fn(layer, x, b, **extra)
            if keep:
                b._held = (x, {name: value for name, (source, value) in b._derived.items()
                               if source is x and name in keep})
        finally:
            b._derived.clear()

    def forget_kept(self) -> None:
        """Drop the values an emit(keep=...) kept (so that they do not outlive their layer)."""
        if self._batch is not None:
            self._batch._held = None

    # -- the reducers, by metric -----------------------------------------------------------------
    def __getattr__(self, name: str):
        """`cap.gates[L]`, `cap.first_token[L]`, `cap.massive[(L, site)]`, `cap.loss`, ...: each
        metric's reducers by the metric's name, for every declaration (probe/metrics/<m>/), none
        named here."""
        metrics = self.__dict__.get("metrics")
        if metrics is not None and name in metrics:
            return metrics[name].stats
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @contextmanager
    def batch(self, input_ids: torch.Tensor, valid: torch.Tensor | None = None,
              seq_index: torch.Tensor | None = None):
        """Declare where the rows of the next forward pass come from."""
        B = input_ids.shape[0]
        valid = torch.ones_like(input_ids, dtype=torch.bool) if valid is None else valid.bool()
        seq_index = torch.arange(B, device=input_ids.device) if seq_index is None else seq_index
        self._batch = Batch(input_ids, valid.to(input_ids.device), seq_index.to(input_ids.device))
        try:
            yield self._batch
        finally:
            self._batch = None

    @contextmanager
    def quiet(self):
        """A forward under this feeds no metric: a second forward of the batch (the model's own
        logits, capture/logits.py) is not counted twice."""
        b, self._batch = self._batch, None
        try:
            yield
        finally:
            self._batch = b

    @torch.no_grad()
    def observe_logits(self, logits: torch.Tensor) -> None:
        self.emit(LOGITS, None, logits)

    def tables(self, name: str, tokenizer=None, control=None, documents=None) -> dict:
        """{table: DataFrame} of every metric, once the pass is over (name: the model column;
        control: layer -> the exact mean-gate control's histogram, control.py; documents: per
        sequence its document, data.Dataset.documents)."""
        done = Done(name, tokenizer, self.metrics, control, documents=documents)
        return {t: frame for metric in self.metrics.values() for t, frame in metric.frames(done).items()}

    def reducers(self) -> list:
        """Every reducer, in an order that is the same in every process (for collectives)."""
        return [r for metric in self.metrics.values() for r in metric.reducers()]

    def to(self, device) -> "Pass":
        """Move every reducer's state (for example to the CPU once a GPU pass is over)."""
        for r in self.reducers():
            r.to(device)
        return self
