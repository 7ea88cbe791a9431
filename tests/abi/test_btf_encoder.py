"""The compiled encoder (``values.encoder``, what ``MapView.update_batch`` and ``bpfdsl map
update --from`` use) gives the bytes of ``encode_value`` -- the one reference encoding --
and raises its errors, on varied values of every form the CLI takes: structs of addresses
and network-order ports, MACs, nested structs, arrays, IPv4/IPv6 prefixes, enums,
bitfields, char arrays, ``hex:``, text integers, and the values the types refuse (out of
range, wrong family, host bits, leading zeros, blanks, missing or extra fields).  The JSON
lines reader is compared with ``json.loads`` per line the same way."""

from __future__ import annotations

import json
import random

import pytest
from support.objbuild import build

from bpfdsl.abi.btf.values import (
    decoder,
    encode_value,
    encoder,
    format_value,
    json_line_encoder,
)
from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import UsageError
from bpfdsl.obj.collection import read_object
from bpfdsl.runtime import mapfile

SRC = """license "GPL"
struct flow { saddr: be32, daddr: be32, sport: be16, dport: be16, proto: u8 }
struct hop { mac: mac_addr, ip6: ipv6_addr, w: [u16; 3] }
struct verdict { action: u32, hits: u64, delta: i32, small: i8, next: hop, f: flow,
                 tags: [u32; 4] }
struct stats { packets: u64, bytes: u64, action: u32, next_hop: mac_addr, delta: i16,
               gw: be32, gw6: ipv6_addr }
map flows: hash<flow, verdict>(max_entries: 16)
map flat: hash<flow, stats>(max_entries: 16)
map v4: lpm_trie<ipv4_prefix, u32>(max_entries: 16)
map v6: lpm_trie<ipv6_prefix, i64>(max_entries: 16)
xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    if eth.h_proto != ETH_P_IP { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    if let a = v4.lookup(ip.saddr) { return XDP_DROP }
    return XDP_PASS
}
"""

IPV4 = ["10.0.0.1", "0.0.0.0", "255.255.255.255", "192.0.2.1", "010.0.0.1", "10.0.0.01",
        "1.2.3", "1.2.3.4.5", "256.1.1.1", " 10.0.0.1", "10.0.0.1 ", "10.0.0.1\n", "1e.0.0.1",
        "hex:0a000001", "hex:0a00", "167772161", "0x0a000001", "::1", "fd00::1",
        "02:00:00:00:00:01", "", "١.2.3.4", 167772161, 0, -1, 1 << 32, True, 1.5, None,
        [10, 0, 0, 1]]  # fmt: skip
IPV6 = ["fd00::1", "::", "2001:db8::", "::ffff:10.0.0.1", "fe80::1%eth0", "fe80::1%eth0 ",
        " fd00::1", "fd00::1 ", "10.0.0.1", "fd00::g", "1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7:8:9",
        "FD00::1", "hex:" + "00" * 16, "hex:00", 5, [0] * 16, list(range(17)), None]  # fmt: skip
MAC = ["02:00:00:00:00:01", "AA:BB:CC:DD:EE:FF", "aa:bb:cc:dd:ee:f", "aa:bb:cc:dd:ee:ff:00",
       " aa:bb:cc:dd:ee:ff", "aa:bb:cc:dd:ee:ff ", "aa-bb-cc-dd-ee-ff", "a :bb:cc:dd:ee:ff",
       "aa:bb:cc:dd:ee:fg", "aabb:cc:dd:ee:ff:", "hex:020000000001", "10.0.0.1", 1,
       [2, 0, 0, 0, 0, 1], [1] * 7, "٠٠:bb:cc:dd:ee:ff", "aa:bb:cc:dd:ee:\u00b2\u00b2"]  # fmt: skip
