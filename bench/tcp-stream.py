#!/usr/bin/env python3
"""One plain TCP stream (no encryption, scp-like) moving a file between two processes over
loopback: the floor that `make bench`'s `transfer` scenario sets beside a `get` from one holder.

    bench/tcp-stream.py FILE --root DIR

A receiver process (this script, `receive` mode) listens on 127.0.0.1, writes what arrives into a
file under DIR in 1 MiB writes and fsyncs it; this process connects and sends FILE with
sendfile(2) (from the page cache, as a holder's `pread` mostly is). The time runs from the
connect until the receiver reports its file synced. Then the file is compared with FILE (not
timed). Prints one line:

    seconds=0.231 bytes=104857600

Every wait is bounded; the receiver is stopped and what was made under DIR removed at the end.
Python's standard library only.
"""

import argparse
import filecmp
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import time

TIMEOUT = 120


def receive(path):
    """Listens, prints `port=N`, writes one connection's bytes into `path`, fsyncs, prints `bytes=N`."""
    signal.alarm(TIMEOUT * 2)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(TIMEOUT)
    print(f"port={listener.getsockname()[1]}", flush=True)
    connection, _ = listener.accept()
    connection.settimeout(TIMEOUT)
    buffer = bytearray(1 << 20)
    view = memoryview(buffer)
    total = 0
    with open(path, "wb", buffering=0) as out:
        while True:
            count = connection.recv_into(buffer)
            if count == 0:
                break
            out.write(view[:count])
            total += count
        os.fsync(out.fileno())
    connection.close()
    print(f"bytes={total}", flush=True)


def read_line(child, timeout):
    with selectors.DefaultSelector() as selector:
        selector.register(child.stdout, selectors.EVENT_READ)
        line = b""
        deadline = time.monotonic() + timeout
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(left):
                raise TimeoutError(f"the receiver said nothing within {timeout} s")
            byte = os.read(child.stdout.fileno(), 1)
            if not byte:
                raise RuntimeError("the receiver exited early")
            line += byte
    return line.decode().strip()


def stream(args):
    work = os.path.join(args.root, f"tcp-stream-{os.getpid()}")
    os.makedirs(work)
    output = os.path.join(work, "received.bin")
    receiver = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "receive", output], stdout=subprocess.PIPE
    )
    try:
        port = int(read_line(receiver, TIMEOUT).removeprefix("port="))
        size = os.path.getsize(args.file)
        with open(args.file, "rb") as source:
            start = time.monotonic()
            with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as connection:
                sent = connection.sendfile(source)
                connection.shutdown(socket.SHUT_WR)
                done = read_line(receiver, TIMEOUT)
            seconds = time.monotonic() - start
        if sent != size or done != f"bytes={size}" or not filecmp.cmp(args.file, output, shallow=False):
            raise RuntimeError(f"sent {sent} of {size} bytes, the receiver said {done!r}, or the file differs")
        print(f"seconds={seconds:.4f} bytes={size}", flush=True)
    finally:
        try:
            receiver.wait(5)  # it has exited after its last line, or failed
        except subprocess.TimeoutExpired:
            receiver.kill()
            receiver.wait(TIMEOUT)
        shutil.rmtree(work, ignore_errors=True)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "receive":
        receive(sys.argv[2])
        return
    parser = argparse.ArgumentParser(description="one TCP stream over loopback, written to disk and synced")
    parser.add_argument("file")
    parser.add_argument("--root", required=True, help="an existing directory for the received file")
    stream(parser.parse_args())


if __name__ == "__main__":
    main()
