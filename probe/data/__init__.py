"""The user's data: documents read and checked, sequences, token types, the built-in corpus."""
