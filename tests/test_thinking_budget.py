"""A thinking budget (generate/thinking.py): where the closing text goes, block by block; and in the decoder, on
random checkpoints — the thinking, closing text included, ends within the budget, `</think>` is not written before
the closing text even by a model that wants nothing else, and a budget never reached changes nothing."""

from __future__ import annotations

import pytest

from clover_local.errors import CloverError
from clover_local.generate.thinking import EARLY_EXIT, BudgetTracker, ThinkBudget
from clover_local.loader import load
from tests.test_decoding import BS, prompt_ids, run

START, END = 5, 94
CLOSE = [91, 92, 93, END]


@pytest.fixture
def loaded(make_checkpoint):
    return load(str(make_checkpoint(seed=21)), device="cpu", dtype="float32")


def test_the_closing_text_goes_where_the_budget_runs_out_and_carries_into_the_next_block():
    track = BudgetTracker(ThinkBudget(10, CLOSE, START, END, opened=True))
    assert track.place(0, 0, 8) == ([(6, 91), (7, 92)], 6)  # 6 tokens of thinking, then the closing text
    track.committed(0, [1, 2, 3, 4, 6, 7, 91, 92])
    assert track.place(8, 0, 8) == ([(0, 93), (1, END)], 0)  # the rest of it opens the next block
    track.committed(8, [93, END, 1, 1, 1, 1, 1, 1])
    assert track.ended and track.place(16, 0, 8) == ([], 0)
    # `</think>` inside the closing text (the blank line after it carried into the next block)
    track = BudgetTracker(ThinkBudget(10, [91, END, 92, 93], START, END, opened=True))
    assert track.place(0, 0, 8) == ([(6, 91), (7, END)], 6)
    track.committed(0, [1, 2, 3, 4, 6, 7, 91, END])
    assert track.ended and track.place(8, 0, 8) == ([(0, 92), (1, 93)], 0)


def test_a_budget_counts_from_the_think_the_model_writes_and_stops_at_its_own_close():
    track = BudgetTracker(ThinkBudget(10, CLOSE, START, END))
    assert track.place(0, 3, 8) == ([], 3)  # no thinking yet
    track.committed(0, [START, 1, 1, 1, 1])  # (the prompt's tail took 3 positions)
    assert track.since == 1
    assert track.place(5, 0, 8) == ([(2, 91), (3, 92), (4, 93), (5, END)], 2)  # 4 thought + 2 more = 6
    track = BudgetTracker(ThinkBudget(100, CLOSE, START, END, opened=True))
    assert track.place(0, 0, 8) == ([], 0)  # not reached in this block
    track.committed(0, [1, END, 1, 1, 1, 1, 1, 1])  # closed by the model itself
    assert track.ended and track.place(96, 0, 8) == ([], 0)
    # a budget below the closing text's length: the closing text at once
    track = BudgetTracker(ThinkBudget(2, CLOSE, START, END, opened=True))
    assert track.place(0, 0, 8)[0] == list(enumerate(CLOSE))


def test_a_tokenizer_without_think_tokens_cannot_keep_a_budget(loaded):
    class Plain:
        think_start_id = think_end_id = None

    with pytest.raises(CloverError, match="no <think> and </think>"):
        ThinkBudget.for_tokenizer(Plain(), 100, True)
    with pytest.raises(CloverError, match="at least 1"):
        ThinkBudget.for_tokenizer(loaded.tokenizer, 0, True)
    budget = ThinkBudget.for_tokenizer(loaded.tokenizer, 100, True)
    assert loaded.tokenizer.decode(budget.close_ids) == EARLY_EXIT and budget.end_id in budget.close_ids


def _budget(loaded, tokens: int) -> ThinkBudget:
    return ThinkBudget.for_tokenizer(loaded.tokenizer, tokens, opened=True)


