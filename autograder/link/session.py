"""The student's side of judged grading: where a criterion gets its cases and its verdict.

A criterion that compares results with the reference (correctness and precision of a kernel exercise) asks a
session for its cases one at a time, calls the student's function on each, and hands back what came out; the
session's verdict is the criterion's result. Its cases and verdict come from the criterion's own `Cases` class
(autograder.criteria.correctness.Cases, ...), which runs in one of two places:

- here, in check()'s own process (Local): a self-learner's check with the package's public seed, where nothing is
  secret;
- in the judge (Remote), when FUSION_COURSE_JUDGE names its socket: grading for credit (grade-class, or the
  checker given the course's grading file). The course's seed, the expected values, the tolerances and the bars
  never enter this process, and the judge keeps its own record of every verdict.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import socket
from pathlib import Path

import torch

from autograder import runtime
from autograder.link import wire
from autograder.report import CriterionResult


# What a criterion hands over for one case: made by the criteria (outputs.call_case), carried here.
@dataclasses.dataclass
class Answer:
    """What one call on a case's inputs gave, seen from the process that made it: the outputs (None when there is
    nothing to judge: the call raised or returned the wrong kind of thing), whether each was allocated during the
    call (and poisoned), the problems found there before the values are judged, and one found after (the result
    was not computed by a Triton kernel), listed last."""

    outs: tuple | None
    fresh: list[bool]
    problems: list[str]
    late: str | None = None


ENV_VAR = "FUSION_COURSE_JUDGE"  # the judge's socket, set by grade-class and the checker for the graded process


class JudgeError(RuntimeError):
    """The judge could not be reached, or refused a request (it says why)."""


def judged() -> bool:
    """True when a judge grades this process's submissions."""
    return bool(os.environ.get(ENV_VAR))


def socket_address(path: str | os.PathLike) -> str:
    """An address connect() and bind() accept for path: Unix socket paths are limited to 107 bytes, and a class
    run's workspaces sit deep in temporary folders, so a longer one is reached through its folder's descriptor."""
    path = Path(path)
    if len(os.fsencode(str(path))) < 100:
        return str(path)
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)  # kept open: the address names it
    return f"/proc/self/fd/{fd}/{path.name}"


class Connection:
    """This process's one connection to the judge, opened at the first judged criterion."""

    def __init__(self, path: str):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.connect(socket_address(path))
        except OSError as exc:
            raise JudgeError(f"the judge at {path} (${ENV_VAR}) cannot be reached: {exc}") from None
        self.settings = self.request({"op": "hello"})[0]

    @staticmethod
    def get() -> Connection:
        global _connection
        if _connection is None:
            _connection = Connection(os.environ[ENV_VAR])
        return _connection

    def request(self, header: dict, tensors=()) -> tuple[dict, list[torch.Tensor]]:
        try:
            wire.send(self.sock, header, tensors)
            reply, got = wire.recv(self.sock, runtime.device())
        except BaseException as exc:  # a time limit may end a request half-way: the next check starts afresh
            self.sock.close()
            _drop()
            if isinstance(exc, (OSError, wire.WireError)):
                raise JudgeError(f"the judge's connection failed during {header.get('op')}: {exc}") from None
            raise
        if "error" in reply:
            raise JudgeError(f"the judge refused {header.get('op')}: {reply['error']}")
        return reply, got


_connection: Connection | None = None


def _drop() -> None:
    global _connection
    _connection = None


def settings() -> dict:
    """The grading settings the judge shares (trials, require_performance, criterion_timeout_s) and a seed of this
    process's own for the criteria that stay here (fusion, memory, the cache probe): fresh random, never the
    course's."""
    return dict(Connection.get().settings)


def fresh_seed() -> int:
    return secrets.randbelow(2**31 - 2) + 1


class Local:
    """The criterion's cases and verdict made in this process."""

    def __init__(self, cases):
        self.cases = cases

    def next(self) -> dict | None:
        return self.cases.next_case()

    def answer(self, answer: Answer) -> None:
        self.cases.answer(answer)

    def verdict(self) -> CriterionResult:
        return self.cases.verdict()

    def fail(self, result: CriterionResult) -> CriterionResult:
        return result


class Remote:
    """The criterion's cases and verdict made by the judge: inputs come in by value, outputs go out by value."""

    def __init__(self, exercise_id: str, criterion: str):
        self.conn = Connection.get()
        self.conn.request({"op": "open", "exercise": exercise_id, "criterion": criterion})

    def next(self) -> dict | None:
        reply, tensors = self.conn.request({"op": "next"})
        case = reply.get("case")
        if case is None:
            return None
        given = iter(tensors)
        return {name: next(given) if is_tensor else value
                for name, is_tensor, value in zip(case["names"], case["tensor"], case["values"])}

    def answer(self, answer: Answer) -> None:
        outs = [o.detach() for o in answer.outs] if answer.outs is not None else []
        self.conn.request({"op": "answer", "judged": answer.outs is not None, "fresh": answer.fresh,
                           "problems": answer.problems, "late": answer.late}, outs)

    def verdict(self) -> CriterionResult:
        return CriterionResult(**self.conn.request({"op": "verdict"})[0]["result"])

    def fail(self, result: CriterionResult) -> CriterionResult:
        """A failure found here (the cache probe): the judge records it as its verdict."""
        reply, _ = self.conn.request({"op": "fail", "result": plain(result)})
        return CriterionResult(**reply["result"])


def open_session(ex, criterion: str, cfg, cases_class) -> Local | Remote:
    """Where the named criterion of ex gets its cases and verdict: the judge when there is one, else a
    cases_class(ex, cfg) here."""
    return Remote(ex.id, criterion) if judged() else Local(cases_class(ex, cfg))


def cases(session):
    """The inputs of every case the session hands out, in order."""
    while (inputs := session.next()) is not None:
        yield inputs


def confirm(ex, result: CriterionResult) -> CriterionResult:
    """A result made here whose pass depends on bars (performance): the judge applies the course's bars to its
    figures and keeps them; without a judge it stands as made."""
    if not judged():
        return result
    reply, _ = Connection.get().request({"op": "confirm", "exercise": ex.id, "result": plain(result)})
    return CriterionResult(**reply["result"])


def plain(result: CriterionResult) -> dict:
    """result as JSON-able fields (figures of numbers, strings, booleans and None)."""
    figures = {str(k): v for k, v in result.figures.items()
               if v is None or isinstance(v, (bool, int, float, str))}
    return {"name": result.name, "status": result.status, "message": result.message, "figures": figures}
