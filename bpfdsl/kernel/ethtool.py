"""Kernel side, ethtool: a driver's own statistics of one interface (``ethtool -S``).

The ``SIOCETHTOOL`` ioctl on an AF_INET datagram socket (include/uapi/linux/sockios.h),
with the ``struct ethtool_*`` requests of include/uapi/linux/ethtool.h: ``ETHTOOL_GDRVINFO``
for the number of statistics (``n_stats``), ``ETHTOOL_GSTRINGS`` (string set
``ETH_SS_STATS``, ``ETH_GSTRING_LEN`` = 32 bytes a name) for their names, ``ETHTOOL_GSTATS``
for their values (u64 each); ``ETHTOOL_STXCSUM`` (``struct ethtool_value``) turns transmit
checksum offload on or off, as ``ethtool -K DEV tx on|off``.  The interface name is resolved in the network namespace of
the calling thread (the socket is made there).

veth keeps per-queue XDP counters this way (drivers/net/veth.c ``veth_rq_stats_desc``):
``rx_queue_N_xdp_packets`` (frames its XDP program ran on), ``..._xdp_drops`` (XDP_DROP and
XDP_ABORTED), ``..._xdp_tx``, ``..._xdp_redirect``, ``..._xdp_tx_errors`` and, for frames
sent to the peer with ndo_xdp_xmit, ``tx_queue_N_xdp_xmit`` / ``..._xdp_xmit_errors``.
"""

from __future__ import annotations

import ctypes
import fcntl
import socket
import struct

from bpfdsl.abi.net import (
    ETH_GSTRING_LEN,
    ETH_SS_STATS,
    ETHTOOL_GDRVINFO,
    ETHTOOL_GSTATS,
    ETHTOOL_GSTRINGS,
    ETHTOOL_GTXCSUM,
    ETHTOOL_STXCSUM,
    SIOCETHTOOL,
)

_DRVINFO_SIZE = 196  # sizeof(struct ethtool_drvinfo)
_DRVINFO_N_STATS = 180  # offsetof(struct ethtool_drvinfo, n_stats)
_IFNAMSIZ = 16
_IFREQ_SIZE = 40  # sizeof(struct ifreq) on 64-bit: name[16] + the union (ifr_data at 16)


def _ioctl(sock: socket.socket, dev: str, buf: ctypes.Array) -> None:
    """SIOCETHTOOL for ``dev`` with ``ifr_data`` pointing at ``buf`` (request and reply)."""
    ifreq = struct.pack(
        f"{_IFNAMSIZ}sQ{_IFREQ_SIZE - _IFNAMSIZ - 8}x", dev.encode(), ctypes.addressof(buf)
    )
    fcntl.ioctl(sock.fileno(), SIOCETHTOOL, ifreq)


def driver_stats(dev: str) -> dict[str, int]:
    """Name -> value of every driver statistic of interface ``dev`` (what ``ethtool -S DEV``
    prints; counts since the interface was made).  Raises OSError: ENODEV for an unknown
    interface, EOPNOTSUPP when the driver has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        info = ctypes.create_string_buffer(struct.pack("<I", ETHTOOL_GDRVINFO), _DRVINFO_SIZE)
        _ioctl(sock, dev, info)
        (n,) = struct.unpack_from("<I", info, _DRVINFO_N_STATS)
        if n == 0:
            return {}
        names = ctypes.create_string_buffer(
            struct.pack("<III", ETHTOOL_GSTRINGS, ETH_SS_STATS, n), 12 + n * ETH_GSTRING_LEN
        )
        _ioctl(sock, dev, names)
        values = ctypes.create_string_buffer(struct.pack("<II", ETHTOOL_GSTATS, n), 8 + 8 * n)
        _ioctl(sock, dev, values)
    out: dict[str, int] = {}
    for i in range(n):
        raw = names.raw[12 + i * ETH_GSTRING_LEN : 12 + (i + 1) * ETH_GSTRING_LEN]
        name = raw.split(b"\0", 1)[0].decode(errors="replace")
        out[name] = struct.unpack_from("<Q", values, 8 + 8 * i)[0]
    return out


def set_tx_checksum(dev: str, on: bool) -> None:
    """Transmit checksum offload of ``dev`` on or off (``ethtool -K DEV tx on|off``).

    Off, the stack completes each checksum before a frame leaves ``dev``: needed on a veth
    whose frames the peer's XDP program redirects (a cpumap rebuilds the skb from an
    xdp_frame, which has no CHECKSUM_PARTIAL state, so a partial checksum would reach the
    receiver unfinished and TCP would drop the segment).  Raises OSError."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        _ioctl(
            sock, dev, ctypes.create_string_buffer(struct.pack("<II", ETHTOOL_STXCSUM, int(on)), 8)
        )


def tx_checksum(dev: str) -> bool:
    """Whether transmit checksum offload of ``dev`` is on (``ethtool -k DEV``)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        buf = ctypes.create_string_buffer(struct.pack("<II", ETHTOOL_GTXCSUM, 0), 8)
        _ioctl(sock, dev, buf)
    return bool(struct.unpack_from("<I", buf, 4)[0])
