"""The judge's channel: framed messages over a Unix SOCK_SEQPACKET pair, tensors in shared arenas.

One message is one packet: a JSON header (bounded size) and at most one file descriptor. A header too big for
one packet (a socket's send buffer, ~200 KiB by default, bounds a SEQPACKET datagram: a 300 KiB candidate source
once failed with EMSGSIZE) travels in a memfd sent with a small packet that names its size, so a send never
blocks on a peer that does not read. Tensors never go in the header: each side of a `Link` writes what it sends
into its own arena, a memfd it maps read-write and the peer maps read-only (sealed against resizing and against
new writable mappings), sent once and reused while messages fit. The receiver validates every layout against the
arena (dtypes, shapes, aligned in-bounds ranges, a byte budget) and copies the tensors out at once, so nothing
the peer writes later reaches them. On a GPU both mappings are page-locked, so a gigabyte crosses by DMA. No
pickle anywhere: values are JSON, tensors are raw bytes described by dtype and shape.

Used by both sides of every referee conversation (orchestrator <-> judge: JSON and handed-on sockets only;
judge <-> candidate: a `Link`); stdlib + torch.
"""

from __future__ import annotations

import ctypes
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

MAX_HEADER = 32 << 20  # bytes of JSON in one message: two MAX_SOURCE-character sources, JSON-escaped (\uXXXX)
INLINE = 1 << 16  # a header up to this size travels in the packet; a larger one in a memfd sent with it
SPILL_OP = "_spilled"  # the packet that carries a large header's memfd (first descriptor) and its size
MAX_TENSORS = 4096
MAX_NAMES = 4096  # kernel names in a device trace (a whole model launches hundreds of distinct kernels)
MAX_DIM = 1 << 40  # elements in one dimension, and in one tensor
ALIGN = 64
POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # fault a message's pages in at once, not one by one
ARENA_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW
F_SEAL_FUTURE_WRITE = getattr(fcntl, "F_SEAL_FUTURE_WRITE", 0x0010)
ARENA_ROUND = 1 << 20  # arenas grow in whole MiB
HOST_REGISTER_READ_ONLY = 0x08  # CU_MEMHOSTREGISTER_READ_ONLY: the peer's arena is mapped read-only here
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


def send(sock: socket.socket, header: dict[str, Any], fds: Sequence[int] = ()) -> None:
    """Send one message: a JSON header (tensors travel in a `Link`'s arena) and the descriptors `fds`."""
    data = json.dumps(header).encode()
    if len(data) > MAX_HEADER:
        raise ChannelError(f"message header of {len(data)} bytes is over {MAX_HEADER}")
    spill = None
    if len(data) > INLINE:
        spill = os.memfd_create("kernelsmith-header", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        os.write(spill, data)  # a fresh memfd takes the whole write (at most MAX_HEADER bytes)
        fcntl.fcntl(spill, fcntl.F_ADD_SEALS, ARENA_SEALS | fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SEAL)
        data, fds = json.dumps({"op": SPILL_OP, "nbytes": len(data)}).encode(), [spill, *fds]
    try:
        socket.send_fds(sock, [data], list(fds)) if fds else sock.sendall(data)
    except (BrokenPipeError, ConnectionResetError) as exc:
        raise PeerGone(str(exc)) from exc
    finally:
        if spill is not None:
            os.close(spill)


class Message(dict):
    """A received header. `.values(device)` materialises its values from the sender's arena (a `Link`'s)."""

    fd: int | None = None  # a descriptor that came with it (a socket handed on, a new arena)
    arena: _Inbound | None = None

    def values(self, device: str | torch.device = "cpu", max_bytes: int | None = None) -> list[Any]:
        layout = self.get("tensors", [])
        spec = self.get("values", [])
        if not isinstance(layout, list) or not isinstance(spec, list) or len(layout) > MAX_TENSORS:
            raise ChannelError("malformed tensor layout")
        if layout and self.arena is None:
            raise ChannelError("message describes tensors but no shared memory came with the link")
        tensors = self.arena.read(layout, device, max_bytes) if layout else []  # type: ignore[union-attr]
        return [_decode_value(s, tensors) for s in spec]

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _places(layout: list[Any], size: int) -> list[tuple[torch.dtype, list[int], int, int]]:
    """Validate a tensor layout against memory of `size` bytes: dtypes, shapes, aligned in-bounds ranges."""
    places = []
    for place in layout:
        if not isinstance(place, dict):
            raise ChannelError("malformed tensor layout")
        dtype, shape = DTYPES.get(place.get("dtype")), place.get("shape")
        offset, nbytes = place.get("offset"), place.get("nbytes")
        if dtype is None:
            raise ChannelError(f"tensor dtype {place.get('dtype')!r} is not allowed")
        if (not isinstance(shape, list) or len(shape) > 16
                or not all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s <= MAX_DIM for s in shape)):
            raise ChannelError("malformed tensor shape")
        count = math.prod(shape)
        if count > MAX_DIM:
            raise ChannelError("tensor shape too large")
        if (not isinstance(offset, int) or not isinstance(nbytes, int) or offset < 0 or offset % ALIGN
                or nbytes != count * torch.empty((), dtype=dtype).element_size() or offset + nbytes > size):
            raise ChannelError("tensor layout does not match its memory")
        places.append((dtype, shape, offset, nbytes))
    return places


