"""The integrity record: what the grader relies on, as it was when recorded, and how to put it back.

A Record holds the namespaces of the libraries the grader calls into (torch, triton, time, math, random, os,
statistics, signal, the builtins it uses), every module of the grader and of kernels/ (their functions with
their code, their classes, their tables and the exercises' settings), the grading settings file and, in a
Jupyter kernel, how IPython runs cells. Record.differences() names everything that differs now, each with the
way to undo it; restore() undoes them. guard/integrity.py makes one Record per process and decides when to
compare and when to restore.
"""

from __future__ import annotations

import builtins
import dataclasses
import functools
import hashlib
import math
import os
import random
import signal
import statistics
import sys
import time
import types

from autograder import config

_UNSET = object()


def _describe(obj) -> str:
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or type(obj).__name__
    module = getattr(obj, "__module__", None)
    return f"{module}.{name}" if module and module not in ("__main__", "builtins") else str(name)


def _config_state() -> tuple:

    path = os.environ.get(config.ENV_VAR) or str(config.DEFAULT_PATH)
    try:
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
    except OSError:
        digest = None
    return os.environ.get(config.ENV_VAR), path, digest


# Builtins the grader calls. (Not all of them: Jupyter kernels swap `input` and friends in and out per cell.)
_BUILTINS = (
    "__import__", "__build_class__", "abs", "all", "any", "bool", "callable", "dict", "enumerate", "float",
    "getattr", "hasattr", "id", "int", "isinstance", "issubclass", "iter", "len", "list", "map", "max", "min",
    "next", "object", "open", "print", "range", "repr", "round", "set", "setattr", "sorted", "str", "sum",
    "super", "tuple", "type", "vars", "zip", "BaseException", "Exception", "AssertionError", "KeyError",
    "NotImplementedError", "RuntimeError", "TypeError", "ValueError",
)


def _library_namespaces():
    """(label, namespace owner) pairs: modules and classes outside autograder that the grader calls into."""
    import torch
    import torch._dynamo  # its import wraps torch.manual_seed: let that happen before recording
    import torch.nn.functional
    import torch.profiler
    import torch.testing
    import triton
    import triton.testing
    from torch.utils._python_dispatch import TorchDispatchMode
    from triton.runtime import autotuner, interpreter, jit

    return [
        ("torch", torch), ("torch.nn.functional", torch.nn.functional), ("torch.testing", torch.testing),
        ("torch.cuda", torch.cuda), ("torch.profiler", torch.profiler), ("torch.Tensor", torch.Tensor),
        ("TorchDispatchMode", TorchDispatchMode), ("triton.testing", triton.testing),
        ("triton.runtime.jit", jit), ("JITFunction", jit.JITFunction), ("KernelInterface", jit.KernelInterface),
        ("InterpretedFunction", interpreter.InterpretedFunction), ("Autotuner", autotuner.Autotuner),
        ("Heuristics", autotuner.Heuristics), ("time", time), ("math", math), ("random", random), ("os", os),
        # The medians of the timed rounds; the signal calls of the time limit per criterion.
        ("statistics", statistics), ("signal", signal),
    ]


def _own_modules() -> list[types.ModuleType]:
    return [m for name, m in sorted(sys.modules.items())
            if m is not None and (name == "kernels" or name.startswith(("autograder.", "kernels.")) or name == "autograder")]


# Module globals of the grader that change on their own: set once (None -> value) or flags.
_SETTLES = {("autograder.measure.device", "_profile"), ("autograder.specs", "_registry"), ("autograder.guard.integrity", "_record")}
_VOLATILE = {("autograder.runtime", "_announced"), ("autograder.guard.integrity", "_names_seen"),
             ("kernels.multi_tensor_adamw", "_TABLE_CACHE"),  # address tables, filled as tensor lists come
             ("kernels.tma", "_UNCOMPILABLE"),  # kernel settings this Triton refused, filled on first launches
             ("autograder.memcheck", "_extents"),  # the guard-padded tensors alive now, added and freed
             # the tokenised text, kept after its first use; the training criterion draws yours and eager's
             # batches from it alike, so what it holds cannot favour a submission
             ("autograder.specs.text_corpus", "_CACHE"),
             # the connection to the judge: opened at the first judged criterion, opened again after a time limit
             # cut a request short; what it is told counts only in the judge's own record
             ("autograder.link.session", "_connection")}


