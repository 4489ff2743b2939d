"""The pass over the batches, and what runs beside it: resume, torchrun, the exact control,
interventions, whole-or-nothing files."""
