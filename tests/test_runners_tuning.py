"""The tuned variants' schedule search and its cache, with a fake timer (no GPU), and on gloo end to end."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from runners import autotune
from runners.autotune import Schedule, TuneCache, search

from .forked_ranks import forked_ranks  # noqa: F401 - a fixture: the ranks forked from this process

SERIAL = Schedule("serial")
CANDS = [SERIAL, Schedule("ce", 2, -1, "group"), Schedule("ce", 4, -1, "group", True), Schedule("p2p", 2),
         Schedule("ce", 8, 0, "once"), Schedule("ce", 2, -1, "group", True, lanes=2)]


class FakeTimer:
    """measure(): medians from a table per round; records what each round timed."""

    def __init__(self, *rounds: dict[str, float]) -> None:
        self.rounds = list(rounds)
        self.asked: list[list[str]] = []

    def __call__(self, cands, reps):
        self.asked.append([c.name for c in cands])
        table = self.rounds[min(len(self.asked), len(self.rounds)) - 1]
        return {c.name: table[c.name] for c in cands}


def test_search_takes_the_fastest_of_the_second_round_and_times_every_family_and_the_baseline_again() -> None:
    first = {c.name: t for c, t in zip(CANDS, [3.0, 1.0, 1.1, 2.0, 1.2, 1.3], strict=True)}
    # round 2 reverses the two leaders: its longer measurement decides
    second = {**first, CANDS[1].name: 1.15, CANDS[2].name: 1.05}
    timer = FakeTimer(first, second)
    result = search(CANDS, timer, keep=3)
    assert timer.asked[0] == [c.name for c in CANDS]
    # the 3 best, then the best of each family not among them (p2p, serial): ce*2 "group" is not
    # timed again, its family's best (ce x2 group) is
    assert timer.asked[1] == [CANDS[1].name, CANDS[2].name, CANDS[4].name, CANDS[3].name, SERIAL.name]
    # round 3: the best 3 of round 2, the best of its 3 best families (ce group, ce once, p2p) and the best
    # serial one, measured longer: it decides
    assert timer.asked[2] == [CANDS[2].name, CANDS[1].name, CANDS[4].name, CANDS[3].name, SERIAL.name]
    assert result.choice == CANDS[2] and result.rounds == [first, {k: second[k] for k in timer.asked[1]},
                                                          {k: second[k] for k in timer.asked[2]}]


def test_the_third_round_decides_between_close_finalists() -> None:
    first = {c.name: t for c, t in zip(CANDS, [3.0, 1.0, 1.1, 2.0, 1.2, 1.3], strict=True)}
    third = {**first, CANDS[4].name: 0.95}  # the third-best of round 2 is the fastest over the long round
    timer = FakeTimer(first, first, third)
    result = search(CANDS, timer, keep=3)
    assert len(timer.asked) == 3 and result.choice == CANDS[4]


def test_search_skips_round_three_when_rounds_one_and_two_used_three_quarters_of_the_budget() -> None:
    ticks = itertools.chain([0.0, 10.0], itertools.repeat(25.0))
    timer = FakeTimer({c.name: 1.0 + i for i, c in enumerate(CANDS)})
    said: list[str] = []
    result = search(CANDS, timer, budget_s=30.0, clock=lambda: next(ticks), progress=said.append)
    assert len(timer.asked) == 2 and len(result.rounds) == 2 and any("round 3 skipped" in s for s in said)


def test_search_returns_the_baseline_schedule_when_nothing_beats_it() -> None:
    times = {c.name: (0.9 if c == SERIAL else 1.0 + i / 10) for i, c in enumerate(CANDS)}
    assert search(CANDS, FakeTimer(times)).choice == SERIAL


def test_search_skips_round_two_when_round_one_used_half_the_budget() -> None:
    ticks = iter([0.0, 20.0, 20.0, 20.0, 20.0])
    timer = FakeTimer({c.name: 1.0 + i for i, c in enumerate(CANDS)})
    said: list[str] = []
    result = search(CANDS, timer, budget_s=30.0, clock=lambda: next(ticks), progress=said.append)
    assert len(timer.asked) == 1 and result.choice == CANDS[0] and len(result.rounds) == 1
    assert any("round 2 skipped" in s for s in said)


def test_pytorchs_fused_op_reaches_the_last_round_as_the_baseline_does_and_wins_when_fastest_there() -> None:
    fused = Schedule("fused")
    cands = [*CANDS, fused]
    # rounds 1 and 2 rank the fused op behind three families (a few noisy chunks); round 3 times it again
    first = {**{c.name: t for c, t in zip(CANDS, [3.0, 1.0, 1.1, 2.0, 1.2, 1.3], strict=True)}, "fused": 2.5}
    timer = FakeTimer(first, first, {**first, "fused": 0.98})
    result = search(cands, timer, keep=3)
    assert fused.name == "fused" and all("fused" in asked for asked in timer.asked)
    assert result.choice == fused


def test_search_needs_a_candidate() -> None:
    with pytest.raises(ValueError, match="no candidate"):
        search([], FakeTimer({}))


def test_schedule_names_and_round_trip() -> None:
    assert SERIAL.name == "serial" and Schedule("serial", graph=True).name == "serial+graph"
    assert CANDS[5].name == "ce*2 x2 prio-1 group +graph"
    for c in CANDS:
        assert Schedule.from_dict(json.loads(json.dumps(c.to_dict()))) == c
    assert len({c.name for c in CANDS}) == len(CANDS)


def _result(choice: Schedule) -> autotune.SearchResult:
    return autotune.SearchResult(choice=choice, rounds=[{choice.name: 1.0}], seconds=0.5, skipped={})


def test_cache_hit_stale_and_miss(tmp_path: Path) -> None:
    cache = TuneCache(tmp_path, "gemm-rs")
    fp = autotune.fingerprint(CANDS, "code 1", {"torch": "2.x"})
    key = autotune.shape_key("gemm-rs", {"M": 64, "K": 32, "N": 16, "dtype": "bf16", "world": 2, "gpu": "X"}, "h")
    assert cache.lookup(key, fp, CANDS) == ("miss", None)
    cache.store(key, fp, _result(CANDS[2]))
    assert cache.lookup(key, fp, CANDS) == ("hit", CANDS[2])
    # other code, other software, or a choice no longer among the candidates: stale
    assert cache.lookup(key, autotune.fingerprint(CANDS, "code 2", {"torch": "2.x"}), CANDS)[0] == "stale"
    assert cache.lookup(key, autotune.fingerprint(CANDS, "code 1", {"torch": "2.y"}), CANDS)[0] == "stale"
    assert cache.lookup(key, fp, [c for c in CANDS if c != CANDS[2]])[0] == "stale"
    # another shape or host is another key
    other = key.replace("M=64", "M=128")
    assert cache.lookup(other, fp, CANDS) == ("miss", None)
    cache.store(other, fp, _result(SERIAL))
    assert cache.lookup(key, fp, CANDS) == ("hit", CANDS[2]) and cache.lookup(other, fp, CANDS) == ("hit", SERIAL)
    assert key.endswith("|host=h") and "dtype=bf16" in key and "gpu=X" in key and "world=2" in key


def test_cache_file_from_elsewhere_is_a_miss_not_an_error(tmp_path: Path) -> None:
    cache = TuneCache(tmp_path, "ag-gemm")
    cache.path.write_text("{not json")
    assert cache.lookup("k", "fp", CANDS) == ("miss", None)
    cache.path.write_text(json.dumps({"version": 999, "entries": {"k": {}}}))
    assert cache.lookup("k", "fp", CANDS) == ("miss", None)
    cache.store("k", "fp", _result(SERIAL))  # replaces the unreadable file
    assert cache.lookup("k", "fp", CANDS) == ("hit", SERIAL)


class FakeSpreadTimer:
    """The cached run's measure(): (median, spread) per name from a table per call; records what each call timed."""

    def __init__(self, *calls: dict[str, tuple[float, float]]) -> None:
        self.calls = list(calls)
        self.asked: list[tuple[list[str], int]] = []

    def __call__(self, names, reps):
        self.asked.append((list(names), reps))
        table = self.calls[len(self.asked) - 1]
        return {n: table[n] for n in names}


