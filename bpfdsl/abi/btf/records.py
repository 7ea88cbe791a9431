"""Record types of event maps in BTF: the object convention bpfdsl writes and reads.

A ring buffer or perf event array carries no BTF key/value type in the kernel (the kernel
refuses them for these map types), so the compiler describes the records a program sends
through each event map with one extra global, ``bpfdsl_records`` in section
``.bpfdsl.records``: a struct with one member per event map, named after the map, whose
type is the record struct.  libbpf skips the section ("unrecognized data section"), the
kernel keeps the VAR and its DATASEC in the program's BTF, so the record type of a live map
is found from the BTF of a program that uses it.  For objects of other compilers,
:func:`record_type` finds nothing and callers name a struct (``--type NAME``).
"""

from __future__ import annotations

from bpfdsl.abi.btf.core import Btf, Kind

RECORDS_VAR = "bpfdsl_records"  # reserved top-level name in the language
RECORDS_SECTION = ".bpfdsl.records"


def record_type(btf: Btf, map_name: str) -> int | None:
    """BTF type id of the records of event map ``map_name`` (as declared; a kernel map
    name is its first 15 characters, which also match), or None when ``btf`` does not
    describe them."""
    var = btf.find(RECORDS_VAR, Kind.VAR)
    if var is None:
        return None
    st = btf.resolve(var.type)
    if st.kind != Kind.STRUCT:
        return None
    for m in st.members:
        if m.name == map_name or (len(map_name) == 15 and m.name.startswith(map_name)):
            return m.type
    return None


def struct_named(btf: Btf, name: str) -> int | None:
    """Type id of ``struct name`` (or a typedef of that name) in ``btf``, None when absent."""
    for kind in (Kind.STRUCT, Kind.TYPEDEF, Kind.UNION):
        t = btf.find(name, kind)
        if t is not None:
            return t.id
    return None
