"""OCI image layouts of bytecode images, byte for byte reproducible, written atomically.

An image layout (opencontainers/image-spec ``image-layout.md``) is a directory with
``oci-layout``, ``index.json`` and ``blobs/sha256/<hex>``; :func:`layout_files` makes its
files (pure: path -> bytes), :func:`layout_tar` the same as one tar (what ``skopeo`` reads
as ``oci-archive:F.tar``), :func:`write_layout` puts them on disk so that a failure leaves
nothing behind (a temporary directory next to the target, renamed at the end).

Reproducible: blobs are JSON with sorted keys and no spaces; tar entries have mtime 0,
uid/gid 0, no user/group names, mode 0644 (directories 0755), in sorted order; gzip
members have mtime 0 and no file name.  The same objects give the same digests (for one
zlib version: the deflate stream is zlib's at level 9).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import platform
import re
import shutil
import tarfile
import tempfile
from dataclasses import dataclass, field

from bpfdsl.deploy.bpfman import (
    MEDIA_CONFIG,
    MEDIA_INDEX,
    MEDIA_LAYER_TAR_GZIP,
    MEDIA_MANIFEST,
)
from bpfdsl.diagnostics import DiagnosticError, UsageError, error

REF_NAME = "org.opencontainers.image.ref.name"  # image-spec annotations.md
# A tag as the distribution spec allows it (and skopeo's oci: transport takes it).
TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")

# Go's GOARCH for Python's platform.machine(): the OCI config's "architecture" values.
GOARCH = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "armv7l": "arm",
    "i386": "386",
    "i686": "386",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
    "riscv64": "riscv64",
    "loongarch64": "loong64",
}


def host_arch() -> str:
    """The host's architecture as OCI configs spell it (Go GOARCH: ``amd64``, ``arm64``)."""
    m = platform.machine()
    return GOARCH.get(m, m.lower())


@dataclass(frozen=True, slots=True)
class ImageInput:
    """One bytecode image: ``filename`` of the object in the layer (``filter.o``), its ELF
    ``data``, the image ``labels`` (bpfman's), the ``tag`` in the layout's index."""

    filename: str
    data: bytes
    labels: dict[str, str]
    tag: str


@dataclass(slots=True)
class Image:
    """What :func:`layout_files` made of one :class:`ImageInput`: digests ``sha256:<hex>``
    of the manifest, config and (gzipped) layer, ``diff_id`` of the uncompressed layer."""

    tag: str
    manifest_digest: str
    config_digest: str
    layer_digest: str
    diff_id: str
    layer_size: int  # bytes of the gzipped layer blob


@dataclass(slots=True)
class Layout:
    """Files of an image layout (relative path -> bytes) and its images, in index order."""

    files: dict[str, bytes] = field(default_factory=dict)
    images: list[Image] = field(default_factory=list)


def _json(doc: object) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _tarinfo(name: str, size: int, *, directory: bool = False) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.size = 0 if directory else size
    ti.type = tarfile.DIRTYPE if directory else tarfile.REGTYPE
    ti.mode = 0o755 if directory else 0o644
    ti.mtime = 0
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    return ti


