"""agentic category: hand-written multi-turn coding-agent sessions.

Step DSL (interpreted by agentic.py):
  ("user", text)
  ("call", [(tool_name, args), ...], lead_text_or_None, think_or_None)
  ("result", str_or_obj)                 one per call, in order
  ("patch", path, before, after, lead, think)   apply_patch with a diff computed from before/after
  ("write", path, content, lead, think)          write_file
  ("final", text, think_or_None)
"""

TOTALS_PY = r'''
from decimal import Decimal


def line_total(qty: int, unit_price: Decimal) -> Decimal:
    return unit_price * qty


def invoice_total(lines, discount_pct: int = 0) -> Decimal:
    subtotal = sum(line_total(q, p) for q, p in lines)
    discount = subtotal * discount_pct / 100
    return subtotal - discount
'''

TOTALS_PY_FIXED = r'''
from decimal import ROUND_HALF_UP, Decimal

CENT = Decimal("0.01")


def line_total(qty: int, unit_price: Decimal) -> Decimal:
    return unit_price * qty


def invoice_total(lines, discount_pct: int = 0) -> Decimal:
    """Sum of all lines minus a percentage discount, rounded half-up to whole cents."""
    subtotal = sum((line_total(q, p) for q, p in lines), Decimal("0"))
    discount = subtotal * discount_pct / 100
    return (subtotal - discount).quantize(CENT, rounding=ROUND_HALF_UP)
'''

TEST_TOTALS = r'''
from decimal import Decimal

from invoicing.totals import invoice_total


def test_total_without_discount():
    lines = [(2, Decimal("19.99")), (1, Decimal("5.00"))]
    assert invoice_total(lines) == Decimal("44.98")


def test_total_with_discount_is_rounded_to_cents():
    lines = [(3, Decimal("9.99"))]
    assert invoice_total(lines, discount_pct=15) == Decimal("25.47")
'''

CONFIG_TS = r'''
import { connect } from "./db";

export function loadConfig() {
  const db = connect(process.env.DATABASE_URL);
  const port = parseInt(process.env.PORT, 10);
  return { db, port };
}
'''

CONFIG_TS_FIXED = r'''
import { connect } from "./db";

function requireEnv(name: string): string {
  const value = process.env[name];
  if (value === undefined || value === "") {
    throw new Error(`Missing required environment variable ${name}`);
  }
  return value;
}

export function loadConfig() {
  const db = connect(requireEnv("DATABASE_URL"));
  const port = Number.parseInt(process.env.PORT ?? "3000", 10);
  if (Number.isNaN(port)) {
    throw new Error(`PORT must be a number, got ${process.env.PORT}`);
  }
  return { db, port };
}
'''

HEALTH_TS = r'''
import type { Response } from "express";

export function health(req, res: Response) {
  res.json({ ok: true });
}
'''

HEALTH_TS_FIXED = r'''
import type { Request, Response } from "express";

export function health(_req: Request, res: Response) {
  res.json({ ok: true });
}
'''

COUNTER_GO = r'''
package stats

type Counter struct {
	hits map[string]int
}

func NewCounter() *Counter {
	return &Counter{hits: make(map[string]int)}
}

func (c *Counter) Inc(key string) {
	c.hits[key]++
}

func (c *Counter) Get(key string) int {
	return c.hits[key]
}
'''

COUNTER_GO_FIXED = r'''
package stats

import "sync"

// Counter is safe for concurrent use.
type Counter struct {
	mu   sync.Mutex
	hits map[string]int
}

func NewCounter() *Counter {
	return &Counter{hits: make(map[string]int)}
}

func (c *Counter) Inc(key string) {
	c.mu.Lock()
	c.hits[key]++
	c.mu.Unlock()
}

func (c *Counter) Get(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits[key]
}
'''

CACHE_RS = r'''
use std::collections::HashMap;

pub struct Cache {
    map: HashMap<String, String>,
}

fn load(key: &str) -> String {
    format!("value-for-{key}")
}

impl Cache {
    pub fn new() -> Self {
        Cache { map: HashMap::new() }
    }

    pub fn get_or_load(&mut self, key: &str) -> &String {
        if let Some(v) = self.map.get(key) {
            return v;
        }
        let value = load(key);
        self.map.insert(key.to_string(), value);
        self.map.get(key).unwrap()
    }
}
'''

CACHE_RS_FIXED = r'''
use std::collections::HashMap;

pub struct Cache {
    map: HashMap<String, String>,
}

fn load(key: &str) -> String {
    format!("value-for-{key}")
}

impl Cache {
    pub fn new() -> Self {
        Cache { map: HashMap::new() }
    }

    pub fn get_or_load(&mut self, key: &str) -> &String {
        self.map.entry(key.to_string()).or_insert_with(|| load(key))
    }
}
'''

REPORT_PY = r'''
"""Print disk usage per top-level directory."""
import argparse
import os
from pathlib import Path


def dir_size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            fp = Path(root) / name
            if not fp.is_symlink():
                total += fp.stat().st_size
    return total


def collect(base: Path) -> list[tuple[str, int]]:
    rows = [(p.name, dir_size(p)) for p in base.iterdir() if p.is_dir()]
    return sorted(rows, key=lambda r: r[1], reverse=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("base", type=Path, nargs="?", default=Path("."))
    args = parser.parse_args(argv)
    for name, size in collect(args.base):
        print(f"{size:>12,}  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
'''

REPORT_PY_FIXED = r'''
"""Print disk usage per top-level directory."""
import argparse
import json
import os
from pathlib import Path


def dir_size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            fp = Path(root) / name
            if not fp.is_symlink():
                total += fp.stat().st_size
    return total


def collect(base: Path) -> list[tuple[str, int]]:
    rows = [(p.name, dir_size(p)) for p in base.iterdir() if p.is_dir()]
    return sorted(rows, key=lambda r: r[1], reverse=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("base", type=Path, nargs="?", default=Path("."))
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON instead of a table")
    args = parser.parse_args(argv)
    rows = collect(args.base)
    if args.json:
        print(json.dumps([{"name": name, "bytes": size} for name, size in rows], indent=2))
    else:
        for name, size in rows:
            print(f"{size:>12,}  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
'''

TEST_REPORT = r'''
import json

from tools.report import main


def _make_tree(tmp_path):
    (tmp_path / "big").mkdir()
    (tmp_path / "big" / "a.bin").write_bytes(b"x" * 300)
    (tmp_path / "small").mkdir()
    (tmp_path / "small" / "b.txt").write_bytes(b"y" * 10)


def test_table_output(tmp_path, capsys):
    _make_tree(tmp_path)
    assert main([str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["300", "big"]
    assert lines[1].split() == ["10", "small"]
'''

TEST_REPORT_FIXED = TEST_REPORT + r'''

def test_json_output(tmp_path, capsys):
    _make_tree(tmp_path)
    assert main([str(tmp_path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data == [{"name": "big", "bytes": 300}, {"name": "small", "bytes": 10}]
'''

