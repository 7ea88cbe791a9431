"""``bpfdsl bench``: the kernel list's benchmark tables for the user's own programs.

Modules: :mod:`.net` (the namespaces and veth pairs of a run), :mod:`.livegen` (the
live-frame traffic generator), :mod:`.counters` (veth's XDP counters, the cpumap
tracepoint), :mod:`.target` (loading the programs under test), :mod:`.tcp` (the TCP
stream / request-response helper), :mod:`.xdp` (modes ``xdp`` and ``redirect``),
:mod:`.xsk` (AF_XDP), :mod:`.skmsg` (sk_msg), :mod:`.report` (tables, JSON, ABBA order,
progress) and :mod:`.plot` (PNG figures; matplotlib, the ``bench`` extra).
"""
