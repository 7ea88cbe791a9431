"""The model of bpfdsl's ``hash()`` (and of the C twins' flow hash) the tests compare
against: 32-bit FNV-1a over whole 32-bit words, then MurmurHash3's fmix32 finalizer."""

from __future__ import annotations


def flow_hash(*words: int) -> int:
    """hash(w0, w1, ...) for 32-bit words as the program sees them (a be32 field's value is
    its 4 bytes read little-endian)."""
    h = 2166136261
    for w in words:
        h = ((h ^ w) * 16777619) & 0xFFFFFFFF
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    return h ^ (h >> 16)
