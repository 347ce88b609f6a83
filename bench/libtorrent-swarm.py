#!/usr/bin/python3
"""libtorrent moving one file from N seeders to one leecher over loopback TCP: the peer that
`make bench`'s `transfer` scenario measures GroupMesh's `get` against (Sources/MeshBench).

    bench/libtorrent-swarm.py --check               # prints version=..., exits 3 without libtorrent
    bench/libtorrent-swarm.py FILE --root DIR [--seeders 3] [--piece-kib 256]
                              [--preset default|high-performance] [--format v1|v2|hybrid]
                              [--timed-from connected|add]
    LIBTORRENT_TRACE=1 bench/libtorrent-swarm.py ...  # the leecher's progress and alerts on stderr

Every seeder is a process of its own (this script, `seed` mode) with a session listening on
127.0.0.1 and its save path under DIR holding a hard link to FILE (a copy where links fail),
checked before anything is timed. The leecher is a session in this process. No tracker: the
leecher calls connect_peer for each seeder's port. TCP only (no uTP), no DHT, LSD, UPnP or
NAT-PMP, protocol encryption off (plaintext), several connections per IP allowed (every peer is
127.0.0.1); otherwise libtorrent's defaults (`--preset high-performance`: high_performance_seed).
The leecher adds the torrent wanting nothing and waits for every seeder's connection (as a
GroupMesh joiner knows its holders before a `get`); the time runs from wanting the file until
every piece passed its hash, libtorrent flushed its cache and the file was fsync'd (a GroupMesh
`get` syncs its output too). `--timed-from add`: from adding the torrent instead, which includes
libtorrent's wait for its next tick (0.5 s) before it connects. Then the file is compared with
FILE (not timed). Prints one line (connect: adding the torrent until every seeder was connected):

    seconds=0.319 bytes=104857600 first_piece=0.043 connect=0.501 version=2.0.8.0

Every wait is bounded; the seeders are stopped and everything made under DIR is removed at the
end. Needs Debian's python3-libtorrent (`make deps` installs it as root) and its /usr/bin/python3.
"""

import argparse
import filecmp
import os
import shutil
import signal
import subprocess
import sys
import time

try:
    import libtorrent as lt
except ImportError:
    lt = None

SEED_READY_TIMEOUT = 120
CONNECT_TIMEOUT = 30
DOWNLOAD_TIMEOUT = 300
FLUSH_TIMEOUT = 30
STOP_TIMEOUT = 10
CHILD_ALARM = 900  # a seeder whose parent vanished without closing its stdin still ends


def settings(preset):
    pack = lt.high_performance_seed() if preset == "high-performance" else lt.default_settings()
    disabled = int(getattr(getattr(lt, "enc_policy", None), "pe_disabled", 2))
    pack.update(
        {
            "listen_interfaces": "127.0.0.1:0",
            "enable_dht": False,
            "enable_lsd": False,
            "enable_upnp": False,
            "enable_natpmp": False,
            "enable_outgoing_utp": False,
            "enable_incoming_utp": False,
            "enable_outgoing_tcp": True,
            "enable_incoming_tcp": True,
            "out_enc_policy": disabled,
            "in_enc_policy": disabled,
            # Every peer is 127.0.0.1: without this the leecher keeps one seeder of three.
            "allow_multiple_connections_per_ip": True,
            # The leecher wanting nothing yet keeps its seeders connected.
            "close_redundant_connections": False,
            "alert_mask": int(lt.alert.category_t.status_notification)
            | int(lt.alert.category_t.error_notification)
            | int(lt.alert.category_t.storage_notification)
            | int(lt.alert.category_t.piece_progress_notification),
        }
    )
    return pack


def add(session, torrent, save_path, wanted=True):
    params = lt.add_torrent_params()
    params.ti = lt.torrent_info(torrent)
    params.save_path = save_path
    if not wanted:
        params.file_priorities = [0] * params.ti.num_files()
    handle = session.add_torrent(params)
    # Started now, not when the session's queue gets to it.
    handle.unset_flags(lt.torrent_flags.auto_managed)
    handle.resume()
    return handle


