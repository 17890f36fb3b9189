"""Every text that numbers a tier numbers it as ``solaris/tiers.py`` does.

Why: the tiers were renumbered when tiers 2, 5 and 6 were added; module docstrings and ``--help``
texts that kept the old numbers told users that imputation is tier 3 while ``solaris --help`` and
the resolver's codes say 4. The check reads every ``tier N`` (``tier-N``, ``Tier N``) in the code's
docstrings, comments and help strings and in the documents, finds the tier named next to it (the
nearest naming phrase within the same clause, or the words before a ``(tier N)``) and compares the
two numbers. A mention with no naming phrase close by ("tier 1 17.5 %") is not checked: only a
number *and* a name can disagree.
"""

import re
from pathlib import Path

import pytest

from solaris.tiers import TIER_IMPUTED, TIER_IMPUTED_ITEM, TIER_ITEM, TIER_NEIGHBOR_PAIR, TIER_USER

ROOT = Path(__file__).resolve().parents[2]

# Phrases that name one tier, each tied to its code. Ordered longest first where one contains another.
NAMING_PHRASES: tuple[tuple[str, int], ...] = (
    ("imputed item", TIER_IMPUTED_ITEM),
    ("nearest items", TIER_IMPUTED_ITEM),
    ("item space", TIER_IMPUTED_ITEM),
    ("item aggregate", TIER_ITEM),
    ("item's pair embeddings", TIER_ITEM),
    ("per-item mean", TIER_ITEM),
    ("neighbour pair", TIER_NEIGHBOR_PAIR),
    ("neighbours' pair", TIER_NEIGHBOR_PAIR),
    ("imputed user", TIER_IMPUTED),
    ("impute an embedding for users", TIER_IMPUTED),
    ("imputation", TIER_IMPUTED),
    ("impute users", TIER_IMPUTED),
    ("user aggregate", TIER_USER),
    ("per-user mean", TIER_USER),
    ("user's pair embeddings", TIER_USER),
    ("mean of each user", TIER_USER),
)
MENTION = re.compile(r"\b[Tt]ier[- ](\d)\b")
# Where the words about a mention end: punctuation, another mention, or a word that relates it to another
# tier ("tier 6 reads the item aggregates", "tier 6, after the item aggregate"). A name past that is not its name.
CLAUSE_END = re.compile(r"[,;.\n)(]|\btier[- ]\d|\b(reads|after|before|than|misses|covers|borrows)\b")
REACH = 60  # characters after the number searched for a naming phrase


def mismatches(text: str) -> list[str]:
    """``tier N`` mentions of ``text`` whose naming phrase names another tier, as readable lines."""
    found = []
    for match in MENTION.finditer(text):
        if text[match.start() - 1:match.start()] == "(":  # "user aggregates (tier 3)": the name stands before
            before = text[max(0, match.start() - 1 - REACH):match.start() - 1]
            clause = re.split(r"[,;.\n)(:]", before)[-1].lower()
            named = [(-clause.rfind(phrase), code) for phrase, code in NAMING_PHRASES if phrase in clause]
        else:
            after = text[match.end():match.end() + REACH]
            end = CLAUSE_END.search(after)
            clause = (after[:end.start()] if end else after).lower()
            named = [(clause.find(phrase), code) for phrase, code in NAMING_PHRASES if phrase in clause]
        if not named:
            continue
        _, code = min(named)  # the phrase nearest to the number
        if int(match.group(1)) != code:
            line = text.count("\n", 0, match.start()) + 1
            found.append(f"line {line}: {match.group(0)!r} beside {clause.strip()!r}, which names tier {code}")
    return found


def _texts() -> list[Path]:
    code = [p for folder in ("solaris", "jobs", "udfs", "dags") for p in sorted((ROOT / folder).rglob("*.py"))]
    return code + [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("path", _texts(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_numbered_tier_is_the_tier_it_names(path: Path) -> None:
    assert mismatches(path.read_text(encoding="utf-8")) == []


def test_the_check_catches_an_old_number_and_leaves_bare_numbers_alone() -> None:
    assert mismatches('"""Tier 3: impute an embedding for users without an aggregate."""')
    assert mismatches("user aggregates (tier 2), user neighbours (KNN) and imputed users (tier 4).")
    assert mismatches("user aggregates (tier 3), user neighbours (KNN) and imputed users (tier 4).") == []
    assert mismatches("tier 2 user aggregates, tier 4 imputation")
    assert mismatches("tier 3 user aggregates, tier 4 imputation") == []
    assert mismatches("and imputation from the FM's item space (tier 6).") == []
    assert mismatches("tier 1 17.5 %, tiers 1-2 22.2 %") == []
    assert mismatches("got a tier-3 value for an imputed user")
    assert mismatches("tier 6 reads the item aggregates, tier 6, after the item aggregate") == []
