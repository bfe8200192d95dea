"""`/v1/completions` (raw text continued, no chat template) through the official `openai` client, in-process so
the answers can be checked against the model itself: the text is the block-diffusion decoder's own answer, a
stream adds up to it, `logprobs` are the causal pass's log-probabilities (checked against one full forward pass,
not against the scoring code that made them), lm-evaluation-harness's loglikelihood request reads back what it
expects, a stop string cuts text and tokens alike, and every unsupported or malformed field gets a 400 naming it.

The model is a tiny random checkpoint: gibberish, but it rarely ends early, so answers have text to compare.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest
import torch

from tests.conftest import checkpoint_with_tokenizer
from tests.inprocess_server import running_server

openai = pytest.importorskip("openai", reason="the openai client is a test dependency (pip install -e '.[test]')")

CONTEXT = 256
PROMPT = "add 12+30 and then some"


@pytest.fixture(scope="module")
def served(tmp_path_factory, tokenizer_dir):
    """(loaded model, base URL) of an in-process server on a random checkpoint."""
    from clover_local.loader import load

    torch.set_num_threads(1)
    folder = checkpoint_with_tokenizer(tmp_path_factory.mktemp("completions") / "ckpt", tokenizer_dir, seed=5)
    loaded = load(str(folder), "cpu", "float32")
    with running_server(loaded, "raw", max_tokens=64, context=CONTEXT) as (_, url):
        yield loaded, url


@pytest.fixture
def client(served):
    return openai.OpenAI(base_url=served[1] + "/v1", api_key="unused", max_retries=0, timeout=60)


def decoded(loaded, ids: list[int], max_new: int, bias: dict[int, float] | None = None,
            sampling: dict | None = None, **penalties: float) -> list[int]:
    """The decoder's own greedy answer, outside the server."""
    from clover_local.generate.block_diffusion import BlockDiffusionDecoder, DecodeSettings
    from clover_local.generate.events import Finished
    from clover_local.generate.ranges import Penalties

    decoder = BlockDiffusionDecoder(loaded.model, loaded.mask_token_id)
    settings = DecodeSettings(max_new_tokens=max_new, threshold=loaded.config.diffusion.threshold,
                              stop_token_ids=loaded.stop_token_ids, penalties=Penalties(**penalties),
                              logit_bias=bias or {}, **(sampling or {}))
    return next(ev for ev in decoder.generate(ids, settings) if isinstance(ev, Finished)).token_ids


def causal_logprobs(loaded, ids: list[int]) -> torch.Tensor:
    """log p over the vocabulary at every row of one plain causal pass [T, V] (row i predicts ids[i+1])."""
    with torch.inference_mode():
        return torch.log_softmax(loaded.model(torch.tensor([ids]))[0].float(), -1)


def causal_rows(model, monkeypatch) -> list[int]:
    """The row counts of the model's causal passes from now on (previews and commits left out), as they run."""
    rows: list[int] = []
    real = type(model).hidden

    def counted(self, x, cache=None, preview=False, commit_rows=0):
        if not preview and not commit_rows:
            rows.append(x.shape[1])
        return real(self, x, cache, preview, commit_rows)

    monkeypatch.setattr(type(model), "hidden", counted)
    return rows


def post(url: str, body: dict, path: str = "/v1/completions") -> tuple[int, dict]:
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_completion_is_the_decoders_answer_as_raw_text(served, client):
    loaded, _ = served
    ids = loaded.tokenizer.encode(PROMPT)
    want = decoded(loaded, ids, 40)
    assert want, "the random model ended at once: nothing to compare"
    r = client.completions.create(model="raw", prompt=PROMPT, max_tokens=40)
    assert r.object == "text_completion" and r.id.startswith("cmpl-") and len(r.choices) == 1 and r.model == "raw"
    choice = r.choices[0]
    assert choice.text == loaded.tokenizer.decode(want)  # no chat template, no reasoning split
    assert choice.finish_reason == ("length" if len(want) == 40 else "stop") and choice.logprobs is None
    assert r.usage.prompt_tokens == len(ids) and r.usage.completion_tokens == len(want)
    # the same answer from token ids; OpenAI's default of 16 tokens without max_tokens (a budget that ends inside
    # a block changes which positions that block denoises, so it is its own answer, not a cut of the longer one)
    assert client.completions.create(model="raw", prompt=ids, max_tokens=40).choices[0].text == choice.text
    short = client.completions.create(model="raw", prompt=PROMPT)
    assert short.choices[0].text == loaded.tokenizer.decode(decoded(loaded, ids, 16))