@pytest.mark.parametrize("spare", [0, 5, 11])
def test_the_thinking_ends_within_its_budget_and_the_answer_follows(loaded, spare):
    close = _budget(loaded, 1).close_ids
    tokens = len(close) + spare
    prompt = prompt_ids(loaded, 13)
    _, fin = run(loaded, prompt, max_new_tokens=tokens + 20, think_budget=_budget(loaded, tokens))
    out, at = fin.token_ids, tokens - len(close)
    end = loaded.tokenizer.think_end_id
    assert out[at:tokens] == close and end not in out[:at]  # the thinking, closing text included, is the budget
    assert len(out) == tokens + 20  # and the answer goes on after it
    # the blocks before the one the closing text went into are the model's own, as without a budget
    _, plain = run(loaded, prompt, max_new_tokens=tokens + 20)
    first_block = BS - len(prompt) % BS
    same = max([0] + [b for b in range(first_block, at + 1, BS)])
    assert plain.token_ids[:same] == out[:same] and end not in plain.token_ids[:at]


def test_no_think_end_before_the_closing_text_even_where_the_model_wants_one(loaded):
    """In the block the closing text goes into, that is: the blocks before it may close the thinking (and then no
    closing text comes at all)."""
    end = loaded.tokenizer.think_end_id

    def favour_end(module, args, output):
        output[..., end] += 1000.0
        return output

    hook = loaded.model.lm_head.register_forward_hook(favour_end)
    try:
        prompt = prompt_ids(loaded, 13)
        _, plain = run(loaded, prompt, max_new_tokens=30)
        assert plain.token_ids[0] == end  # the model would close its thinking at once
        budget = _budget(loaded, 1)
        tokens = len(budget.close_ids) + 2  # the closing text from the first block's third answer position on
        assert len(prompt) % BS + 2 < BS
        _, fin = run(loaded, prompt, max_new_tokens=tokens + 8, think_budget=_budget(loaded, tokens))
        out = fin.token_ids
        at = tokens - len(budget.close_ids)
        assert end not in out[:at] and out[at:tokens] == budget.close_ids  # refused before the closing text
    finally:
        hook.remove()


def test_a_budget_never_reached_changes_nothing(loaded):
    prompt = prompt_ids(loaded, 13)
    _, plain = run(loaded, prompt, max_new_tokens=30)
    _, fin = run(loaded, prompt, max_new_tokens=30, think_budget=_budget(loaded, 200))
    assert fin.token_ids == plain.token_ids


def test_generate_think_budget_ends_the_thinking_and_answers(make_checkpoint, capsys):
    """`generate --think-budget` on a random checkpoint whose prompt opens the thinking (raw, as the Qwen3.5
    templates end theirs): it would think to the token limit; with the budget, the thinking ends within it."""
    import json

    from tests.conftest import run_cli

    folder = make_checkpoint(seed=21)
    tok = load(str(folder), "cpu", "float32").tokenizer
    close = ThinkBudget.for_tokenizer(tok, 1, True).close_ids
    budget = len(close) + 6
    args = ["generate", str(folder), "--raw", "-p", "hello <think>\n", "--max-new-tokens", str(budget + 16),
            "--json", "--device", "cpu", "--dtype", "float32"]
    assert run_cli(args) == 0
    plain = json.loads(capsys.readouterr().out)["token_ids"]
    assert tok.think_end_id not in plain[:budget]
    assert run_cli(args + ["--think-budget", str(budget)]) == 0
    ids = json.loads(capsys.readouterr().out)["token_ids"]
    assert ids[budget - len(close):budget] == close and len(ids) == budget + 16
    assert run_cli(args + ["--think-budget", "0"]) == 2
    assert "--think-budget must be at least 1" in capsys.readouterr().err


# a chat template that opens the thinking itself, as the Qwen3.5 ones do
THINK_TEMPLATE = ("{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                  "{%- if add_generation_prompt %}<|im_start|>assistant\n"
                  "{%- if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n"
                  "{%- else %}<think>\n{% endif %}{% endif %}")
EXIT_SENTENCE = EARLY_EXIT.split("</think>")[0].strip()


