"""A few long samples (roughly 2,500–4,000 tokens) for long-context calibration: the user pastes a
generated log or data table and the answer is computed from that same data, so every number in the
answer matches the input. Also one long agent session that fixes several bugs from the debug pool."""

from __future__ import annotations

import datetime as dt
import math
import statistics
from collections import Counter, defaultdict

from . import agentic, code_debug
from .common import asst, d, sample, tool, user

# ------------------------------------------------------------------ log analysis (code)

ENDPOINTS = [("GET", "/v1/orders"), ("GET", "/v1/orders/{id}"), ("POST", "/v1/orders"), ("GET", "/v1/products"),
             ("POST", "/v1/cart/items"), ("GET", "/healthz")]


def _p95(values):
    values = sorted(values)
    if not values:
        return 0
    k = max(0, math.ceil(0.95 * len(values)) - 1)
    return values[k]


def log_analysis(rng):
    start = dt.datetime(2025, 3, 11, 14, 0, 0)
    lines = []
    events = []  # (ts, level, kind, endpoint, status, dur)
    t = start
    spike_start = start + dt.timedelta(minutes=1, seconds=rng.randint(5, 25))
    restart_at = spike_start + dt.timedelta(seconds=rng.randint(70, 90))
    spike_end = restart_at + dt.timedelta(seconds=rng.randint(15, 25))
    restarted = False

    def stamp(x):
        return x.strftime("%Y-%m-%dT%H:%M:%S.") + f"{x.microsecond // 1000:03d}Z"

    while t < start + dt.timedelta(minutes=3, seconds=40):
        spike = spike_start <= t < spike_end
        t += dt.timedelta(milliseconds=rng.randint(1500, 3000) if spike else rng.randint(3500, 8000))
        ts = stamp(t)
        if not restarted and t >= restart_at:
            restarted = True
            lines.append(f"{ts} WARN  deploy  rolling restart triggered by on-call (api-7f9c pods 1/3)")
            events.append((t, "WARN", "restart", None, None, None))
            lines.append(f"{ts} INFO  db      pool resized max_connections=20 -> 40")
            events.append((t, "INFO", "resize", None, None, None))
            continue
        method, path = rng.choice(ENDPOINTS)
        rid = f"{rng.randrange(16**6):06x}"
        if path == "/healthz":
            dur = rng.randint(1, 4)
            lines.append(f"{ts} INFO  api     request_id={rid} method={method} path={path} status=200 duration_ms={dur}")
            events.append((t, "INFO", "req", f"{method} {path}", 200, dur))
            continue
        if spike and not restarted and t >= spike_start + dt.timedelta(seconds=15) and rng.random() < 0.8:
            wait = rng.randint(900, 3000)
            if wait > 1900:
                lines.append(f"{ts} ERROR db      timeout acquiring connection from pool (size=20, waited_ms=2000)")
                events.append((t, "ERROR", "pool_timeout", None, None, None))
                lines.append(f"{ts} ERROR api     request_id={rid} method={method} path={path} status=503 duration_ms={2000 + rng.randint(3, 30)}")
                events.append((t, "ERROR", "req", f"{method} {path}", 503, 2000))
            else:
                lines.append(f"{ts} WARN  db      slow pool checkout waited_ms={wait} in_use=20/20")
                events.append((t, "WARN", "pool_slow", None, None, None))
                dur = wait + rng.randint(20, 120)
                lines.append(f"{ts} INFO  api     request_id={rid} method={method} path={path} status=200 duration_ms={dur}")
                events.append((t, "INFO", "req", f"{method} {path}", 200, dur))
            continue
        dur = rng.randint(12, 95) if method == "GET" else rng.randint(30, 180)
        status = 200 if method == "GET" else 201
        if rng.random() < 0.04:
            status = 404 if "{id}" in path else 400
        lvl = "INFO" if status < 400 else "WARN"
        lines.append(f"{ts} {lvl:<5} api     request_id={rid} method={method} path={path} status={status} duration_ms={dur}")
        events.append((t, lvl, "req", f"{method} {path}", status, dur))

    reqs = [e for e in events if e[2] == "req"]
    levels = Counter(e[1] for e in events)
    err503 = [e for e in reqs if e[4] == 503]
    pool_events = [e for e in events if e[2] in ("pool_slow", "pool_timeout")]
    first_sym = min(e[0] for e in pool_events)
    last_sym = max(e[0] for e in pool_events)
    first_err = min(e[0] for e in events if e[1] == "ERROR")
    last_err = max(e[0] for e in events if e[1] == "ERROR")
    per_min = defaultdict(lambda: [0, 0])
    for e in reqs:
        key = e[0].strftime("%H:%M")
        per_min[key][0] += 1
        if e[4] == 503:
            per_min[key][1] += 1
    by_ep = Counter(e[3] for e in err503)
    before = [e[5] for e in reqs if e[0] < first_sym and e[3] != "GET /healthz"]
    during = [e[5] for e in reqs if first_sym <= e[0] <= last_sym and e[3] != "GET /healthz" and e[4] != 503]
    after = [e[5] for e in reqs if e[0] > restart_at and e[3] != "GET /healthz"]
    pool_slow = sum(1 for e in events if e[2] == "pool_slow")
    pool_to = sum(1 for e in events if e[2] == "pool_timeout")
    client_err = sum(1 for e in reqs if e[4] in (400, 404))
    n_before = sum(1 for e in reqs if e[0] < spike_start)
    rate_before = n_before / ((spike_start - start).total_seconds() / 60)
    n_spike = sum(1 for e in reqs if spike_start <= e[0] < restart_at)
    rate_spike = n_spike / ((restart_at - spike_start).total_seconds() / 60)
    dur_s = int((last_sym - first_sym).total_seconds())
    dur_txt = f"{dur_s // 60} min {dur_s % 60} s" if dur_s >= 60 else f"{dur_s} seconds"
    fmt = lambda x: x.strftime("%H:%M:%S")  # noqa: E731
    q = ("Our API had a wobble this afternoon. Here's the log from the api service. What happened, when, and how bad was it? "
         "Also give me a script to get these numbers myself next time.\n\n```text\n" + "\n".join(lines) + "\n```")
    rows = "\n".join(f"| {k} | {v[0]} | {v[1]} | {v[1] / v[0]:.0%} |" for k, v in sorted(per_min.items()))
    ep_rows = "\n".join(f"| `{ep}` | {n} |" for ep, n in by_ep.most_common())
    think = (f"Scan levels: INFO {levels['INFO']}, WARN {levels['WARN']}, ERROR {levels['ERROR']}. ERRORs are all db pool timeouts paired with 503s. "
             f"Pool trouble (slow checkouts in_use=20/20, then timeouts) from {fmt(first_sym)} to {fmt(last_sym)}; first ERROR {fmt(first_err)}, last {fmt(last_err)}. "
             f"Request rate jumps from about {rate_before:.0f}/min to about {rate_spike:.0f}/min from {fmt(spike_start)}: a traffic spike saturating a 20-connection pool. "
             f"Restart + pool resize 20->40 at {fmt(restart_at)}; no pool errors after that even though traffic was still elevated for a bit. "
             f"503s: {len(err503)} of {len(reqs)} requests overall. p95 latency before {_p95(before)} ms, successful requests in the window {_p95(during)} ms, after {_p95(after)} ms. "
             f"Healthz 200 throughout, so health checks wouldn't catch it. Can't tell from this log why traffic spiked or whether queries were also slower; say so.")
    ans = f"""**Summary:** a traffic spike exhausted the database connection pool (20 connections) for about {dur_txt}. Requests that couldn't get a connection within 2 s failed with **503**; the rest were slow. It ended when the on-call engineer restarted a pod and the pool was resized from 20 to 40 connections at {fmt(restart_at)}.

**Timeline (UTC)**

| time | what the log shows |
|---|---|
| before {fmt(spike_start)} | normal traffic, about {rate_before:.0f} requests/min; p95 latency {_p95(before)} ms |
| {fmt(spike_start)} | request rate jumps to about {rate_spike:.0f}/min |
| {fmt(first_sym)} | first slow pool checkout (`in_use=20/20`) |
| {fmt(first_err)} | first `timeout acquiring connection from pool` and first 503 |
| {fmt(first_sym)}–{fmt(last_sym)} | {pool_to} pool timeouts (each a 503) and {pool_slow} slow checkouts |
| {fmt(restart_at)} | rolling restart + `max_connections=20 -> 40`; no pool errors after this |
| after {fmt(restart_at)} | p95 latency back to {_p95(after)} ms |

**Impact**

- **{len(err503)} of {len(reqs)} requests ({len(err503) / len(reqs):.1%}) in this log failed with 503.** During the incident window itself the failure rate was much higher; per minute:

| minute | requests | 503s | error rate |
|---|---:|---:|---:|
{rows}

- Requests that did succeed during the incident were slow: p95 **{_p95(during)} ms** versus **{_p95(before)} ms** before.
- Failed requests by endpoint:

| endpoint | 503s |
|---|---:|
{ep_rows}

- `GET /healthz` kept returning 200 the whole time, because it doesn't touch the database. **Your health check could not have detected this.**
{(f"- The {client_err} 400/404 responses are scattered through the whole log and look like normal client errors, unrelated to the incident." if client_err > 1 else "- The single 4xx response looks like an ordinary client error, unrelated to the incident.") if client_err else "- There are no 4xx responses, so clients weren't sending bad requests."}

**What the log doesn't tell you:** *why* traffic spiked (a marketing email, a retry storm from a client, a bot), and whether queries also got slower, which would hold connections longer and make exhaustion worse. Doubling the pool relieved the symptom, but the database has its own connection limit, so make sure 40 × the number of pods still fits under it. Worth checking next:

1. Load-balancer or CDN logs for {spike_start.strftime('%H:%M')}–{restart_at.strftime('%H:%M')}: which clients and endpoints drove the spike.
2. The database's slow-query log and active connections for the same window.
3. Whether a client retries on 503 without backoff; that turns a small overload into a big one.
4. Add a readiness check that verifies a DB connection can be acquired, and alert on the pool-timeout log line.

**Script to reproduce these numbers**

```python
#!/usr/bin/env python3
\"\"\"Summarise an api log: levels, 503s per minute and per endpoint, p95 latency.\"\"\"
import math
import re
import sys
from collections import Counter, defaultdict

LINE = re.compile(r"^(?P<ts>\\S+) (?P<level>\\w+)\\s+(?P<comp>\\w+)\\s+(?P<msg>.*)$")
REQ = re.compile(r"method=(?P<method>\\S+) path=(?P<path>\\S+) status=(?P<status>\\d+) duration_ms=(?P<ms>\\d+)")


def p95(values):
    values = sorted(values)
    return values[max(0, math.ceil(0.95 * len(values)) - 1)] if values else 0


levels = Counter()
per_minute = defaultdict(lambda: [0, 0])
errors_by_endpoint = Counter()
latencies = []

for raw in open(sys.argv[1], encoding="utf-8"):
    m = LINE.match(raw.rstrip("\\n"))
    if not m:
        continue
    levels[m["level"]] += 1
    r = REQ.search(m["msg"])
    if not r:
        continue
    minute = m["ts"][11:16]
    per_minute[minute][0] += 1
    if r["status"] == "503":
        per_minute[minute][1] += 1
        errors_by_endpoint[f"{{r['method']}} {{r['path']}}"] += 1
    elif r["path"] != "/healthz":
        latencies.append(int(r["ms"]))

print("levels:", dict(levels))
for minute, (n, bad) in sorted(per_minute.items()):
    print(f"{{minute}}  requests={{n:3d}}  503={{bad:3d}}  rate={{bad / n:.0%}}")
print("503 by endpoint:", errors_by_endpoint.most_common())
print("p95 latency of non-503 requests (ms):", p95(latencies))
```

Run it with `python log_summary.py api.log`. For a per-window p95 like the one above, filter `latencies` by timestamp before computing it."""
    return sample("code", [user(q), asst(ans, think)])


