"""``union bpf_attr`` members and ``bpf_*_info`` structs as ctypes layouts.

Layouts from include/uapi/linux/bpf.h as dumped from this machine's /sys/kernel/btf/vmlinux
(``bpftool btf dump file /sys/kernel/btf/vmlinux format c``); tests/kernel/test_syscall.py checks
offsets against that BTF.  Only :mod:`bpfdsl.kernel.syscall` passes them to bpf(2); it re-exports
them (``syscall.ProgInfo`` ...).  Pointer fields are ``__u64`` user addresses.
"""

from __future__ import annotations

import ctypes as C

from bpfdsl.abi.flags import BPF_OBJ_NAME_LEN

u32, u64, s32 = C.c_uint32, C.c_uint64, C.c_int32


# ---- attr layouts (members of union bpf_attr, include/uapi/linux/bpf.h) ----
# fmt: off
class MapCreateAttr(C.Structure):
    _fields_ = [("map_type", u32), ("key_size", u32), ("value_size", u32),
                ("max_entries", u32), ("map_flags", u32), ("inner_map_fd", u32),
                ("numa_node", u32), ("map_name", C.c_char * BPF_OBJ_NAME_LEN),
                ("map_ifindex", u32), ("btf_fd", u32), ("btf_key_type_id", u32),
                ("btf_value_type_id", u32), ("btf_vmlinux_value_type_id", u32),
                ("map_extra", u64)]


class MapElemAttr(C.Structure):
    _fields_ = [("map_fd", u32), ("key", u64), ("value", u64), ("flags", u64)]


class MapBatchAttr(C.Structure):
    """``union bpf_attr``'s ``batch`` member (BPF_MAP_*_BATCH, include/uapi/linux/bpf.h)."""

    _fields_ = [("in_batch", u64), ("out_batch", u64), ("keys", u64), ("values", u64),
                ("count", u32), ("map_fd", u32), ("elem_flags", u64), ("flags", u64)]


class ProgLoadAttr(C.Structure):
    _fields_ = [("prog_type", u32), ("insn_cnt", u32), ("insns", u64), ("license", u64),
                ("log_level", u32), ("log_size", u32), ("log_buf", u64),
                ("kern_version", u32), ("prog_flags", u32),
                ("prog_name", C.c_char * BPF_OBJ_NAME_LEN), ("prog_ifindex", u32),
                ("expected_attach_type", u32), ("prog_btf_fd", u32),
                ("func_info_rec_size", u32), ("func_info", u64), ("func_info_cnt", u32),
                ("line_info_rec_size", u32), ("line_info", u64), ("line_info_cnt", u32),
                ("attach_btf_id", u32), ("attach_prog_fd", u32), ("core_relo_cnt", u32),
                ("fd_array", u64), ("core_relos", u64), ("core_relo_rec_size", u32),
                ("log_true_size", u32)]


class ObjAttr(C.Structure):
    _fields_ = [("pathname", u64), ("bpf_fd", u32), ("file_flags", u32), ("path_fd", s32)]


class ProgAttachAttr(C.Structure):
    _fields_ = [("target_fd", u32), ("attach_bpf_fd", u32), ("attach_type", u32),
                ("attach_flags", u32), ("replace_bpf_fd", u32)]


class ProgQueryAttr(C.Structure):
    """``query`` of union bpf_attr (BPF_PROG_QUERY): programs attached to a cgroup or a
    sockmap for one attach type; ``prog_ids``/``link_ids`` are user buffers of u32."""

    _fields_ = [("target_fd", u32), ("attach_type", u32), ("query_flags", u32),
                ("attach_flags", u32), ("prog_ids", u64), ("prog_cnt", u32), ("_pad", u32),
                ("prog_attach_flags", u64), ("link_ids", u64), ("link_attach_flags", u64),
                ("revision", u64)]


