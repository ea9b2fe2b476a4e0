"""The docs pages' copies of README sections: equal to the README's, so that a page read as a file shows the
same commands as the README and the site (the README's blocks are the ones tests run)."""

from __future__ import annotations

import re

from tests.doc_blocks import COPY, REPO


def _readme_section(name: str) -> str:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    found = re.search(rf"<!-- --8<-- \[start:{name}\] -->\n(.*?)<!-- --8<-- \[end:{name}\] -->", readme, re.DOTALL)
    assert found, f"README.md has no section {name!r} (<!-- --8<-- [start:{name}] --> ... [end:{name}])"
    return found.group(1)


def test_every_copy_of_a_readme_section_equals_it() -> None:
    copies = 0
    for page in sorted((REPO / "docs").glob("*.md")):
        text = page.read_text(encoding="utf-8")
        assert '--8<-- "README.md' not in text, f"{page.name}: copy the README section (see COPY), do not include it"
        for copy in COPY.finditer(text):
            copies += 1
            section = _readme_section(copy["name"])
            assert copy["text"] == section, f"docs/{page.name}: the copy of README.md:{copy['name']} differs; " \
                                            f"paste the README's text:\n{section}"
    assert copies >= 4  # index, cli, pipeline, python
