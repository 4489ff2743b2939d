"""probe: mechanistic analysis of gated attention.

    import probe
    analysis = probe.analyze("path/to/checkpoint", "data.txt")
    analysis.summary["f_attn"], analysis.first_token, analysis.save("runs/model")
"""
__version__ = "0.1.0"

from .errors import ProbeError  # noqa: E402
from .gates import GateSpec  # noqa: E402
from .load import load  # noqa: E402
from .results import Analysis  # noqa: E402
from .capture import Capture  # noqa: E402
from .analyze import analyze  # noqa: E402

__all__ = ["Analysis", "Capture", "GateSpec", "ProbeError", "analyze", "load", "__version__"]