def _layout(tensors: list[torch.Tensor]) -> tuple[list[dict[str, Any]], int]:
    layout, offset = [], 0
    for t in tensors:
        nbytes = t.numel() * t.element_size()
        layout.append({"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape), "offset": offset,
                       "nbytes": nbytes})
        offset += -(-nbytes // ALIGN) * ALIGN
    return layout, offset


_DRIVER: Any = None


def _driver() -> Any:
    """libcuda through ctypes (the driver API keeps no "last error" that a failed call could leave behind for
    torch's next kernel-launch check to trip over, unlike the runtime's cudaHostRegister); None without one."""
    global _DRIVER
    if _DRIVER is None:
        try:
            _DRIVER = ctypes.CDLL("libcuda.so.1")
        except OSError:
            _DRIVER = False
    return _DRIVER or None


def _pin(mm: mmap.mmap, readonly: bool) -> int:
    """Page-lock a mapping for the device (copies to and from it then run by DMA at full speed, not through a
    staging buffer); its address, or 0 where that is impossible (no CUDA context here, a driver refusal)."""
    cu = _driver()
    if cu is None or not torch.cuda.is_available() or not torch.cuda.is_initialized() or len(mm) == 0:
        return 0
    ctx = ctypes.c_void_p()
    if cu.cuCtxGetCurrent(ctypes.byref(ctx)) != 0 or not ctx.value:
        return 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        ptr = torch.frombuffer(mm, dtype=torch.uint8, count=1).data_ptr()
    flags = HOST_REGISTER_READ_ONLY if readonly else 0
    rc = cu.cuMemHostRegister_v2(ctypes.c_void_p(ptr), ctypes.c_size_t(len(mm)), ctypes.c_uint(flags))
    return ptr if rc == 0 else 0


def _unpin(ptr: int) -> None:
    cu = _driver()
    if ptr and cu is not None:
        cu.cuMemHostUnregister(ctypes.c_void_p(ptr))


class _Outbound:
    """The sender's arena: one memfd, mapped read-write here and read-only by the peer, reused by every
    message that fits (a GPU-sized tensor is written into already-faulted, page-locked memory), replaced by a
    larger one when one does not. Sealed against resizing (the peer's mapping can never SIGBUS) and against
    new writable mappings, so the peer can read it and nothing else."""

    def __init__(self, size: int, pin: bool):
        self.fd = os.memfd_create("kernelsmith-arena", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        self.size = size
        self.mm: mmap.mmap | None = None
        self.pinned = 0
        try:
            os.ftruncate(self.fd, size)
            self.mm = mmap.mmap(self.fd, size, flags=mmap.MAP_SHARED | POPULATE)
            fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
            try:  # Linux >= 5.1: no writable mapping can be made of it from now on (ours stays)
                fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, F_SEAL_FUTURE_WRITE)
            except OSError:
                pass
            fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SEAL)
            self.pinned = _pin(self.mm, readonly=False) if pin else 0
        except BaseException:
            self.close()
            raise

    def write(self, tensors: list[torch.Tensor], layout: list[dict[str, Any]]) -> None:
        assert self.mm is not None
        for t, place in zip(tensors, layout):
            if place["nbytes"]:
                dst = torch.frombuffer(self.mm, dtype=torch.uint8, count=place["nbytes"], offset=place["offset"])
                dst.copy_(t.detach().contiguous().reshape(-1).view(torch.uint8))
                del dst

    def close(self) -> None:
        _unpin(self.pinned)
        self.pinned = 0
        if self.mm is not None:
            self.mm.close()
            self.mm = None
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None  # type: ignore[assignment]


