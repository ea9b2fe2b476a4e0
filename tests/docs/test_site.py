"""The docs site builds strictly (a broken link, a missing anchor or a missing included file fails it), with
the command the README prints; and every relative link of the README reaches a file and, where it names
one, an anchor of it."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote

import markdown
import yaml

from tests.doc_blocks import REPO, run_shell, shell_env

README = (REPO / "README.md").read_text(encoding="utf-8")
_QUIET = {"NO_MKDOCS_2_WARNING": "1"}  # mkdocs-material's banner about MkDocs 2.0, printed on every build


class _Config(yaml.SafeLoader):
    """mkdocs.yml as plain data: its ``!ENV`` and ``!relative`` values are not needed here."""


_Config.add_multi_constructor("!", lambda loader, suffix, node: None)


def _nav_pages(nav: list[object]) -> list[str]:
    pages: list[str] = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += _nav_pages(value) if isinstance(value, list) else [str(value)]
    return pages


def _build_command() -> str:
    found = re.findall(r"`(uv run --frozen --group dev mkdocs build[^`]*)`", README)
    assert len(found) == 1, found
    return found[0]


def test_the_readme_command_builds_every_page_strictly(tmp_path: Path) -> None:
    site = tmp_path / "site"
    command = _build_command()
    assert "--strict" in command
    done = run_shell(command, REPO, shell_env(DOCS_SITE_DIR=str(site), **_QUIET), timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "WARNING" not in done.stderr, done.stderr[-3000:]
    config = yaml.load((REPO / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_Config)
    pages = _nav_pages(config["nav"])
    # every page of docs/ is in the nav, and each was built (pages as files: the site opens from file://)
    assert sorted(pages) == sorted(p.name for p in (REPO / "docs").glob("*.md"))
    for page in pages:
        assert (site / page.replace(".md", ".html")).is_file(), page
    # the included texts arrived: the README's tour and quickstart, the settings table, BENCHMARKS.md
    html = {page: (site / page.replace(".md", ".html")).read_text(encoding="utf-8") for page in pages}
    assert "fake-judge" in html["cli.md"] and "score_frame_async" in html["python.md"]
    assert "</span>demo" in html["index.md"] and "</span>dev" in html["pipeline.md"]
    assert "FP_JUDGE_MODEL" in html["settings.md"] and "&lt;warehouse&gt;/_judge_store.sqlite" in html["settings.md"]
    assert 'id="targets"' in html["benchmarks.md"]
    assert "--8&lt;--" not in "".join(html.values())  # no include left unexpanded


def test_a_broken_anchor_or_link_fails_the_build(tmp_path: Path) -> None:
    """The strict settings are in effect: the same site with one bad anchor and one missing page fails."""
    copy = tmp_path / "repo"
    shutil.copytree(REPO / "docs", copy / "docs")
    for name in ("mkdocs.yml", "README.md", "BENCHMARKS.md"):
        shutil.copy(REPO / name, copy / name)
    with (copy / "docs" / "decisions.md").open("a", encoding="utf-8") as page:
        page.write("\nSee [the scores](scores.md#no-such-heading) and [a page](no-such-page.md).\n")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--site-dir", str(tmp_path / "site")], cwd=copy,
                          env={**shell_env(), **_QUIET}, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode != 0
    assert "does not contain an anchor '#no-such-heading'" in done.stderr, done.stderr[-3000:]
    assert "no-such-page.md" in done.stderr


def _anchors(page: Path) -> set[str]:
    """The heading ids the docs site gives ``page`` (python-markdown's toc, as mkdocs uses it)."""
    md = markdown.Markdown(extensions=["toc", "tables"])
    md.convert(page.read_text(encoding="utf-8"))

    def walk(tokens: list[dict[str, object]]) -> set[str]:
        ids: set[str] = set()
        for token in tokens:
            ids.add(str(token["id"]))
            ids |= walk(token["children"])  # type: ignore[arg-type]
        return ids

    return walk(md.toc_tokens)  # type: ignore[attr-defined]


def test_every_relative_link_of_the_readme_reaches_its_file_and_anchor() -> None:
    links = re.findall(r"\]\(([^)\s]+)\)", README)
    relative = [link for link in links if not re.match(r"[a-z]+:", link)]
    assert len(relative) >= 15  # the tour and the documentation list link into docs/
    for link in relative:
        target, _, anchor = unquote(link).partition("#")
        path = REPO / target if target else REPO / "README.md"
        assert path.exists(), f"README links to {link}, which does not exist"
        if anchor:
            assert path.suffix == ".md", link
            assert anchor in _anchors(path), f"README links to {link}: {target} has no heading with that id"
