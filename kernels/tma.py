"""Hopper's tensor memory accelerator (TMA) from Triton: when a tensor can use it, and its descriptors.

A TMA descriptor tells the copy engine a tensor's base, shape and strides once; a program then asks for a
whole tile by its coordinates, the engine moves it into shared memory asynchronously, fills rows and columns
past the edge with zeros on loads and drops them on stores (so no masks), and the warps stay free for the
tensor cores. The engine needs a 16-byte-aligned base, unit stride along the last dimension and every other
stride a multiple of 16 bytes; tensors that break one of these go through plain pointer loads instead.
"""

from __future__ import annotations

import functools

import torch

from autograder import runtime


def tma_ready(t: torch.Tensor) -> bool:
    """True when t's layout is one the copy engine can read: row-major rows at 16-byte-aligned addresses."""
    return (t.dim() >= 1 and t.stride(-1) == 1 and t.data_ptr() % 16 == 0
            and all(s * t.element_size() % 16 == 0 for s in t.stride()[:-1]))


def hopper_or_newer(device: torch.device) -> bool:
    """A GPU with the copy engine and warpgroup matrix instructions (compute capability 9.0 or later)."""
    return (runtime.has_gpu() and runtime.tma_allowed() and torch.device(device).type == "cuda"
            and torch.cuda.get_device_capability(device)[0] >= 9)


@functools.cache
def sm_count(device_index: int) -> int:
    """Multiprocessors on the GPU: a persistent kernel launches one program per multiprocessor."""
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def descriptor(t: torch.Tensor, block: list[int]):
    """A host-side TMA descriptor of t, moving tiles of shape `block`."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    return TensorDescriptor.from_tensor(t, block)


def weight_descriptor(w: torch.Tensor, block_k: int, block_n: int):
    """(descriptor, transposed) for a (K, N) weight in either layout: row-major (K, N), or the transpose of a
    row-major (N, K) matrix such as nn.Linear.weight.t(), whose (N, K) tiles are transposed in registers.
    (None, False) when neither layout suits the copy engine."""
    if tma_ready(w):
        return descriptor(w, [block_k, block_n]), False
    if tma_ready(w.t()):
        return descriptor(w.t(), [block_n, block_k]), True
    return None, False


def tma_path_applies(x: torch.Tensor, *weights: torch.Tensor) -> bool:
    """Hopper, 16-bit operands, a prefill-sized M and layouts the copy engine reads (the weights in either
    orientation); otherwise the pointer kernels are the right tool."""
    n = weights[0].shape[-1]
    return (x.shape[0] > 256 and x.dtype in (torch.float16, torch.bfloat16) and hopper_or_newer(x.device)
            and tma_ready(x) and all(tma_ready(w) or tma_ready(w.t()) for w in weights)
            and n * x.element_size() % 16 == 0)


def persistent_programs(n_tiles: int, device) -> int:
    """One program per multiprocessor (fewer when there are fewer tiles), each looping over tiles."""
    device = torch.device(device)
    return min(n_tiles, sm_count(device.index or 0) if device.type == "cuda" else 4)


_UNCOMPILABLE: set = set()  # (kernel, setting) pairs this Triton rejected


def first_that_compiles(kernel, settings: tuple, launch):
    """launch(setting) for the first of `settings` that this Triton compiles; a rejected one is skipped from
    then on. Warp specialization, for one, compiles on some Triton versions and not on others."""
    for i, cfg in enumerate(settings):
        key = (kernel.fn.__name__, tuple(sorted(cfg.items())))
        last = i == len(settings) - 1
        if key in _UNCOMPILABLE and not last:
            continue
        try:
            return launch(cfg)
        except Exception as exc:  # the compiler refused; wrong inputs and full memory are raised, not skipped
            if last or isinstance(exc, (torch.OutOfMemoryError, ValueError, TypeError)):
                raise
            _UNCOMPILABLE.add(key)
