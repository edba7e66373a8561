"""The judge's channel: framed messages over a Unix SOCK_SEQPACKET pair, tensors in sealed memfds.

One message is one packet: a JSON header (bounded size) and at most one file descriptor, a memfd that holds
every tensor of the message back to back. The sender seals the memfd (no shrink, grow or write) before it
sends it, and the receiver refuses one that is not sealed, not a regular file or smaller than the header says:
a hostile peer can neither truncate it under the receiver's mapping (SIGBUS) nor change the bytes after they
were checked. No pickle anywhere: values are JSON, tensors are raw bytes described by dtype and shape.

Used by both sides of every referee conversation (orchestrator ↔ judge, judge ↔ candidate); stdlib + torch.
"""

from __future__ import annotations

import fcntl
import json
import math
import mmap
import os
import socket
import stat
import warnings
from collections.abc import Sequence
from typing import Any

import torch

MAX_HEADER = 1 << 20  # bytes of JSON in one packet
MAX_TENSORS = 4096
ALIGN = 64
POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # fault a message's pages in at once, not one by one
SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128,
    torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool,
)}


class ChannelError(Exception):
    """The peer broke the protocol (a malformed, oversized or unexpected message): never its fault to hide."""


class PeerGone(ChannelError):
    """The peer closed its end (it exited or was killed)."""


def pair() -> tuple[socket.socket, socket.socket]:
    """A connected pair; each end is inherited by exactly one process (pass its fileno in `pass_fds`)."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    return a, b


def _encode_value(v: Any, tensors: list[torch.Tensor]) -> Any:
    if isinstance(v, torch.Tensor):
        tensors.append(v)
        return {"t": len(tensors) - 1}
    if isinstance(v, torch.dtype):
        return {"dtype": str(v).removeprefix("torch.")}
    if isinstance(v, tuple):
        return {"tuple": [_encode_value(x, tensors) for x in v]}
    if isinstance(v, list):
        return {"list": [_encode_value(x, tensors) for x in v]}
    if isinstance(v, float) and not math.isfinite(v):
        return {"float": repr(v)}
    if v is None or isinstance(v, (bool, int, float, str)):
        return {"v": v}
    raise TypeError(f"cannot pass a {type(v).__name__} between referee processes (tensors, numbers, strings, "
                    "dtypes, tuples and lists only)")


def _decode_value(spec: Any, tensors: list[torch.Tensor]) -> Any:
    if not isinstance(spec, dict) or len(spec) != 1:
        raise ChannelError("malformed value")
    (kind, val), = spec.items()
    if kind == "t":
        if not isinstance(val, int) or not 0 <= val < len(tensors):
            raise ChannelError("value names a tensor that is not in the message")
        return tensors[val]
    if kind == "dtype":
        if val not in DTYPES:
            raise ChannelError(f"unknown dtype {val!r}")
        return DTYPES[val]
    if kind in ("tuple", "list"):
        if not isinstance(val, list):
            raise ChannelError("malformed sequence")
        items = [_decode_value(x, tensors) for x in val]
        return tuple(items) if kind == "tuple" else items
    if kind == "float":
        return float(val) if val in ("inf", "-inf", "nan") else _bad("malformed float")
    if kind == "v" and (val is None or isinstance(val, (bool, int, float, str))):
        return val
    raise ChannelError(f"malformed value kind {kind!r}")


def _bad(message: str) -> Any:
    raise ChannelError(message)


def encode(values: Sequence[Any]) -> tuple[list[Any], list[torch.Tensor]]:
    """Values (an input list, an output list) → their JSON description and the tensors it refers to."""
    tensors: list[torch.Tensor] = []
    return [_encode_value(v, tensors) for v in values], tensors


def _memfd(tensors: list[torch.Tensor]) -> tuple[int, list[dict[str, Any]]]:
    """Copy `tensors` (any device) into a new sealed memfd; returns it and each tensor's place in it."""
    layout, offset = [], 0
    for t in tensors:
        nbytes = t.numel() * t.element_size()
        layout.append({"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape), "offset": offset,
                       "nbytes": nbytes})
        offset += -(-nbytes // ALIGN) * ALIGN
    fd = os.memfd_create("kernelsmith-tensors", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, offset)
        if offset:
            with mmap.mmap(fd, offset, flags=mmap.MAP_SHARED | POPULATE) as mm:
                for t, place in zip(tensors, layout):
                    if place["nbytes"]:
                        dst = torch.frombuffer(mm, dtype=torch.uint8, count=place["nbytes"], offset=place["offset"])
                        dst.copy_(t.detach().contiguous().reshape(-1).view(torch.uint8))
                        del dst
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS | fcntl.F_SEAL_SEAL)
    except BaseException:
        os.close(fd)
        raise
    return fd, layout


def send_fd(sock: socket.socket, header: dict[str, Any], fd: int) -> None:
    """Send one message carrying a descriptor of ours (a socket handed on to another process)."""
    try:
        socket.send_fds(sock, [json.dumps(header).encode()], [fd])
    except (BrokenPipeError, ConnectionResetError) as exc:
        raise PeerGone(str(exc)) from exc


