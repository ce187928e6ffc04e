#!/usr/bin/env python3
"""A Horizon player written from docs/protocol.md alone (sections 1-6, 7.4, 7.5), in Python with
aioquic: it checks that the daemons do what the document says, byte for byte and in meaning.

    gateway_client.py --gateway 127.0.0.1:7412 --site MTL --ca certs/ca.pem --token hz1.player...

With `--beacon SITE=HOST:PORT` (section 7.6) it first measures each site's probe beacon, as a
client does before it joins, and checks the pongs' bytes, and that a packet that is no ping gets
no answer; it then joins with the table it measured (`JoinMeasured`), and, given every site's
gateway (`--gateway-of SITE=HOST:PORT`), at the site it measured lowest. It dials the gateway, says hello, joins, sends inputs on one stream while reading updates and
pinging, then checks: every input acknowledged, applied once and in order (the reference game's
`inputs == last_seq`), views chained, the pong echoing the ping; and that a bad token and an
oversized input get their documented codes. Prints one JSON object; exits 0 when every check
holds, 1 otherwise (naming what failed).
"""

import argparse
import asyncio
import json
import os
import socket
import struct
import sys
import time

from aioquic.asyncio import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, DatagramFrameReceived, StreamDataReceived

GATEWAY = 4  # the channel byte (section 2)
VERSION = 1
UNAUTHORIZED, TOO_LARGE = 4, 3  # error codes (section 5)


# -- section 3: postcard, by hand ---------------------------------------------------------------

def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def string(s):
    b = s.encode() if isinstance(s, str) else s
    return varint(len(b)) + b


def f64(x):
    return struct.pack("<d", x)


def vec3(x, y, z):
    return f64(x) + f64(y) + f64(z)


class Reader:
    def __init__(self, data):
        self.data, self.at = data, 0

    def u8(self):
        self.at += 1
        return self.data[self.at - 1]

    def varint(self):
        n, shift = 0, 0
        while True:
            b = self.u8()
            n |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return n

    def zigzag(self):
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def bytes(self):
        n = self.varint()
        self.at += n
        return self.data[self.at - n:self.at]

    def string(self):
        return self.bytes().decode()

    def fault(self):
        return {"code": self.varint(), "message": self.string()}

    def done(self):
        return self.at == len(self.data)


# -- section 2: frames ---------------------------------------------------------------------------

def frame(payload, version=VERSION):
    return b"HZ" + bytes([version, GATEWAY]) + struct.pack(">I", len(payload)) + payload


def frames(buffer):
    """The whole frames at the front of `buffer` (a bytearray), taken out of it."""
    out = []
    while len(buffer) >= 8:
        assert buffer[:2] == b"HZ", f"bad magic {bytes(buffer[:2])!r}"
        assert buffer[3] == GATEWAY, f"channel {buffer[3]}"
        length = struct.unpack(">I", bytes(buffer[4:8]))[0]
        if len(buffer) < 8 + length:
            break
        out.append(bytes(buffer[8:8 + length]))
        del buffer[:8 + length]
    return out


# -- section 7.5: the reference game --------------------------------------------------------------

def input_bytes(vx, vy, vz):
    return struct.pack("<iii", vx, vy, vz)


def own_view(data):
    """The reference game's own state (7.5, Own): the server's clock, then the player's entity."""
    r = Reader(data)
    wall_us = r.varint()
    pos = [r.zigzag() for _ in range(3)]
    vel = [r.zigzag() for _ in range(3)]
    o = {"wall_us": wall_us, "pos": pos, "vel": vel, "inputs": r.varint(), "last_seq": r.varint()}
    assert r.done(), "trailing bytes in an own state"
    return o


def view(data):
    r = Reader(data)
    v = {"tick": r.varint(), "wall_us": r.varint(), "origin": r.varint(),
         "prev_chain": r.varint(), "chain": r.varint(), "entities": {}}
    for _ in range(r.varint()):
        player = r.varint()
        pos = [r.zigzag() for _ in range(3)]
        vel = [r.zigzag() for _ in range(3)]
        v["entities"][player] = {"pos": pos, "vel": vel, "inputs": r.varint(), "last_seq": r.varint()}
    assert r.done(), "trailing bytes in a view"
    return v