U8 = [0, 1, 255, 256, -1, True, False, "7", "0x10", "1_0", " 3", "x", 1.0, None, "hex:07"]
I8 = [0, -128, 127, 128, -129, "-5", "true", "hex:ff"]
U16 = [0, 53, 65535, 65536, -1, "443", "0x1bb", True, 2.0, "hex:0035", "hex:00"]
U32 = [0, 1, (1 << 32) - 1, 1 << 32, -1, "4294967295", "hex:01000000", False, None]
U64 = [0, 1 << 63, (1 << 64) - 1, 1 << 64, -1, "18446744073709551615", "hex:" + "ff" * 8]
I32 = [0, -(1 << 31), (1 << 31) - 1, 1 << 31, "-1", "hex:ffffffff"]
I64 = [0, -1, -(1 << 63), 1 << 63, "-9223372036854775808"]
PFX4 = ["10.0.0.0/8", "0.0.0.0/0", "10.0.0.1/32", "10.0.0.1/8", "10.0.0.0/08", "10.0.0.0/33",
        "10.0.0.0/255.0.0.0", "10.0.0.0/0.255.255.255", "10.0.0.0", "10.0.0.0/", "/8",
        " 10.0.0.0/8", "10.0.0.0/8 ", "10.0.0.0/ 8", "10.0.0.0/8/8", "010.0.0.0/8",
        "fd00::/8", "10.0.0.0/\u0668", "hex:0800000000000000", 8,
        {"prefixlen": 8, "addr": "10.0.0.0"}]  # fmt: skip
PFX6 = ["2001:db8::/32", "::/0", "2001:db8::1/128", "2001:db8::1/32", "2001:db8::/129",
        "fe80::%eth0/64", "2001:db8::/032", "10.0.0.0/8", "::ffff:10.0.0.0/104", "2001:db8::",
        " 2001:db8::/32", "2001:db8::/32 ", "hex:" + "00" * 20]  # fmt: skip


def _list(pool: list, n: int, rng: random.Random) -> object:
    r = rng.random()
    if r < 0.1:
        return rng.choice(["hex:" + "00" * 6, "1,2", None, 5])
    return [rng.choice(pool) for _ in range(rng.randrange(0, n + 2))]


def _dict(fields: dict, rng: random.Random) -> object:
    """A dict with a value from each field's pool (mostly valid ones), sometimes a field
    missing, an extra one, or the struct as a list or as text."""
    r = rng.random()
    if r < 0.03:
        return rng.choice(["hex:00", "{}", None, 7])
    out = {}
    for name, gen in fields.items():
        if rng.random() < 0.03:
            continue  # a missing field: zero, in encode_value
        out[name] = gen(rng)
    if rng.random() < 0.03:
        out["nope"] = 1
    if rng.random() < 0.03:
        return list(out.values())
    return out


def _pick(pool: list, good: int):
    """A value of ``pool``, one of its first ``good`` (the valid ones) most of the time."""
    return lambda rng: rng.choice(pool[:good] if rng.random() < 0.8 else pool)


FLOW = {"saddr": _pick(IPV4, 4), "daddr": _pick(IPV4, 4), "sport": _pick(U16, 3),
        "dport": _pick(U16, 3), "proto": _pick(U8, 3)}  # fmt: skip
HOP = {"mac": _pick(MAC, 2), "ip6": _pick(IPV6, 4), "w": lambda rng: _list(U16, 3, rng)}
VERDICT = {"action": _pick(U32, 3), "hits": _pick(U64, 3), "delta": _pick(I32, 3),
           "small": _pick(I8, 3), "next": lambda rng: _dict(HOP, rng),
           "f": lambda rng: _dict(FLOW, rng),
           "tags": lambda rng: _list(U32, 4, rng)}  # fmt: skip


@pytest.fixture(scope="module")
def spec():
    return read_object(compile_source(SRC, "enc.bpfd").obj)


def _same(btf, tid: int, values) -> int:
    """Assert encoder == encode_value (bytes, or the ValueError text) on each value;
    the number of values that encoded."""
    enc = encoder(btf, tid)
    dec = decoder(btf, tid)
    ok = 0
    for v in values:
        try:
            want: bytes | str = encode_value(btf, tid, v)
        except ValueError as e:
            want = f"ValueError: {e}"
        try:
            got: bytes | str = enc(v)
        except ValueError as e:
            got = f"ValueError: {e}"
        assert got == want, f"value {v!r}"
        if isinstance(want, bytes):
            ok += 1
            if len(want) == btf.size_of(tid):
                assert dec(want) == format_value(btf, tid, want)
    return ok


