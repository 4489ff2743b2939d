"""A forward pass turned into events: the event names, the bus, the Hugging Face source (hf.py,
with the `probe` attention back-end) and the TransformerLens source (bridge.py)."""