def test_penalties_reach_the_decoder(served, client):
    """presence_penalty, frequency_penalty and vLLM's repetition_penalty give the decoder's own penalised answer
    (on both endpoints' shared path); out of range, a 400 naming the field."""
    loaded, url = served
    ids = loaded.tokenizer.encode(PROMPT)
    plain = decoded(loaded, ids, 40)
    want = decoded(loaded, ids, 40, presence=1.5, frequency=0.5, repetition=1.3)
    assert want != plain, "the penalties changed nothing here: pick others"
    r = client.completions.create(model="raw", prompt=PROMPT, max_tokens=40, presence_penalty=1.5,
                                  frequency_penalty=0.5, extra_body={"repetition_penalty": 1.3})
    assert r.choices[0].text == loaded.tokenizer.decode(want)
    # each field alone reaches its own penalty: presence and frequency differ once a token comes twice, which a
    # negative penalty (repeat more) makes sure of
    alone = {name: decoded(loaded, ids, 40, **{name: -0.2}) for name in ("presence", "frequency")}
    assert alone["presence"] != alone["frequency"], "presence and frequency agree here: pick another value"
    for name, want in alone.items():
        r = client.completions.create(model="raw", prompt=PROMPT, max_tokens=40, **{f"{name}_penalty": -0.2})
        assert r.choices[0].text == loaded.tokenizer.decode(want), name
    for name, value in (("presence_penalty", 2.5), ("frequency_penalty", -3), ("repetition_penalty", 0),
                        ("presence_penalty", -2.01), ("frequency_penalty", 2.01), ("repetition_penalty", 10.01)):
        code, body = post(url, {"prompt": PROMPT, name: value})
        assert code == 400 and body["error"]["param"] == name, body


def test_top_k_and_min_p_reach_the_decoder(served, client):
    """vLLM's top_k and min_p (sampling.choose cuts the distribution with them) give the decoder's own seeded draw;
    out of range, a 400 naming the field."""
    loaded, url = served
    ids = loaded.tokenizer.encode(PROMPT)
    base = {"temperature": 1.0, "seed": 7}
    cut = {"temperature": 1.0, "seed": 7, "top_k": 3, "min_p": 0.2}
    want = decoded(loaded, ids, 40, sampling=cut)
    assert want != decoded(loaded, ids, 40, sampling=base), "the cuts changed nothing here: pick others"
    r = client.completions.create(model="raw", prompt=PROMPT, max_tokens=40, temperature=1.0, seed=7,
                                  extra_body={"top_k": 3, "min_p": 0.2})
    assert r.choices[0].text == loaded.tokenizer.decode(want)
    for name, value in (("top_k", -2), ("top_k", 1.5), ("min_p", 1.5), ("min_p", -0.1)):
        code, body = post(url, {"prompt": PROMPT, name: value})
        assert code == 400 and body["error"]["param"] == name, body


def test_the_reveal_rule_reaches_the_decoder(served, client):
    """`reveal_factor` decodes by the factor rule (the decoder's own answer with it); `serve --reveal-factor` gives
    it to requests that send neither field, and a request's `threshold` or `reveal_factor: 0` asks for the
    threshold rule; out of range, a 400."""
    loaded, url = served
    ids = loaded.tokenizer.encode(PROMPT)
    plain, factor = decoded(loaded, ids, 40), decoded(loaded, ids, 40, sampling={"factor": 3.0})
    assert factor != plain, "the factor rule changed nothing here: pick another factor"
    r = client.completions.create(model="raw", prompt=PROMPT, max_tokens=40, extra_body={"reveal_factor": 3})
    assert r.choices[0].text == loaded.tokenizer.decode(factor)
    code, body = post(url, {"prompt": PROMPT, "reveal_factor": -0.5})
    assert code == 400 and body["error"]["param"] == "reveal_factor", body
    with running_server(loaded, "raw", max_tokens=64, context=CONTEXT, reveal_factor=3.0) as (_, by_default):
        other = openai.OpenAI(base_url=by_default + "/v1", api_key="unused", max_retries=0, timeout=60)
        for extra, want in (({}, factor), ({"reveal_factor": 0}, plain),
                            ({"threshold": loaded.config.diffusion.threshold}, plain)):
            r = other.completions.create(model="raw", prompt=PROMPT, max_tokens=40, extra_body=extra)
            assert r.choices[0].text == loaded.tokenizer.decode(want), extra


