"""The Responses API (`POST /v1/responses`) through the official `openai` client: on the shipped tiny model, the
same answer /v1/chat/completions gives for the same conversation (text, thinking, instructions, several items),
streamed as named events the client's accumulator rebuilds, thinking switched by reasoning.effort, JSON mode, the
token limit as status "incomplete", refusals as OpenAI's error shape; on a scripted decoder (test_serve_tools.py's),
function calls out (plain and streamed), past calls and their outputs rendered back, and a failure mid-stream."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from clover_local.errors import CloverError
from clover_local.serve.protocol import ApiError
from clover_local.serve.responses import parse_responses_request
from tests.inprocess_server import running_server
from tests.test_serve_tools import WEATHER, XML_ARGS, ScriptedDecoder

openai = pytest.importorskip("openai", reason="the openai client is a test dependency (pip install -e '.[test]')")

FLAT_WEATHER = {"type": "function", **WEATHER["function"]}  # the Responses API's tool form
ASK = "add 12+30"


@pytest.fixture(scope="module")
def served(tiny):
    with running_server(tiny, "tiny", max_tokens=128, context=1024) as (engine, url):
        yield engine, url


@pytest.fixture(scope="module")
def client(served):
    return openai.OpenAI(base_url=served[1] + "/v1", api_key="unused", max_retries=0, timeout=60)


def post(url: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(url + "/v1/responses", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def chat(client, messages: list[dict], **extra):
    return client.chat.completions.create(model="tiny", messages=messages, max_tokens=64, **extra)


def reasoning_of(response) -> str:
    return "".join(c.text for o in response.output if o.type == "reasoning" for c in o.content or [])


# ---------------------------------------------------------------------------------------------- the tiny model

def test_a_text_answer_is_the_chat_answer(client):
    """A string input and a conversation with instructions and several items answer as chat does (greedy)."""
    one = client.responses.create(model="tiny", input=ASK, max_output_tokens=64)
    same = chat(client, [{"role": "user", "content": ASK}]).choices[0].message
    assert one.output_text == same.content and one.output_text  # the tiny model answers something
    assert reasoning_of(one) == same.model_extra["reasoning_content"]
    assert [o.type for o in one.output] == ["reasoning", "message"] and one.status == "completed"
    assert one.id.startswith("resp_") and one.object == "response" and one.error is None

    items = [{"role": "developer", "content": "Answer briefly."},
             {"role": "user", "content": "add 1+2"},
             {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "3"}]},
             {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "add 2+5"}]}]
    many = client.responses.create(model="tiny", instructions="You add numbers.", input=items,
                                   max_output_tokens=64, metadata={"run": "7"})
    messages = [{"role": "system", "content": "You add numbers.\n\nAnswer briefly."},
                {"role": "user", "content": "add 1+2"}, {"role": "assistant", "content": "3"},
                {"role": "user", "content": "add 2+5"}]
    reference = chat(client, messages)
    assert many.output_text == reference.choices[0].message.content
    assert many.usage.input_tokens == reference.usage.prompt_tokens  # the same prompt, system message included
    assert many.usage.output_tokens == reference.usage.completion_tokens
    assert many.usage.total_tokens == many.usage.input_tokens + many.usage.output_tokens
    assert many.metadata == {"run": "7"} and many.instructions == "You add numbers."


def test_a_stream_adds_up_to_the_response(client, served):
    full = client.responses.create(model="tiny", input=ASK, max_output_tokens=64)
    events = list(client.responses.create(model="tiny", input=ASK, max_output_tokens=64, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    thought = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    final = events[-1].response
    assert text == final.output_text == full.output_text and thought == reasoning_of(full)
    assert len({e.response.id for e in events if e.type.startswith("response.") and hasattr(e, "response")}) == 1
    assert kinds.count("response.output_item.added") == kinds.count("response.output_item.done") == 2

    with client.responses.stream(model="tiny", input=ASK, max_output_tokens=64) as stream:
        for _ in stream:
            pass
        accumulated = stream.get_final_response()  # the client's own bookkeeping of every event
    assert accumulated.output_text == full.output_text

    # each event's `event:` line names its payload's type; no [DONE] at the end
    req = urllib.request.Request(served[1] + "/v1/responses", headers={"Content-Type": "application/json"},
                                 data=json.dumps({"input": ASK, "max_output_tokens": 8, "stream": True}).encode())
    with urllib.request.urlopen(req, timeout=60) as r:
        blocks = [b for b in r.read().decode().split("\n\n") if b.strip()]
    for block in blocks:
        name, data = block.split("\n")
        assert name.removeprefix("event: ") == json.loads(data.removeprefix("data: "))["type"]
    assert "[DONE]" not in blocks[-1]


@pytest.mark.parametrize("effort, thinks", [("none", False), ("minimal", False), ("low", True), ("high", True)])
def test_reasoning_effort_switches_thinking(client, effort, thinks):
    answer = client.responses.create(model="tiny", input=ASK, max_output_tokens=64, reasoning={"effort": effort})
    reference = chat(client, [{"role": "user", "content": ASK}], extra_body={"enable_thinking": thinks})
    assert answer.output_text == reference.choices[0].message.content
    assert answer.usage.input_tokens == reference.usage.prompt_tokens  # the template's empty <think> when off
    assert bool(reasoning_of(answer)) == thinks and answer.reasoning.effort == effort
    assert (answer.usage.output_tokens_details.reasoning_tokens > 0) == thinks


def test_json_mode_answers_one_object(client):
    answer = client.responses.create(model="tiny", input="hi", max_output_tokens=48,
                                     text={"format": {"type": "json_object"}})
    assert isinstance(json.loads(answer.output_text), dict) and not reasoning_of(answer)
    reference = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                               max_tokens=48, response_format={"type": "json_object"})
    assert answer.output_text == reference.choices[0].message.content
    schema = {"type": "object", "properties": {"op": {"enum": ["add", "sub"]}}, "required": ["op"],
              "additionalProperties": False}
    shaped = client.responses.create(model="tiny", input="hi", max_output_tokens=128, reasoning={"effort": "high"},
                                     text={"format": {"type": "json_schema", "name": "op", "schema": schema}})
    assert json.loads(shaped.output_text)["op"] in ("add", "sub") and shaped.text.format.type == "json_schema"


def test_the_token_limit_leaves_the_response_incomplete(client):
    short = client.responses.create(model="tiny", input=ASK, max_output_tokens=3)
    assert (short.status, short.incomplete_details.reason) == ("incomplete", "max_output_tokens")
    assert short.usage.output_tokens == 3 and short.max_output_tokens == 3
    events = list(client.responses.create(model="tiny", input=ASK, max_output_tokens=3, stream=True))
    assert events[-1].type == "response.incomplete" and events[-1].response.status == "incomplete"


@pytest.mark.parametrize("body, param, words", [
    ({"input": "hi", "previous_response_id": "resp_1"}, "previous_response_id", "keeps no responses"),
    ({"input": "hi", "background": True}, "background", "background"),
    ({"input": "hi", "tools": [{"type": "custom", "name": "apply_patch"}]}, "tools[0]", "'custom'"),
    ({"input": "hi", "tools": [{"type": "namespace", "name": "ns", "tools": [{"type": "custom", "name": "x"}]}]},
     "tools[0]", "only function tools"),
    ({"input": 5}, "input", "'input' must be"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input[0].content",
     "only text parts"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0]", "keeps no responses"),
    ({"input": "hi", "max_output_tokens": 100000}, "max_output_tokens", "max_output_tokens is 100000"),
    ({"input": "hi", "tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": []}, "tools": [FLAT_WEATHER]},
     "tool_choice", "not supported"),
    ({"input": "hi", "text": {"format": {"type": "xml"}}}, "text.format", "'text.format'"),
    ({"input": "hi", "text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format", "'schema'"),
    ({"input": "hi", "text": {"format": {"type": "json_schema", "schema": {"pattern": "a"}}}}, "text.format",
     "pattern"),
    ({"input": "hi", "conversation": "conv_1"}, "conversation", "keeps no responses"),
    ({"input": "hi", "prompt": {"id": "pmpt_1"}}, "prompt", "stored prompt"),
    ({"input": "hi", "reasoning": "high"}, "reasoning", "must be an object"),
    ({"input": [{"role": "user", "content": "hi"},
                {"type": "function_call", "call_id": "c", "name": "get_weather", "arguments": {"city": "Oslo"}}]},
     "input[1]", "JSON string"),
    ({"input": [{"role": "user", "content": "hi"}, {"type": "function_call_output", "output": "sunny"}]}, "input[1]",
     "'call_id'"),
])
def test_what_cannot_be_honoured_is_a_400_in_openais_shape(client, served, body, param, words):
    status, answer = post(served[1], body)
    assert status == 400 and set(answer["error"]) == {"message", "type", "param", "code"}
    assert answer["error"]["param"] == param and words in answer["error"]["message"]
    assert answer["error"]["type"] == "invalid_request_error"


def test_the_sdk_sees_a_refusal_as_bad_request(client):
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="tiny", input="hi", previous_response_id="resp_123")
    assert err.value.status_code == 400 and err.value.body["param"] == "previous_response_id"


def test_input_items_become_the_chat_messages():
    """Consecutive calls are one assistant turn, a reasoning item that turn's reasoning_content, an output its
    tool message; max_output_tokens is the chat request's max_tokens."""
    body = {"instructions": "Be brief.", "max_output_tokens": 9, "tools": [FLAT_WEATHER], "input": [
        {"role": "system", "content": "No chatter."},
        {"role": "user", "content": "weather?"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "ask"}]},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather",
         "arguments": '{"city": "Oslo"}'},  # (Codex sends the item's id back beside the call's)
        {"type": "function_call", "id": "fc_2", "call_id": "call_2", "name": "get_weather",
         "arguments": '{"city": "Rome"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        {"type": "function_call_output", "call_id": "call_2",
         "output": [{"type": "input_text", "text": "rain"}, {"type": "input_text", "text": " later"}]}]}
    req = parse_responses_request(json.dumps(body).encode())
    chat_req = req.chat
    assert [m["role"] for m in chat_req.messages] == ["system", "user", "assistant", "tool", "tool"]
    assert chat_req.messages[0]["content"] == "Be brief.\n\nNo chatter."
    turn = chat_req.messages[2]
    assert turn["reasoning_content"] == "ask" and turn["content"] == ""
    assert [(c["id"], c["function"]["arguments"]) for c in turn["tool_calls"]] == [
        ("call_1", {"city": "Oslo"}), ("call_2", {"city": "Rome"})]
    assert chat_req.messages[4] == {"role": "tool", "content": "rain later", "tool_call_id": "call_2"}
    assert chat_req.tools == [WEATHER] and chat_req.template_kwargs["tools"] == [WEATHER]
    assert chat_req.max_tokens == 9 and chat_req.enable_thinking
    assert req.echo["tools"] == [FLAT_WEATHER] and req.echo["store"] is False
    assert (req.echo["tool_choice"], req.echo["truncation"], req.echo["parallel_tool_calls"]) == (
        "auto", "disabled", True)  # what was not sent, echoed as its default
    # tools and JSON mode together, as on chat: the answer is the JSON or a call (held in the server's _job), and
    # written without thinking
    both = parse_responses_request(json.dumps({**body, "text": {"format": {"type": "json_object"}}}).encode()).chat
    assert both.json_object and both.tools == [WEATHER] and not both.enable_thinking


