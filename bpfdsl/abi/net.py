"""Networking constants of the kernel's uapi outside bpf.h: Ethernet
(include/uapi/linux/if_ether.h), AF_XDP sockets (include/linux/socket.h,
include/uapi/linux/if_xdp.h), rtnetlink and generic netlink (linux/netlink.h, rtnetlink.h,
genetlink.h, netdev.h, if_link.h, if.h, net_namespace.h) and ethtool (linux/sockios.h, linux/ethtool.h).

The kernel's names and values; :mod:`bpfdsl.kernel` and :mod:`bpfdsl.runtime` speak the
protocols with them.
"""

from __future__ import annotations

from typing import Final

# include/uapi/linux/if_ether.h
ETH_HLEN: Final = 14  # bytes of an Ethernet header (BPF_PROG_TEST_RUN's least XDP frame)
ETH_P_ALL: Final = 0x0003  # every protocol (AF_PACKET sockets)
ETH_P_IP: Final = 0x0800

# AF_XDP: include/linux/socket.h (family, sockopt level), include/uapi/linux/if_xdp.h
AF_XDP: Final = 44
SOL_XDP: Final = 283
XDP_MMAP_OFFSETS, XDP_RX_RING, XDP_TX_RING, XDP_UMEM_REG = 1, 2, 3, 4  # getsockopt/setsockopt
XDP_UMEM_FILL_RING, XDP_UMEM_COMPLETION_RING, XDP_STATISTICS = 5, 6, 7
XDP_COPY: Final = 1 << 1  # sxdp_flags: force copy mode
XDP_PGOFF_RX_RING, XDP_PGOFF_TX_RING = 0, 0x80000000  # mmap offsets of the rings
XDP_UMEM_PGOFF_FILL_RING, XDP_UMEM_PGOFF_COMPLETION_RING = 0x100000000, 0x180000000

# netlink: linux/netlink.h, linux/rtnetlink.h
NETLINK_ROUTE, NETLINK_GENERIC = 0, 16
NLM_F_REQUEST: Final = 1
NLMSG_ERROR: Final = 2
RTM_GETLINK: Final = 18
RTM_GETNSID: Final = 90
# linux/net_namespace.h
NETNSA_NSID, NETNSA_FD = 1, 3
# generic netlink: linux/genetlink.h
GENL_ID_CTRL, CTRL_CMD_GETFAMILY = 0x10, 3
CTRL_ATTR_FAMILY_ID, CTRL_ATTR_FAMILY_NAME = 1, 2
# the "netdev" family: linux/netdev.h
NETDEV_CMD_DEV_GET: Final = 1
NETDEV_A_DEV_IFINDEX, NETDEV_A_DEV_XDP_FEATURES = 1, 3
NETDEV_XDP_ACT_NDO_XMIT: Final = 1 << 2  # enum netdev_xdp_act
# linux/if_link.h
IFLA_IFNAME, IFLA_LINK, IFLA_LINKINFO, IFLA_LINK_NETNSID, IFLA_XDP = 3, 5, 18, 37, 43
IFLA_INFO_KIND: Final = 1
IFLA_XDP_ATTACHED: Final = 2
IFLA_XDP_PROG_ID, IFLA_XDP_DRV_PROG_ID, IFLA_XDP_SKB_PROG_ID = 4, 5, 6
# linux/if.h
IFF_UP, IFF_LOWER_UP = 0x1, 0x10000

# ethtool: include/uapi/linux/sockios.h, linux/ethtool.h
SIOCETHTOOL: Final = 0x8946
ETHTOOL_GDRVINFO, ETHTOOL_GSTRINGS, ETHTOOL_GSTATS = 0x03, 0x1B, 0x1D
ETHTOOL_GTXCSUM, ETHTOOL_STXCSUM = 0x16, 0x17
ETH_SS_STATS: Final = 1
ETH_GSTRING_LEN: Final = 32