def test_logit_bias_bans_and_forces_tokens(served, client):
    """OpenAI's logit_bias at every masked position of every pass: -100 keeps tokens out of the answer, 100 on one
    makes the answer that token; the server's answer is the decoder's own; a bad key or value is a 400."""
    loaded, url = served
    ids = loaded.tokenizer.encode(PROMPT)
    plain = decoded(loaded, ids, 40)
    banned = {t: -100.0 for t in sorted(set(plain))[:6]}
    without = decoded(loaded, ids, 40, bias=banned)
    assert without != plain and not set(without) & set(banned)
    r = client.completions.create(model="raw", prompt=PROMPT, max_tokens=40,
                                  logit_bias={str(t): v for t, v in banned.items()})
    assert r.choices[0].text == loaded.tokenizer.decode(without)
    forced = next(t for t in plain if t not in loaded.stop_token_ids)
    assert decoded(loaded, ids, 40, bias={forced: 100.0}) == [forced] * 40
    r = client.completions.create(model="raw", prompt=PROMPT, max_tokens=40, logit_bias={str(forced): 100})
    assert r.choices[0].text == loaded.tokenizer.decode([forced] * 40)
    for bad in ({"abc": 1}, {"-1": 1}, {"5": 100.5}, {"5": True}, {str(loaded.config.vocab_size): 1}, [5]):
        code, body = post(url, {"prompt": PROMPT, "logit_bias": bad})
        assert code == 400 and body["error"]["param"] == "logit_bias", (bad, body)


def test_a_stream_adds_up_to_the_plain_answer_and_echoes_first(served, client):
    loaded, _ = served
    whole = client.completions.create(model="raw", prompt=PROMPT, max_tokens=40).choices[0]
    plain = whole.text
    parts = list(client.completions.create(model="raw", prompt=PROMPT, max_tokens=40, stream=True, echo=True,
                                           stream_options={"include_usage": True}))
    texts = [p.choices[0].text for p in parts if p.choices]
    assert texts[0] == PROMPT and "".join(texts) == PROMPT + plain
    assert [p.choices[0].finish_reason for p in parts[:-1]] == [None] * (len(parts) - 2) + [whole.finish_reason]
    assert parts[-1].choices == [] and parts[-1].usage.prompt_tokens == len(loaded.tokenizer.encode(PROMPT))
    short = client.completions.create(model="raw", prompt=PROMPT, max_tokens=4).choices[0]
    assert short.finish_reason == "length", "the answer ends within 4 tokens: pick a longer prompt"
    unasked = list(client.completions.create(model="raw", prompt=PROMPT, max_tokens=4, stream=True))
    assert all(p.choices and p.usage is None for p in unasked)  # no usage chunk unless include_usage
    assert "".join(p.choices[0].text for p in unasked) == short.text
    assert unasked[-1].choices[0].finish_reason == "length"


@pytest.mark.parametrize("n_top", [3, 20])  # 20: the most a request may ask for
def test_echo_logprobs_are_the_causal_pass(served, client, n_top):
    """max_tokens 0 with echo scores the prompt alone: each token's log p given those before it equals one full
    causal pass's (the server scores in chunks through the prefix cache), and the alternatives are that row's
    likeliest, likeliest first."""
    loaded, _ = served
    tok = loaded.tokenizer
    ids = tok.encode(PROMPT)
    r = client.completions.create(model="raw", prompt=PROMPT, max_tokens=0, echo=True, logprobs=n_top)
    choice = r.choices[0]
    assert choice.text == PROMPT and r.usage.completion_tokens == 0
    lp = choice.logprobs
    assert lp.tokens == [tok.decode([i]) for i in ids]
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    ref = causal_logprobs(loaded, ids)
    for i in range(1, len(ids)):
        assert lp.token_logprobs[i] == pytest.approx(ref[i - 1, ids[i]].item(), abs=1e-4)
        top = lp.top_logprobs[i]
        values, indices = ref[i - 1].topk(n_top)
        want: dict[str, float] = {}
        for t, v in zip(indices.tolist(), values.tolist()):
            want.setdefault(tok.decode([t]), v)  # two tokens may read the same (partial UTF-8: U+FFFD)
        assert list(top) == list(want) and list(top.values()) == pytest.approx(list(want.values()), abs=1e-4)
    assert [PROMPT[o:].startswith(t) for o, t in zip(lp.text_offset, lp.tokens)] == [True] * len(ids)


