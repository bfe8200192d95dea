"""Code category: debugging requests. The unified diff in each answer is computed from the
hand-written buggy and fixed versions (see build in code_pool.py), so it always matches them."""

# keys: lang, path, ask (may contain {CODE}), buggy, fixed, answer (may contain {DIFF} / {FIXED}), think (optional)

ENTRIES = [
dict(
lang="python", path="app/cart.py",
ask=r'''
Weird bug: items from one shopping cart show up in another cart. Each request creates a new Cart. What's going on?

{CODE}
''',
buggy=r'''
class Cart:
    def __init__(self, owner, items=[]):
        self.owner = owner
        self.items = items

    def add(self, sku, qty=1):
        self.items.append((sku, qty))
        return self
''',
fixed=r'''
class Cart:
    def __init__(self, owner, items=None):
        self.owner = owner
        self.items = list(items) if items is not None else []

    def add(self, sku, qty=1):
        self.items.append((sku, qty))
        return self
''',
answer=r'''
It's the mutable default argument. `items=[]` is evaluated **once**, when the `def` statement runs, not on every call. Every `Cart` created without an explicit `items` shares that same list object, so `add` on one cart appends to the list all the others see:

```python
a = Cart("ana"); b = Cart("ben")
a.add("apple")
print(b.items)        # [('apple', 1)]  <- same list
print(a.items is b.items)   # True
```

Fix: use `None` as the default and create a new list inside:

{DIFF}

I also wrapped a passed-in list with `list(items)`. Otherwise `Cart("x", my_list)` would keep a reference to the caller's list and mutate it on `add`, which is the same class of bug one level removed.

Linters catch this pattern: pylint reports `W0102 dangerous-default-value` and ruff/flake8-bugbear reports `B006`.
''',
),
dict(
lang="python", path="ui/buttons.py",
ask=r'''
All my buttons print "button 4" when clicked, no matter which one. Why?

{CODE}
''',
buggy=r'''
def make_handlers(n):
    handlers = []
    for i in range(n):
        handlers.append(lambda: print(f"button {i}"))
    return handlers

for h in make_handlers(5):
    h()
''',
fixed=r'''
def make_handlers(n):
    handlers = []
    for i in range(n):
        handlers.append(lambda i=i: print(f"button {i}"))
    return handlers

for h in make_handlers(5):
    h()
''',
answer=r'''
Python closures capture **variables, not values**. All five lambdas refer to the same variable `i` in `make_handlers`'s scope. They only look it up when called, and by then the loop has finished and `i` is 4.

The common fix is to bind the current value as a default argument, which *is* evaluated when each lambda is created:

{DIFF}

Alternatives that some people find clearer:

```python
from functools import partial

def on_click(i):
    print(f"button {i}")

handlers = [partial(on_click, i) for i in range(n)]
```

`partial` stores the argument value at creation time. One caution with the `i=i` trick: the handler now accepts an optional argument, so if your GUI framework calls handlers with an event object (`h(event)`), that event would silently replace `i`. In that case use `partial`, or `lambda event, i=i: ...`.
''',
),
dict(
lang="python", path="search/bsearch.py",
ask=r'''
My binary search hangs forever for some inputs, e.g. `find_first_ge([1, 3, 5], 4)`. Can you spot it?

{CODE}
''',
buggy=r'''
def find_first_ge(arr, target):
    lo, hi = 0, len(arr) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if arr[mid] < target:
            lo = mid
        else:
            hi = mid
    return lo
''',
fixed=r'''
def find_first_ge(arr, target):
    # returns len(arr) if every element is < target
    lo, hi = 0, len(arr)
    while lo < hi:
        mid = (lo + hi) // 2
        if arr[mid] < target:
            lo = mid + 1
        else:
            hi = mid
    return lo
''',
think=r'''
Trace [1,3,5], 4: lo=0, hi=2. mid=1, arr[1]=3 < 4 → lo=1. lo=1, hi=2: mid=1 again, 3<4 → lo=1. Infinite loop. Because mid rounds down, when hi = lo+1, mid = lo, and lo = mid makes no progress. Fix lo = mid + 1: since arr[mid] < target, mid can't be the answer. Also hi = len(arr)-1 means if all elements < target, it returns last index incorrectly. Use hi = len(arr) for half-open range. Check [1,3,5], 4: lo=0,hi=3: mid=1, 3<4 → lo=2; mid=2: 5>=4 → hi=2; return 2. Correct. target=6 → lo=0,hi=3; mid=1 → lo=2; mid=2 5<6 → lo=3; return 3 = len. Good. Empty: lo=0, hi=0, return 0.
''',
answer=r'''
Two problems, one of which causes the hang.

**1. `lo = mid` doesn't make progress.** `mid = (lo + hi) // 2` rounds down, so when `hi == lo + 1`, `mid == lo`. If `arr[mid] < target`, you set `lo = mid`, which is the same value, and the loop repeats forever. Trace for `[1, 3, 5]`, target 4:

| lo | hi | mid | arr[mid] | action |
|---|---|---|---|---|
| 0 | 2 | 1 | 3 | 3 < 4, lo = 1 |
| 1 | 2 | 1 | 3 | 3 < 4, lo = 1 (no change) |
| 1 | 2 | 1 | 3 | ... forever |

Since `arr[mid] < target`, `mid` can't be the answer, so it's safe to use `lo = mid + 1`.

**2. The "not found" case is wrong.** With `hi = len(arr) - 1`, if every element is smaller than the target the function returns the last index instead of signalling that there's no such element. Using a half-open range `[0, len(arr))` makes the answer `len(arr)` in that case, the same convention as `bisect.bisect_left`.

{DIFF}

Quick check: `find_first_ge([1, 3, 5], 4) == 2`, `find_first_ge([1, 3, 5], 6) == 3`, `find_first_ge([], 1) == 0`. In real code, `bisect.bisect_left(arr, target)` does exactly this and is implemented in C.
''',
),
dict(
lang="python", path="cleanup.py",
ask=r'''
This is supposed to remove all negative numbers but `remove_negatives([-1, -2, 3, -4])` returns `[-2, 3]`.

{CODE}
''',
buggy=r'''
def remove_negatives(nums):
    for x in nums:
        if x < 0:
            nums.remove(x)
    return nums
''',
fixed=r'''
def remove_negatives(nums):
    return [x for x in nums if x >= 0]
''',
answer=r'''
You're removing elements from the list while iterating over it. The `for` loop walks by index; when you remove an element, everything after it shifts left by one, and the loop's next step skips the element that moved into the current position.

With `[-1, -2, 3, -4]`:

1. index 0 is `-1` → removed, list is `[-2, 3, -4]`
2. index 1 is now `3` (the `-2` slid into index 0 and was skipped) → kept
3. index 2 is `-4` → removed, list is `[-2, 3]`
4. index 3 doesn't exist → loop ends

Build a new list instead:

{DIFF}

This is also faster: `list.remove` searches from the start each time, so the original was O(n²) in the worst case, while the comprehension is O(n).

If callers rely on the list being modified **in place** (other references to the same list should see the change), use slice assignment: `nums[:] = [x for x in nums if x >= 0]`.
''',
),
dict(
lang="python", path="billing/split.py",
ask=r'''
Splitting a bill: `split(100, 3)` gives `[33.33, 33.33, 33.33]`, which adds up to 99.99, and our accountant is not happy. Also sometimes I see values like 0.30000000000000004 in logs.

{CODE}
''',
buggy=r'''
def split(total, people):
    share = round(total / people, 2)
    return [share] * people
''',
fixed=r'''
from decimal import ROUND_DOWN, Decimal


def split(total, people):
    total = Decimal(str(total)).quantize(Decimal("0.01"))
    cents = int(total * 100)
    base, extra = divmod(cents, people)
    # the first `extra` people pay one cent more, so the shares add up exactly
    shares = [base + 1] * extra + [base] * (people - extra)
    return [(Decimal(c) / 100).quantize(Decimal("0.01"), rounding=ROUND_DOWN) for c in shares]
''',
answer=r'''
Two separate issues:

1. **Rounding each share independently loses the remainder.** 100 / 3 is 33.333..., rounded to 33.33, and three of those are 99.99. One cent has to go somewhere.
2. **Binary floats can't represent most decimal fractions exactly**, which is where `0.30000000000000004` comes from (`0.1 + 0.2` in float). For money, use `Decimal` or integer cents.

The fix works in integer cents and hands out the leftover cents one by one:

{DIFF}

```python
>>> split(100, 3)
[Decimal('33.34'), Decimal('33.33'), Decimal('33.33')]
>>> sum(split(100, 3))
Decimal('100.00')
>>> split("10.01", 4)
[Decimal('2.51'), Decimal('2.50'), Decimal('2.50'), Decimal('2.50')]
```

`Decimal(str(total))` matters when a float is passed: `Decimal(0.1)` gives the exact binary value `0.1000000000000000055511151231257827...`, whereas `Decimal("0.1")` is exactly one tenth. Better still, have callers pass strings or `Decimal` and drop floats from the billing code entirely.

Who pays the extra cent is a business rule; here it's the first people in the list. Ask your accountant whether they prefer another rule.
''',
),
dict(
lang="python", path="jobs/notify.py",
ask=r'''
I get `RuntimeWarning: coroutine 'send_email' was never awaited` and no emails are sent. Code:

{CODE}
''',
buggy=r'''
import asyncio


async def send_email(to, subject):
    await asyncio.sleep(0.1)  # pretend network call
    print(f"sent {subject!r} to {to}")


async def notify_all(users):
    for user in users:
        send_email(user, "Weekly digest")


asyncio.run(notify_all(["a@example.com", "b@example.com"]))
''',
fixed=r'''
import asyncio


async def send_email(to, subject):
    await asyncio.sleep(0.1)  # pretend network call
    print(f"sent {subject!r} to {to}")


async def notify_all(users):
    await asyncio.gather(*(send_email(user, "Weekly digest") for user in users))


asyncio.run(notify_all(["a@example.com", "b@example.com"]))
''',
answer=r'''
Calling an `async def` function doesn't run it. `send_email(user, ...)` only creates a coroutine object; the body executes when that object is awaited or scheduled as a task. Your loop creates the coroutines and drops them, so nothing is sent, and Python warns when an un-awaited coroutine is garbage collected.

The minimal fix is `await send_email(user, "Weekly digest")` inside the loop, which sends them one after another. Since the emails are independent, you can send them concurrently with `gather`:

{DIFF}

With two users, the sequential version takes about 0.2 s and the `gather` version about 0.1 s; the difference grows with the list. For hundreds of recipients, limit concurrency with an `asyncio.Semaphore` so you don't open hundreds of SMTP connections at once.

`gather` raises the first exception by default. If one failed address shouldn't stop the rest, use `asyncio.gather(..., return_exceptions=True)` and check the results.
''',
),
dict(
lang="javascript", path="src/timer.js",
ask=r'''
JS: `TypeError: Cannot read properties of undefined (reading 'count')` inside tick(). Works if I call `c.tick()` directly.

{CODE}
''',
buggy=r'''
class Counter {
  constructor() {
    this.count = 0;
  }

  tick() {
    this.count += 1;
    console.log(`count is ${this.count}`);
  }

  start() {
    setInterval(this.tick, 1000);
  }
}

new Counter().start();
''',
fixed=r'''
class Counter {
  constructor() {
    this.count = 0;
  }

  tick = () => {
    this.count += 1;
    console.log(`count is ${this.count}`);
  };

  start() {
    setInterval(this.tick, 1000);
  }
}

new Counter().start();
''',
answer=r'''
`this` in a regular JavaScript method is decided by **how the function is called**, not where it was defined. `c.tick()` calls it with `this === c`. But `setInterval(this.tick, 1000)` passes just the function; when the timer fires it's called as a plain function, so `this` is `undefined` (class bodies are strict mode), and `this.count` throws.

Option 1, make `tick` an arrow-function class field, which captures `this` from the instance when it's created:

{DIFF}

Option 2, keep the method and bind at the call site:

```js
start() {
  setInterval(() => this.tick(), 1000);
  // or: setInterval(this.tick.bind(this), 1000);
}
```

Trade-off: the class-field version creates a new function per instance and `tick` is no longer on the prototype (so it can't be overridden with `super.tick()` in a subclass). The call-site version keeps a normal method. For event handlers you pass around a lot, as in React class components, the class-field style is common; otherwise I'd pick option 2.
''',
),
dict(
lang="javascript", path="scripts/migrate.js",
ask=r'''
The log says "all done" before any of the records are saved, and sometimes the process exits before they finish.

{CODE}
''',
buggy=r'''
async function migrate(records, db) {
  records.forEach(async (rec) => {
    const row = transform(rec);
    await db.insert("users", row);
  });
  console.log("all done");
}
''',
fixed=r'''
async function migrate(records, db) {
  for (const rec of records) {
    const row = transform(rec);
    await db.insert("users", row);
  }
  console.log("all done");
}
''',
answer=r'''
`Array.prototype.forEach` ignores what its callback returns. Your callback is `async`, so each call returns a promise immediately, and `forEach` throws those promises away. `migrate` reaches `console.log("all done")` right after *starting* all the inserts, and its own promise resolves then too, which is why the process can exit early.

If the inserts should run one at a time (usually right for migrations: predictable order, no connection pool exhaustion), use `for...of`, where `await` really pauses the loop:

{DIFF}

If they can run in parallel:

```js
await Promise.all(records.map(async (rec) => db.insert("users", transform(rec))));
```

A second benefit of either fix: errors now propagate. With `forEach(async ...)`, a failed insert becomes an unhandled promise rejection instead of an error your caller can catch. For large record sets, batch the parallel version (e.g. 100 at a time) so you don't open thousands of queries at once.
''',
),
dict(
lang="javascript", path="src/scores.js",
ask=r'''
Sorting numbers gives [1, 10, 100, 25, 3] instead of [1, 3, 10, 25, 100]. ???

{CODE}
''',
buggy=r'''
const scores = [25, 100, 3, 10, 1];
scores.sort();
console.log(scores);
''',
fixed=r'''
const scores = [25, 100, 3, 10, 1];
scores.sort((a, b) => a - b);
console.log(scores);
''',
answer=r'''
Without a comparator, `Array.prototype.sort` converts the elements to **strings** and sorts them in UTF-16 code unit order. As strings, `"100"` comes before `"25"` because `"1" < "2"`, just like in a dictionary.

Pass a numeric comparator:

{DIFF}

The comparator returns a negative number if `a` should come first, positive if `b` should, and 0 if they're equal; `a - b` does exactly that for numbers. Use `b - a` for descending order.

Two related things to know:

- `sort` works **in place** and also returns the same array. If you need to keep the original, use `scores.toSorted((a, b) => a - b)` (ES2023) or `[...scores].sort(...)`.
- `a - b` is fine for ordinary numbers; with `NaN` in the array the ordering becomes inconsistent, so filter those out first.
''',
),
dict(
lang="typescript", path="src/components/TodoList.tsx",
ask=r'''
React: clicking "Add" updates the array (I can see it in console.log) but the list doesn't re-render.

{CODE}
''',
buggy=r'''
import { useState } from "react";

export function TodoList() {
  const [todos, setTodos] = useState<string[]>([]);
  const [text, setText] = useState("");

  function add() {
    todos.push(text);
    setTodos(todos);
  }

  return (
    <div>
      <input value={text} onChange={(e) => setText(e.target.value)} />
      <button onClick={add}>Add</button>
      <ul>{todos.map((t, i) => <li key={i}>{t}</li>)}</ul>
    </div>
  );
}
''',
fixed=r'''
import { useState } from "react";

export function TodoList() {
  const [todos, setTodos] = useState<string[]>([]);
  const [text, setText] = useState("");

  function add() {
    setTodos((prev) => [...prev, text]);
  }

  return (
    <div>
      <input value={text} onChange={(e) => setText(e.target.value)} />
      <button onClick={add}>Add</button>
      <ul>{todos.map((t, i) => <li key={i}>{t}</li>)}</ul>
    </div>
  );
}
''',
answer=r'''
`todos.push(text)` mutates the existing array, and `setTodos(todos)` then passes **the same array reference** back. React compares the new state with the old using `Object.is`; same reference means "nothing changed", so it bails out and doesn't re-render. You'll notice the new item suddenly appears as soon as you type the next character in the input: that re-render (caused by `setText`) reads the already-mutated array. State that only shows up on the *next* unrelated render is the classic symptom of mutating state.

Create a new array instead of mutating:

{DIFF}

The updater form `setTodos(prev => ...)` also protects you when several updates happen in the same event: each one builds on the latest state instead of a possibly stale `todos` captured in the closure.

Unrelated but worth fixing next: `key={i}` uses the index as the key. If you later add delete or reorder, React will mix up which `<li>` is which. Give each todo an id (`crypto.randomUUID()`) and use that as the key.
''',
),
dict(
lang="rust", path="src/inventory.rs",
ask=r'''
Rust won't compile this: `cannot borrow *items as mutable because it is also borrowed as immutable`. I just want to add a "bundle" item for every item that's on sale.

{CODE}
''',
buggy=r'''
struct Item {
    name: String,
    price: u32,
    on_sale: bool,
}

fn add_bundles(items: &mut Vec<Item>) {
    for item in items.iter() {
        if item.on_sale {
            items.push(Item {
                name: format!("{} bundle", item.name),
                price: item.price * 2 - 100,
                on_sale: false,
            });
        }
    }
}
''',
fixed=r'''
struct Item {
    name: String,
    price: u32,
    on_sale: bool,
}

fn add_bundles(items: &mut Vec<Item>) {
    let bundles: Vec<Item> = items
        .iter()
        .filter(|item| item.on_sale)
        .map(|item| Item {
            name: format!("{} bundle", item.name),
            price: (item.price * 2).saturating_sub(100),
            on_sale: false,
        })
        .collect();
    items.extend(bundles);
}
''',
answer=r'''
The compiler is protecting you from a real bug. `items.iter()` holds a shared borrow of the vector for the whole loop, and `items.push` needs a mutable borrow. If `push` were allowed, it could reallocate the vector's buffer and the iterator would keep reading freed memory, exactly the iterator invalidation bug C++ lets you write.

Split it into two phases: collect the new items while only reading, then append them:

{DIFF}

I also changed `item.price * 2 - 100` to `saturating_sub`: with `u32`, an item priced under 50 would underflow, which panics in debug builds and wraps to a huge number in release builds. If a bundle price of 0 isn't acceptable either, filter those items out or return an error.

If allocating the temporary `Vec` bothers you, an index loop also compiles, because each iteration's borrow ends before `push`:

```rust
let n = items.len();
for i in 0..n {
    if items[i].on_sale {
        let bundle = Item { name: format!("{} bundle", items[i].name), price: (items[i].price * 2).saturating_sub(100), on_sale: false };
        items.push(bundle);
    }
}
```

Looping to the original `n` also means bundles added during the loop aren't visited again.
''',
),
dict(
lang="rust", path="src/names.rs",
ask=r'''
`error[E0106]: missing lifetime specifier` and then when I add 'a it says `returns a value referencing data owned by the current function`. I just want to return the formatted full name.

{CODE}
''',
buggy=r'''
fn full_name(first: &str, last: &str) -> &str {
    let name = format!("{} {}", first, last);
    &name
}
''',
fixed=r'''
fn full_name(first: &str, last: &str) -> String {
    format!("{} {}", first, last)
}
''',
answer=r'''
`format!` creates a new `String` owned by the function. When `full_name` returns, `name` is dropped and its memory is freed, so a `&str` pointing into it would dangle. No lifetime annotation can fix that; lifetimes describe how long existing data lives, they can't extend it. That's what the second error is telling you.

Return the owned `String`:

{DIFF}

Callers that need a `&str` can borrow it: `let n = full_name("Ada", "Lovelace"); greet(&n);`.

The first error (E0106) appeared because with two reference parameters, Rust can't infer whether the returned reference borrows from `first` or `last`. Returning a reference is appropriate only when you return (part of) an input, for example:

```rust
fn longer<'a>(a: &'a str, b: &'a str) -> &'a str {
    if a.len() >= b.len() { a } else { b }
}
```

Rule of thumb: if the function builds new data, return an owned type (`String`, `Vec<T>`); if it selects from its inputs, a reference with a lifetime can work.
''',
),
dict(
lang="go", path="cache/cache.go",
ask=r'''
Go panic: `assignment to entry in nil map`. Here's the type:

{CODE}
''',
buggy=r'''
package cache

type Cache struct {
	data map[string][]byte
}

func (c *Cache) Set(key string, val []byte) {
	c.data[key] = val
}

func (c *Cache) Get(key string) ([]byte, bool) {
	v, ok := c.data[key]
	return v, ok
}
''',
fixed=r'''
package cache

import "sync"

type Cache struct {
	mu   sync.RWMutex
	data map[string][]byte
}

func New() *Cache {
	return &Cache{data: make(map[string][]byte)}
}

func (c *Cache) Set(key string, val []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.data == nil {
		c.data = make(map[string][]byte)
	}
	c.data[key] = val
}

func (c *Cache) Get(key string) ([]byte, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	v, ok := c.data[key]
	return v, ok
}
''',
answer=r'''
The zero value of a map in Go is `nil`. Reading from a nil map is fine (you get the zero value and `ok == false`, which is why `Get` works), but **writing** to one panics. `var c Cache` or `&Cache{}` leaves `data` nil.

The fix is to allocate the map. I'd add a constructor and also make `Set` lazily initialise it, so the zero value `Cache{}` remains usable:

{DIFF}

I also added a `sync.RWMutex`, since a cache is almost always shared between goroutines and Go maps are not safe for concurrent writes. Without the lock, concurrent `Set` calls crash with `fatal error: concurrent map writes` (this one can't be recovered). If the cache is strictly single-goroutine, you can drop the mutex.

Note that `Get` returns the stored slice itself; a caller that modifies it changes the cached value. Return a copy (`append([]byte(nil), v...)`) if that matters.
''',
),
dict(
lang="go", path="fetch/all.go",
ask=r'''
This runs out of file descriptors ("too many open files") after a few thousand URLs. I do close the body.

{CODE}
''',
buggy=r'''
func fetchAll(urls []string) (int, error) {
	total := 0
	for _, u := range urls {
		resp, err := http.Get(u)
		if err != nil {
			return total, err
		}
		defer resp.Body.Close()
		n, err := io.Copy(io.Discard, resp.Body)
		if err != nil {
			return total, err
		}
		total += int(n)
	}
	return total, nil
}
''',
fixed=r'''
func fetchAll(urls []string) (int, error) {
	total := 0
	for _, u := range urls {
		n, err := fetchOne(u)
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}

func fetchOne(u string) (int, error) {
	resp, err := http.Get(u)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	return int(n), err
}
''',
answer=r'''
`defer` runs when the **function** returns, not at the end of the loop iteration. Every iteration registers another `resp.Body.Close()`, and none of them run until `fetchAll` finishes. With thousands of URLs you hold thousands of open connections at once.

Move the per-URL work into its own function so each `defer` fires at the end of that call:

{DIFF}

Closing each body promptly also lets Go's HTTP client reuse the connection for the next request to the same host (that only happens once the body has been read to EOF and closed, which `io.Copy(io.Discard, ...)` plus `Close` does).

Two more things for production use: `http.Get` uses `http.DefaultClient`, which has **no timeout**, so one hanging server blocks the loop forever. Create a client with `&http.Client{Timeout: 15 * time.Second}`. And check `resp.StatusCode` if a 404 page shouldn't count toward `total`.
''',
),
dict(
lang="sql", path="reports/inactive_users.sql",
ask=r'''
This query returns zero rows even though I know there are users with no referrer. What's wrong?

{CODE}
''',
buggy=r'''
SELECT id, email
FROM users
WHERE referrer_id = NULL;
''',
fixed=r'''
SELECT id, email
FROM users
WHERE referrer_id IS NULL;
''',
answer=r'''
In SQL, `NULL` means "unknown", and any comparison with it using `=`, `<>`, `<` and so on yields `NULL` (unknown), not `TRUE`. `WHERE` keeps only rows where the condition is `TRUE`, so `referrer_id = NULL` matches nothing, even for rows where `referrer_id` is `NULL`.

Use `IS NULL`:

{DIFF}

Related traps with the same cause:

- `WHERE referrer_id <> 5` also skips rows where `referrer_id` is `NULL`. If you want them, write `WHERE referrer_id IS DISTINCT FROM 5` (PostgreSQL, SQLite 3.39+ as `IS NOT`) or `referrer_id <> 5 OR referrer_id IS NULL`.
- `WHERE id NOT IN (SELECT referrer_id FROM users)` returns **no rows at all** if the subquery contains a single `NULL`, since `x NOT IN (1, NULL)` is unknown for every `x` except 1. Prefer `NOT EXISTS`.
- `COUNT(referrer_id)` counts only non-NULL values, while `COUNT(*)` counts rows.
''',
),
dict(
lang="sql", path="reports/orders_by_customer.sql",
ask=r'''
I want ALL customers with their count of 2024 orders (0 if none), but customers without 2024 orders disappear from the result. I used a LEFT JOIN!

{CODE}
''',
buggy=r'''
SELECT c.id, c.name, COUNT(o.id) AS orders_2024
FROM customers c
LEFT JOIN orders o ON o.customer_id = c.id
WHERE o.created_at >= '2024-01-01'
  AND o.created_at <  '2025-01-01'
GROUP BY c.id, c.name
ORDER BY orders_2024 DESC;
''',
fixed=r'''
SELECT c.id, c.name, COUNT(o.id) AS orders_2024
FROM customers c
LEFT JOIN orders o
       ON o.customer_id = c.id
      AND o.created_at >= '2024-01-01'
      AND o.created_at <  '2025-01-01'
GROUP BY c.id, c.name
ORDER BY orders_2024 DESC;
''',
answer=r'''
The `WHERE` clause turns your `LEFT JOIN` back into an inner join. For a customer with no matching orders, the `LEFT JOIN` produces one row with all `o.*` columns `NULL`. Then `WHERE o.created_at >= '2024-01-01'` evaluates to unknown for that row and removes it, so only customers with 2024 orders survive.

Move the date condition into the `ON` clause, so it restricts *which orders join* rather than *which rows are kept*:

{DIFF}

Now customers with no 2024 orders still get their `NULL`-extended row, and `COUNT(o.id)` counts 0 for them because `COUNT(column)` ignores `NULL`s. (Don't use `COUNT(*)` here; it would count that placeholder row and report 1.)

Rule of thumb: with an outer join, conditions on the *optional* table go in `ON`; conditions on the *preserved* table (here `customers`, e.g. `c.country = 'DE'`) go in `WHERE`.
''',
),
dict(
lang="bash", path="bin/compress-reports.sh",
ask=r'''
My script breaks on files with spaces: `gzip: Q3: No such file or directory` for "Q3 report.csv".

{CODE}
''',
buggy=r'''
#!/bin/bash
dir=$1
for f in $(ls $dir/*.csv); do
    gzip $f
    echo "compressed $f"
done
''',
fixed=r'''
#!/bin/bash
set -euo pipefail
dir=${1:?usage: $0 DIR}
shopt -s nullglob
for f in "$dir"/*.csv; do
    gzip -- "$f"
    echo "compressed $f"
done
''',
answer=r'''
Unquoted expansions in bash go through **word splitting**: the result is split on spaces, tabs and newlines. `$(ls ...)` produces `... Q3 report.csv ...`, which the `for` loop sees as two words, `Q3` and `report.csv`; the same happens again at `gzip $f`.

Fix: let the glob produce the list (globs never split file names) and quote every expansion:

{DIFF}

What each change does:

- `for f in "$dir"/*.csv`: the glob expands to one word per file, spaces included. Quoting `"$dir"` protects the directory part too.
- `gzip -- "$f"`: quotes keep the name intact; `--` stops a file named `-rf.csv` from being read as options.
- `shopt -s nullglob`: without it, if there are no CSV files the loop runs once with the literal string `dir/*.csv`.
- `${1:?usage...}` exits with a message if no directory was passed, instead of globbing `/*.csv` at the filesystem root.

[ShellCheck](https://www.shellcheck.net) flags all of these (SC2045 for iterating over `ls`, SC2086 for unquoted variables); running it on scripts is a cheap habit.
''',
),
dict(
lang="python", path="auth/check.py",
ask=r'''
This worked in my tests but fails in production for some users: role "admin" is rejected. Python 3.11.

{CODE}
''',
buggy=r'''
def is_admin(user):
    role = user.get("role", "").strip().lower()
    return role is "admin"
''',
fixed=r'''
def is_admin(user):
    role = user.get("role", "").strip().lower()
    return role == "admin"
''',
answer=r'''
`is` checks **identity** (are these the same object?), not equality. It happened to work in tests because CPython *interns* some strings: a literal `"admin"` in your test and the literal in this function can be the same object. But `.strip().lower()` on data from a database or an HTTP request builds a new string object at runtime, so `role is "admin"` is `False` even when the text is identical.

Use `==`:

{DIFF}

Python 3.8+ even warns about this: `SyntaxWarning: "is" with a literal. Did you mean "=="?`. It's worth running tests with `-W error::SyntaxWarning` to turn such warnings into failures.

The same trap exists with integers: `x is 256` may be `True` and `x is 257` may be `False`, because CPython caches small ints from -5 to 256. Reserve `is` for singletons such as `None`, `True`, `False` and sentinel objects.
''',
),
dict(
lang="python", path="scheduler/window.py",
ask=r'''
`TypeError: can't compare offset-naive and offset-aware datetimes`. The `starts_at` values come from our Postgres timestamptz column.

{CODE}
''',
buggy=r'''
from datetime import datetime, timedelta


def is_upcoming(event, horizon_hours=24):
    now = datetime.now()
    return now <= event.starts_at <= now + timedelta(hours=horizon_hours)
''',
fixed=r'''
from datetime import datetime, timedelta, timezone


def is_upcoming(event, horizon_hours=24):
    now = datetime.now(timezone.utc)
    return now <= event.starts_at <= now + timedelta(hours=horizon_hours)
''',
answer=r'''
A `timestamptz` column comes back from the driver (psycopg, asyncpg) as an **aware** `datetime`, one with `tzinfo` set. `datetime.now()` returns a **naive** datetime: local wall-clock time with no time zone attached. Python refuses to compare the two because it can't know which instant the naive one means.

Make `now` aware, in UTC:

{DIFF}

Aware datetimes compare by absolute instant, so it doesn't matter that Postgres might hand you values in a different offset than UTC.

General advice for this codebase: keep all datetimes aware and in UTC internally, and convert to the user's zone only for display (`dt.astimezone(ZoneInfo("Europe/Berlin"))`). Avoid `datetime.utcnow()`: it returns a *naive* value that merely happens to be UTC, which reintroduces this exact error, and it's deprecated since Python 3.12.
''',
),
]
