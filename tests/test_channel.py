"""The judge's channel as a hostile peer meets it: tensors cross in a reused, sealed arena; every layout, size
and descriptor a peer sends is checked before a byte is read."""

from __future__ import annotations

import fcntl
import json
import mmap
import os
import socket
from typing import Any

import pytest
import torch

from kernelsmith.referee import channel


@pytest.fixture
def links():
    a, b = channel.pair()
    left, right = channel.Link(a), channel.Link(b)
    yield left, right
    left.close()
    right.close()


def _arena_fd(msg_link: channel.Link) -> int:
    return msg_link._out.fd  # type: ignore[union-attr]


def test_values_round_trip_and_are_copies(links):
    left, right = links
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    left.send({"op": "run"}, [x, 3, "s", torch.float16, (1.5, float("nan")), torch.zeros(0, dtype=torch.int64)])
    msg = right.recv(timeout=5)
    got = msg.values("cpu")
    assert torch.equal(got[0], x) and got[1:4] == [3, "s", torch.float16]
    assert got[4][0] == 1.5 and got[4][1] != got[4][1] and got[5].shape == (0,)
    left.send({"op": "run"}, [torch.full((3, 4), 7.0)])  # the sender reuses its arena ...
    assert torch.equal(got[0], x)  # ... and what the receiver got before is its own copy
    assert torch.equal(right.recv(timeout=5).values("cpu")[0], torch.full((3, 4), 7.0))


def test_arena_is_reused_while_it_fits_and_replaced_when_it_does_not(links):
    left, right = links
    left.send({"op": "a"}, [torch.ones(10)])
    first = _arena_fd(left)
    assert right.recv(timeout=5).values()[0].sum() == 10
    left.send({"op": "b"}, [torch.ones(1000)])
    assert _arena_fd(left) == first  # 1 MiB holds both
    assert right.recv(timeout=5).values()[0].sum() == 1000
    big = torch.ones(600_000)  # 2.4 MB: a new arena, sent with this message
    left.send({"op": "c"}, [big])
    assert left._out.size >= big.numel() * 4  # type: ignore[union-attr]
    assert right.recv(timeout=5).values()[0].sum() == big.numel()
    left.send({"op": "d"}, [torch.full((4,), 2.0)])  # and the receiver follows to the new one
    assert right.recv(timeout=5).values()[0].tolist() == [2.0] * 4