def test_struct_keys_and_values_encode_as_encode_value(spec):
    rng = random.Random(25)
    m = spec.maps["flows"]
    keys = [_dict(FLOW, rng) for _ in range(3000)]
    values = [_dict(VERDICT, rng) for _ in range(3000)]
    ok_k = _same(spec.btf, m.key_type_id, keys)
    ok_v = _same(spec.btf, m.value_type_id, values)
    # both outcomes are exercised: most values encode, a good part is refused
    assert 1000 < ok_k < 2900 and 100 < ok_v < 2900, (ok_k, ok_v)


def test_the_usual_forms_take_the_compiled_path(spec, monkeypatch):
    """Dicts of every field with ints, address text, MACs, prefixes: encode_value is not
    called (it is the path of the other forms and of the errors only)."""
    from bpfdsl.abi.btf import values

    btf, m = spec.btf, spec.maps["flows"]
    encs = [encoder(btf, t) for t in (m.key_type_id, m.value_type_id,
                                      spec.maps["v4"].key_type_id, spec.maps["v6"].key_type_id)]  # fmt: skip
    key = {"saddr": "10.1.2.3", "daddr": 3221225985, "sport": 1024, "dport": 53, "proto": 17}
    hop = {"mac": "02:00:00:00:00:01", "ip6": "fd00::1", "w": [1, 2, 3]}
    value = {"action": 1, "hits": 1 << 40, "delta": -5, "small": -1, "next": hop, "f": key,
             "tags": [1, 2]}  # fmt: skip
    want = [encode_value(btf, m.key_type_id, key), encode_value(btf, m.value_type_id, value)]

    def refuse(*a, **k):
        raise AssertionError(f"encode_value called for {a[2]!r}")

    monkeypatch.setattr(values, "encode_value", refuse)
    assert [encs[0](key), encs[1](value)] == want
    assert encs[2]("10.0.0.0/8") == bytes([8, 0, 0, 0, 10, 0, 0, 0])
    assert encs[3]("2001:db8::/32")[:8] == bytes([32, 0, 0, 0, 0x20, 0x01, 0x0D, 0xB8])


def test_leaves_and_prefixes_encode_as_encode_value(spec):
    btf = spec.btf
    flow = btf.resolve(spec.maps["flows"].key_type_id)
    hop = btf.resolve(next(mm.type for mm in btf.resolve(spec.maps["flows"].value_type_id).members
                           if mm.name == "next"))  # fmt: skip
    tids = {mm.name: mm.type for mm in [*flow.members, *hop.members]}
    assert _same(btf, tids["saddr"], IPV4) >= 4
    assert _same(btf, tids["sport"], U16) >= 3
    assert _same(btf, tids["proto"], U8) >= 3
    assert _same(btf, tids["mac"], MAC) >= 2
    assert _same(btf, tids["ip6"], IPV6) >= 4
    assert _same(btf, spec.maps["v4"].key_type_id, PFX4) >= 3
    assert _same(btf, spec.maps["v6"].key_type_id, PFX6) >= 3
    assert _same(btf, spec.maps["v6"].value_type_id, I64) >= 3


def test_clang_types_enums_bitfields_char_arrays_unions(spec):
    """clang's BTF: an LPM key struct, and a value with bitfields, ``struct in6_addr`` (a
    union inside), an enum, char[8], s32 and u64[2] (encode_value takes each of them)."""
    c = read_object(build("typed_values"))
    btf, m = c.btf, c.maps["typed"]
    rng = random.Random(28)
    fields = {
        "port": _pick(U16, 3),
        "flags": _pick([0, 7, 8, -1, "3"], 2),
        "kind": _pick([0, 31, 32], 2),
        "src6": _pick(IPV6, 4),
        "dst": _pick(IPV4, 4),
        "c": _pick(["GREEN", "RED", 1, 2, 7, "BLUE", "green", -1, 1 << 40], 4),
        "label": _pick(["hello", "", "12345678", "123456789", 5, ["a"]], 3),
        "delta": _pick(I32, 3),
        "counts": lambda rng: _list(U64, 2, rng),
    }
    assert _same(btf, m.value_type_id, [_dict(fields, rng) for _ in range(2000)]) > 200
    assert _same(btf, m.key_type_id, PFX4) >= 3
    enum = next(mm.type for mm in btf.resolve(m.value_type_id).members if mm.name == "c")
    assert _same(btf, enum, ["RED", "GREEN", 1, 2, 3, "BLUE", " RED", "0x2", -1, True]) >= 4


