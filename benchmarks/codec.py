"""Benchmark: the Frame codec (MessagePack, metric ids) against JSON of the same frame.

One 8-GPU frame from the simulator, with every metric the simulator makes.
Prints bytes per frame (raw and lz4, as on the Kafka wire) and microseconds to
encode and to decode-and-validate, for fleetwatch's codec and for the obvious
alternative (json.dumps of the dataclass; json.loads plus building the Frame
back). Last line JSON.

    python benchmarks/codec.py
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
import timeit

import lz4.frame

from fleetwatch.codec import decode, encode
from fleetwatch.collectors.sim import FleetSim, SimParams
from fleetwatch.frame import Frame, GpuReading, HostReading


def json_encode(f: Frame) -> bytes:
    return json.dumps(dataclasses.asdict(f)).encode()


def json_decode(data: bytes) -> Frame:
    d = json.loads(data)
    gpus = tuple(GpuReading(**{**g, "xids": tuple(g["xids"])}) for g in d.pop("gpus"))
    host = HostReading(d["host"]["metrics"], ())
    return Frame(**{**d, "gpus": gpus, "host": host})


def per_call_us(fn, arg, n: int = 3000) -> float:
    return min(timeit.repeat(lambda: fn(arg), number=n, repeat=5)) / n * 1e6


def main() -> int:
    sim = FleetSim(SimParams(nodes=1, gpus=8), time.time())
    sim.step()
    (frame,) = sim.frames()
    ours, theirs = encode(frame), json_encode(frame)
    assert decode(ours) == frame and json_decode(theirs) == frame
    r = {
        "msgpack_bytes": len(ours), "json_bytes": len(theirs),
        "msgpack_lz4_bytes": len(lz4.frame.compress(ours)),
        "json_lz4_bytes": len(lz4.frame.compress(theirs)),
        "msgpack_encode_us": round(per_call_us(encode, frame), 1),
        "json_encode_us": round(per_call_us(json_encode, frame), 1),
        "msgpack_decode_us": round(per_call_us(decode, ours), 1),
        "json_decode_us": round(per_call_us(json_decode, theirs), 1),
    }
    print(f"8-GPU frame: fleetwatch {r['msgpack_bytes']} B ({r['msgpack_lz4_bytes']} B lz4), "
          f"JSON {r['json_bytes']} B ({r['json_lz4_bytes']} B lz4)")
    print(f"encode: {r['msgpack_encode_us']} us vs {r['json_encode_us']} us; decode+validate: "
          f"{r['msgpack_decode_us']} us vs JSON decode without validation "
          f"{r['json_decode_us']} us")
    print(json.dumps(r))
    return 0


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    raise SystemExit(main())