def test_a_conversation_codex_sends_back_becomes_its_turns():
    """Codex's history: its developer messages first (all of them the one system message, after the
    instructions), then per turn a reasoning item, the assistant's message and its call — one assistant turn, the
    reasoning item's own text (its content, else its summary) as the turn's reasoning — the call's output, and the
    answer that followed it, whose turn that reasoning is not; refusal parts are text."""
    req = parse_responses_request(json.dumps({"instructions": "Be brief.", "tools": [FLAT_WEATHER], "input": [
        {"role": "developer", "content": "Sandbox on."},
        {"role": "developer", "content": [{"type": "input_text", "text": "Approvals never."}]},
        {"role": "user", "content": "weather in Oslo?"},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "summary"}],
         "content": [{"type": "reasoning_text", "text": "look "}, {"type": "reasoning_text", "text": "it up"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather",
         "arguments": '{"city": "Oslo"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        {"type": "reasoning", "id": "rs_2", "summary": [{"type": "summary_text", "text": "and Rome"}]},
        {"type": "function_call", "id": "fc_2", "call_id": "call_2", "name": "get_weather",
         "arguments": '{"city": "Rome"}'},
        {"type": "function_call_output", "call_id": "call_2", "output": "rain"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Sunny. "},
                                                             {"type": "refusal", "refusal": "No more."}]},
        {"role": "user", "content": "thanks"}]}).encode()).chat
    assert req.messages == [
        {"role": "system", "content": "Be brief.\n\nSandbox on.\n\nApprovals never."},
        {"role": "user", "content": "weather in Oslo?"},
        {"role": "assistant", "content": "Checking.", "reasoning_content": "look it up", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "assistant", "content": "", "reasoning_content": "and Rome", "tool_calls": [
            {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Rome"}}}]},
        {"role": "tool", "tool_call_id": "call_2", "content": "rain"},
        {"role": "assistant", "content": "Sunny. No more."},
        {"role": "user", "content": "thanks"}]


def test_tool_choice_and_thinking_fields_are_read():
    """A forced call ("required", or a function by name) is the whole answer, written without thinking even where
    the request says nothing of it; `parallel_tool_calls`, `tool_choice` and `strict` are kept (and echoed); a
    reasoning effort asks for thinking with its budget ("low" 1,024 tokens, "medium" 4,096), and
    `thinking_token_budget` sets one itself."""
    def read(**body):
        return parse_responses_request(json.dumps({"input": "hi", "tools": [FLAT_WEATHER], **body}).encode())

    required = read(tool_choice="required", parallel_tool_calls=False)
    assert required.chat.forced.tools == [WEATHER] and required.chat.enable_thinking is False
    assert required.chat.parallel_calls is False and required.chat.forced.parallel is False
    assert (required.echo["tool_choice"], required.echo["parallel_tool_calls"]) == ("required", False)
    named = read(tool_choice={"type": "function", "name": "get_weather"})
    assert named.chat.forced.tools == [WEATHER] and named.chat.enable_thinking is False
    strict = read(tools=[{**FLAT_WEATHER, "strict": True}])
    assert strict.chat.tools == [{"type": "function", "function": {**WEATHER["function"], "strict": True}}]
    for effort, budget in (("low", 1024), ("medium", 4096), ("high", None)):
        chat_req = read(reasoning={"effort": effort}).chat
        assert (chat_req.enable_thinking, chat_req.think_budget, chat_req.thinking_asked) == (True, budget, True)
    assert read(thinking_token_budget=300).chat.think_budget == 300
    assert not read().chat.thinking_asked and read().chat.think_budget is None


def test_the_output_is_the_same_streamed_or_not():
    """`ResponseAnswer` gives one answer alike whole and streamed, for every mix of thinking, text (whitespace alone
    makes no item; whitespace before the text is held back, then sent with it) and calls, cut or not: the done
    items are the response's output, each item's deltas add up to its text (or arguments), an item opens empty
    (a call's arguments streamed after it opens, as the client's accumulator appends them) and a message the token
    limit cut is "incomplete"; a dotted name outside any namespace comes back whole."""
    from clover_local.serve.responses import ResponseAnswer
    from clover_local.serve.tools import ToolCall

    req = parse_responses_request(json.dumps({"input": "hi"}).encode())
    calls_ = [ToolCall("get_weather", {"city": "Oslo"}, "call_1"), ToolCall("web.get_page", {"url": "x"}, "call_2")]

    def strip(item):
        return {k: v for k, v in item.items() if k != "id"}

    for reasoning in ("", "hmm"):
        for content in ("", " \n", "\n\nSure."):
            for calls in ([], calls_):
                for finish in ("stop", "length"):
                    info = {"reasoning": reasoning, "finish_reason": finish, "prompt_tokens": 5, "cached_tokens": 2,
                            "completion_tokens": 3, "reasoning_tokens": 1, "stats": {}}
                    whole = ResponseAnswer(req, "m").whole(info, content, calls)
                    kinds = ["reasoning"] * bool(reasoning) + ["message"] * ("Sure" in content) + [
                        "function_call"] * len(calls)
                    assert [o["type"] for o in whole["output"]] == kinds, (reasoning, content, calls, finish)
                    assert whole["usage"]["input_tokens_details"]["cached_tokens"] == 2
                    status = "incomplete" if finish == "length" else "completed"
                    assert [o["status"] for o in whole["output"] if o["type"] == "message"] == [status] * (
                        "Sure" in content)
                    assert [(o["name"], "namespace" in o) for o in whole["output"] if o["type"] == "function_call"] \
                        == [("get_weather", False), ("web.get_page", False)][:len(calls)]

                    stream = ResponseAnswer(req, "m")
                    events = stream.start() + stream.delta(reasoning, "") + stream.delta("", content[:2])
                    events += stream.end(info, content[2:], calls)
                    done = [e["item"] for name, e in events if name == "response.output_item.done"]
                    assert [strip(o) for o in done] == [strip(o) for o in whole["output"]]
                    assert [strip(o) for o in events[-1][1]["response"]["output"]] == [strip(o) for o in done]
                    added = [e["item"] for name, e in events if name == "response.output_item.added"]
                    assert all(o.get("content", []) == [] and o.get("arguments", "") == "" for o in added)
                    assert [o["status"] for o in added if o["type"] == "function_call"] == ["in_progress"] * len(calls)
                    for i, item in enumerate(done):
                        deltas = "".join(e["delta"] for name, e in events if e.get("output_index") == i
                                         and name.endswith(".delta"))
                        finals = [e.get("text", e.get("arguments")) for name, e in events
                                  if e.get("output_index") == i and name.endswith(("text.done", "arguments.done"))]
                        whole_text = item["arguments"] if item["type"] == "function_call" else \
                            item["content"][0]["text"]
                        assert deltas == whole_text and finals == [whole_text], (i, item)


# ---------------------------------------------------------------------------------------------- scripted calls

def test_a_call_comes_back_as_a_function_call_item_streamed_or_not(tool_server):
    engine, url = tool_server
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)
    full = client.responses.create(model="tools", input="Weather in SF?", tools=[FLAT_WEATHER])
    assert [o.type for o in full.output] == ["message", "function_call"]
    call = full.output[1]
    assert (call.name, json.loads(call.arguments), call.status) == ("get_weather", XML_ARGS, "completed")
    assert call.call_id.startswith("call_") and call.id.startswith("fc_")
    assert full.output_text == "Let me check.\n" and full.tools[0].name == "get_weather"
    prompt = engine.tokenizer.decode(engine.decoder.prompts[-1])
    assert '"name": "get_weather"' in prompt and "# Tools" in prompt  # the model was told of the tool

    with client.responses.stream(model="tools", input="Weather in SF?", tools=[FLAT_WEATHER]) as stream:
        events = list(stream)
        final = stream.get_final_response()
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "Let me check.\n" and "<tool" not in text
    (args,) = [e.arguments for e in events if e.type == "response.function_call_arguments.done"]
    assert json.loads(args) == XML_ARGS
    assert [e.delta for e in events if e.type == "response.function_call_arguments.delta"] == [args]
    assert [o.type for o in final.output] == ["message", "function_call"]
    assert json.loads(final.output[1].arguments) == XML_ARGS and final.output_text == "Let me check.\n"


def test_past_calls_and_their_outputs_are_rendered_back(tool_server):
    engine, url = tool_server
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)
    client.responses.create(model="tools", tools=[FLAT_WEATHER], instructions="Use the tools.", input=[
        {"role": "user", "content": "Weather in Oslo and Rome?"},
        {"type": "function_call", "call_id": "call_a", "name": "get_weather", "arguments": '{"city": "Oslo"}'},
        {"type": "function_call", "call_id": "call_b", "name": "get_weather", "arguments": '{"city": "Rome"}'},
        {"type": "function_call_output", "call_id": "call_a", "output": "18 C and foggy"},
        {"type": "function_call_output", "call_id": "call_b", "output": "25 C"}])
    prompt = engine.tokenizer.decode(engine.decoder.prompts[-1])
    assert "<|im_start|>system\nUse the tools.<|im_end|>" in prompt
    assert "<tool_response>\n18 C and foggy\n</tool_response>" in prompt and "<tool_response>\n25 C\n" in prompt
    past = prompt.split("<|im_start|>assistant")[1]  # both calls in one assistant turn
    assert "<parameter=city>\nOslo\n</parameter>" in past and "<parameter=city>\nRome\n</parameter>" in past
    assert prompt.count("<|im_start|>assistant") == 2  # that turn and the answer's


class FailingDecoder(ScriptedDecoder):
    """Writes its first block, then fails as a runtime would."""

    def generate(self, prompt_ids, settings, reuse=None, snapshot_at=None):
        yield next(super().generate(prompt_ids, settings, reuse, snapshot_at))
        raise CloverError("the device fell over")


def test_a_failure_mid_stream_ends_it_with_response_failed(tool_server):
    engine, url = tool_server
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)
    scripted = engine.decoder
    engine.decoder = FailingDecoder(engine.tokenizer, "Some text that runs on " * 4, scripted.block_size)
    try:
        events = list(client.responses.create(model="tools", input="hi", stream=True))
    finally:
        engine.decoder = scripted
    last = events[-1]
    assert last.type == "response.failed" and last.response.status == "failed"
    assert last.response.error.code == "generation_failed" and "fell over" in last.response.error.message
    assert last.response.output[0].content[0].text.startswith("Some text")  # what came before the failure
    assert [e.sequence_number for e in events] == list(range(len(events)))


