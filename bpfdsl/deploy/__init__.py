"""Deploying to a cluster: bpfman bytecode images and bpfman-operator resources.

A stage after ``obj/`` (it imports abi, obj, compiler; only the CLI imports it):

- :mod:`bpfdsl.deploy.bpfman`: bpfman's format (labels, media types, attachable types);
- :mod:`bpfdsl.deploy.oci`: OCI image layouts and archives, reproducible, written atomically;
- :mod:`bpfdsl.deploy.manifest`: ClusterBpfApplication / BpfApplication resources as YAML.

:func:`build_image` and :func:`write_manifest` are the two pipelines the CLI runs.
"""

from __future__ import annotations

import os

from bpfdsl.deploy import bpfman, manifest, oci
from bpfdsl.diagnostics import DiagnosticError, error
from bpfdsl.obj.collection import read_object

__all__ = ["bpfman", "build_image", "image_inputs", "manifest", "oci", "write_manifest"]


def image_inputs(objects: list[tuple[str, bytes]], tag: str) -> list[oci.ImageInput]:
    """One :class:`~bpfdsl.deploy.oci.ImageInput` per ``(path, ELF bytes)``: the layer file
    is ``<stem>.o``; the tag is ``tag`` for one object, ``<stem>-<tag>`` for several.

    Each object is read (UsageError when it is not a usable eBPF object) and must hold a
    program bpfman can attach (DiagnosticError ``not-attachable``, located, exit 1)."""
    out = []
    for path, data in objects:
        spec = read_object(data, name=path)
        bpfman.require_attachable(spec, path)
        stem = os.path.splitext(os.path.basename(path))[0]
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
) -> oci.Layout:
    """Read ``objects`` (path, ELF bytes), make their image layout (one image per object,
    :func:`image_inputs`) and write it to ``out_dir`` (and ``archive``, a tar of it).
    Nothing is written when any step fails."""
    oci.check_tag(tag)
    layout = oci.layout_files(image_inputs(objects, tag), arch=arch)
    oci.write_layout(layout, out_dir, archive)
    return layout


def write_manifest(path: str, data: bytes, opts: manifest.Options, output: str | None) -> str:
    """The resource for the object ``path`` (ELF ``data``) as YAML, written to ``output``
    (atomically: a temporary file renamed) or only returned when ``output`` is None."""
    spec = read_object(data, name=path)
    text = manifest.to_yaml(manifest.application(spec, path, opts))
    if output is not None:
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
    return text