@pytest.fixture(scope="module")
def thinking_model(tmp_path_factory, tokenizer_dir):
    from tests.conftest import checkpoint_with_tokenizer

    folder = checkpoint_with_tokenizer(tmp_path_factory.mktemp("think") / "ckpt", tokenizer_dir, seed=21)
    (folder / "chat_template.jinja").write_text(THINK_TEMPLATE)
    return load(str(folder), "cpu", "float32")


def test_serve_keeps_a_requests_thinking_budget_and_caps_it_at_its_own(thinking_model):
    openai = pytest.importorskip("openai", reason="the openai client is a test dependency")
    anthropic = pytest.importorskip("anthropic", reason="the anthropic client is a test dependency")
    from tests.inprocess_server import running_server

    close = ThinkBudget.for_tokenizer(thinking_model.tokenizer, 1, True).close_ids
    budget = len(close) + 10
    messages = [{"role": "user", "content": "hello there"}]
    with running_server(thinking_model, "think", max_tokens=512, context=4096) as (_, url):
        client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=120)
        plain = client.chat.completions.create(model="think", messages=messages, max_tokens=budget + 24)
        assert plain.choices[0].finish_reason == "length" and not plain.choices[0].message.content  # all thought
        kept = client.chat.completions.create(model="think", messages=messages, max_tokens=budget + 24,
                                              extra_body={"thinking_token_budget": budget})
        message = kept.choices[0].message
        assert message.reasoning_content.strip().endswith(EXIT_SENTENCE) and message.content
        assert kept.usage.completion_tokens_details.reasoning_tokens <= budget
        with pytest.raises(openai.BadRequestError, match="thinking_token_budget"):
            client.chat.completions.create(model="think", messages=messages, extra_body={"thinking_token_budget": 0})

        claude = anthropic.Anthropic(base_url=url, api_key="x", max_retries=0, timeout=120)
        answer = claude.messages.create(model="think", max_tokens=budget + 24, messages=messages,
                                        thinking={"type": "enabled", "budget_tokens": budget})
        assert [b.type for b in answer.content] == ["thinking", "text"]
        assert answer.content[0].thinking.strip().endswith(EXIT_SENTENCE)

    with running_server(thinking_model, "think", max_tokens=512, context=4096, think_budget=budget) as (_, url):
        client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=120)
        capped = client.chat.completions.create(model="think", messages=messages, max_tokens=budget + 24,
                                                extra_body={"thinking_token_budget": 10 * budget})
        assert capped.choices[0].message.model_dump() == message.model_dump()  # the server's cap, not 10×