# -- the connection -------------------------------------------------------------------------------

class Player(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.buffers = {}
        self.finished = set()
        self.datagrams = []
        self.closed = None
        self.changed = asyncio.Event()

    def quic_event_received(self, event):
        if isinstance(event, StreamDataReceived):
            self.buffers.setdefault(event.stream_id, bytearray()).extend(event.data)
            if event.end_stream:
                self.finished.add(event.stream_id)
        elif isinstance(event, DatagramFrameReceived):
            self.datagrams.append(event.data)
        elif isinstance(event, ConnectionTerminated):
            self.closed = {"code": event.error_code, "reason": event.reason_phrase}
        self.changed.set()

    async def wait(self, until, within):
        deadline = time.monotonic() + within
        while not until():
            left = deadline - time.monotonic()
            if left <= 0 or self.closed:
                return until()
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), left)
            except asyncio.TimeoutError:
                pass
        return True

    def open(self, unidirectional, data, end):
        stream = self._quic.get_next_available_stream_id(is_unidirectional=unidirectional)
        self._quic.send_stream_data(stream, data, end_stream=end)
        self.transmit()
        return stream

    async def exchange(self, payload, within=5.0):
        """Section 1: a request on its own bidirectional stream, one frame each way."""
        stream = self.open(False, frame(payload), True)
        got = lambda: stream in self.finished or bool(frames(bytearray(self.buffers.get(stream, b""))))
        if not await self.wait(got, within):
            raise RuntimeError(f"no answer on stream {stream}: closed {self.closed}")
        return frames(self.buffers[stream])[0]

    async def hello(self, token, peer="py-conformance"):
        """Section 4: the first bidirectional stream; returns the welcome."""
        payload = bytes([1, 1]) + string(peer)
        payload += (b"\x01" + string(token)) if token is not None else b"\x00"
        payload += varint(int.from_bytes(os.urandom(8), "little"))
        r = Reader(await self.exchange(payload))
        if r.varint() == 0:
            return {"accepted": True, "version": r.u8(), "peer": r.string(), "session": r.varint()}
        return {"accepted": False, "fault": r.fault()}

    async def request(self, request_id, body):
        """Section 5: RequestFrame { id, body } → ReplyFrame { id, Result<Reply, Fault> }."""
        r = Reader(await self.exchange(varint(request_id) + body))
        assert r.varint() == request_id, "a reply carries its request's id"
        if r.varint() == 1:
            return {"fault": r.fault()}
        kind = r.varint()
        if kind == 1:  # Joined { player, home, resume_after, resume }
            joined = {"player": r.varint(), "home": r.string(), "resume_after": r.varint(),
                      "resume": r.string()}
            assert r.done(), "trailing bytes in Joined"
            return {"joined": joined}
        if kind == 2:  # Credential { player, resume }
            credential = {"player": r.varint(), "resume": r.string()}
            assert r.done(), "trailing bytes in Credential"
            return {"credential": credential}
        return {"done": kind == 0}


def configuration(args):
    config = QuicConfiguration(is_client=True, alpn_protocols=["horizon-gateway"],
                               server_name=f"{args.site.lower()}.site.horizon",
                               max_datagram_frame_size=1200)
    config.load_verify_locations(args.ca)
    return config


