"""The claims table as text for a terminal (`probe compare`, `probe report`): each row's verdict
and numbers; the paper's values and the rule once per claim; pairs that are not comparable in
two lines, and the pairing rule said once under them."""

from __future__ import annotations

import pandas as pd

from probe.reports.claims import NO_GATED
from probe.reports.claims.pairs import NOT_COMPARABLE

PAIRING_RULE = ("Claims 3-4 compare a gated model only with its own baseline: the same token ids, and the "
                "arms of one probe train run, a graft and its base, or a pair given with --pair BASE:GATED.")


def claims_text(table: pd.DataFrame) -> str:
    """The table as indented text blocks (reports.claims.claims_table's frame)."""
    if len(table) and table["verdict"].str.endswith(NO_GATED).all():
        return f"Claims of the paper: {NO_GATED}."
    lines = ["Claims of the paper, checked in direction (probe.reports.claims_table; thresholds in "
             "reports/claims/rules.py; brackets: 95% intervals over sequences):"]
    explained, unpaired = set(), False
    for values in table.to_dict("records"):
        lines.append(f"[{values['claim']}] {values['statement']} ({values['models']}): "
                     f"{values['verdict']}")
        lines.append(f"    these runs: {values['these runs']}")
        if values["verdict"].startswith(NOT_COMPARABLE):
            unpaired = True
        elif values["claim"] not in explained:       # the same for every row of one claim
            explained.add(values["claim"])
            lines.append(f"    paper:      {values['paper']}")
            lines.append(f"    rule:       {values['rule']}")
    if unpaired:
        lines.append(PAIRING_RULE)
    return "\n".join(lines)