def test_serve_thinks_within_a_budget_at_a_low_effort(thinking_model, monkeypatch):
    """OpenAI's `reasoning_effort`, the Responses API's `reasoning.effort` and Ollama's `think` levels: low (and
    medium) think within EFFORT_BUDGETS' budget, high as long as the model likes; a thinking_token_budget wins."""
    import json
    import urllib.request

    openai = pytest.importorskip("openai", reason="the openai client is a test dependency")
    from clover_local.serve import protocol
    from tests.inprocess_server import running_server

    budget = len(ThinkBudget.for_tokenizer(thinking_model.tokenizer, 1, True).close_ids) + 10
    monkeypatch.setitem(protocol.EFFORT_BUDGETS, "low", budget)  # (1,024 is past what the tiny model thinks)
    messages = [{"role": "user", "content": "hello there"}]
    with running_server(thinking_model, "think", max_tokens=512, context=4096) as (_, url):
        client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=120)

        def chat(**extra):
            return client.chat.completions.create(model="think", messages=messages, max_tokens=budget + 24,
                                                  extra_body=extra).choices[0]

        low = chat(reasoning_effort="low")
        assert low.message.reasoning_content.strip().endswith(EXIT_SENTENCE) and low.message.content
        high = chat(reasoning_effort="high")
        assert high.finish_reason == "length" and not high.message.content  # all thought, as with no effort
        asked = chat(reasoning_effort="low", thinking_token_budget=budget + 5)
        assert asked.message.reasoning_content != low.message.reasoning_content  # its own budget, not the effort's
        assert asked.message.reasoning_content.strip().endswith(EXIT_SENTENCE)

        answer = client.responses.create(model="think", input="hello there", max_output_tokens=budget + 24,
                                         reasoning={"effort": "low"})
        assert answer.output_text == low.message.content

        body = {"model": "think", "messages": messages, "think": "low", "stream": False,
                "options": {"num_predict": budget + 24}}
        request = urllib.request.Request(url + "/api/chat", json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as response:
            ollama = json.load(response)["message"]
        assert (ollama["thinking"], ollama["content"]) == (low.message.reasoning_content, low.message.content)


def test_serve_leaves_the_answer_room_unless_told_off(thinking_model):
    """With no budget asked for, a long answer's thinking stops where a quarter of its tokens (at most 1,024) are
    left for the answer — an agent's max_tokens cannot end inside the thought with no answer; `--think-budget off`
    (answer_room False) lets the thought take them all; a short answer (under 256 tokens) is left alone."""
    openai = pytest.importorskip("openai", reason="the openai client is a test dependency")
    from clover_local.commands._sampling_options import serve_think_budget
    from clover_local.errors import CloverError
    from clover_local.generate.thinking import answer_room_budget
    from tests.inprocess_server import running_server

    assert [answer_room_budget(n) for n in (255, 256, 4096, 32000)] == [None, 192, 3072, 30976]
    assert serve_think_budget(None) == (None, True) and serve_think_budget("off") == (None, False)
    assert serve_think_budget("300") == (300, True)
    for bad in ("0", "lots"):
        with pytest.raises(CloverError, match="--think-budget"):
            serve_think_budget(bad)

    messages = [{"role": "user", "content": "hello there"}]
    answers = {}
    for room in (True, False):
        with running_server(thinking_model, "think", max_tokens=512, context=4096, answer_room=room) as (_, url):
            client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=120)
            answers[room] = client.chat.completions.create(model="think", messages=messages, max_tokens=256)
    roomy, off = answers[True], answers[False]
    assert off.choices[0].finish_reason == "length" and not off.choices[0].message.content  # all thought
    assert roomy.choices[0].message.reasoning_content.strip().endswith(EXIT_SENTENCE)
    assert roomy.choices[0].message.content and roomy.usage.completion_tokens_details.reasoning_tokens <= 192


def test_chat_set_think_budget_ends_the_thinking_and_is_checked_and_restored(thinking_model, capsys):
    from clover_local.chat.app import ChatApp
    from clover_local.chat.conversation import ChatSettings, restore_settings, set_value

    close = ThinkBudget.for_tokenizer(thinking_model.tokenizer, 1, True).close_ids
    budget = len(close) + 10
    app = ChatApp(thinking_model, "think", ChatSettings(max_tokens=budget + 24), interactive=False)
    app.ask("hello there")
    thought = app.conv.messages[-1]
    assert not thought["content"] and EXIT_SENTENCE not in thought["reasoning_content"]  # all thinking
    app.command(f"/set think_budget {budget}")
    app.command("/retry")
    answer = app.conv.messages[-1]
    assert answer["reasoning_content"].strip().endswith(EXIT_SENTENCE) and answer["content"]
    capsys.readouterr()
    app.command("/set")
    assert f"think_budget {budget}" in capsys.readouterr().err
    app.command("/set think_budget off")
    app.command("/retry")
    assert app.conv.messages[-1] == thought
    with pytest.raises(CloverError, match="think_budget needs a whole number of at least 1, or off"):
        set_value(app.settings, "think_budget", "0")
    settings = ChatSettings()
    assert restore_settings(settings, {"think_budget": 300}) == ["think_budget"] and settings.think_budget == 300
    assert restore_settings(settings, {"think_budget": None}) == ["think_budget"] and settings.think_budget is None
    assert restore_settings(settings, {"think_budget": 0}) == []
    assert restore_settings(settings, {"think_budget": "9"}) == []