def test_lm_eval_loglikelihood_request(served):
    """lm-evaluation-harness's `local-completions` loglikelihood payload (token-id prompts in a batch, max_tokens
    1, echo, logprobs 1) and how it reads the answer: the continuation's summed logprob, and whether each of its
    tokens was the likeliest (top_logprobs' best equals the token's own)."""
    loaded, url = served
    tok = loaded.tokenizer
    context, continuations = tok.encode("add 12+30"), [tok.encode(" is 42"), tok.encode(" and more")]
    prompts = [context + c for c in continuations]
    code, body = post(url, {"model": "raw", "prompt": prompts, "temperature": 0, "max_tokens": 1, "logprobs": 1,
                            "seed": 1234, "echo": True})
    assert code == 200 and [c["index"] for c in body["choices"]] == [0, 1]
    for choice, ids, cont in zip(body["choices"], prompts, continuations):
        lp = choice["logprobs"]
        assert len(lp["token_logprobs"]) == len(ids) + 1  # the prompt, echoed, and the one generated token
        ctxlen = len(context)
        summed = sum(lp["token_logprobs"][ctxlen:-1])
        greedy = all(t == max(top.values()) for t, top in zip(lp["token_logprobs"][ctxlen:-1],
                                                              lp["top_logprobs"][ctxlen:-1]))
        ref = causal_logprobs(loaded, ids)
        rows = range(ctxlen - 1, len(ids) - 1)
        assert summed == pytest.approx(sum(ref[r, ids[r + 1]].item() for r in rows), abs=1e-3)
        assert greedy == all(ref[r].argmax().item() == ids[r + 1] for r in rows)
        assert choice["text"].startswith(tok.decode(ids))
    assert body["usage"]["prompt_tokens"] == sum(map(len, prompts))