def test_the_peer_cannot_write_or_resize_the_senders_arena(links):
    left, right = links
    left.send({"op": "a"}, [torch.ones(4)])
    right.recv(timeout=5).values()
    fd = right._in  # the receiver's view: mapped read-only
    assert fd is not None
    seals = fcntl.fcntl(_arena_fd(left), fcntl.F_GET_SEALS)
    assert seals & fcntl.F_SEAL_SHRINK and seals & fcntl.F_SEAL_GROW and seals & fcntl.F_SEAL_SEAL
    path = f"/proc/self/fd/{_arena_fd(left)}"  # what a peer holding the descriptor could try
    with pytest.raises(OSError):
        os.truncate(path, 0)
    if seals & channel.F_SEAL_FUTURE_WRITE:
        dup = os.open(path, os.O_RDWR)
        try:
            with pytest.raises(PermissionError):
                mmap.mmap(dup, 4096, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
            with pytest.raises(PermissionError):
                os.write(dup, b"x")
        finally:
            os.close(dup)


def _raw(sock: socket.socket, header: dict, fd: int | None = None) -> None:
    data = json.dumps(header).encode()
    socket.send_fds(sock, [data], [fd]) if fd is not None else sock.sendall(data)


def _memfd(size: int, seals: int) -> int:
    fd = os.memfd_create("hostile", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    if seals:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    return fd


def _layout(offset=0, nbytes=16, shape=(4,), dtype="float32"):
    return [{"dtype": dtype, "shape": list(shape), "offset": offset, "nbytes": nbytes}]


@pytest.mark.parametrize("case", ["unsealed", "not_memfd", "outside", "misaligned", "lying_size", "bad_dtype",
                                  "over_budget", "no_arena", "bad_value"])
def test_hostile_layouts_and_memory_are_refused(case):
    a, b = channel.pair()
    receiver = channel.Link(b)
    try:
        seals = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW
        fd = _memfd(4096, 0 if case == "unsealed" else seals)
        if case == "not_memfd":
            os.close(fd)
            fd = os.open("/dev/null", os.O_RDONLY)
        layout = {"outside": _layout(offset=4096 - 8), "misaligned": _layout(offset=4),
                  "lying_size": _layout(nbytes=8), "bad_dtype": _layout(dtype="object"),
                  "over_budget": _layout(shape=(1024,), nbytes=4096)}.get(case, _layout())
        values = [{"t": 5}] if case == "bad_value" else [{"t": 0}]
        header = {"op": "run", "values": values, "tensors": layout}
        if case == "no_arena":
            _raw(a, header)
        else:
            _raw(a, {**header, "arena": True}, fd)
        os.close(fd)
        with pytest.raises(channel.ChannelError):
            receiver.recv(timeout=5).values("cpu", max_bytes=1024)
    finally:
        a.close()
        receiver.close()


def test_a_sparse_huge_arena_is_never_faulted_in():
    """A peer's arena may be a terabyte of holes: the receiver maps it, reads only what a layout names within
    its budget, and pins (page-locks) nothing it did not expect."""
    a, b = channel.pair()
    receiver = channel.Link(b, pin=True)
    fd = _memfd(1 << 40, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
    try:
        _raw(a, {"op": "run", "values": [{"t": 0}], "tensors": _layout(), "arena": True}, fd)
        got = receiver.recv(timeout=5).values("cpu", max_bytes=1024)
        assert got[0].tolist() == [0.0] * 4
        assert receiver._in is not None and receiver._in.pinned == 0
    finally:
        os.close(fd)
        a.close()
        receiver.close()


def test_header_only_messages_and_a_closed_peer(links):
    left, right = links
    left.send({"op": "ready"})
    msg = right.recv(timeout=5)
    assert msg["op"] == "ready" and msg.values() == []
    left.sock.close()
    with pytest.raises(channel.PeerGone):
        right.recv(timeout=5)


def test_a_header_larger_than_a_packet_crosses_whole(links):
    """A DenseNet201 candidate's 300 KiB source once failed with EMSGSIZE (a SEQPACKET datagram is bounded by the
    socket's send buffer): a large header travels in a memfd, alongside the message's own descriptor."""
    left, right = links
    source = "x = 1\n" * 50_000 + "# é\n" * 150_000  # 300 KB, then 1 MB once non-ASCII is escaped
    left.send({"op": "config", "source": source}, [torch.ones(3)])  # the first send also hands over the arena
    msg = right.recv(timeout=5)
    assert msg["op"] == "config" and msg["source"] == source and msg.values()[0].tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(channel.ChannelError, match="over"):
        left.send({"op": "config", "source": "y" * channel.MAX_HEADER})


@pytest.mark.parametrize("case", ["no_fd", "pipe", "short", "huge", "not_json", "bool_size", "extra_fds"])
def test_hostile_spilled_headers_are_refused(case):
    """The spill packet names a size and brings a descriptor: a pipe (a read that would block), a short or
    absurd size, bad JSON and extra descriptors are protocol violations, and no descriptor is left open."""
    a, b = channel.pair()
    try:
        body = b"not json " * 10_000 if case == "not_json" else json.dumps({"op": "run", "pad": "z" * 70_000}).encode()
        fd = _memfd(0, 0)
        os.write(fd, body)
        nbytes = {"short": len(body) + 10, "huge": 1 << 30, "bool_size": True}.get(case, len(body))
        packet = json.dumps({"op": channel.SPILL_OP, "nbytes": nbytes}).encode()
        fds = {"no_fd": [], "extra_fds": [fd, fd, fd]}.get(case, [fd])
        if case == "pipe":
            r, w = os.pipe()
            fds = [r]
        socket.send_fds(a, [packet], fds) if fds else a.sendall(packet)
        before = len(os.listdir("/proc/self/fd"))
        why = {"no_fd": "without its memory", "pipe": "not a file", "short": "shorter", "not_json": "not JSON"}
        with pytest.raises(channel.ChannelError, match=why.get(case, "oversized")):
            channel.recv(b, timeout=5)
        assert len(os.listdir("/proc/self/fd")) <= before
    finally:
        a.close()
        b.close()


# --------------------------------------------------------------------------------------------------------
# The judge's side of the protocol, as native code in the candidate's process would attack it (red team,
# 2026-12-03: a forged answer and guard report sent ahead of the runner's were accepted).


@pytest.fixture
def judge_and_peer():
    """A judge (its side of the protocol only) and the candidate's end of its link."""
    from kernelsmith.referee.worker import Judge

    ctl_judge, ctl_orch = channel.pair()
    link_judge, link_cand = channel.pair()
    judge = Judge(ctl_judge, channel.Link(link_judge), {"device": "cpu"})
    cand = channel.Link(link_cand)
    yield judge, cand
    cand.close()
    judge.link.close()
    ctl_judge.close()
    ctl_orch.close()


def _answering(cand: channel.Link, *replies: dict) -> Any:
    """A thread that takes one request on `cand` and sends `replies`."""
    import threading

    def run() -> None:
        cand.recv(timeout=5)
        for r in replies:
            cand.send(r, [] if r["op"] == "output" else None)

    t = threading.Thread(target=run)
    t.start()
    return t


def test_a_message_queued_behind_an_answer_is_a_violation(judge_and_peer):
    from kernelsmith.referee.worker import CandidateFault

    judge, cand = judge_and_peer
    cand.send({"op": "report", "findings": []})
    cand.send({"op": "report", "findings": []})  # a second one, nobody asked for it
    with pytest.raises(CandidateFault) as info:
        judge.answer({"op": "report"}, expect="report")
    assert info.value.report["op"] == "violation" and "nobody asked" in info.value.report["message"]


def test_the_runners_late_answer_before_sync_is_a_violation(judge_and_peer):
    """The forged report was read as the answer; the real runner's answer to the previous request arrives
    later, before `synced`: the judge ends it as the candidate's violation."""
    from kernelsmith.referee.worker import CandidateFault

    judge, cand = judge_and_peer
    t = _answering(cand, {"op": "output", "case": "trial4", "n_outputs": 0})
    try:
        with pytest.raises(CandidateFault) as info:
            judge.sync()
        assert "answered 'output' to 'sync'" in info.value.report["message"]
    finally:
        t.join()


def test_an_honest_sync_passes(judge_and_peer):
    judge, cand = judge_and_peer
    t = _answering(cand, {"op": "synced"})
    try:
        judge.sync()
    finally:
        t.join()
