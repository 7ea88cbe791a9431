"""CLI: ``bpfdsl image build FILE... -o DIR [--archive F.tar] [--tag T]`` (a bpfman bytecode
image as an OCI image layout, no daemon) and ``bpfdsl image manifest FILE --image URL ...``
(the bpfman-operator resource that deploys it).  Only calls :mod:`bpfdsl.deploy`."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import argparse

    from bpfdsl.cli import Subcommands

BUILD_HELP = """\
Package compiled programs as bpfman bytecode images (bpfman v0.6.0's format: one
tar+gzip layer holding the object at its root; labels io.ebpf.programs and io.ebpf.maps
in the image config) in an OCI image layout DIR, optionally also as a tar (--archive),
which skopeo, umoci, podman and oras read.  No container daemon is used.

FILE := OBJ.o | PROG.bpfd (compiled first).  One image per FILE: tagged TAG for one
FILE, STEM-TAG for several.  The output is reproducible: the same objects give the same
digests.  Push with `skopeo copy oci:DIR:TAG docker://REGISTRY/REPO:TAG`.
"""

MANIFEST_HELP = """\
Write the bpfman-operator (v0.6.0) resource that loads FILE's programs from --image and
attaches them: a ClusterBpfApplication, or with --namespace a BpfApplication.  --set
NAME=VALUE gives a .rodata config as global data (its bytes by the config's BTF type).
Apply it with `kubectl apply -f F.yaml`.
"""


def _label(text: str) -> tuple[str, str]:
    from bpfdsl.diagnostics import UsageError, error

    k, eq, v = text.partition("=")
    if not eq or not k.strip():
        raise UsageError(error("bad-args", f"{text!r}: expected LABEL=VALUE"))
    return k.strip(), v.strip()


def register(sub: Subcommands) -> None:
    import argparse

    from bpfdsl.cli import formatter, kernel_int

    raw = formatter(argparse.RawDescriptionHelpFormatter)
    p = sub.add_parser(
        "image",
        help="build bpfman bytecode images (OCI layout) and their Kubernetes resources",
        description="Deploy to a cluster with bpfman: `image build` and `image manifest`.",
    )
    v = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    b = v.add_parser(
        "build",
        help="OCI image layout of bytecode images",
        description=BUILD_HELP,
        formatter_class=raw,
    )
    b.add_argument("files", nargs="+", metavar="FILE", help="OBJ.o or PROG.bpfd")
    b.add_argument("-o", "--output", required=True, metavar="DIR", help="image layout directory")
    b.add_argument("--archive", metavar="F.tar", help="also write the layout as one tar file")
    b.add_argument("--tag", default="latest", metavar="TAG", help="image tag (default latest)")
    b.add_argument(
        "--arch",
        metavar="ARCH",
        help="config architecture, Go's GOARCH (default: the host's, as `bpfman image build`)",
    )
    b.set_defaults(func=cmd_image_build)

    m = v.add_parser(
        "manifest",
        help="bpfman-operator resource (YAML) for an image",
        description=MANIFEST_HELP,
        formatter_class=raw,
    )
    m.add_argument("file", metavar="FILE", help="OBJ.o or PROG.bpfd: the object in the image")
    m.add_argument("--image", required=True, metavar="URL", help="bytecode image URL to pull")
    m.add_argument(
        "--kind",
        choices=("xdp", "tc", "tcx"),
        help="attach as (default: by the program's section: xdp, tc)",
    )
    m.add_argument(
        "--program",
        action="append",
        metavar="NAME",
        help="program to deploy; repeatable (default: every one bpfman can attach)",
    )
    m.add_argument(
        "--interface",
        action="append",
        default=[],
        metavar="NAME",
        help="interface to attach to on each node; repeatable",
    )
    m.add_argument(
        "--primary-interface", action="store_true", help="attach to each node's primary interface"
    )
    m.add_argument(
        "--node-selector",
        action="append",
        default=[],
        type=_label,
        metavar="LABEL=VALUE",
        help="nodes to deploy to (matchLabels; repeatable; default every node)",
    )
    m.add_argument(
        "--priority",
        type=kernel_int("--priority", "int", lo=0, hi=1000, field="the link priority"),
        metavar="N",
        help="order among programs on the interface, 0..1000, lower first (bpfman default 1000)",
    )
    m.add_argument(
        "--direction",
        choices=("ingress", "egress"),
        default="ingress",
        help="tc/tcx hook (default ingress)",
    )
    m.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a load-time config (.rodata variable) as global data; repeatable",
    )
    m.add_argument("--name", metavar="NAME", help="resource name (default: the file's stem)")
    m.add_argument(
        "--namespace",
        metavar="NS",
        help="write a namespaced BpfApplication (default: a ClusterBpfApplication)",
    )
    m.add_argument(
        "--pods",
        action="append",
        default=[],
        type=_label,
        metavar="LABEL=VALUE",
        help="with --namespace: the pods whose network namespaces the links go into",
    )
    m.add_argument(
        "--pull-policy",
        choices=("Always", "IfNotPresent", "Never"),
        help="imagePullPolicy (operator default IfNotPresent)",
    )
    m.add_argument("-o", "--output", metavar="F.yaml", help="output file (default stdout)")
    m.set_defaults(func=cmd_image_manifest)


def cmd_image_build(args: argparse.Namespace) -> int:
    from bpfdsl.cli import object_bytes
    from bpfdsl.deploy import build_image

    objects = [(f, object_bytes(f)) for f in args.files]
    layout = build_image(objects, args.output, archive=args.archive, tag=args.tag, arch=args.arch)
    if getattr(args, "json", False):
        doc = {
            "layout": args.output,
            "archive": args.archive,
            "images": [
                {"tag": i.tag, "manifest": i.manifest_digest, "layer": i.layer_digest}
                for i in layout.images
            ],
        }
        print(json.dumps(doc))
        return 0
    for i in layout.images:
        print(f"{args.output}:{i.tag}  {i.manifest_digest}")
    if args.archive:
        print(f"archive {args.archive}")
    return 0


def _default_name(path: str) -> str:
    import os
    import re

    stem = os.path.splitext(os.path.basename(path))[0].lower()
    return re.sub(r"[^a-z0-9.-]+", "-", stem).strip("-.") or "bpfdsl"


def cmd_image_manifest(args: argparse.Namespace) -> int:
    from bpfdsl.cli import object_bytes
    from bpfdsl.deploy import manifest, write_manifest

    opts = manifest.Options(
        image=args.image,
        name=args.name or _default_name(args.file),
        kind=args.kind,
        programs=args.program,
        interfaces=args.interface,
        primary_interface=args.primary_interface,
        node_selector=dict(args.node_selector),
        priority=args.priority,
        direction=args.direction,
        config=args.set,
        namespace=args.namespace,
        pods=dict(args.pods),
        pull_policy=args.pull_policy,
    )
    text = write_manifest(args.file, object_bytes(args.file), opts, args.output)
    if args.output is None:
        sys.stdout.write(text)
    return 0
