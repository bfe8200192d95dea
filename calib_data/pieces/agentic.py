"""agentic category: multi-turn coding-agent sessions (read files, run commands/tests, apply patches).

Two sources:
- agentic_hand.SCENARIOS: hand-written sessions (interpreted from a small step DSL);
- sessions derived from the hand-written debugging pool (code_debug) and a few write/review entries:
  the agent reads the file, applies the fix as a unified diff computed from the same before/after
  code, runs the project's test command, and summarises. The task wording, test commands and their
  outputs below are hand-written per entry.
"""

from __future__ import annotations

import difflib
import re

from . import agentic_hand, code_debug, code_explain, code_write_py
from .common import asst, d, sample, tool, tool_call, tools_system, user

AGENT_TOOLS = [
    {"name": "list_dir", "description": "List the files and directories at a path in the repository.",
     "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
    {"name": "read_file", "description": "Read a text file from the repository, optionally a line range.",
     "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "start_line": {"type": "integer"},
                                                     "end_line": {"type": "integer"}}, "required": ["path"]}},
    {"name": "search_code", "description": "Search the repository with a regular expression (like ripgrep). Returns path:line:text matches.",
     "parameters": {"type": "object", "properties": {"pattern": {"type": "string"}, "path": {"type": "string"},
                                                     "glob": {"type": "string"}}, "required": ["pattern"]}},
    {"name": "run_command", "description": "Run a shell command in the repository root and return its exit code and combined output.",
     "parameters": {"type": "object", "properties": {"command": {"type": "string"}, "timeout_s": {"type": "integer", "default": 300}},
                    "required": ["command"]}},
    {"name": "apply_patch", "description": "Apply a unified diff to the working tree.",
     "parameters": {"type": "object", "properties": {"patch": {"type": "string"}}, "required": ["patch"]}},
    {"name": "write_file", "description": "Create or overwrite a file with the given content.",
     "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                    "required": ["path", "content"]}},
]

PREAMBLES = [
    """You are Clover Code, an autonomous coding agent working inside a git repository checked out at /workspace.
Work in small steps: inspect before you edit, keep changes minimal, and run the relevant tests after every change.
Never commit or push; the user reviews your changes. When you are done, summarise what you changed and why.""",
    """You are a careful software engineering agent. You can read and search the repository, run commands, and edit files.
Prefer the smallest correct fix, explain your reasoning briefly before each edit, and verify with tests.""",
    """你是 Clover Code，一个在代码仓库中工作的编程智能体，仓库位于 /workspace。
先查看代码再修改，改动尽量小，每次修改后运行相关测试。不要提交代码，完成后用中文总结改动内容和原因。""",
]


def _diff(path, before, after):
    lines = difflib.unified_diff(d(before).splitlines(keepends=True), d(after).splitlines(keepends=True),
                                 fromfile=f"a/{path}", tofile=f"b/{path}")
    return "".join(lines)


def _call(calls, lead=None, think=None):
    body = "\n".join(tool_call(n, a) for n, a in calls)
    return asst((d(lead) + "\n\n" + body) if lead else body, think)


def _system(rng, zh=False, extra=None):
    pre = PREAMBLES[2] if zh else PREAMBLES[rng.randrange(2)]
    if extra:
        pre = pre + "\n" + extra
    return tools_system(pre, AGENT_TOOLS, "zh" if zh else "en")


def run_dsl(rng, steps):
    zh = any(re.search(r"[\u4e00-\u9fff]", s[1]) for s in steps if s[0] == "user")
    extra = next((s[1] for s in steps if s[0] == "system_extra"), None)
    msgs = [_system(rng, zh, extra)]
    for st in steps:
        kind = st[0]
        if kind == "system_extra":
            continue
        if kind == "user":
            msgs.append(user(st[1]))
        elif kind == "call":
            msgs.append(_call(st[1], st[2], st[3]))
        elif kind == "result":
            content = st[1] if not isinstance(st[1], str) else d(st[1])
            msgs.append(tool(content))
        elif kind == "patch":
            _, path, before, after, lead, think = st
            msgs.append(_call([("apply_patch", {"patch": _diff(path, before, after)})], lead, think))
            msgs.append(tool({"status": "applied", "files": [path]}))
        elif kind == "write":
            _, path, content, lead, think = st
            msgs.append(_call([("write_file", {"path": path, "content": d(content) + "\n"})], lead, think))
            msgs.append(tool({"status": "written", "path": path, "bytes": len((d(content) + "\n").encode())}))
        elif kind == "final":
            msgs.append(asst(st[1], st[2]))
        else:
            raise ValueError(kind)
    return sample("agentic", msgs)


