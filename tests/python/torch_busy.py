"""PyTorch's GPU kept busy for a given time, for the GPU tests (test_cuda.py,
test_torch_interop.py): torch.cuda._sleep spins on the GPU for a number of cycles, calibrated
once per process."""

from __future__ import annotations

_CYCLES_PER_MS: list = []


def cycles_per_ms() -> float:
    import torch

    if not _CYCLES_PER_MS:
        # The fastest of three, after a warm-up: an idle GPU runs at a low clock at first, and a
        # rate measured then made later busy work a third as long as asked (a fresh machine's
        # first run failed so).
        torch.cuda._sleep(50_000_000)
        rates = []
        for _ in range(3):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.cuda._sleep(10_000_000)
            end.record()
            end.synchronize()
            rates.append(10_000_000 / start.elapsed_time(end))
        _CYCLES_PER_MS.append(max(rates))
    return _CYCLES_PER_MS[0]


def torch_busy(ms: float, stream=None) -> None:
    """About `ms` milliseconds of PyTorch's work on `stream` (default: its current one)."""
    import torch

    cycles = int(ms * cycles_per_ms())
    if stream is None:
        torch.cuda._sleep(cycles)
    else:
        with torch.cuda.stream(stream):
            torch.cuda._sleep(cycles)
