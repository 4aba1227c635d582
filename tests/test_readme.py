"""README is the front door (the developers' guide): a page a newcomer reads in five minutes, linking every page of
docs/ so that nothing moved out of it is out of reach; links into docs/ name files and anchors that exist."""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
LINK = re.compile(r"\]\(((?:docs|benchmarks|examples)/[^)#\s]+)(?:#([^)\s]+))?\)")
RELATIVE = re.compile(r"\]\(((?:\.\./)?[\w./-]+\.md)(?:#([^)\s]+))?\)")


def _anchors(md: str) -> set[str]:
    """GitHub's heading anchors (lower-cased, punctuation dropped, spaces to hyphens) and explicit `<a id=...>`s."""
    return ({re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in re.findall(r"^#+ (.*)$", md, re.M)}
            | set(re.findall(r'<a id="([^"]+)">', md)))


def test_readme_is_a_five_minute_page():
    assert len(README.splitlines()) <= 220


def test_readme_links_every_docs_page():
    linked = {m.group(1) for m in LINK.finditer(README)}
    missing = sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md")
                     if str(p.relative_to(REPO)) not in linked)
    assert not missing, f"README links no {missing}"


def _check_link(target: Path, anchor: str | None, shown: str) -> None:
    assert target.exists(), shown
    if anchor:
        assert anchor in _anchors(target.read_text(encoding="utf-8")), shown


def test_readme_links_land_on_files_and_headings_that_exist():
    for m in LINK.finditer(README):
        _check_link(REPO / m.group(1), m.group(2), m.group(0))


def test_docs_speed_links_land_on_files_and_headings_that_exist():
    """docs/speed.md is README's former Speed section: its links, now relative to docs/, still land."""
    for m in RELATIVE.finditer((REPO / "docs" / "speed.md").read_text(encoding="utf-8")):
        _check_link(REPO / "docs" / m.group(1), m.group(2), m.group(0))
