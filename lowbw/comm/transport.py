"""Point-to-point transports that the collective algorithms run on.

An algorithm is written once, per rank, against :class:`Transport` (post sends and receives, wait for
them); two transports carry the messages:

* :class:`DistTransport` — ``torch.distributed`` isend/irecv (gloo on CPU, NCCL on GPU; CUDA tensors on
  gloo are staged through host memory);
* :class:`ThreadTransport` — in-process mailboxes between threads (the ``sim`` backend's
  :class:`~lowbw.comm.thread.ThreadCollective`).

Because both run the *same* algorithm code, the results are bit-for-bit identical and the byte counts
are equal. Every wait has a timeout and a failure names the peer that was waited on.

Messages of size 0 are never posted: both sides know the sizes, skip them alike, and nothing can hang
on an empty payload (GRACE's gloo hang).
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict, deque
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import Tensor

from lowbw.comm.errors import CommError, GroupAbortedError, PeerFailedError, PeerTimeoutError
from lowbw.comm.meter import CallStats

__all__ = ["Handle", "Transport", "DistTransport", "ThreadTransport", "ThreadHub", "DEFAULT_TIMEOUT"]

DEFAULT_TIMEOUT = 300.0  # seconds per wait on one peer
_TAG_MOD = 1 << 20


class Handle:
    """One posted message. ``wait`` it through its transport."""

    __slots__ = ("kind", "peer", "tensor", "nbytes", "work", "done", "finish")

    def __init__(self, kind: str, peer: int, tensor: Tensor, work=None, done: bool = False, finish=None):
        self.kind = kind
        self.peer = peer
        self.tensor = tensor
        self.nbytes = tensor.numel() * tensor.element_size()
        self.work = work
        self.done = done
        self.finish = finish


class Transport:
    """Per-rank view: ``rank``, ``world_size``, post messages, wait with a timeout.

    ``lockstep`` is True where a send and a receive between the same two ranks must be posted together
    (NCCL: one stream per pair); algorithms then post matching send/recv pairs in one :meth:`post`.
    """

    rank: int
    world_size: int
    lockstep: bool = False

    def __init__(self, timeout: float | None, stats: list[CallStats] | None, context: str = "") -> None:
        self.timeout = DEFAULT_TIMEOUT if timeout is None else float(timeout)
        self.stats = stats or []
        self.context = context
        self._seq_send: dict[int, int] = defaultdict(int)
        self._seq_recv: dict[int, int] = defaultdict(int)

    # -- bookkeeping -------------------------------------------------------------------------------------
    def count(self, kind: str, peer: int, nbytes: int) -> None:
        """Record one message of ``nbytes`` to (``kind="send"``) or from (``"recv"``) ``peer`` on every meter."""
        for st in self.stats:
            if kind == "send":
                st.bytes_sent += nbytes
                st.msgs_sent += 1
                st.sent_to[peer] += nbytes
            else:
                st.bytes_recv += nbytes
                st.msgs_recv += 1
                st.recv_from[peer] += nbytes

    def _tag(self, kind: str, peer: int) -> int:
        seq = self._seq_send if kind == "send" else self._seq_recv
        t = seq[peer]
        seq[peer] = t + 1
        return t % _TAG_MOD

    def _check_peer(self, peer: int) -> None:
        if not 0 <= peer < self.world_size or peer == self.rank:
            raise ValueError(f"bad peer {peer} for rank {self.rank} of {self.world_size}")

    def describe_peer(self, peer: int) -> str:
        return f"rank {peer}"

    def _error(self, cls, h: Handle, why: str, detail: str = "") -> CommError:
        what = "sending" if h.kind == "send" else "receiving"
        ctx = f"lowbw.comm {self.context}: " if self.context else "lowbw.comm: "
        msg = f"{ctx}rank {self.rank} {why} {self.describe_peer(h.peer)} ({what} {h.nbytes} bytes)"
        if detail:
            msg += f": {detail}"
        return cls(msg, peer=h.peer, rank=self.rank)

    # -- API ---------------------------------------------------------------------------------------------
    def send(self, tensor: Tensor, peer: int) -> Handle:
        return self.post([("send", tensor, peer)])[0]

    def recv(self, tensor: Tensor, peer: int) -> Handle:
        return self.post([("recv", tensor, peer)])[0]

    def post(self, ops: list[tuple[str, Tensor, int]]) -> list[Handle]:
        """Post ("send"|"recv", contiguous tensor, peer) messages together; empty tensors are skipped."""
        handles: list[Handle] = []
        live: list[tuple[Handle, int]] = []
        for kind, t, peer in ops:
            if kind not in ("send", "recv"):
                raise ValueError(f"op kind must be 'send' or 'recv', not {kind!r}")
            self._check_peer(peer)
            h = Handle(kind, peer, t)
            handles.append(h)
            if t.numel() == 0:
                h.done = True
                continue
            if not t.is_contiguous():
                raise ValueError("lowbw.comm transports need contiguous tensors")
            self.count(kind, peer, h.nbytes)
            live.append((h, self._tag(kind, peer)))
        if live:
            self._post(live)
        return handles

    def wait(self, h: Handle) -> Tensor:
        if not h.done:
            self._wait(h)
            h.done = True
            if h.finish is not None:
                h.finish()
                h.finish = None
        return h.tensor

    def wait_all(self, hs) -> None:
        for h in hs:
            self.wait(h)

    # -- backend hooks -----------------------------------------------------------------------------------
    def _post(self, live: list[tuple[Handle, int]]) -> None:
        raise NotImplementedError

    def _wait(self, h: Handle) -> None:
        raise NotImplementedError


class DistTransport(Transport):
    """``torch.distributed`` point-to-point over ``group`` (ranks are group ranks)."""

    def __init__(self, group=None, timeout: float | None = None, stats=None, context: str = "") -> None:
        super().__init__(timeout, stats, context)
        self.dist = dist
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self.backend = str(dist.get_backend(group)).lower()
        self.lockstep = "nccl" in self.backend
        self._gloo = "gloo" in self.backend
        # the process group object itself: posting straight to it skips dist.isend's per-call argument
        # checks (~25 us of Python per message, on the critical path of every ring step; see _post)
        self._pg = group if group is not None else dist.group.WORLD

    def describe_peer(self, peer: int) -> str:
        if self.group is None or self.group is self.dist.group.WORLD:
            return f"rank {peer}"
        return f"rank {peer} (global rank {self.dist.get_global_rank(self.group, peer)})"

    def _stage(self, h: Handle) -> Tensor:
        """gloo moves host memory only: CUDA tensors travel through a host copy."""
        t = h.tensor
        if not (self._gloo and t.is_cuda):
            return t
        if h.kind == "send":
            return t.cpu()
        host = torch.empty(t.shape, dtype=t.dtype, device="cpu")
        h.finish = lambda: t.copy_(host)
        return host

    def _post(self, live) -> None:
        if len(live) > 1 and self.lockstep:
            self._post_batch(live)
            return
        # receives first: on gloo a pair that both post isend before irecv runs the two directions one
        # after the other, at half the full-duplex rate
        pg = self._pg
        for h, tag in sorted(live, key=lambda x: x[0].kind == "send"):
            buf = self._stage(h)
            try:
                if type(buf) is not torch.Tensor:  # tensor subclasses: torch's dispatch in dist.isend/irecv
                    fn = self.dist.isend if h.kind == "send" else self.dist.irecv
                    kw = {"group_dst": h.peer} if h.kind == "send" else {"group_src": h.peer}
                    h.work = fn(buf, group=self.group, tag=tag, **kw)
                    continue
                if buf.is_complex():  # NCCL has no complex types (dist.isend does the same)
                    buf = torch.view_as_real(buf)
                # what dist.isend/irecv call after their checks (peer = rank in this group, as there)
                h.work = pg.send([buf], h.peer, tag) if h.kind == "send" else pg.recv([buf], h.peer, tag)
            except Exception as e:  # posting to a broken connection fails at once
                raise self._post_error(h, e) from e

    def _post_batch(self, live) -> None:
        """NCCL: a step's sends and receives go out as one ``batch_isend_irecv`` (one group call)."""
        dist = self.dist
        p2p = []
        for h, tag in live:
            buf = self._stage(h)
            fn = dist.isend if h.kind == "send" else dist.irecv
            p2p.append(dist.P2POp(fn, buf, group=self.group, tag=tag, group_peer=h.peer))
        try:
            works = dist.batch_isend_irecv(p2p)
        except Exception as e:
            raise self._post_error(live[0][0], e, peers=sorted({h.peer for h, _ in live})) from e
        if len(works) == len(p2p):
            for (h, _), w in zip(live, works):
                h.work = w
        else:  # coalesced into one work for the whole batch
            for h, _ in live:
                h.work = works[-1] if works else None

    def _post_error(self, h: Handle, e: Exception, peers=None) -> CommError:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        who = f" (in a batch with ranks {peers})" if peers and len(peers) > 1 else ""
        return self._error(PeerFailedError, h, "lost the connection to", first[:300] + who)

    def _wait(self, h: Handle) -> None:
        if h.work is None:
            return
        try:
            ok = h.work.wait(timedelta(seconds=self.timeout))
        except Exception as e:  # gloo/NCCL raise RuntimeError (or DistBackendError) subclasses
            text = str(e)
            first = (text.strip().splitlines() or [type(e).__name__])[0]
            if "timed out" in text.lower() or "timeout" in text.lower():
                raise self._error(PeerTimeoutError, h, f"timed out after {self.timeout:g}s waiting for") from e
            raise self._error(PeerFailedError, h, "lost the connection to", first[:300]) from e
        if ok is False:
            raise self._error(PeerTimeoutError, h, f"timed out after {self.timeout:g}s waiting for")