# ------------------------------------------------------------------ derived from code_debug

# path -> (task as the user would phrase it, test command, passing output, zh?)
DEBUG_TASKS = {
    "app/cart.py": ("Users report seeing items from other people's carts. Cart lives in app/cart.py. Please fix.",
                    "python -m pytest -q tests/test_cart.py", "....                                                                     [100%]\n4 passed in 0.02s"),
    "ui/buttons.py": ("Every handler from make_handlers in ui/buttons.py prints the last button number. Fix it please.",
                      "python -m pytest -q tests/test_buttons.py", "..                                                                       [100%]\n2 passed in 0.01s"),
    "search/bsearch.py": ("find_first_ge in search/bsearch.py hangs for some inputs (e.g. [1, 3, 5] with 4). Fix it and make sure the not-found case is sensible.",
                          "python -m pytest -q tests/test_bsearch.py", "......                                                                   [100%]\n6 passed in 0.02s"),
    "cleanup.py": ("remove_negatives in cleanup.py returns [-2, 3] for [-1, -2, 3, -4]. Please fix.",
                   "python -m pytest -q tests/test_cleanup.py", "...                                                                      [100%]\n3 passed in 0.01s"),
    "billing/split.py": ("split(100, 3) in billing/split.py returns shares that add up to 99.99. Shares must add up exactly to the total.",
                         "python -m pytest -q tests/test_split.py", ".....                                                                    [100%]\n5 passed in 0.03s"),
    "jobs/notify.py": ("jobs/notify.py logs `coroutine 'send_email' was never awaited` and no emails go out. Fix it.",
                       "python -m pytest -q tests/test_notify.py", "..                                                                       [100%]\n2 passed in 0.26s"),
    "src/timer.js": ("src/timer.js throws `Cannot read properties of undefined (reading 'count')` when the interval fires.",
                     "npm test --silent -- timer", " PASS  src/__tests__/timer.test.js\n\nTest Suites: 1 passed, 1 total\nTests:       3 passed, 3 total"),
    "scripts/migrate.js": ("The migration script in scripts/migrate.js prints 'all done' before records are saved and sometimes exits early.",
                           "npm test --silent -- migrate", " PASS  scripts/__tests__/migrate.test.js\n\nTest Suites: 1 passed, 1 total\nTests:       2 passed, 2 total"),
    "src/scores.js": ("The leaderboard in src/scores.js sorts 100 before 25. Fix the sort.",
                      "npm test --silent -- scores", " PASS  src/__tests__/scores.test.js\n\nTest Suites: 1 passed, 1 total\nTests:       2 passed, 2 total"),
    "src/components/TodoList.tsx": ("TodoList doesn't re-render after clicking Add. Component is src/components/TodoList.tsx.",
                                    "npm test --silent -- TodoList", " PASS  src/components/__tests__/TodoList.test.tsx\n\nTest Suites: 1 passed, 1 total\nTests:       3 passed, 3 total"),
    "src/inventory.rs": ("src/inventory.rs doesn't compile (cannot borrow *items as mutable). add_bundles should append a bundle item for each item on sale.",
                         "cargo test -q", "\nrunning 5 tests\n.....\ntest result: ok. 5 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s"),
    "src/names.rs": ("full_name in src/names.rs won't compile (missing lifetime specifier). Fix it.",
                     "cargo test -q", "\nrunning 3 tests\n...\ntest result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s"),
    "cache/cache.go": ("The service panics with `assignment to entry in nil map` in cache/cache.go.",
                       "go test -race ./cache/...", "ok  \texample.com/svc/cache\t1.034s"),
    "fetch/all.go": ("fetchAll in fetch/all.go runs out of file descriptors after a few thousand URLs.",
                     "go test ./fetch/...", "ok  \texample.com/svc/fetch\t0.412s"),
    "reports/inactive_users.sql": ("reports/inactive_users.sql returns no rows, but there are definitely users without a referrer.",
                                   "psql \"$TEST_DATABASE_URL\" -f reports/inactive_users.sql | tail -3", "  57 | kai@example.org\n  61 | noor@example.org\n(14 rows)"),
    "reports/orders_by_customer.sql": ("reports/orders_by_customer.sql is missing customers with zero 2024 orders. It should list all customers.",
                                       "psql \"$TEST_DATABASE_URL\" -f reports/orders_by_customer.sql | tail -3", "  88 | Vinter Design   |           0\n  91 | Osei Logistics  |           0\n(42 rows)"),
    "bin/compress-reports.sh": ("bin/compress-reports.sh breaks on files with spaces in their names.",
                                "shellcheck bin/compress-reports.sh && bash tests/compress_reports_test.sh", "ok: compressed 'Q3 report.csv'\nok: compressed 'summary.csv'\nok: empty directory handled\nall 3 checks passed"),
    "auth/check.py": ("is_admin in auth/check.py rejects some real admins in production. Tests pass locally.",
                      "python -W error::SyntaxWarning -m pytest -q tests/test_check.py", "...                                                                      [100%]\n3 passed in 0.02s"),
    "scheduler/window.py": ("is_upcoming in scheduler/window.py raises `TypeError: can't compare offset-naive and offset-aware datetimes`.",
                            "python -m pytest -q tests/test_window.py", "....                                                                     [100%]\n4 passed in 0.03s"),
}

