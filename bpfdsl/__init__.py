"""bpfdsl: a small language for eBPF networking programs, compiled to standard eBPF ELF objects.

Stages (each usable on its own): ``bpfdsl.compiler`` (source -> ELF bytes),
``bpfdsl.objfile`` (ELF -> CollectionSpec), ``bpfdsl.checker`` (static verifier-like
analysis), ``bpfdsl.loader`` (kernel: maps, programs, pins), ``bpfdsl.cli`` (command line).
"""

__version__ = "0.1.0"
