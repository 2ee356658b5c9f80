"""README.md's Layout names every module, so a new colleague finds each one's job there."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def layout_block() -> str:
    return (ROOT / "README.md").read_text().split("## Layout", 1)[1].split("```")[1]


def layout_entries() -> set[str]:
    block = layout_block()
    entries, package = set(), ""
    for line in block.splitlines():
        found = re.match(r"(\s*)(\S+)", line)
        if not found:
            continue
        indent, name = found.groups()
        if not indent:
            package = name if name.endswith("/") else ""
        elif package and name.endswith(".py"):
            entries.add(package + name)
    return entries


def test_every_module_is_in_the_readme_layout():
    listed = layout_entries()
    modules = {str(f.relative_to(ROOT)) for pkg in ("scvd", "scvctl") for f in (ROOT / pkg).rglob("*.py")
               if f.name not in ("__init__.py", "__main__.py") or f.parent.name == "tools"}
    missing = sorted(modules - listed)
    assert not missing, f"README.md's Layout does not list {missing}: add a line saying what each does"
    gone = sorted(listed - modules)
    assert not gone, f"README.md's Layout lists modules that do not exist: {gone}"


def kept(folder: Path) -> bool:
    """A folder of the project itself: not a package's (their modules are listed), hidden or built."""
    parts = folder.relative_to(ROOT).parts
    return parts[0] not in ("scvd", "scvctl") and not any(
        (part.startswith(".") and part != ".ci") or part in ("__pycache__", "build", "dist")
        or part.endswith(".egg-info") for part in parts)


def test_every_folder_outside_the_packages_is_in_the_readme_layout():
    """Two levels deep: tests/helpers/ and examples/bridge/ each get a word too."""
    folders = {f"{d.relative_to(ROOT)}/" for d in [*ROOT.glob("*/"), *ROOT.glob("*/*/")] if d.is_dir() and kept(d)}
    missing = sorted(f for f in folders if f not in layout_block())
    assert not missing, f"README.md's Layout does not name the folders {missing}: say what each holds"


def test_the_bench_and_ci_lines_name_each_of_their_files():
    """bench/ and .ci/ get one line each, which names every script in them."""
    lines = {line.split()[0]: line for line in layout_block().splitlines() if line.strip()}
    for folder, pattern in (("bench/", "*.py"), (".ci/", "*")):
        names = sorted(f.name for f in (ROOT / folder).glob(pattern) if f.is_file())
        assert names, folder
        missing = [n for n in names if not re.search(rf"(?<![\w.-]){re.escape(n)}(?![\w-])", lines[folder])]
        assert not missing, f"README.md's Layout line of {folder} does not name {missing}"
