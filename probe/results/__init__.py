"""The run directory: its schema, the one reader of its files, Analysis in memory, run names."""
