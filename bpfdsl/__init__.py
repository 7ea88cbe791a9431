"""bpfdsl: a small language for eBPF networking programs, compiled to standard eBPF ELF objects.

Stages (each usable on its own): ``bpfdsl.compiler`` (source -> ELF bytes),
``bpfdsl.obj.collection`` (ELF -> CollectionSpec), ``bpfdsl.checker`` (static verifier-like
analysis), ``bpfdsl.runtime.loader`` (kernel: maps, programs, pins), ``bpfdsl.cli`` (command line).
"""

__version__ = "0.1.0"
