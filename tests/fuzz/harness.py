"""Campaign machinery shared by the fuzzers: outcomes, a sandboxed worker with a per-case
timeout, leak checks, failure signatures, reduction to a minimal reproducer, reports.

A case runs in a forked worker process, one at a time.  As root the worker first moves
into private mount and network namespaces and mounts its own bpffs on /sys/fs/bpf, so a
pin a case makes is seen by no one else (the machine's /sys/fs/bpf is shared) and every
leftover is found: after each case the worker lists that bpffs and its own bpf fds.  The
parent waits ``timeout`` seconds for the answer (the worker's own SIGALRM at the same
time gives the Python stack of a hang), then kills and replaces the worker.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
PROGS = ROOT / "progs"
DOCS = ROOT / "docs"
DATA = ROOT / "tests" / "data"
PCAPS = DATA / "pcaps"  # the repo's copy of ../shared/pcaps (tcpdump's test corpus)

BPFFS = "/sys/fs/bpf"
# linux/sched.h and linux/mount.h
CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
GRACE_S = 5.0  # the parent waits this much longer than the worker's own alarm
MEMORY_LIMIT = 4 << 30  # RLIMIT_AS of a worker, bytes: a runaway case fails, not the VM

# outcome -> what it means; every other outcome is a fine one (counted, not a failure)
FAILURES: dict[str, str] = {
    "traceback": "an exception other than DiagnosticError reached the user (a traceback)",
    "hang": "the case ran longer than the per-case timeout",
    "crash": "the worker process died (signal, exit, memory)",
    "unlocated": "an error diagnostic without file:line:col",
    "bad-location": "a diagnostic whose line:col is not in the file",
    "raw-message": "a raw Python exception message instead of a diagnostic with a code",
    "kernel-rejected": "the kernel refused an object the compiler and checker accepted",
    "compile-rejected": "the compiler refused a generated valid program",
    "internal-compiler-error": "LLVM refused the IR bpfdsl generated (an ICE)",
    "checker-false-refusal": "the checker refused an object the kernel loads",
    "both-refused": "the checker and the kernel both refused the object of a valid program",
    "engine-diff": "the kernel and the interpreter disagree (verdict, bytes or maps)",
    "leak": "a bpf fd or a bpffs pin was left behind",
    "bad-exit": "the command exited with an unexpected status or without a message",
    "wrong-count": "a capture read back with another number of packets than it holds",
}


@dataclass
class Result:
    """What one case did: ``outcome`` (a key of :data:`FAILURES` for a failure, else a
    fine outcome such as ``ok`` or ``diagnostic``), ``detail`` (one line: the diagnostic
    code, the exception and where), ``text`` (long form: traceback, diff, stderr)."""

    outcome: str
    detail: str = ""
    text: str = ""

    @property
    def failed(self) -> bool:
        return self.outcome in FAILURES

    @property
    def signature(self) -> str:
        """The failure kind: equal for two inputs that hit the same fault."""
        return f"{self.outcome}: {self.detail}" if self.detail else self.outcome


class CaseTimeout(BaseException):
    """Raised in the worker by SIGALRM (a BaseException: ``except Exception`` keeps out)."""


def exception_result(e: BaseException, outcome: str = "traceback") -> Result:
    """A failure for an exception that escaped: detail ``Type in function()`` of the
    innermost bpfdsl frame (function names survive module moves; file names do not)."""
    tb = [f for f in traceback.extract_tb(e.__traceback__) if f.name != "_alarm"]
    ours = [f for f in tb if f"{os.sep}bpfdsl{os.sep}" in f.filename] or list(tb)
    where = f" in {ours[-1].name}()" if ours else ""
    text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    return Result(outcome, f"{type(e).__name__}{where}", text[-6000:])


# ---- the worker ----------------------------------------------------------------------


def kernel_usable() -> bool:
    """True when bpf() works here (root, Linux): the kernel parts of the fuzzers run."""
    from .api import kernel_unavailable_reason

    return kernel_unavailable_reason() is None


_PRIVATE_BPFFS = False  # set in a worker once /sys/fs/bpf is its own bpffs
_BPFFS_OWN: set[str] = set()  # what a fresh bpffs holds by itself (maps.debug, progs.debug)


def _private_namespaces() -> None:
    """Move this (single-threaded, forked) process into new mount and network namespaces
    with mounts private (no propagation back) and a fresh bpffs on /sys/fs/bpf."""
    from .api import libc

    global _PRIVATE_BPFFS
    libc.unshare(CLONE_NEWNS | CLONE_NEWNET, what="unshare(CLONE_NEWNS|CLONE_NEWNET)")
    libc.mount(b"none", "/", b"none", MS_REC | MS_PRIVATE, what="mount --make-rprivate /")
    libc.mount(b"bpf", BPFFS, b"bpf", 0, what=f"mount -t bpf bpf {BPFFS}")
    _PRIVATE_BPFFS = True
    _BPFFS_OWN.update(os.path.join(BPFFS, n) for n in os.listdir(BPFFS))  # bpf_preload's


def bpf_fds() -> dict[int, str]:
    """This process's fds of BPF objects: fd -> ``bpf-prog``/``bpf-map``/``btf``/``bpf_link``."""
    out = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target.startswith(("anon_inode:bpf", "anon_inode:btf")):
            out[int(name)] = target.split(":", 1)[1]
    return out


