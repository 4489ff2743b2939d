"""The command line's report options (--pair, --group), checked against the runs, and what
`probe compare` / `probe report` print of the claims and the paired differences. No torch:
reports/ does the work."""
from __future__ import annotations

from ..core.errors import ProbeError, printable

PAIR_HELP = ("a gated model and its own baseline, by their names, for the claims' verdicts (arms of one "
             "probe train run and a graft with its base pair themselves; other pairs are not comparable)")
GROUP_HELP = ("runs that differ only in seed, by their names, shown as mean and interval over seeds (probe "
              "train arms and grafts that differ only in seed are grouped without it)")


def pairs_of(texts, runs, names=None):
    """--pair BASE:GATED ... checked against the runs (or only their names, before the passes)."""
    if not texts:
        return None
    from probe.reports.claims.pairs import check_declared, parse_pairs
    from probe.reports.runs import load_runs

    try:
        pairs = parse_pairs(texts)
        if runs is None:
            unknown = [n for pair in pairs for n in pair if n not in names]
            if unknown:
                raise ValueError(f"--pair names {unknown[0]!r}, which is none of the models ({', '.join(names)})")
        else:
            check_declared(load_runs(runs), pairs)
    except ValueError as err:
        raise ProbeError(str(err)) from None
    return pairs


def groups_of(texts, runs):
    """--group NAME:RUN,RUN ... checked against the runs' names."""
    if not texts:
        return None
    from probe.reports.runs import load_runs
    from probe.reports.seeds import parse_groups, seed_groups

    try:
        return seed_groups(load_runs(runs), parse_groups(texts))
    except ValueError as err:
        raise ProbeError(str(err)) from None


def print_claims(analyses, pairs=None) -> None:
    """The paper's claims checked on these models (Analysis objects or run directories;
    reports/claims/rules.py has the rules)."""
    from probe.reports.claims import claims_table
    from probe.reports.claims.console import claims_text

    print()
    print(claims_text(claims_table(analyses, pairs=pairs)))


def print_differences(analyses, pairs=None) -> None:
    """`probe compare`: each gated model against its matched baseline, or each model against the
    first where no pair is matched; paired bootstrap (reports/differences.py)."""
    from probe.reports.differences import differences_table, differences_text

    text = differences_text(differences_table(analyses, pairs))
    if text:
        print()
        print(text)


def print_between(runs) -> None:
    """The gated − ungated table of every gated run and ungated run that read the same token ids
    and ran the same sink ablations (Analysis objects, run directories or a Runs):
    reports/ablation_pairs.py computes it, probe/api/ablation_console.py lays it out."""
    from probe.reports.ablation_pairs import between_models
    from .ablation_console import between_lines

    lines = between_lines(between_models(runs))
    if lines:
        print("\n".join(lines))


def print_intervals(analyses) -> None:
    """One line per run: the 95% intervals beside the summary's numbers (summary.json *_lo / *_hi)."""
    from ..results.number_text import fmt     # not probe.reports: it loads matplotlib

    for a in analyses:
        s, how = a.summary, a.summary.get("intervals") or {}
        parts = [f"{label} [{fmt(s[key + '_lo'])}, {fmt(s[key + '_hi'])}]"
                 for key, label in (("f_attn", "F-Attn"), ("sink_rate", "sink rate"), ("mean_gate", "mean gate"),
                                    ("m_act", "M-Act"), ("loss", "loss"))
                 if s.get(key + "_lo") is not None and s.get(key + "_hi") is not None]
        an = s.get("anatomy") or {}
        parts += [f"{label} [{fmt(an[key + '_lo'])}, {fmt(an[key + '_hi'])}]"
                  for key, label in (("key0_score", "key-0 score"), ("secondary_sinks", "secondary sinks"))
                  if an.get(key + "_lo") is not None and an.get(key + "_hi") is not None]
        gdn = s.get("gdn") or {}
        if gdn.get("key0_share_lo") is not None and gdn.get("key0_share_hi") is not None:
            parts.append(f"GDN key-0 share [{fmt(gdn['key0_share_lo'])}, {fmt(gdn['key0_share_hi'])}]")
        if parts:
            print(f"{printable(s.get('model'))}: 95% intervals over {how.get('sequences')} sequences "
                  f"({how.get('resamples')} bootstrap resamples): " + ", ".join(parts))
        elif how.get("why_none"):
            print(f"{printable(s.get('model'))}: no intervals ({how['why_none']})")
