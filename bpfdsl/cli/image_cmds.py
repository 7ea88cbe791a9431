"""CLI: ``bpfdsl image build FILE... -o DIR [--archive F.tar] [--tag T]`` (a bpfman bytecode
image as an OCI image layout, no daemon) and ``bpfdsl image manifest FILE --image URL ...``
(the bpfman-operator resource that deploys it).  Only calls :mod:`bpfdsl.deploy`."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

from bpfdsl.cli.commands import command_help

if TYPE_CHECKING:  # pragma: no cover
    import argparse

    from bpfdsl.cli import Subcommands
    from bpfdsl.deploy.manifest import Options
    from bpfdsl.runtime.topology import Built, EntryDecl, HookDecl, Topology

BUILD_HELP = """\
Package compiled programs as bpfman bytecode images (bpfman v0.6.0's format: one
tar+gzip layer holding the object at its root; labels io.ebpf.programs and io.ebpf.maps
in the image config) in an OCI image layout DIR, optionally also as a tar (--archive),
which skopeo, umoci, podman and oras read.  No container daemon is used.

FILE := OBJ.o | PROG.bpfd (compiled first) | TOPOLOGY.toml (a topology file: each of its
objects, compiled with its file's configs checked; docs/topology.md).  One image per
object: tagged TAG for one, STEM-TAG for several (OBJECT-TAG for a topology's objects).  The output is reproducible: the same objects give the same
digests.  Push with `skopeo copy oci:DIR:TAG docker://REGISTRY/REPO:TAG`.
"""

MANIFEST_HELP = """\
Write the bpfman-operator (v0.6.0) resource that loads FILE's programs from --image and
attaches them: a ClusterBpfApplication, or with --namespace a BpfApplication.  --set
NAME=VALUE gives a .rodata config as global data (its bytes by the config's BTF type).
Apply it with `kubectl apply -f F.yaml`.

FILE may be a topology file (docs/topology.md): one resource per object with [[xdp]]
tables, named NAME-OBJECT, each attaching its programs to the interfaces the file gives
(its `config` tables become globalData); give --image OBJECT=URL for each (a plain URL
for one object).  bpfman has no resource for cpumap/devmap/prog_array entries, sk_msg,
sock_ops or map contents: a file with them is refused (each located) unless --xdp-only,
which writes the XDP part alone and fills nothing else.
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
        help=command_help("image"),
        description="Deploy to a cluster with bpfman: `image build` and `image manifest`.",
    )
    v = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    b = v.add_parser(
        "build",
        help="OCI image layout of bytecode images",
        description=BUILD_HELP,
        formatter_class=raw,
    )
    b.add_argument("files", nargs="+", metavar="FILE", help="OBJ.o, PROG.bpfd or one TOPOLOGY.toml")
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
    m.add_argument(
        "file",
        metavar="FILE",
        help="OBJ.o or PROG.bpfd (the object in the image), or TOPOLOGY.toml",
    )
    m.add_argument(
        "--image",
        required=True,
        action="append",
        metavar="URL",
        help="bytecode image URL to pull; for a topology OBJECT=URL, repeatable",
    )
    m.add_argument(
        "--xdp-only",
        action="store_true",
        help="topology: write the XDP programs' resources, leaving out what bpfman cannot "
        "deploy (map entries, sk_msg, sock_ops, map contents)",
    )
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


def _is_topology(path: str) -> bool:
    return path.endswith(".toml")


def _topology_objects(path: str) -> tuple[Topology, dict[str, Built]]:
    """(Topology, {object name: Built}) of the topology file ``path``: read, every object
    compiled and its references checked (bpfdsl.runtime.topology.build)."""
    from bpfdsl.runtime.topology import build, read_topology

    top = read_topology(path)
    return top, build(top)


def cmd_image_build(args: argparse.Namespace) -> int:
    from bpfdsl.cli import object_bytes
    from bpfdsl.deploy import build_image
    from bpfdsl.diagnostics import UsageError, error

    stems = None
    if any(_is_topology(f) for f in args.files):
        if len(args.files) > 1:
            raise UsageError(
                error("bad-args", "a topology file is built alone", hint="give one TOPOLOGY.toml")
            )
        _, built = _topology_objects(args.files[0])
        objects = [(b.decl.path, b.data) for b in built.values()]
        stems = list(built)
    else:
        objects = [(f, object_bytes(f)) for f in args.files]
    layout = build_image(
        objects, args.output, archive=args.archive, tag=args.tag, arch=args.arch, stems=stems
    )
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

    from bpfdsl.deploy.manifest import object_name

    return object_name(os.path.splitext(os.path.basename(path))[0])


def _named(image: str) -> bool:
    """``--image OBJECT=URL`` (an ``=`` before the URL's first ``/``), not a plain URL."""
    return "=" in image.split("/", 1)[0]


def cmd_image_manifest(args: argparse.Namespace) -> int:
    from bpfdsl.cli import object_bytes
    from bpfdsl.deploy import manifest, write_manifest
    from bpfdsl.diagnostics import UsageError, error

    if not _is_topology(args.file):
        if len(args.image) > 1 or _named(args.image[0]):
            raise UsageError(
                error("bad-args", "--image takes one URL for an object file", hint="--image URL")
            )
        if args.xdp_only:
            raise UsageError(error("bad-args", "--xdp-only is for a topology file"))
    opts = manifest.Options(
        image=args.image[0],
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
    if _is_topology(args.file):
        text = _topology_manifest(args, opts)
    else:
        text = write_manifest(args.file, object_bytes(args.file), opts, args.output)
    if args.output is None:
        sys.stdout.write(text)
    return 0


# what a topology file declares that bpfman v0.6.0 has no resource for, by table kind
_NOT_DEPLOYABLE = {
    "cpumap": "cpumap entries",
    "devmap": "devmap entries",
    "prog_array": "prog_array slots",
    "sk_msg": "sk_msg programs",
    "sock_ops": "sock_ops programs",
}


def _topology_manifest(args: argparse.Namespace, opts: Options) -> str:
    """The resources of the topology file ``args.file`` (see MANIFEST_HELP)."""
    from bpfdsl.deploy import Deployment, topology_manifest
    from bpfdsl.diagnostics import DiagnosticError, UsageError, error
    from bpfdsl.runtime.topology import table_span

    path = args.file
    if args.interface or args.primary_interface:
        raise UsageError(
            error(
                "bad-args",
                "the topology file names each program's interfaces",
                hint="drop --interface/--primary-interface; edit the file's [[xdp]] tables",
            )
        )
    if args.program:
        raise UsageError(error("bad-args", "--program is for an object file, not a topology"))
    top, built = _topology_objects(path)
    if not args.xdp_only:
        diags = []
        counts: dict[str, int] = {}
        decls: list[EntryDecl | HookDecl] = [*top.entries, *top.hooks]
        for d in decls:
            i = counts.get(d.kind, 0)
            counts[d.kind] = i + 1
            diags.append(
                error(
                    "not-deployable",
                    f"bpfman has no resource for {_NOT_DEPLOYABLE[d.kind]} ({d.kind}[{i}]: "
                    f"{d.program if d.program is not None else d.map})",
                    table_span(path, d.kind, i),
                    hint="fill it on each node with `bpfdsl apply` of this file, or give "
                    "--xdp-only to write the XDP programs' resources alone",
                )
            )
        for c in top.contents:
            diags.append(
                error(
                    "not-deployable",
                    f"bpfman does not fill map contents ({c.map})",
                    table_span(path, f"maps.{c.map}"),
                    hint="write them on each node with `bpfdsl map update --from`, or give "
                    "--xdp-only",
                )
            )
        if diags:
            raise DiagnosticError(diags)
    images = {}
    named = [i for i in args.image if _named(i)]
    for item in named:
        obj, _, url = item.partition("=")
        if obj not in top.objects:
            raise UsageError(
                error(
                    "bad-args",
                    f"--image {item}: no object {obj!r} in {path}",
                    hint=f"objects: {', '.join(top.objects)}",
                )
            )
        images[obj] = url
    xdp: dict[str, dict[str, list[str]]] = {}
    for x in top.xdp:
        xdp.setdefault(x.program.obj, {}).setdefault(x.program.name, []).append(x.dev)
    if not xdp:
        raise DiagnosticError(
            error(
                "not-deployable",
                f"{path} attaches no XDP program: nothing for bpfman to deploy",
                table_span(path, "objects"),
            )
        )
    if len(named) < len(args.image):
        if len(args.image) > 1 or len(xdp) > 1:
            raise UsageError(
                error(
                    "bad-args",
                    "a plain --image URL is for a topology with one object to deploy",
                    hint="give --image OBJECT=URL for each of: " + ", ".join(xdp),
                )
            )
        images[next(iter(xdp))] = args.image[0]
    missing = [o for o in xdp if o not in images]
    if missing:
        raise UsageError(
            error(
                "bad-args",
                f"no --image for object {', '.join(missing)}",
                hint="give --image OBJECT=URL (`bpfdsl image build` tags them OBJECT-TAG)",
            )
        )
    deployments = [
        Deployment(
            name=o,
            path=built[o].decl.path,
            spec=built[o].spec,
            image=images[o],
            config=tuple(f"{k}={v}" for k, v in built[o].decl.config),
            xdp=progs,
        )
        for o, progs in xdp.items()
    ]
    return topology_manifest(deployments, opts, args.output)