_KEEP: set[str] = set()  # fixtures a fuzzer keeps on the worker's bpffs between cases


def keep_pins(dirs: Iterable[str]) -> None:
    """Do not count what is under ``dirs`` (fixtures made once per worker) as left behind."""
    _KEEP.update(dirs)


def private_pins() -> list[str]:
    """Everything on the worker's own bpffs (empty list outside a worker)."""
    if not _PRIVATE_BPFFS:
        return []
    out = []
    for top, dirs, files in os.walk(BPFFS):
        out += [os.path.join(top, n) for n in dirs + files]
    # bpfdsl's own root for one-step attaches (attach.DEFAULT_PIN_ROOT) may stay, empty
    out = [p for p in out if not (p == f"{BPFFS}/bpfdsl" and not os.listdir(p))]
    keep = tuple(d.rstrip("/") + "/" for d in _KEEP)
    return sorted(
        p for p in out if p not in _BPFFS_OWN and p not in _KEEP and not p.startswith(keep)
    )


def clear_private_pins() -> None:
    """Remove everything on the worker's own bpffs (never the machine's)."""
    if not _PRIVATE_BPFFS:
        return
    for name in os.listdir(BPFFS):
        path = os.path.join(BPFFS, name)
        if path in _BPFFS_OWN or path in _KEEP:
            continue
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass


def _alarm(_sig, frame) -> None:
    raise CaseTimeout()


def _with_leaks(res: Result, before: dict[int, str]) -> Result:
    leaked = {fd: k for fd, k in bpf_fds().items() if before.get(fd) != k}
    pins = private_pins()
    if not leaked and not pins:
        return res
    for fd in leaked:
        try:
            os.close(fd)
        except OSError:
            pass
    clear_private_pins()
    what, kinds = [], []
    if leaked:
        kinds.append("bpf fds")
        what.append(f"{len(leaked)} bpf fd(s) ({', '.join(sorted(set(leaked.values())))})")
    if pins:
        kinds.append("pins")
        what.append(f"pins {', '.join(pins[:6])}")
    if res.failed:  # keep the first failure, say the rest
        res.text += "\nalso left behind: " + "; ".join(what)
        return res
    return Result(
        "leak",
        " and ".join(kinds),
        f"after outcome {res.signature}: left behind " + "; ".join(what) + "\n" + res.text,
    )


def _serve(conn, fn: Callable[[Any], Result], isolate: bool, timeout: float) -> None:
    import resource

    try:
        if isolate:
            _private_namespaces()
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard == resource.RLIM_INFINITY or hard > MEMORY_LIMIT:
            resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, hard))
        signal.signal(signal.SIGALRM, _alarm)
    except BaseException as e:  # the parent reports it for every case
        conn.send(exception_result(e, "crash"))
        return
    conn.send(Result("ready"))
    while True:
        try:
            payload = conn.recv()
        except (EOFError, KeyboardInterrupt):
            return
        before = bpf_fds()
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            try:
                res = fn(payload)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except CaseTimeout as e:
            r = exception_result(e, "hang")
            res = Result("hang", f"over {timeout:g} s{r.detail.split('CaseTimeout')[1]}", r.text)
        except KeyboardInterrupt:
            return
        except BaseException as e:
            res = exception_result(e)
        try:
            res = _with_leaks(res, before)
        except CaseTimeout:
            pass
        conn.send(res)


