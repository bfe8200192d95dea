"""Code category: multi-turn and long hand-written conversations.

Each entry is a list of turns: ("system"|"user"|"assistant", text[, think])."""

CONVERSATIONS = [
[
("user", r'''
Write a Python function that checks whether a string is a valid ISBN-10.
'''),
("assistant", r'''
An ISBN-10 has 10 characters: nine digits and a final check character that is a digit or `X` (meaning 10). It's valid when the weighted sum `10·d1 + 9·d2 + ... + 1·d10` is divisible by 11. Hyphens and spaces are only formatting, so strip them first.

```python
def is_valid_isbn10(s: str) -> bool:
    chars = s.replace("-", "").replace(" ", "")
    if len(chars) != 10:
        return False
    total = 0
    for i, ch in enumerate(chars):
        weight = 10 - i
        if ch.isdigit():
            value = int(ch)
        elif ch in "Xx" and i == 9:      # X only allowed as the check character
            value = 10
        else:
            return False
        total += weight * value
    return total % 11 == 0


assert is_valid_isbn10("0-306-40615-2")
assert is_valid_isbn10("0 8044 2957 X")
assert not is_valid_isbn10("0-306-40615-3")
```

For `0306406152`: 10·0 + 9·3 + 8·0 + 7·6 + 6·4 + 5·0 + 4·6 + 3·1 + 2·5 + 1·2 = 0 + 27 + 0 + 42 + 24 + 0 + 24 + 3 + 10 + 2 = 132 = 12 × 11, so it's valid.

One subtlety: `str.isdigit()` is also true for characters like `²` or Arabic-Indic digits. If input comes from untrusted sources, check `ch in "0123456789"` instead.
'''),
("user", r'''
Now add ISBN-13 and a single `is_valid_isbn` that accepts either.
'''),
("assistant", r'''
ISBN-13 uses the EAN-13 rule: multiply digits alternately by 1 and 3, sum them, and the total must be divisible by 10. All 13 characters are digits, no `X`.

```python
DIGITS = set("0123456789")


def _clean(s: str) -> str:
    return s.replace("-", "").replace(" ", "")


def is_valid_isbn13(s: str) -> bool:
    chars = _clean(s)
    if len(chars) != 13 or not set(chars) <= DIGITS:
        return False
    total = sum(int(ch) * (1 if i % 2 == 0 else 3) for i, ch in enumerate(chars))
    return total % 10 == 0


def is_valid_isbn(s: str) -> bool:
    n = len(_clean(s))
    if n == 10:
        return is_valid_isbn10(s)
    if n == 13:
        return is_valid_isbn13(s)
    return False


assert is_valid_isbn13("978-0-306-40615-7")
assert not is_valid_isbn13("978-0-306-40615-6")
assert is_valid_isbn("0-306-40615-2") and is_valid_isbn("9780306406157")
```

Check for `9780306406157`: weights 1,3,1,3,... give 9 + 21 + 8 + 0 + 3 + 0 + 6 + 12 + 0 + 18 + 1 + 15 + 7 = 100, divisible by 10.

If you also want to convert, an ISBN-10 becomes an ISBN-13 by prefixing `978`, dropping the old check character and computing a new one; happy to add that if you need it.
'''),
("user", r'''
yes please, add the conversion
'''),
("assistant", r'''
```python
def isbn10_to_isbn13(isbn10: str) -> str:
    if not is_valid_isbn10(isbn10):
        raise ValueError(f"not a valid ISBN-10: {isbn10!r}")
    core = "978" + _clean(isbn10)[:9]                 # drop the old check character
    total = sum(int(ch) * (1 if i % 2 == 0 else 3) for i, ch in enumerate(core))
    check = (10 - total % 10) % 10
    return core + str(check)


assert isbn10_to_isbn13("0-306-40615-2") == "9780306406157"
assert is_valid_isbn13(isbn10_to_isbn13("0 8044 2957 X"))
```

The final `% 10` handles the case where the sum is already a multiple of 10: `10 - 0` would be 10, which isn't a single digit, so the check digit must be 0.

The reverse conversion only works for `978`-prefixed ISBN-13s; `979` numbers have no ISBN-10 equivalent.
'''),
],
[
("user", r'''
Predict the output order without running it:

```js
console.log("A");
setTimeout(() => console.log("B"), 0);
Promise.resolve().then(() => console.log("C"));
queueMicrotask(() => console.log("D"));
(async () => {
  console.log("E");
  await null;
  console.log("F");
})();
console.log("G");
```
''', r'''
Synchronous first: A. setTimeout schedules macrotask B. Promise.resolve().then queues microtask C. queueMicrotask queues D. Async IIFE runs synchronously up to the first await: logs E; await null queues continuation F as a microtask (after C and D since it's queued later). Then G. Script ends, microtask queue drains in FIFO: C, D, F. Then the timer: B. Output A E G C D F B.
'''),
("assistant", r'''
Output:

```text
A
E
G
C
D
F
B
```

Why, in order:

1. **Synchronous code runs first.** `A` is logged. `setTimeout` only *schedules* B as a task. `.then` queues C as a microtask. `queueMicrotask` queues D. The async function body runs synchronously until its first `await`, so `E` is logged. Then `G`.
2. `await null` suspends the async function and queues its continuation (`F`) as a microtask. It was queued after C and D, so it runs after them.
3. When the script finishes, the **microtask queue is drained completely**, in FIFO order: C, D, F.
4. Only then does the event loop take the next **task** (macrotask): the timer callback, B.

The key rule: all pending microtasks (promise callbacks, `queueMicrotask`, `await` continuations) run before the next task (timers, I/O callbacks), even with a timeout of 0.
'''),
("user", r'''
And if I change `await null` to `await new Promise(r => setTimeout(r, 0))`?
'''),
("assistant", r'''
Then F moves to the end: `A E G C D B F`.

The continuation now waits for a promise that resolves from a **timer**. Timers run in the order they were scheduled, and that timer was created after the `setTimeout` for B (the async function starts after line 2). So:

1. Synchronous: A, E, G.
2. Microtasks: C, D. (There's no F microtask yet; the function is waiting on the timer.)
3. First timer task: B.
4. Second timer task: resolves the promise `r`, which queues the continuation as a microtask; the microtask queue is drained right after that task, so F is logged.

This assumes both timers have the same delay. Node and browsers clamp `0` to at least 1 ms in some situations, but since both calls use the same delay, they still fire in scheduling order.
'''),
],
[
("system", r'''
You are a senior backend engineer helping a teammate. Be practical and concise.
'''),
("user", r'''
We need to add a NOT NULL column `region` (text) to our `accounts` table in Postgres 15. It has ~80M rows and gets writes constantly. How do I do this without downtime?
'''),
("assistant", r'''
On PostgreSQL 11+ you can do it in a few safe steps. The main trap is that some forms of `ALTER TABLE` rewrite the table or scan it while holding a lock that blocks writes.

**1. Add the column with a constant default** (instant, metadata only since PG 11):

```sql
SET lock_timeout = '3s';
ALTER TABLE accounts ADD COLUMN region text NOT NULL DEFAULT 'unknown';
```

A constant default doesn't rewrite the table; existing rows read the default from the catalog. `lock_timeout` matters: `ALTER TABLE` needs an `ACCESS EXCLUSIVE` lock briefly, and if it waits behind a long transaction, every query queued after it waits too. With a timeout it fails fast and you retry.

If you **don't** want a placeholder like `'unknown'`, use the alternative route:

```sql
ALTER TABLE accounts ADD COLUMN region text;                          -- instant
ALTER TABLE accounts ADD CONSTRAINT accounts_region_nn
      CHECK (region IS NOT NULL) NOT VALID;                           -- instant, new rows checked
-- backfill (step 2), then:
ALTER TABLE accounts VALIDATE CONSTRAINT accounts_region_nn;          -- scans, but doesn't block writes
ALTER TABLE accounts ALTER COLUMN region SET NOT NULL;                -- PG 12+: uses the valid CHECK, no scan
ALTER TABLE accounts DROP CONSTRAINT accounts_region_nn;
```

**2. Backfill real values in batches** (see below), while the application already writes `region` for new rows.

**3. Deploy code that reads the column** only after the backfill is finished.
'''),
("user", r'''
How should the batch backfill look? Region comes from joining `addresses` on account_id.
'''),
("assistant", r'''
Batch by primary key ranges so each transaction is short and touches a bounded number of rows:

```sql
-- run repeatedly from a script, advancing :lo by the batch size each time
UPDATE accounts a
SET    region = ad.region
FROM   addresses ad
WHERE  ad.account_id = a.id
  AND  a.id >= :lo AND a.id < :lo + 10000
  AND  a.region IS DISTINCT FROM ad.region;
```

And the driver loop (Python with psycopg, as an example):

```python
import time
import psycopg

BATCH = 10_000
with psycopg.connect(DSN, autocommit=True) as conn:
    max_id = conn.execute("SELECT max(id) FROM accounts").fetchone()[0]
    lo = 0
    while lo <= max_id:
        cur = conn.execute(UPDATE_SQL, {"lo": lo})
        print(f"ids {lo}..{lo + BATCH - 1}: {cur.rowcount} rows")
        lo += BATCH
        time.sleep(0.05)      # leave room for replication and normal traffic
```

Why this shape:

- **Key ranges, not `LIMIT`**: `UPDATE ... LIMIT` isn't supported in Postgres, and "update the next N rows where region is null" needs a scan that gets slower as the table fills in. Range predicates on the primary key use the index and cost the same every batch.
- **`autocommit=True`**: every batch commits on its own. One giant transaction would hold row locks for hours and bloat the table with dead tuples that autovacuum can't clean until it ends.
- **`IS DISTINCT FROM`** skips rows that already have the right value, so the script is safe to rerun after a crash.
- **The sleep** keeps replica lag in check; watch `pg_stat_replication` while it runs and adjust.

At 10k rows per batch, 80M rows is 8,000 batches. Depending on row width and indexes that's typically one to a few hours. Tune the batch size so each `UPDATE` takes well under a second.
'''),
],
[
("user", r'''
Write a small arithmetic expression evaluator in Python: supports + - * /, parentheses, unary minus, integer and decimal numbers, correct precedence. No eval(). I want to understand how parsers work, so keep it readable.
'''),
("assistant", r'''
A good way to learn parsing is to split the job into two stages:

1. **Tokenizer** (lexer): turns the string `"2 * (3 + 4)"` into a list of tokens `[2, '*', '(', 3, '+', 4, ')']`.
2. **Recursive descent parser**: one function per precedence level, each calling the next-higher level.

The grammar, from lowest to highest precedence:

```text
expr   := term (('+' | '-') term)*
term   := factor (('*' | '/') factor)*
factor := ('+' | '-') factor | atom
atom   := NUMBER | '(' expr ')'
```

Each rule becomes a method. Because `expr` calls `term`, and `term` calls `factor`, multiplication binds tighter than addition automatically: by the time `expr` sees a `+`, `term` has already consumed any `*` on both sides.

```python
from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

TOKEN_RE = re.compile(r"\s*(?:(\d+\.\d*|\.\d+|\d+)|(.))")


@dataclass
class Token:
    kind: str          # "num", "op", or "end"
    value: object
    pos: int


class ParseError(ValueError):
    pass


def tokenize(text: str) -> list[Token]:
    tokens = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = TOKEN_RE.match(text, pos)
        if m is None:                       # only trailing whitespace would fail, and we stripped it
            break
        number, op = m.groups()
        if number is not None:
            tokens.append(Token("num", Fraction(number), m.start(1)))
        elif op in "+-*/()":
            tokens.append(Token("op", op, m.start(2)))
        else:
            raise ParseError(f"unexpected character {op!r} at position {m.start(2)}")
        pos = m.end()
    tokens.append(Token("end", None, len(text)))
    return tokens


class Parser:
    def __init__(self, text: str) -> None:
        self.tokens = tokenize(text)
        self.i = 0

    # --- helpers
    def peek(self) -> Token:
        return self.tokens[self.i]

    def take(self) -> Token:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def expect(self, value: str) -> None:
        tok = self.take()
        if tok.value != value:
            raise ParseError(f"expected {value!r} at position {tok.pos}")

    # --- grammar rules
    def parse(self) -> Fraction:
        result = self.expr()
        if self.peek().kind != "end":
            tok = self.peek()
            raise ParseError(f"unexpected {tok.value!r} at position {tok.pos}")
        return result

    def expr(self) -> Fraction:
        value = self.term()
        while self.peek().value in ("+", "-"):
            op = self.take().value
            rhs = self.term()
            value = value + rhs if op == "+" else value - rhs
        return value

    def term(self) -> Fraction:
        value = self.factor()
        while self.peek().value in ("*", "/"):
            op_tok = self.take()
            rhs = self.factor()
            if op_tok.value == "*":
                value = value * rhs
            else:
                if rhs == 0:
                    raise ZeroDivisionError(f"division by zero at position {op_tok.pos}")
                value = value / rhs
        return value

    def factor(self) -> Fraction:
        if self.peek().value in ("+", "-"):
            op = self.take().value
            operand = self.factor()          # allows --3 and -(-3)
            return operand if op == "+" else -operand
        return self.atom()

    def atom(self) -> Fraction:
        tok = self.take()
        if tok.kind == "num":
            return tok.value
        if tok.value == "(":
            value = self.expr()
            self.expect(")")
            return value
        what = "end of input" if tok.kind == "end" else repr(tok.value)
        raise ParseError(f"unexpected {what} at position {tok.pos}")


def evaluate(text: str) -> Fraction:
    return Parser(text).parse()


if __name__ == "__main__":
    cases = {
        "1 + 2 * 3": 7,
        "(1 + 2) * 3": 9,
        "-2 * -(3 - 5)": -4,
        "10 / 4": Fraction(5, 2),
        "0.1 + 0.2": Fraction(3, 10),
        "2 - 3 - 4": -5,          # left-associative
        "8 / 2 / 2": 2,
    }
    for text, want in cases.items():
        got = evaluate(text)
        assert got == want, (text, got, want)
        print(f"{text:<16} = {got}")
    for bad in ["1 +", "(2", "3 $ 4", "1 / (2 - 2)"]:
        try:
            evaluate(bad)
        except (ParseError, ZeroDivisionError) as e:
            print(f"{bad:<16} -> {type(e).__name__}: {e}")
```

Output:

```text
1 + 2 * 3        = 7
(1 + 2) * 3      = 9
-2 * -(3 - 5)    = -4
10 / 4           = 5/2
0.1 + 0.2        = 3/10
2 - 3 - 4        = -5
8 / 2 / 2        = 2
1 +              -> ParseError: unexpected end of input at position 3
(2               -> ParseError: expected ')' at position 2
3 $ 4            -> ParseError: unexpected character '$' at position 2
1 / (2 - 2)      -> ZeroDivisionError: division by zero at position 2
```

Some things worth noticing:

- **Left associativity comes from the `while` loops.** `2 - 3 - 4` is computed as `(2 - 3) - 4` because `expr` folds each new term into the running `value`. A naive recursive rule like `expr := term '-' expr` would compute `2 - (3 - 4) = 3`, which is wrong.
- **Unary minus lives in `factor`**, above `*` in precedence, so `-2 * 3` is `(-2) * 3`. It's recursive, which allows `--3`.
- **`Fraction` instead of `float`** keeps results exact: `0.1 + 0.2` is exactly `3/10`. Call `float(result)` when you want a decimal.
- **Positions in error messages** come from the tokens, which is why the tokenizer records `pos`. Good error messages are most of the work in real parsers.

Natural next steps if you want to extend it: add `^` for exponentiation (right-associative: parse it with recursion instead of a loop), variables (pass a dict into the parser and look up identifiers in `atom`), or build an AST of node objects instead of computing values directly, so you can print, simplify or compile expressions.
'''),
],
[
("user", r'''
This is slow for 5 million rows. How do I speed it up?

```python
import math

def distances(points, origin):
    out = []
    for x, y in points:
        out.append(math.sqrt((x - origin[0]) ** 2 + (y - origin[1]) ** 2))
    return out
```
'''),
("assistant", r'''
The loop runs 5 million iterations of interpreted Python, creating a float object for every intermediate value. Moving the arithmetic into NumPy does the same work in compiled loops over contiguous arrays:

```python
import numpy as np

def distances(points: np.ndarray, origin: tuple[float, float]) -> np.ndarray:
    """points: array of shape (n, 2). Returns an array of shape (n,)."""
    diff = points - np.asarray(origin)     # broadcasting: subtract origin from every row
    return np.hypot(diff[:, 0], diff[:, 1])


pts = np.random.default_rng(0).random((5_000_000, 2))
d = distances(pts, (0.5, 0.5))
```

On a typical laptop the original takes a couple of seconds for 5M points and this version takes tens of milliseconds, roughly 50–100× faster. Measure on your machine with `timeit`.

Notes:

- **Keep data in NumPy end to end.** If `points` arrives as a list of tuples, `np.asarray(points)` itself costs time (about as long as the loop did). The big win comes when you load straight into an array, e.g. `np.loadtxt`, `pandas.read_csv(...).to_numpy()` or `np.fromfile`.
- `np.hypot` avoids overflow for very large coordinates and is as fast as `np.sqrt(dx*dx + dy*dy)`.
- If you only need to **compare** distances (nearest point, points within radius r), skip the square root entirely and compare squared distances with `r*r`.
'''),
("user", r'''
Memory is a concern too. What does this allocate?
'''),
("assistant", r'''
For `n = 5,000,000` float64 points:

| array | shape | size |
|---|---|---|
| `points` (input) | (n, 2) | 80 MB |
| `diff` | (n, 2) | 80 MB |
| `diff[:, 0]`, `diff[:, 1]` | views, no copy | 0 |
| result of `np.hypot` | (n,) | 40 MB |

So about 120 MB on top of the input at peak. Ways to cut it:

1. **Use float32** if you don't need 15 significant digits: `points.astype(np.float32)` once at load time halves everything.
2. **Avoid the `diff` temporary** by working per column with in-place operations:

```python
def distances_lowmem(points: np.ndarray, origin) -> np.ndarray:
    dx = points[:, 0] - origin[0]          # 40 MB
    dy = points[:, 1] - origin[1]          # 40 MB
    np.hypot(dx, dy, out=dx)               # result written into dx, no new array
    return dx
```

Peak extra memory is now 80 MB, and the result reuses one of the buffers.

3. **Process in chunks** if even that's too much, e.g. 500,000 rows at a time written into a preallocated output array or straight to disk. Chunk sizes of a few MB also fit better in CPU caches, so chunking rarely costs speed.

`np.memmap` lets you apply the chunked approach to files larger than RAM without loading them.
'''),
],
[
("user", r'''
Can you explain this Makefile? I inherited it.

```make
.PHONY: all test lint clean

PY ?= python3
SRC := $(wildcard src/*.py)

all: lint test

test:
	$(PY) -m pytest -q

lint: .lint-stamp

.lint-stamp: $(SRC)
	$(PY) -m ruff check src
	touch $@

clean:
	rm -rf .lint-stamp .pytest_cache
```
'''),
("assistant", r'''
It's a small task runner for a Python project. Line by line:

- **`.PHONY: all test lint clean`**: these targets are commands, not files. Without this, a file named `test` in the directory would make `make test` say "up to date" and do nothing.
- **`PY ?= python3`**: sets `PY` only if it isn't already set, so you can override it: `make test PY=python3.12` or `PY=pypy3 make test`.
- **`SRC := $(wildcard src/*.py)`**: the list of Python files in `src/`, computed once when the Makefile is read (`:=` is immediate assignment).
- **`all: lint test`**: running plain `make` (the first target is the default) runs lint and then test.
- **`test`**: always runs pytest. It has no file dependencies, so it runs every time.
- **`lint: .lint-stamp` / `.lint-stamp: $(SRC)`**: the interesting part. `.lint-stamp` is an empty marker file. Make only rebuilds it (runs ruff and touches the stamp) if any file in `src/*.py` is **newer** than the stamp. So `make lint` twice in a row runs ruff once; the second time it's skipped because nothing changed. `$@` means "the target name", here `.lint-stamp`.
- **`clean`**: deletes the stamp and pytest cache, forcing a full re-run next time.

Recipe lines must start with a **tab**, not spaces; that's the most common Makefile error (`missing separator`).

One limitation: `wildcard src/*.py` doesn't recurse, so files in `src/pkg/sub/` won't trigger a re-lint. `SRC := $(shell find src -name '*.py')` fixes that.
'''),
("user", r'''
Add a `fmt` target that runs ruff format, and make `all` run it before lint.
'''),
("assistant", r'''
```make
.PHONY: all fmt test lint clean

PY ?= python3
SRC := $(shell find src -name '*.py')

all: fmt lint test

fmt:
	$(PY) -m ruff format src

test:
	$(PY) -m pytest -q

lint: .lint-stamp

.lint-stamp: $(SRC)
	$(PY) -m ruff check src
	touch $@

clean:
	rm -rf .lint-stamp .pytest_cache
```

Changes: `fmt` is added to `.PHONY` and as the first prerequisite of `all`, and `SRC` now recurses with `find`.

One caveat: prerequisites of the same target are only guaranteed to run in order when `make` runs serially. With `make -j4`, `fmt`, `lint` and `test` could run at the same time, and ruff might lint files while they're being reformatted. If you use parallel builds, make the ordering explicit:

```make
lint: fmt .lint-stamp
```

Formatting rewrites files, which also updates their modification time, so the stamp logic will then correctly re-run the linter on reformatted files.
'''),
],
[
("user", r'''
In Go 1.21, is this safe? I'm summing in parallel.

```go
func parallelSum(nums []int) int {
	var total int
	var wg sync.WaitGroup
	for _, chunk := range split(nums, 4) {
		wg.Add(1)
		go func(c []int) {
			defer wg.Done()
			for _, n := range c {
				total += n
			}
		}(chunk)
	}
	wg.Wait()
	return total
}
```
''', r'''
The loop variable is passed as a parameter, so that's fine (and Go version matters only for capture). The problem is `total += n` from multiple goroutines without synchronisation: a data race. `total += n` is read-modify-write; updates get lost. Race detector would flag. Fix: each goroutine computes local sum and sends it via channel or writes to its own slot in a slice; or use atomic.AddInt64 per goroutine once (not per element: slow). Best: per-chunk partial sums in a slice indexed by chunk number. Also mention results may be flaky-looking correct on small inputs.
'''),
("assistant", r'''
No, it has a **data race** on `total`. `total += n` is a read, an add and a write; two goroutines can read the same old value, both add, and one write overwrites the other, so sums get lost. It may even look correct on small inputs or on one core, which makes it nasty. `go test -race` or `go run -race` will report it.

(Passing `chunk` as the parameter `c` is correct, so the loop-variable capture issue that Go 1.22 changed doesn't apply here.)

Fix: give each goroutine its own partial sum and combine them after `Wait`:

```go
func parallelSum(nums []int) int {
	chunks := split(nums, 4)
	partial := make([]int, len(chunks))
	var wg sync.WaitGroup
	for i, chunk := range chunks {
		wg.Add(1)
		go func(i int, c []int) {
			defer wg.Done()
			s := 0
			for _, n := range c {
				s += n
			}
			partial[i] = s // each goroutine writes only its own element
		}(i, chunk)
	}
	wg.Wait()

	total := 0
	for _, s := range partial {
		total += s
	}
	return total
}
```

Why not a mutex or `atomic.AddInt64` on every element? They're correct, but adding millions of numbers through a lock or an atomic makes every iteration contend for one memory location, and it can end up slower than the plain single-threaded loop. Accumulating locally and combining once avoids any sharing in the hot loop.

Also worth measuring: summing integers is memory-bound and very fast, so for slices under a few hundred thousand elements the goroutine overhead can outweigh the gain.
'''),
],
[
("user", r'''
I want to load settings from a TOML file in Rust with serde, with defaults for missing fields. Example file:

```toml
listen = "0.0.0.0:8080"
[database]
url = "postgres://localhost/app"
```
'''),
("assistant", r'''
Add the dependencies:

```toml
[dependencies]
serde = { version = "1", features = ["derive"] }
toml = "0.8"
```

Then describe the file with structs. `#[serde(default)]` fills missing fields from the type's `Default` implementation:

```rust
use serde::Deserialize;
use std::{fs, path::Path};

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub listen: String,
    pub log_level: String,
    pub database: Database,
}

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Database {
    pub url: String,
    pub max_connections: u32,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: "127.0.0.1:8080".into(),
            log_level: "info".into(),
            database: Database::default(),
        }
    }
}

impl Default for Database {
    fn default() -> Self {
        Database { url: "postgres://localhost/app".into(), max_connections: 10 }
    }
}

pub fn load(path: &Path) -> Result<Config, Box<dyn std::error::Error>> {
    let text = fs::read_to_string(path)?;
    Ok(toml::from_str(&text)?)
}
```

With your example file, `listen` and `database.url` come from the file, while `log_level` ("info") and `max_connections` (10) come from the defaults.

`deny_unknown_fields` turns a typo such as `max_conections = 20` into an error instead of silently using the default, one of the most common configuration bugs.
'''),
("user", r'''
What if I want only max_connections to have a default, and url to be required?
'''),
("assistant", r'''
Drop the struct-level `default` and put a field-level default on just that field:

```rust
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Database {
    pub url: String,                                  // required
    #[serde(default = "default_max_connections")]
    pub max_connections: u32,
}

fn default_max_connections() -> u32 {
    10
}
```

`#[serde(default = "path")]` calls that function when the field is missing. (A plain `#[serde(default)]` on the field would use `u32::default()`, which is 0; not what you want for a connection pool.)

Now a file without `url` fails with an error like:

```text
missing field `url` in `database`
```

If `Config` keeps its struct-level `#[serde(default)]`, the whole `[database]` table may still be omitted, and then `Database::default()` is used. Since `Database` now has a required field, that's probably not what you want: remove `Database`'s `Default` impl and either make the `database` field required too (no struct-level default on `Config`, field-level defaults for the others) or make it `Option<Database>`.
'''),
],
[
("user", r'''
Write a Go generic Map and Filter for slices.
'''),
("assistant", r'''
```go
package slicesx

// Map returns a new slice with f applied to every element.
func Map[T, U any](in []T, f func(T) U) []U {
	out := make([]U, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return out
}

// Filter returns the elements for which keep returns true, in order.
func Filter[T any](in []T, keep func(T) bool) []T {
	var out []T
	for _, v := range in {
		if keep(v) {
			out = append(out, v)
		}
	}
	return out
}
```

```go
names := slicesx.Map(users, func(u User) string { return u.Name })
adults := slicesx.Filter(users, func(u User) bool { return u.Age >= 18 })
```

`Map` preallocates because the output length is known. `Filter` can't know it, so it grows with `append`; it returns `nil` rather than an empty slice when nothing matches, which behaves the same for `len`, `range` and `append` but encodes as `null` in JSON. Use `out := make([]T, 0)` if that matters for your API.
'''),
("user", r'''
Should we use these everywhere instead of for loops?
'''),
("assistant", r'''
I wouldn't. Idiomatic Go still favours plain loops in most places, for a few reasons:

- **Readability in Go is loop-shaped.** A `for` loop with an `if` is what every Go reader expects; chains like `Filter(Map(Filter(...)))` read inside-out, since Go has no method chaining on slices.
- **Each call allocates a new slice.** Chaining three of them makes three passes and three allocations where one loop would do one.
- **Closures can't `break`, `return` from the outer function, or handle errors.** As soon as the transformation can fail, you're back to a loop, or you add `MapErr` variants.
- The standard library added generic helpers in `slices` and `maps` (Go 1.21), but notably no `Map`/`Filter`; the Go team left them out on purpose for these reasons.

Where they do help: short, pure, one-step transformations in otherwise declarative code, like extracting IDs to pass to a query: `ids := Map(users, User.ID)` if `ID` is a method. A reasonable team rule is "fine for a single simple transformation, use a loop for anything with conditions, errors or multiple steps".
'''),
],
]
