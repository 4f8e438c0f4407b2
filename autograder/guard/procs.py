"""Ending every process a graded notebook started, including those that tried to outlive it (Linux).

A notebook can start processes that leave its process group (``setsid``), its session, or its parent
(double fork). A *subreaper* (prctl PR_SET_CHILD_SUBREAPER) inherits every orphan among its descendants
instead of init, so it can find and end them all. Elsewhere only the direct process tree can be ended.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time

_PR_SET_CHILD_SUBREAPER = 36
LINUX = sys.platform.startswith("linux")


_SIGNALS = {
    "SIGSEGV": "a segmentation fault",
    "SIGABRT": "an abort: heap corruption, or a failed check in C code?",
    "SIGKILL": "out of memory, or killed from outside?",
    "SIGBUS": "a bus error",
    "SIGFPE": "an arithmetic fault",
}


def signal_meaning(signum: int) -> str:
    """'SIGSEGV (a segmentation fault)': a signal that ended a process, and what usually sends it."""
    try:
        name = signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
    return f"{name} ({_SIGNALS[name]})" if name in _SIGNALS else name


def become_subreaper(on: bool = True) -> bool:
    """Make orphaned descendants of this process its children (Linux). Returns whether it worked."""
    if not LINUX:
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0


def _parents(zombies: bool = False) -> dict[int, int]:
    """pid -> parent pid of every live process (or, with zombies, of every ended one not yet reaped), from /proc."""
    found = {}
    for entry in os.listdir("/proc") if LINUX else ():
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # it ended meanwhile
        fields = stat[stat.rindex(b")") + 2 :].split()  # the name in parentheses may hold spaces
        if (fields[0] == b"Z") == zombies:
            found[int(entry)] = int(fields[1])
    return found


def descendants(pid: int) -> list[int]:
    parents = _parents()
    found, frontier = [], [pid]
    while frontier:
        kids = [p for p, pp in parents.items() if pp in frontier]
        found += kids
        frontier = kids
    return found


def kill(pids) -> None:
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def kill_tree(pid: int) -> None:
    """SIGKILL pid and everything below it."""
    kill(descendants(pid) + [pid])


def children() -> set[int]:
    me = os.getpid()
    return {p for p, pp in _parents().items() if pp == me}


def end_children(keep: set[int] = frozenset(), timeout: float = 10.0) -> int:
    """SIGKILL every child of this process (but those in keep) and everything below them; reap them. Returns
    how many were found.

    Meant for a subreaper whose children are now only leftovers: orphans climb up to it as their parents die,
    so this repeats until none is left. Only the processes it ended are reaped: a child in keep may be another
    thread's subprocess, whose exit status is that thread's to collect.
    """
    ended = 0
    deadline = time.monotonic() + timeout
    killed: set[int] = set()
    while time.monotonic() < deadline:
        kids = children() - keep
        if not kids:
            break
        ended += len(kids - killed)
        for kid in kids:
            kill(descendants(kid) + [kid])
        killed |= kids
        killed -= _reap(killed)
        time.sleep(0.05)
    me = os.getpid()
    _reap(killed | ({p for p, pp in _parents(zombies=True).items() if pp == me} - keep))  # and orphans that ended
    return ended


def _reap(pids: set[int]) -> set[int]:
    """Collect the exit status of these children where they have ended; returns those collected (or gone)."""
    done = set()
    for pid in pids:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] != 0:
                done.add(pid)
        except ChildProcessError:
            done.add(pid)  # not (or no longer) our child
    return done
