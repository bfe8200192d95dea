"""Chat completions' `logprobs` (OpenAI's `choices[0].logprobs.content`) through the official `openai` client, on
an in-process server: each content token's logprob and alternatives equal one full causal pass's over prompt and
answer (computed here, not by the scoring code), the token texts join into the content, the thinking's tokens
are left out, the scoring pass resumes at the decoder's prompt snapshot (not the whole prompt again) and leaves it
for the conversation's next request, and the fields' misuse gets a 400 naming them.

The model is a tiny random checkpoint: gibberish, but it rarely ends early, so answers have tokens to compare.
"""

from __future__ import annotations

import json

import pytest
import torch

from tests.conftest import checkpoint_with_tokenizer
from tests.inprocess_server import running_server
from tests.test_serve_completions import causal_logprobs, decoded, post

openai = pytest.importorskip("openai", reason="the openai client is a test dependency (pip install -e '.[test]')")

NO_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}  # the whole answer is content
MSG = [{"role": "user", "content": "add 12+30 and then some more, please"}]


@pytest.fixture(scope="module")
def served(tmp_path_factory, tokenizer_dir):
    """(engine, base URL) of an in-process server on a random checkpoint."""
    from clover_local.loader import load

    torch.set_num_threads(1)
    folder = checkpoint_with_tokenizer(tmp_path_factory.mktemp("chat-logprobs") / "ckpt", tokenizer_dir, seed=7)
    with running_server(load(str(folder), "cpu", "float32"), "chat", max_tokens=64, context=512) as served:
        yield served


@pytest.fixture
def client(served):
    return openai.OpenAI(base_url=served[1] + "/v1", api_key="unused", max_retries=0, timeout=60)


def prompt_ids(engine, messages: list[dict], **template) -> list[int]:
    tok = engine.tokenizer
    return tok.encode(tok.apply_chat_template(messages, add_generation_prompt=True, **template))


def check_against_causal_pass(engine, prompt: list[int], content_ids: list[int], before: list[int],
                              entries: list, n_top: int) -> None:
    """`entries` (logprobs.content) are content_ids', after the answer's `before` tokens, as one full causal pass
    over prompt + answer has them: the token's own logprob and the row's `n_top` likeliest, likeliest first."""
    full = prompt + before + content_ids
    ref = causal_logprobs(engine.loaded, full)
    assert len(entries) == len(content_ids)
    for k, (entry, t) in enumerate(zip(entries, content_ids)):
        row = ref[len(prompt) + len(before) + k - 1]
        assert entry.logprob == pytest.approx(row[t].item(), abs=1e-4)
        assert entry.bytes == list(entry.token.encode("utf-8"))
        values, indices = row.topk(n_top)
        assert [a.logprob for a in entry.top_logprobs] == pytest.approx(values.tolist(), abs=1e-4)
        assert len(entry.top_logprobs) == n_top
        if n_top:
            assert entry.top_logprobs[0].logprob >= entry.logprob - 1e-6
            if indices[0].item() == t:  # the greedy token reads as its own first alternative
                assert (entry.top_logprobs[0].token, entry.top_logprobs[0].bytes) == (entry.token, entry.bytes)


@pytest.mark.parametrize("n_top", [0, 5, 20])  # 20: the most a request may ask for
def test_content_logprobs_are_the_causal_pass(served, client, n_top):
    """Without thinking every answer token is content: each is listed with its log p given the conversation and
    the answer before it (one full forward pass's), its alternatives that row's likeliest, and the token texts
    join into the content."""
    engine, _ = served
    tok = engine.tokenizer
    kwargs = {"top_logprobs": n_top} if n_top else {}
    r = client.chat.completions.create(model="chat", messages=MSG, max_tokens=40, logprobs=True, extra_body=NO_THINKING,
                                       **kwargs)
    choice = r.choices[0]
    content = choice.message.content
    entries = choice.logprobs.content
    assert content and entries, "the random model said nothing: nothing to compare"
    assert "".join(e.token for e in entries) == content
    assert len(entries) == r.usage.completion_tokens  # all of the answer (the stop token is not in it)
    prompt = prompt_ids(engine, MSG, enable_thinking=False)
    answer = decoded(engine.loaded, prompt, 40)
    assert tok.decode(answer) == content, "the answer starts with newlines (not content): pick another message"
    assert "\ufffd" in content, "no character split over tokens: the test would not see how their bytes are listed"
    check_against_causal_pass(engine, prompt, answer, [], entries, n_top)
    plain = client.chat.completions.create(model="chat", messages=MSG, max_tokens=40, extra_body=NO_THINKING)
    assert plain.choices[0].message.content == content and plain.choices[0].logprobs is None


