"""docs/security.md's table of secret-like paths names every rule of scvd/tools/secret_paths.py."""

from pathlib import Path

from scvd.tools import secret_paths as sp

DOC = Path(__file__).resolve().parents[1] / "docs" / "security.md"


def test_every_secret_like_rule_is_in_the_table():
    section = DOC.read_text().split("\n### Secret-like paths\n", 1)[1].split("\n## ", 1)[0]
    rules = [line.split(" | ")[0] for line in section.splitlines() if line.startswith("| ")]
    wanted = [*(f"`{name}`" for name in sp.SECRET_NAMES), *(f"`{d}/`" for d in sp.SECRET_DIRS),
              *(f"`{word}`" for word in sp.SECRET_WORDS), *(f"`{prefix}*`" for prefix in sp.SECRET_PREFIXES),
              *(f"`*{suffix}`" for suffix in sp.SECRET_SUFFIXES)]
    missing = [w for w in wanted if not any(w in rule for rule in rules)]
    # a name flagged only in its directory: the rule that names it names the directory too
    missing += [f"{d}/{name}" for d, name in sp.SECRET_FILES_IN
                if not any(name in rule and f"{d}/" in rule for rule in rules)]
    assert len(wanted) >= 40
    assert not missing, f"docs/security.md's secret-like table does not name {missing}"