class ThreadHub:
    """Mailboxes shared by the ranks (threads) of one in-process group."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self.lock = threading.Lock()  # guards the matching queues
        self.sends: dict[tuple[int, int], deque] = defaultdict(deque)  # (src, dst) -> unmatched sends
        self.recvs: dict[tuple[int, int], deque] = defaultdict(deque)  # (src, dst) -> unmatched receives
        self.conds = [threading.Condition() for _ in range(world_size)]  # rank r waits on conds[r]
        self.aborted: str | None = None
        self.board = threading.Condition()  # guards ``boards`` (see :meth:`meet`)
        self.boards: dict[int, list] = {}  # seq -> [items by rank, posted, read]

    def abort(self, why: str) -> None:
        """Make every waiting (and future) wait in this group fail at once with ``why``."""
        if self.aborted is None:
            self.aborted = why
        for c in [*self.conds, self.board]:
            with c:
                c.notify_all()

    def meet(self, rank: int, seq: int, item, timeout: float) -> list:
        """Every rank's ``item`` of its ``seq``-th meeting, in rank order, once all ranks have posted theirs.

        One wait, no message exchange (for collectives whose result is a copy of what every rank
        holds). Raises ``TimeoutError`` naming the missing ranks after ``timeout`` seconds, ``RuntimeError``
        with the reason when the group was aborted. The items must not change afterwards (post copies).
        """
        N = self.world_size
        deadline = time.monotonic() + timeout
        with self.board:
            b = self.boards.setdefault(seq, [[None] * N, 0, 0])
            b[0][rank] = item
            b[1] += 1
            if b[1] == N:
                self.board.notify_all()
            while b[1] < N:
                if self.aborted is not None:
                    raise RuntimeError(self.aborted)
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = [j for j in range(N) if b[0][j] is None]
                    raise TimeoutError(f"ranks {missing} did not arrive within {timeout:g}s")
                self.board.wait(left)
            b[2] += 1
            if b[2] == N:
                del self.boards[seq]
            return list(b[0])


class _Op:
    __slots__ = ("tag", "tensor", "done", "error")

    def __init__(self, tag: int, tensor: Tensor) -> None:
        self.tag = tag
        self.tensor = tensor
        self.done = False
        self.error: str | None = None


class ThreadTransport(Transport):
    """Mailbox transport between the threads of one process, with gloo's semantics.

    A message moves as soon as both its send and its receive are posted (by whichever thread posts
    second, straight from the sender's buffer into the receiver's: no extra copy); a send completes only
    then, as a gloo send completes once the peer has taken the data. So an algorithm that is correct and
    deadlock-free here is so on gloo, and vice versa.
    """

    def __init__(self, hub: ThreadHub, rank: int, timeout: float | None = None, stats=None, context: str = ""):
        super().__init__(timeout, stats, context)
        self.hub = hub
        self.rank = rank
        self.world_size = hub.world_size

    def _aborted(self, h: Handle | None = None) -> GroupAbortedError:
        peer = "" if h is None else f" waiting for rank {h.peer}"
        return GroupAbortedError(f"lowbw.comm {self.context}: rank {self.rank} stopped{peer}: {self.hub.aborted}",
                                 peer=None if h is None else h.peer, rank=self.rank)

    def _post(self, live) -> None:
        hub = self.hub
        if hub.aborted is not None:
            raise self._aborted()
        for h, tag in live:
            op = _Op(tag, h.tensor.detach())
            h.work = op
            if h.kind == "send":
                src, dst, mine, theirs = self.rank, h.peer, hub.sends, hub.recvs
            else:
                src, dst, mine, theirs = h.peer, self.rank, hub.recvs, hub.sends
            with hub.lock:
                q = theirs[(src, dst)]
                other = q.popleft() if q else None
                if other is None:
                    mine[(src, dst)].append(op)
            if other is not None:
                snd, rcv = (op, other) if h.kind == "send" else (other, op)
                self._transfer(snd, rcv, src, dst)

    def _transfer(self, snd: _Op, rcv: _Op, src: int, dst: int) -> None:
        err = None
        if snd.tag != rcv.tag or snd.tensor.numel() != rcv.tensor.numel() or snd.tensor.dtype != rcv.tensor.dtype:
            err = (f"mismatched message rank {src} -> rank {dst}: sent tag {snd.tag}, {snd.tensor.numel()} x "
                   f"{snd.tensor.dtype}; expected tag {rcv.tag}, {rcv.tensor.numel()} x {rcv.tensor.dtype}")
        else:
            rcv.tensor.copy_(snd.tensor.view(rcv.tensor.shape))
        for op, r in ((snd, src), (rcv, dst)):
            cond = self.hub.conds[r]
            with cond:
                op.error = err
                op.done = True
                cond.notify_all()

    def _wait(self, h: Handle) -> None:
        op = h.work
        cond = self.hub.conds[self.rank]
        deadline = time.monotonic() + self.timeout
        with cond:
            while not op.done:
                if self.hub.aborted is not None:
                    raise self._aborted(h)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise self._error(PeerTimeoutError, h, f"timed out after {self.timeout:g}s waiting for")
                cond.wait(left)
        if op.error is not None:
            raise self._error(CommError, h, "got a mismatched message from", op.error)