def send(sock: socket.socket, header: dict[str, Any], values: Sequence[Any] | None = None) -> None:
    """Send one message; `values` (a list of tensors and plain values) travel as `header["values"]`."""
    fds: list[int] = []
    if values is not None:
        spec, tensors = encode(values)
        header = {**header, "values": spec}
        if tensors:
            fd, layout = _memfd(tensors)
            fds.append(fd)
            header["tensors"] = layout
    data = json.dumps(header).encode()
    if len(data) > MAX_HEADER:
        raise ChannelError(f"message header of {len(data)} bytes is over {MAX_HEADER}")
    try:
        socket.send_fds(sock, [data], fds) if fds else sock.sendall(data)
    except (BrokenPipeError, ConnectionResetError) as exc:
        raise PeerGone(str(exc)) from exc
    finally:
        for fd in fds:
            os.close(fd)


class Message(dict):
    """A received header. `.values(device)` materialises its values; the memfd is closed by `.close()`."""

    fd: int | None = None

    def values(self, device: str | torch.device = "cpu", max_bytes: int | None = None) -> list[Any]:
        layout = self.get("tensors", [])
        spec = self.get("values", [])
        if not isinstance(layout, list) or not isinstance(spec, list) or len(layout) > MAX_TENSORS:
            raise ChannelError("malformed tensor layout")
        tensors = _materialise(self.fd, layout, device, max_bytes) if layout else []
        return [_decode_value(s, tensors) for s in spec]

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _materialise(fd: int | None, layout: list[Any], device: str | torch.device,
                 max_bytes: int | None) -> list[torch.Tensor]:
    if fd is None:
        raise ChannelError("message describes tensors but carries no memory")
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise ChannelError("tensor memory is not a memfd")
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
    except OSError as exc:
        raise ChannelError("tensor memory cannot be sealed (not a memfd)") from exc
    if seals & SEALS != SEALS:
        raise ChannelError("tensor memory is not sealed against writes and resizing")
    total = 0
    places = []
    for place in layout:
        if not isinstance(place, dict):
            raise ChannelError("malformed tensor layout")
        dtype, shape = DTYPES.get(place.get("dtype")), place.get("shape")
        offset, nbytes = place.get("offset"), place.get("nbytes")
        if dtype is None:
            raise ChannelError(f"tensor dtype {place.get('dtype')!r} is not allowed")
        if (not isinstance(shape, list) or len(shape) > 16
                or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape)):
            raise ChannelError("malformed tensor shape")
        count = math.prod(shape)
        if (not isinstance(offset, int) or not isinstance(nbytes, int) or offset < 0 or offset % ALIGN
                or nbytes != count * torch.empty((), dtype=dtype).element_size() or offset + nbytes > st.st_size):
            raise ChannelError("tensor layout does not match its memory")
        total += nbytes
        places.append((dtype, shape, offset, nbytes))
    if max_bytes is not None and total > max_bytes:
        raise ChannelError(f"message carries {total} bytes of tensors, more than the {max_bytes} expected")
    out = []
    with (mmap.mmap(fd, st.st_size, flags=mmap.MAP_SHARED | POPULATE, prot=mmap.PROT_READ) if st.st_size
          else _Empty()) as mm:
        for dtype, shape, offset, nbytes in places:
            if nbytes == 0:
                out.append(torch.empty(shape, dtype=dtype, device=device))
                continue
            with warnings.catch_warnings():  # read-only on purpose: the bytes are copied out at once
                warnings.simplefilter("ignore", UserWarning)
                src = torch.frombuffer(mm, dtype=torch.uint8, count=nbytes, offset=offset)
            out.append(src.view(dtype).reshape(shape).to(device, copy=True))
            del src
    return out


class _Empty:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def recv(sock: socket.socket, timeout: float | None = None) -> Message:
    """One message; `PeerGone` at end of stream, `TimeoutError` past `timeout`, `ChannelError` if malformed."""
    sock.settimeout(timeout)
    try:
        data, fds, flags, _ = socket.recv_fds(sock, MAX_HEADER + 1, 4)
    except (ConnectionResetError, BrokenPipeError) as exc:
        raise PeerGone(str(exc)) from exc
    except TimeoutError as exc:
        raise TimeoutError("no message in time") from exc
    if not data and not fds:
        raise PeerGone("peer closed the channel")
    if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) or len(data) > MAX_HEADER or len(fds) > 1:
        for fd in fds:
            os.close(fd)
        raise ChannelError("oversized message")
    try:
        header = json.loads(data)
    except ValueError as exc:
        for fd in fds:
            os.close(fd)
        raise ChannelError("message is not JSON") from exc
    if not isinstance(header, dict) or not isinstance(header.get("op"), str):
        for fd in fds:
            os.close(fd)
        raise ChannelError("message has no op")
    msg = Message(header)
    msg.fd = fds[0] if fds else None
    return msg