def wait_until(what, timeout, condition, every=0.005):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout} s")
        time.sleep(every)


def seed(args):
    """A seeder: checks its copy, prints `port=N`, serves until its stdin closes."""
    signal.alarm(CHILD_ALARM)
    session = lt.session(settings(args.preset))
    handle = add(session, args.torrent, args.save_path)
    wait_until("the seeder's check", SEED_READY_TIMEOUT, lambda: handle.status().is_seeding, every=0.02)
    print(f"port={session.listen_port()}", flush=True)
    sys.stdin.read()
    session.pause()
    del session


def make_torrent(file, piece_kib, layout, path):
    storage = lt.file_storage()
    lt.add_files(storage, file)
    flags = {"v1": lt.create_torrent.v1_only, "v2": lt.create_torrent.v2_only, "hybrid": 0}[layout]
    creator = lt.create_torrent(storage, piece_kib << 10, flags)
    lt.set_piece_hashes(creator, os.path.dirname(os.path.abspath(file)))
    with open(path, "wb") as out:
        out.write(lt.bencode(creator.generate()))


def read_port(child, deadline):
    """The `port=N` line of a seeder, within the deadline (its stdout read without blocking past it)."""
    import selectors

    with selectors.DefaultSelector() as selector:
        selector.register(child.stdout, selectors.EVENT_READ)
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(left):
                raise TimeoutError(f"a seeder gave no port within {SEED_READY_TIMEOUT} s")
            byte = os.read(child.stdout.fileno(), 1)
            if not byte:
                raise RuntimeError(f"a seeder exited with status {child.wait(STOP_TIMEOUT)} before its port")
            line += byte
    text = line.decode().strip()
    if not text.startswith("port="):
        raise RuntimeError(f"a seeder said {text!r}")
    return int(text[len("port=") :])


