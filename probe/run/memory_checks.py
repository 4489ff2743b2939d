"""The memory checks of a pass: before the model is loaded (from its config, one sequence, so
that a length no batch size can fit is refused at once) and before the pass (the batch as
built). memory.py has the prediction and where the limit comes from."""
from __future__ import annotations

from pathlib import Path

from ..load import memory
from ..load.gguf import gguf_file
from ..core.errors import ProbeError
from ..capture.logits import LAZY_BYTES
from ..core.options import DTYPE_NAMES


def _bytes(dtype: str) -> int:
    return 4 if dtype == "float32" else 2


def _logit_rows(vocab: int, batch: int, length: int, dtype_bytes: int) -> int | None:
    """Logit rows alive at once: all of them, or (block by block, logits.py) about one block."""
    if batch * length * vocab * dtype_bytes <= LAZY_BYTES:
        return None
    from ..metrics.loss.reduce import LossStats

    return batch + max(1, LossStats.BLOCK // max(vocab, 1))


def read_config(path: Path):
    """The config a checkpoint folder or GGUF file declares, or None when it cannot be read
    (load then says what is wrong, in its own words)."""
    from transformers import AutoConfig

    from ..load import gguf
    from ..load.loader import quiet_transformers

    try:
        with quiet_transformers():
            file = gguf.gguf_file(path)
            if file is not None:
                return AutoConfig.from_pretrained(str(file.parent), gguf_file=file.name)
            return AutoConfig.from_pretrained(str(path)) if (path / "config.json").is_file() else None
    except (ProbeError, Exception):
        return None


def check_structure(path: Path) -> None:
    """The checks of the files themselves that load runs first (checkpoint_files, gguf.read_info:
    truncation, a layer count the weights do not hold), run before the estimate, which builds
    the model the config describes on the meta device: a config or GGUF block_count claiming
    100,000 layers beside the weights of 4 is refused in its own words, at once, not after
    100,000 layers were built to count parameters."""
    from ..load import gguf
    from ..load.checkpoint_files import check_checkpoint_dir

    file = gguf.gguf_file(path)
    if file is not None:
        gguf.read_info(file)
    elif path.is_dir() and (path / "config.json").is_file():
        check_checkpoint_dir(path)


def before_loading(path, o, dtype: str) -> None:
    """Refuse a length that one sequence cannot fit, before the weights are read."""
    from ..load import rope
    from ..families.registry import model_class, text_config

    if dtype not in DTYPE_NAMES:
        return
    check_structure(Path(path))
    config = read_config(Path(path))
    if config is None or dtype not in DTYPE_NAMES:
        return
    c = text_config(config)
    if o.rope_scaling is not None and rope.rope_of(c) is not None:
        rope.apply(c, o.rope_scaling)
    length = o.max_length or o.seq_len
    positions = getattr(c, "max_position_embeddings", None)
    if positions and not o.past_positions:
        length = min(length, positions)
    size = _bytes(dtype)
    gguf = gguf_file(Path(path)) is not None
    try:
        memory.check(config, batch=1, length=length, dtype_bytes=size,
                     params=memory.parameter_count(config, model_class(config)),
                     weight_copies=2 if gguf else 1,
                     logits_rows=_logit_rows(getattr(c, "vocab_size", 0) or 0, 1, length, size),
                     when=" (checked before loading the model)")
    except ProbeError:
        # A config.json whose sizes are missing (transformers' defaults: a 40 GB model) or wrong
        # predicts memory for weights the folder does not hold: say that, not "free memory".
        if not gguf:
            from ..load.checkpoint_files import shape_mismatch

            mismatch = shape_mismatch(Path(path), config, model_class(config))
            if mismatch is not None:
                raise ProbeError(mismatch) from None
        raise


def before_pass(loaded, dataset, o) -> tuple[int, int]:
    """(batch, length) of the pass's largest batch, refused when it cannot fit."""
    from ..families.registry import text_config

    batch = min(o.batch_size, len(dataset.sequences))
    length = dataset.longest
    model = loaded.model
    size = next(model.parameters()).element_size()
    vocab = getattr(text_config(model.config), "vocab_size", 0) or 0
    memory.check(model.config, batch=batch, length=length, dtype_bytes=size, params=None,
                 logits_rows=_logit_rows(vocab, batch, length, size))
    return batch, length