STATS = {"packets": _pick(U64, 3), "bytes": _pick(U64, 3), "action": _pick(U32, 3),
         "next_hop": _pick(MAC, 2), "delta": _pick([0, -1, 32767, 32768, "-1"], 3),
         "gw": _pick(IPV4, 4), "gw6": _pick(IPV6, 4)}  # fmt: skip


def test_json_lines_of_flat_structs_encode_as_json_and_the_encoder(spec):
    """``json_line_encoder`` reads the lines ``json.dumps({"key": K, "value": V})``
    writes itself; what it gives is what json.loads + the encoder give, and every other
    line (other forms, refused values) is left to them (None)."""
    btf, m = spec.btf, spec.maps["flat"]
    line = json_line_encoder(btf, m.key_type_id, m.value_type_id, m.key_size, m.value_size)
    assert line is not None
    ek, ev = encoder(btf, m.key_type_id), encoder(btf, m.value_type_id)
    rng = random.Random(2528)
    taken = 0
    for i in range(3000):
        k, v = _dict(FLOW, rng), _dict(STATS, rng)
        if i % 5 == 0 and isinstance(k, dict):
            k = dict(reversed(k.items()))  # another member order: json's
        style = [{}, {"separators": (",", ":")}, {"indent": None, "separators": (" , ", " : ")},
                 {"ensure_ascii": False}][i % 4]  # fmt: skip
        text = json.dumps({"key": k, "value": v}, **style)
        if i % 7 == 0:
            text = f"  {text}\t"
        if i % 11 == 0:
            text = text.replace('"value"', '"value" ', 1).replace("}}", "} }")
        got = line(text)
        if got is None:
            continue
        obj = json.loads(text)
        assert got == (ek(obj["key"]), ev(obj["value"])), text
        taken += 1
    assert taken > 150
    for text in ['{"key": 1, "value": 2}', '{"value": {}, "key": {}}', "", "{",
                 json.dumps({"key": {"saddr": "10.0.0.1"}, "value": {}})]:  # fmt: skip
        assert line(text) is None
    # per-CPU-free maps of other shapes have no line encoder: nested structs, scalars
    fl = spec.maps["flows"]
    assert json_line_encoder(btf, fl.key_type_id, fl.value_type_id, fl.key_size,
                             fl.value_size) is None  # fmt: skip
    v4 = spec.maps["v4"]
    assert json_line_encoder(btf, v4.key_type_id, v4.value_type_id, v4.key_size,
                             v4.value_size) is None  # fmt: skip


def _reference_jsonl(path: str) -> list:
    """What the JSON lines reader gives, by json.loads per line: the entries, or the
    first error (the line number and the message)."""
    out: list = []
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as e:
            return [*out, ("error", f"{path}:{n}: not JSON: {e}")]
        if not isinstance(obj, dict) or "key" not in obj or "value" not in obj:
            return [*out, ("error", f"{path}:{n}: line {n} is not")]
        out.append((obj["key"], obj["value"]))
    return out


@pytest.mark.parametrize(
    "lines",
    [
        ['{"key": 1, "value": {"a": [1, 2]}}', "", "   ", '{"key": "10.0.0.0/8", "value": 2}'],
        ['  {"key": 1, "value": 2}', '{"key": 1, "value": 2}  ', '\t{"key": 3, "value": 4}\t'],
        ['{"key": 1, "value": 2}', '{"key": 1, "value": 2}{"key": 3, "value": 4}'],
        ['{"key": 1, "value": 2}, {"key": 3, "value": 4}'],
        ['{"key": 1, "value": {"x": [', "]}}"],
        ['{"key": 1, "value": 2}', '{"key": 1}', '{"key": 3, "value": 4}'],
        ['{"key": 1, "value": 2, "key": 5}', '{"value": 1, "key": 2}', '{"key": NaN, "value": 1}'],
        ['{"key": 1, "value": 2', '{"key": "\\u00e9\\n", "value": 1.5e3}'],
        ['{"key": 1, "value": 2}\u2028{"key": 3, "value": 4}', '{"key": 5, "value": 6}\x0c'],
        ["{", "}"],
    ],
)
def test_json_lines_read_as_json_loads_per_line(tmp_path, lines):
    path = tmp_path / "entries.jsonl"
    path.write_text("[]\n" if not lines else "\n".join(lines) + "\n", encoding="utf-8")
    want = _reference_jsonl(str(path))
    got: list = []
    try:
        for entry in mapfile.read_entries(str(path)):
            got.append(entry)
    except UsageError as e:
        got.append(("error", str(e.diagnostics[0].message)))
    if want and want[-1][0] == "error":
        assert got[:-1] == want[:-1]
        assert got[-1][0] == "error" and got[-1][1].startswith(want[-1][1])
    else:
        assert got == want


