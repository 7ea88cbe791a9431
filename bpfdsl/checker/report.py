"""Results of the checker and their rendering (text in kernel log syntax, or JSON).

:class:`CheckError` names the instruction (slot number as the kernel counts, and its
text ``(61) r2 = *(u32 *)(r1 +4)``), the message in the kernel's wording, a plain
explanation, the register state that failed (``R2=pkt(off=14,r=0)``), and the source
line from ``.BTF.ext`` line info when the object has it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bpfdsl.checker import domain as D
from bpfdsl.diagnostics import Diagnostic, Span

UNMODELLED = "unmodelled-helper"  # same code as calls.UNMODELLED


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

    def render(self, prog: str, verbose: bool = False) -> str:
        where = ""
        if self.source:
            where = f"{self.source.file}:{self.source.line}:{self.source.col}: "
        regs = " ".join(f"R{r}={t}" for r, t in sorted(self.regs.items()))
        out = [f"{where}{self.severity}[{self.code}]: prog '{prog}': {self.message}"]
        if self.source and self.source.text:
            out.append(f"  {self.source.line:>5} | {self.source.text.strip()}")
        out.append(f"  insn {self.slot}: {self.insn_text}" + (f"   ; {regs}" if regs else ""))
        out.append(f"  = help: {self.explain}")
        if verbose and self.path:
            out.append("  = path to the failing insn (branch decisions):")
            out.extend(f"      {p}" for p in self.path)
        if verbose and self.state:
            out.append(f"  = state before insn {self.slot}: {self.state}")
        return "\n".join(out)

    def to_json(self) -> dict:
        return {
            "severity": self.severity,
            "code": self.code,
            "message": self.message,
            "explain": self.explain,
            "insn": self.slot,
            "insn_text": self.insn_text,
            "regs": {f"R{k}": v for k, v in self.regs.items()},
            "state": self.state,
            "file": self.source.file if self.source else None,
            "line": self.source.line if self.source else None,
            "col": self.source.col if self.source else None,
            "source": self.source.text if self.source else None,
            "path": self.path,
        }

    def diagnostic(self, prog: str) -> Diagnostic:
        """As a :class:`Diagnostic` (span from line info) for the compiler's error path."""
        span = None
        if self.source:
            span = Span(self.source.file, self.source.line, max(1, self.source.col))
        regs = " ".join(f"R{r}={t}" for r, t in sorted(self.regs.items()))
        notes = [
            f"prog '{prog}' insn {self.slot}: {self.insn_text}" + (f" ; {regs}" if regs else "")
        ]
        return Diagnostic(
            self.severity, f"checker-{self.code}", self.message, span, [self.explain], notes
        )


@dataclass(slots=True)
class ProgramResult:
    """Outcome for one program: ``ok`` when no error (warnings allowed); ``insns_processed``
    counts instructions walked (the kernel's "processed N insns"); ``seconds`` wall time."""

    name: str
    section: str
    errors: list[CheckError] = field(default_factory=list)
    warnings: list[CheckError] = field(default_factory=list)
    insns_processed: int = 0
    states: int = 0
    seconds: float = 0.0
    insn_count: int = 0

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def unchecked(self) -> bool:
        """True when the analysis stopped at a kernel helper the checker does not model
        (the verdict is unknown: neither accepted nor rejected)."""
        return bool(self.errors) and all(e.code == UNMODELLED for e in self.errors)

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
            "errors": [e.to_json() for e in self.errors],
            "warnings": [w.to_json() for w in self.warnings],
            "insns": self.insn_count,
            "insns_processed": self.insns_processed,
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
