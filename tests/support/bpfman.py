"""bpfman's side of the deploy tests: an OCI layout read as bpfman v0.6.0's image manager
reads it (:func:`bpfman_read`), and the bpfman-operator v0.6.0 CRD schemas as JSON Schema
(:func:`crd_errors`; the CRDs are in tests/deploy/data/, whose README names the source).

A CRD's openAPIV3Schema is JSON Schema plus Kubernetes extensions; :func:`k8s_schema` turns
the extensions into JSON Schema: ``x-kubernetes-validations`` of the CRDs' one rule shape
(``has(self.type) && self.type == 'T' ? has(self.f) : !has(self.f)``) become if/then/else
and any other rule fails the test (so a new rule is not silently skipped);
``x-kubernetes-list-type: set`` is uniqueItems; ``format: byte`` is checked as base64.
Stricter than the API server in one way: a field the schema does not name is an error (the
server would drop it silently, which would be a bug of ours just the same).
"""

from __future__ import annotations

import base64
import binascii
import gzip
import hashlib
import io
import json
import re
import tarfile
from pathlib import Path

import jsonschema
import yaml

DATA = Path(__file__).resolve().parent.parent / "deploy" / "data"
# bpfman v0.6.0 image_manager.rs: the layer media types it pulls.
BPFMAN_LAYER_TYPES = {
    "application/vnd.oci.image.layer.v1.tar+gzip",
    "application/vnd.docker.image.rootfs.diff.tar.gzip",
}
RULE = re.compile(
    r"^has\(self\.type\) && self\.type == '(\w+)' \?\s+has\(self\.(\w+)\) : !has\(self\.(\w+)\)$"
)
KNOWN_EXTENSIONS = {
    "x-kubernetes-validations",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
}


def k8s_schema(node: object) -> object:
    """JSON Schema (draft 2020-12) of a CRD openAPIV3Schema node."""
    if isinstance(node, list):
        return [k8s_schema(x) for x in node]
    if not isinstance(node, dict):
        return node
    out: dict = {}
    conds = []
    for key, value in node.items():
        if key.startswith("x-kubernetes-"):
            assert key in KNOWN_EXTENSIONS, f"unhandled CRD extension {key}"
            if key == "x-kubernetes-validations":
                for v in value:
                    m = RULE.match(v["rule"])
                    assert m and m.group(2) == m.group(3), f"unhandled CEL rule {v['rule']!r}"
                    t, f = m.group(1), m.group(2)
                    conds.append(
                        {
                            "if": {"properties": {"type": {"const": t}}, "required": ["type"]},
                            "then": {"required": [f]},
                            "else": {"not": {"required": [f]}},
                        }
                    )
            elif key == "x-kubernetes-list-type" and value == "set":
                out["uniqueItems"] = True
            continue
        if key in ("properties", "patternProperties"):
            out[key] = {k: k8s_schema(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties", "not") or key in ("allOf", "anyOf", "oneOf"):
            out[key] = k8s_schema(value)
        else:
            out[key] = value
    if "properties" in node and "additionalProperties" not in node and node.get("properties"):
        out["additionalProperties"] = False
    if conds:
        out["allOf"] = [*out.get("allOf", []), *conds]
    return out


def crd_validator(kind: str) -> jsonschema.Draft202012Validator:
    plural = {
        "ClusterBpfApplication": "clusterbpfapplications",
        "BpfApplication": "bpfapplications",
    }
    doc = yaml.safe_load((DATA / f"bpfman.io_{plural[kind]}.yaml").read_text())
    assert doc["spec"]["names"]["kind"] == kind
    (version,) = [v for v in doc["spec"]["versions"] if v["served"]]
    assert version["name"] == "v1alpha1"
    schema = k8s_schema(version["schema"]["openAPIV3Schema"])
    checker = jsonschema.FormatChecker()

    @checker.checks("byte", raises=(binascii.Error, ValueError))
    def _byte(value: object) -> bool:
        return not isinstance(value, str) or base64.b64decode(value, validate=True) is not None

    return jsonschema.Draft202012Validator(schema, format_checker=checker)


def crd_errors(doc: dict) -> list[str]:
    """Where ``doc`` breaks its kind's CRD schema (none: valid)."""
    v = crd_validator(doc["kind"])
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in v.iter_errors(doc)]


def blob(layout: Path, digest: str) -> bytes:
    algo, hexd = digest.split(":")
    data = (layout / "blobs" / algo / hexd).read_bytes()
    assert hashlib.sha256(data).hexdigest() == hexd  # content-addressed, as registries check
    return data


def bpfman_read(layout: Path, tag: str) -> tuple[dict, dict, bytes]:
    """(programs label, maps label, object bytes) as bpfman's image manager reads an image."""
    index = json.loads((layout / "index.json").read_text())
    (desc,) = [
        m
        for m in index["manifests"]
        if m["annotations"]["org.opencontainers.image.ref.name"] == tag
    ]
    manifest = json.loads(blob(layout, desc["digest"]))
    assert manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    config = json.loads(blob(layout, manifest["config"]["digest"]))
    labels = config["config"]["Labels"]
    programs = json.loads(labels["io.ebpf.programs"])
    maps = json.loads(labels["io.ebpf.maps"])
    assert all(isinstance(v, str) for v in [*programs.values(), *maps.values()])
    layer_desc = manifest["layers"][0]
    assert layer_desc["mediaType"] in BPFMAN_LAYER_TYPES
    layer = blob(layout, layer_desc["digest"])
    raw_tar = gzip.decompress(layer)
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(raw_tar).hexdigest()]
    with tarfile.open(fileobj=io.BytesIO(raw_tar)) as tf:
        first = tf.getmembers()[0]
        data = tf.extractfile(first).read()  # type: ignore[union-attr]
    return programs, maps, data
