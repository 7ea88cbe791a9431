"""bpfman-operator custom resources for a bytecode image (pure): ClusterBpfApplication, or
BpfApplication in a namespace, as the operator's v0.6.0 CRDs define them
(``config/crd/bases/bpfman.io_{cluster,}bpfapplications.yaml`` of bpfman-operator v0.6.0;
that release has no XdpProgram/TcProgram kinds any more).

:func:`application` builds the resource as a dict; :func:`to_yaml` writes it.  ``--set``
values become ``spec.globalData``: the bytes of each ``.rodata`` VAR by its BTF type
(:func:`bpfdsl.obj.config.config_bytes`: ``be16`` in network order, ``u32`` little-endian),
base64 as the CRD's ``format: byte`` (Go ``[]byte``) wants them.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bpfdsl.abi.btf.run_config import RunConfig
from bpfdsl.deploy.bpfman import (
    ATTACH_NOTE,
    ATTACHABLE,
    attachable,
    describe,
    program_span,
    require_attachable,
)
from bpfdsl.diagnostics import DiagnosticError, UsageError, error
from bpfdsl.obj.config import config_bytes, parse_config

if TYPE_CHECKING:  # pragma: no cover
    from bpfdsl.obj.spec import CollectionSpec, ProgramSpec

API_VERSION = "bpfman.io/v1alpha1"
KINDS = tuple(k for a in ATTACHABLE for k in a.kinds)  # --kind words: xdp, tc, tcx
PULL_POLICIES = ("Always", "IfNotPresent", "Never")  # CRD byteCode.image.imagePullPolicy
DIRECTIONS = {"ingress": "Ingress", "egress": "Egress"}  # CRD tc/tcx links direction
PRIORITY_RANGE = (0, 1000)  # CRD xdp/tc/tcx links priority: minimum, maximum
# CRD programs[].name pattern (unanchored at the end, as Kubernetes applies it).
PROGRAM_NAME_RE = re.compile(r"^[a-zA-Z][a-zA-Z0-9_]+.")
# metadata.name: a DNS-1123 subdomain (Kubernetes apimachinery validation).
DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def object_name(text: str) -> str:
    """``text`` (a file stem, a topology's object name) as a Kubernetes object name part:
    lower case, every run of other characters than ``a-z0-9.-`` one ``-``, no ``-``/``.``
    at the ends (DNS-1123); ``bpfdsl`` when nothing is left."""
    return re.sub(r"[^a-z0-9.-]+", "-", text.lower()).strip("-.") or "bpfdsl"


@dataclass(slots=True)
class Options:
    """What the resource says beyond the object: ``image`` URL; ``kind`` (xdp, tc, tcx;
    None = from each program); ``programs`` (None = every one bpfman can attach);
    ``interfaces`` (names) or ``primary_interface``; ``node_selector`` (label -> value;
    empty = every node); ``priority`` (0..1000, None = bpfman's default 1000);
    ``direction`` (tc/tcx); ``config`` (``--set`` items); ``namespace`` (None = cluster
    scoped) with ``pods`` (label -> value: the pods whose network namespaces the links go
    into, required by BpfApplication); ``pull_policy``; ``program_interfaces``: program
    name -> its own interfaces (a topology file's ``[[xdp]]`` tables), which wins over
    ``interfaces`` for that program."""

    image: str
    name: str
    kind: str | None = None
    programs: list[str] | None = None
    interfaces: list[str] = field(default_factory=list)
    primary_interface: bool = False
    node_selector: dict[str, str] = field(default_factory=dict)
    priority: int | None = None
    direction: str = "ingress"
    config: list[str] = field(default_factory=list)
    namespace: str | None = None
    pods: dict[str, str] = field(default_factory=dict)
    pull_policy: str | None = None
    program_interfaces: dict[str, list[str]] = field(default_factory=dict)


def _kinds(p: ProgramSpec) -> tuple[str, ...]:
    a = attachable(p)
    return a.kinds if a is not None else ()


def _bad(msg: str, hint: str | None = None, code: str = "bad-args") -> UsageError:
    return UsageError(error(code, msg, hint=hint))


def global_data(spec: CollectionSpec, items: list[str]) -> dict[str, str]:
    """``--set NAME=VALUE`` items -> {name: base64 of the VAR's bytes}; DiagnosticError
    ``unknown-config`` (exit 1) naming the configs of the object for a name not in .rodata."""
    try:
        values = parse_config(items, spec.configs)
    except UsageError as e:
        d = e.diagnostics[0]
        if d.code == "unknown-config":
            raise DiagnosticError(d) from None
        raise
    return {
        name: base64.b64encode(config_bytes(spec, name, text)).decode()
        for name, text in values.items()
    }


# the CRD's XDP proceedOn values by XDP action (bpfman-operator apis/v1alpha1
# XdpProceedOnValue); DispatcherReturn (libxdp's XDP_DISPATCHER_RETVAL, a slot with no
# program) always continues, as libxdp sets it for every program
PROCEED_ON = {"XDP_ABORTED": "Aborted", "XDP_DROP": "Drop", "XDP_PASS": "Pass",
              "XDP_TX": "TX", "XDP_REDIRECT": "ReDirect"}  # fmt: skip


def _links(name: str, a_kind: str, opts: Options, rc: RunConfig | None = None) -> list[dict]:
    """The links of program ``name``; an XDP program's ``rc`` (its run config in the
    object) gives ``priority`` (unless ``opts.priority``) and ``proceedOn``."""
    if name in opts.program_interfaces:
        selector: dict = {"interfaces": list(opts.program_interfaces[name])}
    elif opts.primary_interface:
        selector = {"primaryNodeInterface": True}
    else:
        selector = {"interfaces": list(opts.interfaces)}
    link: dict = {"interfaceSelector": selector}
    if opts.priority is not None:
        link["priority"] = opts.priority
    elif rc is not None and a_kind == "xdp":
        link["priority"] = rc.priority
    if rc is not None and a_kind == "xdp":
        link["proceedOn"] = [PROCEED_ON[a] for a in rc.chain_call] + ["DispatcherReturn"]
    if a_kind in ("tc", "tcx"):
        link["direction"] = DIRECTIONS[opts.direction]
    if opts.namespace is not None:
        link["networkNamespaces"] = {"pods": {"matchLabels": dict(opts.pods)}}
    return [link]


def _check(opts: Options) -> None:
    if not (opts.interfaces or opts.primary_interface or opts.program_interfaces):
        raise _bad(
            "no interface to attach to",
            hint="give --interface NAME (repeatable) or --primary-interface",
        )
    if opts.interfaces and opts.primary_interface:
        raise _bad("--interface and --primary-interface exclude each other")
    lo, hi = PRIORITY_RANGE
    if opts.priority is not None and not lo <= opts.priority <= hi:
        raise _bad(f"--priority {opts.priority} is outside {lo}..{hi}", hint="lower runs first")
    if not DNS1123.match(opts.name) or len(opts.name) > 253:
        raise _bad(
            f"--name {opts.name!r} is not a Kubernetes object name",
            hint="lower-case letters, digits, '-' and '.', starting and ending alphanumeric",
        )
    if opts.namespace is not None:
        if not DNS1123.match(opts.namespace) or "." in opts.namespace:
            raise _bad(f"--namespace {opts.namespace!r} is not a Kubernetes namespace name")
        if not opts.pods:
            raise _bad(
                "a BpfApplication (--namespace) attaches inside pods' network namespaces",
                hint="give --pods LABEL=VALUE to select them",
            )
    if opts.pull_policy is not None and opts.pull_policy not in PULL_POLICIES:
        raise _bad(f"--pull-policy {opts.pull_policy!r}", hint=", ".join(PULL_POLICIES))


def application(spec: CollectionSpec, path: str, opts: Options) -> dict:
    """The ClusterBpfApplication (BpfApplication with ``opts.namespace``) that loads the
    programs of ``spec`` (read from ``path``) from ``opts.image`` and attaches them.

    Raises DiagnosticError (exit 1, located at the program) for a program bpfman cannot
    attach as ``opts.kind``, ``unknown-config`` for a ``--set`` name not in .rodata;
    UsageError (exit 2) for an option the CRD refuses."""
    _check(opts)
    names = opts.programs
    if names is None:
        names = require_attachable(spec, path)
        if opts.kind is not None:
            names = [n for n in names if opts.kind in _kinds(spec.programs[n])]
        if not names:
            first = next(iter(spec.programs.values()))
            raise DiagnosticError(
                error(
                    "not-attachable",
                    f"no program of {path} that bpfman can attach as {opts.kind}",
                    program_span(first, path),
                    note=ATTACH_NOTE,
                    hint="programs: " + ", ".join(describe(p) for p in spec.programs.values()),
                )
            )
    programs = []
    for n in names:
        p = spec.programs.get(n)
        if p is None:
            raise _bad(
                f"no program named {n!r} in {path}",
                hint=f"programs: {', '.join(sorted(spec.programs))}",
                code="unknown-program",
            )
        a = attachable(p)
        kind = opts.kind or (a.kinds[0] if a else None)
        if a is None or kind not in a.kinds:
            raise DiagnosticError(
                error(
                    "not-attachable",
                    f"bpfman cannot attach program {describe(p)}"
                    + (f" as {kind}" if a is not None else ""),
                    program_span(p, path),
                    note=ATTACH_NOTE,
                    hint="pick an xdp program with --program"
                    if a is None
                    else f"use --kind {'/'.join(a.kinds)}",
                )
            )
        if not PROGRAM_NAME_RE.match(n):
            raise DiagnosticError(
                error(
                    "bad-program-name",
                    f"the operator refuses the program name {n!r}",
                    program_span(p, path),
                    hint="bpfman-operator wants at least 3 characters, a letter first, "
                    "then letters, digits or _: rename the function",
                )
            )
        cr_type = a.cr_types[a.kinds.index(kind)]
        rc = spec.run_config(n) if kind == "xdp" else None
        lo, hi = PRIORITY_RANGE
        if rc is not None and opts.priority is None and not lo <= rc.priority <= hi:
            raise DiagnosticError(
                error(
                    "bad-priority",
                    f"program {n!r} declares priority {rc.priority}: bpfman takes {lo}..{hi}",
                    program_span(p, path),
                    hint="declare a priority in that range, or give --priority",
                )
            )
        links = _links(n, kind, opts, rc)
        programs.append({"name": n, "type": cr_type, kind: {"links": links}})
    image: dict = {"url": opts.image}
    if opts.pull_policy is not None:
        image["imagePullPolicy"] = opts.pull_policy
    spec_doc: dict = {
        "nodeSelector": {"matchLabels": dict(opts.node_selector)} if opts.node_selector else {},
        "byteCode": {"image": image},
    }
    gd = global_data(spec, opts.config)
    if gd:
        spec_doc["globalData"] = gd
    spec_doc["programs"] = programs
    meta: dict = {"name": opts.name}
    if opts.namespace is not None:
        meta["namespace"] = opts.namespace
    return {
        "apiVersion": API_VERSION,
        "kind": "BpfApplication" if opts.namespace is not None else "ClusterBpfApplication",
        "metadata": meta,
        "spec": spec_doc,
    }


# ---- YAML text (block style, the subset resources need; strings quoted unless plain-safe) ----

_PLAIN = re.compile(r"^[A-Za-z_/][A-Za-z0-9_./@+-]*(:[A-Za-z0-9_./@+-]+)*$")
_YAML_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"}


def _scalar(v: object) -> str:
    if v is True or v is False:
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, int):
        return str(v)
    s = str(v)
    if _PLAIN.match(s) and s.lower() not in _YAML_WORDS:
        return s
    return json.dumps(s)  # a YAML double-quoted scalar (JSON escapes are YAML escapes)


def _emit(v: object, indent: int, out: list[str]) -> None:
    pad = " " * indent
    if isinstance(v, dict):
        for k, x in v.items():
            if isinstance(x, dict) and x:
                out.append(f"{pad}{_scalar(k)}:")
                _emit(x, indent + 2, out)
            elif isinstance(x, list) and x:
                out.append(f"{pad}{_scalar(k)}:")
                _emit(x, indent + 2, out)
            else:
                out.append(f"{pad}{_scalar(k)}: {_inline(x)}")
    elif isinstance(v, list):
        for x in v:
            if isinstance(x, dict) and x:
                sub: list[str] = []
                _emit(x, indent + 2, sub)
                out.append(f"{pad}- {sub[0].lstrip()}")
                out.extend(sub[1:])
            elif isinstance(x, list) and x:
                out.append(f"{pad}-")
                _emit(x, indent + 2, out)
            else:
                out.append(f"{pad}- {_inline(x)}")


def _inline(v: object) -> str:
    if isinstance(v, dict):
        return "{}"
    if isinstance(v, list):
        return "[]"
    return _scalar(v)


def to_yaml(doc: dict) -> str:
    """``doc`` as a YAML document (``---`` first; keys in the order given)."""
    out = ["---"]
    _emit(doc, 0, out)
    return "\n".join(out) + "\n"
