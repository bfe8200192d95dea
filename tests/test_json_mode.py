"""JSON mode: the byte automaton against Python's own JSON parser (valid documents accepted at every prefix, one-byte
mutants judged alike), the token bytes of a byte-level vocabulary, the decoder's left-to-right reveal rule, and the
shipped tiny model held to one JSON object through `generate --format json` and both serve endpoints — where the same
prompts answered freely are not JSON, so a constraint that did nothing would fail."""

from __future__ import annotations

import json
import random
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
import torch

from clover_local.generate.json_mode import MAX_INDENT, JsonObjectConstraint, JsonPrefix
from tests.conftest import run_cli
from tests.inprocess_server import running_server


def accepts(data: bytes) -> JsonPrefix | None:
    state = JsonPrefix()
    return state if state.feed_all(data) else None


def complete(data: bytes) -> bool:
    state = accepts(data)
    return state is not None and state.done


def random_value(rng: random.Random, depth: int = 0):
    kind = rng.choice(["obj", "arr", "str", "int", "float", "lit"] if depth < 3 else ["str", "int", "float", "lit"])
    if kind == "obj":
        return {random_text(rng): random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))}
    if kind == "arr":
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if kind == "str":
        return random_text(rng)
    if kind == "int":
        return rng.choice([0, -0, 7, -12, 10**12, -(10**20)])
    if kind == "float":
        return rng.choice([0.5, -1.25e-7, 3.0e21, 1e300, -0.0])
    return rng.choice([True, False, None])


def random_text(rng: random.Random) -> str:
    return "".join(rng.choice(['a', 'Z', ' ', '"', '\\', '/', '\n', '\t', '\x01', 'é', '中', '😀', '{', ':'])
                   for _ in range(rng.randint(0, 6)))


def random_documents(n: int, seed: int = 0) -> list[bytes]:
    rng = random.Random(seed)
    docs = []
    for _ in range(n):
        obj = {random_text(rng): random_value(rng) for _ in range(rng.randint(0, 4))}
        indent = rng.choice([None, None, 2, 4])
        separators = rng.choice([(",", ":"), (", ", ": ")]) if indent is None else None
        docs.append(json.dumps(obj, indent=indent, separators=separators, ensure_ascii=rng.random() < 0.5).encode())
    return docs


def test_valid_objects_are_accepted_at_every_byte_and_complete_only_at_the_end():
    for doc in random_documents(300):
        state = JsonPrefix()
        for i, b in enumerate(doc):
            assert state.feed(b), (doc, i)
            assert state.done == (i == len(doc) - 1), (doc, i)


def one_byte_mutants(doc: bytes, rng: random.Random, alphabet: bytes, n: int) -> Iterator[bytes]:
    """Up to `n` copies of `doc` with one byte replaced, inserted or deleted (bytes from `alphabet`)."""
    for _ in range(n):
        i = rng.randrange(len(doc) + 1)
        op = rng.choice(["replace", "insert", "delete"])
        if op == "insert":
            yield doc[:i] + bytes([rng.choice(alphabet)]) + doc[i:]
        elif i == len(doc):
            continue
        elif op == "replace":
            yield doc[:i] + bytes([rng.choice(alphabet)]) + doc[i + 1:]
        else:
            yield doc[:i] + doc[i + 1:]


def _python_says(data: bytes) -> bool:
    def refuse(name: str):  # NaN / Infinity: Python's extension, not JSON
        raise ValueError(name)

    try:  # (bytes that are not UTF-8 reach a client as U+FFFD: inside a string, still JSON)
        return isinstance(json.loads(data.decode(errors="replace"), parse_constant=refuse), dict)
    except ValueError:
        return False


def test_one_byte_mutants_are_judged_as_python_judges_them():
    """Every mutant of a valid compact document (a byte replaced, inserted or deleted, whitespace left out: its
    rules are stricter on purpose) is complete for the automaton exactly when json.loads reads it as an object."""
    rng = random.Random(1)
    alphabet = b'{}[]:,"\\0123456789-+.eEtrufalsnx/'
    docs = [d for d in random_documents(400, seed=2) if b"\n" not in d and b", " not in d]
    checked = agreed_valid = 0
    for doc in docs:
        for mutant in one_byte_mutants(doc, rng, alphabet, 30):
            ours, python = complete(mutant), _python_says(mutant)
            assert ours == python, mutant
            checked += 1
            agreed_valid += ours
    assert checked > 4000 and 500 < agreed_valid < checked - 500  # both outcomes were met, many times