async def play(args, report):
    host, port = args.gateway.rsplit(":", 1)
    async with connect(host, int(port), configuration=configuration(args), create_protocol=Player) as p:
        welcome = await p.hello(args.token)
        report["welcome"] = welcome
        if not welcome["accepted"]:
            return
        request_id = int.from_bytes(os.urandom(4), "little")
        # Join { role: Player (1), world: 1, pos }, or, having measured the beacons,
        # JoinMeasured (3) with the same fields and the table: per site, its name, pings sent
        # and answered (u8 each, one byte) and the median in microseconds (varint).
        join = varint(1) + varint(1) + vec3(0.0, 0.0, 0.0)
        beacons = report.get("beacons", {})
        if beacons:
            table = varint(len(beacons))
            for site, b in beacons.items():
                answered = b["samples"] - round(b["loss"] * b["samples"])
                median_us = round(b["median_ms"] * 1000) if b["median_ms"] is not None else 0
                table += string(site) + bytes([b["samples"], answered]) + varint(median_us)
            joined = await p.request(request_id, varint(3) + join + table)
        else:
            joined = await p.request(request_id, varint(0) + join)
        report["join"] = joined
        if "joined" not in joined:
            return
        me = joined["joined"]["player"]
        # Ping { nonce, sent_us } as a datagram (index 1); the Pong (2) echoes both.
        nonce = int.from_bytes(os.urandom(4), "little")
        p._quic.send_datagram_frame(frame(varint(1) + varint(nonce) + varint(int(time.time() * 1e6))))
        p.transmit()
        # Inputs on one unidirectional stream, seq 1.., every 50 ms; updates on the gateway's.
        seq, sent, inputs = joined["joined"]["resume_after"], 0, None
        views, chain_breaks, acked, seen_bad, own_states = [], 0, 0, [], 0
        # Play at least `--seconds` and 40 updates (the player's bubble comes at the brain's
        # next tick, within 5 s), then wait for the last acknowledgements; 20 s at most.
        start = time.monotonic()
        playing = lambda: time.monotonic() < start + args.seconds or len(views) < 40
        while time.monotonic() < start + 20 and (playing() or acked < sent):
            if playing():
                item = frame(varint(0) + varint(seq) + string(input_bytes(1000, 0, -500)))
                if inputs is None:
                    inputs = p.open(True, item, False)
                else:
                    p._quic.send_stream_data(inputs, item, end_stream=False)
                    p.transmit()
                seq, sent = seq + 1, sent + 1
            await asyncio.sleep(0.05)
            for stream, buffer in p.buffers.items():
                if stream & 3 != 3:  # server-initiated unidirectional (RFC 9000 §2.1)
                    continue
                for payload in frames(buffer):
                    r = Reader(payload)
                    kind = r.varint()
                    if kind == 3:  # Own { bubble, tick, seq, bytes }: ahead of the update (7.3)
                        _bubble, _tick, seq_shown, data = r.varint(), r.varint(), r.varint(), r.bytes()
                        assert r.done()
                        o = own_view(data)
                        own_states += 1
                        if o["inputs"] != o["last_seq"] or o["last_seq"] != seq_shown:
                            seen_bad.append(o)
                        continue
                    if kind != 1:
                        continue  # Reconnecting
                    bubble, tick, ack, data = r.varint(), r.varint(), r.varint(), r.bytes()
                    assert r.done()
                    acked = max(acked, ack)
                    v = view(data)
                    if views and views[-1]["origin"] == v["origin"] and v["tick"] == views[-1]["tick"] + 1 \
                            and v["prev_chain"] != views[-1]["chain"]:
                        chain_breaks += 1
                    e = v["entities"].get(me)
                    if e and e["inputs"] != e["last_seq"]:
                        seen_bad.append(e)
                    views.append({"origin": v["origin"], "tick": v["tick"], "chain": v["chain"], "me": e})
            if p.closed:
                break
        pongs = []
        for d in p.datagrams:
            r = Reader(d[8:])
            if r.varint() == 2:
                pongs.append({"nonce": r.varint(), "sent_us": r.varint()})
        last = next((v["me"] for v in reversed(views) if v["me"]), None)
        report.update({"player": me, "inputs_sent": sent, "acked": acked, "updates": len(views),
                       "chain_breaks": chain_breaks, "entity": last, "own_states": own_states, "applied_not_once": seen_bad,
                       "pong": any(x["nonce"] == nonce for x in pongs), "closed": p.closed})
        # An input over 16 KiB: this connection alone is closed with too_large (section 6).
        if inputs is not None:
            big = frame(varint(0) + varint(seq) + string(b"\x07" * (17 << 10)))
            p._quic.send_stream_data(inputs, big, end_stream=False)
            p.transmit()
            await p.wait(lambda: p.closed is not None, 5)
            report["oversized"] = p.closed