BASES = ["baseline", "fused-ref"]
# the cached search's last round, fastest first: CANDS[2], CANDS[1], CANDS[4]
FINALISTS = [CANDS[2], CANDS[1], CANDS[4]]


def test_a_clear_cached_choice_is_kept_after_one_short_check() -> None:
    # 1.00 +- 0.01 against 1.05 +- 0.02 (runner-up), 1.20 and 1.10 +- 0.03: every rival clear by > both spreads
    check = {CANDS[2].name: (1.00, 0.01), CANDS[1].name: (1.05, 0.02),
             "baseline": (1.20, 0.03), "fused-ref": (1.10, 0.03)}
    timer = FakeSpreadTimer(check)
    got = autotune.confirm(CANDS[2], FINALISTS, BASES, timer)
    assert timer.asked == [([CANDS[2].name, CANDS[1].name, *BASES], autotune.CONFIRM_REPS[0])]
    assert got.choice == CANDS[2] and got.close_to == [] and got.record()["retimed"] is False


def test_a_close_call_is_timed_again_with_every_finalist_and_the_fastest_finalist_wins() -> None:
    # fused-ref 1.03 +- 0.02 is within the cached choice's 1.00 +- 0.015 (gap 0.03 <= 0.035): a close call
    check = {CANDS[2].name: (1.00, 0.015), CANDS[1].name: (1.10, 0.01),
             "baseline": (1.30, 0.02), "fused-ref": (1.03, 0.02)}
    # the longer, interleaved timing: the search's third finalist is fastest now; fused-ref (0.90) is company only
    again = {CANDS[2].name: (1.02, 0.01), CANDS[1].name: (1.01, 0.01), CANDS[4].name: (0.98, 0.01),
             "baseline": (1.30, 0.02), "fused-ref": (0.90, 0.01)}
    timer = FakeSpreadTimer(check, again)
    said: list[str] = []
    got = autotune.confirm(CANDS[2], FINALISTS, BASES, timer, progress=said.append)
    assert [a for a, _ in timer.asked] == [[CANDS[2].name, CANDS[1].name, *BASES],
                                          [CANDS[2].name, CANDS[1].name, CANDS[4].name, *BASES]]
    assert [r for _, r in timer.asked] == list(autotune.CONFIRM_REPS)
    assert got.choice == CANDS[4] and got.close_to == ["fused-ref"]
    rec = got.record()
    assert rec["retimed"] is True and rec["rounds_ms"][1]["fused-ref"] == [0.9, 0.01]
    assert "within the spread of fused-ref" in said[0]