class TestRunAttr(C.Structure):
    _fields_ = [("prog_fd", u32), ("retval", u32), ("data_size_in", u32),
                ("data_size_out", u32), ("data_in", u64), ("data_out", u64), ("repeat", u32),
                ("duration", u32), ("ctx_size_in", u32), ("ctx_size_out", u32),
                ("ctx_in", u64), ("ctx_out", u64), ("flags", u32), ("cpu", u32),
                ("batch_size", u32)]


class GetIdAttr(C.Structure):
    _fields_ = [("start_id", u32), ("next_id", u32), ("open_flags", u32)]


class InfoAttr(C.Structure):
    _fields_ = [("bpf_fd", u32), ("info_len", u32), ("info", u64)]


class BtfLoadAttr(C.Structure):
    _fields_ = [("btf", u64), ("btf_log_buf", u64), ("btf_size", u32), ("btf_log_size", u32),
                ("btf_log_level", u32), ("btf_log_true_size", u32)]


class LinkCreateAttr(C.Structure):
    _fields_ = [("prog_fd", u32), ("target_fd", u32), ("attach_type", u32), ("flags", u32),
                ("target_btf_id", u32), ("_pad", u32), ("_rest", u64 * 6)]


class LinkUpdateAttr(C.Structure):
    _fields_ = [("link_fd", u32), ("new_prog_fd", u32), ("flags", u32), ("old_prog_fd", u32)]


class LinkDetachAttr(C.Structure):
    _fields_ = [("link_fd", u32)]


class RawTracepointAttr(C.Structure):
    _fields_ = [("name", u64), ("prog_fd", u32), ("_pad", u32), ("cookie", u64)]


class ProgInfo(C.Structure):
    """``struct bpf_prog_info`` (232 bytes on 6.18)."""

    _fields_ = [("type", u32), ("id", u32), ("tag", C.c_uint8 * 8), ("jited_prog_len", u32),
                ("xlated_prog_len", u32), ("jited_prog_insns", u64),
                ("xlated_prog_insns", u64), ("load_time", u64), ("created_by_uid", u32),
                ("nr_map_ids", u32), ("map_ids", u64), ("name", C.c_char * 16),
                ("ifindex", u32), ("gpl_compatible", u32, 1), ("netns_dev", u64),
                ("netns_ino", u64), ("nr_jited_ksyms", u32), ("nr_jited_func_lens", u32),
                ("jited_ksyms", u64), ("jited_func_lens", u64), ("btf_id", u32),
                ("func_info_rec_size", u32), ("func_info", u64), ("nr_func_info", u32),
                ("nr_line_info", u32), ("line_info", u64), ("jited_line_info", u64),
                ("nr_jited_line_info", u32), ("line_info_rec_size", u32),
                ("jited_line_info_rec_size", u32), ("nr_prog_tags", u32), ("prog_tags", u64),
                ("run_time_ns", u64), ("run_cnt", u64), ("recursion_misses", u64),
                ("verified_insns", u32), ("attach_btf_obj_id", u32), ("attach_btf_id", u32)]


class MapInfo(C.Structure):
    """``struct bpf_map_info``."""

    _fields_ = [("type", u32), ("id", u32), ("key_size", u32), ("value_size", u32),
                ("max_entries", u32), ("map_flags", u32), ("name", C.c_char * 16),
                ("ifindex", u32), ("btf_vmlinux_value_type_id", u32), ("netns_dev", u64),
                ("netns_ino", u64), ("btf_id", u32), ("btf_key_type_id", u32),
                ("btf_value_type_id", u32), ("btf_vmlinux_id", u32), ("map_extra", u64)]


class LinkInfo(C.Structure):
    """``struct bpf_link_info`` (64 bytes); for XDP links ``u[0]`` of the union is ifindex."""

    _fields_ = [("type", u32), ("id", u32), ("prog_id", u32), ("_pad", u32), ("u", u32 * 12)]

    @property
    def xdp_ifindex(self) -> int:
        return int(self.u[0])


class BtfInfo(C.Structure):
    """``struct bpf_btf_info``."""

    _fields_ = [("btf", u64), ("btf_size", u32), ("id", u32), ("name", u64),
                ("name_len", u32), ("kernel_btf", u32)]
# fmt: on
