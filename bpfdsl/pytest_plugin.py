"""pytest plugin of bpfdsl (entry point ``pytest11``): markers and fixtures for BPF tests.

``@pytest.mark.kernel`` marks a test that needs the bpf() syscall as root.  Where the kernel
is not usable the test skips with the reason; with ``BPFDSL_REQUIRE_KERNEL=1`` in the
environment (CI sets it) the skip becomes a failure, so a green run proves the kernel tests ran.
"""

from __future__ import annotations

import os

import pytest

REQUIRE_ENV = "BPFDSL_REQUIRE_KERNEL"


def kernel_unavailable_reason() -> str | None:
    """None when bpf() can create a map here; otherwise a one-line reason."""
    if not hasattr(os, "geteuid") or os.uname().sysname != "Linux":
        return "not Linux: the bpf() syscall is unavailable"
    if os.geteuid() != 0:
        return "not root: loading BPF programs needs CAP_BPF + CAP_NET_ADMIN (run as root)"
    try:
        from bpfdsl import syscall  # noqa: PLC0415  (lazy: the plugin loads in every pytest)
    except ImportError as e:  # pragma: no cover - only during early development
        return f"bpfdsl.syscall not importable: {e}"
    probe = getattr(syscall, "probe_bpf", None)
    if probe is None:
        return "bpfdsl.syscall.probe_bpf missing"
    return probe()


def require_kernel() -> None:
    """Skip (or fail under BPFDSL_REQUIRE_KERNEL=1) when the kernel cannot be used."""
    reason = kernel_unavailable_reason()
    if reason is None:
        return
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{REQUIRE_ENV}=1 but the kernel is not usable: {reason}", pytrace=False)
    pytest.skip(f"kernel not available: {reason}")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "kernel: needs the bpf() syscall as root (skips elsewhere; "
        f"{REQUIRE_ENV}=1 turns the skip into a failure)",
    )


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("kernel") is not None:
        require_kernel()
