"""Gate statistics by token type, against a direct computation from recorded gate logits."""
from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

import probe
from tests.samples import TEXT
from probe.metrics.token_types.reduce import TokenGroupGateStats
from probe.data.token_types import BUILTIN, TokenGroups, classify
from tests.reference import recorded


@pytest.mark.parametrize("raw,text,special,kind", [
    ("Ġthe", " the", False, "word_start"),
    ("▁the", "the", False, "word_start"),
    ("ing", "ing", False, "word_piece"),
    ("Ġdon't", " don't", False, "word_start"),
    (".", ".", False, "punctuation"),
    ("Ġ(", " (", False, "punctuation"),
    ("});", "});", False, "punctuation"),
    ("Ġ2025", " 2025", False, "digits"),
    ("Ċ", "\n", False, "whitespace"),
    ("▁", "", False, "whitespace"),
    ("ĠĠ", "  ", False, "whitespace"),
    ("<s>", "<s>", True, "special"),
    ("x2", "x2", False, "word_piece"),
    ("a.b", "a.b", False, "other"),
    ("\ufffd", "\ufffd", False, "other"),
])
def test_classify(raw, text, special, kind):
    assert classify(raw, text, special) == kind


def direct_type_means(lm, ids, groups_of) -> dict[tuple[int, str, int], tuple[int, float]]:
    """(layer, group, head) -> (count, mean) from full recorded gate logits, one token at a time."""
    spec, L = lm.layout.gate, lm.layout
    with torch.no_grad(), recorded(lm.model, L) as rec:
        lm.model(input_ids=ids, use_cache=False)
    out = {}
    for layer, gate_out in rec["gate_out"].items():
        scores = spec.scores(gate_out, L.num_heads, L.num_kv_heads, L.head_dim)    # (B, T, H, Dg)
        acc: dict = {}
        for b in range(ids.shape[0]):
            for t in range(ids.shape[1]):
                for g in groups_of(int(ids[b, t]), t):
                    for h in range(L.num_heads):
                        s = acc.setdefault((layer, g, h), [0, 0.0])
                        s[0] += scores.shape[-1]
                        s[1] += float(scores[b, t, h].double().sum())
        out.update({k: (n, total / n) for k, (n, total) in acc.items()})
    return out


@pytest.mark.parametrize("kind", ["official_elementwise", "qwen3_next"])
def test_by_type_means_match_a_direct_computation(kind, loaded):
    lm = loaded(kind)
    tok = lm.tokenizer
    ids = torch.tensor([tok(TEXT[:200], add_special_tokens=False)["input_ids"][:40],
                        tok(TEXT[200:400], add_special_tokens=False)["input_ids"][:40]])
    vocab = lm.model.config.vocab_size
    user = {"period": ["."], "the": [" the", "The"], "ids": [5, 6]}
    groups = TokenGroups.build(tok, vocab, user, ids=ids.unique().tolist())
    cap = probe.Capture(lm.model, lm.layout, token_groups=groups)
    with torch.no_grad(), cap, cap.batch(ids):
        lm.model(input_ids=ids, use_cache=False)

    special = set(tok.all_special_ids)
    the_ids = {i for i in range(len(tok)) if tok.decode([i]).strip() == "the" or tok.decode([i]) == "The"}

    def groups_of(tid, pos):
        raw, text = tok.convert_ids_to_tokens(tid), tok.decode([tid], clean_up_tokenization_spaces=False)
        out = ["first" if pos == 0 else classify(raw, text, tid in special)]
        if text.strip() == ".":
            out.append("period")
        if tid in the_ids:
            out.append("the")
        if tid in (5, 6):
            out.append("ids")
        return out

    direct = direct_type_means(lm, ids, groups_of)
    frame = cap.tables("m")["gates_by_token_type"]
    assert list(frame.columns) == ["model", "layer", "head", "token_type", "metric", "value"]
    table = {(int(r.layer), str(r.token_type), int(r.head), str(r.metric)): r.value for r in frame.itertuples()}
    for (layer, group, head), (n, mean) in direct.items():
        assert table[(layer, group, head, "count")] == n, (layer, group, head)
        assert table[(layer, group, head, "mean")] == pytest.approx(mean, abs=1e-6), (layer, group, head)
    layer = lm.layout.attention_layers[0]
    tokens = {t: v for (l, t, h, m), v in table.items() if l == layer and h == 0 and m == "tokens"}
    assert tokens["first"] == 2
    assert sum(tokens.get(t, 0) for t in BUILTIN) == ids.numel()
    assert tokens["period"] > 0 and tokens["the"] > 0


