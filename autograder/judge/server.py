"""The judge process: python -m autograder.judge.server SOCKET

Started by grade-class (one per student, outside the student's sandbox) and by the checker given the course's
grading file. It reads the grading settings as check() would (FUSION_COURSE_GRADING, and the course's secret seed
beside that file), listens on the Unix socket SOCKET (its owner's only), says "listening" on standard output, and
serves every connection in a thread of its own: it draws each case's inputs, sends them by value, takes back the
outputs, judges them against the float64 reference within the tolerances, applies the bars to reported timings,
and records every verdict. It imports the grader, torch and the exercises' specs, and never anything the student
wrote: nothing it receives is code or pickle (autograder.link.wire). When its standard input closes it writes its
record, one line of JSON ({"verdicts": [...]}), to standard output, and exits.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading

import torch

from autograder import config  # the package's __init__ first picks the device, as in the student's process
from autograder import specs as registry
from autograder.criteria import correctness, precision
from autograder.judge import bars
from autograder.link import wire
from autograder.link.session import Answer, fresh_seed, plain, socket_address
from autograder.report import FAILED, CriterionResult
from autograder.specs.exercise import KernelExercise

JUDGED = {"correctness": correctness.Cases, "precision": precision.Cases}


class Judge:
    """The settings, and the record of every verdict, shared by the connections."""

    def __init__(self, cfg: config.GradingConfig):
        self.cfg = cfg
        self.lock = threading.Lock()
        self.verdicts: list[dict] = []

    def record(self, exercise: str, result: CriterionResult) -> dict:
        entry = {"exercise": exercise, "criterion": result.name, "status": result.status,
                 "message": result.message.strip().splitlines()[0] if result.message.strip() else ""}
        if result.name == "performance":
            entry["figures"] = plain(result)["figures"]
        with self.lock:
            self.verdicts.append(entry)
        return plain(result)


class Conversation:
    """One connection: at most one criterion open at a time, its cases handed out one by one."""

    def __init__(self, judge: Judge):
        self.judge, self.ex, self.cases = judge, None, None

    def handle(self, header: dict, tensors: list) -> tuple[dict, list]:
        op = header.get("op")
        cfg = self.judge.cfg
        if op == "hello":
            return {"trials": cfg.trials, "require_performance": cfg.require_performance,
                    "criterion_timeout_s": cfg.criterion_timeout_s, "seed": fresh_seed()}, []
        if op == "open":
            ex, criterion = self._exercise(header.get("exercise")), header.get("criterion")
            if criterion not in JUDGED or criterion not in ex.criteria:
                raise ValueError(f"{ex.id}'s {criterion!r} is not judged here")
            self.ex, self.cases = ex, JUDGED[criterion](ex, cfg, device="cpu")
            return {"ok": True}, []
        if op == "confirm":
            ex, result = self._exercise(header.get("exercise")), _result(header.get("result"))
            if result.name != "performance":
                raise ValueError(f"only performance results are confirmed, not {result.name!r}")
            return {"result": self.judge.record(ex.id, bars.confirm(ex, cfg, result))}, []
        if self.cases is None:
            raise ValueError(f"{op!r} with no criterion open")
        if op == "next":
            inputs = self.cases.next_case()
            if inputs is None:
                return {"case": None}, []
            given = [isinstance(v, torch.Tensor) for v in inputs.values()]
            case = {"names": list(inputs), "tensor": given,
                    "values": [None if t else v for t, v in zip(given, inputs.values())]}
            return {"case": case}, [v for t, v in zip(given, inputs.values()) if t]
        if op == "answer":
            self.cases.answer(_answer(header, tensors))
            return {"ok": True}, []
        if op in ("verdict", "fail"):
            result = self.cases.verdict() if op == "verdict" else _failure(header.get("result"))
            ex, self.ex, self.cases = self.ex, None, None
            return {"result": self.judge.record(ex.id, result)}, []
        raise ValueError(f"unknown request {op!r}")

    @staticmethod
    def _exercise(exercise_id) -> KernelExercise:
        ex = registry.get(str(exercise_id))
        if not isinstance(ex, KernelExercise):
            raise TypeError(f"{ex.id} is not a kernel exercise: it is graded in the student's process")
        return ex


def _result(raw) -> CriterionResult:
    if not isinstance(raw, dict) or not isinstance(raw.get("message"), str) or not isinstance(raw.get("figures"), dict):
        raise TypeError("a result is {name, status, message, figures}")
    return CriterionResult(str(raw.get("name")), str(raw.get("status")), raw["message"], raw["figures"])


def _failure(raw) -> CriterionResult:
    """A failure the student's process found itself (the cache probe): recorded as failed, whatever it says."""
    result = _result(raw)
    return CriterionResult(result.name, FAILED, result.message, result.figures)


def _answer(header: dict, tensors: list) -> Answer:
    problems, fresh, late = header.get("problems"), header.get("fresh"), header.get("late")
    if not (isinstance(problems, list) and all(isinstance(p, str) for p in problems)):
        raise ValueError("problems: a list of strings")
    if header.get("judged"):
        if not (isinstance(fresh, list) and len(fresh) == len(tensors) and all(isinstance(f, bool) for f in fresh)):
            raise ValueError("fresh: one boolean per output")
        outs = tuple(tensors)
    else:
        outs, fresh = None, []
    if late is not None and not isinstance(late, str):
        raise ValueError("late: a string or null")
    return Answer(outs, fresh, problems, late)


def serve(conn: socket.socket, judge: Judge) -> None:
    talk = Conversation(judge)
    with conn:
        while True:
            try:
                header, tensors = wire.recv(conn)
            except (OSError, ConnectionError, wire.WireError):
                return  # the student's process went away (or broke the protocol): nothing more to judge
            try:
                reply, out = talk.handle(header, tensors)
            except Exception as exc:  # noqa: BLE001  a bad request (or a case it broke) is answered, not fatal
                reply, out = {"error": f"{type(exc).__name__}: {exc}"}, []
            try:
                wire.send(conn, reply, out)
            except OSError:
                return


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    judge = Judge(config.load())
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        listener.bind(socket_address(argv[0]))
    finally:
        os.umask(old)
    listener.listen(8)

    def accept():
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=serve, args=(conn, judge), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    print("listening", flush=True)
    sys.stdin.read()  # until the process that started the judge is done with it
    with judge.lock:
        print(json.dumps({"verdicts": judge.verdicts}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