def swarm(args):
    work = os.path.join(args.root, f"libtorrent-{os.getpid()}")
    os.makedirs(work)
    seeders = []
    session = None
    try:
        torrent = os.path.join(work, "payload.torrent")
        make_torrent(args.file, args.piece_kib, args.format, torrent)
        name = os.path.basename(args.file)
        for index in range(args.seeders):
            save_path = os.path.join(work, f"seeder{index}")
            os.makedirs(save_path)
            try:
                os.link(args.file, os.path.join(save_path, name))
            except OSError:
                shutil.copyfile(args.file, os.path.join(save_path, name))
                os.sync()  # the copies' writeback is not what the leecher is timed beside
            command = [sys.executable, os.path.abspath(__file__), "seed", torrent, save_path, "--preset", args.preset]
            seeders.append(subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE))
        deadline = time.monotonic() + SEED_READY_TIMEOUT
        ports = [read_port(child, deadline) for child in seeders]

        session = lt.session(settings(args.preset))
        leech_path = os.path.join(work, "leecher")
        os.makedirs(leech_path)
        output = os.path.join(leech_path, name)
        size = os.path.getsize(args.file)

        # As a GroupMesh joiner is in the mesh and knows the attachment before its `get`: the torrent
        # added wanting nothing and every seeder connected first (libtorrent connects peers on its
        # next tick, up to 0.5 s later), then the file wanted and timed (`--timed-from add`: from
        # adding the torrent, the connections included).
        added = time.monotonic()
        handle = add(session, torrent, leech_path, wanted=args.timed_from == "add")
        for port in ports:
            handle.connect_peer(("127.0.0.1", port))
        if args.timed_from == "connected":
            wait_until(
                "the seeders' connections", CONNECT_TIMEOUT, lambda: handle.status().num_peers >= len(ports)
            )
        connected = time.monotonic() - added
        session.pop_alerts()
        start = time.monotonic()
        if args.timed_from == "connected":
            handle.prioritize_files([4] * handle.torrent_file().num_files())
        first_piece = None
        finished = False
        trace = os.environ.get("LIBTORRENT_TRACE") == "1"
        deadline = start + DOWNLOAD_TIMEOUT
        while not finished:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the leecher: not complete within {DOWNLOAD_TIMEOUT} s")
            session.wait_for_alert(50)
            if trace:
                status = handle.status()
                print(
                    f"{time.monotonic() - start:.3f} s: {status.state} peers={status.num_peers} "
                    f"done={status.total_done >> 20} MiB rate={status.download_rate >> 20} MiB/s",
                    file=sys.stderr,
                )
            for alert in session.pop_alerts():
                if trace:
                    print(f"{time.monotonic() - start:.3f} s: {alert.what()}: {alert.message()}", file=sys.stderr)
                if first_piece is None and isinstance(alert, lt.piece_finished_alert):
                    first_piece = time.monotonic() - start
                if isinstance(alert, lt.torrent_finished_alert):
                    finished = True
                elif isinstance(alert, (lt.file_error_alert, lt.torrent_error_alert)):
                    raise RuntimeError(f"the leecher: {alert.message()}")
            if not finished and handle.status().is_seeding:
                finished = True
        handle.flush_cache()
        flushed = False
        flush_deadline = time.monotonic() + FLUSH_TIMEOUT
        while not flushed:
            if time.monotonic() > flush_deadline:
                raise TimeoutError(f"the leecher's cache flush: not within {FLUSH_TIMEOUT} s")
            session.wait_for_alert(50)
            flushed = any(isinstance(alert, lt.cache_flushed_alert) for alert in session.pop_alerts())
        descriptor = os.open(output, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        seconds = time.monotonic() - start

        if os.path.getsize(output) != size or not filecmp.cmp(args.file, output, shallow=False):
            raise RuntimeError("the leecher's file differs from the original")
        print(
            f"seconds={seconds:.4f} bytes={size} first_piece={first_piece or 0:.4f} connect={connected:.4f} "
            f"version={lt.__version__}",
            flush=True,
        )
    finally:
        if session is not None:
            session.pause()
            del session
        for child in seeders:
            try:
                child.stdin.close()
                child.wait(STOP_TIMEOUT)
            except (OSError, subprocess.TimeoutExpired):
                child.kill()
                try:
                    child.wait(STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    pass  # killed; the next seeder and the clean-up still run
        shutil.rmtree(work, ignore_errors=True)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--check":
        if lt is None:
            print("python3-libtorrent is missing (make bench installs it as root)", file=sys.stderr)
            sys.exit(3)
        print(f"version={lt.__version__}")
        return
    if lt is None:
        print("python3-libtorrent is missing (make bench installs it as root)", file=sys.stderr)
        sys.exit(3)
    if len(sys.argv) > 1 and sys.argv[1] == "seed":
        parser = argparse.ArgumentParser(prog="libtorrent-swarm.py seed")
        parser.add_argument("mode")
        parser.add_argument("torrent")
        parser.add_argument("save_path")
        parser.add_argument("--preset", default="default")
        seed(parser.parse_args())
        return
    parser = argparse.ArgumentParser(description="libtorrent: N seeders to one leecher on loopback TCP")
    parser.add_argument("file")
    parser.add_argument("--root", required=True, help="an existing directory for the save paths")
    parser.add_argument("--seeders", type=int, default=3)
    parser.add_argument("--piece-kib", type=int, default=256)
    parser.add_argument("--preset", choices=["default", "high-performance"], default="default")
    parser.add_argument("--format", choices=["v1", "v2", "hybrid"], default="v1")
    parser.add_argument("--timed-from", choices=["connected", "add"], default="connected")
    swarm(parser.parse_args())


if __name__ == "__main__":
    main()
