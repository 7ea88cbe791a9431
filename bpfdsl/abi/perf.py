"""perf_event_open(2) constants bpfdsl uses to read BPF_MAP_TYPE_PERF_EVENT_ARRAY output
(include/uapi/linux/perf_event.h).
"""

from __future__ import annotations

from typing import Final

PERF_TYPE_SOFTWARE: Final = 1
PERF_COUNT_SW_BPF_OUTPUT: Final = 10
PERF_SAMPLE_TIME: Final = 1 << 2
PERF_SAMPLE_RAW: Final = 1 << 10
PERF_RECORD_LOST: Final = 2
PERF_RECORD_SAMPLE: Final = 9
PERF_FLAG_FD_CLOEXEC: Final = 1 << 3
PERF_EVENT_IOC_ENABLE: Final = 0x2400  # _IO('$', 0)
PERF_EVENT_IOC_DISABLE: Final = 0x2401  # _IO('$', 1)