def test_a_close_runner_up_or_a_faster_rival_is_a_close_call_too() -> None:
    # the runner-up 0.005 slower with spreads 0.004 + 0.002: close; a rival faster than the choice: close
    assert autotune.within_spread("a", {"a": (1.0, 0.004), "b": (1.005, 0.002), "c": (1.2, 0.01)}) == ["b"]
    assert autotune.within_spread("a", {"a": (1.0, 0.001), "b": (0.9, 0.001)}) == ["b"]
    assert autotune.within_spread("a", {"a": (1.0, 0.001), "b": (1.003, 0.001)}) == []
    # when the re-timing still has the cached choice fastest, it stays
    check = {CANDS[2].name: (1.0, 0.01), CANDS[1].name: (1.01, 0.01), "baseline": (2.0, 0.01)}
    again = {CANDS[2].name: (0.99, 0.01), CANDS[1].name: (1.01, 0.01), CANDS[4].name: (1.05, 0.01),
             "baseline": (2.0, 0.0)}
    got = autotune.confirm(CANDS[2], FINALISTS, ["baseline"], FakeSpreadTimer(check, again))
    assert got.choice == CANDS[2] and got.close_to == [CANDS[1].name]


def test_a_cached_choice_without_finalists_is_checked_against_the_baselines_alone() -> None:
    even = {SERIAL.name: (1.0, 0.01), "baseline": (1.0, 0.01)}
    timer = FakeSpreadTimer(even, even)
    got = autotune.confirm(SERIAL, [], ["baseline"], timer)
    assert timer.asked[0][0] == [SERIAL.name, "baseline"] and got.choice == SERIAL and got.close_to == ["baseline"]


def test_median_and_spread_of_chunked_samples() -> None:
    """The spread the rule compares: half the range of the chunk medians (chunks of 5 by default)."""
    pytest.importorskip("torch")
    from runners.timing import median_and_spread

    assert median_and_spread([1.0] * 5 + [3.0] * 5 + [2.0] * 5) == (2.0, 1.0)
    assert median_and_spread([1.0, 9.0, 2.0, 2.0, 2.0, 4.0, 4.0, 4.0, 0.0, 4.0]) == (3.0, 1.0)  # chunk medians 2, 4
    median, spread = median_and_spread([1.0, 2.0, 3.0])
    assert median == 2.0 and spread != spread  # one chunk: no spread (nan)


def test_cache_finalists_are_the_last_rounds_schedules_still_offered_fastest_first(tmp_path: Path) -> None:
    cache = TuneCache(tmp_path, "ag-gemm")
    last = {CANDS[1].name: 1.2, CANDS[2].name: 1.1, CANDS[4].name: 1.3}
    result = autotune.SearchResult(choice=CANDS[2], rounds=[{c.name: 9.0 for c in CANDS}, last], seconds=1, skipped={})
    cache.store("k", "fp", result)
    assert cache.finalists("k", CANDS) == [CANDS[2], CANDS[1], CANDS[4]]
    assert cache.finalists("k", [c for c in CANDS if c != CANDS[1]]) == [CANDS[2], CANDS[4]]
    assert cache.finalists("other", CANDS) == []


def test_cache_folder_follows_the_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(autotune.ENV_CACHE_DIR, str(tmp_path))
    assert autotune.cache_dir() == tmp_path / "tuning"


