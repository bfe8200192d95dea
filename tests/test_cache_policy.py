"""The expert cache's eviction order, warm start and dense-pass prefetch, on caches built call by call and at the
real model's counts (40 layers × 256 experts, 8,860 slots) through `runtime/cache_sim.py`, which drives the
real `ExpertCache` with tiny slabs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from clover_local.runtime import cache_sim
from clover_local.runtime.cache_sim import SimConfig, simulate
from clover_local.runtime.expert_cache import dense_rows


def e(*x: int) -> np.ndarray:
    return np.array(x, dtype=np.int64)


def small_cache(slots: int, layers: int = 4, experts: int = 8):
    return cache_sim._cache(SimConfig(layers=layers, experts=experts, slots=slots))


def fill(ec, layers: range, experts: np.ndarray) -> None:
    for layer in layers:
        ec.acquire(layer, experts, np.ones(experts.size, dtype=np.int64))
        ec.release()


def test_evicts_the_layer_needed_last_in_the_sweep():
    """Block b used experts 0–2 of layers 0–3. Block b+1 at layer 1 needs a fourth expert: its layer-0 experts are
    pinned again, so an unpinned one goes — layer 3's (needed after layer 2), not layer 2's, which
    least-recently-used would pick (layer 2 was used before layer 3 in block b) and need right away."""
    ec = small_cache(12)
    fill(ec, range(4), e(0, 1, 2))
    ec.end_block()
    fill(ec, range(1), e(0, 1, 2))
    acq = ec.acquire(1, e(0, 1, 2, 3), np.ones(4, dtype=np.int64))
    ec.release()
    assert (acq.slots >= 0).all()
    assert (ec.slot_of[2, [0, 1, 2]] >= 0).all() and (ec.slot_of[0, [0, 1, 2]] >= 0).all()
    assert (ec.slot_of[3, [0, 1, 2]] < 0).sum() == 1


def test_older_blocks_go_before_the_last_one():
    ec = small_cache(12)
    fill(ec, range(2, 3), e(5, 6))  # block b−1: layer 2's experts 5, 6
    ec.end_block()
    fill(ec, range(4), e(0, 1))  # block b: layers 0–3, then 2 more of layer 3
    fill(ec, range(3, 4), e(4, 5))
    ec.end_block()
    fill(ec, range(1), e(0, 1))
    ec.acquire(1, e(0, 1, 2), np.ones(3, dtype=np.int64))  # a miss: the cache is full
    ec.release()
    assert (ec.slot_of[2, [5, 6]] < 0).sum() == 1  # block b−1's, though layer 2 comes up next
    assert (ec.slot_of[3] >= 0).sum() == 4


def test_dense_pass_ignores_pins_and_evicts_what_it_just_swept():
    """A prefill chunk needs every expert again in the next chunk: at layer 1 the expert of layer 0 (swept,
    needed last) goes, not layer 2's (unpinned, needed next). Outside a dense pass the pin protects layer 0."""
    for dense, gone in ((True, 0), (False, 2)):
        ec = small_cache(12)
        fill(ec, range(3), e(0, 1, 2, 3))
        ec.end_block()
        ec.begin_pass(dense)
        fill(ec, range(1), e(0, 1, 2, 3))
        ec.acquire(1, e(0, 1, 2, 3, 4), np.ones(5, dtype=np.int64))
        ec.release()
        ec.end_pass()
        assert not ec.dense
        assert (ec.slot_of[gone, [0, 1, 2, 3]] < 0).sum() == 1
        assert (ec.slot_of[2 - gone, [0, 1, 2, 3]] >= 0).all()


def test_dense_pass_prefetches_the_whole_next_layer():
    ec = small_cache(20)
    assert ec.prefetch(1, e()) == 0  # no prediction, not dense: nothing
    ec.begin_pass(True)
    assert ec.prefetch(1, e()) == 8 and (ec.slot_of[1] >= 0).all()
    assert ec.counters[1].prefetched == 8
    ec.end_pass()


def test_prefetch_never_trades_a_layer_expert_for_another():
    """A tight cache in a dense pass: layer 0's call holds 4 slots, the other 2 hold layer 1's experts; the
    prefetch of layer 1 finds no room that is not layer 1's own, so it copies nothing (no churn)."""
    ec = small_cache(6, layers=2)
    fill(ec, range(1, 2), e(0, 1))
    ec.begin_pass(True)
    ec.acquire(0, e(0, 1, 2, 3), np.ones(4, dtype=np.int64))  # locked while it runs
    assert ec.prefetch(1, e()) == 0
    assert (ec.slot_of[1, [0, 1]] >= 0).all() and ec.counters[1].prefetched == 0
    ec.release()
    ec.end_pass()


