"""Is this GPU shared right now? Read through NVML (nvidia-ml-py): the other processes computing on the GPU this
process uses, and how busy the GPU is while this process waits.

Two gradings at once on one GPU halve each other's measured bandwidth, and a peak measured while a neighbour
runs is low too. The performance criterion times the peak in turns with the kernel, which keeps ratios when the
clocks change; a neighbour whose load comes and goes between turns still skews them. So before timing, the
grader waits for the GPU to be free, and after it, where the GPU was busy with other work (or, where NVML cannot
tell, the peak fell well below what this GPU reached when profiled), it measures again; when it cannot get a clean
measurement it says so instead of grading (grade_perf.measure).
"""

from __future__ import annotations

import dataclasses
import os
import time

BUSY_UTILIZATION = 10  # percent of the last sample period with a kernel running, this process idle
WAIT_S = 20.0  # how long to wait for a shared GPU to come free, per attempt
POLL_S = 0.5
SETTLE_S = 0.5  # idle before reading: NVML's utilization sample (1/6 to 1 s) then mostly covers others' work


@dataclasses.dataclass
class Sharing:
    """What NVML shows of the GPU's other users; readable=False where NVML cannot tell (no driver, no library)."""

    readable: bool
    others: list[str] = dataclasses.field(default_factory=list)  # "pid 1234 (2.1 GiB)"
    utilization: int | None = None  # percent, sampled while this process was idle

    @property
    def shared(self) -> bool:
        # Busy, not merely occupied: an idle Jupyter kernel holding a CUDA context disturbs no timing.
        return self.utilization is not None and self.utilization > BUSY_UTILIZATION

    def describe(self) -> str:
        if not self.readable:
            return "NVML cannot tell"
        parts = []
        if self.others:
            parts.append(f"{len(self.others)} other process(es) on this GPU: {', '.join(self.others[:4])}")
        if self.utilization is not None and self.utilization > BUSY_UTILIZATION:
            parts.append(f"the GPU {self.utilization}% busy while the grader waited")
        return "; ".join(parts) or "no other process, idle"


def _handle(pynvml):
    """The NVML handle of the GPU torch uses here (by UUID; CUDA's index and NVML's may differ)."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    uuid = str(getattr(props, "uuid", "") or "")
    if uuid:
        return pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}")
    bus = f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
    return pynvml.nvmlDeviceGetHandleByPciBusId(bus)


def _ours() -> set[int]:
    """This process and its ancestors, as this pid namespace numbers them."""
    pids, pid = set(), os.getpid()
    while pid > 1 and len(pids) < 64:
        pids.add(pid)
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return pids


def read(nvml=None) -> Sharing:
    """The GPU's other users now. nvml: the pynvml module (tests pass a stand-in)."""
    try:
        pynvml = nvml
        if pynvml is None:
            import pynvml
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001  no driver or no nvidia-ml-py: nothing can be said
        return Sharing(readable=False)
    try:
        handle = _handle(pynvml)
        listed = list(pynvml.nvmlDeviceGetComputeProcesses(handle))
        ours = _ours()
        others = []
        # This process computes on the GPU, so NVML lists it. Where none of the listed pids is ours, NVML numbers
        # processes as another pid namespace does (a container): the list cannot be told apart from this process,
        # and only the utilization is used.
        if any(p.pid in ours for p in listed):
            for p in listed:
                if p.pid not in ours:
                    used = getattr(p, "usedGpuMemory", None)
                    others.append(f"pid {p.pid}" + (f" ({used / 2**30:.1f} GiB)" if isinstance(used, int) else ""))
        utilization = int(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        return Sharing(True, others, utilization)
    except Exception:  # noqa: BLE001  a query this driver does not answer
        return Sharing(readable=False)
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def wait_until_free(wait_s: float = WAIT_S, reader=read, sleep=time.sleep) -> Sharing:
    """Sharing once the GPU is free, or as it still is after wait_s. Starts after a pause, so that the utilization
    sampled no longer counts this process's own last kernels."""
    sleep(SETTLE_S)
    deadline = time.monotonic() + wait_s
    state = reader()
    while state.shared and time.monotonic() < deadline:
        sleep(POLL_S)
        state = reader()
    return state
