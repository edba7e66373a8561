"""Hostile task code: at import it looks for secrets and tries to write outside its sandbox and to reach the
network, prints what it found (HOSTILE ...), then fails so the verdict carries the judge's log."""
import os
import socket
import sys

import torch
import torch.nn as nn

_found = [k for k in os.environ if "TOKEN" in k or "KEY" in k]
for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
    try:
        if b"KERNELSMITH_TEST_API_KEY" in open(f"/proc/{pid}/environ", "rb").read():
            _found.append(pid)
    except OSError:
        pass
print("HOSTILE env", _found, flush=True)
for target in (sys.argv[0] if False else "__MARKER__",):
    try:
        open(target, "w").write("escaped")
        print("HOSTILE wrote", target, flush=True)
    except OSError as exc:
        print("HOSTILE write refused", type(exc).__name__, flush=True)
try:
    socket.create_connection(("127.0.0.1", 22), timeout=1)
    print("HOSTILE network reachable", flush=True)
except OSError:
    print("HOSTILE network refused", flush=True)
print("HOSTILE processes", sorted(int(p) for p in os.listdir("/proc") if p.isdigit()), flush=True)
raise RuntimeError("hostile task gives up")


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(8, 300)]


def get_init_inputs():
    return []