def test_thinking_tokens_are_left_out(served, client, monkeypatch):
    """An answer that thinks first: the logprobs list the content's tokens only (not `<think>`, the thinking,
    `</think>` or the newlines after it), scored after everything the model wrote before them."""
    from clover_local.generate.events import BlockCommitted, Finished

    engine, _ = served
    tok = engine.tokenizer
    said = tok.encode("<think>\nlet me add\n</think>\n\nIt is 42, clearly")
    real = engine.decoder.generate

    def scripted(prompt, settings, **options):
        """The real decoder runs (so its prompt snapshot is saved as usual); its answer is replaced by `said`."""
        *_, done = real(prompt, settings, **options)
        yield BlockCommitted(0, said, 1)
        yield Finished(said, done.stats)

    monkeypatch.setattr(engine.decoder, "generate", scripted)
    r = client.chat.completions.create(model="chat", messages=MSG, max_tokens=40, logprobs=True, top_logprobs=2)
    msg, entries = r.choices[0].message, r.choices[0].logprobs.content
    assert msg.model_extra["reasoning_content"] == "let me add" and msg.content == "It is 42, clearly"
    assert "".join(e.token for e in entries) == msg.content
    first = len(tok.encode("<think>\nlet me add\n</think>\n\n"))
    assert said[:first] + tok.encode(msg.content) == said, "the content's first token took in the newlines"
    check_against_causal_pass(engine, prompt_ids(engine, MSG), said[first:], said[:first], entries, 2)
    said = tok.encode("<think>\nstill thinking")  # cut off while thinking: no content, nothing listed
    r = client.chat.completions.create(model="chat", messages=MSG, max_tokens=40, logprobs=True)
    assert r.choices[0].message.content == "" and r.choices[0].logprobs.content == []