@pytest.mark.parametrize("text, ok", [
    (b'{ "a": 1 }', True),
    (b'{\n    "a": [\n        1\n    ]\n}', True),
    (b'\n{}', True),
    (b'{"a":\t1}', True),
    (b'{  "a": 1}', False),  # two spaces: one space, or a newline and indentation
    (b'{\n\n"a": 1}', False),  # a blank line
    (b'{\r\n"a": 1}', False),
    (b'{\n' + b" " * MAX_INDENT + b'"a": 1}', True),
    (b'{\n' + b" " * (MAX_INDENT + 1) + b'"a": 1}', False),
    (b'{"a": 1} ', False),  # nothing after the object: the answer ends there
    (b'{"a": 1}{', False),
    (b'[1]', False),  # an object, as OpenAI's json_object asks
    (b'"x"', False),
    (b'{"a": "\xe4\xb8\xad"}', True),  # UTF-8 inside strings
    (b'{"\xe4": 1}', True),  # half a character: a byte-level token may end there
    (b'{\xe4: 1}', False),
    (b'{\r"a": 1}', False),  # a carriage return never starts whitespace
    (b'{"a": 1e}', False),  # numbers that stop where they may not end
    (b'{"a": 1e+}', False),
    (b'{"a": 1.}', False),
    (b'{"a": -}', False),
    (b'{"a": 1E-7}', True),
    (b'{"a": "\x1f"}', False),  # control characters in strings: escaped or refused
    (b'{"a": "\x00"}', False),
    (b'{"a": "\x7f"}', True),
])
def test_whitespace_and_top_level_rules(text, ok):
    assert complete(text) == ok


def test_depth_is_bounded():
    assert accepts(b'{"a":' + b"[" * 63) is not None and accepts(b'{"a":' + b"[" * 64) is None


def test_a_byte_level_vocabulary_gives_each_tokens_exact_bytes(tiny):
    tok = tiny.tokenizer
    text = 'Ünïcödé 中文 😀 {"a": [1, 2.5e-3]}\n\ttabs'
    ids = tok.encode(text)
    assert b"".join(tok.token_bytes(i) for i in ids) == text.encode()
    assert any(len(tok.token_bytes(i)) == 1 and tok.token_bytes(i)[0] >= 0x80 for i in ids)  # a partial character
    for special in tok.eos_token_ids + [tiny.mask_token_id, tok.think_start_id]:
        assert tok.token_bytes(special) is None
    groups = tok.ids_by_first_byte()
    assert sum(len(v) for v in groups.values()) == len(tok.tokenizer.get_vocab(with_added_tokens=False))
    assert all(tok.token_bytes(i)[0] == b for b, ids_ in groups.items() for i in ids_)


class _Vocab:
    """Seven tokens: 0 `{`, 1 `}`, 2 `"a"`, 3 `:`, 4 `1`, 5 `x`, 6 the stop token."""
    TOKENS = [b"{", b"}", b'"a"', b":", b"1", b"x", None]

    def token_bytes(self, i: int) -> bytes | None:
        return self.TOKENS[i]

    def ids_by_first_byte(self) -> dict[int, list[int]]:
        return {t[0]: [i] for i, t in enumerate(self.TOKENS) if t}


def _reveal(ids, conf, logits=None, state=b"", threshold=0.9, factor=0.0):
    from clover_local.generate.block_diffusion import DecodeSettings, constrained_reveals

    settings = DecodeSettings(threshold=threshold, factor=factor, stop_token_ids=[6],
                              constraint=JsonObjectConstraint(_Vocab(), [6]))
    shape = accepts(state)
    if logits is None:
        logits = torch.zeros(len(ids), 7)
    reveals, after = constrained_reveals(settings, settings.constraint, shape, [5, 6, 7][:len(ids)], logits, ids,
                                         conf)
    return [(r.position, r.token_id) for r in reveals], after