class _Inbound:
    """The peer's arena as this side sees it: validated (a memfd, sealed against resizing), mapped read-only,
    and page-locked only up to the size this side expects (a hostile peer's sparse terabyte is never faulted in:
    only the ranges a message's layout names, within `max_bytes`, are read)."""

    def __init__(self, fd: int, pin: bool):
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ChannelError("tensor memory is not a memfd")
        try:
            seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
        except OSError as exc:
            raise ChannelError("tensor memory cannot be sealed (not a memfd)") from exc
        if seals & ARENA_SEALS != ARENA_SEALS:
            raise ChannelError("tensor memory is not sealed against resizing")
        self.size = st.st_size
        try:
            self.mm = mmap.mmap(fd, self.size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ) if self.size else None
        except (OSError, ValueError, OverflowError) as exc:  # a write-only descriptor, an absurd size
            raise ChannelError(f"tensor memory cannot be mapped: {exc}") from None
        self.pinned = 0
        self.pin_tried = not pin

    def read(self, layout: list[Any], device: str | torch.device, max_bytes: int | None) -> list[torch.Tensor]:
        """Copies of the tensors `layout` names: what the peer writes later never reaches them."""
        places = _places(layout, self.size)
        total = sum(p[3] for p in places)
        if max_bytes is not None and total > max_bytes:
            raise ChannelError(f"message carries {total} bytes of tensors, more than the {max_bytes} expected")
        on_gpu = torch.device(device).type == "cuda"
        if on_gpu and not self.pin_tried and self.mm is not None and (
                max_bytes is None or self.size <= max_bytes + ARENA_ROUND):
            self.pin_tried = True
            self.pinned = _pin(self.mm, readonly=True)
        out = []
        for dtype, shape, offset, nbytes in places:
            if nbytes == 0:
                out.append(torch.empty(shape, dtype=dtype, device=device))
                continue
            with warnings.catch_warnings():  # read-only on purpose: the bytes are copied out at once
                warnings.simplefilter("ignore", UserWarning)
                src = torch.frombuffer(self.mm, dtype=torch.uint8, count=nbytes, offset=offset)
            out.append(src.view(dtype).reshape(shape).to(device, copy=True))
            del src
        return out

    def close(self) -> None:
        _unpin(self.pinned)
        self.pinned = 0
        if self.mm is not None:
            try:
                self.mm.close()
            except BufferError:  # a tensor still views it: the mapping goes with the last view
                pass
            self.mm = None