def test_a_prefetch_into_a_pinned_slot_is_not_pinned():
    """In a dense pass a prefetch may take a slot an expert of this pass pinned; the expert it loads there has not
    been used, so it must not inherit the pin (it would count as the block's and as a pinned eviction later)."""
    ec = small_cache(12)
    ec.begin_pass(True)
    fill(ec, range(3), e(0, 1, 2, 3))  # 12 slots, all pinned to this pass
    assert ec.prefetch(3, e()) == 8
    loaded = ec.slot_of[3][ec.slot_of[3] >= 0]
    assert loaded.size == 8 and not (ec.pin_gen[loaded] == ec.gen).any()
    ec.end_pass()


def test_warm_fills_the_slots_in_sweep_order_once():
    ec = small_cache(20)
    assert ec.warm() == 20
    assert (ec.slot_of[0] >= 0).all() and (ec.slot_of[1] >= 0).all() and (ec.slot_of[2, :4] >= 0).all()
    assert (ec.slot_of[2, 4:] < 0).all() and (ec.slot_of[3] < 0).all()
    assert ec.resident() == 20 and sum(c.bytes + c.misses for c in ec.counters.values()) == 0
    for layer in range(2):  # the host slab's bytes, in the slot the table names
        ec.host.buffers[layer].random_(0, 255)
    ec2 = small_cache(20)
    ec2.host = ec.host
    ec2.warm()
    assert ec2.buf[int(ec2.slot_of[1, 5])].equal(ec.host.slab(1, 5))
    assert ec2.warm() == 0  # not empty any more


def test_dense_rows_rule():
    assert dense_rows(512, 8, 256) and dense_rows(128, 8, 256)
    assert not dense_rows(32, 8, 256) and not dense_rows(127, 8, 256)


@pytest.fixture(scope="module")
def full_scale():
    return simulate(SimConfig(blocks=4, passes=4, prefix=8192)).to_dict()


def test_prefill_copies_only_what_does_not_fit(full_scale):
    """40 × 256 experts, 8,860 slots, uniform routing: every prefill pass (4,096 rows, each layer over them in
    512-row chunks) needs all 10,240 experts, so at least 1,380 copies a pass; the sweep order reaches that bound,
    and the prefetch (the whole next layer in a dense pass) makes them all copies no layer waits for.
    (Least-recently-used eviction, chunk after chunk: 1,736 a chunk, 10,360 of the 12,152 waited for.) The first
    pass too: the slots start warm."""
    deficit = 40 * 256 - 8860
    for phase in ("prefill_first_pass", "prefill_later_passes"):
        ph = full_scale[phase]
        assert ph["passes"] == 1 and ph["copies_per_pass"] == deficit, phase
        assert ph["demand"] == 0 and ph["wasted"] == 0, phase


def test_a_prefill_pass_layer_by_layer_copies_once_where_chunks_copy_once_each():
    """The same 4,096-token prompt chunk after chunk through every layer (span = chunk: 8 passes) copies the
    1,380 experts that do not fit once a chunk; layer by layer over the whole span, once: 8× less PCIe."""
    deficit = 40 * 256 - 8860
    by_chunk = simulate(SimConfig(blocks=1, passes=1, span=512)).to_dict()
    by_layer = simulate(SimConfig(blocks=1, passes=1)).to_dict()
    assert by_chunk["prefill_first_pass"]["passes"] + by_chunk["prefill_later_passes"]["passes"] == 8
    assert by_chunk["prefill_first_pass"]["copies"] + by_chunk["prefill_later_passes"]["copies"] == 8 * deficit
    assert by_layer["prefill_first_pass"]["copies"] == deficit and by_layer["prefill_later_passes"]["passes"] == 0
    assert by_layer["prefill_first_pass"]["demand"] == 0


