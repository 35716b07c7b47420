"""A hostile many-rank set for the document's size: every rank full of what grows the JSON.

Each rank is a Kineto JSON file written from scratch (no real trace needed), small in bytes but holding, per
rank and different on every rank where a real job could make them differ: ProfilerStep iterations; per
iteration collectives on 16 process groups of several sizes, with message sizes over 30 power-of-two
buckets and 6 dtypes, on 24 communication streams beside 40 compute streams; kernels under hundreds of
distinct names; blocking syncs of four APIs from 40 callers (cpu ops), each under its own annotation and
Python frame; ranks arriving late in turn (peer wait, stragglers), collectives some ranks skip (unmatched)
and independent kernels started in another order on some ranks (order mismatches). What `analyze -f json`
keeps of all this must stay summaries and capped top rows (benchmarks/bench_many_ranks.py --hostile).

usage: python benchmarks/make_hostile_set.py OUT_DIR --ranks 128 [--steps 40]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

GROUPS = 16
COMM_STREAMS = range(100, 124)
COMPUTE_STREAMS = range(7, 47)
DTYPES = (("Float", 4), ("BFloat16", 2), ("Half", 2), ("Int", 4), ("Long", 8), ("Byte", 1))
OPS = ("AllReduce", "AllGather", "ReduceScatter", "Broadcast", "AllToAll")
SYNC_APIS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpyAsync")
CALLERS = 40
PID = 1000


def rank_events(rank: int, world: int, steps: int, seed: int = 7) -> list[dict]:
    """One rank's complete events (times in µs), in the shapes the PyTorch profiler writes."""
    rnd = random.Random(seed)  # the same sequence on every rank: the collectives match across ranks
    ev: list[dict] = []
    corr = 1
    t = 1_000.0
    for step in range(steps):
        start = t
        ev.append(_x("user_annotation", f"ProfilerStep#{step}", t, 0, PID))
        for k in range(24):
            op, g = OPS[rnd.randrange(len(OPS))], rnd.randrange(GROUPS)
            dtype, size = DTYPES[rnd.randrange(len(DTYPES))]
            nelems = 1 << rnd.randrange(0, 30)
            skip = (step + k) % 97 == rank % 97 and world > 2  # this rank skips this one: unmatched elsewhere
            late = 40.0 if (step + k) % world == rank else 0.0  # ranks come late in turn
            if not skip:
                ev.append(_x("cuda_runtime", "cudaLaunchKernel", t + late, 3, PID, {"correlation": corr}))
                ev.append(_x("kernel", f"ncclDevKernel_{op}_RING_LL_{dtype}(ncclDevComm*, unsigned long)",
                             t + late + 5, 60 + rnd.randrange(40), 0,
                             {"device": 0, "stream": COMM_STREAMS[(g + k) % len(COMM_STREAMS)], "correlation": corr,
                              "Collective name": op.lower(), "In msg nelems": nelems, "Out msg nelems": nelems,
                              "Group size": 2 + g % 7, "dtype": dtype, "Process Group Name": str(g),
                              "Seq": step * 24 + k, "grid": [32, 1, 1], "block": [640, 1, 1]}))
                corr += 1
            # two independent compute kernels, started in another order on odd ranks at odd steps
            names = [f"gemm_{(step * 24 + k) % 300}_tile128x{64 << (k % 3)}", f"elementwise_{k % 50}_kernel"]
            if rank % 2 and step % 2:
                names.reverse()
            for j, name in enumerate(names):
                ev.append(_x("cuda_runtime", "cudaLaunchKernel", t + 10 + j, 3, PID, {"correlation": corr}))
                ev.append(_x("kernel", name, t + 15 + 30 * j, 25 + rnd.randrange(20), 0,
                             {"device": 0, "stream": COMPUTE_STREAMS[(step + k + 20 * j) % len(COMPUTE_STREAMS)],
                              "correlation": corr,
                              "grid": [132 * (1 + j), 1, 1], "block": [256, 1, 1], "registers per thread": 128,
                              "shared memory": 49152}))
                corr += 1
            t += 120
            if k % 3 == 0:  # a blocking sync from one of many callers, each under an annotation and a frame
                caller = (rank * 7 + step * 3 + k) % CALLERS
                api = SYNC_APIS[(k // 3) % len(SYNC_APIS)]
                ev.append(_x("python_function", f"train.py({100 + caller}): step_part_{caller}", t, 60, PID))
                ev.append(_x("user_annotation", f"region_{caller}", t + 1, 58, PID))
                ev.append(_x("cpu_op", f"aten::item_{caller}", t + 2, 56, PID, {"External id": corr}))
                ev.append(_x("cuda_runtime", api, t + 3, 50, PID, {"correlation": corr}))
                corr += 1
                t += 70
        ev[[i for i, e in enumerate(ev) if e["name"] == f"ProfilerStep#{step}"][-1]]["dur"] = round(t - start, 3)
        t += 15
    return ev


def _x(cat: str, name: str, ts: float, dur: float, tid: int, args: dict | None = None) -> dict:
    e = {"ph": "X", "cat": cat, "name": name, "pid": PID if cat != "kernel" else 0, "tid": tid,
         "ts": round(ts, 3), "dur": dur}
    if args:
        e["args"] = args
    return e


def write_set(out: Path, ranks: int, steps: int) -> Path:
    """rank{r}.json for every rank (kept if already there with the same shape: .complete names it)."""
    tag = out / ".complete"
    shape = f"{ranks} {steps}"
    if tag.exists() and tag.read_text() == shape:
        return out
    out.mkdir(parents=True, exist_ok=True)
    for r in range(ranks):
        doc = {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": r, "world_size": ranks},
               "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132,
                                     "regsPerMultiprocessor": 65536, "sharedMemPerMultiprocessor": 233472,
                                     "maxThreadsPerMultiprocessor": 2048}],
               "traceEvents": rank_events(r, ranks, steps)}
        (out / f"rank{r}.json").write_text(json.dumps(doc))
    tag.write_text(shape)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--ranks", type=int, default=128)
    ap.add_argument("--steps", type=int, default=40)
    a = ap.parse_args()
    write_set(a.out, a.ranks, a.steps)


if __name__ == "__main__":
    main()