def _expand(entries, ek, ev) -> list:
    """Entries of read_entries as (key bytes, value bytes), encoding the Python ones."""
    out = []
    for k, v in entries:
        if k is mapfile.ENCODED:
            out.append(v)
        elif k is mapfile.ENCODED_MANY:
            out.extend(zip(*v, strict=True))
        else:
            out.append((ek(k), ev(v)))
    return out


@pytest.mark.parametrize("bad", [None, 1, 7, 9])
def test_json_lines_read_at_once_give_what_each_line_gives(spec, tmp_path, bad):
    """A JSON lines file read with the map's line encoder (the whole text by one regular
    expression when every line is in its form, else line by line) gives the entries and
    the error json.loads per line and the encoder give: lines of other forms, values the
    packers refuse (taken by the encoder, or refused by it), blank lines, CRLF, U+2028."""
    btf, m = spec.btf, spec.maps["flat"]
    line = json_line_encoder(btf, m.key_type_id, m.value_type_id, m.key_size, m.value_size)
    ek, ev = encoder(btf, m.key_type_id), encoder(btf, m.value_type_id)
    rng = random.Random(bad)

    def entry(i: int) -> str:  # every member in the form; some values out of range
        key = {"saddr": f"10.0.{i >> 8}.{i & 255}", "daddr": rng.choice(IPV4[:4]),
               "sport": rng.choice([1, 65535, 65536] if i % 13 == 5 else [1, 53]),
               "dport": 53, "proto": rng.choice(U8[:3])}  # fmt: skip
        value = {"packets": i, "bytes": rng.choice(U64[:3]), "action": i % 3,
                 "next_hop": rng.choice(MAC[:2]), "delta": -i, "gw": "192.0.2.1",
                 "gw6": rng.choice(["fd00::1", "::ffff:10.0.0.1", "fd00::1%x"])}  # fmt: skip
        return json.dumps({"key": key, "value": value})

    texts = [entry(i) for i in range(200)]
    if bad is not None:
        texts[bad] = texts[bad][:-1]  # not JSON
    variants = [
        texts,
        texts[:5] + ["", "   "] + texts[5:],
        [t.replace('"proto": ', '"proto":') for t in texts],
        texts[:3]
        + [
            '{"key": {"saddr": "10.0.0.1", "daddr": "10.0.0.\u20282", "sport": 1,'
            ' "dport": 2, "proto": 3}, "value": {}}'
        ]
        + texts[3:],  # fmt: skip
    ]
    for lines in variants:
        for newline in ("\n", "\r\n"):
            path = tmp_path / "entries.jsonl"
            path.write_bytes((newline.join(lines) + newline).encode())
            want: list = []
            try:
                want = _expand(mapfile.read_entries(str(path)), ek, ev)
            except (UsageError, ValueError) as e:
                want.append(("error", str(e)))
            got: list = []
            try:
                got = _expand(mapfile.read_entries(str(path), line), ek, ev)
            except (UsageError, ValueError) as e:
                got.append(("error", str(e)))
            assert got == want
            if bad is None and lines is texts and newline == "\n":  # the text at once
                kinds = []
                with pytest.raises((UsageError, StopIteration)):
                    it = iter(mapfile.read_entries(str(path), line))
                    while True:
                        kinds.append(next(it)[0])
                assert mapfile.ENCODED_MANY in kinds