def layer_tar(filename: str, data: bytes) -> bytes:
    """The uncompressed layer: one regular file ``filename`` at the root (no directory
    entry: bpfman takes the first tar entry's data as the object)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        tf.addfile(_tarinfo(filename, len(data)), io.BytesIO(data))
    return buf.getvalue()


def gzip_bytes(data: bytes) -> bytes:
    """``data`` gzipped reproducibly (mtime 0, no file name, level 9)."""
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
        gz.write(data)
    return buf.getvalue()


def check_tag(tag: str) -> str:
    """``tag`` when it is a valid image tag, else UsageError ``bad-args``."""
    if not TAG_RE.match(tag):
        raise UsageError(
            error(
                "bad-args",
                f"--tag {tag!r} is not an image tag",
                hint="a tag is 1-128 of A-Z a-z 0-9 _ . - and does not start with . or -",
            )
        )
    return tag


def layout_files(inputs: list[ImageInput], *, arch: str | None = None) -> Layout:
    """The files of an image layout holding one image per input (pure, reproducible).

    Each image: a config (``architecture`` = ``arch``, default the host's; ``os`` linux;
    ``config.Labels``; ``rootfs.diff_ids``), one ``tar+gzip`` layer, a manifest; the
    index names each by its tag (``org.opencontainers.image.ref.name``)."""
    arch = arch or host_arch()
    out = Layout()
    blobs: dict[str, bytes] = {}
    index = []
    tags = [i.tag for i in inputs]
    dup = sorted({t for t in tags if tags.count(t) > 1})
    if dup:
        raise UsageError(
            error(
                "bad-args",
                f"two images would share the tag {dup[0]!r}",
                hint="give the objects different file names",
            )
        )
    for inp in inputs:
        check_tag(inp.tag)
        raw = layer_tar(inp.filename, inp.data)
        layer = gzip_bytes(raw)
        config = _json(
            {
                "architecture": arch,
                "os": "linux",
                "config": {"Labels": dict(inp.labels)},
                "rootfs": {"type": "layers", "diff_ids": [_digest(raw)]},
                "history": [{"created_by": f"bpfdsl image build: COPY {inp.filename} /"}],
            }
        )
        manifest = _json(
            {
                "schemaVersion": 2,
                "mediaType": MEDIA_MANIFEST,
                "config": {
                    "mediaType": MEDIA_CONFIG,
                    "digest": _digest(config),
                    "size": len(config),
                },
                "layers": [
                    {
                        "mediaType": MEDIA_LAYER_TAR_GZIP,
                        "digest": _digest(layer),
                        "size": len(layer),
                    }
                ],
            }
        )
        for blob in (layer, config, manifest):
            blobs[_digest(blob)] = blob
        index.append(
            {
                "mediaType": MEDIA_MANIFEST,
                "digest": _digest(manifest),
                "size": len(manifest),
                "annotations": {REF_NAME: inp.tag},
                "platform": {"architecture": arch, "os": "linux"},
            }
        )
        out.images.append(
            Image(
                inp.tag,
                _digest(manifest),
                _digest(config),
                _digest(layer),
                _digest(raw),
                len(layer),
            )
        )
    out.files["oci-layout"] = _json({"imageLayoutVersion": "1.0.0"})
    out.files["index.json"] = _json(
        {"schemaVersion": 2, "mediaType": MEDIA_INDEX, "manifests": index}
    )
    for digest in sorted(blobs):
        out.files["blobs/sha256/" + digest.split(":", 1)[1]] = blobs[digest]
    return out


def layout_tar(layout: Layout) -> bytes:
    """The layout as one tar (directories first, entries sorted, mtime 0)."""
    dirs = sorted({os.path.dirname(p) for p in layout.files if os.path.dirname(p)} | {"blobs"})
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        for d in dirs:
            tf.addfile(_tarinfo(d, 0, directory=True))
        for path in sorted(layout.files):
            data = layout.files[path]
            tf.addfile(_tarinfo(path, len(data)), io.BytesIO(data))
    return buf.getvalue()


def _unwritable(path: str, e: OSError) -> DiagnosticError:
    why = (e.strerror or str(e)).lower()
    return DiagnosticError(
        error(
            "unwritable-output",
            f"cannot write {path}: {why}",
            hint="choose an output path in a directory you can write to; nothing was written",
        )
    )


def _replaceable(path: str) -> bool:
    """An existing ``path`` may be replaced: an empty directory or an image layout."""
    if not os.path.isdir(path) or os.path.islink(path):
        return False
    entries = os.listdir(path)
    return not entries or "oci-layout" in entries


def write_layout(layout: Layout, out_dir: str, archive: str | None = None) -> None:
    """Write ``layout`` to the directory ``out_dir`` (replacing an image layout or empty
    directory there) and, given ``archive``, the same as a tar file.

    Everything is written to temporary names next to the targets and renamed at the end,
    so a failure (DiagnosticError ``unwritable-output``, exit 1) leaves neither a partial
    image nor temporary files."""
    out_dir = os.path.abspath(out_dir)
    if os.path.lexists(out_dir) and not _replaceable(out_dir):
        raise DiagnosticError(
            error(
                "unwritable-output",
                f"{out_dir} exists and is not an image layout",
                hint="name a new directory (or an earlier image layout, which is replaced)",
            )
        )
    tmp_dir = tmp_tar = old = None
    try:
        try:
            tmp_dir = tempfile.mkdtemp(
                prefix=f".{os.path.basename(out_dir)}.", dir=os.path.dirname(out_dir)
            )
            os.chmod(tmp_dir, 0o755)  # mkdtemp makes it 0700; a layout is for others to read
        except OSError as e:
            raise _unwritable(out_dir, e) from None
        try:
            for rel, data in layout.files.items():
                path = os.path.join(tmp_dir, rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as f:
                    f.write(data)
        except OSError as e:
            raise _unwritable(out_dir, e) from None
        if archive is not None:
            archive = os.path.abspath(archive)
            try:
                fd, tmp_tar = tempfile.mkstemp(
                    prefix=f".{os.path.basename(archive)}.", dir=os.path.dirname(archive)
                )
                with os.fdopen(fd, "wb") as f:
                    f.write(layout_tar(layout))
            except OSError as e:
                raise _unwritable(archive, e) from None
            if os.path.isdir(archive):
                raise _unwritable(archive, IsADirectoryError(21, "is a directory"))
        # Commit: the old layout aside, the new one in, the archive in; undone on failure.
        moved = placed = False
        try:
            if os.path.lexists(out_dir):
                old = tempfile.mkdtemp(
                    prefix=f".{os.path.basename(out_dir)}.old.", dir=os.path.dirname(out_dir)
                )
                os.rename(out_dir, os.path.join(old, "layout"))
                moved = True
            os.rename(tmp_dir, out_dir)
            placed = True
            if archive is not None and tmp_tar is not None:
                os.chmod(tmp_tar, 0o644)
                os.replace(tmp_tar, archive)
                tmp_tar = None
        except OSError as e:
            if placed:
                os.rename(out_dir, tmp_dir)
            if moved and old is not None:
                os.rename(os.path.join(old, "layout"), out_dir)
            raise _unwritable(archive if placed and archive else out_dir, e) from None
        tmp_dir = None
    finally:
        for d in (tmp_dir, old):
            if d is not None:
                shutil.rmtree(d, ignore_errors=True)
        if tmp_tar is not None:
            try:
                os.unlink(tmp_tar)
            except OSError:
                pass
