"""The course's documents, read as written by the tests that run their commands: README.md, and the website's
pages for instructors (website/pages/<name>.md, e.g. cluster.md)."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SITE_PAGES = REPO / "website" / "pages"


def text(name: str) -> str:
    """README.md, or a page of the website by its file name (cluster.md)."""
    return (REPO / name if name == "README.md" else SITE_PAGES / name).read_text()


def bash_block(name: str, heading: str) -> str:
    """The first ```bash block after the heading `heading` (at any level) of the document `name`, as written."""
    document = text(name)
    found = re.search(rf"^#+ {re.escape(heading)}$", document, re.M)
    assert found, f"{name} has no heading {heading!r}"
    return document[found.end():].split("```bash\n", 1)[1].split("```", 1)[0]
