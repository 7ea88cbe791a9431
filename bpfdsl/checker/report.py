"""Results of the checker and their rendering (text in kernel log syntax, or JSON).

:class:`CheckError` names the instruction (slot number as the kernel counts, and its
text ``(61) r2 = *(u32 *)(r1 +4)``), the message in the kernel's wording, a plain
explanation, the register state that failed (``R2=pkt(off=14,r=0)``), and the source
line from ``.BTF.ext`` line info when the object has it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bpfdsl.abi.limits import BPF_COMPLEXITY_LIMIT_INSNS
from bpfdsl.checker import domain as D
from bpfdsl.diagnostics import Diagnostic, Span

UNMODELLED = "unmodelled-helper"  # same code as calls.UNMODELLED
TIMEOUT = "check-timeout"  # the analysis stopped at its time budget
NO_VERDICT = frozenset({UNMODELLED, TIMEOUT})  # codes that leave a program unchecked


@dataclass(slots=True)
class SourceLine:
    """``.BTF.ext`` line info record resolved to text: 1-based line/col, file path."""

    file: str
    line: int
    col: int
    text: str = ""


@dataclass(slots=True)
class CheckError:
    """One finding. ``severity``: "error" (the kernel rejects) or "warning" (the kernel
    accepts, bpfdsl considers it a bug: bad return action, pointer in ALU32, ...).
    ``path``: branch decisions leading here."""

    code: str
    message: str
    explain: str
    idx: int
    slot: int
    insn_text: str
    regs: dict[int, str] = field(default_factory=dict)
    state: str = ""
    source: SourceLine | None = None
    severity: str = "error"
    path: list[str] = field(default_factory=list)

    def diagnostic(
        self, prog: str, verbose: bool = False, code_prefix: str = "checker-"
    ) -> Diagnostic:
        """As a :class:`Diagnostic`: span and line text from the object's line info, the
        instruction (and its registers) as a note, ``explain`` as the hint; with ``verbose``
        also the branch decisions leading here and the state before the instruction.
        ``code_prefix`` marks the stage (``checker-`` where the compiler reports it)."""
        span = None
        if self.source:
            span = Span(self.source.file, self.source.line, max(1, self.source.col))
        regs = " ".join(f"R{r}={t}" for r, t in sorted(self.regs.items()))
        notes = [
            f"prog '{prog}' insn {self.slot}: {self.insn_text}" + (f" ; {regs}" if regs else "")
        ]
        if verbose and self.path:
            notes.append("path to the failing insn (branch decisions): " + "; ".join(self.path))
        if verbose and self.state:
            notes.append(f"state before insn {self.slot}: {self.state}")
        return Diagnostic(
            self.severity,
            f"{code_prefix}{self.code}",
            self.message,
            span,
            [self.explain],
            notes,
            line_text=self.source.text if self.source else None,
        )

    def render(self, prog: str, verbose: bool = False) -> str:
        """Text form for ``bpfdsl check`` (the one renderer: :meth:`Diagnostic.render`)."""
        return self.diagnostic(prog, verbose, code_prefix="").render()

    def to_json(self, prog: str = "") -> dict:
        """:meth:`Diagnostic.to_json`'s shape (``hints`` holds the explanation) plus the
        checker's facts: ``insn`` (slot), ``insn_text``, ``regs``, ``state``, ``path``."""
        out = self.diagnostic(prog, verbose=True, code_prefix="").to_json()
        out.update(
            insn=self.slot,
            insn_text=self.insn_text,
            regs={f"R{k}": v for k, v in self.regs.items()},
            state=self.state,
            path=self.path,
        )
        return out


@dataclass(slots=True)
class ProgramResult:
    """Outcome for one program: ``ok`` when no error (warnings allowed); ``insns_processed``
    counts instructions walked (the kernel's "processed N insns"); ``seconds`` wall time;
    ``insn_count`` the program's insns (slots), ``xlated_count`` the model's count after the
    kernel's rewrite (checker.fixups)."""

    name: str
    section: str
    errors: list[CheckError] = field(default_factory=list)
    warnings: list[CheckError] = field(default_factory=list)
    insns_processed: int = 0
    states: int = 0
    seconds: float = 0.0
    insn_count: int = 0
    # insns (slots) of the program as the kernel rewrites it after verification
    # (checker.fixups: its xlated_prog_len / 8); 0 when the walk did not finish
    xlated_count: int = 0

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def unchecked(self) -> bool:
        """True when the analysis stopped at a kernel helper the checker does not model
        or at its time budget (the verdict is unknown: neither accepted nor rejected)."""
        return bool(self.errors) and all(e.code in NO_VERDICT for e in self.errors)

    @property
    def limit_percent(self) -> float:
        """``insns_processed`` as a percentage of the kernel's budget of 1,000,000
        processed insns (BPF_COMPLEXITY_LIMIT_INSNS, kernel/bpf/verifier.c)."""
        return 100.0 * self.insns_processed / BPF_COMPLEXITY_LIMIT_INSNS

    def limit_text(self) -> str:
        """How close the walk came to the kernel's limit: "processed 950,123 of 1,000,000
        insns (95 %)"."""
        return (
            f"processed {self.insns_processed:,} of {BPF_COMPLEXITY_LIMIT_INSNS:,} insns "
            f"({self.limit_percent:.0f} %)"
        )

    @property
    def status(self) -> str:
        """ "ok", "rejected" or "unchecked"."""
        return "ok" if self.ok else ("unchecked" if self.unchecked else "rejected")

    def to_json(self) -> dict:
        return {
            "program": self.name,
            "section": self.section,
            "ok": self.ok,
            "status": self.status,
            "errors": [e.to_json(self.name) for e in self.errors],
            "warnings": [w.to_json(self.name) for w in self.warnings],
            "insns": self.insn_count,
            "insns_processed": self.insns_processed,
            "insns_limit": BPF_COMPLEXITY_LIMIT_INSNS,
            "limit_percent": round(self.limit_percent, 1),
            "states": self.states,
            "seconds": round(self.seconds, 6),
        }


@dataclass(slots=True)
class CheckResult:
    """Outcome for a whole object: one :class:`ProgramResult` per program."""

    programs: list[ProgramResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(p.ok for p in self.programs)

    @property
    def rejected(self) -> bool:
        """Some program has a real rejection (not only an unmodelled helper)."""
        return any(p.status == "rejected" for p in self.programs)

    def to_json(self) -> dict:
        return {"ok": self.ok, "programs": [p.to_json() for p in self.programs]}


def fmt_state(regs: list[D.Reg]) -> str:
    """Kernel-style register dump of initialized registers: ``R1=ctx() R10=fp0``."""
    out = []
    for i, r in enumerate(regs):
        if r.t != D.NOT_INIT:
            out.append(f"R{i}={D.fmt_reg(r)}")
    return " ".join(out)