def test_a_layer_major_pass_keeps_the_layer_in_progress_for_its_next_chunk():
    """A prompt's pass that goes layer by layer stays at a layer for several chunks: the next layer's prefetch,
    started with the first chunk, must not evict the layer's experts its next chunk needs. Sweep order alone
    (the pass chunk after chunk through every layer) ranks them last-needed and evicts them first."""
    for layer_major in (True, False):
        ec = small_cache(12)
        ec.warm()  # layer 0's 8 experts, layer 1's first 4
        ec.begin_pass(True, layer_major=layer_major)
        ec.acquire(0, e(0, 1, 2, 3), np.ones(4, dtype=np.int64))  # layer 0, first chunk
        copied = ec.prefetch(1, e())  # (dense: all of layer 1)
        ec.release()
        before = ec.counters[0].misses
        ec.acquire(0, e(4, 5, 6, 7), np.ones(4, dtype=np.int64))  # layer 0, next chunk
        ec.release()
        ec.end_pass()
        missed = ec.counters[0].misses - before
        if layer_major:
            assert (copied, missed) == (0, 0)  # its only unlocked slots were layer 0's: nothing taken
        else:
            assert (copied, missed) == (4, 4)  # layer 0's 4–7 went for layer 1's 4–7, then came back
    assert not ec.layer_major and not ec.dense


def test_block_first_pass_copies_near_the_random_bound(full_scale):
    """A block's first pass needs ≈ 6,480 experts drawn afresh; with the last block's set resident and the rest
    of the slots spread over the others, ≈ 6,480 × 1,380 / 10,240 ≈ 873 of them are absent; the later blocks'
    first passes (replays that `repair`) copy about that. The first block's is a syncing pass whose prefetch
    predicts from the prefill's history (every expert of the next layer): it copies the 1,380 absent ones."""
    expected = 6480 * (40 * 256 - 8860) / (40 * 256)
    first = full_scale["first_pass_each"]
    assert len(first) == 4 and first[0] == 40 * 256 - 8860
    assert max(first[1:]) <= 1.15 * expected
    assert full_scale["block_later_passes"]["copies_per_pass"] < 0.1 * expected


def test_a_block_with_fixed_routing_loads_its_set_once():
    """No rows rerouted between passes: every later pass and the commit find the whole block set resident (it
    is pinned); with 3 rows rerouted a pass (the tokens revealed), nearly every later pass misses a few."""
    fixed = simulate(SimConfig(blocks=2, passes=4, prefix=512, drift=0.0)).to_dict()
    for phase in ("block_later_passes", "commit"):
        assert fixed[phase]["copies"] == 0 and fixed[phase]["missed"] == 0, phase
    moving = simulate(SimConfig(blocks=2, passes=4, prefix=512, drift=3 / 32)).to_dict()
    assert moving["block_later_passes"]["missed"] >= 6  # of 8


