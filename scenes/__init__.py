"""Bundled MJCF scenes and ``load_scene``: a path, an XML string or a bundled name -> MjModel."""

from __future__ import annotations

import os
import re
import weakref
from dataclasses import dataclass, field
from importlib import resources
from typing import TypeAlias

import mujoco

from . import compat  # noqa: F401 - mjharness.scenes.compat, for readers of the codes
from .compat import check_mjx_trace
from .compat_adapt import apply as adapt_for_mjx
from .errors import LOAD_CODES, SceneError
from .topology import (
    TopologyError,
    Tree,
    aggregation_tree_asd,
    body_tree,
    cutjoints,
    format_topology,
    supernodes,
    topology_report,
)

__all__ = ["load_scene", "load_native", "list_scenes", "scene_path", "parse_spec", "scene_info", "compat_log",
           "SceneError", "SceneInfo", "check_mjx_trace", "LOAD_CODES"]
__all__ += ["body_tree", "cutjoints", "aggregation_tree_asd", "supernodes", "Tree", "TopologyError",
            "topology_report", "format_topology"]  # topology

# What a scene is loaded from: a bundled name, an MJCF path, an XML string, or a compiled model.
SceneSource: TypeAlias = "str | os.PathLike[str] | mujoco.MjModel"


@dataclass
class SceneInfo:
    """What a loaded model came from (kept beside the MjModel, which takes no attributes)."""

    source: str
    xml: str
    compat_log: list = field(default_factory=list)
    source_xml: str | None = None  # the MJCF as given (a file's text with its includes inlined); None: unknown


_INFO: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def list_scenes() -> list[str]:
    """Names of the bundled scenes."""
    return sorted(p.name[:-4] for p in resources.files(__name__).iterdir() if p.name.endswith(".xml"))


def scene_path(name: str) -> str:
    """Filesystem path of a bundled scene."""
    if name not in list_scenes():
        raise SceneError(f"bundled scene {name!r}", f"no such bundled scene; available: {', '.join(list_scenes())}",
                         codes=("SCENE_NOT_FOUND",))
    return str(resources.files(__name__).joinpath(name + ".xml"))


def _describe(src: str) -> str:
    one = " ".join(src.split())
    return f"XML string {one[:60]!r}{'...' if len(one) > 60 else ''}"


def parse_spec(src: SceneSource) -> tuple[mujoco.MjSpec, str]:
    """Parse ``src`` (path, XML string or bundled name) into an MjSpec; returns (spec, source text)."""
    if isinstance(src, os.PathLike):
        src = os.fspath(src)
    if not isinstance(src, str):
        raise SceneError(repr(src), f"expected a path, an XML string, a bundled name or an MjModel, "
                                    f"got {type(src).__name__}", codes=("SCENE_SOURCE_INVALID",))
    text = src.strip()
    if text.startswith("<"):
        source = _describe(text)
        loader = lambda: mujoco.MjSpec.from_string(src)  # noqa: E731
    elif os.path.isfile(src):
        source = f"file {src!r}"
        loader = lambda: mujoco.MjSpec.from_file(src)  # noqa: E731
    elif src in list_scenes():
        path = scene_path(src)
        source = f"bundled scene {src!r}"
        loader = lambda: mujoco.MjSpec.from_file(path)  # noqa: E731
    elif os.sep in src or "/" in src or src.lower().endswith((".xml", ".mjcf")):
        raise SceneError(f"file {src!r}", "no such file", codes=("SCENE_NOT_FOUND",))
    else:
        raise SceneError(f"bundled scene {src!r}",
                         f"no such bundled scene and no such file; bundled: {', '.join(list_scenes())}",
                         codes=("SCENE_NOT_FOUND",))
    try:
        return loader(), source
    except Exception as e:  # MuJoCo raises ValueError with its message (and line number)
        xml = src if text.startswith("<") else None
        raise SceneError(source, parse_message(str(e), xml if xml is not None else _read(path if src in
                                                                                      list_scenes() else src)),
                         codes=("MJCF_PARSE_FAILED",)) from None


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


# tinyxml2's two-line message ("XML parse error 6:\nError=XML_ERROR_PARSING_ELEMENT ErrorID=6 (0x6) Line number=4")
# and MuJoCo's schema message ("XML Error: Schema violation: unrecognized attribute: 'typo'\nElement 'geom', line 4").
_TINYXML = re.compile(r"Error=XML_ERROR_(\w+).*?Line number=(\d+)", re.S)
_SCHEMA = re.compile(r"XML Error:\s*(.*?)\s*\n\s*Element '([^']*)', line (\d+)", re.S)


