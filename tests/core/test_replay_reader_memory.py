"""The recording reader holds what the fleet's size calls for, not what the recording's
length does: GPUs read as lost and back again, episode after episode over a long churned
recording, are counted, and only the few the summary names are kept."""

from __future__ import annotations

from fleetwatch.recorded_reading import Reading
from fleetwatch.recorded_ticks import LostState, TickStats, mark_lost, note_lost, to_ticks

STEP = 15.0


def spell(start: float, ticks: int, gone: range) -> Reading:
    """One node's 4 GPUs for ``ticks`` ticks from ``start``; GPUs 1..3 silent in ``gone``
    (tick numbers)."""
    out = Reading()
    for t in range(ticks):
        for gpu in range(4):
            if gpu == 0 or t not in gone:
                out.put(start + STEP * t, "n0", gpu, "gpu_temp_c", 60.0)
    return out


def streamed_notes(parts: int) -> tuple[LostState, list[str]]:
    """``parts`` chunks of 60 ticks, each with the node's GPUs 1..3 gone for 30 ticks
    (7.5 min: read as lost) and back."""
    state, notes = LostState(), Reading()
    for p in range(parts):
        part = spell(1e9 + 60 * STEP * p, 60, range(10, 40))
        mark_lost(part, state)
    note_lost(notes, state)
    return state, notes.notes


def test_lost_episodes_are_counted_not_kept() -> None:
    state, notes = streamed_notes(200)
    assert len(state.episodes) <= 5
    (note,) = notes
    assert note.count("until it came back") == 5 and "; and 595 more" in note  # 200 x 3 episodes


def test_the_note_is_the_same_as_a_whole_read() -> None:
    whole = Reading()
    for p in range(8):
        for key, per_gpu in spell(1e9 + 60 * STEP * p, 60, range(10, 40)).samples.items():
            whole.samples[key] = per_gpu
    mark_lost(whole)  # the whole-file read: its own state, its note at once
    assert streamed_notes(8)[1] == whole.notes


def test_tick_steps_keep_what_the_note_says() -> None:
    stats = TickStats()
    for k in range(300):  # a node's series a little apart, its interval jittered each part
        out = Reading()
        step = 15.0 + k / 1000
        for t in range(6):
            out.put(1e9 + step * t, "n0", 0, "gpu_temp_c", 60.0)
            out.put(1e9 + step * t + 0.2, "n0", 1, "gpu_temp_c", 60.0)
        to_ticks(out, stats)
    assert min(stats.steps) == 15.0 and abs(max(stats.steps) - 15.299) < 1e-6
    assert len(stats.steps) <= 2


def test_nodes_with_nothing_lost_keep_no_empty_entries() -> None:
    state = LostState()
    for k in range(100):  # a pool that scales: a new node name each part, none lost
        part = Reading()
        for t in range(4):
            for gpu in range(2):
                part.put(1e9 + STEP * (4 * k + t), f"node-{k}", gpu, "gpu_temp_c", 60.0)
        mark_lost(part, state)
    assert not state.since and not state.off_bus
    # A GPU still lost at the end is kept, and named.
    state = LostState()
    mark_lost(spell(2e9, 60, range(30, 60)), state)
    assert list(state.since) == ["n0"] and set(state.since["n0"]) == {1, 2, 3}
    notes = Reading()
    note_lost(notes, state)
    assert notes.notes[0].count("to the end") == 3
