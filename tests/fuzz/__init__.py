"""bpfdsl's own fuzzers (issue #13), kept in the repo with fixed seeds.

Imported as the package ``fuzz`` (pytest puts ``tests/`` on sys.path; scripts/fuzz.py does too).

Each generator module is importable on its own and exposes ``FUZZER`` (a
:class:`fuzz.harness.Fuzzer`): ``cases(seed, count)`` makes the inputs,
``run_case(payload)`` runs one in a sandboxed worker and says what happened.

- :mod:`.sources`: mutated ``progs/*.bpfd`` and docs examples through the compiler (and,
  as root, the kernel loader): success or a located diagnostic, nothing else.
- :mod:`.programs`: random valid XDP programs, compiled, checked, loaded, and run on both
  engines (BPF_PROG_TEST_RUN and the interpreter); verdicts, bytes and maps must agree.
- :mod:`.subprograms`: the same with noinline/global fns, bpf_loop callbacks, tail
  calls, ring buffer records and resizes between calls, at every ISA level.
- :mod:`.objects`: corrupted ELF objects (ours and clang's) through check, disasm, run
  and load: clean errors only, no fd or pin left.
- :mod:`.captures`: truncated/garbled pcap and pcapng files through ``bpfdsl run --pcap``.
- :mod:`.cli_misuse`: wrong command lines through the ``bpfdsl`` command: exit 1/2 (3
  without privileges) with a message, never a traceback.

``scripts/fuzz.py`` runs campaigns; ``tests/fuzz/test_campaigns.py`` runs bounded ones in CI.
"""
