"""The specifications the code cites live in docs/ (issue 45 item 5): every file that cites an equation or a section
names the document it cites, every label and section it cites is defined there, and every paper has a full
reference."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from otspec.report import SPEC_DOCUMENTS

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SPECS = SPEC_DOCUMENTS
#: An equation citation: ``eq. (8)``, ``eqs. (2)–(3)``, ``equation (11b)``.
CITE_EQ = re.compile(r"\b(?:eqs?\.|equations?) \((\d+[a-z]?)\)(?:\s*[–-]\s*\((\d+[a-z]?)\))?")
#: A section citation of a spec: ``spec §6``, ``yin_theory.md §7``, ``§8.2``.
CITE_SECTION = re.compile(r"(?:spec|\.md)\s+§(\d+(?:\.\d+)?)")


def _labels(text: str) -> set[str]:
    """The equation labels a document defines: the ``(N)`` that start a line (a displayed equation; ``(11)  (11a)``
    defines both); a family ``(14a)``–``(14c)`` also defines ``(14)``, cited for all of it."""
    heads = re.findall(r"^\s*`?((?:\(\d+[a-z]?\)\s*)+)", text, flags=re.M)
    labels = {label for head in heads for label in re.findall(r"\((\d+[a-z]?)\)", head)}
    return labels | {label.rstrip("abcdefgh") for label in labels}


def _sections(text: str) -> set[str]:
    return set(re.findall(r"^#{2,4} (\d+(?:\.\d+)?)\.?\s", text, flags=re.M))


def _sources() -> list[Path]:
    files = [p for d in ("otspec", "llm_bridge", "simulations", "benchmarks") for p in (ROOT / d).rglob("*.py")]
    files += sorted((ROOT / "notebooks").glob("*.ipynb")) + [ROOT / "README.md", ROOT / "figures" / "REPORT.md"]
    return files


SPEC_TEXT = {name: (DOCS / f"{name}.md").read_text() for name in SPECS}


@pytest.mark.parametrize("name", SPECS)
def test_every_spec_document_defines_its_labels_and_sections(name):
    text = SPEC_TEXT[name]
    assert len(_labels(text)) >= 2 and len(_sections(text)) >= 8
    assert "## References" in text and "shared/" not in text and "seeds/" not in text and "the seed's" not in text


def test_every_citation_names_its_document_and_resolves():
    problems = []
    for path in _sources():
        text = path.read_text()
        eqs = {a for m in CITE_EQ.finditer(text) for a in m.groups() if a}
        secs = set(CITE_SECTION.findall(text))
        if not (eqs or secs):
            continue
        named = [name for name in SPECS if f"docs/{name}.md" in text]
        where = path.relative_to(ROOT)
        if not named:
            problems.append(f"{where}: cites {sorted(eqs)} {sorted(secs)} but names no docs/<spec>.md")
            continue
        labels = set().union(*(_labels(SPEC_TEXT[n]) for n in named))
        sections = set().union(*(_sections(SPEC_TEXT[n]) for n in named))
        problems += [f"{where}: eq. ({e}) is in none of {named}" for e in sorted(eqs - labels)]
        problems += [f"{where}: §{s} is in none of {named}" for s in sorted(secs - sections)]
    assert problems == [], "\n".join(problems)


def test_no_file_points_outside_the_repository_for_a_spec():
    bad = [str(p.relative_to(ROOT)) for p in _sources() if "shared/reference" in p.read_text()
           or "the seed's" in p.read_text()]
    assert bad == []


def _entries(text: str) -> list[str]:
    return [e for e in re.split(r"\n(?=- \*\*\[)", text) if e.startswith("- **[")]


def test_every_reference_is_complete():
    """Papers and books: authors, a title, a year, and the arXiv identifier wherever arXiv is named; software: a
    URL."""
    papers, software = (DOCS / "references.md").read_text().split("\n## Software", 1)
    assert len(_entries(papers)) >= 20 and len(_entries(software)) >= 5
    for entry in _entries(papers):
        key = entry.split("]", 1)[0]
        assert re.search(r"\b(19|20)\d\d\b", entry), f"{key}: no year"
        assert re.search(r'["*].{8,}["*]', entry), f"{key}: no title"
        if "arXiv" in entry:
            assert re.search(r"arXiv:\d{4}\.\d{4,5}", entry), f"{key}: an arXiv mention without an identifier"
    for entry in _entries(software):
        assert "http" in entry, f"{entry.split(']', 1)[0]}: no URL"


def test_every_limit_the_readme_lists_is_a_constant_of_the_code():
    """The README's limits table names constants a user can import; each is defined in the code (none invented,
    none renamed away)."""
    readme = (ROOT / "README.md").read_text()
    names = set(re.findall(r"^\| `(MAX_[A-Z_]+)`", readme, flags=re.M))
    names |= set(re.findall(r"^\| `MAX_[A-Z_]+` / `(MAX_[A-Z_]+)`", readme, flags=re.M))
    code = "\n".join(p.read_text() for d in ("otspec", "llm_bridge") for p in (ROOT / d).rglob("*.py"))
    assert len(names) >= 30
    missing = sorted(n for n in names  # NAME = ..., NAME: int = ..., or A, NAME = ...
                     if not re.search(rf"^\s*(\w+\s*,\s*)*{n}\s*(,\s*\w+\s*)*(:[^=]+)?=", code, flags=re.M))
    assert missing == []