class Link:
    """One end of the judge <-> candidate conversation. Tensors cross in the sender's arena (`_Outbound`), sent
    once and reused while it fits: no file, no pickle, no per-message allocation. Messages are strictly one
    request, one answer, so a sender overwrites its arena only after the peer has answered (and so has copied
    what it needed); the judge sends nothing into it that the candidate may not see."""

    def __init__(self, sock: socket.socket, pin: bool = False):
        self.sock, self.pin = sock, pin and _driver() is not None  # loaded now: before any candidate code runs
        self._out: _Outbound | None = None
        self._in: _Inbound | None = None

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, header: dict[str, Any], values: Sequence[Any] | None = None) -> None:
        if values is None:
            return send(self.sock, header)
        spec, tensors = encode(values)
        header = {**header, "values": spec}
        fds: list[int] = []
        if tensors:
            layout, size = _layout(tensors)
            header["tensors"] = layout
            if self._out is None or self._out.size < size:
                if self._out is not None:
                    self._out.close()
                    self._out = None
                self._out = _Outbound(-(-max(size, 1) // ARENA_ROUND) * ARENA_ROUND, self.pin)
                fds.append(self._out.fd)
                header["arena"] = True
            self._out.write(tensors, layout)
        send(self.sock, header, fds)

    def pending(self) -> bool:
        """A message is waiting that nobody asked for yet (the protocol is one request, one answer)."""
        try:
            return bool(self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return False

    def recv(self, timeout: float | None = None) -> Message:
        msg = recv(self.sock, timeout)
        if msg.fd is not None and msg.get("arena") is not True:
            msg.close()  # the only descriptor a peer may send is its arena
        if msg.get("arena") is True and msg.fd is not None:
            fd, msg.fd = msg.fd, None
            try:
                inbound = _Inbound(fd, self.pin)
            finally:
                os.close(fd)
            if self._in is not None:
                self._in.close()
            self._in = inbound
        msg.arena = self._in
        return msg

    def close(self) -> None:
        for arena in (self._out, self._in):
            if arena is not None:
                arena.close()
        self._out = self._in = None
        self.sock.close()


def _unspill(nbytes: Any, fd: int | None) -> bytes:
    """A large header from the memfd `fd` that came with its packet: a regular file (never a pipe or socket a
    read could block on) of exactly the size the packet names, read once, so later writes cannot reach it."""
    if fd is None:
        raise ChannelError("a spilled header came without its memory")
    if not isinstance(nbytes, int) or isinstance(nbytes, bool) or not INLINE < nbytes <= MAX_HEADER:
        raise ChannelError("oversized message")
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        raise ChannelError("a spilled header's memory is not a file")
    data = os.pread(fd, nbytes, 0)
    if len(data) != nbytes:
        raise ChannelError("a spilled header is shorter than its packet says")
    return data


def _parse(data: bytes) -> dict[str, Any]:
    try:
        header = json.loads(data)
    except Exception as exc:  # noqa: BLE001 - a ValueError, or a RecursionError for deeply nested input
        raise ChannelError("message is not JSON") from exc
    if not isinstance(header, dict) or not isinstance(header.get("op"), str):
        raise ChannelError("message has no op")
    return header


def recv(sock: socket.socket, timeout: float | None = None) -> Message:
    """One message; `PeerGone` at end of stream, `TimeoutError` past `timeout`, `ChannelError` if malformed."""
    sock.settimeout(timeout)
    try:
        data, fds, flags, _ = socket.recv_fds(sock, INLINE + 1, 4)
    except (ConnectionResetError, BrokenPipeError) as exc:
        raise PeerGone(str(exc)) from exc
    except TimeoutError as exc:
        raise TimeoutError("no message in time") from exc
    if not data and not fds:
        raise PeerGone("peer closed the channel")
    try:
        if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) or len(data) > INLINE or len(fds) > 2:
            raise ChannelError("oversized message")
        header = _parse(data)
        if header["op"] == SPILL_OP:
            spill = fds.pop(0) if fds else None
            try:
                header = _parse(_unspill(header.get("nbytes"), spill))
            finally:
                if spill is not None:
                    os.close(spill)
        if len(fds) > 1:
            raise ChannelError("oversized message")
    except ChannelError:
        for fd in fds:
            os.close(fd)
        raise
    msg = Message(header)
    msg.fd = fds[0] if fds else None
    return msg
