"""The COMMANDS table: every command has its module and its help (no dead entries)."""

from __future__ import annotations

import pytest


def test_every_cli_command_has_its_module_and_help():
    from bpfdsl.cli import COMMANDS, main

    for cmd in COMMANDS:
        with pytest.raises(SystemExit) as e:
            main([cmd, "--help"])
        assert e.value.code == 0, cmd