@pytest.mark.usefixtures("forked_ranks")
def test_tuned_run_searches_then_reuses_retunes_and_replaces_a_stale_choice(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """On 2 gloo processes through the launcher: the manifest records how the schedule was chosen."""
    pytest.importorskip("torch")
    from runners import launch

    monkeypatch.setenv(autotune.ENV_CACHE_DIR, str(tmp_path / "cache"))
    params = {"M": 64, "K": 32, "N": 16}

    def tuned(name: str, **extra: str) -> dict:
        res = launch.run("gemm-rs", "tuned", nproc=2, profiler="none", out=tmp_path / name,
                         params={**params, **extra}, timeout_s=240)
        return res.manifest

    first = tuned("first")
    rec = first["tuning"]
    assert rec["source"] == "search" and rec["cache_status"] == "miss"
    names = set(rec["rounds_ms"][0])
    assert {"serial", "p2p x2 prio-1 group"} <= names and rec["choice"]["name"] in names
    assert "serial" in rec["rounds_ms"][-1]  # the baseline schedule always reaches the final round
    assert first["workload"]["tuned_schedule"] == rec["choice"]["name"]
    cache_file = Path(rec["cache"])
    assert cache_file == tmp_path / "cache" / "tuning" / "gemm-rs.json" and rec["key"].startswith("gemm-rs|K=32,M=64")

    again = tuned("again")["tuning"]
    assert again["source"] == "cache" and again["cached_choice"] == rec["choice"]["name"] and "rounds_ms" not in again
    # confirmed in this run against the search's runner-up and both baselines, interleaved
    assert {"baseline", "fused-ref", rec["choice"]["name"]} <= set(again["confirm"]["rounds_ms"][0])
    assert again["choice"]["name"] in rec["rounds_ms"][-1]

    forced = tuned("forced", tune="retune")["tuning"]
    assert forced["source"] == "search" and forced["cache_status"] == "retune"

    doc = json.loads(cache_file.read_text())
    doc["entries"][rec["key"]]["fingerprint"] = "made-by-older-code"
    cache_file.write_text(json.dumps(doc))
    stale = tuned("stale")["tuning"]
    assert stale["source"] == "search" and stale["cache_status"] == "stale"
    assert json.loads(cache_file.read_text())["entries"][rec["key"]]["fingerprint"] != "made-by-older-code"

    fixed = tuned("fixed", tune="off", steps="8")
    assert fixed["tuning"]["source"] == "parameters (tune=off)"
    assert fixed["tuning"]["choice"]["name"] == "p2p x8 prio-1 group"
    assert fixed["launch"]["reproduce"] == ("overlapscope run gemm-rs --variant tuned --profiler none "
                                            "M=64 K=32 N=16 steps=8 tune=off")


@pytest.mark.usefixtures("forked_ranks")
def test_gemm_rs_operand_exchange_is_offered_where_it_moves_less_and_passes_the_check(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sending operands (A rows + B shard) instead of output blocks: offered only where it moves less; correct."""
    pytest.importorskip("torch")
    from runners import launch
    from runners.gemm_rs_tuned import inputs_move_less

    class Shape:
        def __init__(self, M: int, K: int, N: int, D: int = 2) -> None:
            self.M, self.N, self.D, self.kp = M, N, D, K // D

    assert inputs_move_less(Shape(8192, 4096, 32768))  # 4096*2048 + 2048*32768 < 4096*32768
    assert not inputs_move_less(Shape(4096, 32768, 4096))  # the B shard alone outweighs the output block
    monkeypatch.setenv(autotune.ENV_CACHE_DIR, str(tmp_path / "cache"))
    res = launch.run("gemm-rs", "tuned", nproc=2, profiler="none", out=tmp_path / "run",
                     params={"M": 64, "K": 8, "N": 64}, timeout_s=240)
    rec = res.manifest["tuning"]
    assert "p2p x1 prio-1 inputs" in rec["rounds_ms"][0]  # built, checked against the baseline, timed
    assert not any("inputs" in str(s) for s in rec.get("skipped", []))


def test_round_order_is_the_same_on_every_rank_and_varies_who_goes_first():
    """Every rank must time the same callable at the same moment (their barriers meet), and no
    callable may always follow the same other one (what ran just before a chunk moves its time)."""
    from runners.timing import round_order  # imports torch (the runners' extra, installed for the tests)

    kinds = ["tuned", "baseline", "fused-ref", "gemm", "comm"]
    rounds = [round_order(kinds, i) for i in range(10)]  # 50 iterations in chunks of 5
    assert rounds == [round_order(list(kinds), i) for i in range(10)]  # deterministic per round index
    assert all(sorted(r) == sorted(kinds) for r in rounds)  # each round times every kind once
    assert kinds == ["tuned", "baseline", "fused-ref", "gemm", "comm"]  # the caller's list is untouched
    sequence = [k for r in rounds for k in r]
    before = {k: {a for a, b in itertools.pairwise(sequence) if b == k} for k in kinds}
    assert all(len(v) >= 3 for v in before.values()), before
    assert len({tuple(r) for r in rounds}) >= 8