# ------------------------------------------------------------------ CSV analysis (chat_en / chat_zh)

REGIONS_EN = ["North", "South", "East", "West"]
PRODUCTS_EN = [("Trail shoe", 89.0), ("Rain jacket", 129.0), ("Wool socks", 14.5), ("Day pack", 64.0), ("Headlamp", 39.0)]
REGIONS_ZH = ["华东", "华南", "华北", "西南"]
PRODUCTS_ZH = [("保温杯", 129.0), ("双肩包", 259.0), ("蓝牙耳机", 399.0), ("充电宝", 149.0), ("台灯", 189.0)]


def _sales_rows(rng, regions, products, n_days):
    rows = []
    start = dt.date(2025, 2, 3)
    for i in range(n_days):
        day = start + dt.timedelta(days=i)
        for _ in range(rng.randint(5, 8)):
            region = rng.choice(regions)
            prod, price = rng.choice(products)
            units = rng.randint(1, 12)
            if region == regions[2] and prod == products[1][0] and i >= n_days // 2:
                units = 0 if rng.random() < 0.5 else units  # stock-out in the second half
            rows.append((day, region, prod, units, price))
    return rows


def csv_analysis(rng, lang):
    regions = REGIONS_EN if lang == "en" else REGIONS_ZH
    products = PRODUCTS_EN if lang == "en" else PRODUCTS_ZH
    rows = _sales_rows(rng, regions, products, 28)
    rev = lambda r: r[3] * r[4]  # noqa: E731
    by_region = defaultdict(float)
    by_product = defaultdict(lambda: [0, 0.0])
    by_week = defaultdict(float)
    zero_rows = [r for r in rows if r[3] == 0]
    for r in rows:
        by_region[r[1]] += rev(r)
        by_product[r[2]][0] += r[3]
        by_product[r[2]][1] += rev(r)
        by_week[(r[0] - rows[0][0]).days // 7 + 1] += rev(r)
    total = sum(by_region.values())
    best_region = max(by_region, key=by_region.get)
    top_product = max(by_product, key=lambda p: by_product[p][1])
    weeks = sorted(by_week)
    wk_change = (by_week[weeks[-1]] - by_week[weeks[0]]) / by_week[weeks[0]]
    units_total = sum(r[3] for r in rows)
    if lang == "en":
        header = "date,region,product,units,unit_price"
        body = "\n".join(f"{r[0].isoformat()},{r[1]},{r[2]},{r[3]},{r[4]:.2f}" for r in rows)
        q = ("Here's our outdoor-gear sales export for February (4 weeks). Can you give me the totals by region and by product, the weekly trend, "
             "and anything that looks odd?\n\n```csv\n" + header + "\n" + body + "\n```")
        reg_rows = "\n".join(f"| {reg} | ${by_region[reg]:,.2f} | {by_region[reg] / total:.1%} |" for reg in sorted(by_region, key=by_region.get, reverse=True))
        prod_rows = "\n".join(f"| {p} | {by_product[p][0]} | ${by_product[p][1]:,.2f} |" for p in sorted(by_product, key=lambda p: by_product[p][1], reverse=True))
        wk_rows = "\n".join(f"| Week {w} | ${by_week[w]:,.2f} |" for w in weeks)
        odd = (f"- **{len(zero_rows)} rows with 0 units**, all for **{products[1][0]}** in the **{regions[2]}** region, and all in the second half of the month "
               f"(first on {min(r[0] for r in zero_rows):%d %b}). Zero-unit rows usually mean the item was listed but couldn't be sold: a stock-out is the most likely explanation. Worth checking inventory for that region."
               if zero_rows else "- No zero-unit rows or obviously broken values.")
        think = (f"{len(rows)} rows. Sum revenue per region/product/week; units × unit_price. Total {total:.2f}. Best region {best_region}. "
                 f"Top product by revenue {top_product}. Week 1 {by_week[weeks[0]]:.2f} vs week {weeks[-1]} {by_week[weeks[-1]]:.2f}. "
                 f"Zero-unit rows: {len(zero_rows)}, pattern: {products[1][0]} / {regions[2]} late in month.")
        ans = f"""I went through all {len(rows)} rows. Revenue = units × unit_price.

**Overall:** {units_total:,} units sold for **${total:,.2f}** in revenue.

**By region**

| region | revenue | share |
|---|---:|---:|
{reg_rows}

**By product**

| product | units | revenue |
|---|---:|---:|
{prod_rows}

{top_product} brings in the most revenue{' even though it is not the best seller by units' if max(by_product, key=lambda p: by_product[p][0]) != top_product else ''}.

**Weekly trend**

| week | revenue |
|---|---:|
{wk_rows}

Week {weeks[-1]} is {abs(wk_change):.1%} {'higher' if wk_change > 0 else 'lower'} than week 1. With only four weeks and a few orders per day, a single large order moves a week's total noticeably, so I wouldn't read a trend into this yet.

**Things that look odd**

{odd}

If you want, I can turn this into a small pandas script so you can rerun it on next month's export."""
        return sample("chat_en", [user(q), asst(ans, think)])
    header = "日期,区域,商品,销量,单价"
    body = "\n".join(f"{r[0].isoformat()},{r[1]},{r[2]},{r[3]},{r[4]:.2f}" for r in rows)
    q = "下面是我们店 2 月份（4 周）的销售数据导出，帮我按区域和商品汇总一下销售额，看看每周的趋势，再看看有没有异常的地方。\n\n```csv\n" + header + "\n" + body + "\n```"
    reg_rows = "\n".join(f"| {reg} | {by_region[reg]:,.2f} | {by_region[reg] / total:.1%} |" for reg in sorted(by_region, key=by_region.get, reverse=True))
    prod_rows = "\n".join(f"| {p} | {by_product[p][0]} | {by_product[p][1]:,.2f} |" for p in sorted(by_product, key=lambda p: by_product[p][1], reverse=True))
    wk_rows = "\n".join(f"| 第 {w} 周 | {by_week[w]:,.2f} |" for w in weeks)
    odd = (f"- 有 **{len(zero_rows)} 行销量为 0**，全部是**{regions[2]}**区域的**{products[1][0]}**，而且都出现在下半月（最早是 {min(r[0] for r in zero_rows):%m 月 %d 日}）。"
           f"这种情况通常说明商品上架了但卖不出去，最可能的原因是**缺货**，建议核对一下该区域的库存。"
           if zero_rows else "- 没有发现销量为 0 或明显异常的数据。")
    think = f"共 {len(rows)} 行，销售额 = 销量 × 单价。合计 {total:.2f}，最高区域 {best_region}，销售额最高商品 {top_product}。销量为 0 的行 {len(zero_rows)} 个，集中在{regions[2]}的{products[1][0]}。"
    ans = f"""我把 {len(rows)} 行数据全部汇总了一遍，销售额按“销量 × 单价”计算。

**总体**：共售出 {units_total:,} 件，销售额 **{total:,.2f} 元**。

**按区域**

| 区域 | 销售额（元） | 占比 |
|---|---:|---:|
{reg_rows}

**按商品**

| 商品 | 销量 | 销售额（元） |
|---|---:|---:|
{prod_rows}

**按周**

| 周 | 销售额（元） |
|---|---:|
{wk_rows}

第 {weeks[-1]} 周比第 1 周{'增长' if wk_change > 0 else '下降'}了 {abs(wk_change):.1%}。不过每天只有几笔订单，一笔大单就会明显影响当周的总额，仅凭四周的数据还很难判断趋势。

**异常情况**

{odd}

需要的话，我可以写一个 pandas 脚本，下个月导出数据后直接运行就能得到同样的汇总。"""
    return sample("chat_zh", [user(q), asst(ans, think)])


# ------------------------------------------------------------------ long agent session: several bugs at once


def multi_fix_session(rng):
    paths = ["billing/split.py", "search/bsearch.py", "scheduler/window.py", "jobs/notify.py"]
    entries = {e["path"]: e for e in code_debug.ENTRIES}
    msgs = [agentic._system(rng)]
    msgs.append(user("""
QA filed four bugs against the backend this sprint. Please fix all of them, one at a time, and run the full test suite at the end:

1. BUG-311: bill splitting sometimes loses a cent (billing/split.py)
2. BUG-318: product search hangs for some price filters (search/bsearch.py)
3. BUG-322: the reminders job crashes comparing datetimes (scheduler/window.py)
4. BUG-327: weekly digest emails are never sent (jobs/notify.py)
"""))
    msgs.append(agentic._call([("run_command", {"command": "python -m pytest -q -x --timeout=10"})],
                              "I'll start with the test suite to see which of these are already covered by failing tests.", None))
    msgs.append(tool({"exit_code": 1, "output": d("""
        ..........F
        =================================== FAILURES ===================================
        ______________________________ test_split_exact ________________________________

            def test_split_exact():
        >       assert sum(split(100, 3)) == 100
        E       assert 99.99 == 100

        tests/test_split.py:6: AssertionError
        =========================== short test summary info ============================
        FAILED tests/test_split.py::test_split_exact - assert 99.99 == 100
        !!!!!!!!!!!!!!!!!!!!!!!!!! stopping after 1 failures !!!!!!!!!!!!!!!!!!!!!!!!!!!
        1 failed, 10 passed in 0.31s""")}))
    for i, p in enumerate(paths):
        e = entries[p]
        msgs.append(agentic._call([("read_file", {"path": p})], f"BUG-{[311, 318, 322, 327][i]}: reading `{p}`." if i else None, None))
        msgs.append(tool(d(e["buggy"])))
        lead = d(e["answer"]).split("\n\n")[0]
        msgs.append(agentic._call([("apply_patch", {"patch": agentic._diff(p, e["buggy"], e["fixed"])})], lead, e.get("think")))
        msgs.append(tool({"status": "applied", "files": [p]}))
    msgs.append(agentic._call([("run_command", {"command": "python -m pytest -q --timeout=10"})], "All four patches are in. Running the whole suite.", None))
    msgs.append(tool({"exit_code": 0, "output": "....................                                                     [100%]\n20 passed in 0.58s"}))
    msgs.append(asst("""
All four bugs are fixed and the full suite passes (20 tests).

| bug | file | cause | fix |
|---|---|---|---|
| BUG-311 | `billing/split.py` | each share was rounded independently, so the remainder cent was lost; floats for money | work in integer cents with `Decimal`, hand out the leftover cents one by one |
| BUG-318 | `search/bsearch.py` | `lo = mid` made no progress when `hi == lo + 1` (infinite loop); not-found returned the last index | half-open range `[0, len)` and `lo = mid + 1`; returns `len(arr)` when nothing matches |
| BUG-322 | `scheduler/window.py` | compared naive `datetime.now()` with aware `timestamptz` values | `datetime.now(timezone.utc)` |
| BUG-327 | `jobs/notify.py` | coroutines were created but never awaited | `await asyncio.gather(...)` over all recipients |

Notes for review:

- Only BUG-311 had a failing test. I'd add regression tests for the other three before closing the tickets: a search with a target between two elements (it used to hang, so give that test a timeout), a reminder compared against an aware datetime, and a notify test that asserts the send function was awaited once per user.
- In `split`, the first people in the list pay the extra cent. That's a product decision; check it's acceptable.
- For `notify`, `gather` sends all emails concurrently. For large recipient lists, limit concurrency with a semaphore so you don't open hundreds of SMTP connections at once.
"""))
    return sample("agentic", msgs)


def build(rng) -> dict[str, list[dict]]:
    return {
        "code": [log_analysis(rng)],
        "chat_en": [csv_analysis(rng, "en")],
        "chat_zh": [csv_analysis(rng, "zh")],
        "agentic": [multi_fix_session(rng)],
    }
