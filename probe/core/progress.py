"""Progress bars: tqdm.auto's (a widget in notebooks, text on a terminal) that leave nothing
behind when they close.

A notebook keeps the plain-text copy Jupyter took of a widget when it first appeared, so a
saved notebook read later (on GitHub, in nbviewer, in a kernel without the widget's state)
showed "analyse headwise:   0%|" under every finished analysis. In a notebook the bar here is
displayed under a display id and its output replaced by nothing when it closes: the saved
notebook holds no bar, as a terminal's finished bar leaves no line.
"""
from __future__ import annotations


def bar(**kwargs):
    """tqdm.auto.tqdm(leave=False, **kwargs), its notebook output cleared when it closes."""
    from tqdm.auto import tqdm

    kwargs.setdefault("leave", False)
    in_notebook = any(cls.__module__ == "tqdm.notebook" for cls in tqdm.__mro__)   # tqdm.auto chose the widget
    if not in_notebook or kwargs["leave"]:
        return tqdm(**kwargs)
    return _cleared_on_close(tqdm)(**kwargs)


def _cleared_on_close(base):
    from IPython.display import display

    class ClearedOnClose(base):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, display=False, **kwargs)
            container = getattr(self, "container", None)     # none where the bar is disabled
            self._handle = display(container, display_id=True) if container is not None else None

        def close(self):
            super().close()
            handle, self._handle = getattr(self, "_handle", None), None
            if handle is not None:
                handle.update({"text/plain": ""}, raw=True)

    return ClearedOnClose