ROUTES_PY = r'''
import sqlite3

from flask import Flask, jsonify, request

app = Flask(__name__)
DB_PATH = "app.db"


def get_db():
    conn = sqlite3.connect(DB_PATH)
    conn.row_factory = sqlite3.Row
    return conn


@app.get("/users/search")
def search_users():
    name = request.args.get("name", "")
    conn = get_db()
    rows = conn.execute(
        f"SELECT id, name, email FROM users WHERE name LIKE '%{name}%' ORDER BY name"
    ).fetchall()
    conn.close()
    return jsonify([dict(r) for r in rows])
'''

ROUTES_PY_FIXED = r'''
import sqlite3

from flask import Flask, jsonify, request

app = Flask(__name__)
DB_PATH = "app.db"


def get_db():
    conn = sqlite3.connect(DB_PATH)
    conn.row_factory = sqlite3.Row
    return conn


def _escape_like(term: str) -> str:
    """Escape LIKE wildcards so user input is matched literally."""
    return term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


@app.get("/users/search")
def search_users():
    name = request.args.get("name", "")
    conn = get_db()
    try:
        rows = conn.execute(
            "SELECT id, name, email FROM users WHERE name LIKE ? ESCAPE '\\' ORDER BY name",
            (f"%{_escape_like(name)}%",),
        ).fetchall()
    finally:
        conn.close()
    return jsonify([dict(r) for r in rows])
'''

DATES_PY = r'''
from datetime import date, datetime


def parse_date(text: str) -> date:
    """Parse an ISO date like 2024-03-05."""
    return datetime.strptime(text.strip(), "%Y-%m-%d").date()
'''

DATES_PY_FIXED = r'''
from datetime import date, datetime

_FORMATS = ("%Y-%m-%d", "%Y/%m/%d", "%Y.%m.%d", "%Y年%m月%d日")


def parse_date(text: str) -> date:
    """解析日期，支持 2024-03-05、2024/3/5、2024.3.5、2024年3月5日 等写法。"""
    cleaned = text.strip()
    for fmt in _FORMATS:
        try:
            return datetime.strptime(cleaned, fmt).date()
        except ValueError:
            continue
    raise ValueError(f"无法识别的日期格式：{text!r}")
'''

TEST_DATES = r'''
from datetime import date

import pytest

from utils.dates import parse_date


def test_iso():
    assert parse_date("2024-03-05") == date(2024, 3, 5)
'''

TEST_DATES_FIXED = r'''
from datetime import date

import pytest

from utils.dates import parse_date


def test_iso():
    assert parse_date("2024-03-05") == date(2024, 3, 5)


@pytest.mark.parametrize("text", ["2024/3/5", "2024/03/05", "2024.3.5", "2024年3月5日", " 2024-3-5 "])
def test_other_formats(text):
    assert parse_date(text) == date(2024, 3, 5)


@pytest.mark.parametrize("text", ["2024-02-30", "05/03/2024", "", "明天"])
def test_invalid(text):
    with pytest.raises(ValueError):
        parse_date(text)
'''

CART_JS = r'''
import { formatPrice } from "./format.js";
import { logger } from "./logger.js";

export function cartTotal(items, coupon) {
  let total = 0;
  for (const item of items) {
    total += item.price * item.qty;
  }
  if (coupon != null && coupon.type == "percent") {
    total = total * (1 - coupon.value / 100);
  }
  return Math.round(total * 100) / 100;
}
'''

CART_JS_FIXED = r'''
export function cartTotal(items, coupon) {
  let total = 0;
  for (const item of items) {
    total += item.price * item.qty;
  }
  if (coupon != null && coupon.type === "percent") {
    total = total * (1 - coupon.value / 100);
  }
  return Math.round(total * 100) / 100;
}
'''

SUMMARY_PY = r'''
def order_summaries(db, customer_id):
    orders = db.fetch_all(
        "SELECT id, created_at, status FROM orders WHERE customer_id = ? ORDER BY created_at DESC",
        (customer_id,),
    )
    result = []
    for order in orders:
        items = db.fetch_all(
            "SELECT sku, quantity, unit_price FROM order_items WHERE order_id = ?",
            (order["id"],),
        )
        total = sum(i["quantity"] * i["unit_price"] for i in items)
        result.append({**order, "items": items, "total": total})
    return result
'''

SUMMARY_PY_FIXED = r'''
from collections import defaultdict


def order_summaries(db, customer_id):
    orders = db.fetch_all(
        "SELECT id, created_at, status FROM orders WHERE customer_id = ? ORDER BY created_at DESC",
        (customer_id,),
    )
    if not orders:
        return []

    # one query for all items instead of one query per order (N+1)
    order_ids = [o["id"] for o in orders]
    placeholders = ", ".join("?" for _ in order_ids)
    rows = db.fetch_all(
        f"SELECT order_id, sku, quantity, unit_price FROM order_items WHERE order_id IN ({placeholders})",
        tuple(order_ids),
    )
    items_by_order = defaultdict(list)
    for row in rows:
        items_by_order[row["order_id"]].append({k: row[k] for k in ("sku", "quantity", "unit_price")})

    result = []
    for order in orders:
        items = items_by_order[order["id"]]
        total = sum(i["quantity"] * i["unit_price"] for i in items)
        result.append({**order, "items": items, "total": total})
    return result
'''

TAGS_TEST = r'''
from blog.tags import normalise_tags


def test_normalise_tags_dedupes_and_lowercases():
    tags = normalise_tags(["Python", "python", "Testing", " CI "])
    assert tags == ["python", "testing", "ci"]
'''

TAGS_PY = r'''
def normalise_tags(raw):
    return list({t.strip().lower() for t in raw if t.strip()})
'''

TAGS_PY_FIXED = r'''
def normalise_tags(raw):
    """Lower-case, strip and de-duplicate tags, keeping first-seen order."""
    seen = dict.fromkeys(t.strip().lower() for t in raw if t.strip())
    return list(seen)
'''

DOCKERFILE = r'''
FROM python:3.12-slim
WORKDIR /app
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt
COPY . .
CMD ["python", "-m", "server"]
'''

DOCKERFILE_FIXED = r'''
FROM python:3.12-slim
WORKDIR /app
COPY backend/requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt
COPY backend/ .
CMD ["python", "-m", "server"]
'''

