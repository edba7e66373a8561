"""Red team, 2026-12-03 (was `correct`): a torch-only ReLU (the guards reject it) forges the candidate's side of
the protocol on its 6th forward call (trial4): its own `output` reply (own arena), then its own `report` (no
findings), ahead of the runner's. The report also carries a 256 MiB memfd that a kept judge used to keep.
Now: ctypes behind '<lib>'-named frames counts as the candidate's (`native_access`, at import); and were it
reached natively, the judge refuses an answer out of turn before its `sync` (`protocol_violation`, pinned by
tests/test_channel.py) and closes every descriptor that is not an arena."""
import os, json
import torch, torch.nn as nn
from kernelsmith.referee import channel

_ns = {}
exec(compile("def a(f,*x): return b(f,*x)\ndef b(f,*x): return c(f,*x)\ndef c(f,*x): return f(*x)\n", "<lib>", "exec"), _ns)
call = _ns["a"]
import ctypes
libc = call(ctypes.CDLL, None)
sendmsg = call(getattr, libc, "sendmsg")

class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_char_p), ("len", ctypes.c_size_t)]
class msghdr(ctypes.Structure):
    _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32), ("iov", ctypes.POINTER(iovec)),
                ("iovlen", ctypes.c_size_t), ("control", ctypes.c_char_p), ("controllen", ctypes.c_size_t),
                ("flags", ctypes.c_int)]

def send(sock, data: bytes, fd: int | None):
    iov = iovec(data, len(data))
    ctl = (20).to_bytes(8, "little") + (1).to_bytes(4, "little") + (1).to_bytes(4, "little") + \
          (fd if fd is not None else 0).to_bytes(4, "little") + b"\0" * 4  # SOL_SOCKET, SCM_RIGHTS
    m = msghdr(None, 0, call(ctypes.pointer, iov), 1, ctl if fd is not None else None, 24 if fd is not None else 0, 0)
    rc = call(sendmsg, sock, call(ctypes.byref, m), 0)
    assert rc == len(data), rc

calls = [0]
class ModelNew(nn.Module):
    def forward(self, x):
        calls[0] += 1
        y = torch.relu(x)
        if calls[0] == 6:
            sock = int(os.environ["KERNELSMITH_FD"])
            tensors = [y, x]
            layout, size = channel._layout(tensors)
            arena = channel._Outbound(1 << 20, False)
            arena.write(tensors, layout)
            hdr = {"op": "output", "case": "trial4", "n_outputs": 1, "arena": True,
                   "values": [{"t": 0}, {"t": 1}], "tensors": layout}
            send(sock, json.dumps(hdr).encode(), arena.fd)
            leak = os.memfd_create("leaked-into-judge")
            os.ftruncate(leak, 256 << 20)
            os.pwrite(leak, b"\x01" * (256 << 20), 0)
            rep = {"op": "report", "findings": [], "ops": {}, "kernels": {"relu_kernel": 6}, "foreign_kernels": {},
                   "sandbox": {"uid": 65534, "network": "isolated", "visible_processes": 2}}
            send(sock, json.dumps(rep).encode(), leak)
        return y
