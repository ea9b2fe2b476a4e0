"""Sampling the memory of a process session from /proc: every process of it, its peak while alive.

A command runs in a session of its own; every ``POLL_S`` seconds each live process of that session (found by
session id, not parent links: a fork server re-parented to init is still counted) is read from
/proc/PID/status: its VmHWM (its peak so far) and VmRSS (for the sum held at once). The run is killed when its
processes hold more than a given size at once, when the machine has under ``MIN_AVAILABLE_GB`` available, or
when it outlasts its time. ``summary`` gives a sampled run's figures, each process named by what it was (run
process, fork server, a step by its key from Dagster's log, the offline judge's worker pool, ...).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import ROOT

POLL_S = 0.2
GB = 2**30
#: Below this much available memory a run is stopped, whatever its own size: the machine is shared.
MIN_AVAILABLE_GB = 1.5


@dataclass
class Proc:
    pid: int
    ppid: int
    cmdline: str
    peak_kb: int = 0


@dataclass
class Sampled:
    """What the sampler saw of one process session, and how the session's root ended."""

    root: int = 0
    procs: dict[tuple[int, int], Proc] = field(default_factory=dict)
    at_once_kb: int = 0  # the largest sum of VmRSS over the session at one sample
    wall_s: float = 0.0
    returncode: int = 0
    root_maxrss_kb: int = 0
    killed: str = ""


def status_kb(text: str, key: str) -> int:
    for line in text.splitlines():
        if line.startswith(key):
            return int(line.split()[1])
    return 0


def _available_kb() -> int:
    return status_kb(Path("/proc/meminfo").read_text(), "MemAvailable:")


def session(sid: int, foreign: set[int]) -> dict[int, tuple[int, int, str]]:
    """(ppid, start time, /proc/pid/status text) of every live process of session ``sid``.

    By session, not by parent links: the offline judge's fork server is re-parented to init when the step
    process that started it ends, and its workers with it. ``foreign`` caches pids of other sessions."""
    found: dict[int, tuple[int, int, str]] = {}
    alive: set[int] = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        alive.add(pid)
        if pid in foreign:
            continue
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[3]) != sid:  # fields: state ppid pgrp session ...
                foreign.add(pid)
                continue
            found[pid] = (int(fields[1]), int(fields[19]), Path(f"/proc/{pid}/status").read_text())
        except (OSError, IndexError, ValueError):
            continue  # it just ended
    foreign &= alive  # a pid that ended may come back as one of ours
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def run_sampled(command: list[str], env: dict[str, str], log: Path, kill_above_gb: float,
                timeout_s: float) -> Sampled:
    """Runs ``command`` in a session of its own and samples every process of that session until it ends."""
    seen = Sampled()
    foreign: set[int] = set()
    started = time.perf_counter()
    with log.open("wb") as out:
        child = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True)
    seen.root = child.pid
    while True:
        rss = 0
        for pid, (ppid, start, status) in session(child.pid, foreign).items():
            proc = seen.procs.get((pid, start))
            if proc is None:
                proc = seen.procs[(pid, start)] = Proc(pid, ppid, _cmdline(pid))
            proc.peak_kb = max(proc.peak_kb, status_kb(status, "VmHWM:"))
            rss += status_kb(status, "VmRSS:")
        seen.at_once_kb = max(seen.at_once_kb, rss)
        done, status_code, usage = os.wait4(child.pid, os.WNOHANG)
        if done:
            break
        elapsed = time.perf_counter() - started
        if not seen.killed and rss > kill_above_gb * GB / 1024:
            seen.killed = f"killed: its processes held {rss * 1024 / GB:.1f} GB at once after {elapsed:.0f} s"
        elif not seen.killed and _available_kb() < MIN_AVAILABLE_GB * GB / 1024:
            seen.killed = f"killed: the machine had under {MIN_AVAILABLE_GB} GB available after {elapsed:.0f} s"
        elif not seen.killed and elapsed > timeout_s:
            seen.killed = f"killed: still running after {timeout_s:.0f} s"
        if seen.killed:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)  # the session's group: the run and every process it made
        time.sleep(POLL_S)
    seen.wall_s = time.perf_counter() - started
    seen.returncode = os.waitstatus_to_exitcode(status_code)
    child.returncode = seen.returncode  # reaped here: Popen must not wait again
    seen.root_maxrss_kb = usage.ru_maxrss
    _stop_leftovers(child.pid, foreign)
    return seen


def _stop_leftovers(sid: int, foreign: set[int]) -> None:
    """Processes of the session still alive when its root has ended (an orphaned worker pool) are ours to
    stop: by pid, after a grace period in which they should end by themselves."""
    deadline = time.monotonic() + 10
    while (left := session(sid, foreign)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        print(f"  stopped leftover process {pid}: {_cmdline(pid)[:120]}", file=sys.stderr)


_STEP_LINE = re.compile(r" - (\d+) - ([\w.\[\]-]+) - STEP_START - ")


def _roles(seen: Sampled, log_text: str) -> dict[tuple[int, int], str]:
    """What each process was: the run process, the fork server, a step (by its key, from Dagster's log
    lines, which carry the pid), the offline judge's worker pool, log capture, ..."""
    steps = {int(pid): key for pid, key in _STEP_LINE.findall(log_text)}
    roles: dict[tuple[int, int], str] = {}
    root = seen.root
    for key, proc in seen.procs.items():
        if proc.pid == root:
            roles[key] = "run process"
        elif proc.pid in steps:
            roles[key] = f"step {steps[proc.pid]}"
        elif "resource_tracker" in proc.cmdline:
            roles[key] = "resource tracker"
        elif "watch_orphans" in proc.cmdline or proc.cmdline.startswith("tail "):
            roles[key] = "log capture"
        elif "multiprocessing.forkserver" in proc.cmdline and proc.ppid == root:
            roles[key] = "fork server"
        elif "multiprocessing.forkserver" in proc.cmdline or "multiprocessing.spawn" in proc.cmdline:
            roles[key] = "worker pool"
        else:
            roles[key] = "other"
    return roles


def summary(seen: Sampled, log_text: str) -> dict[str, Any]:
    roles = _roles(seen, log_text)
    peaks = sorted(((p.peak_kb, roles[k]) for k, p in seen.procs.items()), reverse=True)
    polled_kb, polled_role = peaks[0] if peaks else (0, "")
    by_role: dict[str, list[int]] = {}
    for kb, role in peaks:
        by_role.setdefault(role, []).append(kb)
    # ru_maxrss covers the root and what it reaped: all of the CLI's tree, but for dg launch only the run
    # process (its fork server, the steps' parent, is never reaped by it). It also covers what polling
    # missed of the root's last 0.2 s.
    largest_kb = max(polled_kb, seen.root_maxrss_kb)
    return {
        "wall_s": seen.wall_s,
        "returncode": seen.returncode,
        "killed": seen.killed,
        "largest_gb": largest_kb * 1024 / GB,
        "largest_role": polled_role if polled_kb >= seen.root_maxrss_kb else "missed by polling (wait4)",
        "polled_largest_gb": polled_kb * 1024 / GB,
        "root_maxrss_gb": seen.root_maxrss_kb * 1024 / GB,
        "all_gb": sum(kb for kb, _ in peaks) * 1024 / GB,
        "at_once_gb": seen.at_once_kb * 1024 / GB,
        "processes": len(peaks),
        "by_role": {role: [kb * 1024 / GB for kb in kbs] for role, kbs in by_role.items()},
    }
