"""What JSON mode's search costs at the 35B vocabulary size (248,320 tokens): `python docs/json_mode_cost.py`.

The vocabulary is synthetic (random byte strings of 1-8 bytes; the real tokenizer cannot be downloaded here), so
this times the automaton and the search, not the tokenizer's own lookups (`ChatTokenizer.token_bytes`)."""
import random, time, torch
from clover_local.generate.json_mode import JsonObjectConstraint, JsonPrefix
rng = random.Random(0)
V = 248320
alphabet = [bytes([b]) for b in range(32, 127)] + [bytes([b]) for b in range(128, 256)]
toks = [b"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8))) for _ in range(V)]
class Vocab:
    def __init__(self): self._g = None
    def token_bytes(self, i): return toks[i]
    def ids_by_first_byte(self):
        if self._g is None:
            g = {}
            for i, t in enumerate(toks): g.setdefault(t[0], []).append(i)
            self._g = g
        return self._g
v = Vocab()
t = time.perf_counter(); v.ids_by_first_byte(); print(f"group build: {time.perf_counter()-t:.3f} s")
c = JsonObjectConstraint(v, [V - 1])
def state(prefix):
    s = JsonPrefix(); assert s.feed_all(prefix); return s
for name, prefix in [("inside a string", b'{"a": "x'), ("after a key (only : or whitespace)", b'{"a"'),
                     ("after a value (, or })", b'{"a": 1'), ("start (only { or whitespace)", b"")]:
    s = state(prefix)
    logits = torch.randn(V)
    for _ in range(2): c.likeliest_allowed(s, logits)
    n = 20; t = time.perf_counter()
    for _ in range(n): c.likeliest_allowed(s, logits)
    dt = (time.perf_counter() - t) / n
    ok = sum(c.advance(s, i) is not None for i in logits.topk(64).indices.tolist())
    print(f"{name}: {dt*1e3:.1f} ms per refused choice ({ok}/64 of the top tokens allowed)")
# the common case: the model's choice allowed: one advance
s = state(b'{"a": "x'); t = time.perf_counter()
for i in range(10000): c.advance(s, i)
print(f"advance (one token check): {(time.perf_counter()-t)/10000*1e6:.1f} us")

# a JSON schema (generate --json-schema, serve's json_schema): the same search, a schema automaton's states
from clover_local.generate.json_schema import SchemaConstraint, compile_schema  # noqa: E402

schema = compile_schema({"type": "object", "additionalProperties": False, "required": ["name", "age", "tags"],
                         "properties": {"name": {"type": "string", "maxLength": 40}, "age": {"type": "integer"},
                                        "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}},
                                        "note": {"anyOf": [{"type": "string"}, {"type": "null"}]}}})
sc = SchemaConstraint(v, [V - 1], schema)


def schema_state(prefix):
    s = schema.start(); assert s.feed_all(prefix), prefix; return s


for name, prefix in [("schema: inside a string", b'{"name": "Ad'), ("schema: a key being written", b'{"na'),
                     ("schema: after a key", b'{"name"'), ("schema: an enum value", b'{"name": "A", "age": 3, "tags": ["r')]:
    s = schema_state(prefix)
    logits = torch.randn(V)
    for _ in range(2): sc.likeliest_allowed(s, logits)
    n = 20; t = time.perf_counter()
    for _ in range(n): sc.likeliest_allowed(s, logits)
    print(f"{name}: {(time.perf_counter() - t) / n * 1e3:.1f} ms per refused choice")
s = schema_state(b'{"name": "Ad'); t = time.perf_counter()
for i in range(10000): sc.advance(s, i)
print(f"schema advance (one token check, inside a string): {(time.perf_counter()-t)/10000*1e6:.1f} us")