class Sandbox:
    """Runs ``fn(payload) -> Result`` in a forked worker, one case at a time.

    ``timeout``: seconds per case (then the outcome is ``hang`` and the worker is
    replaced); ``isolate``: private namespaces and bpffs (default: when running as root).
    A worker that dies gives outcome ``crash``.  Use as a context manager."""

    def __init__(
        self, fn: Callable[[Any], Result], *, timeout: float = 30.0, isolate: bool | None = None
    ) -> None:
        self.fn, self.timeout = fn, timeout
        self.isolate = (os.geteuid() == 0) if isolate is None else isolate
        self._ctx = multiprocessing.get_context("fork")
        self._proc = None
        self._conn = None
        self.restarts = 0

    def _start(self) -> Result | None:
        parent, child = self._ctx.Pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        self._proc = self._ctx.Process(
            target=_serve, args=(child, self.fn, self.isolate, self.timeout), daemon=True
        )
        self._proc.start()
        child.close()
        self._conn = parent
        if not parent.poll(60):
            self._kill()
            return Result("crash", "the worker did not start within 60 s")
        try:
            first = parent.recv()
        except EOFError:
            self._kill()
            return Result("crash", "the worker died while starting")
        if first.outcome != "ready":
            self._kill()
            return first
        return None

    def _kill(self) -> None:
        if self._proc is not None:
            if self._proc.is_alive():
                self._proc.kill()
            self._proc.join(10)
            code = self._proc.exitcode
            self._proc = None
            self.restarts += 1
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            return code
        return None

    def run(self, payload: Any) -> Result:
        """Run one case; never raises for what the case does."""
        if self._proc is None:
            bad = self._start()
            if bad is not None:
                return bad
        self._conn.send(payload)
        if self._conn.poll(self.timeout + GRACE_S):
            try:
                return self._conn.recv()
            except EOFError:
                self._proc.join(10)
                code = self._proc.exitcode
                self._kill()
                why = f"signal {-code}" if code and code < 0 else f"exit status {code}"
                return Result("crash", f"worker died ({why})")
        self._kill()
        return Result("hang", f"no answer within {self.timeout + GRACE_S:g} s (worker killed)")

    def close(self) -> None:
        if self._proc is not None:
            self._conn.close()
            self._proc.join(5)
            self._kill()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ---- reduction -----------------------------------------------------------------------


