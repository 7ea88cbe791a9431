"""Running the CLI without privileges, as a user who is not root would."""

from __future__ import annotations

import os
import sys
import tempfile


def as_nobody(argv: list[str]) -> tuple[int, str]:
    """Run the CLI in a forked child with uid/gid 65534 (modules imported beforehand:
    the interpreter's own tree may not be readable by nobody)."""
    import bpfdsl.cli.attach_cmds  # noqa: F401
    import bpfdsl.cli.load_cmds  # noqa: F401
    import bpfdsl.runtime.inventory  # noqa: F401
    import bpfdsl.runtime.pins  # noqa: F401
    from bpfdsl.cli import main

    with tempfile.TemporaryFile() as err:
        pid = os.fork()
        if pid == 0:  # child: never returns into pytest
            code = 99
            try:
                sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - the child exits below
                sys.stderr = open(os.dup(err.fileno()), "w")  # noqa: SIM115
                os.setgroups([])
                os.setresgid(65534, 65534, 65534)
                os.setresuid(65534, 65534, 65534)
                code = main(argv)
            finally:
                sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        err.seek(0)
        return os.waitstatus_to_exitcode(status), err.read().decode()
