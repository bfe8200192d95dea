"""Reusing the last generation's prompt prefill (generate/prompt_cache.py): a resumed turn decodes exactly the
tokens a fresh one does (greedy), on a tiny random checkpoint, the offloading runtime's preallocated caches and
the shipped tiny model; the reused count is the saved block-aligned prefix or 0; a prompt that diverges inside
it, another model, or a runtime arena taken over by a newer cache fall back to a fresh cache; a generation that
raises leaves nothing saved, and chat and serve go on across a failed turn. fp32 on CPU."""

from __future__ import annotations

import io
import json

import pytest
import torch

from clover_local.generate.block_diffusion import BlockDiffusionDecoder, DecodeSettings
from clover_local.generate.events import BlockCommitted, Finished, PassDone, PrefillProgress
from clover_local.generate.prompt_cache import PromptCache
from clover_local.loader import load
from clover_local.model.cache import AttentionCache, GDNCache, PrefixCache
from clover_local.runtime.load import RuntimeOptions
from runtime_pack import tiny_pack

BS = 8  # TinySpec's block size


@pytest.fixture
def loaded(make_checkpoint):
    return load(str(make_checkpoint(seed=31)), "cpu", "float32")


@pytest.fixture(scope="module")
def offloaded(tmp_path_factory, tokenizer_dir):
    """The tiny GPTQ pack through the runtime: its KV arena preallocated, fewer expert slots than experts."""
    pack = tiny_pack(tmp_path_factory, tokenizer_dir)
    return load(str(pack), "cpu", "float32", runtime=RuntimeOptions(context=160, slots=12))