def test_analyze_writes_gates_by_token_type(checkpoint, text_file, tmp_path):
    from probe.api.cli import main

    groups = tmp_path / "groups.json"
    groups.write_text(json.dumps({"brackets": ["(", ")", "[", "]"], "never_seen": [250]}))
    out = tmp_path / "run"
    assert main(["analyze", str(checkpoint("official_headwise")), "--data", str(text_file), "--seq-len", "32",
                 "--max-sequences", "3", "--out", str(out), "--quiet", "--token-groups", str(groups)]) == 0
    frame = pd.read_csv(out / "gates_by_token_type.csv")
    types = set(frame.token_type)
    assert {"first", "whitespace", "punctuation", "digits", "word_start", "brackets", "never_seen"} <= types
    never = frame[(frame.token_type == "never_seen") & (frame.metric == "tokens")]
    assert (never.value == 0).all()
    first = frame[(frame.token_type == "first") & (frame.metric == "tokens")]
    assert (first.value == 3).all()
    meta = json.loads((out / "meta.json").read_text())          # which file the groups came from
    assert meta["token_groups"] == {"source": str(groups), "groups": ["brackets", "never_seen"]}


def test_baseline_has_no_gate_table(checkpoint, text_file, tmp_path):
    a = probe.analyze(checkpoint("qwen3"), text_file, seq_len=16, max_sequences=1, progress=False)
    assert len(a.gates_by_token_type) == 0
    assert a.meta["token_groups"] is None


@pytest.mark.parametrize("groups,match", [
    ({"digits": ["1"]}, "built-in type"),
    ({"x": ["not-a-single-token-zzzz"]}, "is not a token"),
    ({"x": [100000]}, "outside the vocabulary"),
    ({"x": []}, "non-empty list"),
    ([1, 2], "JSON object"),
])
def test_bad_token_groups_are_one_clear_error(groups, match, loaded):
    lm = loaded("official_headwise")
    with pytest.raises(probe.ProbeError, match=match):
        TokenGroups.build(lm.tokenizer, 256, groups)


def test_string_groups_need_a_tokenizer():
    with pytest.raises(probe.ProbeError, match="no tokenizer"):
        TokenGroups.build(None, 256, {"x": ["the"]})
    groups = TokenGroups.build(None, 256, {"x": [3]})
    m = groups.membership(torch.tensor([3, 3, 4]), torch.tensor([0, 1, 2]))
    names = groups.names
    assert m[:, names.index("x")].tolist() == [True, True, False]
    assert m[:, names.index("first")].tolist() == [True, False, False]
    assert m[:, names.index("other")].tolist() == [False, True, True]


def test_reducer_skips_nonfinite_scores():
    stats = TokenGroupGateStats(2, ["a", "b"])
    scores = torch.tensor([[[0.2], [0.4]], [[float("nan")], [0.6]], [[0.8], [1.0]]])
    groups = torch.tensor([[True, False], [True, True], [False, True]])
    stats.update(scores, groups)
    rows = {(r["token_type"], r["head"], r["metric"]): r["value"] for r in stats.rows()}
    assert rows[("a", 0, "count")] == 1 and rows[("a", 0, "mean")] == pytest.approx(0.2)
    assert rows[("b", 0, "mean")] == pytest.approx(0.8) and rows[("b", 1, "mean")] == pytest.approx(0.8)
    assert int(stats.nonfinite.sum()) == 2
