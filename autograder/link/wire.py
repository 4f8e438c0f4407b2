"""The judge's messages: a JSON header and the raw bytes of tensors, over a Unix socket. Nothing is pickled,
so the judge never runs code the student's process sent it.

A message is an 8-byte big-endian length, the header (JSON), then the storage bytes of each tensor the header
lists under "tensors" (dtype, shape, stride, storage offset, storage size): a view (transposed, strided, offset)
arrives as the same view of a storage of the same size, so a kernel is handed exactly the layout the case asks
for. Tensors travel by value; on a GPU they are copied to the host and back (a CUDA IPC handle would not cross
the sandbox's namespaces, and on the CPU a shared memfd measured no faster than the copy)."""

from __future__ import annotations

import json
import socket
import struct

import torch

DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16, torch.int8,
    torch.uint8, torch.bool)}
MAX_HEADER = 16 << 20
MAX_TENSOR = 64 << 30


class WireError(ValueError):
    """A message that breaks the protocol (the other side is not the grader's, or it was cut off)."""


def _raw(t: torch.Tensor) -> torch.Tensor:
    """The whole storage of t as bytes, on the CPU."""
    return torch.empty(0, dtype=torch.uint8).set_(t.untyped_storage()) if t.device.type == "cpu" else \
        torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage()).cpu()


def send(sock: socket.socket, header: dict, tensors=()) -> None:
    """Send header and tensors (any device; they arrive where the receiver asks)."""
    described, payloads = [], []
    for t in tensors:
        if not isinstance(t, torch.Tensor) or str(t.dtype).removeprefix("torch.") not in DTYPES:
            raise WireError(f"cannot send {type(t).__name__} {getattr(t, 'dtype', '')}: plain tensors of "
                            f"{', '.join(DTYPES)} only")
        raw = _raw(t.detach())
        described.append({"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape),
                          "stride": list(t.stride()), "offset": t.storage_offset(), "nbytes": raw.numel(),
                          "device": t.device.type})
        payloads.append(raw)
    head = json.dumps(dict(header, tensors=described)).encode()
    sock.sendall(struct.pack(">Q", len(head)) + head)
    for raw in payloads:
        if raw.numel():
            sock.sendall(memoryview(raw.numpy()))


def _exact(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            raise ConnectionError("the other side of the judge's connection closed it")
        got += k
    return buf


def recv(sock: socket.socket, device: str = "cpu") -> tuple[dict, list[torch.Tensor]]:
    """(header, tensors) of the next message, the tensors on device, each the view it was sent as."""
    (n,) = struct.unpack(">Q", _exact(sock, 8))
    if n > MAX_HEADER:
        raise WireError(f"a message header of {n} bytes (at most {MAX_HEADER})")
    try:
        header = json.loads(bytes(_exact(sock, n)))
        described = header.pop("tensors", [])
    except (ValueError, AttributeError) as exc:
        raise WireError(f"a message header that is not a JSON object: {exc}") from None
    return header, [_tensor(sock, d, device) for d in described]


def _tensor(sock: socket.socket, d: dict, device: str) -> torch.Tensor:
    try:
        dtype, nbytes, shape, stride, offset = DTYPES[d["dtype"]], int(d["nbytes"]), d["shape"], d["stride"], d["offset"]
        itemsize = torch.empty(0, dtype=dtype).element_size()
        if not 0 <= nbytes <= MAX_TENSOR or nbytes % itemsize or len(shape) != len(stride) or offset < 0:
            raise ValueError("inconsistent sizes")
        if any(s < 0 for s in shape) or any(s < 0 for s in stride):
            raise ValueError("negative sizes")
        last = offset + sum((n - 1) * s for n, s in zip(shape, stride)) if all(shape) else -1
        if last >= nbytes // itemsize:
            raise ValueError("a view past the end of its storage")
    except (KeyError, TypeError, ValueError) as exc:
        raise WireError(f"a tensor described as {d!r}: {exc}") from None
    raw = torch.frombuffer(_exact(sock, nbytes), dtype=torch.uint8) if nbytes else torch.empty(0, dtype=torch.uint8)
    if device != "cpu":
        raw = raw.to(device)
    return torch.empty(0, dtype=dtype, device=raw.device).set_(raw.untyped_storage(), offset, shape, stride)
