"""Which settings' values hold a password: those must never be written where others read (Dagster's run
storage keeps the resources' config in each run's job snapshot, which its UI shows to everyone who can open
it), so the Dagster layer passes them as the name of their variable instead (``defs.DefsSettings``)."""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import urlsplit

#: A libpq ``password=`` pair, in a key=value string or a URL's query (``?password=...``).
PASSWORD_PAIR: Final = re.compile(r"(?:^|[\s?&;])password\s*=", re.IGNORECASE)


def holds_password(text: str) -> bool:
    """Whether ``text`` carries a password: a URL with one (``postgresql://user:secret@host/db``) or a
    ``password=`` pair."""
    try:
        if urlsplit(text).password is not None:
            return True
    except ValueError:  # not a URL a parser can take: look for a pair all the same
        pass
    return PASSWORD_PAIR.search(text) is not None