async def resume(args, report):
    """Section 5.1: a new connection of the same account resumes the session with its
    credential (the same player, from the seq after the last acknowledged); `Credential` gives
    a fresh one; a credential naming another player is refused with unauthorized."""
    credential = ((report.get("join") or {}).get("joined") or {}).get("resume")
    if not credential:
        return
    host, port = args.gateway.rsplit(":", 1)
    async with connect(host, int(port), configuration=configuration(args), create_protocol=Player) as p:
        await p.hello(args.token)
        request_id = int.from_bytes(os.urandom(4), "little")
        me = report["join"]["joined"]["player"]
        forged = credential.replace(f":{me}:", f":{me + 1}:", 1)
        report["resume_forged"] = await p.request(request_id, varint(4) + string(forged))
        report["resume"] = await p.request(request_id + 1, varint(4) + string(credential))
        report["credential"] = await p.request(request_id + 2, varint(5))


async def bad_token(args, report):
    host, port = args.gateway.rsplit(":", 1)
    async with connect(host, int(port), configuration=configuration(args), create_protocol=Player) as p:
        report["bad_token"] = await p.hello("hz1.player.mallory.4102444800.k1.AAAA")


# -- section 7.6: probe beacons (plain UDP, 40 bytes, little-endian) ---------------------------

BEACON = struct.Struct("<4sBBHQQQQ")  # magic, version, kind, zero, nonce, client_ns, rx_ns, tx_ns


