"""Native implementations of checkpoints whose own modeling code no longer runs."""