ZH_TASKS = {
    "cleanup.py": "cleanup.py 里的 remove_negatives 输入 [-1, -2, 3, -4] 返回的是 [-2, 3]，帮我修一下。",
    "cache/cache.go": "服务在 cache/cache.go 里报 `assignment to entry in nil map` 然后崩了，帮我看看。",
    "scheduler/window.py": "scheduler/window.py 的 is_upcoming 报错 `TypeError: can't compare offset-naive and offset-aware datetimes`，帮我修一下。",
}


def _first_paragraph(text):
    return d(text).split("\n\n")[0]


def _debug_session(rng, entry):
    path = entry["path"]
    task, cmd, out = DEBUG_TASKS[path]
    zh = path in ZH_TASKS
    if zh:
        task = ZH_TASKS[path]
    msgs = [_system(rng, zh)]
    msgs.append(user(task))
    explore = rng.random() < 0.5
    if explore:
        stem = path.rsplit("/", 1)[-1].split(".")[0]
        msgs.append(_call([("search_code", {"pattern": stem if len(stem) > 3 else path, "path": "."})],
                          "先找一下相关代码。" if zh else None))
        hits = f"{path}:1:{d(entry['buggy']).splitlines()[0]}"
        msgs.append(tool(hits))
    msgs.append(_call([("read_file", {"path": path})]))
    msgs.append(tool(d(entry["buggy"])))
    analysis = _first_paragraph(entry["answer"])
    if zh:
        lead = "找到原因了，下面是修复补丁。具体原因我在最后总结。"
    else:
        lead = analysis
    think = entry.get("think")
    if think is None and rng.random() < 0.5:
        think = ("看完代码，问题很明确，改动可以很小。" if zh else "The bug is visible in this file; keep the fix minimal and run the tests afterwards.")
    msgs.append(_call([("apply_patch", {"patch": _diff(path, entry["buggy"], entry["fixed"])})], lead, think))
    msgs.append(tool({"status": "applied", "files": [path]}))
    msgs.append(_call([("run_command", {"command": cmd})]))
    msgs.append(tool({"exit_code": 0, "output": out}))
    if zh:
        final = f"已修复 `{path}`，相关测试全部通过（`{cmd}`）。\n\n" + ZH_SUMMARIES[path]
    else:
        # reuse the hand-written explanation, minus the embedded diff (the patch is already applied)
        paras = d(entry["answer"]).split("\n\n")[1:]
        body = "\n\n".join(paras).replace("{DIFF}", "(see the patch above)").replace("{FIXED}", "(see the patch above)")
        body = re.sub(r"\n{3,}", "\n\n", body).strip()
        final = f"Fixed `{path}`; `{cmd}` passes.\n\n" + body
    msgs.append(asst(final))
    return sample("agentic", msgs)


ZH_SUMMARIES = {
    "cleanup.py": "**原因**：原来的代码在遍历列表的同时调用 `remove` 删除元素。删除一个元素后，后面的元素整体前移一位，循环的下一步就跳过了移到当前位置的那个元素，所以 `-2` 被漏掉了。\n\n**修复**：改为用列表推导式生成一个新列表 `[x for x in nums if x >= 0]`，不再边遍历边修改。这样时间复杂度也从最坏 O(n²) 降到 O(n)。\n\n如果调用方依赖“原地修改”（别处持有同一个列表的引用），可以改成 `nums[:] = [...]`。",
    "cache/cache.go": "**原因**：Go 中 map 的零值是 `nil`，读取 nil map 没问题，但写入会直接 panic。`Cache{}` 或 `var c Cache` 创建出来的 `data` 字段就是 nil。\n\n**修复**：\n- 新增构造函数 `New()`，创建时初始化 map；\n- `Set` 中再做一次懒初始化，保证零值 `Cache{}` 也能直接使用；\n- 顺便加了 `sync.RWMutex`，因为缓存通常会被多个 goroutine 并发访问，而 Go 的 map 不支持并发写（否则会出现无法恢复的 `concurrent map writes` 错误）。\n\n测试用 `-race` 跑过，没有数据竞争。",
    "scheduler/window.py": "**原因**：数据库的 `timestamptz` 字段读出来是带时区的（aware）datetime，而 `datetime.now()` 返回的是不带时区的（naive）本地时间，Python 不允许直接比较这两种对象。\n\n**修复**：改为 `datetime.now(timezone.utc)`，得到带 UTC 时区的当前时间。带时区的时间按绝对时刻比较，和数据库返回的是哪个时区无关。\n\n建议：代码内部统一使用带时区的 UTC 时间，只在展示给用户时再转换成本地时区；另外不要用 `datetime.utcnow()`，它返回的是 naive 时间，而且在 Python 3.12 中已被弃用。",
}