AGENTS = {"type": "namespace", "name": "agents", "description": "Sub-agents.", "tools": [
    {"type": "function", "name": "close_agent", "parameters": {"type": "object", "properties": {
        "id": {"type": "integer"}}}}]}
CLOSE_CALL = ("<tool_call>\n<function=agents.close_agent>\n<parameter=id>\n7\n</parameter>\n</function>\n"
              "</tool_call>")


def test_what_codex_sends_namespaces_and_hosted_tools(tool_server):
    """Codex sends a `namespace` of function tools and the hosted web_search with every request: the namespace's
    functions reach the template as `namespace.name` and a call to one comes back as its name with its namespace
    (and goes back in the same form); web_search, which only OpenAI's servers run, is left out — the model is
    never told of it — rather than failing the request."""
    engine, url = tool_server
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)
    scripted = engine.decoder.ids
    engine.decoder.ids = engine.tokenizer.encode(CLOSE_CALL)
    try:
        tools = [FLAT_WEATHER, AGENTS, {"type": "web_search", "external_web_access": False}]
        full = client.responses.create(model="tools", input="close agent 7", tools=tools)
        events = list(client.responses.create(model="tools", input="close agent 7", tools=tools, stream=True))
    finally:
        engine.decoder.ids = scripted
    prompt = engine.tokenizer.decode(engine.decoder.prompts[-1])
    assert '"name": "agents.close_agent"' in prompt and '"name": "get_weather"' in prompt
    assert "web_search" not in prompt
    (call,) = full.output
    assert (call.type, call.name, call.namespace, json.loads(call.arguments)) == (
        "function_call", "close_agent", "agents", {"id": 7})
    (done,) = [e.item for e in events if e.type == "response.output_item.done"]
    assert (done.name, done.namespace) == ("close_agent", "agents")
    client.responses.create(model="tools", tools=tools, input=[
        {"role": "user", "content": "close agent 7"},
        {"type": "function_call", "call_id": call.call_id, "name": "close_agent", "namespace": "agents",
         "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "closed"}])
    prompt = engine.tokenizer.decode(engine.decoder.prompts[-1])
    assert "<function=agents.close_agent>" in prompt and "<tool_response>\nclosed\n</tool_response>" in prompt