def ids(loaded, n: int, seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    out = torch.randint(0, loaded.config.vocab_size, (n,), generator=g).tolist()
    return [i if i != loaded.mask_token_id else 0 for i in out]


def decode(loaded, prompt: list[int], reuse: PromptCache | None = None, n: int = 12, **kw) -> Finished:
    dec = BlockDiffusionDecoder(loaded.model, loaded.mask_token_id)
    events = list(dec.generate(prompt, DecodeSettings(max_new_tokens=n, threshold=0.9, stop_token_ids=[]),
                               reuse=reuse, **kw))
    assert isinstance(events[-1], Finished)
    return events[-1]


def two_turns(loaded, first: list[int], then: list[int]) -> tuple[Finished, Finished, PromptCache]:
    """Turn 1 on `first`; turn 2 on `first + its answer + then`, resumed from turn 1's prefill."""
    pc = PromptCache()
    one = decode(loaded, first, pc)
    two = decode(loaded, first + one.token_ids + then, pc)
    return one, two, pc


# ---------------------------------------------------------------------------------------------- (a) + (b)


@pytest.mark.parametrize("shifted", [False, True])
def test_turn_two_resumed_equals_scratch(loaded, monkeypatch, shifted):
    monkeypatch.setattr(loaded.model.config.diffusion, "logits_shifted", shifted)
    first, then = ids(loaded, 21, 1), ids(loaded, 13, 2)
    one, two, pc = two_turns(loaded, first, then)
    assert one.stats.reused_tokens == 0
    assert two.stats.reused_tokens == 16 == pc.stats.last_reused  # turn 1's block-aligned prefill: 21 // 8 * 8
    prompt2 = first + one.token_ids + then
    assert two.token_ids == decode(loaded, prompt2).token_ids
    assert pc.saved_tokens == len(prompt2) // BS * BS  # saved again, at turn 2's prefill


@pytest.mark.parametrize("shifted", [False, True])
def test_the_same_prompt_again_reuses_the_whole_prefill(loaded, monkeypatch, shifted):
    """Nothing left to prefill: the first block's prediction comes from the saved last-row logits."""
    monkeypatch.setattr(loaded.model.config.diffusion, "logits_shifted", shifted)
    prompt, pc = ids(loaded, 24, 3), PromptCache()
    first = decode(loaded, prompt, pc)
    again = decode(loaded, prompt, pc)
    assert again.stats.reused_tokens == 24 and again.token_ids == first.token_ids
    assert decode(loaded, prompt, pc).token_ids == first.token_ids  # and once more (the snapshot was re-taken)


def test_offloaded_runtime_resumes_in_its_arena(offloaded):
    first, then = ids(offloaded, 21, 4), ids(offloaded, 13, 5)
    one, two, pc = two_turns(offloaded, first, then)
    assert two.stats.reused_tokens == 16
    prompt2 = first + one.token_ids + then
    scratch = decode(offloaded, prompt2)  # a new cache: the arena's keys/values are overwritten
    assert two.token_ids == scratch.token_ids
    three = decode(offloaded, prompt2 + scratch.token_ids + then, pc)
    assert three.stats.reused_tokens == 0  # the saved cache lost the arena: not resumed
    assert three.token_ids == decode(offloaded, prompt2 + scratch.token_ids + then).token_ids
    passes = offloaded.model.runtime.stats()["passes"]
    assert set(passes) >= {"prefill", "preview", "merged"}


def test_offloaded_runtime_resumes_from_the_same_prompt(offloaded):
    prompt, pc = ids(offloaded, 32, 6), PromptCache()
    first = decode(offloaded, prompt, pc, n=20)  # commits blocks past the save point, then is cut back
    again = decode(offloaded, prompt, pc, n=20)
    assert again.stats.reused_tokens == 32 and again.token_ids == first.token_ids


def test_reused_count_is_zero_when_the_prompt_does_not_extend(loaded):
    pc = PromptCache()
    decode(loaded, ids(loaded, 21, 7), pc)
    assert decode(loaded, ids(loaded, 30, 8), pc).stats.reused_tokens == 0
    short = PromptCache()
    decode(loaded, ids(loaded, 5, 9), short)  # shorter than a block: no prefill, nothing to save
    assert short.saved_tokens == 0
    assert decode(loaded, ids(loaded, 5, 9) + ids(loaded, 9, 10), short).stats.reused_tokens == 0


def test_a_shorter_prompt_is_not_resumed(loaded):
    """The saved point lies beyond the new prefill (a GDN state cannot be rewound): a fresh cache."""
    pc, prompt = PromptCache(), ids(loaded, 33, 11)
    decode(loaded, prompt, pc)
    fin = decode(loaded, prompt[:20], pc)
    assert fin.stats.reused_tokens == 0 and fin.token_ids == decode(loaded, prompt[:20]).token_ids


def test_another_model_is_not_resumed(loaded, offloaded):
    pc = PromptCache()
    prompt = ids(loaded, 17, 12)
    decode(loaded, prompt, pc)
    assert decode(offloaded, prompt, pc).stats.reused_tokens == 0


# ---------------------------------------------------------------------------------------------- (c)


def test_divergence_inside_the_saved_prefix_falls_back(loaded):
    first = ids(loaded, 21, 13)
    pc = PromptCache()
    one = decode(loaded, first, pc)
    changed = list(first)
    changed[5] = (changed[5] + 1) % loaded.mask_token_id
    prompt2 = changed + one.token_ids + ids(loaded, 9, 14)
    two = decode(loaded, prompt2, pc)
    assert two.stats.reused_tokens == 0
    assert two.token_ids == decode(loaded, prompt2).token_ids
    prompt3 = prompt2 + two.token_ids  # the fallback saved its own prefix: the next turn resumes from it
    three = decode(loaded, prompt3, pc)
    assert three.stats.reused_tokens == len(prompt2) // BS * BS
    assert three.token_ids == decode(loaded, prompt3).token_ids


def test_snapshot_at_saves_at_the_block_boundary_before_it(loaded):
    """A chat template's generation prompt may not come back next turn: save before it."""
    prompt, pc = ids(loaded, 29, 15), PromptCache()
    decode(loaded, prompt, pc, snapshot_at=19)
    assert pc.saved_tokens == 16
    prompt2 = prompt[:20] + ids(loaded, 14, 16)  # diverges after 20 tokens: inside the 24-token prefill
    two = decode(loaded, prompt2, pc, snapshot_at=30)
    assert two.stats.reused_tokens == 16 and two.token_ids == decode(loaded, prompt2).token_ids
    assert pc.saved_tokens == 24  # min(30, 34 // 8 * 8) rounded down to a block


# ---------------------------------------------------------------------------------------------- (d)


def test_a_generation_that_raises_leaves_nothing_saved(loaded, monkeypatch):
    pc, first = PromptCache(), ids(loaded, 21, 17)
    one = decode(loaded, first, pc)
    prompt2 = first + one.token_ids + ids(loaded, 11, 18)
    real, calls = loaded.model.forward, []

    def failing(ids_, cache=None, preview=False, rows=None):
        calls.append(preview)
        if not preview and len(calls) > 2:  # after the resumed prefill, at the first commit
            raise torch.OutOfMemoryError("CUDA out of memory")
        return real(ids_, cache, preview, rows)

    def failing_merged(*args, **kwargs):  # the first commit, merged with the next block's first preview
        raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(loaded.model, "forward", failing)
    monkeypatch.setattr(loaded.model, "commit_and_preview", failing_merged)
    with pytest.raises(torch.OutOfMemoryError):
        decode(loaded, prompt2, pc, n=20)
    monkeypatch.undo()
    assert pc.saved_tokens == 0
    again = decode(loaded, prompt2, pc)
    assert again.stats.reused_tokens == 0 and again.token_ids == decode(loaded, prompt2).token_ids


def test_stopping_early_keeps_the_saved_prefix(loaded):
    pc, prompt = PromptCache(), ids(loaded, 21, 19)
    dec = BlockDiffusionDecoder(loaded.model, loaded.mask_token_id)
    gen = dec.generate(prompt, DecodeSettings(max_new_tokens=30, stop_token_ids=[]), reuse=pc)
    for event in gen:
        if isinstance(event, BlockCommitted):
            break
    gen.close()
    assert pc.saved_tokens == 16
    fin = decode(loaded, prompt + ids(loaded, 6, 20), pc)
    assert fin.stats.reused_tokens == 16


def interrupted_answer(loaded, prompt: list[int], pc: PromptCache, monkeypatch, at: tuple[object, str],
                       after_passes: int) -> list[int]:
    """An answer to `prompt` that Ctrl-C stops mid-answer, as chat's does: KeyboardInterrupt raised inside the
    decoder (`DecodeThread.interrupt`), here from `at` (an object and the name of its method, which raises once
    `after_passes` preview passes ran). The tokens committed before it."""
    passes, out = [], []
    obj, name = at
    real = getattr(obj, name)

    def interrupting(*args, **kwargs):
        if len(passes) >= after_passes:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    dec = BlockDiffusionDecoder(loaded.model, loaded.mask_token_id)
    settings = DecodeSettings(max_new_tokens=40, threshold=0.9, stop_token_ids=[])
    with pytest.raises(KeyboardInterrupt):
        for event in dec.generate(prompt, settings, reuse=pc):
            if isinstance(event, PassDone):
                passes.append(event)
                if len(passes) == after_passes:
                    monkeypatch.setattr(obj, name, interrupting)
            elif isinstance(event, BlockCommitted):
                out += event.token_ids
    monkeypatch.setattr(obj, name, real)
    assert out, "interrupted before the first commit: not mid-answer"
    return out


def test_an_interrupted_answer_keeps_the_saved_prefix(loaded, monkeypatch):
    """Ctrl-C mid-answer is a stop, not a failure: the next prompt (which extends this one) resumes the prefill
    (it was saved before the answer began), and decodes what a fresh prefill does."""
    pc, first = PromptCache(), ids(loaded, 21, 23)
    model = loaded.model
    out = interrupted_answer(loaded, first, pc, monkeypatch, (model, "forward"), after_passes=6)
    assert pc.saved_tokens == 16
    prompt2 = first + out + ids(loaded, 9, 24)
    two = decode(loaded, prompt2, pc)
    assert two.stats.reused_tokens == 16 and pc.stats.hits == 1
    assert two.token_ids == decode(loaded, prompt2).token_ids


def test_an_answer_interrupted_inside_a_runtime_pass_keeps_the_saved_prefix(offloaded, monkeypatch):
    """The same with the offloading runtime, the interrupt landing inside a pass (in its MoE): the runtime
    abandons the pass, and the arena's saved prefix resumes as from a fresh prefill."""
    pc, first = PromptCache(), ids(offloaded, 21, 25)
    rt = offloaded.model.runtime
    out = interrupted_answer(offloaded, first, pc, monkeypatch, (rt, "run_experts"), after_passes=6)
    assert pc.saved_tokens == 16
    prompt2 = first + out + ids(offloaded, 9, 26)
    two = decode(offloaded, prompt2, pc)
    assert two.stats.reused_tokens == 16
    assert two.token_ids == decode(offloaded, prompt2).token_ids  # (after: a fresh cache takes the arena over)


# ---------------------------------------------------------------------------------------------- the cache


def test_restore_cuts_keys_values_and_puts_states_back(loaded):
    model = loaded.model
    cache = model.new_cache()
    with torch.inference_mode():
        model(torch.tensor([ids(loaded, 16, 21)]), cache)
        snap = cache.snapshot()
        states = [c.state.clone() for c in cache.layers if isinstance(c, GDNCache)]
        model(torch.tensor([ids(loaded, 8, 22)]), cache)
    assert cache.length == 24 and snap.nbytes > 0
    cache.restore(snap)
    assert cache.length == 16
    assert all(c.length == 16 for c in cache.layers if isinstance(c, AttentionCache))
    assert all(torch.equal(a, c.state) for a, c in zip(states, [c for c in cache.layers if isinstance(c, GDNCache)]))
    with pytest.raises(ValueError):
        PrefixCache.empty(model.config.layer_types).restore(snap)  # 16 tokens were never in that one


# ---------------------------------------------------------------------------------------------- front ends


def chat_app(loaded):
    from clover_local.chat.app import ChatApp
    from clover_local.chat.conversation import ChatSettings

    settings = ChatSettings(think=False, max_tokens=24)
    return ChatApp(loaded, "test", settings, interactive=False, out=io.StringIO())


def scratch_answer(app) -> list[int]:
    """What the last turn's prompt decodes to without reuse."""
    msgs = app.conv.template_messages()[:-1]
    prompt = app.tok.apply_chat_template(msgs, add_generation_prompt=True, enable_thinking=app.settings.think)
    s = app.settings
    settings = DecodeSettings(max_new_tokens=s.max_tokens, threshold=s.threshold,
                              stop_token_ids=app.loaded.stop_token_ids)
    return list(app.decoder.generate(app.tok.encode(prompt), settings))[-1].token_ids


def test_shipped_tiny_chat_resumes_each_turn(tiny, capsys):
    app = chat_app(tiny)
    app.ask("reverse a b c d e f g h i j k l m n o p")
    assert app.last.reused_tokens == 0
    app.ask("count a in a b a c a")
    assert app.last.reused_tokens > 0 and app.last.reused_tokens % tiny.config.diffusion.block_size == 0
    answer = app.conv.messages[-1]["content"]
    assert tiny.tokenizer.decode(scratch_answer(app)).lstrip("\n") == answer
    app.command("/stats")
    err = capsys.readouterr().err
    assert f"prompt reused: {app.last.reused_tokens} of {app.last.prompt_tokens} tokens" in err
    assert "prompt cache: 1 of 2 answers resumed" in err
    # the prompt's parts add up: reused + read (prefilled now) + the tail that opened the answer's first block
    bs = tiny.config.diffusion.block_size
    read, tail = app.last.prompt_tokens // bs * bs - app.last.reused_tokens, app.last.prompt_tokens % bs
    after = f" (+ {tail} in the answer's first block)" if tail else ""
    assert read > 1 and f"prompt read: {read} tokens{after}\n" in err


def test_chat_leaves_the_oldest_exchanges_out_once_the_context_is_outgrown(tiny, monkeypatch, capsys, tmp_path):
    """A conversation past the context (the answer would get less than max_tokens) is not refused: the model stops
    reading its oldest exchanges (chat/window.py, in steps), so the next turns keep the cut and go on reusing the
    prompt's prefill; the messages themselves stay (/save)."""
    ctx = 300
    monkeypatch.setattr(tiny.config, "max_position_embeddings", ctx)
    app = chat_app(tiny)  # max_tokens 24
    questions = iter(f"{'reverse' if i % 2 else 'count a in'} {' '.join('abcdefgh'[i % 5:])}" for i in range(60))
    while app.conv.left_out == 0:
        assert app.ask(next(questions)) is not None and app.conv.turns < 40
    err = capsys.readouterr().err
    left_out = app.conv.left_out
    assert (f"outgrew the context of {ctx} tokens: the model reads it from message {left_out + 1} on, its first "
            f"{left_out} messages left out") in err
    assert app.last.prompt_tokens + 24 <= ctx and app.last.reused_tokens == 0  # a new start: read anew
    read = app.conv.template_messages()
    assert read[0] == app.conv.messages[left_out] and read[0]["role"] == "user" and len(app.conv.messages) == \
        2 * app.conv.turns
    assert tiny.tokenizer.decode(scratch_answer(app)).lstrip("\n") == app.conv.messages[-1]["content"]
    app.ask(next(questions))
    assert app.conv.left_out == left_out and app.last.reused_tokens > 0  # the same start: resumed
    app.command("/stats")
    assert f"of {ctx} (the first {left_out} messages left out)" in capsys.readouterr().err
    app.command(f"/save {tmp_path / 'all.json'}")
    assert len(json.loads((tmp_path / "all.json").read_text())["messages"]) == len(app.conv.messages)
    kept = list(app.conv.messages)
    capsys.readouterr()
    assert app.ask("reverse " + "a b " * ctx) is None  # alone past the context: refused, nothing left out for it
    assert "fills the model's context of 300 tokens; shorten the message" in capsys.readouterr().err
    assert (app.conv.messages, app.conv.left_out) == (kept, left_out)


@pytest.mark.parametrize("frame", [5, 12])
def test_the_cut_stays_put_while_the_conversation_grows_by_less_than_a_step(frame):
    """chat/window.py's promise: the system message and the last question are always read, what is read fits, and
    the cut moves once a step of growth (a quarter of the room), not at every turn. `frame`: the tokens a template
    puts around each message — ChatML's 5, as `leave_out` estimates, or a longer frame, where the estimate falls
    short and `fit` leaves out an exchange more until the prompt fits."""
    from clover_local.chat.window import fit

    def length(messages: list[dict]) -> int:  # `frame` tokens a message's frame, one a character
        return sum(frame + len(m["content"]) for m in messages)

    renders: list[int] = []

    def render(messages: list[dict]) -> tuple[list[dict], list[int]]:  # (what was rendered in the prompt's place)
        renders[-1] += 1
        return messages, [0] * length(messages)

    conv, cuts = [{"role": "system", "content": "sys"}], []
    for i in range(60):
        conv.append({"role": "user", "content": "q" * (5 + i % 7)})
        renders.append(0)
        start, kept, ids = fit(conv, render, len, context=400, room=40)
        assert len(ids) == length(kept)
        assert kept[0] == conv[0] and kept[-1] is conv[-1] and length(kept) + 40 <= 400
        assert kept == conv if start == 0 else kept[1:] == conv[start:] and conv[start]["role"] == "user"
        cuts.append(start)
        conv.append({"role": "assistant", "content": "a" * 10})
    moves = sum(a != b for a, b in zip(cuts, cuts[1:]))
    # at most once a step (a quarter of the room: 90 tokens) of growth — a turn adds 2 frames, 8 and 10 characters
    # (moving at every turn, as a bare-minimum cut does: 47 of 60 moves)
    assert cuts == sorted(cuts) and cuts[0] == 0 < cuts[-1] and 0 < moves <= 60 * (2 * frame + 18) // 90, moves
    assert max(renders) <= 3, renders  # the frame measured: at most one step more than the estimate


def test_left_out_messages_keep_the_system_message_and_survive_undo_and_reset():
    from clover_local.chat.conversation import Conversation

    conv = Conversation(system="be brief")
    for i in range(3):
        conv.add_user(f"q{i}")
        conv.add_assistant(f"a{i}")
    conv.add_user("q3")
    conv.read_from(5)  # (ChatApp.ask: window.fit's cut, counted with the system message)
    assert conv.left_out == 4
    assert [m["content"] for m in conv.template_messages()] == ["be brief", "q2", "a2", "q3"]
    conv.set_system(None)
    assert [m["content"] for m in conv.template_messages()] == ["q2", "a2", "q3"]
    conv.left_out = 6
    assert conv.pop_exchange()[0]["content"] == "q3" and conv.template_messages() == [] and conv.left_out == 6
    conv.add_user("q4")
    assert [m["content"] for m in conv.template_messages()] == ["q4"]
    conv.reset()
    conv.add_user("q5")
    assert conv.left_out == 0 and [m["content"] for m in conv.template_messages()] == ["q5"]


def test_chat_goes_on_across_a_failed_turn(tiny, monkeypatch, capsys):
    app = chat_app(tiny)
    app.ask("reverse a b c d e f g h i j k l m n o p")
    real, state = tiny.model.forward, {"fail": True}

    def flaky(ids_, cache=None, preview=False, rows=None):
        if preview and state["fail"]:  # the first preview, after this turn's prefix was saved
            state["fail"] = False
            raise torch.OutOfMemoryError("CUDA out of memory")
        return real(ids_, cache, preview, rows)

    monkeypatch.setattr(tiny.model, "forward", flaky)
    assert app.ask("count b in a b b") is None  # failed: the conversation is as before it
    assert "ran out of memory" in capsys.readouterr().err
    assert len(app.conv.messages) == 2 and app.prompt_cache.saved_tokens == 0
    stats = app.ask("reverse x y z")
    assert stats is not None and stats.reused_tokens == 0  # nothing was left to resume
    assert tiny.tokenizer.decode(scratch_answer(app)).lstrip("\n") == app.conv.messages[-1]["content"]
    app.ask("count x in x y x")
    assert app.last.reused_tokens > 0


def test_chat_resumes_after_an_answer_stopped_with_ctrl_c(tiny, monkeypatch):
    """Ctrl-C mid-answer in the terminal chat (its live display, the decoder on its own thread, interrupted
    there) keeps the prompt's prefill: the next turn resumes it and answers as from scratch; /stats says so."""
    import time

    from rich.console import Console

    from clover_local.chat.app import ChatApp
    from clover_local.chat.conversation import ChatSettings
    from clover_local.chat.display import TurnView

    screen = io.StringIO()
    app = ChatApp(tiny, "test", ChatSettings(think=False, max_tokens=200), interactive=True,
                  console=Console(file=screen, force_terminal=True, width=80))
    real_forward, real_on_pass = tiny.model.forward, TurnView.on_pass
    state = {"passes": 0}

    def slow(ids_, cache=None, preview=False, rows=None):  # the decoder is mid-pass when Ctrl-C comes
        if preview:
            time.sleep(0.02)
        return real_forward(ids_, cache, preview, rows)

    def ctrl_c(view, ev):  # Ctrl-C at the consumer, on the fourth pass drawn
        state["passes"] += 1
        if state["passes"] == 4:
            raise KeyboardInterrupt
        real_on_pass(view, ev)

    monkeypatch.setattr(tiny.model, "forward", slow)
    monkeypatch.setattr(TurnView, "on_pass", ctrl_c)
    first = app.ask("reverse a b c d e f g h i j k l m n o p")
    monkeypatch.undo()
    assert first is not None and first.stop_reason == "cancelled" and "stopped (Ctrl-C)" in screen.getvalue()
    assert app.conv.messages[-1].get("interrupted") is True and app.prompt_cache.saved_tokens > 0
    second = app.ask("count a in a b a c a")
    assert second is not None and second.reused_tokens == app.prompt_cache.stats.last_reused > 0
    assert tiny.tokenizer.decode(scratch_answer(app)).lstrip("\n") == app.conv.messages[-1]["content"]
    app.command("/stats")
    assert "1 of 2 answers resumed" in screen.getvalue()


def test_serve_worker_resumes_consecutive_requests(tiny):
    from clover_local.chat.turn import history_tokens
    from clover_local.serve.engine import Engine, Job
    from clover_local.serve.protocol import usage

    engine = Engine(tiny, max_queue=4)
    tok = tiny.tokenizer

    def ask(messages: list[dict]) -> dict:
        text = tok.apply_chat_template(messages, enable_thinking=False)
        settings = DecodeSettings(max_new_tokens=24, threshold=0.9, stop_token_ids=tiny.stop_token_ids)
        job = Job(tok.encode(text), text, settings, history_tokens=history_tokens(tok, messages, enable_thinking=False))
        engine.submit(job)
        while True:
            kind, *rest = job.out.get(timeout=120)
            if kind == "done":
                return rest[0]
            assert kind == "delta", rest

    try:
        msgs = [{"role": "user", "content": "reverse a b c d e f g h i j k l m n o p"}]
        first = ask(msgs)
        assert first["cached_tokens"] == 0
        msgs += [{"role": "assistant", "content": first["content"]}, {"role": "user", "content": "count a in a b a"}]
        second = ask(msgs)
        assert second["cached_tokens"] > 0
        assert engine.health()["prompt_cache"]["hits"] == 1
        use = usage(second["prompt_tokens"], second["completion_tokens"], 0, {}, second["cached_tokens"])
        assert use["prompt_tokens_details"] == {"cached_tokens": second["cached_tokens"]}
    finally:
        engine.stop()


def test_a_long_prefill_reports_progress_and_counts_only_what_it_reads(offloaded, monkeypatch):
    """A prompt longer than one prefill pass (the runtime's `prefill_span` rows) comes with PrefillProgress
    events, before any preview pass; a resumed turn counts only the tokens it prefills; and the passes decode
    the tokens one pass over the whole prompt does."""
    settings = DecodeSettings(max_new_tokens=12, threshold=0.9, stop_token_ids=[])
    dec = BlockDiffusionDecoder(offloaded.model, offloaded.mask_token_id)
    first = ids(offloaded, 27, 5)  # 24 block-aligned tokens to prefill
    whole = dec.generate(first, settings)  # 512 rows a pass: one pass, no progress events
    whole_events = list(whole)
    assert not any(isinstance(e, PrefillProgress) for e in whole_events)

    assert offloaded.config.diffusion.block_size >= 8
    monkeypatch.setattr(offloaded.model.runtime, "prefill_span", 8)  # a prefill pass: 8 rows (whole: not over a
    monkeypatch.setattr(offloaded.model.runtime, "prefill_chunk", 4)  # block, so not layer by layer)
    pc = PromptCache()
    events = list(dec.generate(first, settings, reuse=pc))
    progress = [(e.done, e.total) for e in events if isinstance(e, PrefillProgress)]
    assert progress == [(0, 24), (8, 24), (16, 24), (24, 24)]
    assert all(isinstance(e, PrefillProgress) for e in events[:4]) and isinstance(events[4], PassDone)
    assert events[-1].token_ids == whole_events[-1].token_ids

    second = first + events[-1].token_ids + ids(offloaded, 13, 6)  # 52 tokens: 48 to prefill, 24 of them reused
    events = list(dec.generate(second, settings, reuse=pc))
    assert [(e.done, e.total) for e in events if isinstance(e, PrefillProgress)] == [
        (0, 24), (8, 24), (16, 24), (24, 24)]
    assert events[-1].stats.reused_tokens == 24
    assert events[-1].token_ids == decode(offloaded, second).token_ids  # as from scratch (8-row passes too)


def test_a_prefill_pass_layer_by_layer_reports_progress_after_each_layer(offloaded, monkeypatch):
    """One prefill pass that goes layer by layer (longer than a chunk and a block) is seconds of work at 35B: it
    reports progress after each layer (its rows counted in proportion), and decodes what it did before."""
    settings = DecodeSettings(max_new_tokens=12, threshold=0.9, stop_token_ids=[])
    dec = BlockDiffusionDecoder(offloaded.model, offloaded.mask_token_id)
    prompt = ids(offloaded, 67, 7)  # 64 block-aligned tokens to prefill
    whole = decode(offloaded, prompt)
    rt, layers = offloaded.model.runtime, offloaded.config.num_hidden_layers
    assert layers == 4 and 64 > offloaded.config.diffusion.block_size
    monkeypatch.setattr(rt, "prefill_span", 64)
    monkeypatch.setattr(rt, "prefill_chunk", 16)  # one pass, each layer over the 64 rows 16 at a time
    before = len([r for r in rt.records if r.kind == "prefill"])
    events = list(dec.generate(prompt, settings))
    progress = [(e.done, e.total) for e in events if isinstance(e, PrefillProgress)]
    assert progress == [(0, 64), (16, 64), (32, 64), (48, 64), (64, 64)]
    assert all(isinstance(e, PrefillProgress) for e in events[:5]) and isinstance(events[5], PassDone)
    assert [r.rows for r in rt.records if r.kind == "prefill"][before:] == [64]  # one pass
    assert events[-1].token_ids == whole.token_ids


def test_a_stop_during_a_long_prefill_runs_no_further_pass(offloaded, monkeypatch):
    """`decode_events` asks `should_stop()` after each prefill pass too (a serve client that went away while its
    30K-token prompt was being read): no pass runs after the stop, and nothing half-read is kept for reuse."""
    from clover_local.chat.turn import decode_events

    monkeypatch.setattr(offloaded.model.runtime, "prefill_span", 8)  # a prefill pass: 8 rows (whole)
    monkeypatch.setattr(offloaded.model.runtime, "prefill_chunk", 4)
    dec = BlockDiffusionDecoder(offloaded.model, offloaded.mask_token_id)
    settings = DecodeSettings(max_new_tokens=12, threshold=0.9, stop_token_ids=[])
    prefills = lambda: offloaded.model.runtime_stats()["passes"].get("prefill", {}).get("count", 0)  # noqa: E731
    before, pc, seen = prefills(), PromptCache(), []
    for ev in decode_events(dec, ids(offloaded, 27, 5), settings, should_stop=lambda: len(seen) >= 2, reuse=pc):
        seen.append(ev)
    assert [(e.done, e.total) for e in seen] == [(0, 24), (8, 24)]
    assert prefills() - before == 1 and pc.saved_tokens == 0


def test_a_stop_inside_a_layer_by_layer_pass_abandons_it(offloaded, monkeypatch):
    """A stop between two layers of a prompt's pass (`should_stop` after a layer's progress event) runs no
    further layer; the pass is abandoned (no record, nothing kept for reuse, the cache out of the pass's
    layer-major order), and the next answer decodes as from scratch."""
    from clover_local.chat.turn import decode_events

    prompt = ids(offloaded, 67, 7)
    whole = decode(offloaded, prompt)
    rt = offloaded.model.runtime
    monkeypatch.setattr(rt, "prefill_span", 64)
    monkeypatch.setattr(rt, "prefill_chunk", 16)
    dec = BlockDiffusionDecoder(offloaded.model, offloaded.mask_token_id)
    settings = DecodeSettings(max_new_tokens=12, threshold=0.9, stop_token_ids=[])
    calls = []
    real = rt.run_experts
    monkeypatch.setattr(rt, "run_experts", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    before, pc, seen = len(rt.records), PromptCache(), []
    for ev in decode_events(dec, prompt, settings, should_stop=lambda: len(seen) >= 2, reuse=pc):
        seen.append(ev)
    assert [(e.done, e.total) for e in seen] == [(0, 64), (16, 64)]
    assert calls == [0, 0, 0, 0]  # the first layer's four chunks, nothing after the stop
    assert len(rt.records) == before and pc.saved_tokens == 0 and not rt.cache.layer_major
    monkeypatch.setattr(rt, "run_experts", real)
    assert decode(offloaded, prompt).token_ids == whole.token_ids


# ---------------------------------------------------------------------------------------------- parked prefixes


@pytest.mark.parametrize("model", ["loaded", "offloaded"])
def test_a_prefix_displaced_by_another_prompt_is_parked_and_resumed(model, request):
    """Conversation A, then a request of another (B) takes the cache over, then A's next turn: with room to park,
    A's prefix comes back from host memory and its answer equals a fresh decode's; without (park_bytes 0), A's next
    turn reads its whole prompt again. Plain caches and the runtime's arena alike."""
    loaded = request.getfixturevalue(model)
    a, b, more = ids(loaded, 21, 40), ids(loaded, 19, 41), ids(loaded, 11, 42)
    for park, reused in ((1 << 30, 16), (0, 0)):
        pc = PromptCache(park_bytes=park)
        one = decode(loaded, a, pc)
        decode(loaded, b, pc)  # another conversation in between
        again = a + one.token_ids + more
        two = decode(loaded, again, pc)
        assert two.stats.reused_tokens == reused
        assert pc.stats.parked == (2 if park else 0) and pc.stats.parked_hits == (1 if park else 0)
        assert (pc.parked_bytes > 0) == bool(park)  # B's, parked in its turn when A's came back
        assert two.token_ids == decode(loaded, again).token_ids


def test_parked_prefixes_are_bounded_oldest_first_and_the_longest_match_wins(loaded):
    a, b, c = ids(loaded, 17, 43), ids(loaded, 17, 44), ids(loaded, 17, 45)
    probe = PromptCache(park_bytes=1 << 30)
    decode(loaded, a, probe, n=4)
    decode(loaded, b, probe, n=4)
    one = probe.parked_bytes  # one 16-token prefix parked
    assert one > 0 and probe.stats.parked == 1
    small = PromptCache(park_bytes=one - 1)  # room for none: the displaced prefix is counted, not kept
    decode(loaded, a, small, n=4)
    decode(loaded, b, small, n=4)
    assert small.stats.parked == 1 and small.parked_bytes == 0
    assert decode(loaded, a + [1], small, n=4).stats.reused_tokens == 0
    pc = PromptCache(park_bytes=2 * one)  # room for two
    for p in (a, b, c, a[:9]):
        decode(loaded, p, pc, n=4)  # a, b parked as c comes; c parked as a[:9] (one block: 8) comes, a dropped
    assert pc.stats.parked == 3 and pc.parked_bytes == 2 * one
    assert decode(loaded, a + [1], pc, n=4).stats.reused_tokens == 8  # a's 16 were dropped: only a[:8] is left
    assert decode(loaded, b + [1], pc, n=4).stats.reused_tokens == 16  # b's, parked, still there
    longest = PromptCache(park_bytes=1 << 30)
    for p in (a[:9], c, a + a, b):
        decode(loaded, p, longest, n=4)  # parked: a[:8], c[:16], (a + a)[:32]
    assert decode(loaded, a + a + [1], longest, n=4).stats.reused_tokens == 32


def test_a_failed_generation_keeps_what_was_parked(loaded, monkeypatch):
    a, b = ids(loaded, 21, 46), ids(loaded, 21, 47)
    pc = PromptCache(park_bytes=1 << 30)
    decode(loaded, a, pc)
    real = loaded.model.forward

    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(loaded.model, "forward", boom)
    with pytest.raises(RuntimeError):
        decode(loaded, b, pc)  # a was parked as b came, then b failed: clear() drops only the live one
    monkeypatch.setattr(loaded.model, "forward", real)
    assert decode(loaded, a + [1], pc).stats.reused_tokens == 16
