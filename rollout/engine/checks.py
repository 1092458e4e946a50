"""The kinds of value a run option takes: how each is checked, normalised, spelled on a command line and
described in the docs. ``spec.py`` gives every option one of these; nothing else checks an option's type.

A check raises ``RolloutError`` (a ``ValueError``) naming the option, the value given and what is expected;
a value of the wrong type raises ``RolloutTypeError`` (also a ``TypeError``).
"""

from __future__ import annotations

import enum
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import RolloutError


class RolloutTypeError(RolloutError, TypeError):
    """A run option of the wrong type (``except ValueError`` and ``except TypeError`` both catch it)."""


def _show(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 80 else text[:77] + "..."


def _wrong_type(name: str, v: Any, expected: str) -> RolloutTypeError:
    return RolloutTypeError(f"{name} must be {expected}, got {_show(v)} ({type(v).__name__})")


def _is_real(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


def _values(choices) -> tuple:
    return tuple(c.value for c in choices) if isinstance(choices, type) and issubclass(choices, enum.Enum) \
        else tuple(choices)


@dataclass(frozen=True)
class Kind:
    """A value kind: ``check(name, v)`` gives the normalised value or raises; ``none`` allows None."""

    none: bool = False

    def check(self, name: str, v: Any) -> Any:
        if v is None:
            if self.none:
                return None
            raise _wrong_type(name, v, self.describe())
        return self._check(name, v)

    def _check(self, name: str, v: Any) -> Any:
        return v

    def describe(self) -> str:
        return "any value"

    # the command line: the argparse ``type`` converter, and the tokens that give a value back
    def cli_type(self) -> Callable[[str], Any] | None:
        return str

    def argv(self, flag: str, v: Any) -> list[str]:
        return [flag, str(v)]


@dataclass(frozen=True)
class Int(Kind):
    lo: int | None = None
    hi: int | None = None

    def _check(self, name, v):
        if isinstance(v, (float, np.floating)) and _is_real(v) and math.isfinite(v) and float(v).is_integer():
            v = int(v)  # 10.0 is 10; 10.5 is refused below
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise _wrong_type(name, v, self.describe())
        v = int(v)
        if (self.lo is not None and v < self.lo) or (self.hi is not None and v > self.hi):
            raise RolloutError(f"{name} must be {self._range()}, got {v}")
        return v

    def _range(self) -> str:
        rng = [f">= {self.lo}" if self.lo is not None else "", f"<= {self.hi}" if self.hi is not None else ""]
        return " and ".join(r for r in rng if r)

    def describe(self):
        return f"an int {self._range()}".strip() + (" or None" if self.none else "")

    def cli_type(self):
        return int


@dataclass(frozen=True)
class Float(Kind):
    lo: float | None = None
    gt: bool = False        # lo excluded
    hi: float | None = None

    def _check(self, name, v):
        if not _is_real(v):
            raise _wrong_type(name, v, self.describe())
        v = float(v)
        bad = not math.isfinite(v) or (self.lo is not None and (v <= self.lo if self.gt else v < self.lo)) or (
            self.hi is not None and v > self.hi)
        if bad:
            said = self._range() if math.isfinite(v) else f"finite{' and ' + self._range() if self._range() else ''}"
            raise RolloutError(f"{name} must be {said}, got {v!r}")
        return v

    def _range(self) -> str:
        rng = [f"{'>' if self.gt else '>='} {self.lo:g}" if self.lo is not None else "",
               f"<= {self.hi:g}" if self.hi is not None else ""]
        return " and ".join(r for r in rng if r)

    def describe(self):
        return f"a finite number {self._range()}".strip() + (" or None" if self.none else "")

    def cli_type(self):
        return float

    def argv(self, flag, v):
        return [flag, repr(float(v))]  # repr: floats round-trip exactly


@dataclass(frozen=True)
class Bool(Kind):
    def _check(self, name, v):
        if not isinstance(v, (bool, np.bool_)):
            raise _wrong_type(name, v, "True or False (a bool)")
        return bool(v)

    def describe(self):
        return "a bool"

    def cli_type(self):
        return None  # a flag (store_true)

    def argv(self, flag, v):
        return [flag] if v else []


@dataclass(frozen=True)
class Choice(Kind):
    choices: Any = ()       # a str Enum or a tuple of values

    @property
    def values(self) -> tuple:
        return _values(self.choices)

    def _check(self, name, v):
        if isinstance(v, enum.Enum):
            v = v.value
        if not isinstance(v, (str, int)) or isinstance(v, bool) or v not in self.values:
            raise RolloutError(f"{name} must be one of {self.values}, got {_show(v)}")
        return v

    def describe(self):
        return "one of " + ", ".join(map(repr, self.values)) + (" or None" if self.none else "")


@dataclass(frozen=True)
class Pattern(Kind):
    """A string matching ``regex`` (described by ``text``)."""

    regex: str = ".*"
    text: str = "a string"

    def _check(self, name, v):
        if not isinstance(v, str):
            raise _wrong_type(name, v, self.text)
        if re.fullmatch(self.regex, v) is None:
            raise RolloutError(f"{name} must be {self.text}, got {v!r}")
        return v

    def describe(self):
        return self.text


@dataclass(frozen=True)
class Names(Kind):
    """One name or a sequence of names -> a tuple of str (``outputs="energy"`` is one name, not six letters)."""

    def _check(self, name, v):
        if isinstance(v, str):
            return (v,) if v else ()
        if isinstance(v, Mapping) or not isinstance(v, (Sequence, np.ndarray)):
            raise _wrong_type(name, v, "a name or a sequence of names")
        if not all(isinstance(x, str) for x in v):
            raise _wrong_type(name, v, "a name or a sequence of names (strings)")
        return tuple(v)

    def describe(self):
        return "a name or a sequence of names"

    def argv(self, flag, v):
        return [flag, *v] if v else []


@dataclass(frozen=True)
class Outputs(Names):
    """Recorded outputs: names, functions ``fn(m, d)`` or ``(name, fn)`` pairs; one of them alone is one output."""

    none: bool = True   # None: nothing recorded

    def check(self, name, v):
        return () if v is None else self._check(name, v)

    def _check(self, name, v):
        if isinstance(v, str) or callable(v):
            v = (v,)
        if isinstance(v, Mapping) or not isinstance(v, (Sequence, np.ndarray)):
            raise _wrong_type(name, v, "an output name, a function, or a sequence of them")
        for item in v:
            pair = isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str) and callable(item[1])
            if not (isinstance(item, str) or callable(item) or pair):
                raise _wrong_type(f"{name} item", item, "an output name, a function fn(m, d) or a (name, fn) pair")
        return tuple(x for x in v if x != "")

    def describe(self):
        return "output names, functions fn(m, d) or (name, fn) pairs (one alone is one output)"


@dataclass(frozen=True)
class Dict(Kind):
    """A mapping (keys ``str``); ``values``: the values' kind description, checked where the scene is known."""

    values: str = "values"
    str_values: bool = False

    def _check(self, name, v):
        if not isinstance(v, Mapping):
            raise _wrong_type(name, v, f"a dict {{name: {self.values}}}")
        for k, x in v.items():
            if not isinstance(k, str):
                raise _wrong_type(f"{name} key", k, "a str")
            if self.str_values and not isinstance(x, str):
                raise _wrong_type(f"{name}[{k!r}]", x, self.values)
        return dict(v)

    def describe(self):
        return f"a dict {{name: {self.values}}}" + (" or None" if self.none else "")


@dataclass(frozen=True)
class Path(Kind):
    def _check(self, name, v):
        if getattr(v, "path", None) is not None and not isinstance(v, (str, os.PathLike)):
            return v  # an h5.ResumeInfo: the file as already read
        if not isinstance(v, (str, os.PathLike)):
            raise _wrong_type(name, v, "a path (str or os.PathLike)")
        text = os.fspath(v)
        if not isinstance(text, str) or not text:
            raise RolloutError(f"{name} must be a non-empty path, got {_show(v)}")
        return v

    def describe(self):
        return "a path" + (" or None" if self.none else "")


@dataclass(frozen=True)
class Compression(Kind):
    def _check(self, name, v):
        if v in ("gzip", "lzf") and isinstance(v, str):
            return v
        if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) and 0 <= v <= 9:
            return int(v)
        raise RolloutError(f"{name} must be None, 'gzip', 'lzf' or a gzip level 0-9, got {_show(v)}")

    def describe(self):
        return "None, 'gzip', 'lzf' or a gzip level 0-9"

    def cli_type(self):
        return lambda s: None if s == "none" else s


@dataclass(frozen=True)
class Devices(Kind):
    def _check(self, name, v):
        if _is_real(v) or isinstance(v, (bool, np.bool_)):
            return Int(lo=1).check(name, v)
        if isinstance(v, (str, Mapping)) or not isinstance(v, Sequence):
            raise _wrong_type(name, v, "None, a device count or a sequence of devices")
        if len(v) == 0:
            raise RolloutError(f"{name} must name at least one device, got {_show(v)}")
        return v

    def describe(self):
        return "None (all), a device count >= 1 or a sequence of devices"

    def cli_type(self):
        return int


@dataclass(frozen=True)
class Free(Kind):
    """A value checked against the scene (an array, a function): ``text`` describes it."""

    none: bool = True
    text: str = "see its description"

    def describe(self):
        return self.text