def test_the_decoder_reveals_a_run_from_the_leftmost_mask():
    # the model's own choices, allowed and confident: all three at once, the last the stop after the object
    assert _reveal([0, 1, 6], [0.99, 0.95, 0.99])[0] == [(5, 0), (6, 1), (7, 6)]
    # the run ends at the first one under the threshold, even where a later one is confident
    assert _reveal([0, 1, 6], [0.99, 0.5, 0.99])[0] == [(5, 0)]
    # ... at the first one JSON refuses (`x` after `{`)
    assert _reveal([0, 5, 1], [0.99, 0.99, 0.99])[0] == [(5, 0)]
    # the leftmost is revealed even when unsure (at least one a pass)
    assert _reveal([0, 1], [0.1, 0.99])[0] == [(5, 0)]
    # a confidence at the threshold counts, as pick_reveals counts it
    assert _reveal([0, 1, 6], [0.9, 0.9, 0.9])[0] == [(5, 0), (6, 1), (7, 6)]
    # the stop token ends the run: nothing is revealed after it, even another stop
    assert _reveal([1, 6, 6], [0.99, 0.99, 0.99], state=b"{")[0] == [(5, 1), (6, 6)]
    # a threshold of 1.0: one a pass, even where the model is certain
    assert _reveal([0, 1, 6], [1.0, 1.0, 1.0], threshold=1.0)[0] == [(5, 0)]
    # the factor rule counts the run's reveals: the second at 0.7 passes (3 x 0.3 < 1) where threshold 0.9 stops
    assert _reveal([0, 1, 6], [0.99, 0.7, 0.99], factor=1.0)[0] == [(5, 0), (6, 1), (7, 6)]
    assert _reveal([0, 1, 6], [0.99, 0.7, 0.99], factor=0.5)[0] == [(5, 0)]
    assert _reveal([0, 1, 6], [0.99, 0.99, 0.7], factor=1.0)[0] == [(5, 0), (6, 1)]  # the third: 4 x 0.3 > 1


def test_a_replaced_token_carries_its_own_probability_and_nan_is_refused():
    from clover_local.errors import CloverError
    from clover_local.generate.block_diffusion import DecodeSettings, constrained_reveals

    settings = DecodeSettings(threshold=0.9, stop_token_ids=[6], constraint=JsonObjectConstraint(_Vocab(), [6]))
    logits = torch.tensor([[0.0, 5.0, 1.0, 0.0, 4.0, 9.0, 0.0]])
    reveals, _ = constrained_reveals(settings, settings.constraint, accepts(b"{"), [5], logits, [5], [0.99])
    (r,) = reveals  # `x` refused: `}` in its place, with `}`'s probability, not the refused token's
    assert r.token_id == 1 and r.confidence == pytest.approx(torch.softmax(logits[0], -1)[1].item())
    with pytest.raises(CloverError, match="not finite"):
        constrained_reveals(settings, settings.constraint, accepts(b"{"), [5, 6], torch.zeros(2, 7), [1, 6],
                            [float("nan"), 0.99])


def test_once_the_object_closes_the_likeliest_stop_token_ends_it():
    class TwoStops(_Vocab):
        TOKENS = [b"{", b"}", b'"a"', b":", b"1", b"x", None, None]

    constraint = JsonObjectConstraint(TwoStops(), [6, 7])
    token, _ = constraint.likeliest_allowed(accepts(b"{}"), torch.tensor([9.0, 9, 9, 9, 9, 9, 1, 2]))
    assert token == 7


def test_a_refused_choice_becomes_the_likeliest_allowed_token_and_stands_alone():
    logits = torch.tensor([[0.0, 5.0, 1.0, 0.0, 4.0, 9.0, 0.0]] * 3)  # x, then `}`, then `1`, ... likeliest
    # at the start only `{` is allowed: x, }, 1 and "a" are refused in turn
    reveals, after = _reveal([5, 1, 6], [0.99, 0.99, 0.99], logits)
    assert reveals == [(5, 0)] and after.mode == "first_key"
    # inside the object `}` is the likeliest allowed; the next positions wait (predicted beside a mask)
    reveals, after = _reveal([5, 6, 6], [0.99, 0.99, 0.99], logits, state=b"{")
    assert reveals == [(5, 1)] and after.done
    # once the object is complete, the stop token comes whatever the model prefers
    assert _reveal([4, 4], [0.99, 0.99], logits, state=b"{}")[0] == [(5, 6)]


def test_where_the_likeliest_tokens_are_all_refused_the_first_byte_finds_one():
    """A vocabulary whose TOP_TRIES likeliest tokens are all refused after a key: the search by first byte still
    finds `:`."""
    from clover_local.generate.json_mode import TOP_TRIES

    class Wide:
        def token_bytes(self, i):
            return b":" if i == 0 else None if i == 1 else b"x%d" % i

        def ids_by_first_byte(self):
            return {ord(":"): [0], ord("x"): list(range(2, TOP_TRIES + 10))}

    constraint = JsonObjectConstraint(Wide(), [1])
    logits = torch.arange(TOP_TRIES + 10, dtype=torch.float32)  # `:` least likely
    token, after = constraint.likeliest_allowed(accepts(b'{"a"'), logits)
    assert token == 0 and after.mode == "value"


