"""Gate statistics by token type: which tokens get closed gates?

Every position falls in exactly one built-in type:

  first        position 0 of a sequence (whatever token sits there: BOS or text)
  special      a special token of the tokenizer (BOS, EOS, pad, ...) elsewhere
  whitespace   a token that decodes to whitespace only (" ", "\\n", "\\t\\t")
  digits       digits only, perhaps with surrounding whitespace (" 2025")
  punctuation  punctuation or symbols only (".", " (", "});")
  word_start   letters (apostrophes, hyphens, digits inside allowed) after a space or word
               boundary marker (" the", "▁the", "Ġthe")
  word_piece   letters that continue a word ("ing" in "gat|ing")
  other        everything else (mixed tokens, partial UTF-8 bytes, ids without a tokenizer)

and in any number of user groups (`{"name": ["token", 123, ...]}` in a JSON file: strings are
matched against the tokenizer's token strings and decoded texts, with or without surrounding
whitespace; integers are token ids). User groups count every position, including position 0.

`TokenGroups` holds a (vocab, groups) membership table; the streaming reducer fed from the gate
scores is metrics/token_types/'s `TokenGroupGateStats`, one per gated layer.
"""
from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import torch

from ..core.errors import ProbeError, flag
from ..core.token_type_names import TOKEN_TYPES as BUILTIN  # the token_type values of gates_by_token_type.csv
SPACE_MARKERS = ("Ġ", "▁", "Ċ", "ĉ")      # byte-level BPE and sentencepiece word-boundary markers


def classify(raw: str | None, text: str | None, special: bool = False) -> str:
    """Built-in type of a token (never "first": that depends on the position).

    raw: the tokenizer's token string (`convert_ids_to_tokens`); text: its decoded text.
    """
    if special:
        return "special"
    if raw and all(c in SPACE_MARKERS or c.isspace() for c in raw):
        return "whitespace"                     # "▁" decodes to "" in sentencepiece tokenizers
    if text is None or text == "" or "\ufffd" in text:
        return "other"
    core = text.strip()
    if not core:
        return "whitespace"
    if all(c.isdigit() for c in core):
        return "digits"
    if all(unicodedata.category(c)[0] in "PS" for c in core):
        return "punctuation"
    if any(c.isalpha() for c in core) and all(c.isalnum() or c in "'’-_" for c in core):
        leading = text[:1].isspace() or (raw or "")[:1] in SPACE_MARKERS
        return "word_start" if leading else "word_piece"
    return "other"