def probe(name, addr, samples=10, timeout=1.0):
    """Measures one beacon: each ping's round trip with the agent's hold time taken out."""
    host, port = addr.rsplit(":", 1)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.settimeout(timeout)
    sock.connect((host, int(port)))
    rtts, bad = [], []
    origin = time.monotonic_ns()
    for nonce in range(samples):
        sent = time.monotonic_ns() - origin
        sock.send(BEACON.pack(b"HZBC", 1, 1, 0, 1000 + nonce, sent, 0, 0))
        try:
            data = sock.recv(64)
        except socket.timeout:
            continue
        received = time.monotonic_ns() - origin
        if len(data) != BEACON.size:
            bad.append(f"a pong of {len(data)} bytes")
            continue
        magic, version, kind, zero, echoed, client_ns, rx, tx = BEACON.unpack(data)
        if (magic, version, kind, zero, echoed, client_ns) != (b"HZBC", 1, 2, 0, 1000 + nonce, sent) or tx < rx:
            bad.append(f"pong {data.hex()} for nonce {1000 + nonce}")
            continue
        rtts.append(((received - client_ns) - (tx - rx)) / 1e6)
        time.sleep(0.05)
    # Anything but a ping gets no answer.
    sock.send(b"HZBC" + bytes(35))
    sock.settimeout(0.3)
    try:
        silent = not sock.recv(64)
    except socket.timeout:
        silent = True
    sock.close()
    rtts.sort()
    median = rtts[len(rtts) // 2] if rtts else None
    return {"median_ms": median, "loss": 1 - len(rtts) / samples, "samples": samples, "bad": bad,
            "silent_to_junk": silent}


def checks(report):
    failed = []
    def need(ok, what):
        if not ok:
            failed.append(what)
    need(report.get("welcome", {}).get("accepted"), "the hello was accepted")
    need(report.get("welcome", {}).get("version") == VERSION, "version 1 negotiated")
    need("joined" in report.get("join", {}), "Join (JoinMeasured after measuring) answered Joined")
    need(report.get("inputs_sent", 0) >= 20, "inputs were sent")
    need(report.get("updates", 0) >= 40, "updates came every tick (40 at least)")
    need(report.get("acked") == report.get("inputs_sent"), "every input acknowledged (acked = last seq sent)")
    e = report.get("entity") or {}
    need(e.get("inputs") == e.get("last_seq") == report.get("acked"), "the game applied each input once, in order")
    need(not report.get("applied_not_once"), "no view shows an input applied twice")
    need(report.get("chain_breaks") == 0, "views chain (prev_chain = the previous view's chain)")
    need(report.get("own_states", 0) >= 1, "own states arrive ahead of updates, showing the input they name")
    need(report.get("pong"), "a Ping datagram is answered by a Pong echoing it")
    need((report.get("oversized") or {}).get("code") == TOO_LARGE, "an input over 16 KiB closes with too_large (3)")
    me = ((report.get("join") or {}).get("joined") or {}).get("player")
    resumed = (report.get("resume") or {}).get("joined") or {}
    need(resumed.get("player") == me and resumed.get("resume_after") == (report.get("acked") or 0) + 1,
         "Resume with the session's credential: the same player, from the seq after the last acknowledged")
    need(((report.get("resume_forged") or {}).get("fault") or {}).get("code") == UNAUTHORIZED,
         "a credential naming another player is refused with unauthorized (4)")
    fresh = (report.get("credential") or {}).get("credential") or {}
    need(fresh.get("player") == me and fresh.get("resume", "").startswith("hz1.resume."),
         "Credential answers a fresh resumption credential for the session's player")
    bad = report.get("bad_token", {})
    need(not bad.get("accepted") and bad.get("fault", {}).get("code") == UNAUTHORIZED,
         "a forged token is refused with unauthorized (4)")
    if "lowest" in report:
        need(report["lowest"] is not None and report.get("joined_site") == report["lowest"],
             f"joined the gateway of the site measured lowest ({report['lowest']})")
    for site, b in report.get("beacons", {}).items():
        need(b["loss"] == 0 and b["median_ms"] is not None and b["median_ms"] >= 0,
             f"{site}'s beacon answered every ping, round trip measured")
        need(not b["bad"], f"{site}'s pongs are the documented bytes: {b['bad']}")
        need(b["silent_to_junk"], f"{site}'s beacon does not answer a packet that is no ping")
    return failed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gateway", help="host:port of an agent's gateway")
    parser.add_argument("--site", help="the agent's site (its certificate's name)")
    parser.add_argument("--gateway-of", action="append", default=[], metavar="SITE=HOST:PORT",
                        help="a site's gateway (repeat): with --beacon, the player joins the one "
                             "of the site it measured lowest (design.md §2)")
    parser.add_argument("--ca", required=True, help="the site CA (PEM)")
    parser.add_argument("--token", required=True, help="a player token (docs/security.md)")
    parser.add_argument("--seconds", type=float, default=4.0, help="how long to play")
    parser.add_argument("--beacon", action="append", default=[], metavar="SITE=HOST:PORT",
                        help="a site's probe beacon, measured before joining (repeat)")
    args = parser.parse_args()
    report = {}
    try:
        for b in args.beacon:
            site, addr = b.split("=", 1)
            report.setdefault("beacons", {})[site] = probe(site, addr)
        gateways = dict(g.split("=", 1) for g in args.gateway_of)
        if gateways:
            # The lowest median among the sites that answered at least half their pings.
            answered = {s: b["median_ms"] for s, b in report.get("beacons", {}).items()
                        if b["median_ms"] is not None and b["loss"] <= 0.5}
            report["lowest"] = min(answered, key=answered.get) if answered else None
            if report["lowest"] in gateways:
                args.site, args.gateway = report["lowest"], gateways[report["lowest"]]
        if not args.gateway or not args.site:
            parser.error("give --gateway and --site, or --gateway-of with --beacon")
        report["joined_site"] = args.site
        asyncio.run(play(args, report))
        asyncio.run(resume(args, report))
        asyncio.run(bad_token(args, report))
    except Exception as e:  # noqa: BLE001 - reported, then a failure
        report["error"] = f"{type(e).__name__}: {e}"
    report["failed"] = checks(report) + ([report["error"]] if "error" in report else [])
    print(json.dumps(report, default=str))
    sys.exit(1 if report["failed"] else 0)


if __name__ == "__main__":
    main()