PROMPTS = ["What is 12 + 7?", "Reverse the list a b c d.", "hi"]


def _answers(loaded, constraint: bool, temperature: float = 0.0, max_new: int = 48):
    from clover_local.generate.block_diffusion import BlockDiffusionDecoder, DecodeSettings
    from clover_local.generate.events import Finished, PassDone

    tok = loaded.tokenizer
    decoder = BlockDiffusionDecoder(loaded.model, loaded.mask_token_id)
    for prompt in PROMPTS:
        text = tok.apply_chat_template([{"role": "user", "content": prompt}], enable_thinking=False)
        settings = DecodeSettings(max_new_tokens=max_new, threshold=loaded.config.diffusion.threshold,
                                  temperature=temperature, seed=3, stop_token_ids=loaded.stop_token_ids,
                                  constraint=JsonObjectConstraint(tok, loaded.stop_token_ids) if constraint else None)
        passes = []
        for ev in decoder.generate(tok.encode(text), settings):
            if isinstance(ev, PassDone):
                passes.append(ev)
            elif isinstance(ev, Finished):
                yield prompt, ev, passes


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_the_tiny_model_is_held_to_one_json_object(tiny, temperature):
    tok = tiny.tokenizer
    objects = 0
    for prompt, fin, passes in _answers(tiny, True, temperature):
        data = b"".join(tok.token_bytes(i) for i in fin.token_ids)
        assert accepts(data) is not None, (prompt, data)  # a JSON prefix, whether or not it ended
        if fin.stats.stop_reason == "stop":
            assert isinstance(json.loads(data), dict)
            objects += 1
        for ev in passes:  # each pass's reveals: a run, right after what the block already holds
            positions = [r.position for r in ev.revealed]
            assert positions == list(range(positions[0], positions[0] + len(positions)))
            revealed = [p for p, t in enumerate(ev.tokens) if t is not None]
            assert revealed == list(range(revealed[-1] + 1))
    assert objects >= 1
    if temperature == 0.0:  # the same prompts answered freely: not JSON (so the constraint did something)
        free = [fin for _, fin, _ in _answers(tiny, False)]
        assert not any(tok.decode(f.token_ids).lstrip().startswith("{") for f in free)


def test_generate_format_json(tiny, capsys):
    assert run_cli(["generate", "tiny", "-p", "hi", "--format", "json", "--device", "cpu", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert isinstance(json.loads(out["text"]), dict) and out["reasoning"] == ""
    assert run_cli(["generate", "tiny", "-p", "hi", "--format", "json", "--think", "--device", "cpu"]) == 2
    assert "drop --think" in capsys.readouterr().err
    assert run_cli(["generate", "tiny", "-p", "hi", "--format", "yaml", "--device", "cpu"]) == 2


def _post(url: str, path: str, body: dict) -> tuple[int, dict | list]:
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            raw = r.read().decode()
            if body.get("stream"):
                return r.status, [json.loads(line[6:]) for line in raw.splitlines()
                                  if line.startswith("data: ") and line != "data: [DONE]"]
            return r.status, json.loads(raw)
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_serve_response_format_json_object(tiny):
    hi = [{"role": "user", "content": "hi"}]
    with running_server(tiny, "tiny", max_tokens=48, context=512) as (_, url):
        status, body = _post(url, "/v1/chat/completions", {"messages": hi, "response_format": {"type": "json_object"}})
        assert status == 200
        content = body["choices"][0]["message"]["content"]
        assert isinstance(json.loads(content), dict) and body["choices"][0]["finish_reason"] == "stop"
        status, chunks = _post(url, "/v1/chat/completions", {"messages": hi, "stream": True,
                                                             "response_format": {"type": "json_object"}})
        assert status == 200
        assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]) == content
        # the raw endpoint too: its prompt continued as one object
        prompt = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
        status, body = _post(url, "/v1/completions", {"prompt": prompt, "max_tokens": 48,
                                                      "response_format": {"type": "json_object"}})
        assert status == 200 and isinstance(json.loads(body["choices"][0]["text"]), dict)
        status, body = _post(url, "/v1/chat/completions", {"messages": hi, "enable_thinking": True,
                                                           "response_format": {"type": "json_object"}})
        assert status == 400 and body["error"]["param"] == "enable_thinking"
        status, body = _post(url, "/v1/chat/completions", {"messages": hi, "response_format": {"type": "yaml"}})
        error = body["error"]
        assert status == 400 and error["param"] == "response_format" and "json_schema" in error["message"]
