"""Code category: explaining, reviewing and refactoring code (hand-written)."""

ENTRIES = [
dict(
ask=r'''
What does this do? Found it in our codebase with no comment.

```python
def f(n):
    return n > 0 and n & (n - 1) == 0
```
''',
answer=r'''
It returns `True` when `n` is a **power of two** (1, 2, 4, 8, ...) and `False` otherwise.

How: a power of two has exactly one `1` bit in binary. Subtracting 1 flips that bit to `0` and turns every lower bit into `1`, so `n` and `n - 1` share no set bits and `n & (n - 1)` is 0:

| n | binary | n - 1 | n & (n - 1) |
|---|---|---|---|
| 8 | `1000` | `0111` | `0000` → power of two |
| 12 | `1100` | `1011` | `1000` → not |
| 1 | `0001` | `0000` | `0000` → power of two (2⁰) |

For any other number, `n - 1` leaves the highest set bit in place, so the AND is non-zero.

The `n > 0` guard is needed because `0 & -1 == 0` would otherwise count 0 as a power of two. Note the precedence: in Python `&` binds tighter than `==`, so `n & (n - 1) == 0` is parsed as `(n & (n - 1)) == 0`, which is the intent. (In C it's the other way round and you'd need the parentheses.)

I'd rename it and add a docstring:

```python
def is_power_of_two(n: int) -> bool:
    """True for 1, 2, 4, 8, ...; uses the fact that powers of two have a single set bit."""
    return n > 0 and n & (n - 1) == 0
```
''',
),
dict(
ask=r'''
Can you explain this regex line by line? `^(?=.*[A-Z])(?=.*\d)(?!.*\s).{12,64}$`
''',
answer=r'''
It's a password rule written as one pattern. Piece by piece:

| part | meaning |
|---|---|
| `^` | start of the string |
| `(?=.*[A-Z])` | lookahead: somewhere ahead there is at least one uppercase ASCII letter |
| `(?=.*\d)` | lookahead: somewhere ahead there is at least one digit |
| `(?!.*\s)` | negative lookahead: there is **no** whitespace anywhere |
| `.{12,64}` | then 12 to 64 characters of anything (except newline) |
| `$` | end of the string |

The lookaheads are the trick: each one checks a condition from the start position **without consuming characters**, so after all three pass, the engine is still at position 0 and `.{12,64}$` checks the length of the whole string.

So it accepts `CorrectHorse42battery` and rejects:

- `correcthorse42battery`: no uppercase letter
- `CorrectHorseBattery`: no digit
- `Correct Horse 42 battery`: contains spaces
- `Short1A`: fewer than 12 characters

Things to be aware of: `[A-Z]` only counts ASCII capitals, so `É` doesn't satisfy it, and `\d` may match non-ASCII digits in some engines (Python's `re` does for `str` patterns). Also, current NIST guidance (SP 800-63B) recommends length and breached-password checks over composition rules like "must contain an uppercase letter", so you may want to revisit the policy itself.
''',
),
dict(
ask=r'''
Explain what this Go code does, especially the select with the empty default.

```go
func (q *Queue) TryPush(item Job) bool {
	select {
	case q.ch <- item:
		return true
	default:
		return false
	}
}
```
''',
answer=r'''
It's a **non-blocking send**. `TryPush` tries to put `item` into the channel `q.ch`; if that can't happen immediately, it gives up and returns `false` instead of waiting.

How `select` behaves here:

- A `select` picks a case whose operation can proceed right now. `q.ch <- item` can proceed if the channel has free buffer space, or (for an unbuffered channel) if a receiver is currently waiting.
- If no case is ready and there is a `default`, `default` runs immediately. Without `default`, `select` would block until the send became possible.

So: channel has room → item is enqueued, returns `true`; channel full → returns `false` right away.

Typical uses are load shedding ("queue full, return HTTP 503") and dropping low-priority events such as metrics rather than stalling the producer.

Two caveats:

- If `q.ch` is **unbuffered** and no goroutine is blocked receiving at that exact moment, `TryPush` always fails. This pattern normally goes with `make(chan Job, N)`.
- Sending on a **closed** channel panics even inside a `select` with `default`. If the queue can be closed while producers run, you need a separate "closed" flag protected by a mutex, or to make sure producers stop before `close`.
''',
),
dict(
ask=r'''
I don't get this Rust signature. What do the lifetimes mean?

```rust
fn first_word<'a>(s: &'a str) -> &'a str {
    s.split_whitespace().next().unwrap_or("")
}
```
''',
answer=r'''
`'a` is a name for "however long the borrowed input lives". The signature says: *the returned `&str` borrows from `s` and is valid for as long as `s` is*.

That's accurate: `split_whitespace().next()` returns a slice **into** `s`, no copy. So the compiler needs to know the result can't outlive the original string:

```rust
let word;
{
    let text = String::from("hello world");
    word = first_word(&text);
    println!("{word}");      // fine: text still alive
}
// println!("{word}");       // error: `text` does not live long enough
```

The `unwrap_or("")` case also type-checks: `""` is a `&'static str`, and a `'static` reference can be used wherever a shorter lifetime `'a` is expected.

You could actually write this without the annotation, `fn first_word(s: &str) -> &str`. Rust's lifetime elision rules say that when there's exactly one reference input, the output borrows from it, so the compiler fills in the same `'a` for you. Explicit lifetimes become necessary when there are several reference inputs and the compiler can't tell which one the result borrows from.
''',
),
dict(
ask=r'''
What's the difference between these two in JS? A colleague says the second is "more correct".

```js
const total = items.reduce((sum, x) => sum + x.price);
const total2 = items.reduce((sum, x) => sum + x.price, 0);
```
''',
answer=r'''
Your colleague is right; the first one is a bug waiting to happen.

Without an initial value, `reduce` uses the **first element** as the starting accumulator and begins with the second element. Here the elements are objects, so:

- `items = [{price: 5}, {price: 7}]`: first call is `sum = {price: 5}`, `x = {price: 7}`, and `{price: 5} + 7` is the string `"[object Object]7"`.
- `items = [{price: 5}]`: the callback never runs and `total` is the object `{price: 5}`, not `5`.
- `items = []`: throws `TypeError: Reduce of empty array with no initial value`.

With `0` as the initial value, `sum` starts as a number, every element goes through the callback, and an empty array gives `0`.

Rule of thumb: always pass the initial value to `reduce` unless the array elements are already the same type as the result *and* you've ruled out the empty case. For sums specifically, some teams prefer a plain loop or a small helper like `sumBy(items, x => x.price)` for readability.
''',
),
dict(
ask=r'''
Explain this Python decorator. Why is functools.wraps there, and what happens if I remove it?

```python
import functools, time

def log_calls(fn):
    @functools.wraps(fn)
    def inner(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            print(f"{fn.__name__} took {time.perf_counter() - t0:.4f}s")
    return inner
```
''',
answer=r'''
`log_calls` takes a function and returns a new function, `inner`, that calls the original, measures the time, and prints it. Writing `@log_calls` above a `def` is shorthand for `f = log_calls(f)`.

Details of `inner`:

- `*args, **kwargs` forward any arguments unchanged, so the decorator works for any signature.
- `try/finally` prints the timing even when `fn` raises; the exception still propagates.
- `return fn(...)` inside `try` passes the return value through.

**What `functools.wraps(fn)` does:** it copies metadata from `fn` onto `inner`: `__name__`, `__qualname__`, `__doc__`, `__module__`, `__dict__`, and sets `inner.__wrapped__ = fn`.

Without it:

```python
@log_calls
def load_users():
    """Load users from the DB."""

load_users.__name__   # 'inner'   (with wraps: 'load_users')
load_users.__doc__    # None      (with wraps: 'Load users from the DB.')
```

That breaks more than cosmetics: `help()` shows the wrong thing, stack traces and profilers label everything `inner`, pytest fixtures or Flask routes that use the function name can collide, and `inspect.signature()` reports `(*args, **kwargs)` instead of the real parameters (it follows `__wrapped__` to find them). So it's a one-liner that every wrapper-style decorator should have.
''',
),
dict(
ask=r'''
Can you walk me through this Dijkstra implementation? Especially the `if d > dist[u]: continue` line.

```python
import heapq

def dijkstra(graph, src):
    dist = {src: 0}
    pq = [(0, src)]
    while pq:
        d, u = heapq.heappop(pq)
        if d > dist[u]:
            continue
        for v, w in graph[u]:
            nd = d + w
            if nd < dist.get(v, float("inf")):
                dist[v] = nd
                heapq.heappush(pq, (nd, v))
    return dist
```
''',
answer=r'''
This computes the shortest distance from `src` to every reachable node in a graph with **non-negative** edge weights. `graph[u]` is a list of `(neighbour, weight)` pairs.

Step by step:

1. `dist` holds the best distance found so far; `pq` is a min-heap of `(distance, node)` candidates.
2. Each iteration pops the candidate with the smallest distance. Because weights are non-negative, nothing discovered later can give a shorter route to that node, so its distance is final the first time it's popped with its best value.
3. For each edge `u → v`, if going through `u` is shorter than anything known for `v`, record it and push `(nd, v)`.

**The `if d > dist[u]: continue` line.** Python's `heapq` has no "decrease key" operation. When a shorter path to `v` is found, the code doesn't update the old heap entry; it pushes a *new* one. So the heap can contain stale entries like `(9, 'C')` after `(4, 'C')` was pushed. When a stale entry is popped, `d` is larger than the recorded `dist[u]`, and the line skips it. Without it the result is still correct, but the algorithm would re-relax all of `u`'s edges for each stale copy, which can be much slower on dense graphs.

Complexity: O((V + E) log E) time, since each edge can push at most one entry.

Two limitations: it assumes every node appears as a key in `graph` (a node with no outgoing edges needs `graph[node] = []`, or use `graph.get(u, [])`), and it gives wrong answers with negative weights. Use Bellman–Ford for those.
''',
),
dict(
ask=r'''
What does this shell pipeline do?

```bash
git log --since='30 days ago' --pretty=format:'%an' | sort | uniq -c | sort -rn | head -5
```
''',
answer=r'''
It lists the **five people with the most commits in the last 30 days**, with their commit counts.

| stage | output |
|---|---|
| `git log --since='30 days ago' --pretty=format:'%an'` | one line per commit in the last 30 days, containing only the author name (`%an`) |
| `sort` | groups identical names next to each other |
| `uniq -c` | collapses adjacent duplicates and prefixes each with a count, e.g. `  14 Mei Lin` |
| `sort -rn` | sorts by that count, numerically, highest first |
| `head -5` | keeps the top five |

The first `sort` is required because `uniq` only merges *adjacent* identical lines.

Caveats: it counts commits on the current branch only (add `--all` for every branch), merge commits are included (add `--no-merges` to skip them), and the same person committing with two spellings of their name counts twice; a `.mailmap` file fixes that. Git also has a built-in shortcut: `git shortlog -sn --since='30 days ago' | head -5`.
''',
),
dict(
ask=r'''
Review this function please, it's going into our payments service.

```python
def apply_discount(order, code):
    discounts = {"SPRING10": 0.1, "VIP25": 0.25}
    try:
        order["total"] = order["total"] - order["total"] * discounts[code]
    except:
        pass
    return order
```
''',
think=r'''
Issues: bare except swallows everything (KeyError for unknown code but also TypeError, KeyboardInterrupt). Silent failure: unknown code looks like success. Float money arithmetic. Mutates input dict and returns it. Hardcoded discount table. No validation of applying code twice. No rounding. Suggest returning a new total with Decimal, raising a specific error for unknown codes, recording the applied code for audit. Payments → correctness matters. Provide a refactor.
''',
answer=r'''
A few issues, roughly in order of severity for a payments service:

1. **Bare `except: pass` hides every error.** An unknown code raises `KeyError`, which is silently ignored, so the caller can't tell "discount applied" from "invalid code". It also swallows unrelated bugs (`order` missing `"total"`, a `None` total, even `KeyboardInterrupt`). Catch only what you expect and report it.
2. **Floats for money.** `0.1` and `0.25` aren't exact in binary, so totals like `19.99 - 19.99 * 0.1` give `17.991` and later rounding can go either way. Use `Decimal` (or integer cents) and round explicitly with a defined rounding mode.
3. **Mutates its input and returns it.** Callers may not expect `order` to change, and nothing prevents applying a code twice. Either return a new value or make the mutation explicit and record which code was applied.
4. **No rounding step.** `order["total"]` can end up with more than two decimal places.
5. **The table is hard-coded inside the function.** Fine for a prototype; in practice codes have expiry dates and usage limits and belong in config or the database.

A version that addresses 1–4:

```python
from decimal import ROUND_HALF_UP, Decimal

DISCOUNTS: dict[str, Decimal] = {"SPRING10": Decimal("0.10"), "VIP25": Decimal("0.25")}
CENT = Decimal("0.01")


class InvalidDiscountCode(ValueError):
    pass


def discounted_total(total: Decimal, code: str) -> Decimal:
    try:
        rate = DISCOUNTS[code.strip().upper()]
    except KeyError:
        raise InvalidDiscountCode(code) from None
    return (total * (1 - rate)).quantize(CENT, rounding=ROUND_HALF_UP)
```

The caller then decides what to do with an invalid code (show a message, log it) and stores both the original total and the applied code, which you'll want for refunds and audits anyway. Tests I'd add: each valid code, an unknown code raising, lower-case input, a total whose discount needs rounding (e.g. `Decimal("19.99")` with 10% → `17.99`), and a zero total.
''',
),
dict(
ask=r'''
Can you refactor this? It works but it's hard to read.

```python
def shipping_cost(weight, country, express):
    if country == "US":
        if express:
            if weight > 10:
                return 45
            else:
                return 25
        else:
            if weight > 10:
                return 20
            else:
                return 8
    else:
        if express:
            if weight > 10:
                return 90
            else:
                return 60
        else:
            if weight > 10:
                return 40
            else:
                return 18
```
''',
answer=r'''
The nesting encodes a lookup table with three yes/no dimensions, so the clearest refactor is to make the table explicit:

```python
# (domestic, express, heavy) -> price in USD
RATES = {
    (True,  True,  True):  45,
    (True,  True,  False): 25,
    (True,  False, True):  20,
    (True,  False, False):  8,
    (False, True,  True):  90,
    (False, True,  False): 60,
    (False, False, True):  40,
    (False, False, False): 18,
}

HEAVY_KG = 10


def shipping_cost(weight: float, country: str, express: bool) -> int:
    key = (country == "US", express, weight > HEAVY_KG)
    return RATES[key]
```

Why this is better:

- All eight prices are visible at once, so a reviewer can check them against the pricing sheet line by line.
- The magic number `10` has a name; if the threshold changes, it changes in one place.
- Adding a dimension (say, a "remote area" surcharge) means adding to the key, not another level of nesting.

I kept behaviour identical, including `weight > 10` (exactly 10 kg counts as light). A quick way to prove the refactor is safe is to compare the old and new function over every combination:

```python
import itertools
for w, c, e in itertools.product([1, 10, 10.5], ["US", "DE"], [True, False]):
    assert shipping_cost(w, c, e) == old_shipping_cost(w, c, e)
```

If the table grows or prices change often, move it into a config file or database table instead of code.
''',
),
dict(
ask=r'''
Convert this callback-style Node code to async/await.

```js
const fs = require("fs");

function loadConfig(path, cb) {
  fs.readFile(path, "utf8", (err, text) => {
    if (err) return cb(err);
    let cfg;
    try {
      cfg = JSON.parse(text);
    } catch (e) {
      return cb(new Error(`invalid JSON in ${path}: ${e.message}`));
    }
    fs.stat(cfg.dataDir, (err2, st) => {
      if (err2) return cb(err2);
      if (!st.isDirectory()) return cb(new Error(`${cfg.dataDir} is not a directory`));
      cb(null, cfg);
    });
  });
}
```
''',
answer=r'''
```js
const fs = require("fs/promises");

async function loadConfig(path) {
  const text = await fs.readFile(path, "utf8");

  let cfg;
  try {
    cfg = JSON.parse(text);
  } catch (e) {
    throw new Error(`invalid JSON in ${path}: ${e.message}`, { cause: e });
  }

  const st = await fs.stat(cfg.dataDir);
  if (!st.isDirectory()) {
    throw new Error(`${cfg.dataDir} is not a directory`);
  }
  return cfg;
}

module.exports = { loadConfig };
```

Callers change from

```js
loadConfig("app.json", (err, cfg) => { if (err) { ... } start(cfg); });
```

to

```js
try {
  const cfg = await loadConfig("app.json");
  start(cfg);
} catch (err) {
  console.error(err.message);
  process.exit(1);
}
```

What changed:

- `fs/promises` provides promise-returning versions of `readFile` and `stat`, so no manual promisifying is needed.
- Every `if (err) return cb(err)` becomes implicit: a rejected `await` throws, and the error propagates to the caller.
- The nesting is gone: each step is one line after the previous one.
- `{ cause: e }` (Node 16.9+) keeps the original `SyntaxError` attached, which helps when debugging.

If other code still expects the callback form during the migration, `util.callbackify(loadConfig)` produces a callback-style wrapper from the new function, so you can switch callers over gradually.
''',
),
dict(
ask=r'''
Add type hints to this and tell me if mypy would find anything.

```python
def group_by(items, key):
    out = {}
    for it in items:
        out.setdefault(key(it), []).append(it)
    return out

def top_n(counts, n=3):
    return sorted(counts.items(), key=lambda kv: kv[1], reverse=True)[:n]
```
''',
answer=r'''
```python
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import TypeVar

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


def group_by(items: Iterable[T], key: Callable[[T], K]) -> dict[K, list[T]]:
    out: dict[K, list[T]] = {}
    for it in items:
        out.setdefault(key(it), []).append(it)
    return out


def top_n(counts: Mapping[K, int], n: int = 3) -> list[tuple[K, int]]:
    return sorted(counts.items(), key=lambda kv: kv[1], reverse=True)[:n]
```

Notes on the choices:

- **Type variables** connect inputs to outputs: `group_by(users, lambda u: u.country)` is inferred as `dict[str, list[User]]`, so code using the result gets checked too.
- **Abstract parameter types** (`Iterable`, `Mapping`) and **concrete return types** (`dict`, `list`): accept anything that works, promise something specific.
- `out: dict[K, list[T]] = {}` is the one annotation mypy actually needs inside the body; an empty `{}` literal has no element types to infer from, and mypy reports `Need type annotation for "out"`.

Would mypy find anything in the *original*? With no annotations, mypy treats both functions as untyped and skips checking their bodies by default, so no errors. With `--check-untyped-defs` it would report the `out = {}` annotation issue. No real bugs here; the functions are correct. One behavioural note worth documenting: `top_n` breaks ties by original insertion order, since `sorted` is stable.
''',
),
dict(
ask=r'''
Explain what this SQL does, in plain words, for a product manager.

```sql
SELECT date_trunc('week', signup_at) AS week,
       COUNT(*) AS signups,
       COUNT(*) FILTER (WHERE first_order_at <= signup_at + interval '7 days') AS ordered_within_7d,
       ROUND(100.0 * COUNT(*) FILTER (WHERE first_order_at <= signup_at + interval '7 days') / COUNT(*), 1) AS pct
FROM users
WHERE signup_at >= now() - interval '12 weeks'
GROUP BY 1
ORDER BY 1;
```
''',
answer=r'''
In plain words: **"For each of the last 12 weeks, how many people signed up, and what share of them placed their first order within a week of signing up?"**

What each output column means:

| column | meaning |
|---|---|
| `week` | the week people signed up (weeks start on Monday) |
| `signups` | number of new accounts that week |
| `ordered_within_7d` | how many of those placed their first order no later than 7 days after signing up |
| `pct` | that number as a percentage of signups, one decimal place |

So a row like `2024-05-06 | 1,240 | 310 | 25.0` reads: "of the 1,240 people who signed up in the week of 6 May, 310 (25%) ordered within their first week."

Things a PM should know when reading it:

- **The most recent week looks worse than it is.** Someone who signed up yesterday hasn't had 7 days to order yet. Ignore the last row, or only compare weeks that ended at least 7 days ago.
- People who never ordered have no `first_order_at` and correctly count as "did not order".
- "12 weeks" is measured from the exact current moment, so the first week in the results is usually partial.
''',
),
dict(
ask=r'''
what does `git rebase -i HEAD~4` let me do, and what do pick/squash/fixup/reword/drop mean?
''',
answer=r'''
`git rebase -i HEAD~4` opens an editor listing your last 4 commits, **oldest first**, and lets you rewrite that part of history: reorder, combine, edit messages or remove commits. When you save and close the editor, Git replays the commits according to your instructions.

The list looks like:

```text
pick 3f2a1c0 Add user settings page
pick 9b7d4e2 Fix typo
pick c1e0a55 WIP
pick 77aa019 Add tests for settings
```

The commands:

| command | effect |
|---|---|
| `pick` | keep the commit as is |
| `reword` | keep the changes, but stop to let you edit the message |
| `edit` | stop after applying it so you can amend it (change files, split it) |
| `squash` | merge into the previous commit and let you combine both messages |
| `fixup` | merge into the previous commit and **discard** this commit's message |
| `drop` | remove the commit entirely (deleting the line does the same) |

For the list above, a typical cleanup:

```text
pick 3f2a1c0 Add user settings page
fixup 9b7d4e2 Fix typo
fixup c1e0a55 WIP
pick 77aa019 Add tests for settings
```

That leaves two tidy commits. Reordering lines reorders commits, which may cause conflicts you resolve as usual, then `git rebase --continue`. `git rebase --abort` returns everything to how it was.

**Only do this on commits you haven't shared**, or on a personal branch where you're prepared to `git push --force-with-lease`. Rewritten commits get new hashes, and anyone who based work on the old ones will have a messy merge. If things go wrong, `git reflog` shows where your branch pointed before the rebase.
''',
),
dict(
ask=r'''
Explain __slots__ with an example. When is it worth using?
''',
answer=r'''
Normally each Python instance stores its attributes in a per-instance dictionary, `obj.__dict__`. Declaring `__slots__` tells Python to reserve fixed storage for exactly the listed attributes and **not** create that dictionary:

```python
class PointDict:
    def __init__(self, x, y):
        self.x, self.y = x, y


class PointSlots:
    __slots__ = ("x", "y")

    def __init__(self, x, y):
        self.x, self.y = x, y


p = PointSlots(1, 2)
p.x = 10          # fine
p.z = 3           # AttributeError: 'PointSlots' object has no attribute 'z'
```

Effects:

- **Less memory per instance.** No per-object dict. With millions of small objects the savings are large; measure with `tracemalloc` on your own data, because the exact numbers depend on the Python version.
- **Slightly faster attribute access.**
- **Typos raise errors.** `p.widht = 5` fails instead of silently creating a new attribute.

Costs and gotchas:

- You can't add attributes that aren't listed (unless you include `"__dict__"` in the slots, which defeats the purpose).
- Instances can't be weakly referenced unless you add `"__weakref__"` to `__slots__`.
- Every class in an inheritance chain needs its own `__slots__`; if a parent doesn't define it, instances get a `__dict__` anyway.
- Class-level defaults for slotted attributes don't work as usual (`x = 0` at class level conflicts with the slot).

Worth it when you create very many instances of a simple class: parsed records, graph nodes, points. For ordinary application classes the gain isn't worth the restrictions. With dataclasses you get it via `@dataclass(slots=True)` on Python 3.10+.
''',
),
dict(
ask=r'''
Please review this TypeScript function for bugs:

```ts
export function paginate<T>(items: T[], page: number, pageSize: number) {
  const start = page * pageSize;
  const end = start + pageSize;
  return {
    data: items.slice(start, end),
    totalPages: items.length / pageSize,
    hasNext: end < items.length,
  };
}
```
''',
answer=r'''
Mostly fine, with a few bugs and unclear spots:

1. **`totalPages` is fractional.** 25 items with `pageSize` 10 gives `2.5`. Use `Math.ceil(items.length / pageSize)`; an empty list then gives 0 pages, which you may want to show as 1.
2. **Is `page` 0-based or 1-based?** The math assumes 0-based, but most UIs and APIs number pages from 1. If a caller passes `page=1` expecting the first page, they silently get the second. Pick one convention and name it: `pageIndex` for 0-based, or subtract 1 inside.
3. **No validation.** `pageSize = 0` makes `totalPages` `Infinity` (or `NaN` for an empty list). Negative or fractional `page` values produce odd slices: `slice(-10, 0)` returns an empty array, and `page = 1.5` starts mid-page. Reject or clamp these.
4. **No explicit return type.** For an exported function, declaring it keeps the API from changing by accident.

Suggested version:

```ts
export interface Page<T> {
  data: T[];
  page: number;        // 1-based
  totalPages: number;
  hasNext: boolean;
}

export function paginate<T>(items: readonly T[], page: number, pageSize: number): Page<T> {
  if (!Number.isInteger(pageSize) || pageSize < 1) throw new RangeError("pageSize must be a positive integer");
  if (!Number.isInteger(page) || page < 1) throw new RangeError("page must be an integer >= 1");

  const totalPages = Math.max(1, Math.ceil(items.length / pageSize));
  const start = (page - 1) * pageSize;
  return {
    data: items.slice(start, start + pageSize),
    page,
    totalPages,
    hasNext: page < totalPages,
  };
}
```

`readonly T[]` documents that the function doesn't modify the input and lets callers pass read-only arrays. Requesting a page past the end returns an empty `data` array, which is usually the friendliest behaviour for APIs.
''',
),
]
