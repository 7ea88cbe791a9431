#!/usr/bin/env python3
"""Differential test of the bpfdsl checker against this machine's kernel verifier.

Corpus (deterministic for a seed): progs/*.bpfd compiled; libbpf-style C from
tests/data/c and tests/data/checker_c built with clang-19; instruction-level mutants of
both (bounds check removed / off by one, NULL check removed, bad return value,
uninitialized stack read, write to a read-only ctx field, out-of-range or misaligned
stack access, unbounded loop, wrong helper argument); random instruction sequences
(among them copies, adds and spills of linked scalars: tests/support/linkedprogs.py);
programs near the verifier's complexity limit (tests/support/complexity.py: nested
packet loops, TCP option walks, ACL rule ladders at several sizes, category near_limit).
Each program is checked by bpfdsl.checker and loaded with BPF_PROG_LOAD (maps created
for its relocations, log_level 1|4 for the kernel's "processed N insns").  Prints total,
agree, false accepts (we OK, kernel rejects) and false rejects per category, how often
the processed counts (checker / kernel) are equal or within 10%, the ratio for every
near-limit program, plus timing figures.

    python3 scripts/difftest_checker.py [--seed N] [--random N] [--limit N] [--no-near-limit] [-v]
Needs root (bpf()).  Exit 1 if a program is falsely accepted (a mutant, or one near the
complexity limit).
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bpfdsl.abi import insn as I  # noqa: E402
from bpfdsl.abi.map_types import MapType, is_map_in_map  # noqa: E402
from bpfdsl.abi.opcodes import BPF_PSEUDO_MAP_FD, BPF_PSEUDO_MAP_VALUE  # noqa: E402
from bpfdsl.abi.prog_types import AttachType, ProgramType  # noqa: E402
from bpfdsl.checker import CheckOptions, DataMap, check_insns, map_refs_for  # noqa: E402
from bpfdsl.kernel import syscall as S  # noqa: E402
from bpfdsl.obj.collection import read_object  # noqa: E402

sys.path.insert(0, str(ROOT / "tests" / "checker"))
sys.path.append(str(ROOT / "tests"))  # tests/support
from idioms import idiom_prog  # noqa: E402
from mutations import Item, mutate  # noqa: E402
from randprogs import calls_prog, ctx_prog, random_prog  # noqa: E402
from support import complexity  # noqa: E402
from support.linkedprogs import linked_prog  # noqa: E402

PT, AT = ProgramType, AttachType


# ---- building the bases ----


def build_c(out_dir: str) -> list[str]:
    """Compile tests/data/c/*.c and tests/data/checker_c/*.c with clang-19 -O2 -g."""
    arch = "/usr/include/x86_64-linux-gnu"
    objs = []
    for src in sorted(glob.glob(str(ROOT / "tests/data/c/*.c"))) + sorted(
        glob.glob(str(ROOT / "tests/data/checker_c/*.c"))
    ):
        obj = os.path.join(out_dir, Path(src).stem + ".o")
        r = subprocess.run(
            ["clang-19", "-O2", "-g", "-target", "bpf", f"-I{arch}", "-c", src, "-o", obj],
            capture_output=True,
            text=True,
        )
        if r.returncode == 0:
            objs.append(obj)
        else:
            print(f"warning: {src} does not compile: {r.stderr.strip()[:200]}", file=sys.stderr)
    return objs


def build_progs(out_dir: str, mcpus: tuple[str, ...] = ("v3", "v1", "v4")) -> list[str]:
    """Compile progs/*.bpfd (default ISA v3, plus v1 and v4 code shapes)."""
    from bpfdsl.compiler import compile_file

    objs = []
    for mcpu in mcpus:
        for src in sorted(glob.glob(str(ROOT / "progs/*.bpfd"))):
            try:
                r = compile_file(src, mcpu=mcpu)
            except Exception as e:  # a compile failure is the compiler's business
                print(f"warning: {src} ({mcpu}): {e}"[:200], file=sys.stderr)
                continue
            tag = "" if mcpu == "v3" else f".{mcpu}"
            obj = os.path.join(out_dir, Path(src).stem + tag + ".bpfd.o")
            Path(obj).write_bytes(r.obj)
            objs.append(obj)
    return objs


class Maps:
    """Kernel maps for the corpus: one per map object (keyed by id()), created lazily."""

    def __init__(self) -> None:
        self.fds: dict[int, S.Fd] = {}
        self.keep: list = []

    def fd(self, m) -> int:
        k = id(m)
        if k not in self.fds:
            self.keep.append(m)
            self.fds[k] = self._create(m)
        return int(self.fds[k])

    def _create(self, m) -> S.Fd:
        if isinstance(m, DataMap):
            fd = S.map_create(MapType.ARRAY, 4, max(1, len(m.data)), 1, map_flags=m.map_flags)
            S.map_update(fd, bytes(4), m.data or b"\0")
            if m.readonly:
                S.map_freeze(fd)
            return fd
        mt = int(m.map_type)
        n = m.max_entries
        if mt == MapType.CPUMAP:
            n = min(n, S.possible_cpus())
        inner = getattr(m, "inner", None)
        inner_fd = self.fd(inner) if inner is not None and is_map_in_map(mt) else 0
        return S.map_create(
            mt, m.key_size, m.value_size, n, map_flags=m.map_flags, inner_map_fd=inner_fd
        )

    def close(self) -> None:
        for fd in self.fds.values():
            fd.close()


def base_items(objs: list[str], category_of) -> list[Item]:
    items = []
    for o in objs:
        spec = read_object(o)
        for p in spec.programs.values():
            if p.kind is None:
                continue
            refs = map_refs_for(p, spec.maps, spec.data_sections)
            items.append(
                Item(
                    category_of(o),
                    f"{Path(o).name}:{p.name}",
                    list(p.insns),
                    p.kind.program_type,
                    p.kind.attach_type,
                    p.kind.prog_flags,
                    refs,
                    p.line_at,
                )
            )
    return items


# ---- running ----


def patch(item: Item, maps: Maps) -> bytes:
    ins = list(item.insns)
    for idx, ref in item.refs.items():
        x = ins[idx]
        if not x.is_ld_imm64:
            continue
        fd = maps.fd(ref.map)
        if ref.value_off is None:
            ins[idx] = dataclasses.replace(x, src=BPF_PSEUDO_MAP_FD, imm=fd)
        else:
            v = (fd & 0xFFFFFFFF) | ((ref.value_off & 0xFFFFFFFF) << 32)
            ins[idx] = dataclasses.replace(
                x, src=BPF_PSEUDO_MAP_VALUE, imm=v - (1 << 64) if v >> 63 else v
            )
    return I.encode(ins)


def kernel_verdict(item: Item, maps: Maps, log_level: int = 1 | 4) -> tuple[str, str, str]:
    try:
        code = patch(item, maps)
    except S.BpfError as e:
        return "skip", f"map create failed: {e}", ""
    try:
        fd, log = S.prog_load(
            item.prog_type,
            code,
            "GPL",
            expected_attach_type=item.attach_type or 0,
            prog_flags=item.prog_flags,
            log_level=log_level,
            log_size=1 << 22,
        )
        fd.close()
        _kernel_stats(item, log)
        return "ok", "", log
    except S.BpfError as e:
        _kernel_stats(item, e.log or "")
        lines = [ln for ln in (e.log or "").splitlines() if ln.strip()]
        msg = next(
            (
                ln
                for ln in reversed(lines)
                if not ln.startswith(("processed ", "verification time", "stack depth"))
            ),
            f"errno {e.errno}",
        )
        m = re.search(r"(BPF program is too large\. Processed \d+ insn)", msg)
        return "rej", m.group(1) if m else msg, e.log or ""


def _kernel_stats(item: Item, log: str) -> None:
    """The kernel's processed count and verification time (BPF_LOG_STATS lines)."""
    m = re.search(r"processed (\d+) insns", log)
    item.kernel_processed = int(m.group(1)) if m else None
    m = re.search(r"verification time (\d+) usec", log)
    item.kernel_seconds = int(m.group(1)) / 1e6 if m else None


def our_verdict(item: Item) -> None:
    t0 = time.perf_counter()
    r = check_insns(
        item.insns,
        item.prog_type,
        item.attach_type,
        map_refs=item.refs,
        name=item.name,
        # the kernel bounds bpf_get_smp_processor_id() by the possible CPUs
        options=CheckOptions(nr_cpus=S.possible_cpus()),
    )
    item.our_seconds = time.perf_counter() - t0
    item.our_processed = r.insns_processed
    item.ours = "ok" if r.ok else "rej"
    if r.errors:
        item.our_msg = r.errors[0].message
        item.our_err_idx = r.errors[0].idx
    return r


NEAR_LIMIT = {
    "packet_loops": (complexity.packet_loops, (1, 2, 3)),
    "option_walk": (complexity.option_walk, (10, 14, 18, 20, 40)),
    "acl_ladder": (complexity.acl_ladder, (25, 50, 75, 100)),
}


def near_limit_items(tmp: str, sizes: dict | None = None) -> list[Item]:
    """The near-limit families of tests/support/complexity.py compiled at ``sizes``
    (family -> sizes; default NEAR_LIMIT's), category near_limit."""
    from bpfdsl.compiler import compile_source

    objs = []
    for fam, (gen, default) in NEAR_LIMIT.items():
        for n in sizes.get(fam, default) if sizes else default:
            obj = os.path.join(tmp, f"{fam}_{n}.o")
            Path(obj).write_bytes(compile_source(gen(n), f"{fam}_{n}.bpfd", check=False).obj)
            objs.append(obj)
    items = base_items(objs, lambda o: "near_limit")
    for it, o in zip(items, objs, strict=True):
        it.name = Path(o).stem
    return items


def build_corpus(
    seed: int, n_random: int, tmp: str, per_kind: int = 3, near_limit: dict | None = None
) -> list[Item]:
    """The corpus; ``near_limit``: family -> sizes of the near-limit programs to add
    (None: none; an empty dict: NEAR_LIMIT's sizes)."""
    rng = random.Random(seed)
    c_objs = build_c(tmp)
    p_objs = build_progs(tmp)
    bases = base_items(
        p_objs, lambda o: "progs" if o.count(".") == 2 else "progs_" + o.split(".")[-3]
    )
    bases += base_items(c_objs, lambda o: "c")
    corpus = list(bases)
    for b in bases:
        corpus += mutate(b, rng, per_kind)
    # random programs share a small set of maps
    from bpfdsl.obj.maps import MapSpec

    rmaps = {
        "h": MapSpec("h", MapType.HASH, 4, 8, 16),
        "a": MapSpec("a", MapType.ARRAY, 4, 16, 4),
        "pa": MapSpec("pa", MapType.PERCPU_ARRAY, 4, 8, 1),
    }
    corpus += [random_prog(rng, k, rmaps) for k in range(n_random)]
    corpus += [idiom_prog(rng, k, rmaps) for k in range(n_random // 2)]
    corpus += [ctx_prog(rng, k, rmaps) for k in range(n_random // 4)]
    corpus += [calls_prog(rng, k, rmaps) for k in range(n_random // 10)]
    corpus += [
        Item("random_linked", f"linked#{k}", I.decode(I.encode(linked_prog(rng))), PT.XDP, AT.XDP)
        for k in range(n_random // 4)
    ]
    if near_limit is not None:
        corpus += near_limit_items(tmp, near_limit or None)
    return corpus


def run(corpus: list[Item], verbose: bool = False) -> dict:
    maps = Maps()
    stats: dict[str, Counter] = defaultdict(Counter)
    t_ours = 0.0
    slow: list = []
    done = 0
    try:
        for it in corpus:
            t0 = time.perf_counter()
            our_verdict(it)
            dt = time.perf_counter() - t0
            t_ours += dt
            slow.append((dt, it.name))
            done += 1
            if verbose and done % 250 == 0:
                print(f"  ... {done}/{len(corpus)}", file=sys.stderr, flush=True)
            it.kernel, it.kernel_msg, _ = kernel_verdict(it, maps)
            cat = it.category
            st = stats[cat]
            if it.kernel == "skip":
                st["skipped"] += 1
                continue
            if it.ours == "rej" and it.our_msg.startswith("cannot check"):
                st["unchecked"] += 1  # no verdict (an unmodelled helper): not compared
                continue
            st["total"] += 1
            if it.ours == it.kernel:
                st["agree"] += 1
            elif it.ours == "ok":
                st["false_accept"] += 1
            else:
                st["false_reject"] += 1
            if it.ours == it.kernel == "ok" and it.kernel_processed:
                st["counted"] += 1
                ratio = it.our_processed / it.kernel_processed
                st["count_equal"] += ratio == 1
                st["count_within_10pct"] += abs(ratio - 1) <= 0.1
                if verbose and ratio != 1:
                    print(
                        f"  COUNT {it.name}: ours {it.our_processed} "
                        f"kernel {it.kernel_processed} ({ratio:.3f})"
                    )
            if verbose and it.ours != it.kernel:
                print(
                    f"  DISAGREE {it.name}: ours={it.ours} ({it.our_msg}) kernel={it.kernel} ({it.kernel_msg})"
                )
    finally:
        maps.close()
    slow.sort(reverse=True)
    return {"stats": stats, "t_ours": t_ours, "slowest": slow[:5]}


def near_limit_table(corpus: list[Item]) -> None:
    """Per near-limit program: verdicts, processed counts and their ratio, times."""
    rows = [it for it in corpus if it.category == "near_limit" and it.kernel]
    if not rows:
        return
    print(
        f"{'near-limit program':22} {'ours':>4} {'kern':>4} {'processed ours':>14} "
        f"{'kernel':>9} {'ratio':>6} {'ours s':>7} {'kern s':>7}"
    )
    for it in rows:
        k = it.kernel_processed
        ratio = f"{it.our_processed / k:.3f}" if k else "-"
        ks = f"{it.kernel_seconds:.2f}" if it.kernel_seconds is not None else "-"
        print(
            f"{it.name:22} {it.ours:>4} {it.kernel:>4} {it.our_processed:14,} "
            f"{k or 0:9,} {ratio:>6} {it.our_seconds:7.2f} {ks:>7}"
        )


def timing(tmp: str) -> None:
    """Time to check all progs/, and insns/s on the largest program vs the kernel."""
    from bpfdsl.checker import check_object

    objs = [o for o in glob.glob(os.path.join(tmp, "*.bpfd.o"))] + glob.glob(
        os.path.join(tmp, "*.o")
    )
    t0 = time.perf_counter()
    n = 0
    for o in sorted({o for o in objs if o.endswith(".bpfd.o") and Path(o).name.count(".") == 2}):
        n += len(check_object(read_object(o)).programs)
    t_progs = time.perf_counter() - t0
    print(f"time to check all progs/ ({n} programs): {t_progs:.3f} s")
    # largest program by processed insns among all bases
    best = None
    for o in sorted(set(objs)):
        spec = read_object(o)
        for p in spec.programs.values():
            if p.kind is None:
                continue
            refs = map_refs_for(p, spec.maps, spec.data_sections)
            it = Item(
                "t",
                f"{Path(o).name}:{p.name}",
                list(p.insns),
                p.kind.program_type,
                p.kind.attach_type,
                p.kind.prog_flags,
                refs,
            )
            r = check_insns(it.insns, it.prog_type, it.attach_type, map_refs=refs)
            if best is None or len(it.insns) > len(best[0].insns):
                best = (it, r)
    if best is None:
        return
    it, r = best
    reps = max(1, int(0.5 / max(r.seconds, 1e-6)))
    t0 = time.perf_counter()
    for _ in range(reps):
        r = check_insns(it.insns, it.prog_type, it.attach_type, map_refs=it.refs)
    per = (time.perf_counter() - t0) / reps
    maps = Maps()
    try:
        verdict, _, log = kernel_verdict(it, maps, log_level=4)
    finally:
        maps.close()
    m = re.search(r"verification time (\d+) usec", log)
    kp = re.search(r"processed (\d+) insns", log)
    k_us = int(m.group(1)) if m else None
    print(
        f"largest program {it.name}: {len(it.insns)} insns, we processed {r.insns_processed} "
        f"in {per * 1e3:.2f} ms = {r.insns_processed / per:,.0f} insns/s"
    )
    if k_us is not None:
        kproc = int(kp.group(1)) if kp else 0
        print(
            f"  kernel: verification time {k_us} us, processed {kproc} insns "
            f"= {kproc / max(k_us, 1) * 1e6:,.0f} insns/s; ours/kernel time ratio {per * 1e6 / max(k_us, 1):.1f}x"
        )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--random", type=int, default=900, help="random programs (default 900)")
    ap.add_argument("--per-kind", type=int, default=3, help="mutation sites per kind per base")
    ap.add_argument("--limit", type=int, default=0, help="only the first N corpus entries")
    ap.add_argument("-v", "--verbose", action="store_true", help="list disagreements")
    ap.add_argument(
        "--no-near-limit",
        action="store_true",
        help="leave out the programs near the complexity limit (about 3 minutes)",
    )
    a = ap.parse_args(argv)
    if S.probe_bpf() is not None:
        print(f"bpf() unusable: {S.probe_bpf()}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        corpus = build_corpus(
            a.seed, a.random, tmp, a.per_kind, near_limit=None if a.no_near_limit else {}
        )
        if a.limit:
            corpus = corpus[: a.limit]
        t0 = time.perf_counter()
        res = run(corpus, a.verbose)
        wall = time.perf_counter() - t0
        stats = res["stats"]
        tot = Counter()
        print(f"{'category':28} {'total':>6} {'agree':>6} {'f.acc':>6} {'f.rej':>6}")
        for cat in sorted(stats):
            s = stats[cat]
            tot.update(s)
            print(
                f"{cat:28} {s['total']:6} {s['agree']:6} {s['false_accept']:6} {s['false_reject']:6}"
            )
        pct = 100.0 * tot["agree"] / max(1, tot["total"])
        print(
            f"{'TOTAL':28} {tot['total']:6} {tot['agree']:6} {tot['false_accept']:6} "
            f"{tot['false_reject']:6}   agreement {pct:.1f}%  (skipped {tot['skipped']}, "
            f"cannot check {tot['unchecked']})"
        )
        print(
            f"processed counts (both accept, {tot['counted']} programs): equal "
            f"{tot['count_equal']}, within 10% {tot['count_within_10pct']}"
        )
        near_limit_table(corpus)
        fa_mut = sum(
            s["false_accept"]
            for c, s in stats.items()
            if c.startswith("mutant:") or c == "near_limit"
        )
        print(f"false accepts on the mutated and near-limit corpus: {fa_mut}")
        print(f"checker time {res['t_ours']:.2f} s for {tot['total']} programs; wall {wall:.1f} s")
        print("slowest checks: " + ", ".join(f"{n} {t:.2f}s" for t, n in res["slowest"]))
        timing(tmp)
    return 1 if fa_mut else 0


if __name__ == "__main__":
    sys.exit(main())