class TokenGroups:
    """Which groups each token id belongs to: built-in types first, then user groups."""

    def __init__(self, names: list[str], table: torch.Tensor):
        self.names = list(names)            # BUILTIN + user group names
        self.table = table                  # (V, G) bool; the "first" column is unused here
        self.first = self.names.index("first")
        self._on = {table.device: table}    # copies on the devices the layers sit on

    @classmethod
    def build(cls, tokenizer, vocab_size: int, user_groups=None, ids=None) -> "TokenGroups":
        """Classify the vocabulary (only `ids` when given: the tokens the data holds)."""
        groups = read_groups(user_groups)
        clash = sorted(set(groups) & set(BUILTIN))
        if clash:
            raise ProbeError(f"token group name {', '.join(clash)} is a built-in type; "
                             f"choose another name (built-in: {', '.join(BUILTIN)})")
        names = list(BUILTIN) + list(groups)
        table = torch.zeros(vocab_size, len(names), dtype=torch.bool)
        other = names.index("other")
        table[:, other] = True
        wanted = range(vocab_size) if ids is None else sorted({int(i) for i in ids if 0 <= int(i) < vocab_size})
        if tokenizer is not None and len(wanted):
            raws, texts = _strings(tokenizer, list(wanted))
            special = set(getattr(tokenizer, "all_special_ids", []) or [])
            for tid, raw, text in zip(wanted, raws, texts):
                kind = classify(raw, text, tid in special)
                if kind != "other":
                    table[tid, other] = False
                    table[tid, names.index(kind)] = True
        for g, (group, members) in enumerate(groups.items()):
            column = len(BUILTIN) + g
            for tid in resolve_members(group, members, tokenizer, vocab_size):
                table[tid, column] = True
        return cls(names, table)

    def membership(self, tok: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """(N, G) bool for tokens `tok` at positions `pos` (both (N,))."""
        table = self._on.get(tok.device)
        if table is None:
            table = self._on[tok.device] = self.table.to(tok.device)
        m = table[tok.clamp(0, table.shape[0] - 1)]                      # (N, G), a copy
        at0 = pos == 0
        m[at0, : len(BUILTIN)] = False                 # position 0 is "first", whatever the token
        m[:, self.first] = at0
        return m


def _strings(tokenizer, ids: list[int]) -> tuple[list[str | None], list[str | None]]:
    size = len(tokenizer) if hasattr(tokenizer, "__len__") else None
    ok = [i for i in ids if size is None or i < size]
    raws = dict(zip(ok, tokenizer.convert_ids_to_tokens(ok)))
    texts = dict(zip(ok, tokenizer.batch_decode([[i] for i in ok], clean_up_tokenization_spaces=False)))
    return [raws.get(i) for i in ids], [texts.get(i) for i in ids]


def read_groups(source) -> dict[str, list]:
    """User token groups from a dict, a JSON file path or None."""
    if source is None:
        return {}
    if isinstance(source, (str, Path)):
        path = Path(source)
        if not path.exists():
            raise ProbeError(f"token groups file {path} does not exist")
        from .documents import read_bytes, parse_json

        try:
            source = parse_json(read_bytes(path, what="token groups file").decode("utf-8"),
                                f"token groups file {path}")
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ProbeError(f"token groups file {path} is not valid JSON ({err})") from None
    if not isinstance(source, dict) or not source:
        raise ProbeError('token groups must be a JSON object of group name -> list of tokens or ids, '
                         'e.g. {"newline": ["\\n"], "the": [" the", "The"]}')
    out = {}
    for name, members in source.items():
        if isinstance(members, (str, int)):
            members = [members]
        if not isinstance(members, list) or not members or \
                not all(isinstance(m, (str, int)) and not isinstance(m, bool) for m in members):
            raise ProbeError(f"token group {name!r} must be a non-empty list of token strings or ids")
        out[str(name)] = members
    return out


def describe_groups(source) -> dict | None:
    """What meta.json records of the user's token groups: where they came from (the file as
    given, or "<dict>") and their names; None when there were none."""
    if source is None:
        return None
    where = str(source) if isinstance(source, (str, Path)) else "<dict>"
    return {"source": where, "groups": list(read_groups(source))}


def resolve_members(group: str, members: list, tokenizer, vocab_size: int) -> list[int]:
    """Token ids of a user group; every member must name at least one token."""
    ids, strings = [], []
    for m in members:
        if isinstance(m, int):
            if not 0 <= m < vocab_size:
                raise ProbeError(f"token group {group!r}: id {m} is outside the vocabulary of {vocab_size}")
            ids.append(m)
        else:
            strings.append(m)
    if strings:
        if tokenizer is None:
            raise ProbeError(f"token group {group!r} names tokens by string but there is no tokenizer; "
                             f"give token ids instead, or pass {flag('tokenizer', metavar='DIR')}")
        every = list(range(min(vocab_size, len(tokenizer))))
        raws, texts = _strings(tokenizer, every)
        for s in strings:
            hit = [i for i, raw, text in zip(every, raws, texts)
                   if raw == s or text == s or (s.strip() and text is not None and text.strip() == s.strip())]
            if not hit:
                encoded = tokenizer(s, add_special_tokens=False)["input_ids"]
                hit = encoded if len(encoded) == 1 else []
            if not hit:
                raise ProbeError(f"token group {group!r}: {s!r} is not a token of this tokenizer "
                                 "(it splits into several); list its pieces or their ids")
            ids += hit
    return sorted(set(ids))
