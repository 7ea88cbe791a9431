"""Deploying to a cluster: bpfman bytecode images and bpfman-operator resources.

A stage after ``obj/`` (it imports abi, obj, compiler; only the CLI imports it):

- :mod:`bpfdsl.deploy.bpfman`: bpfman's format (labels, media types, attachable types);
- :mod:`bpfdsl.deploy.oci`: OCI image layouts and archives, reproducible, written atomically;
- :mod:`bpfdsl.deploy.manifest`: ClusterBpfApplication / BpfApplication resources as YAML.

:func:`build_image` and :func:`write_manifest` are the two pipelines the CLI runs.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bpfdsl.deploy import bpfman, manifest, oci
from bpfdsl.diagnostics import DiagnosticError, error
from bpfdsl.obj.collection import read_object

if TYPE_CHECKING:  # pragma: no cover
    from bpfdsl.obj.spec import CollectionSpec

__all__ = [
    "Deployment",
    "bpfman",
    "build_image",
    "image_inputs",
    "manifest",
    "oci",
    "topology_manifest",
    "write_manifest",
]


def image_inputs(
    objects: list[tuple[str, bytes]], tag: str, stems: list[str] | None = None
) -> list[oci.ImageInput]:
    """One :class:`~bpfdsl.deploy.oci.ImageInput` per ``(path, ELF bytes)``: the layer file
    is ``<stem>.o``; the tag is ``tag`` for one object, ``<stem>-<tag>`` for several.  The
    stem is the file name's without its suffix, or ``stems[i]`` when given (a topology
    file's object names, which tell apart two objects of one source).

    Each object is read (UsageError when it is not a usable eBPF object) and must hold a
    program bpfman can attach (DiagnosticError ``not-attachable``, located, exit 1)."""
    out = []
    for i, (path, data) in enumerate(objects):
        spec = read_object(data, name=path)
        bpfman.require_attachable(spec, path)
        stem = stems[i] if stems is not None else os.path.splitext(os.path.basename(path))[0]
        out.append(
            oci.ImageInput(
                filename=f"{stem}.o",
                data=data,
                labels=bpfman.labels(spec),
                tag=tag if len(objects) == 1 else f"{stem}-{tag}",
            )
        )
    return out


def build_image(
    objects: list[tuple[str, bytes]],
    out_dir: str,
    *,
    archive: str | None = None,
    tag: str = "latest",
    arch: str | None = None,
    stems: list[str] | None = None,
) -> oci.Layout:
    """Read ``objects`` (path, ELF bytes), make their image layout (one image per object,
    :func:`image_inputs`, named by ``stems`` when given) and write it to ``out_dir`` (and
    ``archive``, a tar of it).  Nothing is written when any step fails."""
    oci.check_tag(tag)
    layout = oci.layout_files(image_inputs(objects, tag, stems), arch=arch)
    oci.write_layout(layout, out_dir, archive)
    return layout


def write_manifest(path: str, data: bytes, opts: manifest.Options, output: str | None) -> str:
    """The resource for the object ``path`` (ELF ``data``) as YAML, written to ``output``
    (atomically: a temporary file renamed) or only returned when ``output`` is None."""
    spec = read_object(data, name=path)
    text = manifest.to_yaml(manifest.application(spec, path, opts))
    _write_text(output, text)
    return text


@dataclass(frozen=True, slots=True)
class Deployment:
    """One object of a topology file as bpfman deploys it: ``name`` (the topology's
    object name), ``path`` (its source or object file, for messages), ``spec``, ``image``
    (the bytecode image URL holding it), ``config`` (``NAME=VALUE`` load-time configs,
    written as ``spec.globalData``) and ``xdp``: program name -> the interfaces it attaches
    to (in file order)."""

    name: str
    path: str
    spec: CollectionSpec
    image: str
    config: tuple[str, ...]
    xdp: dict[str, list[str]]


def _resource_name(base: str, obj: str, several: bool) -> str:
    if not several:
        return base
    return f"{base}-{manifest.object_name(obj)}"


def topology_manifest(
    deployments: list[Deployment], opts: manifest.Options, output: str | None
) -> str:
    """One resource per deployment (named ``opts.name`` for one, ``NAME-OBJECT`` for
    several), each loading its object's image and attaching its XDP programs to the
    interfaces given; ``opts`` gives what the topology file does not say (nodes,
    namespace, pods, pull policy, priority).  The YAML documents, concatenated, are written
    to ``output`` atomically (nothing when any resource fails) and returned.

    Raises what :func:`bpfdsl.deploy.manifest.application` raises."""
    docs = []
    several = len(deployments) > 1
    for d in deployments:
        o = dataclasses.replace(
            opts,
            image=d.image,
            name=_resource_name(opts.name, d.name, several),
            programs=list(d.xdp),
            program_interfaces={k: list(v) for k, v in d.xdp.items()},
            config=list(d.config),
        )
        docs.append(manifest.to_yaml(manifest.application(d.spec, d.path, o)))
    text = "".join(docs)
    _write_text(output, text)
    return text


def _write_text(output: str | None, text: str) -> None:
    """``text`` into the file ``output`` (a temporary file renamed over it), or nothing for
    None.  DiagnosticError ``unwritable-output`` when the directory refuses it."""
    if output is None:
        return
    target = os.path.abspath(output)
    tmp = f"{target}.tmp-{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, target)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise DiagnosticError(
            error(
                "unwritable-output",
                f"cannot write {output}: {(e.strerror or str(e)).lower()}",
                hint="choose an output path in a directory you can write to",
            )
        ) from None