SCENARIOS = [
# ------------------------------------------------------------------ 1. failing python test (rounding)
[
("user", r'''
`pytest` is failing on main after my last commit. Can you find out why and fix it?
'''),
("call", [("run_command", {"command": "python -m pytest -q"})], "Let me run the test suite first to see what fails.", None),
("result", {"exit_code": 1, "output": r'''.F                                                                       [100%]
=================================== FAILURES ===================================
________________ test_total_with_discount_is_rounded_to_cents _________________

    def test_total_with_discount_is_rounded_to_cents():
        lines = [(3, Decimal("9.99"))]
>       assert invoice_total(lines, discount_pct=15) == Decimal("25.47")
E       AssertionError: assert Decimal('25.4745') == Decimal('25.47')
E        +  where Decimal('25.4745') = invoice_total([(3, Decimal('9.99'))], discount_pct=15)

tests/test_totals.py:13: AssertionError
=========================== short test summary info ============================
FAILED tests/test_totals.py::test_total_with_discount_is_rounded_to_cents - AssertionError: assert Decimal('25.4745') == Decimal('25.47')
1 failed, 1 passed in 0.04s'''}),
("call", [("read_file", {"path": "invoicing/totals.py"})], None,
 "invoice_total returns 25.4745: 3 × 9.99 = 29.97, minus 15% (4.4955). The test expects a value rounded to cents. Let me look at the implementation."),
("result", TOTALS_PY),
("patch", "invoicing/totals.py", TOTALS_PY, TOTALS_PY_FIXED,
 "The function never rounds: 29.97 − 4.4955 = 25.4745, while the test (and any invoice) needs whole cents. I'll round half-up to cents at the end, which is the usual rule for invoices, and give `sum` a `Decimal` start value so an empty invoice returns `Decimal('0.00')` instead of the integer 0.",
 None),
("call", [("run_command", {"command": "python -m pytest -q"})], None, None),
("result", {"exit_code": 0, "output": "..                                                                       [100%]\n2 passed in 0.03s"}),
("final", r'''
Fixed. The failing test was `test_total_with_discount_is_rounded_to_cents`.

**Cause:** `invoice_total` applied the discount but never rounded, so 3 × $9.99 with 15% off came out as `25.4745` instead of `25.47`.

**Change** (`invoicing/totals.py`):
- Round the final total half-up to whole cents with `quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)`.
- Start `sum` from `Decimal("0")`, so an invoice with no lines returns `Decimal('0.00')` rather than the int `0`.

Both tests pass now. One thing to decide as a team: I round only the final total. If your invoices show the discount as its own line, you may want to round the discount amount separately too, so the printed lines add up exactly to the printed total.
''', None),
],
# ------------------------------------------------------------------ 2. TypeScript strict mode
[
("user", r'''
I turned on `"strict": true` in tsconfig and now `npm run build` fails. Please fix the errors properly, no `as any` or `!` shortcuts.
'''),
("call", [("run_command", {"command": "npm run build"})], None, None),
("result", {"exit_code": 2, "output": r'''> api@1.4.0 build
> tsc -p tsconfig.json

src/config.ts:4:22 - error TS2345: Argument of type 'string | undefined' is not assignable to parameter of type 'string'.
  Type 'undefined' is not assignable to type 'string'.

4   const db = connect(process.env.DATABASE_URL);
                       ~~~~~~~~~~~~~~~~~~~~~~~~

src/config.ts:5:25 - error TS2345: Argument of type 'string | undefined' is not assignable to parameter of type 'string'.
  Type 'undefined' is not assignable to type 'string'.

5   const port = parseInt(process.env.PORT, 10);
                          ~~~~~~~~~~~~~~~~

src/handlers/health.ts:3:24 - error TS7006: Parameter 'req' implicitly has an 'any' type.

3 export function health(req, res: Response) {
                         ~~~


Found 3 errors in 2 files.'''}),
("call", [("read_file", {"path": "src/config.ts"}), ("read_file", {"path": "src/handlers/health.ts"})], "Three errors in two files. Reading both.", None),
("result", CONFIG_TS),
("result", HEALTH_TS),
("patch", "src/config.ts", CONFIG_TS, CONFIG_TS_FIXED,
 "Strict mode is right to complain: `process.env.X` is `string | undefined`, and today a missing `DATABASE_URL` would only fail somewhere inside `connect`. I'll add a small `requireEnv` helper that fails fast with a clear message, and give `PORT` an explicit default plus a NaN check.",
 "DATABASE_URL is required: no sensible default. PORT: default 3000 seems to be the convention? Check package.json or README... the health handler uses express; 3000 is common. Keep default but mention it."),
("patch", "src/handlers/health.ts", HEALTH_TS, HEALTH_TS_FIXED,
 "For the handler, type the unused request parameter and prefix it with `_` so it's clear it's intentionally unused.", None),
("call", [("run_command", {"command": "npm run build && npm test --silent"})], None, None),
("result", {"exit_code": 0, "output": "> api@1.4.0 build\n> tsc -p tsconfig.json\n\n\n PASS  tests/config.test.ts\n PASS  tests/health.test.ts\n\nTest Suites: 2 passed, 2 total\nTests:       7 passed, 7 total"}),
("final", r'''
The build is clean under `strict` and the tests pass. What I changed:

**`src/config.ts`**
- Added `requireEnv(name)`, which throws `Missing required environment variable DATABASE_URL` at startup instead of passing `undefined` into `connect`.
- `PORT` now defaults to `3000` when unset and throws if it isn't a number. Previously `parseInt(undefined, 10)` silently produced `NaN`.

**`src/handlers/health.ts`**
- Typed the request parameter as `Request` and renamed it `_req` since it's unused.

Please double-check the `3000` default matches how you run the service; if `PORT` should always be set explicitly, switch it to `requireEnv("PORT")` as well. Strict mode is likely to surface more of these `undefined` cases as the code grows; that's the point of it.
''', None),
],
# ------------------------------------------------------------------ 3. Go data race
[
("system_extra", "The repository is a Go module (example.com/app)."),
("user", r'''
`go test -race ./...` fails in CI on the stats package. Fix it.
'''),
("call", [("run_command", {"command": "go test -race ./stats/..."})], None, None),
("result", {"exit_code": 1, "output": r'''==================
WARNING: DATA RACE
Write at 0x00c0000a6030 by goroutine 9:
  runtime.mapassign_faststr()
      /usr/local/go/src/internal/runtime/maps/runtime_faststr.go:223 +0x0
  example.com/app/stats.(*Counter).Inc()
      /workspace/stats/counter.go:12 +0x5c
  example.com/app/stats.TestCounterConcurrent.func1()
      /workspace/stats/counter_test.go:17 +0x84

Previous write at 0x00c0000a6030 by goroutine 8:
  runtime.mapassign_faststr()
      /usr/local/go/src/internal/runtime/maps/runtime_faststr.go:223 +0x0
  example.com/app/stats.(*Counter).Inc()
      /workspace/stats/counter.go:12 +0x5c
  example.com/app/stats.TestCounterConcurrent.func1()
      /workspace/stats/counter_test.go:17 +0x84
==================
--- FAIL: TestCounterConcurrent (0.01s)
    testing.go:1490: race detected during execution of test
FAIL
FAIL	example.com/app/stats	0.031s
FAIL'''}),
("call", [("read_file", {"path": "stats/counter.go"})], None, None),
("result", COUNTER_GO),
("patch", "stats/counter.go", COUNTER_GO, COUNTER_GO_FIXED,
 "Two goroutines write to the same map in `Inc` with no synchronisation. That's a genuine bug, not just a test artefact: in production concurrent map writes can crash the process with `fatal error: concurrent map writes`. A mutex around both the write and the read is the simplest correct fix.",
 "Options: sync.Mutex, sync.RWMutex, sync.Map, or atomic per key. Writes (Inc) are the hot path, so RWMutex buys little; sync.Map is for append-mostly or disjoint keys, not counters. Plain Mutex is simplest. Get also needs the lock (reads race with writes)."),
("call", [("run_command", {"command": "go test -race -count=5 ./stats/... && go vet ./..."})], "Running it a few times under the race detector to be sure.", None),
("result", {"exit_code": 0, "output": "ok  \texample.com/app/stats\t1.208s"}),
("final", r'''
Fixed: `Counter` was written from several goroutines without synchronisation.

- **Cause:** `Inc` does `c.hits[key]++` on a plain map. Go maps aren't safe for concurrent writes; the race detector caught it in `TestCounterConcurrent`, and in production it can crash the whole process with `fatal error: concurrent map writes`.
- **Fix:** added a `sync.Mutex` to `Counter`, held in both `Inc` and `Get` (reads also race with writes).

`go test -race -count=5` and `go vet` pass. If this counter ever becomes a contention hotspot, per-key `atomic.Int64` values or sharding are options, but I'd only go there with a benchmark showing it matters.
''', None),
],
# ------------------------------------------------------------------ 4. Rust borrow checker E0502
[
("user", r'''
cargo build fails with a borrow checker error in src/cache.rs that I don't understand. The logic looks fine to me.
'''),
("call", [("run_command", {"command": "cargo build 2>&1 | head -40"})], None, None),
("result", {"exit_code": 0, "output": r'''   Compiling kvtool v0.3.0 (/workspace)
error[E0502]: cannot borrow `self.map` as mutable because it is also borrowed as immutable
  --> src/cache.rs:21:9
   |
16 |     pub fn get_or_load(&mut self, key: &str) -> &String {
   |                        - let's call the lifetime of this reference `'1`
17 |         if let Some(v) = self.map.get(key) {
   |                          -------- immutable borrow occurs here
18 |             return v;
   |                    - returning this value requires that `self.map` is borrowed for `'1`
...
21 |         self.map.insert(key.to_string(), value);
   |         ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^ mutable borrow occurs here

For more information about this error, try `rustc --explain E0502`.
error: could not compile `kvtool` (lib) due to 1 previous error'''}),
("call", [("read_file", {"path": "src/cache.rs"})], None, None),
("result", CACHE_RS),
("patch", "src/cache.rs", CACHE_RS, CACHE_RS_FIXED,
 r'''Your logic *is* fine; this is a known limitation of the current borrow checker. Because the early `return v` returns the borrow out of the function, the compiler extends the immutable borrow of `self.map` to the whole rest of the function, even on the path where `get` returned `None`. (The next-generation borrow checker, Polonius, accepts this code; stable Rust doesn't yet.)

The idiomatic fix is the `entry` API, which does the lookup and the insert through one mutable borrow:''',
 "Classic NLL problem case #3 (conditional return of a borrow). Workarounds: double lookup with contains_key, or entry API. entry needs an owned String key even on hits (allocation per call). Mention the trade-off; if that matters use contains_key + get."),
("call", [("run_command", {"command": "cargo build && cargo test"})], None, None),
("result", {"exit_code": 0, "output": "   Compiling kvtool v0.3.0 (/workspace)\n    Finished `dev` profile [unoptimized + debuginfo] target(s) in 1.42s\n     Running unittests src/lib.rs (target/debug/deps/kvtool-5f1c2a9e0d3b7c11)\n\nrunning 4 tests\ntest cache::tests::loads_missing_key ... ok\ntest cache::tests::returns_cached_value ... ok\ntest cache::tests::loads_once ... ok\ntest parse::tests::splits_pairs ... ok\n\ntest result: ok. 4 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s"}),
("final", r'''
Builds and all 4 tests pass.

**Why it failed:** `get_or_load` returned a reference from `self.map.get(key)` on one branch. Today's borrow checker then treats `self.map` as immutably borrowed for the entire function body, so the later `insert` conflicts, even though at runtime the two can never overlap. This is a well-known false positive (it's the motivating example for the upcoming Polonius borrow checker).

**Fix:** `self.map.entry(key.to_string()).or_insert_with(|| load(key))`: one mutable borrow that covers both the lookup and the insert, and `load` only runs on a miss.

**Trade-off:** `entry` needs an owned `String` key, so every call allocates, even on a cache hit. If this is a hot path, the alternative is a double lookup:

```rust
if !self.map.contains_key(key) {
    let value = load(key);
    self.map.insert(key.to_string(), value);
}
&self.map[key]
```

It hashes the key twice on a miss but doesn't allocate on hits.
''', None),
],
# ------------------------------------------------------------------ 5. feature: --json flag
[
("user", r'''
Add a `--json` option to tools/report.py so we can pipe the output into other tools. Add a test too.
'''),
("call", [("read_file", {"path": "tools/report.py"}), ("read_file", {"path": "tests/test_report.py"})], None, None),
("result", REPORT_PY),
("result", TEST_REPORT),
("patch", "tools/report.py", REPORT_PY, REPORT_PY_FIXED,
 "The script already separates data collection (`collect`) from printing, so the flag only needs to change the output step. I'll print a list of `{name, bytes}` objects, keeping the same sort order as the table.",
 "JSON shape: list of objects is friendlier for jq than a dict name->bytes (ordering preserved, easy to extend). Raw bytes, no formatting with commas."),
("patch", "tests/test_report.py", TEST_REPORT, TEST_REPORT_FIXED, "And a test that parses the JSON output:", None),
("call", [("run_command", {"command": "python -m pytest -q tests/test_report.py && python tools/report.py tests --json | head -5"})], None, None),
("result", {"exit_code": 0, "output": "..                                                                       [100%]\n2 passed in 0.05s\n[\n  {\n    \"name\": \"__pycache__\",\n    \"bytes\": 5123\n  },"}),
("final", r'''
Done. `tools/report.py --json` now prints:

```json
[
  {"name": "big", "bytes": 300},
  {"name": "small", "bytes": 10}
]
```

(pretty-printed with indentation; sorted largest first, same as the table).

- Sizes are raw byte counts (the table's thousands separators would break parsing).
- I chose a list of objects rather than a `{name: bytes}` map so the order is preserved and fields can be added later without breaking consumers.
- New test `test_json_output` checks the parsed structure; the existing table test still passes.

Example: `python tools/report.py /var/data --json | jq '.[0]'` shows the biggest directory.
''', None),
],
# ------------------------------------------------------------------ 6. CI matrix python 3.8
[
("user", r'''
CI is red only on the Python 3.8 job: `TypeError: 'type' object is not subscriptable`. Locally (3.12) everything passes.
'''),
("call", [("run_command", {"command": "grep -n 'python-version' .github/workflows/ci.yml; grep -n 'requires-python' pyproject.toml"})], None, None),
("result", {"exit_code": 0, "output": ".github/workflows/ci.yml:14:        python-version: [\"3.8\", \"3.11\", \"3.12\"]\npyproject.toml:9:requires-python = \">=3.8\""}),
("call", [("search_code", {"pattern": r"(list|dict|tuple|set)\[", "glob": "*.py"})], "That error on 3.8 almost always means built-in generics like `list[str]` (PEP 585, Python 3.9+). Let me find where they're used.", None),
("result", r'''src/ingest/parser.py:14:def parse_lines(lines: list[str]) -> dict[str, int]:
src/ingest/parser.py:31:def split_pairs(raw: str) -> list[tuple[str, str]]:
src/ingest/batch.py:8:def chunk(items: list[str], size: int = DEFAULT_SIZE) -> list[list[str]]:
src/ingest/batch.py:22:Pending = dict[str, list[str]]
src/ingest/batch.py:25:def drain(pending: Pending, queue: str) -> list[str]:'''),
("call", [("read_file", {"path": "src/ingest/batch.py", "start_line": 1, "end_line": 30})], "Most hits are annotations, but `batch.py:22` is a module-level type alias, which is evaluated at runtime. Checking it.", None),
("result", r'''"""Batching helpers for the ingest pipeline."""

from itertools import chain, islice

DEFAULT_SIZE = 500


def chunk(items: list[str], size: int = DEFAULT_SIZE) -> list[list[str]]:
    it = iter(items)
    out = []
    while batch := list(islice(it, size)):
        out.append(batch)
    return out


def flatten(batches):
    return list(chain.from_iterable(batches))


# queue name -> pending message ids,
# filled by the consumer and drained per queue
Pending = dict[str, list[str]]


def drain(pending: Pending, queue: str) -> list[str]:
    return pending.pop(queue, [])'''),
("final", r'''
Found it. The code uses built-in generic types such as `list[str]` and `dict[str, int]`, which only became subscriptable in **Python 3.9** (PEP 585). Your CI still tests 3.8 because `pyproject.toml` declares `requires-python = ">=3.8"`.

Where they're used:

| file | line | kind |
|---|---|---|
| `src/ingest/parser.py` | 14, 31 | function annotations |
| `src/ingest/batch.py` | 8, 25 | function annotations |
| `src/ingest/batch.py` | 22 | **runtime** type alias `Pending = dict[str, list[str]]` |

There are two reasonable fixes, and this is a project decision, so I haven't changed anything yet:

**Option A: keep supporting 3.8**
- Add `from __future__ import annotations` at the top of `parser.py` and `batch.py`. That makes annotations lazy strings, which fixes the function annotations (parser.py 14 and 31, batch.py 8 and 25).
- The alias on line 22 is executed at import time, so the future import does **not** help there; change it to `Pending = Dict[str, List[str]]` using `typing.Dict`/`typing.List`.

**Option B: drop 3.8** (my recommendation)
- Python 3.8 reached end of life in October 2024 and no longer gets security fixes.
- Change `requires-python` to `">=3.9"` and remove `"3.8"` from the CI matrix. No code changes needed.
- Note it in the changelog, since anyone still installing on 3.8 will get an older release.

Which would you like? I can apply either one and run the tests.
''', "Don't silently drop support for a Python version: that's a compatibility decision for the maintainers. Present both, recommend B with the EOL fact, and wait."),
("user", r'''
Go with option B.
'''),
("call", [("run_command", {"command": "sed -i 's/requires-python = \">=3.8\"/requires-python = \">=3.9\"/' pyproject.toml && sed -i 's/python-version: \\[\"3.8\", /python-version: [\"3.9\", /' .github/workflows/ci.yml && git diff --stat"})], None, None),
("result", {"exit_code": 0, "output": " .github/workflows/ci.yml | 2 +-\n pyproject.toml           | 2 +-\n 2 files changed, 2 insertions(+), 2 deletions(-)"}),
("call", [("run_command", {"command": "grep -n 'python-version\\|requires-python' .github/workflows/ci.yml pyproject.toml"})], "Verifying both edits.", None),
("result", {"exit_code": 0, "output": ".github/workflows/ci.yml:14:        python-version: [\"3.9\", \"3.11\", \"3.12\"]\npyproject.toml:9:requires-python = \">=3.9\""}),
("final", r'''
Done:

- `pyproject.toml`: `requires-python = ">=3.9"`
- `.github/workflows/ci.yml`: the matrix now tests 3.9, 3.11 and 3.12 (I replaced 3.8 with 3.9 so the minimum supported version is still covered in CI).

No source changes were needed. Remember to mention "dropped Python 3.8 support" in the changelog and release notes.
''', None),
],
# ------------------------------------------------------------------ 7. SQL injection
[
("user", r'''
Security review flagged app/routes.py for SQL injection. Please fix it and add a regression test.
'''),
("call", [("read_file", {"path": "app/routes.py"})], None, None),
("result", ROUTES_PY),
("patch", "app/routes.py", ROUTES_PY, ROUTES_PY_FIXED,
 "Confirmed: the `name` query parameter is interpolated straight into the SQL string. A request like `/users/search?name=' UNION SELECT id, password_hash, email FROM users --` would let anyone read arbitrary columns. The fix is a bound parameter. I'm also escaping `%` and `_` so they're matched literally, and closing the connection in a `finally` block.",
 "Parameterise. LIKE wildcards in user input aren't an injection risk but change semantics (searching '%' returns everything); escape them with ESCAPE '\\'. In the SQL string literal inside Python, '\\\\' in source becomes a single backslash char in SQL: ESCAPE '\\'. Good."),
("call", [("list_dir", {"path": "tests"})], None, None),
("result", "conftest.py\ntest_health.py\ntest_users.py"),
("call", [("read_file", {"path": "tests/conftest.py"})], None, None),
("result", r'''import sqlite3

import pytest

from app import routes


@pytest.fixture
def client(tmp_path, monkeypatch):
    db = tmp_path / "test.db"
    conn = sqlite3.connect(db)
    conn.executescript("""
        CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT, email TEXT, password_hash TEXT);
        INSERT INTO users (name, email, password_hash) VALUES
            ('Ana Lima', 'ana@example.com', 'h1'),
            ('Ben 100%', 'ben@example.com', 'h2'),
            ('Chen Wei', 'chen@example.com', 'h3');
    """)
    conn.commit()
    conn.close()
    monkeypatch.setattr(routes, "DB_PATH", str(db))
    return routes.app.test_client()'''),
("write", "tests/test_search_injection.py", r'''
def test_search_finds_by_substring(client):
    res = client.get("/users/search", query_string={"name": "an"})
    assert [u["name"] for u in res.get_json()] == ["Ana Lima"]


def test_injection_payload_is_treated_as_text(client):
    payload = "' UNION SELECT id, password_hash, email FROM users --"
    res = client.get("/users/search", query_string={"name": payload})
    assert res.status_code == 200
    assert res.get_json() == []


def test_percent_is_matched_literally(client):
    res = client.get("/users/search", query_string={"name": "%"})
    assert [u["name"] for u in res.get_json()] == ["Ben 100%"]
''', "The fixture already builds a small database, including a user with `%` in the name, which is handy for the wildcard test.", None),
("call", [("run_command", {"command": "python -m pytest -q"})], None, None),
("result", {"exit_code": 0, "output": "........                                                                 [100%]\n8 passed in 0.21s"}),
("final", r'''
Fixed and covered by tests.

**The vulnerability:** `/users/search` built its SQL with an f-string, so the `name` parameter could close the string literal and append arbitrary SQL, e.g. a `UNION SELECT` exposing `password_hash`.

**Changes in `app/routes.py`:**
- The query now uses a bound parameter (`LIKE ?`), so input can never change the SQL structure.
- `%` and `_` in the search term are escaped (`ESCAPE '\'`), so searching for `%` finds names containing a literal percent sign instead of matching every user.
- The connection is closed in `finally`, so it's released even if the query raises.

**New tests (`tests/test_search_injection.py`):** normal substring search, the `UNION SELECT` payload returning no rows, and literal `%` matching. The full suite passes (8 tests).

While I was there I noticed `get_db()` opens a new connection per request and other routes may build SQL the same way; a quick `grep -n 'execute(f"' -r app/` before closing the security ticket would be worthwhile.
''', None),
],
# ------------------------------------------------------------------ 8. ZH: date parsing
[
("user", r'''
utils/dates.py 里的 parse_date 只支持 2024-03-05 这种格式，用户经常输入 2024/3/5 或者 2024年3月5日，帮我改一下，顺便补上测试。
'''),
("call", [("read_file", {"path": "utils/dates.py"}), ("read_file", {"path": "tests/test_dates.py"})], None, None),
("result", DATES_PY),
("result", TEST_DATES),
("patch", "utils/dates.py", DATES_PY, DATES_PY_FIXED,
 "现在只用了一个 `strptime` 格式。我改成依次尝试几种常见格式，全部失败时抛出带原始输入的 `ValueError`。`strptime` 的 `%m`、`%d` 本身就能接受不补零的月和日（比如 `3`），所以 `2024/3/5` 和 `2024/03/05` 用同一个格式就够了。",
 "要不要支持 05/03/2024？有歧义（日/月还是月/日），不支持，测试里把它当作无效输入。2024-02-30 这种不存在的日期 strptime 会抛 ValueError，正好。"),
("patch", "tests/test_dates.py", TEST_DATES, TEST_DATES_FIXED, "补充测试：各种支持的写法，以及几种应该报错的输入。", None),
("call", [("run_command", {"command": "python -m pytest -q tests/test_dates.py"})], None, None),
("result", {"exit_code": 0, "output": "..........                                                               [100%]\n10 passed in 0.02s"}),
("final", r'''
改好了，10 个测试全部通过。

**`utils/dates.py` 的改动**
- 依次尝试 `%Y-%m-%d`、`%Y/%m/%d`、`%Y.%m.%d`、`%Y年%m月%d日` 四种格式，月和日补不补零都可以（`2024/3/5`、`2024/03/05` 都能解析）。
- 所有格式都失败时，抛出 `ValueError`，错误信息里带上用户的原始输入，方便排查。
- 前后空格会被去掉。

**新增测试**
- 5 种合法写法都解析为 2024 年 3 月 5 日；
- 4 种非法输入会报错：不存在的日期 `2024-02-30`、有歧义的 `05/03/2024`、空字符串和“明天”。

说明一下，我**故意没有支持** `05/03/2024` 这种写法，因为它可能是 3 月 5 日，也可能是 5 月 3 日，不同地区习惯不同，猜错了比直接报错更危险。如果你们的用户确实会这样输入，需要先约定好是哪种顺序。
''', None),
],
# ------------------------------------------------------------------ 9. ZH: lint errors
[
("user", r'''
CI 上 `npm run lint` 报错了，帮我修一下，不要直接把规则关掉。
'''),
("call", [("run_command", {"command": "npm run lint"})], None, None),
("result", {"exit_code": 1, "output": r'''> shop-web@2.3.1 lint
> eslint src

/workspace/src/cart.js
   1:10  error  'formatPrice' is defined but never used  no-unused-vars
   2:10  error  'logger' is defined but never used       no-unused-vars
   9:40  error  Expected '===' and instead saw '=='      eqeqeq

✖ 3 problems (3 errors, 0 warnings)'''}),
("call", [("read_file", {"path": "src/cart.js"})], None, None),
("result", CART_JS),
("call", [("search_code", {"pattern": "cartTotal|formatPrice", "path": "src"})], "先确认一下 `formatPrice` 是不是本来应该在这里用、只是忘了用。", None),
("result", "src/cart.js:1:import { formatPrice } from \"./format.js\";\nsrc/cart.js:4:export function cartTotal(items, coupon) {\nsrc/components/CartSummary.js:12:  const label = formatPrice(cartTotal(items, coupon));\nsrc/format.js:3:export function formatPrice(value) {"),
("patch", "src/cart.js", CART_JS, CART_JS_FIXED,
 "`formatPrice` 在 `CartSummary.js` 里已经用在 `cartTotal` 的返回值上了，所以 `cart.js` 里的导入确实是多余的，删掉即可；`logger` 也没有用到。`coupon.type == \"percent\"` 改成 `===`：两边都是字符串，行为不变。`coupon != null` 我保留了，它是同时判断 `null` 和 `undefined` 的惯用写法，默认配置的 eqeqeq 规则在这里也没有报错。",
 None),
("call", [("run_command", {"command": "npm run lint && npm test --silent"})], None, None),
("result", {"exit_code": 0, "output": "> shop-web@2.3.1 lint\n> eslint src\n\n\n PASS  src/__tests__/cart.test.js\n\nTest Suites: 1 passed, 1 total\nTests:       6 passed, 6 total"}),
("final", r'''
lint 已经通过，测试也全部通过。`src/cart.js` 的三处改动：

1. 删除未使用的 `formatPrice` 导入：价格格式化是在 `CartSummary.js` 里对 `cartTotal` 的结果做的，`cart.js` 本身不需要它。
2. 删除未使用的 `logger` 导入。
3. `coupon.type == "percent"` 改为 `===`，避免隐式类型转换，逻辑不变。

`coupon != null` 这一处我没有改：它是同时排除 `null` 和 `undefined` 的常见写法，当前的 ESLint 配置也允许。如果团队希望更严格，可以把规则配置成 `eqeqeq: ["error", "always"]`，那时这里要改成 `coupon !== null && coupon !== undefined`。
''', None),
],
# ------------------------------------------------------------------ 10. N+1 queries
[
("user", r'''
The /customers/<id>/orders endpoint takes ~3 seconds for customers with many orders. Can you look into it? The handler calls order_summaries in app/orders.py.
'''),
("call", [("read_file", {"path": "app/orders.py"})], None, None),
("result", SUMMARY_PY),
("call", [("run_command", {"command": "python scripts/profile_endpoint.py --customer 4412"})], "This is the classic N+1 pattern: one query for the orders, then one more query per order inside the loop. Let me confirm with the profiling script before changing anything.", None),
("result", {"exit_code": 0, "output": "customer 4412: 612 orders\nqueries executed: 613\ntotal time: 2.87s (db: 2.71s, python: 0.16s)"}),
("patch", "app/orders.py", SUMMARY_PY, SUMMARY_PY_FIXED,
 "613 queries for 612 orders confirms it. I'll fetch all items for those orders in one `IN (...)` query and group them in Python. The output shape stays exactly the same.",
 "SQLite limit on host parameters: SQLITE_MAX_VARIABLE_NUMBER default 32766 in newer versions (999 in older ones < 3.32). 612 fine, but a customer with thousands of orders could exceed 999 on old SQLite. Mention; alternative is a JOIN on orders with customer_id. Actually a JOIN would be simpler: SELECT oi.* FROM order_items oi JOIN orders o ON o.id = oi.order_id WHERE o.customer_id = ?. That avoids the parameter limit entirely. Hmm, but keep IN for now? Better to mention JOIN as the alternative in the summary; the IN version is fine for current data. Actually, let me think about which is better to ship... The JOIN version has no parameter limit issue and is also one query. But I've already written the IN version in the explanation; mention the limit and offer the JOIN."),
("call", [("run_command", {"command": "python -m pytest -q tests/test_orders.py && python scripts/profile_endpoint.py --customer 4412"})], None, None),
("result", {"exit_code": 0, "output": "....                                                                     [100%]\n4 passed in 0.12s\ncustomer 4412: 612 orders\nqueries executed: 2\ntotal time: 0.19s (db: 0.04s, python: 0.15s)"}),
("final", r'''
Found and fixed an N+1 query problem.

**Before:** `order_summaries` ran one query for the orders and then **one query per order** for its items: 613 queries for customer 4412, 2.87 s total, almost all of it in the database.

**After:** two queries in total, orders and then all their items with `WHERE order_id IN (...)`, grouped in Python. Same customer: **0.19 s**, about 15× faster. The returned data has the same shape, and the existing tests pass.

One caveat: the `IN` list has one bound parameter per order. Older SQLite builds (before 3.32) cap a statement at 999 parameters, so a customer with more than 999 orders would fail there. If that's possible for you, the more robust version is a single join:

```sql
SELECT oi.order_id, oi.sku, oi.quantity, oi.unit_price
FROM order_items oi
JOIN orders o ON o.id = oi.order_id
WHERE o.customer_id = ?
```

I'd also check that `order_items.order_id` is indexed, since both versions depend on it. Want me to switch to the join variant?
''', None),
],
# ------------------------------------------------------------------ 11. flaky test
[
("user", r'''
tests/test_tags.py::test_normalise_tags_dedupes_and_lowercases is flaky: it fails on most CI runs but passes now and then, and re-running sometimes makes it green. Can you figure out why?
'''),
("call", [("read_file", {"path": "tests/test_tags.py"}), ("read_file", {"path": "blog/tags.py"})], None, None),
("result", TAGS_TEST),
("result", TAGS_PY),
("call", [("run_command", {"command": "for i in 1 2 3 4 5 6; do PYTHONHASHSEED=$i python -m pytest -q tests/test_tags.py 2>&1 | tail -1; done"})],
 "`normalise_tags` builds a **set** and converts it to a list. Set order for strings depends on string hashing, which Python randomises per process. Let me prove it by pinning the hash seed.", None),
("result", {"exit_code": 0, "output": "1 passed in 0.01s\n1 failed in 0.03s\n1 failed in 0.03s\n1 failed in 0.02s\n1 passed in 0.01s\n1 failed in 0.02s"}),
("patch", "blog/tags.py", TAGS_PY, TAGS_PY_FIXED,
 "Confirmed: the result depends only on `PYTHONHASHSEED`. The test's expectation (first-seen order) is the sensible behaviour, so I'll fix the function rather than the test: `dict.fromkeys` de-duplicates while preserving insertion order.",
 None),
("call", [("run_command", {"command": "for i in 1 2 3 4 5 6; do PYTHONHASHSEED=$i python -m pytest -q tests/test_tags.py 2>&1 | tail -1; done"})], None, None),
("result", {"exit_code": 0, "output": "1 passed in 0.01s\n1 passed in 0.01s\n1 passed in 0.01s\n1 passed in 0.01s\n1 passed in 0.01s\n1 passed in 0.01s"}),
("final", r'''
The flakiness came from set ordering.

- `normalise_tags` de-duplicated with a set comprehension and returned `list(set)`. The iteration order of a set of strings depends on their hashes, and Python randomises string hashing per process (`PYTHONHASHSEED`), so the order changed between runs. With `PYTHONHASHSEED` 1 and 5 the test passed; with 2, 3, 4 and 6 it failed. Three distinct tags have six possible orders and only one of them matches the test, which is why it failed more often than it passed.
- Fix: `list(dict.fromkeys(...))`, which removes duplicates but keeps **first-seen order**, matching what the test expects. Now it passes for every seed.

This probably affected more than the test: any page rendering tags would have shown them in a different order after each restart. Worth grepping for other `list({...})` / `list(set(...))` patterns where order matters.
''', None),
],
# ------------------------------------------------------------------ 12. explain architecture
[
("user", r'''
I just joined the team. Can you give me an overview of how this repo is organised and how a request flows through it? Don't change anything.
'''),
("call", [("list_dir", {"path": "."})], None, None),
("result", "README.md\npyproject.toml\nDockerfile\nalembic.ini\nmigrations/\nsrc/\ntests/\nscripts/"),
("call", [("list_dir", {"path": "src/ledger"}), ("read_file", {"path": "pyproject.toml"})], None, None),
("result", "__init__.py\napp.py\nconfig.py\napi/\n  __init__.py\n  accounts.py\n  transfers.py\n  deps.py\ndomain/\n  __init__.py\n  money.py\n  transfer_service.py\nstore/\n  __init__.py\n  models.py\n  repo.py\nworkers/\n  __init__.py\n  settlement.py"),
("result", r'''[project]
name = "ledger"
version = "0.9.2"
requires-python = ">=3.11"
dependencies = [
  "fastapi>=0.110",
  "uvicorn[standard]>=0.29",
  "sqlalchemy>=2.0",
  "alembic>=1.13",
  "pydantic-settings>=2.2",
  "redis>=5.0",
]

[project.scripts]
ledger-worker = "ledger.workers.settlement:main"'''),
("call", [("read_file", {"path": "src/ledger/app.py"}), ("read_file", {"path": "src/ledger/api/transfers.py"})], None, None),
("result", r'''from fastapi import FastAPI

from ledger.api import accounts, transfers
from ledger.config import settings


def create_app() -> FastAPI:
    app = FastAPI(title="ledger", version="0.9.2")
    app.include_router(accounts.router, prefix="/accounts", tags=["accounts"])
    app.include_router(transfers.router, prefix="/transfers", tags=["transfers"])
    return app


app = create_app()'''),
("result", r'''from fastapi import APIRouter, Depends, HTTPException
from pydantic import BaseModel

from ledger.api.deps import get_service
from ledger.domain.money import Money
from ledger.domain.transfer_service import InsufficientFunds, TransferService

router = APIRouter()


class TransferIn(BaseModel):
    from_account: str
    to_account: str
    amount: str            # decimal string, e.g. "12.50"
    currency: str
    idempotency_key: str


@router.post("", status_code=202)
def create_transfer(body: TransferIn, service: TransferService = Depends(get_service)):
    try:
        transfer = service.request_transfer(
            body.from_account, body.to_account, Money.parse(body.amount, body.currency), body.idempotency_key
        )
    except InsufficientFunds as exc:
        raise HTTPException(status_code=409, detail=str(exc)) from None
    return {"id": transfer.id, "status": transfer.status}'''),
("call", [("read_file", {"path": "src/ledger/domain/transfer_service.py"}), ("read_file", {"path": "src/ledger/workers/settlement.py", "start_line": 1, "end_line": 40})], None, None),
("result", r'''from ledger.domain.money import Money
from ledger.store.repo import Repo


class InsufficientFunds(Exception):
    pass


class TransferService:
    def __init__(self, repo: Repo, queue):
        self.repo = repo
        self.queue = queue

    def request_transfer(self, src: str, dst: str, amount: Money, key: str):
        existing = self.repo.find_transfer_by_key(key)
        if existing is not None:
            return existing                      # idempotent retry
        with self.repo.transaction():
            balance = self.repo.available_balance(src, for_update=True)
            if balance < amount:
                raise InsufficientFunds(f"{src} has {balance}, needs {amount}")
            transfer = self.repo.create_pending_transfer(src, dst, amount, key)
            self.repo.place_hold(src, amount, transfer.id)
        self.queue.enqueue("settle", transfer.id)
        return transfer'''),
("result", r'''import logging
import time

from ledger.config import settings
from ledger.store.repo import Repo
from ledger.workers.queue import RedisQueue

log = logging.getLogger(__name__)


def settle(repo: Repo, transfer_id: str) -> None:
    with repo.transaction():
        t = repo.get_transfer(transfer_id, for_update=True)
        if t.status != "pending":
            return                                   # already settled or cancelled
        repo.post_entries(t)                         # debit src, credit dst (double entry)
        repo.release_hold(t.src, t.id)
        repo.mark_settled(t.id)


def main() -> None:
    repo = Repo(settings.database_url)
    queue = RedisQueue(settings.redis_url)
    while True:
        job = queue.dequeue("settle", timeout=5)
        if job is None:
            continue
        try:
            settle(repo, job.payload)
            queue.ack(job)
        except Exception:
            log.exception("settlement failed for %s", job.payload)
            queue.retry(job, delay=30)
            time.sleep(0.1)'''),
("final", r'''
Here's the big picture of **ledger**, a small money-transfer service built on FastAPI, SQLAlchemy and Redis.

**Layout**

| path | role |
|---|---|
| `src/ledger/app.py` | Creates the FastAPI app and mounts the routers |
| `src/ledger/api/` | HTTP layer: request/response models and routes (`accounts.py`, `transfers.py`); `deps.py` wires services into routes via `Depends` |
| `src/ledger/domain/` | Business logic with no HTTP details: `Money` (amount + currency), `TransferService` |
| `src/ledger/store/` | Persistence: SQLAlchemy models and a `Repo` that wraps queries and transactions |
| `src/ledger/workers/settlement.py` | Background worker (`ledger-worker` console script) that settles transfers from a Redis queue |
| `migrations/` + `alembic.ini` | Database schema migrations (Alembic) |
| `tests/`, `scripts/` | Tests and helper scripts |

**How a transfer flows through the system**

1. **`POST /transfers`** (`api/transfers.py`) validates the JSON body with the `TransferIn` model. Amounts arrive as decimal **strings** and are parsed into `Money`, which avoids float rounding.
2. **`TransferService.request_transfer`** (`domain/transfer_service.py`):
   - **Idempotency:** if a transfer with the same `idempotency_key` exists, it's returned as is, so client retries don't create duplicates.
   - In a DB transaction it locks the source balance (`for_update=True`), checks funds (raising `InsufficientFunds` → HTTP **409**), creates a **pending** transfer and places a **hold** on the amount.
   - After the commit it enqueues a `settle` job on Redis.
3. The API responds **202 Accepted** with the transfer id and status `pending`: the money hasn't moved yet.
4. **The settlement worker** pops the job and, in its own transaction, re-checks that the transfer is still pending (so a duplicate job is harmless), writes the **double-entry** postings (debit source, credit destination), releases the hold and marks the transfer settled. Failures are logged and retried after 30 s.

**Design ideas worth knowing**
- **Holds + asynchronous settlement:** the API stays fast and the balance check is immediately safe, while the actual postings happen in the background.
- **Safe retries everywhere:** idempotency keys on the API side, a status check in the worker.
- **Layering:** `api` depends on `domain`, which depends on `store`, never the other way round, so business logic can be tested without HTTP.

**One thing I'd ask the team about:** in `request_transfer`, the job is enqueued *after* the transaction commits. If the process crashes between the commit and `enqueue`, the transfer stays pending with a hold and no job. There may be a recovery script in `scripts/` for that (a "transactional outbox" is the usual pattern); worth checking how stuck transfers are handled.

Good places to start reading: `tests/` for the transfer service, then `store/repo.py` to see how the locking queries are written.
''', "Keep it read-only as requested. Structure: layout table, request flow, design notes, one open question (enqueue after commit → possible lost job)."),
],
# ------------------------------------------------------------------ 13. ZH: Dockerfile build context
[
("user", r'''
`docker build -t api .` 一直失败，帮我看看 Dockerfile 哪里写错了。
'''),
("call", [("run_command", {"command": "docker build -t api . 2>&1 | tail -8"})], None, None),
("result", {"exit_code": 0, "output": r''' => [internal] load build context                                             0.1s
 => => transferring context: 1.92MB                                           0.1s
 => CACHED [1/5] FROM docker.io/library/python:3.12-slim                      0.0s
 => CACHED [2/5] WORKDIR /app                                                 0.0s
 => ERROR [3/5] COPY requirements.txt .                                       0.0s
------
 > [3/5] COPY requirements.txt .:
------
ERROR: failed to solve: failed to compute cache key: failed to calculate checksum of ref: "/requirements.txt": not found'''}),
("call", [("list_dir", {"path": "."}), ("read_file", {"path": "Dockerfile"})], None, None),
("result", "Dockerfile\nREADME.md\nbackend/\n  requirements.txt\n  server/\n    __init__.py\n    __main__.py\n    routes.py\nfrontend/\n  package.json\n  src/\n.dockerignore"),
("result", DOCKERFILE),
("call", [("read_file", {"path": ".dockerignore"})], "`requirements.txt` 在 `backend/` 目录下，而 Dockerfile 是按它在根目录来写的。再看一下 `.dockerignore`，确认 `backend/` 没有被排除。", None),
("result", "node_modules\n**/__pycache__\n.git\nfrontend/node_modules"),
("patch", "Dockerfile", DOCKERFILE, DOCKERFILE_FIXED,
 "构建上下文是仓库根目录，所以 `COPY` 的源路径要带上 `backend/`。同时把 `COPY . .` 改成只复制 `backend/`，否则前端代码也会被打进后端镜像；`server` 包因此会直接位于 `/app/server`，`python -m server` 仍然能找到。",
 "COPY backend/ . 会把 backend 目录的内容复制到 /app，server/ 就在 /app/server，WORKDIR /app 下 python -m server 可以运行。"),
("call", [("run_command", {"command": "docker build -t api . 2>&1 | tail -3 && docker run --rm api python -c \"import server; print('ok')\""})], None, None),
("result", {"exit_code": 0, "output": " => exporting to image                                                       0.3s\n => => writing image sha256:5b0c2e91d7a3                                      0.0s\n => => naming to docker.io/library/api                                        0.0s\nok"}),
("final", r'''
构建已经成功了。问题出在 **COPY 的路径和构建上下文不一致**：

- `docker build -t api .` 的构建上下文是仓库根目录，而 `requirements.txt` 实际在 `backend/requirements.txt`，所以 `COPY requirements.txt .` 找不到文件。

**Dockerfile 的改动**

1. `COPY requirements.txt .` → `COPY backend/requirements.txt .`
2. `COPY . .` → `COPY backend/ .`：只把后端代码复制进镜像。原来的写法会把 `frontend/` 也一起打包进去，让镜像变大，而且前端文件一改就会让这一层的缓存失效。

依赖安装仍然在复制源码之前，所以只改代码时不会重新 `pip install`，构建缓存依然有效。

如果以后希望在 `backend/` 目录里单独构建，也可以把 Dockerfile 移到 `backend/` 下，用 `docker build -t api backend/`，那样原来的相对路径就不用改了。
''', None),
],
]