def test_a_context_shared_by_scored_requests_is_read_once(served, monkeypatch):
    """A harness's multiple-choice question: one context sent with each answer, one request after another. The
    second request resumes at the first one's prompt snapshot (the context's whole blocks) with its scores, so it
    reads only the rows past it; its logprobs still equal one full forward pass's, and usage says what was reused."""
    loaded, url = served
    tok, model = loaded.tokenizer, loaded.model
    bs = loaded.config.diffusion.block_size
    context = tok.encode(" ".join([PROMPT] * 12))[: 3 * bs + 1]
    prompts = [context + tok.encode(c) for c in (" 42", " 41")]
    assert all(len(p) // bs == 3 for p in prompts), "want the snapshot inside the shared context"
    post(url, {"prompt": "something else entirely", "max_tokens": 1})  # no snapshot of this context before
    rows = causal_rows(model, monkeypatch)
    bodies = []
    for ids in prompts:
        rows.clear()
        code, body = post(url, {"prompt": ids, "max_tokens": 1, "echo": True, "logprobs": 1, "temperature": 0})
        assert code == 200, body
        bodies.append((body, sum(rows)))
    monkeypatch.undo()
    (first, first_rows), (second, second_rows) = bodies
    assert first_rows == len(prompts[0])  # P + A - 1 with one answer token
    assert second_rows == len(prompts[1]) - 3 * bs  # the context's whole blocks were not read again
    assert (first["usage"]["prompt_tokens_details"]["cached_tokens"],
            second["usage"]["prompt_tokens_details"]["cached_tokens"]) == (0, 3 * bs)
    lp = second["choices"][0]["logprobs"]
    full = prompts[1] + decoded(loaded, prompts[1], 1)
    ref = causal_logprobs(loaded, full)
    assert lp["token_logprobs"][1:] == pytest.approx([ref[i, full[i + 1]].item() for i in range(len(full) - 1)],
                                                     abs=1e-4)
    assert [max(t.values()) for t in lp["top_logprobs"][1:]] == pytest.approx(ref.max(-1).values[:-1].tolist(),
                                                                              abs=1e-4)


def test_saved_scores_serve_only_their_own_context_and_top(served):
    """The scores a scored request saved are used again only for the same context (a plain request in between
    leaves the prompt cache with another prompt's snapshot) and cut to the next request's top_logprobs."""
    loaded, url = served
    tok = loaded.tokenizer
    bs = loaded.config.diffusion.block_size
    context = tok.encode(" ".join([PROMPT] * 12))[: 3 * bs + 1]
    other = tok.encode(" ".join(["a different context, read fresh"] * 12))[: 3 * bs + 1]
    assert context[: 3 * bs] != other[: 3 * bs]

    def scored(ids, top):
        code, body = post(url, {"prompt": ids, "max_tokens": 1, "echo": True, "logprobs": top, "temperature": 0})
        assert code == 200, body
        return body

    scored(context + tok.encode(" 42"), 5)
    code, body = post(url, {"prompt": other + tok.encode(" 7"), "max_tokens": 1})  # the decoder's own snapshot
    assert code == 200, body
    ids = other + tok.encode(" 41")
    body = scored(ids, 1)  # resumes at `other`'s snapshot, but must not take `context`'s saved scores for it
    full = ids + decoded(loaded, ids, 1)
    ref = causal_logprobs(loaded, full)
    assert body["choices"][0]["logprobs"]["token_logprobs"][1:] == pytest.approx(
        [ref[i, full[i + 1]].item() for i in range(len(full) - 1)], abs=1e-4)
    scored(context + tok.encode(" 42"), 5)
    body = scored(context + tok.encode(" 41"), 1)
    assert body["usage"]["prompt_tokens_details"]["cached_tokens"] == 3 * bs
    assert {len(t) for t in body["choices"][0]["logprobs"]["top_logprobs"][1:]} == {1}


def test_a_snapshot_of_another_context_is_not_reported_as_reused(served, monkeypatch):
    """A scored request on context A, a plain one on B, then a scored one on B: the snapshot is B's but the saved
    scores are A's, so the third reads its whole prompt — and says it reused nothing (it used to report B's
    snapshot as cached while reading every row again)."""
    loaded, url = served
    tok, model = loaded.tokenizer, loaded.model
    bs = loaded.config.diffusion.block_size
    a = tok.encode(" ".join([PROMPT] * 12))[: 3 * bs + 1]
    b = tok.encode(" ".join(["a different context, read fresh"] * 12))[: 3 * bs + 1]
    post(url, {"prompt": a + tok.encode(" 42"), "max_tokens": 1, "echo": True, "logprobs": 1})
    post(url, {"prompt": b + tok.encode(" 7"), "max_tokens": 1})
    rows = causal_rows(model, monkeypatch)
    ids = b + tok.encode(" 41")
    code, body = post(url, {"prompt": ids, "max_tokens": 1, "echo": True, "logprobs": 1})
    monkeypatch.undo()
    assert code == 200 and sum(rows) == len(ids)  # P + A - 1 with one answer token: read afresh
    assert body["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


def test_a_prompt_scored_and_answered_is_read_once(served, monkeypatch):
    """echo + logprobs + an answer (lm-eval's loglikelihood request) on a prompt of several blocks: the scoring
    pass leaves the cache where the decoder resumes, so the causal rows read are the prompt and answer once
    (P + A - 1), not a prefill for the decoder and the whole prompt again to score it; the logprobs still equal
    one full forward pass's, and the answer the decoder's own."""
    loaded, url = served
    tok, model = loaded.tokenizer, loaded.model
    ids = tok.encode(" ".join([PROMPT] * 6))
    bs = loaded.config.diffusion.block_size
    assert len(ids) > 2 * bs and len(ids) % bs, "want whole blocks and a tail"
    rows = causal_rows(model, monkeypatch)
    code, body = post(url, {"prompt": ids, "max_tokens": 3, "echo": True, "logprobs": 2})
    monkeypatch.undo()
    assert code == 200, body
    answer = decoded(loaded, ids, 3)
    lp = body["choices"][0]["logprobs"]
    full = ids + answer
    assert body["choices"][0]["text"] == tok.decode(full) and len(lp["tokens"]) == len(full)
    assert sum(rows) == len(full) - 1, rows  # (without the hand-over: + the prompt's whole blocks again)
    ref = causal_logprobs(loaded, full)
    assert lp["token_logprobs"][1:] == pytest.approx([ref[i, full[i + 1]].item() for i in range(len(full) - 1)],
                                                     abs=1e-4)
    assert [max(t.values()) for t in lp["top_logprobs"][1:]] == pytest.approx(ref.max(-1).values[:-1].tolist(),
                                                                              abs=1e-4)


def test_logprobs_of_an_answer_and_a_stop_string_cut(served, client):
    """Without echo the logprobs cover the answer's tokens only (scored causally after the answer); a stop string
    cuts the text, and the tokens listed are those the kept text came from."""
    loaded, _ = served
    tok = loaded.tokenizer
    ids = tok.encode(PROMPT)
    answer = decoded(loaded, ids, 40)
    text = tok.decode(answer)
    r = client.completions.create(model="raw", prompt=PROMPT, max_tokens=40, logprobs=0)
    lp = r.choices[0].logprobs
    assert r.choices[0].text == text and lp.tokens == [tok.decode([t]) for t in answer]
    assert lp.text_offset[0] == 0 and all(top == {} for top in lp.top_logprobs)
    ref = causal_logprobs(loaded, ids + answer)
    assert lp.token_logprobs == pytest.approx([ref[len(ids) - 1 + k, t].item() for k, t in enumerate(answer)],
                                              abs=1e-4)
    stop = text[len(text) // 2: len(text) // 2 + 2]
    assert stop.strip(), f"pick another stop string from {text!r}"
    cut = client.completions.create(model="raw", prompt=PROMPT, max_tokens=40, logprobs=0, stop=[stop])
    kept = cut.choices[0].text
    assert kept == text[: text.index(stop)] and cut.choices[0].finish_reason == "stop"
    tokens = cut.choices[0].logprobs.tokens
    assert "".join(tokens).startswith(kept) and len("".join(tokens[:-1])) < len(kept) if tokens else kept == ""


@pytest.mark.parametrize("body, param, words", [
    ({"suffix": "end"}, "suffix", "no infilling"),
    ({"best_of": 2}, "best_of", "best_of=1"),
    ({"n": 2}, "n", "n=1"),
    ({"logprobs": 21}, "logprobs", "0 to 20"),
    ({"logprobs": True}, "logprobs", "0 to 20"),
    ({"logprobs": 1, "stream": True}, "logprobs", "not while streaming"),
    ({"logprobs": 0, "stream": True}, "logprobs", "not while streaming"),
    ({"prompt": ["a", "b"], "stream": True}, "prompt", "one prompt at a time"),
    ({"max_tokens": 0}, "max_tokens", "nothing to return"),
    ({"max_tokens": -1}, "max_tokens", "at least 0"),
    ({"prompt": ""}, "prompt", "prompt[0] is empty"),
    ({"prompt": []}, "prompt", "'prompt' must be"),
    ({"prompt": [1.5]}, "prompt", "'prompt' must be"),
    ({"prompt": {"text": "hi"}}, "prompt", "'prompt' must be"),
    ({"prompt": None}, "prompt", "'prompt' must be"),
    ({"prompt": [[3, 4], [5, 100000]]}, "prompt", "prompt[1] holds token id 100000"),
    ({"prompt": [[3, 4], [5, -1]]}, "prompt", "prompt[1] holds token id -1"),
    ({"prompt": "word " * 300}, "prompt", "maximum context length is 256"),
    ({"prompt": "word " * 300}, "prompt", ": shorten it"),  # one prompt: "it", not the chat's "them"
    ({"max_tokens": 65}, "max_tokens", "at most 64"),
])
def test_bad_completion_requests_are_400_naming_the_field(served, body, param, words):
    code, answer = post(served[1], {"model": "raw", "prompt": PROMPT, **body})
    assert code == 400, answer
    err = answer["error"]
    assert err["param"] == param and words in err["message"], err


def test_unknown_routes_name_the_endpoints(served):
    code, answer = post(served[1], {"prompt": PROMPT}, path="/v1/complete")
    assert code == 404 and all(r in answer["error"]["message"] for r in (
        "/v1/chat/completions", "/v1/completions", "/v1/messages", "/tokenize", "/detokenize"))


def test_tokenizer_routes_tokenize_as_the_server_does(served):
    """vLLM's /tokenizer_info, /tokenize and /detokenize: lm-evaluation-harness finds them and tokenizes through the
    server instead of needing a tokenizer of its own (a Hub pack's sits in the Hub cache)."""
    loaded, url = served
    tok = loaded.tokenizer
    with urllib.request.urlopen(url + "/tokenizer_info", timeout=10) as r:
        info = json.loads(r.read())
    assert info["eos_token"] == tok.special_tokens_map()["eos_token"] and info["chat_template"] == tok.chat_template
    assert info["model_max_length"] == CONTEXT and info["vocab_size"] == loaded.config.vocab_size
    code, body = post(url, {"prompt": PROMPT, "add_special_tokens": False}, "/tokenize")
    assert code == 200 and body["tokens"] == tok.encode(PROMPT) and body["count"] == len(body["tokens"])
    assert body["max_model_len"] == CONTEXT
    msgs = [{"role": "user", "content": PROMPT}]
    for extra, kwargs in (({}, {}), ({"add_generation_prompt": False}, {"add_generation_prompt": False}),
                          ({"chat_template_kwargs": {"enable_thinking": False}}, {"enable_thinking": False})):
        code, body = post(url, {"messages": msgs, **extra}, "/tokenize")
        assert code == 200 and body["tokens"] == tok.encode(tok.apply_chat_template(msgs, **kwargs)), extra
    # lm-evaluation-harness's remote tokenizer sends a chat-templated request's messages as `prompt`
    code, body = post(url, {"prompt": msgs, "add_special_tokens": False}, "/tokenize")
    assert code == 200 and body["tokens"] == tok.encode(tok.apply_chat_template(msgs))
    code, body = post(url, {"tokens": tok.encode(PROMPT)}, "/detokenize")
    assert code == 200 and body == {"prompt": PROMPT}
    for path, request, param in (("/detokenize", {"tokens": [1, loaded.config.vocab_size]}, "tokens"),
                                 ("/detokenize", {"tokens": "abc"}, "tokens"),
                                 ("/detokenize", {"tokens": [3, -2]}, "tokens"),
                                 ("/detokenize", {"tokens": [True, 3]}, "tokens"),
                                 ("/tokenize", {"prompt": PROMPT, "messages": msgs}, "prompt"),
                                 ("/tokenize", {}, "prompt"),
                                 ("/tokenize", {"prompt": 5}, "prompt"),
                                 ("/tokenize", {"prompt": []}, "prompt"),
                                 ("/tokenize", {"prompt": [3, 4]}, "prompt"),
                                 ("/tokenize", {"prompt": [{"role": "user"}]}, "messages[0].content"),
                                 ("/tokenize", {"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role")):
        code, body = post(url, request, path)
        assert code == 400 and body["error"]["param"] == param, (path, request, body)


def test_text_offsets_of_characters_split_over_tokens(served, client):
    """A character of several UTF-8 bytes may come in several tokens: each token's text_offset is where the text
    stood before it (a character starts at the token completing it, so the offsets never run past the text), and a
    token after such a character still starts where its own text does."""
    import random

    loaded, _ = served
    tok = loaded.tokenizer
    rng = random.Random(17)
    words = ["add", "banana", "fox", "é", "ü", "€", "✓", "中", "ß", "😀", "12", "dog"]
    text = " ".join(rng.choice(words) for _ in range(24))
    ids = tok.encode(text)
    assert tok.decode(ids) == text and any("\ufffd" in tok.decode([t]) for t in ids), "no split character"
    lp = client.completions.create(model="raw", prompt=text, max_tokens=0, echo=True, logprobs=0).choices[0].logprobs
    assert lp.text_offset == [len(tok.decode(ids[:i]).rstrip("\ufffd")) for i in range(len(ids))]
    assert all(text[o:].startswith(t) for o, t in zip(lp.text_offset, lp.tokens) if "\ufffd" not in t)


def test_a_raw_prompt_that_opens_a_think_tag_is_continued_as_text(served, client):
    """/v1/completions applies no chat template: a prompt ending in an open `<think>` is continued as plain text
    (nothing is taken for reasoning and hidden), as the decoder wrote it."""
    loaded, _ = served
    prompt = PROMPT + " <think>\n"
    want = decoded(loaded, loaded.tokenizer.encode(prompt), 24)
    assert want, "the random model ended at once: nothing to compare"
    r = client.completions.create(model="raw", prompt=prompt, max_tokens=24)
    assert r.choices[0].text == loaded.tokenizer.decode(want)


def test_a_batch_answers_each_prompt_as_alone_and_sums_the_usage(served, client):
    """A list of prompts: each choice is what that prompt alone gets, in order, and the usage adds up the
    prompts' (tokens, and block diffusion's passes with the tokens per pass they make)."""
    loaded, _ = served
    prompts = [PROMPT, "count a in banana", loaded.tokenizer.encode("the quick brown fox")]
    alone = [client.completions.create(model="raw", prompt=p, max_tokens=24) for p in prompts]
    batch = client.completions.create(model="raw", prompt=prompts, max_tokens=24)
    assert [c.index for c in batch.choices] == [0, 1, 2]
    assert [c.text for c in batch.choices] == [r.choices[0].text for r in alone]
    assert [c.finish_reason for c in batch.choices] == [r.choices[0].finish_reason for r in alone]
    for field in ("prompt_tokens", "completion_tokens", "total_tokens"):
        assert getattr(batch.usage, field) == sum(getattr(r.usage, field) for r in alone), field
    passes = sum(r.usage.clover["passes"] for r in alone)
    assert batch.usage.clover["passes"] == passes
    assert batch.usage.clover["tokens_per_pass"] == pytest.approx(batch.usage.completion_tokens / passes, abs=1e-4)


def test_a_client_gone_during_the_scoring_pass_stops_it(served):
    """`logprobs` cost a causal pass over prompt and answer after the answer: a client that hangs up meanwhile
    stops that pass too (between its chunks), and the job is counted cancelled, not completed."""
    from clover_local.generate.block_diffusion import DecodeSettings
    from clover_local.serve.engine import Engine, Job

    class GoneOnceStarted(threading.Event):
        """Not set when the worker takes the job; set from the first look after (the client hung up)."""

        def __init__(self) -> None:
            super().__init__()
            self.looks = 0

        def is_set(self) -> bool:
            self.looks += 1
            if self.looks > 1:
                self.set()
            return super().is_set()

    loaded, _ = served
    engine = Engine(loaded, max_queue=2)
    try:
        ids = loaded.tokenizer.encode(PROMPT * 4)
        job = Job(ids, PROMPT * 4, DecodeSettings(max_new_tokens=0, stop_token_ids=loaded.stop_token_ids), raw=True,
                  score_top=1, cancel=GoneOnceStarted())
        engine.submit(job)
        assert job.out.get(timeout=60) == ("cancelled", None)
        counts = engine.health()["requests"]
        assert (counts["cancelled"], counts["completed"]) == (1, 0)
    finally:
        assert engine.stop()


def test_scoring_hand_over_at_a_block_boundary(served):
    """score_prefix then score_rest give score_ids' figures whatever follows the prompt's whole blocks: an
    answer, or nothing at all (a whole-block prompt whose answer ended at once: the prefix's scores are all
    there is, and no pass runs again)."""
    from clover_local.generate.prompt_cache import PromptCache
    from clover_local.generate.scoring import score_ids, score_prefix, score_rest

    loaded, _ = served
    bs = loaded.config.diffusion.block_size
    ids = (loaded.tokenizer.encode(" ".join([PROMPT] * 6)) * 2)[: 2 * bs]
    want = score_ids(loaded.model, ids, 2)
    for extra in ([], loaded.tokenizer.encode(" and more")):
        reuse = PromptCache()
        head, resumed = score_prefix(loaded.model, ids, 2 * bs, 2, reuse)
        assert resumed == 0
        lookups = reuse.stats.lookups
        got = score_rest(loaded.model, ids + extra, 2 * bs, 2, reuse, head)
        ref = score_ids(loaded.model, ids + extra, 2) if extra else want
        assert got.logprobs == pytest.approx(ref.logprobs, abs=1e-4)
        assert [t for t, _ in sum(got.top, [])] == [t for t, _ in sum(ref.top, [])]
        assert reuse.stats.lookups == lookups + (1 if extra else 0)  # nothing past the prefix: no snapshot taken


def test_fields_at_their_neutral_values_are_taken(served):
    """What clients send by default is not a refusal: an empty `suffix`, `best_of` 1, `n` 1."""
    code, body = post(served[1], {"model": "raw", "prompt": PROMPT, "max_tokens": 2, "suffix": "", "best_of": 1,
                                  "n": 1})
    assert code == 200 and len(body["choices"]) == 1, body
