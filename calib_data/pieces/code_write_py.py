"""Code category: hand-written "write me X" requests and answers (Python)."""

# Each entry: dict(ask=..., answer=..., think=optional, system=optional, follow=optional list of (user, assistant))

ENTRIES = [
dict(
ask=r'''
I need an LRU cache in Python with `get(key)` and `put(key, value)`, both O(1), and a fixed capacity. Please don't use functools.lru_cache, this is for arbitrary keys coming from a network protocol.
''',
answer=r'''
Here is a small, self-contained implementation built on `collections.OrderedDict`, which keeps insertion order and can move a key to the end in O(1):

```python
from collections import OrderedDict
from typing import Generic, Hashable, Optional, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LRUCache(Generic[K, V]):
    """Least-recently-used cache with a fixed capacity."""

    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError("capacity must be positive")
        self.capacity = capacity
        self._data: "OrderedDict[K, V]" = OrderedDict()

    def get(self, key: K) -> Optional[V]:
        if key not in self._data:
            return None
        self._data.move_to_end(key)          # mark as most recently used
        return self._data[key]

    def put(self, key: K, value: V) -> None:
        if key in self._data:
            self._data.move_to_end(key)
        self._data[key] = value
        if len(self._data) > self.capacity:
            self._data.popitem(last=False)   # evict the least recently used

    def __len__(self) -> int:
        return len(self._data)


if __name__ == "__main__":
    cache: LRUCache[str, int] = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.get("a")          # "a" is now the most recent
    cache.put("c", 3)       # evicts "b"
    assert cache.get("b") is None
    assert cache.get("a") == 1 and cache.get("c") == 3
```

Notes:

- Both operations are O(1): dictionary lookup plus `move_to_end` / `popitem(last=False)`, which only relink the internal doubly linked list.
- `get` returns `None` for a miss. If `None` can be a legitimate cached value in your protocol, return a sentinel object or raise `KeyError` instead.
- This class is **not thread-safe**. If several threads share it, wrap `get` and `put` in a `threading.Lock`; an `OrderedDict` being reordered concurrently can corrupt its ordering.
''',
),
dict(
ask=r'''
I have an nginx access log (combined format). Write a Python script that prints, for each hour, how many responses had status 2xx, 4xx and 5xx. The file can be a few GB, so don't load it into memory.
''',
think=r'''
Combined log format: `IP - user [10/Oct/2024:13:55:36 +0000] "GET /path HTTP/1.1" 200 2326 "referer" "ua"`. I need the timestamp up to the hour and the status code. Stream line by line, regex for the bracketed time and the status after the quoted request. Group by hour string like 2024-10-10 13:00. Use Counter per hour keyed by class (2xx etc). Parsing the month name: use a dict rather than strptime for speed, or just strptime on the hour part. Skip malformed lines but count them. Output sorted by hour - sort by datetime, not by string, since "10/Oct" strings don't sort chronologically.
''',
answer=r'''
This streams the file line by line, so memory stays flat no matter how large the log is:

```python
#!/usr/bin/env python3
"""Count 2xx/4xx/5xx responses per hour in an nginx combined-format access log."""
import re
import sys
from collections import Counter, defaultdict
from datetime import datetime

# 203.0.113.9 - - [10/Oct/2024:13:55:36 +0000] "GET /x HTTP/1.1" 200 512 "-" "curl/8.0"
LINE_RE = re.compile(
    r'\[(?P<day>\d{2}/\w{3}/\d{4}):(?P<hour>\d{2}):\d{2}:\d{2} [^\]]+\] '
    r'"[^"]*" (?P<status>\d{3}) '
)


def main(path: str) -> None:
    per_hour: dict[datetime, Counter] = defaultdict(Counter)
    bad = 0
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            m = LINE_RE.search(line)
            if not m:
                bad += 1
                continue
            hour = datetime.strptime(f"{m['day']} {m['hour']}", "%d/%b/%Y %H")
            per_hour[hour][m["status"][0] + "xx"] += 1

    print(f"{'hour':<17} {'2xx':>8} {'4xx':>8} {'5xx':>8}")
    for hour in sorted(per_hour):
        c = per_hour[hour]
        print(f"{hour:%Y-%m-%d %H:00} {c['2xx']:>8} {c['4xx']:>8} {c['5xx']:>8}")
    if bad:
        print(f"skipped {bad} malformed lines", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1])
```

A few details worth knowing:

1. **Sorting by `datetime`, not by string.** `10/Oct/2024` and `09/Nov/2024` don't sort chronologically as text, so the hour key is parsed into a `datetime` first.
2. **`errors="replace"`**: user agents and paths sometimes contain invalid UTF-8; without this one bad byte would crash the run hours into a big file.
3. **3xx and 1xx** are counted too (the key is just the first digit plus `xx`) but not printed; add columns if you need them.
4. `%b` in `strptime` depends on the locale. nginx always writes English month names, so if your machine runs with a non-English `LC_TIME`, replace the `strptime` call with a small `{"Jan": 1, ...}` lookup.

Usage: `python3 status_by_hour.py /var/log/nginx/access.log`. For gzip-rotated logs, swap `open` for `gzip.open(path, "rt", ...)`.
''',
),
dict(
ask=r'''
write a retry decorator for python functions: exponential backoff, jitter, max attempts, and only retry on exceptions I specify
''',
answer=r'''
```python
import functools
import random
import time
from typing import Callable, Tuple, Type, TypeVar

T = TypeVar("T")


def retry(
    *,
    attempts: int = 5,
    base_delay: float = 0.5,
    max_delay: float = 30.0,
    retry_on: Tuple[Type[BaseException], ...] = (Exception,),
    jitter: bool = True,
) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Retry the wrapped function with exponential backoff.

    Delay before retry n (starting at 1) is base_delay * 2**(n-1), capped at
    max_delay. With jitter, the actual sleep is uniform in [0, delay]
    ("full jitter"), which spreads out clients that failed at the same time.
    """
    if attempts < 1:
        raise ValueError("attempts must be >= 1")

    def decorator(func: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(func)
        def wrapper(*args, **kwargs) -> T:
            for attempt in range(1, attempts + 1):
                try:
                    return func(*args, **kwargs)
                except retry_on:
                    if attempt == attempts:
                        raise                      # out of attempts: re-raise the last error
                    delay = min(max_delay, base_delay * 2 ** (attempt - 1))
                    time.sleep(random.uniform(0, delay) if jitter else delay)
            raise AssertionError("unreachable")
        return wrapper

    return decorator
```

Usage:

```python
import urllib.error
import urllib.request


@retry(attempts=4, base_delay=1.0, retry_on=(urllib.error.URLError, TimeoutError))
def fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.read()
```

Design choices:

- **Keyword-only arguments** (`*`) so `@retry(3)` can't be misread; you always write `@retry(attempts=3)`.
- **Exceptions not listed in `retry_on` propagate immediately.** That matters: retrying a `ValueError` from bad input just wastes time.
- **The original exception is re-raised** with its traceback on the final attempt, instead of being wrapped in a custom error.
- `functools.wraps` keeps the function's name and docstring, so logs and `help()` still make sense.

If you need this for `async def` functions, the same structure works with `await func(...)` and `await asyncio.sleep(...)` in an `async def wrapper`.
''',
),
dict(
ask=r'''
How do I split an arbitrary iterable (could be a generator) into lists of size n in Python? Last chunk may be shorter.
''',
answer=r'''
Use `itertools.islice` in a loop; it works for any iterable, including generators that can only be consumed once:

```python
from itertools import islice
from typing import Iterable, Iterator, List, TypeVar

T = TypeVar("T")


def chunked(iterable: Iterable[T], n: int) -> Iterator[List[T]]:
    if n < 1:
        raise ValueError("n must be at least 1")
    it = iter(iterable)
    while batch := list(islice(it, n)):
        yield batch


print(list(chunked(range(7), 3)))   # [[0, 1, 2], [3, 4, 5], [6]]
```

The key line is `it = iter(iterable)`: `islice` has to keep pulling from the *same* iterator. If you passed a list straight to `islice` each time, you would get the first `n` elements forever.

On Python 3.12+ this is built in as `itertools.batched(iterable, n)`, which yields tuples instead of lists.
''',
),
dict(
ask=r'''
Write pytest tests for this function. Cover the edge cases you can think of.

```python
import re
import unicodedata

def slugify(text: str, max_len: int = 50) -> str:
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    text = re.sub(r"[^a-zA-Z0-9]+", "-", text).strip("-").lower()
    return text[:max_len].rstrip("-")
```
''',
answer=r'''
Here's a test module using `pytest.mark.parametrize` so each case shows up separately in the report:

```python
import pytest

from myproject.text import slugify


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("Hello World", "hello-world"),
        ("  leading and trailing  ", "leading-and-trailing"),
        ("multiple   spaces---and___underscores", "multiple-spaces-and-underscores"),
        ("Crème brûlée à la carte", "creme-brulee-a-la-carte"),   # accents stripped
        ("C++ & Rust!", "c-rust"),
        ("already-a-slug", "already-a-slug"),
        ("2024 Q3 Report", "2024-q3-report"),
        ("", ""),
        ("!!!", ""),                                              # nothing survives
        ("日本語のタイトル", ""),                                     # no ASCII equivalent
    ],
)
def test_slugify_basic(raw, expected):
    assert slugify(raw) == expected


def test_truncates_to_max_len():
    assert slugify("a" * 80) == "a" * 50
    assert len(slugify("word " * 40)) <= 50


def test_truncation_does_not_leave_trailing_dash():
    # "abcd-efgh" cut at 5 would be "abcd-"; the rstrip removes the dash
    assert slugify("abcd efgh", max_len=5) == "abcd"


def test_custom_max_len_zero():
    assert slugify("anything", max_len=0) == ""


def test_result_is_idempotent():
    once = slugify("Some Title: Part 2")
    assert slugify(once) == once
```

Things these tests pin down that are easy to break later:

- **Non-Latin scripts become an empty string.** That's what the current code does (`encode("ascii", "ignore")` drops them). If Chinese or Japanese titles are realistic input, that's probably a bug in the function rather than something to lock in; you might want a fallback such as a hash or transliteration. I included the test so the behaviour is at least visible.
- **Idempotence**: slugifying a slug shouldn't change it. This catches regressions if someone later changes the separator logic.
- **Truncation + dash**: the `rstrip("-")` after slicing is subtle and worth a dedicated test.
''',
),
dict(
ask=r'''
Can you write an argparse CLI skeleton with two subcommands: `init <path>` and `sync --dry-run --jobs N`? Each subcommand should dispatch to its own function.
''',
answer=r'''
```python
#!/usr/bin/env python3
import argparse
import sys
from pathlib import Path


def cmd_init(args: argparse.Namespace) -> int:
    path: Path = args.path
    if path.exists() and any(path.iterdir()):
        print(f"refusing to init: {path} is not empty", file=sys.stderr)
        return 1
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.toml").write_text("# created by tool init\n")
    print(f"initialised {path}")
    return 0


def cmd_sync(args: argparse.Namespace) -> int:
    mode = "dry run" if args.dry_run else "live"
    print(f"syncing with {args.jobs} jobs ({mode})")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tool", description="Example tool with subcommands.")
    parser.add_argument("-v", "--verbose", action="store_true", help="print more detail")
    sub = parser.add_subparsers(dest="command", required=True)

    p_init = sub.add_parser("init", help="create a new workspace")
    p_init.add_argument("path", type=Path, help="directory to initialise")
    p_init.set_defaults(func=cmd_init)

    p_sync = sub.add_parser("sync", help="synchronise the workspace")
    p_sync.add_argument("--dry-run", action="store_true", help="show what would change")
    p_sync.add_argument("--jobs", "-j", type=int, default=4, metavar="N",
                        help="parallel jobs (default: 4)")
    p_sync.set_defaults(func=cmd_sync)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
```

How the dispatch works: each subparser stores its handler with `set_defaults(func=...)`, so after parsing you just call `args.func(args)`. `required=True` on the subparsers makes `tool` with no subcommand print a usage error instead of crashing with `AttributeError: func`.

`--dry-run` becomes `args.dry_run` (argparse converts dashes to underscores). Passing `argv` into `main` makes the CLI easy to test: `assert main(["sync", "-j", "2"]) == 0`.
''',
),
dict(
ask=r'''
Given a list of intervals like [[1,3],[2,6],[8,10],[15,18]], merge all overlapping ones. Python please, and explain complexity.
''',
answer=r'''
Sort by start, then sweep once, extending the last merged interval whenever the next one overlaps it:

```python
def merge_intervals(intervals: list[list[int]]) -> list[list[int]]:
    if not intervals:
        return []
    intervals = sorted(intervals, key=lambda iv: iv[0])
    merged = [list(intervals[0])]
    for start, end in intervals[1:]:
        last = merged[-1]
        if start <= last[1]:              # overlaps (or touches) the previous one
            last[1] = max(last[1], end)
        else:
            merged.append([start, end])
    return merged


print(merge_intervals([[1, 3], [2, 6], [8, 10], [15, 18]]))  # [[1, 6], [8, 10], [15, 18]]
print(merge_intervals([[1, 4], [4, 5]]))                     # [[1, 5]]
print(merge_intervals([[1, 10], [2, 3]]))                    # [[1, 10]]
```

**Complexity:** sorting is O(n log n); the sweep is O(n). Total O(n log n) time, O(n) extra space for the sorted copy and the output.

Two details:

- `max(last[1], end)` matters for nested intervals like `[1,10]` and `[2,3]`; writing `last[1] = end` would shrink the first interval to `[1,3]`.
- `start <= last[1]` treats touching intervals (`[1,4]` and `[4,5]`) as overlapping. If your intervals are half-open, like time slots `[9:00, 10:00)`, decide whether touching slots should merge and use `<` if not.
''',
),
dict(
ask=r'''
I have tasks with dependencies, e.g. {"build": ["fetch"], "test": ["build"], "deploy": ["test", "build"], "fetch": []}. Give me an execution order, and detect cycles with a helpful error message.
''',
think=r'''
Kahn's algorithm: compute in-degree = number of deps per task; queue tasks with zero deps; pop, append to order, for each dependent decrement. Need reverse adjacency (dep -> dependents). If order shorter than number of tasks, there's a cycle. To give a helpful message, find an actual cycle among remaining nodes: follow deps from a remaining node until revisiting. Also handle deps that aren't declared as keys (unknown task) — raise error. Deterministic order: sort the ready queue, use heapq for stable alphabetical tie-breaking.
''',
answer=r'''
This uses Kahn's algorithm (repeatedly take a task whose dependencies are all done). If some tasks never become ready, they're stuck in a cycle, and the code walks the remaining graph to print the actual loop:

```python
import heapq


class CycleError(ValueError):
    pass


def execution_order(deps: dict[str, list[str]]) -> list[str]:
    unknown = {d for ds in deps.values() for d in ds} - deps.keys()
    if unknown:
        raise KeyError(f"unknown dependencies: {sorted(unknown)}")

    remaining = {task: len(set(ds)) for task, ds in deps.items()}
    dependents: dict[str, list[str]] = {task: [] for task in deps}
    for task, ds in deps.items():
        for d in set(ds):
            dependents[d].append(task)

    ready = [t for t, n in remaining.items() if n == 0]
    heapq.heapify(ready)                 # alphabetical tie-break => deterministic output
    order = []
    while ready:
        task = heapq.heappop(ready)
        order.append(task)
        for nxt in dependents[task]:
            remaining[nxt] -= 1
            if remaining[nxt] == 0:
                heapq.heappush(ready, nxt)

    if len(order) != len(deps):
        raise CycleError("dependency cycle: " + " -> ".join(_find_cycle(deps, set(order))))
    return order


def _find_cycle(deps: dict[str, list[str]], done: set[str]) -> list[str]:
    # Every unfinished task has at least one unfinished dependency, so following
    # those edges must eventually revisit a task.
    start = min(t for t in deps if t not in done)
    path, seen = [start], {start: 0}
    while True:
        nxt = min(d for d in deps[path[-1]] if d not in done)
        if nxt in seen:
            return path[seen[nxt]:] + [nxt]
        seen[nxt] = len(path)
        path.append(nxt)


tasks = {"build": ["fetch"], "test": ["build"], "deploy": ["test", "build"], "fetch": []}
print(execution_order(tasks))          # ['fetch', 'build', 'test', 'deploy']

try:
    execution_order({"a": ["b"], "b": ["c"], "c": ["a"], "d": []})
except CycleError as e:
    print(e)                           # dependency cycle: a -> b -> c -> a
```

Runs in O(V + E log V) because of the heap; with a plain deque instead of a heap it's O(V + E), but the order among independent tasks then depends on dictionary order. The `set(ds)` guards against a task listing the same dependency twice, which would otherwise make its counter never reach zero.
''',
),
dict(
ask=r'''
Implement a token bucket rate limiter in Python that multiple threads can share. `acquire()` should block until a token is available.
''',
answer=r'''
```python
import threading
import time


class TokenBucket:
    """Allows `rate` operations per second on average, with bursts up to `capacity`."""

    def __init__(self, rate: float, capacity: int) -> None:
        if rate <= 0 or capacity <= 0:
            raise ValueError("rate and capacity must be positive")
        self.rate = rate
        self.capacity = capacity
        self._tokens = float(capacity)
        self._last = time.monotonic()
        self._lock = threading.Lock()

    def _refill(self) -> None:
        now = time.monotonic()
        self._tokens = min(self.capacity, self._tokens + (now - self._last) * self.rate)
        self._last = now

    def try_acquire(self, tokens: float = 1.0) -> bool:
        with self._lock:
            self._refill()
            if self._tokens >= tokens:
                self._tokens -= tokens
                return True
            return False

    def acquire(self, tokens: float = 1.0) -> None:
        if tokens > self.capacity:
            raise ValueError("cannot acquire more tokens than the bucket holds")
        while True:
            with self._lock:
                self._refill()
                if self._tokens >= tokens:
                    self._tokens -= tokens
                    return
                wait = (tokens - self._tokens) / self.rate
            time.sleep(wait)          # sleep *outside* the lock so others can check too
```

Why it's built this way:

- **`time.monotonic()`** instead of `time.time()`: wall-clock time can jump backwards (NTP, manual changes), which would give negative elapsed time and break the refill.
- **Lazy refill.** There's no background thread adding tokens; each call computes how many tokens accumulated since the last call. Cheaper and nothing to shut down.
- **Sleeping outside the lock.** If `acquire` slept while holding the lock, every other thread would queue behind it even for `try_acquire`.
- After waking, the loop re-checks, because another thread may have taken the token in the meantime. Under heavy contention this is not strictly FIFO-fair; if you need fairness, hand out tickets with a `threading.Condition`.

Example: `bucket = TokenBucket(rate=5, capacity=10)` allows a burst of 10 calls, then settles at 5 per second.
''',
),
dict(
ask=r'''
Write a prefix trie in Python that supports insert, exact lookup, and "autocomplete": return up to k words that start with a prefix, in alphabetical order.
''',
answer=r'''
```python
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class _Node:
    children: dict[str, _Node] = field(default_factory=dict)
    terminal: bool = False


class Trie:
    def __init__(self, words: list[str] | None = None) -> None:
        self._root = _Node()
        for w in words or []:
            self.insert(w)

    def insert(self, word: str) -> None:
        node = self._root
        for ch in word:
            node = node.children.setdefault(ch, _Node())
        node.terminal = True

    def _walk(self, prefix: str) -> _Node | None:
        node = self._root
        for ch in prefix:
            node = node.children.get(ch)
            if node is None:
                return None
        return node

    def __contains__(self, word: str) -> bool:
        node = self._walk(word)
        return node is not None and node.terminal

    def complete(self, prefix: str, k: int = 10) -> list[str]:
        start = self._walk(prefix)
        if start is None:
            return []
        out: list[str] = []
        # iterative DFS; push children in reverse order so we pop them alphabetically
        stack = [(start, prefix)]
        while stack and len(out) < k:
            node, word = stack.pop()
            if node.terminal:
                out.append(word)
            for ch in sorted(node.children, reverse=True):
                stack.append((node.children[ch], word + ch))
        return out


t = Trie(["car", "card", "care", "careful", "cart", "cat", "dog"])
print(t.complete("car", 3))   # ['car', 'card', 'care']
print("cat" in t, "ca" in t)  # True False
```

Because a word is emitted before its extensions and children are visited in sorted order, the DFS produces words in lexicographic order, so stopping after `k` results gives the first `k` alphabetically without collecting everything under the prefix.

Cost: insert and lookup are O(length of the word). `complete` is O(length of prefix + nodes visited until k words are found), plus the sort of each visited node's children (at most the alphabet size).
''',
),
dict(
ask=r'''
quick one: context manager that times a block and logs it, usable as `with timed("load data"): ...`
''',
answer=r'''
```python
import logging
import time
from contextlib import contextmanager

log = logging.getLogger(__name__)


@contextmanager
def timed(label: str, level: int = logging.INFO):
    start = time.perf_counter()
    try:
        yield
    finally:
        elapsed = time.perf_counter() - start
        log.log(level, "%s took %.3f s", label, elapsed)
```

```python
logging.basicConfig(level=logging.INFO)
with timed("load data"):
    rows = [i * i for i in range(1_000_000)]
# INFO:__main__:load data took 0.061 s
```

The `try/finally` means the time is logged even if the block raises, which is often when you care most. `perf_counter` is the right clock for measuring durations: monotonic and high resolution.
''',
),
dict(
ask=r'''
I have a CSV of sales: date,region,product,units,unit_price. I want total revenue and average order size per region. Show me both a pandas version and a plain standard-library version.
''',
answer=r'''
Sample input (`sales.csv`):

```text
date,region,product,units,unit_price
2024-03-01,North,widget,3,9.50
2024-03-01,South,gadget,1,24.00
2024-03-02,North,gadget,2,24.00
2024-03-02,West,widget,10,9.50
2024-03-03,South,widget,4,9.50
```

**pandas**

```python
import pandas as pd

df = pd.read_csv("sales.csv", parse_dates=["date"])
df["revenue"] = df["units"] * df["unit_price"]

summary = (
    df.groupby("region")
      .agg(revenue=("revenue", "sum"), avg_order=("revenue", "mean"), orders=("revenue", "size"))
      .sort_values("revenue", ascending=False)
)
print(summary.round(2))
```

**Standard library only**

```python
import csv
from collections import defaultdict
from decimal import Decimal

totals = defaultdict(Decimal)
counts = defaultdict(int)

with open("sales.csv", newline="") as fh:
    for row in csv.DictReader(fh):
        revenue = int(row["units"]) * Decimal(row["unit_price"])
        totals[row["region"]] += revenue
        counts[row["region"]] += 1

for region in sorted(totals, key=totals.get, reverse=True):
    avg = totals[region] / counts[region]
    print(f"{region:<8} revenue={totals[region]:>8.2f}  avg_order={avg:>7.2f}  orders={counts[region]}")
```

For the sample data both print the same numbers:

| region | revenue | avg order | orders |
|---|---:|---:|---:|
| West | 95.00 | 95.00 | 1 |
| North | 76.50 | 38.25 | 2 |
| South | 62.00 | 31.00 | 2 |

The stdlib version uses `Decimal` because it's money; pandas uses floats, which is fine for reporting but can show things like `76.49999999` before rounding. `newline=""` in `open` is what the `csv` module documentation asks for, so quoted fields containing line breaks are read correctly.
''',
),
dict(
ask=r'''
Write an async Python function that downloads a list of URLs with at most 5 concurrent requests and returns {url: status_code}, with failures recorded as None. Use aiohttp.
''',
answer=r'''
```python
import asyncio

import aiohttp


async def fetch_statuses(urls: list[str], limit: int = 5, timeout_s: float = 10.0) -> dict[str, int | None]:
    sem = asyncio.Semaphore(limit)
    timeout = aiohttp.ClientTimeout(total=timeout_s)

    async with aiohttp.ClientSession(timeout=timeout) as session:

        async def one(url: str) -> tuple[str, int | None]:
            async with sem:                       # at most `limit` requests in flight
                try:
                    async with session.get(url) as resp:
                        await resp.read()         # drain the body so the connection can be reused
                        return url, resp.status
                except (aiohttp.ClientError, asyncio.TimeoutError):
                    return url, None

        results = await asyncio.gather(*(one(u) for u in urls))
    return dict(results)


if __name__ == "__main__":
    urls = ["https://example.com", "https://example.org", "https://does-not-exist.invalid"]
    print(asyncio.run(fetch_statuses(urls)))
```

Points to note:

- **One `ClientSession` for all requests.** Creating a session per URL defeats connection pooling and is the most common aiohttp performance mistake.
- **The semaphore is the concurrency limit.** `gather` starts all coroutines at once, but each waits at `async with sem` until one of the 5 slots is free. (aiohttp's `TCPConnector(limit=...)` also limits connections, but the semaphore makes the limit explicit and also covers time spent reading bodies.)
- **Only network errors become `None`.** A 404 or 500 is a valid response and shows up as its status code; a bug in your own code still raises.
- If the list has tens of thousands of URLs, creating all coroutines up front is fine memory-wise, but you may prefer a fixed set of worker tasks pulling from an `asyncio.Queue` so progress can be reported as it goes.
''',
),
dict(
ask=r'''
Make me a dataclass `Invoice` with line items that validates itself (no negative quantities, currency is a 3-letter code) and can round-trip to/from JSON.
''',
answer=r'''
```python
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from decimal import Decimal


@dataclass(frozen=True)
class LineItem:
    sku: str
    quantity: int
    unit_price: Decimal

    def __post_init__(self) -> None:
        if self.quantity < 0:
            raise ValueError(f"{self.sku}: quantity must be >= 0, got {self.quantity}")
        if self.unit_price < 0:
            raise ValueError(f"{self.sku}: unit_price must be >= 0")

    @property
    def total(self) -> Decimal:
        return self.unit_price * self.quantity


@dataclass(frozen=True)
class Invoice:
    number: str
    currency: str
    items: tuple[LineItem, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if len(self.currency) != 3 or not self.currency.isalpha() or not self.currency.isupper():
            raise ValueError(f"currency must be a 3-letter ISO code like 'EUR', got {self.currency!r}")

    @property
    def total(self) -> Decimal:
        return sum((item.total for item in self.items), Decimal("0"))

    def to_json(self) -> str:
        data = asdict(self)
        for item in data["items"]:
            item["unit_price"] = str(item["unit_price"])   # keep exact decimal text
        return json.dumps(data, indent=2)

    @classmethod
    def from_json(cls, text: str) -> Invoice:
        data = json.loads(text)
        items = tuple(
            LineItem(sku=i["sku"], quantity=int(i["quantity"]), unit_price=Decimal(i["unit_price"]))
            for i in data.get("items", [])
        )
        return cls(number=data["number"], currency=data["currency"], items=items)


inv = Invoice("INV-1042", "EUR", (LineItem("A-1", 2, Decimal("19.90")), LineItem("B-7", 1, Decimal("5.00"))))
assert Invoice.from_json(inv.to_json()) == inv
print(inv.total)   # 44.80
```

Why these choices:

- **`Decimal` serialised as a string.** Writing it as a JSON number would go through `float` on the way back in many parsers and `19.90` could come back as `19.899999999999999`.
- **`frozen=True`** makes instances hashable and prevents someone from setting `quantity = -3` after validation ran.
- **`tuple` for items**, because a frozen dataclass holding a mutable list isn't really immutable.
- Validation lives in `__post_init__`, so it runs both for direct construction and in `from_json`.

If you find yourself adding many more rules, pydantic does this kind of parsing and validation for you, but for a couple of fields the standard library is enough.
''',
),
dict(
ask=r'''
Write a function that finds the k most frequent words in a text file, ignoring case and punctuation, and skipping a small list of stopwords.
''',
answer=r'''
```python
import re
from collections import Counter
from pathlib import Path

STOPWORDS = frozenset("a an and are as at be but by for from has have in is it of on or that the to was were with".split())
WORD_RE = re.compile(r"[a-z']+")


def top_words(path: str | Path, k: int = 10) -> list[tuple[str, int]]:
    counts: Counter[str] = Counter()
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            for word in WORD_RE.findall(line.lower()):
                word = word.strip("'")
                if word and word not in STOPWORDS:
                    counts[word] += 1
    return counts.most_common(k)


if __name__ == "__main__":
    import sys
    for word, n in top_words(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 10):
        print(f"{n:>6}  {word}")
```

- The regex keeps apostrophes so "don't" stays one word; `strip("'")` then removes quote marks at the edges of words like `'hello'`.
- Reading line by line keeps memory proportional to the vocabulary, not the file size.
- `Counter.most_common(k)` uses a heap internally when `k` is given, so it doesn't sort the whole vocabulary.

This regex only handles English letters. For text with accented characters use `re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)*")`, which matches Unicode letters.
''',
),
]