def parse_message(message: str, xml: str) -> str:
    """MuJoCo's parse error as one line: ``line N, element 'geom': what, at: <the line's text>``."""
    message = message.strip()
    m = _SCHEMA.search(message)
    if m:
        what, element, line = m.group(1), m.group(2), int(m.group(3))
        head = f"line {line}, element '{element}': {what[0].lower() + what[1:]}"
    else:
        m = _TINYXML.search(message)
        if not m:
            return " ".join(message.split())
        line = int(m.group(2))
        head = f"line {line}: malformed XML ({m.group(1).lower().replace('_', ' ')})"
    lines = xml.splitlines()
    at = lines[line - 1].strip() if 0 < line <= len(lines) else ""
    return head + (f", at: {at}" if at else "")


def load_scene(src: SceneSource, *, mjx: str = "adapt", unsupported_contacts: str = "refuse",
               need_sensors: bool = False) -> mujoco.MjModel:
    """Compile an MJCF scene: a file path, an XML string or a bundled name (see ``list_scenes``).

    ``mjx``: ``"adapt"`` applies the documented, meaning-preserving substitutions MJX needs and logs
    each; ``"strict"`` refuses a model MJX cannot run, listing every reason. ``unsupported_contacts``:
    ``"refuse"`` (default) or ``"exclude"`` (drop exactly the geom pairs MJX cannot collide, logged).
    Both modes then trace ``mjx.forward`` abstractly (``compat.check_mjx_trace``; nothing is compiled):
    a model whose sensor evaluation alone cannot be traced gets its sensors switched off in adapt mode
    unless ``need_sensors`` (logged, code ``MJX_TRACE_SENSOR``); every other trace failure refuses.
    The compatibility log is ``compat_log(model)``. An ``MjModel`` passes through unchanged.
    Every failure is one ``SceneError`` naming the source.
    """
    if isinstance(src, mujoco.MjModel):
        return src
    spec, model, source = _compile(src)
    model, log = adapt_for_mjx(spec, model, source, mode=mjx, unsupported_contacts=unsupported_contacts,
                              need_sensors=need_sensors)
    return _remember(model, spec, src, source, log)


def load_native(src: SceneSource) -> mujoco.MjModel:
    """Compile an MJCF scene for MuJoCo C as given: no MJX checks, no adaptation (MuJoCo C runs what it
    compiles). Source and saved XML are kept (``scene_info``) as ``load_scene`` keeps them."""
    if isinstance(src, mujoco.MjModel):
        return src
    spec, model, source = _compile(src)
    return _remember(model, spec, src, source, [])


def _compile(src) -> tuple[mujoco.MjSpec, mujoco.MjModel, str]:
    spec, source = parse_spec(src)
    try:
        return spec, spec.compile(), source
    except Exception as e:
        raise SceneError(source, str(e).strip(), codes=("MJCF_COMPILE_FAILED",)) from None


def _remember(model, spec, src, source: str, log) -> mujoco.MjModel:
    try:
        xml = spec.to_xml()
    except Exception:  # to_xml can refuse specs with in-memory assets; the file still runs
        xml = src if isinstance(src, str) and src.strip().startswith("<") else ""
    _INFO[model] = SceneInfo(source=source, xml=xml, compat_log=list(log), source_xml=source_text(src))
    return model


_INCLUDE = re.compile(r"<include\s+file\s*=\s*[\"']([^\"']+)[\"']\s*/>")
_ROOT = re.compile(r"<mujoco\b[^>]*>(.*)</mujoco>", re.S)


def source_text(src, _depth: int = 0) -> str | None:
    """The MJCF ``src`` as given: an XML string itself, a file's (or bundled scene's) text with every
    ``<include file=...>`` replaced by the included file's elements (MuJoCo's own include rule: the
    children of the included ``<mujoco>``). None when ``src`` is neither."""
    if isinstance(src, os.PathLike):
        src = os.fspath(src)
    if not isinstance(src, str):
        return None
    if src.strip().startswith("<"):
        return src
    path = src if os.path.isfile(src) else scene_path(src) if src in list_scenes() else None
    if path is None or _depth > 16:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError):
        return None
    here = os.path.dirname(os.path.abspath(path))

    def inline(m):
        inner = source_text(os.path.join(here, m.group(1)), _depth + 1)
        body = _ROOT.search(inner or "")
        return body.group(1) if body else m.group(0)

    return _INCLUDE.sub(inline, text)


def scene_info(model: mujoco.MjModel) -> SceneInfo:
    """Source, saved XML and compatibility log of a model loaded by ``load_scene``."""
    info = _INFO.get(model)
    if info is None:
        xml = ""
        try:
            import tempfile

            with tempfile.TemporaryDirectory() as d:
                p = os.path.join(d, "model.xml")
                mujoco.mj_saveLastXML(p, model)
                with open(p) as f:
                    xml = f.read()
        except Exception:
            pass
        info = SceneInfo(source="MjModel", xml=xml)
        _INFO[model] = info
    return info


def compat_log(model: mujoco.MjModel) -> list:
    """The MJX compatibility log of a model loaded by ``load_scene`` (empty when nothing applied)."""
    return scene_info(model).compat_log


_parse = parse_spec  # older name, kept for callers inside the package

