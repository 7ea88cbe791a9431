"""The packets of the TCP MSS option walk and the DNS question-name walk (issue 24), with
the verdict each program of tests/data/subprog_parse and tests/data/loop_parse gives:
XDP_DROP for an MSS below 536 (RFC 9293 3.2) or a name longer than 64 bytes, of more
than 16 labels, or malformed (RFC 1035 3.1, 4.1.2); XDP_PASS otherwise."""

from __future__ import annotations

from support.progrun import IP, TCP, UDP, XDP_DROP, XDP_PASS, eth


def mss_frames():
    from scapy.all import DNS, DNSQR  # noqa: F401

    syn = eth() / IP(src="192.0.2.1", dst="192.0.2.2")
    return [
        (syn / TCP(flags="S", options=[("MSS", 1460)]), XDP_PASS),
        (syn / TCP(flags="S", options=[("MSS", 100)]), XDP_DROP),
        (syn / TCP(flags="S", options=[("NOP", None), ("NOP", None), ("MSS", 88)]), XDP_DROP),
        (syn / TCP(flags="S", options=[("WScale", 7), ("SAckOK", b""), ("MSS", 200)]), XDP_DROP),
        (syn / TCP(flags="S", options=[("Timestamp", (1, 2)), ("MSS", 1200)]), XDP_PASS),
        (syn / TCP(flags="S"), XDP_PASS),  # no options
        (syn / TCP(flags="S", options=[("EOL", None), ("MSS", 100)]), XDP_PASS),  # after EOL
        (syn / UDP(), XDP_PASS),
    ]


def dns_frames():
    from scapy.all import DNS, DNSQR, Raw

    q = eth() / IP(src="192.0.2.1", dst="192.0.2.2") / UDP(sport=1234, dport=53)
    long_name = ".".join(["a" * 30] * 3) + ".example"  # 103 bytes > 64
    return [
        (q / DNS(rd=1, qd=DNSQR(qname="example.com")), XDP_PASS),
        (q / DNS(rd=1, qd=DNSQR(qname=long_name)), XDP_DROP),
        (q / DNS(rd=1, qd=DNSQR(qname="a." * 20 + "com")), XDP_DROP),  # > 16 labels
        (
            q / Raw(b"\x00\x01\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" + b"\x40" + b"x" * 70),
            XDP_DROP,
        ),
        (q / Raw(b"\x00\x01\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x03abc"), XDP_DROP),  # cut
        (eth() / IP() / UDP(dport=54) / DNS(qd=DNSQR(qname=long_name)), XDP_PASS),
    ]


CASES = {"tcp_mss": mss_frames, "dns_qname": dns_frames}
