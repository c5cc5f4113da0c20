"""Raw pyzmq ROUTER that echoes every message back unchanged: the bridge benchmark's baseline.

Usage: python bench/zmq_echo_server.py ENDPOINT   (prints the bound endpoint on stdout, then serves)
"""

from __future__ import annotations

import sys

import zmq


def main() -> None:
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(sys.argv[1])
    print(sock.getsockopt_string(zmq.LAST_ENDPOINT), flush=True)
    while True:
        frames = sock.recv_multipart(copy=False)
        if len(frames) == 2 and frames[1].bytes == b"STOP":
            break
        sock.send_multipart(frames, copy=False)
    sock.close()


if __name__ == "__main__":
    main()
