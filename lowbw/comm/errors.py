"""Errors raised by lowbw.comm. Every one names the peer it was waiting on."""

from __future__ import annotations

__all__ = ["CommError", "PeerTimeoutError", "PeerFailedError", "GroupAbortedError"]


class CommError(RuntimeError):
    """A collective could not complete. ``peer`` is the group rank waited on (None if not one peer)."""

    def __init__(self, message: str, peer: int | None = None, rank: int | None = None):
        super().__init__(message)
        self.peer = peer
        self.rank = rank


class PeerTimeoutError(CommError, TimeoutError):
    """Nothing came from (or was taken by) ``peer`` within the timeout: it hangs or is dead."""


class PeerFailedError(CommError):
    """The connection to ``peer`` broke (the peer process died or closed the group)."""


class GroupAbortedError(CommError):
    """Another worker of an in-process (thread) group failed; this one stops rather than wait for it."""
