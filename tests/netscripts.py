"""Worker scripts the testbed tests run in each namespace (``python -c SCRIPT``; RANK and MASTER_ADDR set)."""

from __future__ import annotations

import textwrap

__all__ = ["tcp_bulk", "udp_echo"]


def tcp_bulk(nbytes: int, port: int, addr: str = 'os.environ["MASTER_ADDR"]', report_seconds: bool = False) -> str:
    """Rank 1 sends ``nbytes`` over one TCP connection to rank 0 at ``(addr, port)`` (``addr`` a Python
    expression); rank 0 exits 3 unless it received them all. ``report_seconds``: rank 1 prints
    ``SECONDS <s>``, the time of its sendall."""
    send = ('c.settimeout(None); t = time.time(); c.sendall(b"x" * N); c.close()\n'
            'os.write(1, b"SECONDS %f\\n" % (time.time() - t))' if report_seconds else
            'c.sendall(b"x" * N); c.close()')
    return textwrap.dedent(f"""
        import os, socket, sys, time
        N = {nbytes}; addr = ({addr}, {port})
        if os.environ["RANK"] == "0":
            s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(addr); s.listen(1)
            c, got = s.accept()[0], 0
            while (b := c.recv(65536)):
                got += len(b)
            sys.exit(0 if got == N else 3)
        for _ in range(100):
            try:
                c = socket.create_connection(addr, timeout=5); break
            except OSError:
                time.sleep(0.1)
    """) + send + "\n"


def udp_echo(port: int, client: str) -> str:
    """Rank 0 echoes UDP datagrams on ``(MASTER_ADDR, port)`` until one says ``end``; the other rank runs
    ``client`` (Python, using ``s`` the socket and ``addr``)."""
    return textwrap.dedent(f"""
        import os, socket, statistics, time
        r = int(os.environ["RANK"]); addr = (os.environ["MASTER_ADDR"], {port})
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        if r == 0:
            s.bind(addr); s.settimeout(30)
            while (m := s.recvfrom(64))[0] != b"end":
                s.sendto(*m)
            raise SystemExit(0)
    """) + textwrap.dedent(client)