def test_cache_sim_cli(capsys):
    assert cache_sim.main(["--slots", "300", "--layers", "8", "--experts", "64", "--prefix", "1024", "--span",
                           "512", "--blocks", "2", "--passes", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["config"]["slots"] == 300 and out["prefill_later_passes"]["passes"] == 1
    assert out["prefill_later_passes"]["pcie_bytes_per_pass"] == int(
        out["prefill_later_passes"]["copies_per_pass"] * cache_sim.REAL_SLAB)
    assert cache_sim.main(["--slots", "10", "--experts", "64"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "slots must be between" in err


def test_host_reads_end_the_repair_replays():
    """3 rows rerouted a pass: without host reads nearly every later pass misses and replays twice; with them no
    pass repairs, what they lacked is read in place (as many as the repairs copied) and installed, and the
    replay path's derived ms per later pass falls (one replay each, the PCIe bytes of read and install)."""
    kw = dict(blocks=2, passes=4, prefix=512, drift=3 / 32)
    repair = simulate(SimConfig(**kw)).to_dict()["block_later_passes"]
    read = simulate(SimConfig(host_reads=True, **kw)).to_dict()["block_later_passes"]
    assert repair["missed"] >= 6 and repair["host_read"] == 0
    assert read["missed"] == read["demand"] == 0 and read["host_read"] > 0
    assert 0.8 * repair["demand"] <= read["host_read"] <= 1.25 * repair["demand"]
    assert read["prefetched"] >= 0.9 * read["host_read"]  # installed after the pass
    assert read["replay_path_ms_per_pass"] < repair["replay_path_ms_per_pass"] - 0.5 * cache_sim.REPLAY_MS


def test_merged_commits_read_fewer_experts_and_copy_less():
    """`--merge-commits`: every commit but the last block's is one pass with the next block's first preview;
    that pass uses the union of the two passes' experts (fewer than both together) and copies less than they
    did, and the blocks' later passes copy about as much as without it."""
    kw = dict(layers=8, experts=64, top_k=4, slots=400, blocks=4, passes=4, prefix=512, drift=3 / 32)
    apart = simulate(SimConfig(**kw)).to_dict()
    merged = simulate(SimConfig(merge_commits=True, **kw)).to_dict()
    assert apart["merged"]["passes"] == 0 and merged["merged"]["passes"] == 3
    assert merged["commit"]["passes"] == merged["block_first_pass"]["passes"] == 1
    assert len(merged["first_pass_each"]) == 4
    two = apart["block_first_pass"]["distinct_per_pass"] + apart["commit"]["distinct_per_pass"]
    assert apart["block_first_pass"]["distinct_per_pass"] < merged["merged"]["distinct_per_pass"] < 0.9 * two
    later_firsts = sum(apart["first_pass_each"][1:]) / 3 + apart["commit"]["copies_per_pass"]
    assert merged["merged"]["copies_per_pass"] < later_firsts
    assert merged["block_later_passes"]["copies_per_pass"] <= 1.5 * apart["block_later_passes"]["copies_per_pass"] + 2


def test_pinned_offers_stop_a_tight_cache_rereading_the_rows_new_experts(monkeypatch):
    """A cache that barely holds a block's set (400 of 512 experts, 3 of 32 rows rerouted a pass): with
    read-through the rows' new experts take the slots of experts the
    pass no longer uses — the layer before's unpinned ones, then what earlier layers left over, then its pinned
    ones — so later passes read fewer experts from the host than if only the unpinned could be taken, which is
    what an offer table without the pinned tier (as before 2026-12-03) gives."""
    import torch

    from clover_local.runtime.expert_cache import ExpertCache

    kw = dict(layers=8, experts=64, top_k=4, slots=400, blocks=3, passes=8, prefix=512, drift=3 / 32,
              host_reads=True, read_through=True, merge_commits=True)
    now = simulate(SimConfig(**kw)).to_dict()["block_later_passes"]
    real = ExpertCache.offer_slots

    def unpinned_only(self):
        table = real(self)
        self.offers[self.offers <= -2] = -1
        table.copy_(torch.from_numpy(self.offers))
        return table

    monkeypatch.setattr(ExpertCache, "offer_slots", unpinned_only)
    before = simulate(SimConfig(**kw)).to_dict()["block_later_passes"]
    assert now["read_through"] > before["read_through"]
    assert now["host_read"] < 0.9 * before["host_read"] and now["pcie_ms_per_pass"] < before["pcie_ms_per_pass"]


def test_jitter_moves_every_rows_choices_at_the_margin():
    """`--jitter`: every row's scores step a little each pass, so later passes use experts the block had not
    (more reads from the host) where without it only the rerouted rows do; the first block's first pass is the
    same."""
    kw = dict(layers=8, experts=64, top_k=4, slots=400, blocks=2, passes=6, prefix=512, drift=3 / 32,
              host_reads=True, read_through=True)
    calm, moving = (simulate(SimConfig(jitter=j, **kw)).to_dict() for j in (0.0, 0.3))
    assert moving["block_later_passes"]["host_read"] > 1.1 * calm["block_later_passes"]["host_read"]
    assert moving["first_pass_each"][0] == calm["first_pass_each"][0]  # before any pass moved


def test_within_a_layer_and_block_the_least_recently_used_goes_first():
    """Among unpinned experts of one layer from the same block (same tier, same distance in the sweep), the one
    used longest ago goes first. Layer 2's experts 0–3 used one call each, in a shuffled order, then one of them
    again; a later block's miss in layer 2 evicts exactly the least recently used one."""
    rng = np.random.default_rng(7)
    for _ in range(5):
        ec = small_cache(4)
        order = rng.permutation(4)
        for x in order:
            ec.acquire(2, e(int(x)), np.ones(1, dtype=np.int64))
            ec.release()
        again = int(order[0])  # the oldest, used once more: now the most recent
        ec.acquire(2, e(again), np.ones(1, dtype=np.int64))
        ec.release()
        ec.end_block()
        ec.acquire(2, e(4), np.ones(1, dtype=np.int64))
        ec.release()
        lru = int(order[1])
        assert ec.slot_of[2, lru] < 0
        assert (ec.slot_of[2, [int(x) for x in order if x != lru]] >= 0).all()


def test_an_expert_repair_loaded_counts_as_a_miss_when_the_syncing_path_uses_it():
    """`repair` copies what a pass lacked; each is a miss when the rerun uses it (here through `acquire`, the
    syncing path, rather than `commit_uses`), and one the rerun does not use is a copy, not a miss
    (`repair_unused`: booked as a miss, it made misses outnumber the uses' share). Once the pass is over
    (`end_pass`), a later pass's use of one it loaded is an ordinary hit."""
    ec = small_cache(12)
    counts = np.zeros((ec.layer_ids.size, ec.n_experts), dtype=np.int64)
    counts[1, [2, 5, 6]] = [3, 1, 2]
    assert ec.repair(counts) == 3
    c = ec.counters[1]
    assert (c.uses, c.hits, c.misses, c.copied) == (0, 0, 0, 3)
    ec.acquire(1, e(2, 7), np.ones(2, dtype=np.int64))  # one repaired, one new miss; 5 and 6 not used
    ec.release()
    assert (c.uses, c.hits, c.misses, c.copied) == (2, 0, 2, 4)
    ec.end_pass()
    assert c.repair_unused == 2 and c.misses == c.copied - c.repair_unused + c.cpu_runs
    ec.acquire(1, e(2, 5, 6, 7), np.ones(4, dtype=np.int64))  # the next pass: all four resident
    ec.release()
    assert (c.uses, c.hits, c.misses) == (6, 4, 2) and c.hits + c.misses == c.uses


def test_auto_cpu_policy_copies_the_busiest_misses_and_runs_light_ones_on_the_cpu():
    """`cpu_experts="auto"`: misses take the free or unpinned slots in order of their rows (most first); past
    those, a miss with at most `cpu_max_rows` rows runs on the CPU instead of evicting a pinned expert of the
    block, and a busier one is still copied."""
    import torch

    from clover_local.runtime.expert_cache import ExpertCache
    from clover_local.runtime.expert_store import HostExpertStore

    layers = list(range(4))
    host = HostExpertStore(cache_sim.TINY_SLAB, layers, 8, pin=False)
    ec = ExpertCache(cache_sim.TINY_SLAB, 4, layers, 8, torch.device("cpu"), host, cpu_experts="auto",
                     cpu_max_rows=2)
    fill(ec, range(1), e(0, 1, 2))  # 3 slots pinned to the block, 1 free
    acq = ec.acquire(1, e(3, 4, 5, 6), e(2, 5, 1, 3))
    ec.release()
    on_cpu = {int(x) for x, s in zip(acq.experts, acq.slots) if s < 0}
    assert on_cpu == {3, 5}  # 2 rows (= cpu_max_rows) and 1 row
    assert (ec.slot_of[1, [4, 6]] >= 0).all() and (ec.slot_of[1, [3, 5]] < 0).all()
    c = ec.counters[1]
    assert (c.misses, c.copied, c.cpu_runs, c.pinned_evictions) == (4, 2, 2, 1)
    assert (ec.slot_of[0, [0, 1, 2]] >= 0).sum() == 2  # expert 6 (3 rows) took one pinned slot, 4 the free one


def test_a_layer_major_miss_evicts_the_layer_done_not_the_one_in_progress():
    """In a layer-by-layer prompt pass a miss at layer 1 evicts layer 0's experts (that layer is done for this
    pass), never layer 1's own from its earlier chunk (the next chunk needs them first). A pass chunk after
    chunk through every layer ranks the other way: layer 1's own were just swept, needed last."""
    for layer_major in (True, False):
        ec = small_cache(12)
        ec.warm()  # layer 0's 8 experts, layer 1's first 4
        ec.begin_pass(True, layer_major=layer_major)
        ec.acquire(1, e(0, 1, 2, 3), np.ones(4, dtype=np.int64))  # layer 1, first chunk: hits
        ec.release()
        ec.acquire(1, e(4, 5), np.ones(2, dtype=np.int64))  # next chunk: two misses
        ec.release()
        ec.end_pass()
        assert (ec.slot_of[1, [4, 5]] >= 0).all()
        if layer_major:
            assert (ec.slot_of[1, :4] >= 0).all() and (ec.slot_of[0] < 0).sum() == 2
        else:
            assert (ec.slot_of[0] >= 0).all() and (ec.slot_of[1, :4] < 0).sum() == 2


def test_a_layer_major_prefetch_takes_the_done_layers_slots_for_the_next_layer():
    """Layer by layer at layer 1 (two of its slots locked by the call in progress): the prefetch of layer 2 takes
    its slots from layer 0, done for this pass, and copies the whole next layer; the in-progress layer's
    unlocked experts are neither taken nor do they crowd the choice out."""
    ec = small_cache(12)
    ec.warm()  # layer 0's 8, layer 1's 0–3
    ec.begin_pass(True, layer_major=True)
    ec.acquire(1, e(0, 1), np.ones(2, dtype=np.int64))
    assert ec.prefetch(2, e()) == 8
    ec.release()
    ec.end_pass()
    assert (ec.slot_of[2] >= 0).all() and (ec.slot_of[1, :4] >= 0).all() and (ec.slot_of[0] < 0).all()
    assert ec.counters[2].prefetched == 8


def test_a_commits_repair_may_take_the_slots_of_pinned_experts_it_did_not_use():
    """`repair(last_of_block=True)` (the block's commit replayed): the block's pinned experts the commit did not
    use may make room for what it lacked; a preview's repair may not, and refuses (None) instead."""
    ec = small_cache(4)
    fill(ec, range(1), e(0, 1, 2, 3))  # every slot pinned to the block
    counts = np.zeros((ec.layer_ids.size, ec.n_experts), dtype=np.int64)
    counts[0, 0] = 4  # had
    counts[1, [5, 6]] = [1, 2]  # lacked
    assert ec.repair(counts) is None
    assert (ec.slot_of[0, :4] >= 0).all() and (ec.slot_of[1] < 0).all()
    assert ec.repair(counts, last_of_block=True) == 2
    assert ec.missing(counts) == 0 and ec.slot_of[0, 0] >= 0
    assert (ec.slot_of[0, 1:4] < 0).sum() == 2
    assert (ec.pin_gen[ec.slot_of[[0, 1, 1], [0, 5, 6]]] == ec.gen).all()  # what the commit used stays pinned
    assert ec.counters[1].pinned_evictions == 0  # they were unpinned first: no pinned eviction booked


def test_a_prefetch_short_of_room_copies_the_most_likely_experts():
    """`prefetch` takes experts most likely first (the routing history's order); with room for only some of them
    (the rest of the slots pinned to the block), it copies the first ones, not the last."""
    ec = small_cache(4)
    fill(ec, range(1), e(0, 1))  # 2 slots pinned, 2 free
    assert ec.prefetch(2, e(5, 3, 7, 1)) == 2
    assert (ec.slot_of[2, [5, 3]] >= 0).all() and (ec.slot_of[2, [7, 1]] < 0).all()
    assert (ec.slot_of[0, [0, 1]] >= 0).all()
    assert ec.counters[2].prefetched == 2


def test_a_layer_major_prefetch_of_the_second_layer_leaves_the_first_layer_alone():
    """Layer by layer at layer 0 in a cache holding nothing else: the prefetch of layer 1 finds only layer 0's
    unlocked experts to evict, which its next chunk needs, so it copies nothing (the rule holds for the layer
    in progress whichever it is, the first one included)."""
    ec = small_cache(8)
    ec.warm()  # layer 0's 8 experts, nothing else
    ec.begin_pass(True, layer_major=True)
    ec.acquire(0, e(0, 1, 2, 3), np.ones(4, dtype=np.int64))  # layer 0, first chunk
    assert ec.prefetch(1, e()) == 0
    ec.release()
    before = ec.counters[0].misses
    ec.acquire(0, e(4, 5, 6, 7), np.ones(4, dtype=np.int64))  # layer 0, next chunk: all resident
    ec.release()
    ec.end_pass()
    assert ec.counters[0].misses == before and (ec.slot_of[0] >= 0).all() and (ec.slot_of[1] < 0).all()


def test_recover_gives_an_expert_owning_two_slots_one_and_frees_the_other():
    """`recover` rebuilds the tables from the slots' owners; an expert two slots claim (a stop between a load's
    bookkeeping steps) keeps one of them, the other is free again — not a slot lost to the cache for good."""
    ec = small_cache(8)
    fill(ec, range(1), e(0, 1, 2))
    free = int(np.flatnonzero(ec.owner < 0)[0])
    ec.owner[free] = ec.owner[ec.slot_of[0, 1]]  # expert 1 of layer 0 claimed by a second slot
    ec.recover()
    assert ec.resident() == 3 and (ec.owner >= 0).sum() == 3
    for x in (0, 1, 2):
        assert ec.owner[ec.slot_of[0, x]] == x
    ec.acquire(1, e(0, 1, 2, 3, 4), np.ones(5, dtype=np.int64))  # exactly the 5 free slots
    ec.release()
    assert (ec.slot_of[0, [0, 1, 2]] >= 0).all() and (ec.slot_of[1, :5] >= 0).all()
    assert ec.counters[1].pinned_evictions == 0 and np.unique(ec.owner[ec.owner >= 0]).size == 8