def ddmin(
    items: list, fails: Callable[[list], bool], *, budget: int = 200, deadline: float | None = None
) -> list:
    """Zeller's delta debugging: a 1-minimal-ish sublist of ``items`` for which ``fails``
    still holds, within ``budget`` calls of ``fails`` and before ``deadline``
    (time.monotonic()).  ``fails(items)`` is assumed true."""
    n, calls = 2, 0
    while len(items) >= 2:
        chunk = max(1, len(items) // n)
        parts = [items[i : i + chunk] for i in range(0, len(items), chunk)]
        reduced = False
        for i in range(len(parts)):
            if calls >= budget or (deadline is not None and time.monotonic() > deadline):
                return items
            rest = [x for j, p in enumerate(parts) if j != i for x in p]
            calls += 1
            if rest and fails(rest):
                items, n, reduced = rest, max(n - 1, 2), True
                break
        if not reduced:
            if n >= len(items):
                break
            n = min(len(items), n * 2)
    return items


# ---- campaigns -----------------------------------------------------------------------


@dataclass
class Case:
    """One input: ``payload`` goes to the worker; ``label`` says where it came from."""

    payload: Any
    label: str


@dataclass
class Fuzzer:
    """A kind of campaign: ``cases(seed, count, kernel)`` makes inputs; ``run_case(payload)``
    runs one (in the worker); ``shrink(payload, fails)`` returns a smaller payload for which
    ``fails`` holds; ``reproducer(payload)`` is the text to rerun it by hand."""

    kind: str
    cases: Callable[[int, int, bool], Iterable[Case]]
    run_case: Callable[[Any], Result]
    reproducer: Callable[[Any], str]
    shrink: Callable[[Any, Callable[[Any], bool], float], Any] | None = None
    timeout: float = 30.0


@dataclass
class Failure:
    """The first input of one failure kind (``result.signature``), reduced, with how often
    the campaign hit that kind and the known issue it belongs to (None: a new finding)."""

    kind: str
    seed: int
    index: int
    label: str
    result: Result
    reproducer: str
    hits: int = 1
    known: Any = None

    def describe(self) -> str:
        tag = f"known: {self.known.name} ({self.known.owner})" if self.known else "NEW"
        return (
            f"[{self.kind}] {self.result.signature}  x{self.hits}  ({tag})\n"
            f"  first: case #{self.index} of seed {self.seed}: {self.label}\n"
            f"  {FAILURES.get(self.result.outcome, '')}\n"
            + indent(self.reproducer, "  | ")
            + ("\n" + indent(self.result.text.strip()[-2500:], "  > ") if self.result.text else "")
        )


def indent(text: str, prefix: str) -> str:
    return "\n".join(prefix + line for line in text.splitlines())


@dataclass
class Report:
    """Counts of one campaign: cases run, seconds, outcomes, failures by kind."""

    kind: str
    seed: int
    cases: int = 0
    seconds: float = 0.0
    outcomes: Counter = field(default_factory=Counter)
    failures: dict[str, Failure] = field(default_factory=dict)
    stopped_early: bool = False

    @property
    def new_failures(self) -> list[Failure]:
        return [f for f in self.failures.values() if f.known is None]

    def summary(self) -> str:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(self.outcomes.items()))
        extra = " (time limit reached)" if self.stopped_early else ""
        nfail = sum(f.hits for f in self.failures.values())
        return (
            f"{self.kind}: seed {self.seed}, {self.cases} cases in {self.seconds:.1f} s{extra}: "
            f"{counts}; {nfail} failing case(s) in {len(self.failures)} kind(s), "
            f"{len(self.new_failures)} new"
        )

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "seed": self.seed,
            "cases": self.cases,
            "seconds": round(self.seconds, 1),
            "outcomes": dict(self.outcomes),
            "failures": [
                {
                    "signature": f.result.signature,
                    "hits": f.hits,
                    "known": f.known.name if f.known else None,
                    "first_case": f.index,
                    "label": f.label,
                    "reproducer": f.reproducer,
                }
                for f in self.failures.values()
            ],
        }


def run_campaign(
    fuzzer: Fuzzer,
    seed: int,
    count: int,
    *,
    time_limit: float | None = None,
    kernel: bool | None = None,
    shrink_s: float = 60.0,
    progress: Callable[[str], None] | None = None,
) -> Report:
    """Run ``count`` cases of ``fuzzer`` from ``seed`` (stop at ``time_limit`` seconds);
    the first input of each failure kind is reduced (at most ``shrink_s`` s each) and
    matched against :data:`fuzz.known.KNOWN`."""
    from .known import known_issue

    kernel = kernel_usable() if kernel is None else kernel
    rep = Report(fuzzer.kind, seed)
    t0 = time.monotonic()
    with Sandbox(fuzzer.run_case, timeout=fuzzer.timeout) as box:
        for i, case in enumerate(_take(fuzzer.cases(seed, count, kernel), count)):
            if time_limit is not None and time.monotonic() - t0 > time_limit:
                rep.stopped_early = True
                break
            res = box.run(case.payload)
            rep.cases += 1
            rep.outcomes[res.outcome] += 1
            if not res.failed:
                continue
            sig = res.signature
            if sig in rep.failures:
                rep.failures[sig].hits += 1
                continue
            payload = case.payload
            known = known_issue(fuzzer.kind, payload, res)
            if fuzzer.shrink is not None and shrink_s > 0 and res.outcome not in ("hang", "crash"):
                budget = shrink_s / 4 if known is not None else shrink_s
                payload = fuzzer.shrink(
                    payload,
                    lambda p, sig=sig: box.run(p).signature == sig,
                    time.monotonic() + budget,
                )
                res = box.run(payload) if payload is not case.payload else res
                if res.signature != sig:  # the reducer must keep the kind; else the original
                    payload, res = case.payload, box.run(case.payload)
            rep.failures[sig] = Failure(
                fuzzer.kind, seed, i, case.label, res, fuzzer.reproducer(payload), known=known
            )
            if progress:
                progress(rep.failures[sig].describe())
    rep.seconds = time.monotonic() - t0
    return rep


def _take(it: Iterable[Case], n: int) -> Iterator[Case]:
    for i, c in enumerate(it):
        if i >= n:
            return
        yield c