# ------------------------------------------------------------------ derived: review a file / add a module

REVIEW_TASKS = [
    # (index in code_explain.ENTRIES, path, task)
    (8, "payments/discounts.py", "Please review payments/discounts.py before it ships. Don't change anything yet, just tell me what you'd fix."),
    (15, "src/lib/paginate.ts", "Can you review src/lib/paginate.ts for bugs? Read-only for now."),
    (9, "shipping/cost.py", "shipping/cost.py is hard to read. Suggest a refactor (don't apply it yet)."),
]


def _code_block(text, lang_hint=None):
    m = re.search(r"```(\w+)?\n(.*?)```", text, re.S)
    return m.group(2).rstrip("\n") if m else None


def _review_session(rng, idx, path, task):
    entry = code_explain.ENTRIES[idx]
    code = _code_block(entry["ask"])
    msgs = [_system(rng), user(task), _call([("read_file", {"path": path})]), tool(code)]
    msgs.append(asst(entry["answer"], entry.get("think")))
    return sample("agentic", msgs)


ADD_TASKS = [
    # (index in code_write_py.ENTRIES, module path, task, smoke command, smoke output)
    (6, "utils/intervals.py", "Add a merge_intervals(intervals) helper in utils/intervals.py that merges overlapping [start, end] pairs. Run it on a few examples.",
     "python utils/intervals.py", "[[1, 6], [8, 10], [15, 18]]\n[[1, 5]]\n[[1, 10]]"),
    (3, "utils/batching.py", "We need a chunked(iterable, n) helper in utils/batching.py that works for generators too. Add it and show it working.",
     "python utils/batching.py", "[[0, 1, 2], [3, 4, 5], [6]]"),
    (9, "search/trie.py", "Implement a prefix trie with autocomplete in search/trie.py (insert, membership test, complete(prefix, k) in alphabetical order).",
     "python search/trie.py", "['car', 'card', 'care']\nTrue False"),
    (7, "pipeline/order.py", "Write pipeline/order.py: given a dict of task -> dependencies, return an execution order and raise a helpful error on cycles.",
     "python pipeline/order.py", "['fetch', 'build', 'test', 'deploy']\ndependency cycle: a -> b -> c -> a"),
]


def _add_session(rng, idx, path, task, cmd, out):
    entry = code_write_py.ENTRIES[idx]
    code = _code_block(entry["answer"])
    msgs = [_system(rng), user(task)]
    folder = path.rsplit("/", 1)[0]
    msgs.append(_call([("list_dir", {"path": folder})]))
    msgs.append(tool("__init__.py"))
    lead = "The folder only has an `__init__.py`, so this is a new module. I'll include a few example calls at the bottom so it can be run directly as a smoke test."
    msgs.append(_call([("write_file", {"path": path, "content": code + "\n"})], lead, entry.get("think")))
    msgs.append(tool({"status": "written", "path": path, "bytes": len((code + "\n").encode())}))
    msgs.append(_call([("run_command", {"command": cmd})]))
    msgs.append(tool({"exit_code": 0, "output": out}))
    body = d(entry["answer"])
    body = re.sub(r"```python\n.*?```", f"(see `{path}`)", body, count=1, flags=re.S)
    msgs.append(asst(f"Added `{path}`; running it prints the expected results:\n\n```text\n{out}\n```\n\n" + body))
    return sample("agentic", msgs)


def build(rng) -> list[dict]:
    out = [run_dsl(rng, steps) for steps in agentic_hand.SCENARIOS]
    for entry in code_debug.ENTRIES:
        out.append(_debug_session(rng, entry))
    for idx, path, task in REVIEW_TASKS:
        out.append(_review_session(rng, idx, path, task))
    for args in ADD_TASKS:
        out.append(_add_session(rng, *args))
    return out