def _copy(value):
    """A shallow copy of a container (to compare its contents later), or None for anything else."""
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, (list, set)):
        return type(value)(value)
    return None


def _fields(obj) -> dict:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


class Record:
    """What the grader relies on, as it was when recorded."""

    def __init__(self):
        self.entries: list[tuple[str, object, dict]] = []  # (label, owner, {name: value})
        self.functions: dict[int, tuple[str, types.FunctionType, tuple]] = {}
        self.containers: list[tuple[str, object, object]] = []  # (label, container, its copy)
        self.objects: list[tuple[str, object, dict, dict]] = []  # dataclass instances: fields, dict-field copies
        self.settled: dict[tuple[str, str], object] = {}
        self.config = _config_state()
        self.ipython = None
        self.ipython_state: dict = {}
        self.names: dict[str, object] = {}  # the notebook's names for the grader, and what they must name
        self.restored: list[str] = []  # what the before-cell hook had to put back
        self.early_code = False  # a notebook cell ran before the grader was imported
        for label, owner in _library_namespaces():
            self._add_namespace(label, owner, only_callables=True)
        self.entries.append(("builtins", builtins, {k: vars(builtins)[k] for k in _BUILTINS if k in vars(builtins)}))
        for module in _own_modules():
            self._add_module(module)

    # -- recording --------------------------------------------------------------------------------------

    def _add_namespace(self, label, owner, only_callables, skip=()):
        # A class's dunders are how it behaves (kernel[grid], ==); a module's are bookkeeping.
        dunders = isinstance(owner, type)
        kept = {k: v for k, v in vars(owner).items()
                if (dunders or not k.startswith("__")) and k not in skip
                and (not only_callables or callable(v) or isinstance(v, types.ModuleType))}
        self.entries.append((label, owner, kept))

    def _add_function(self, label, fn):
        if isinstance(fn, (staticmethod, classmethod)):
            fn = fn.__func__
        if isinstance(fn, property):
            for part in (fn.fget, fn.fset):
                if part is not None:
                    self._add_function(label, part)
            return
        if isinstance(fn, types.FunctionType) and id(fn) not in self.functions:
            self.functions[id(fn)] = (label, fn, (fn.__code__, fn.__defaults__, fn.__kwdefaults__))

    def _add_module(self, module):
        name = module.__name__
        changing = {attr for mod, attr in _SETTLES | _VOLATILE if mod == name}
        self._add_namespace(name, module, only_callables=False, skip=changing)
        for attr, value in vars(module).items():
            if attr.startswith("__") or (name, attr) in _VOLATILE:
                continue
            if (name, attr) in _SETTLES:
                self.settled[(name, attr)] = value
            if value is not None:
                self._add_value(f"{name}.{attr}", value, name)

    def _add_value(self, label, value, module_name):
        if isinstance(value, types.FunctionType) and value.__module__ == module_name:
            self._add_function(label, value)
        elif isinstance(value, type) and value.__module__ == module_name:
            self._add_namespace(label, value, only_callables=False)
            for attr, member in vars(value).items():
                self._add_function(f"{label}.{attr}", member)
        elif _copy(value) is not None:
            self.containers.append((label, value, _copy(value)))
            items = value.values() if isinstance(value, dict) else value
            for item in items:
                if dataclasses.is_dataclass(item) and not isinstance(item, type):
                    self._add_object(f"{label}[{getattr(item, 'id', '')}]", item)
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            self._add_object(label, value)

    def _add_object(self, label, obj):
        if any(o is obj for _, o, _, _ in self.objects):
            return
        if isinstance(getattr(obj, "id", None), str):
            label = f"exercise {obj.id}"
        fields = _fields(obj)
        copies = {k: _copy(v) for k, v in fields.items() if _copy(v) is not None}
        self.objects.append((label, obj, fields, copies))

    def watch_ipython(self, shell, names: dict[str, object], before_cell):
        """Watch a Jupyter kernel: the caller registers self.hook, before_cell(self), to run before each cell."""
        self.ipython = shell
        self.names = dict(names)
        self.hook = functools.partial(before_cell, self)
        self.ipython_state = {
            "input_transformers_cleanup": list(shell.input_transformers_cleanup),
            "input_transformers_post": list(shell.input_transformers_post),
            "ast_transformers": list(shell.ast_transformers),
            "custom_exceptions": shell.custom_exceptions,
        }

    # -- comparing and restoring ------------------------------------------------------------------------

    def differences(self) -> list[tuple[str, callable]]:
        """(what changed, how to put it back) for everything that differs from the record."""
        found = []
        for label, owner, kept in self.entries:
            ns = vars(owner)
            for name, value in kept.items():
                now = ns.get(name, _UNSET)
                if now is not value:
                    what = "removed" if now is _UNSET else f"replaced by {_describe(now)}"
                    found.append((f"{label}.{name} was {what}", lambda o=owner, n=name, v=value: setattr(o, n, v)))
            if owner is _tensor_class():
                base = owner.__mro__[1]
                for name in ns.keys() - kept.keys():
                    if not name.startswith("__") and hasattr(base, name):
                        found.append((f"torch.Tensor.{name} was replaced by {_describe(ns[name])}",
                                      lambda o=owner, n=name: delattr(o, n)))
        for label, fn, saved in self.functions.values():
            if (fn.__code__, fn.__defaults__, fn.__kwdefaults__) != saved:
                found.append((f"the code of {label} was replaced", lambda f=fn, s=saved: _set_code(f, s)))
        for label, container, saved in self.containers:
            if container != saved:
                found.append((f"{label} was changed", lambda c=container, s=saved: _refill(c, s)))
        for label, obj, fields, copies in self.objects:
            changed = [k for k, v in fields.items()
                       if getattr(obj, k) is not v or (k in copies and getattr(obj, k) != copies[k])]
            if changed:
                found.append((f"the settings of {label} were changed ({', '.join(changed)})",
                              lambda o=obj, f=fields, c=copies: _reset_fields(o, f, c)))
        for (module, attr), value in self.settled.items():
            now = getattr(sys.modules[module], attr, None)
            if value is None:
                if now is not None:  # set for the first time, by the grader: from now on it must stay
                    self.settled[(module, attr)] = now
                    if dataclasses.is_dataclass(now):
                        self._add_object(f"{module}.{attr}", now)
            elif now is not value:
                found.append((f"{module}.{attr} was replaced",
                              lambda m=module, a=attr, v=value: setattr(sys.modules[m], a, v)))
        if _config_state() != self.config:
            changed = ("the grading configuration (grading.toml or $FUSION_COURSE_GRADING) was changed after the "
                       "grader was imported")
            found.append((changed, None))
        if self.ipython is not None:
            for name, saved in self.ipython_state.items():
                now = getattr(self.ipython, name)
                if (list(now) if isinstance(saved, list) else now) != saved:
                    found.append((f"IPython's {name} was changed (it rewrites or hides what the cells run)",
                                  lambda n=name, s=saved: _reset_ipython(self.ipython, n, s)))
            if self.hook not in self.ipython.events.callbacks.get("pre_run_cell", []):
                found.append(("the grader's before-cell check was unregistered",
                              lambda: self.ipython.events.register("pre_run_cell", self.hook)))
        return found

    def problems(self) -> list[str]:
        found = [what for what, _ in self.differences()]
        found += [f"{what} (put back before a later cell)" for what in self.restored if what not in found]
        if self.early_code:
            found.append("notebook code ran before the grader was imported (a cell above the set-up cell)")
        return found

    def restore(self) -> list[str]:
        """Put back everything that differs; returns what was put back (and remembers it)."""
        put_back = []
        for what, undo in self.differences():
            if undo is not None:
                undo()
                put_back.append(what)
        self.restored += [w for w in put_back if w not in self.restored]
        return put_back

    def seal(self, container) -> None:
        """Make what a recorded container holds now its record (see integrity.seal)."""
        for i, (label, recorded, _) in enumerate(self.containers):
            if recorded is container:
                self.containers[i] = (label, container, _copy(container))


def _tensor_class():
    import torch

    return torch.Tensor


def _set_code(fn, saved):
    fn.__code__, fn.__defaults__, fn.__kwdefaults__ = saved


def _refill(container, saved):
    container.clear()
    if isinstance(container, dict):
        container.update(saved)
    elif isinstance(container, list):
        container.extend(saved)
    else:
        container.update(saved)


def _reset_fields(obj, fields, copies):
    for k, v in fields.items():
        object.__setattr__(obj, k, v)  # frozen dataclasses too
        if k in copies:
            _refill(v, copies[k])


def _reset_ipython(shell, name, saved):
    if isinstance(saved, list):
        getattr(shell, name)[:] = saved
    else:
        setattr(shell, name, saved)
