"""An ACL of ``if`` rules on the UDP destination port, big enough that the kernel's rewrite
after verification (inlined array-map lookups) matters (tests/backend/test_jump_tables.py,
tests/checker/test_checker_fixups.py)."""

from __future__ import annotations

VERDICTS = ("XDP_DROP", "XDP_PASS", "XDP_TX")


def acl_source(rules: int = 2000) -> str:
    """An ACL of ``rules`` `if` rules on the UDP destination port: rule k matches port
    1000 + k, adds k + 1 to ``hits[k % 64]`` and returns VERDICTS[k % 3]; no match passes."""
    lines = [
        'license "GPL"',
        "map hits: array<u64>(max_entries: 64)",
        "xdp fn acl(ctx) {",
        "    let eth = parse ethernet else { return XDP_PASS }",
        "    let ip = parse ipv4 else { return XDP_PASS }",
        "    let udp = parse udp else { return XDP_PASS }",
        "    let dport = host(udp.dest)",
    ]
    for k in range(rules):
        lines.append(
            f"    if dport == {1000 + k} {{ hits[{k % 64}] += {k + 1}; return {VERDICTS[k % 3]} }}"
        )
    lines += ["    return XDP_PASS", "}"]
    return "\n".join(lines) + "\n"
