"""Registries that refuse a key registered twice (the model families, the metrics): a second
registration would silently take the first one's place, so that the family or metric that
loses depends on the order files are read in. The error names both places in one line."""
from __future__ import annotations


class DuplicateRegistration(ValueError):
    """A key registered twice."""


def unique(entries, what: str) -> dict:
    """key -> value of `entries`, (key, value, place) triples in order; a key that comes twice is
    refused: "<what> 'key' is registered twice: in <place 1> and in <place 2>"."""
    found: dict = {}
    places: dict = {}
    for key, value, place in entries:
        if key in found:
            raise DuplicateRegistration(f"{what} {key!r} is registered twice: in {places[key]} and in {place}")
        found[key], places[key] = value, place
    return found
