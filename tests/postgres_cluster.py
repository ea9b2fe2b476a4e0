"""A throwaway PostgreSQL cluster for tests: initdb in a temporary folder, pg_ctl start on a Unix socket
in that folder (no TCP port), password authentication, removed afterwards.

The server refuses to run as root: as root the commands run as the ``postgres`` user (``runuser``). The
binaries come from the Debian package (``/usr/lib/postgresql/<version>/bin``) or PATH; ``.ci/run``
installs the package where it is absent.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

USER = "fp"
PASSWORD = "fp-test-pw-7d31"
DATABASE = "fp"


def _bin_dir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def missing_reason() -> str | None:
    """Why no cluster can be started here, or None."""
    if _bin_dir() is None:
        return "PostgreSQL is not installed (apt-get install postgresql; .ci/run does it)"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser: cannot start PostgreSQL as another user"
    return None


@dataclass(frozen=True)
class Cluster:
    socket_dir: Path

    def url(self, password: str = PASSWORD, database: str = DATABASE) -> str:
        return f"postgresql://{USER}:{password}@/{database}?host={self.socket_dir}"

    def psql(self, sql: str, database: str = DATABASE) -> str:
        env = {**os.environ, "PGPASSWORD": PASSWORD}
        done = subprocess.run(["psql", "-h", str(self.socket_dir), "-U", USER, "-d", database, "-Atc", sql],
                              env=env, capture_output=True, text=True, check=True)
        return done.stdout


def _as_owner(cmd: list[str], owner: str | None) -> list[str]:
    return ["runuser", "-u", owner, "--", *cmd] if owner else cmd


@contextmanager
def postgres_cluster() -> Iterator[Cluster]:
    bin_dir = _bin_dir()
    assert bin_dir is not None, missing_reason()
    owner = "postgres" if os.geteuid() == 0 else None
    root = Path(tempfile.mkdtemp(prefix="fp-pg-"))
    data, sockets = root / "data", root / "run"
    sockets.mkdir()
    pwfile = root / "pw"
    pwfile.write_text(PASSWORD + "\n", encoding="utf-8")
    if owner:
        shutil.chown(root, owner)
        shutil.chown(sockets, owner)
        shutil.chown(pwfile, owner)
    root.chmod(0o755)
    try:
        subprocess.run(_as_owner([str(bin_dir / "initdb"), "-D", str(data), "-U", USER, "--pwfile", str(pwfile),
                                  "-A", "scram-sha-256", "-E", "UTF8", "--no-sync"], owner),
                       check=True, capture_output=True, text=True)
        options = f"-c listen_addresses='' -c unix_socket_directories={sockets} -c fsync=off"
        subprocess.run(_as_owner([str(bin_dir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(root / "log"),
                                  "-w", "start"], owner), check=True, capture_output=True, text=True)
        try:
            cluster = Cluster(sockets)
            env = {**os.environ, "PGPASSWORD": PASSWORD}
            subprocess.run(["psql", "-h", str(sockets), "-U", USER, "-d", "postgres", "-c",
                            f"CREATE DATABASE {DATABASE}"], env=env, check=True, capture_output=True, text=True)
            yield cluster
        finally:
            subprocess.run(_as_owner([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"], owner),
                           capture_output=True, check=False)
    finally:
        shutil.rmtree(root, ignore_errors=True)