def test_a_stop_string_cuts_the_tokens_listed(served, client):
    """A stop string cuts the content; the tokens listed are the fewest the kept text came from."""
    engine, _ = served
    whole = client.chat.completions.create(model="chat", messages=MSG, max_tokens=40, logprobs=True,
                                           extra_body=NO_THINKING).choices[0]
    text = whole.message.content
    stop = text[len(text) // 2: len(text) // 2 + 2]
    assert stop.strip() and text.index(stop) > 0, f"pick another stop string from {text!r}"
    cut = client.chat.completions.create(model="chat", messages=MSG, max_tokens=40, logprobs=True, stop=[stop],
                                         extra_body=NO_THINKING).choices[0]
    kept = cut.message.content
    assert kept == text[: text.index(stop)] and cut.finish_reason == "stop"
    tokens = [e.token for e in cut.logprobs.content]
    assert "".join(tokens).startswith(kept) and len("".join(tokens[:-1])) < len(kept)
    assert [e.logprob for e in cut.logprobs.content] == pytest.approx(
        [e.logprob for e in whole.logprobs.content[: len(tokens)]], abs=1e-4)


def test_scoring_resumes_at_the_prompt_snapshot_and_keeps_it(served, client, monkeypatch):
    """The scoring pass reads only what follows the decoder's prompt snapshot (the conversation's whole blocks),
    not the whole prompt again, and saves that snapshot back: the conversation's next request still resumes."""
    from clover_local.generate import scoring
    from clover_local.generate.block_diffusion import whole_blocks

    engine, _ = served
    tok = engine.tokenizer
    messages = [{"role": "user", "content": " ".join(["add 12+30 and then some"] * 4)}]
    history = len(tok.encode(tok.apply_chat_template(messages, add_generation_prompt=False, enable_thinking=False)))
    snapshot = whole_blocks(history, engine.decoder.block_size)
    assert snapshot >= 2 * engine.decoder.block_size, "want a conversation of several blocks"
    read = []
    real = scoring._read

    def counted(model, cache, inputs, *rest):
        read.append(len(inputs))
        return real(model, cache, inputs, *rest)

    monkeypatch.setattr(scoring, "_read", counted)
    r = client.chat.completions.create(model="chat", messages=messages, max_tokens=24, logprobs=True,
                                       extra_body=NO_THINKING)
    n = len(r.choices[0].logprobs.content)
    assert n == r.usage.completion_tokens > 0
    prompt = r.usage.prompt_tokens
    assert sum(read) == prompt + n - 1 - snapshot, read  # rows past the snapshot; the last token predicts nothing
    again = client.chat.completions.create(model="chat", messages=messages, max_tokens=24, extra_body=NO_THINKING)
    assert again.usage.prompt_tokens_details.cached_tokens == snapshot
    assert again.choices[0].message.content == r.choices[0].message.content


@pytest.mark.parametrize("extra, param, words", [
    ({"top_logprobs": 3}, "top_logprobs", "needs 'logprobs': true"),
    ({"logprobs": False, "top_logprobs": 1}, "top_logprobs", "needs 'logprobs': true"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs", "from 0 to 20"),
    ({"logprobs": True, "top_logprobs": -1}, "top_logprobs", "from 0 to 20"),
    ({"logprobs": True, "top_logprobs": 2.0}, "top_logprobs", "from 0 to 20"),
    ({"logprobs": True, "stream": True}, "logprobs", "not while streaming"),
    ({"logprobs": True, "top_logprobs": 2, "stream": True}, "logprobs", "not while streaming"),
    ({"logprobs": "yes"}, "logprobs", "true or false"),
    ({"logprobs": 1}, "logprobs", "true or false"),
])
def test_logprobs_misuse_is_refused(extra, param, words):
    from clover_local.serve.protocol import ApiError, parse_chat_request

    with pytest.raises(ApiError) as err:
        parse_chat_request(json.dumps({"messages": MSG, **extra}).encode())
    e = err.value
    assert (e.status, e.type, e.param) == (400, "invalid_request_error", param) and words in e.message, e.message


def test_logprobs_fields_parse(served):
    from clover_local.serve.protocol import parse_chat_request

    def parsed(**extra) -> int | None:
        return parse_chat_request(json.dumps({"messages": MSG, **extra}).encode()).logprobs

    assert parsed() is None and parsed(logprobs=False, top_logprobs=0) is None and parsed(logprobs=None) is None
    assert parsed(logprobs=True) == 0 and parsed(logprobs=True, top_logprobs=20) == 20
    assert parsed(logprobs=False, stream=True) is None  # logprobs off: streaming is fine
    _, url = served
    code, body = post(url, {"messages": MSG, "logprobs": True, "stream": True}, path="/v1/chat/completions")
    assert code == 400 and body["error"]["param"] == "logprobs" and "not while streaming" in body["error"]["message"]


def test_a_character_split_over_tokens_is_listed_on_the_token_completing_it(served):
    """Tokens ending inside a multi-byte character add "" (no bytes); the one completing it carries the whole
    character, and so does that token read as an alternative in the same place; bytes still open at the end read
    as the content does (U+FFFD)."""
    from clover_local.generate.scoring import Scores
    from clover_local.serve.protocol import chat_logprobs

    tok = served[0].tokenizer
    ids = tok.encode("say 日本")
    pieces = tok.pieces(ids)
    assert "" in pieces and "日" in pieces, f"want a character split over tokens: {pieces}"
    other = tok.encode("a")[0]
    scores = Scores([-1.0] * len(ids), [[(t, -0.5), (other, -2.0)] for t in ids])  # each token the likeliest
    entries = chat_logprobs(tok, ids, 0, scores)["content"]
    assert [e["token"] for e in entries] == pieces and "".join(pieces) == "say 日本"
    done = pieces.index("日")
    assert entries[done]["bytes"] == list("日".encode()) and entries[done - 1]["bytes"] == []
    for k, e in enumerate(entries):
        assert (e["top_logprobs"][0]["token"], e["top_logprobs"][0]["bytes"]) == (e["token"], e["bytes"])
        assert e["logprob"] == -1.0 and e["top_logprobs"][1]["logprob"] == -2.0
        # another token where a character is open leaves its bytes undecodable
        assert e["top_logprobs"][1]["token"] == ("a" if k == 0 or pieces[k - 1] else "\ufffda")
    cut = ids[:-1]  # the answer ended inside 本
    assert "".join(e["token"] for e in chat_logprobs(tok, cut, 0, scores)["content"]) == tok.decode(cut)
    assert tok.decode(cut).endswith("\ufffd")


def test_a_client_gone_during_the_scoring_pass_stops_it(served, monkeypatch):
    """The scoring pass after the answer stops (between its chunks) when the client hangs up meanwhile: the job is
    counted cancelled, not completed."""
    from clover_local.generate import scoring
    from clover_local.generate.block_diffusion import DecodeSettings
    from clover_local.serve.engine import Job

    engine, _ = served
    messages = [{"role": "user", "content": " ".join(["add 12+30 and then some"] * 4)}]
    text = engine.tokenizer.apply_chat_template(messages, add_generation_prompt=True, enable_thinking=False)
    settings = DecodeSettings(max_new_tokens=16, stop_token_ids=engine.loaded.stop_token_ids)
    job = Job(engine.tokenizer.encode(text), text, settings, score_top=2)
    real = scoring._read

    def hung_up(*args):
        job.cancel.set()  # the client left as the scoring began
        return real(*args)

    monkeypatch.setattr(scoring, "_read", hung_up)
    before = engine.health()["requests"]
    engine.submit(job)
    kinds = []
    while not kinds or kinds[-1] == "delta":
        kinds.append(job.out.get(timeout=60)[0])
    assert kinds[-1] == "cancelled" and "delta" in kinds  # answered, then stopped while scoring
    after = engine.health()["requests"]
    assert (after["cancelled"] - before["cancelled"], after["completed"] - before["completed"]) == (1, 0)


def test_the_content_tokens_start_with_a_character_split_over_tokens(served):
    """Content whose first character is split over tokens: the tokens listed start at that character's first byte
    (not at the token completing it); content cut to nothing by a stop string lists no token."""
    from clover_local.chat.turn import TurnText

    tok = served[0].tokenizer
    turn = TurnText(tok)
    turn.add(tok.encode("<think>\nhm\n</think>\n\n日本 ok"))
    turn.finish()
    assert turn.content == "日本 ok"
    pieces = tok.pieces(turn.ids)
    first, last = turn.content_ids(len(turn.content))
    assert "".join(pieces[first:last]) == "日本 ok" and pieces[first] == "", pieces
    assert turn.content_ids(0) == (len(turn.ids), len(turn.ids))
