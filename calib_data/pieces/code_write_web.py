"""Code category: hand-written "write me X" requests and answers (JavaScript / TypeScript)."""

ENTRIES = [
dict(
ask=r'''
Write a typed `debounce` in TypeScript. The returned function should keep the parameter types of the original, and I want a `.cancel()` method.
''',
answer=r'''
```ts
export interface Debounced<A extends unknown[]> {
  (...args: A): void;
  cancel(): void;
  flush(): void;
}

export function debounce<A extends unknown[]>(
  fn: (...args: A) => void,
  waitMs: number,
): Debounced<A> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  let pendingArgs: A | undefined;

  const debounced = ((...args: A) => {
    pendingArgs = args;
    if (timer !== undefined) clearTimeout(timer);
    timer = setTimeout(() => {
      timer = undefined;
      const a = pendingArgs!;
      pendingArgs = undefined;
      fn(...a);
    }, waitMs);
  }) as Debounced<A>;

  debounced.cancel = () => {
    if (timer !== undefined) clearTimeout(timer);
    timer = undefined;
    pendingArgs = undefined;
  };

  debounced.flush = () => {
    if (timer === undefined) return;
    clearTimeout(timer);
    timer = undefined;
    const a = pendingArgs!;
    pendingArgs = undefined;
    fn(...a);
  };

  return debounced;
}
```

Usage:

```ts
const save = debounce((id: string, body: string) => api.save(id, body), 500);
save("doc-1", "hello");        // OK
save("doc-1", 42);             // compile error: number is not assignable to string
window.addEventListener("beforeunload", () => save.flush());
```

- `A extends unknown[]` captures the parameter tuple, so the debounced function has exactly the original signature.
- `ReturnType<typeof setTimeout>` works in both the browser (`number`) and Node (`Timeout`), so you don't need `NodeJS.Timeout` or DOM-specific types.
- The wrapped function's return value is dropped on purpose: a debounced call can't return a result synchronously. If you need the result, return a `Promise` that resolves when the delayed call runs.
''',
),
dict(
ask=r'''
React + TypeScript: write a `useFetch<T>(url)` hook that returns {data, error, loading}, aborts the request when the URL changes or the component unmounts, and doesn't set state after unmount.
''',
answer=r'''
```tsx
import { useEffect, useState } from "react";

type FetchState<T> =
  | { status: "loading"; data?: undefined; error?: undefined }
  | { status: "success"; data: T; error?: undefined }
  | { status: "error"; data?: undefined; error: Error };

export function useFetch<T>(url: string | null): FetchState<T> {
  const [state, setState] = useState<FetchState<T>>({ status: "loading" });

  useEffect(() => {
    if (url === null) return;               // allow "don't fetch yet"
    const controller = new AbortController();
    setState({ status: "loading" });

    fetch(url, { signal: controller.signal })
      .then(async (res) => {
        if (!res.ok) throw new Error(`HTTP ${res.status} for ${url}`);
        return (await res.json()) as T;
      })
      .then((data) => setState({ status: "success", data }))
      .catch((err: unknown) => {
        if (controller.signal.aborted) return;   // we cancelled it; not an error
        setState({ status: "error", error: err instanceof Error ? err : new Error(String(err)) });
      });

    return () => controller.abort();
  }, [url]);

  return state;
}
```

Using it:

```tsx
function UserCard({ id }: { id: string }) {
  const user = useFetch<{ name: string; email: string }>(`/api/users/${id}`);
  if (user.status === "loading") return <Spinner />;
  if (user.status === "error") return <p role="alert">{user.error.message}</p>;
  return <p>{user.data.name} &lt;{user.data.email}&gt;</p>;
}
```

How the requirements are met:

- **Abort on URL change / unmount**: the effect's cleanup calls `controller.abort()`. React runs the cleanup before re-running the effect with a new `url`, and on unmount.
- **No state updates after unmount**: an aborted `fetch` rejects with an `AbortError`; the `catch` checks `signal.aborted` and returns without calling `setState`. The success path can't run after abort either, because the promise already rejected.
- **Race conditions**: if the URL changes quickly from A to B, request A is aborted, so a slow response for A can never overwrite B's data.
- The discriminated union on `status` means TypeScript knows `data` is defined only in the success branch.

For anything beyond a small app (caching, retries, deduplicating identical requests) a library like TanStack Query is usually worth it, but this hook covers the basics correctly.
''',
),
dict(
ask=r'''
Node.js: recursively compute the total size of a directory, skipping symlinks, using fs/promises. Print it human-readable.
''',
answer=r'''
```js
#!/usr/bin/env node
// du.mjs: total size of a directory tree (symlinks are not followed)
import { lstat, readdir } from "node:fs/promises";
import path from "node:path";

async function dirSize(dir) {
  let total = 0;
  const entries = await readdir(dir, { withFileTypes: true });
  await Promise.all(
    entries.map(async (entry) => {
      const full = path.join(dir, entry.name);
      if (entry.isSymbolicLink()) return;
      if (entry.isDirectory()) {
        total += await dirSize(full);
      } else if (entry.isFile()) {
        total += (await lstat(full)).size;
      }
    }),
  );
  return total;
}

function human(bytes) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (bytes >= 1024 && i < units.length - 1) {
    bytes /= 1024;
    i++;
  }
  return `${bytes.toFixed(i === 0 ? 0 : 1)} ${units[i]}`;
}

const target = process.argv[2] ?? ".";
dirSize(target)
  .then((n) => console.log(`${human(n)}\t${target}`))
  .catch((err) => {
    console.error(`du: ${err.message}`);
    process.exitCode = 1;
  });
```

`readdir` with `withFileTypes: true` returns `Dirent` objects, so you learn whether an entry is a file, directory or symlink without an extra `stat` call per entry. `lstat` (not `stat`) is used for sizes so a symlink is never resolved.

One caveat: `Promise.all` over every entry of a huge tree can open many directories at once and hit `EMFILE` (too many open files). If that happens, process subdirectories sequentially or through a small concurrency limiter.
''',
),
dict(
ask=r'''
Express middleware that attaches a request id (reuse X-Request-Id if the client sent one), and logs method, path, status and duration when the response finishes.
''',
answer=r'''
```js
import { randomUUID } from "node:crypto";

const SAFE_ID = /^[A-Za-z0-9._-]{1,64}$/;

export function requestLogger(logger = console) {
  return function (req, res, next) {
    const incoming = req.get("X-Request-Id");
    const id = incoming && SAFE_ID.test(incoming) ? incoming : randomUUID();
    req.id = id;
    res.setHeader("X-Request-Id", id);

    const start = process.hrtime.bigint();
    res.on("finish", () => {
      const ms = Number(process.hrtime.bigint() - start) / 1e6;
      logger.info(
        JSON.stringify({
          id,
          method: req.method,
          path: req.originalUrl,
          status: res.statusCode,
          ms: Math.round(ms * 10) / 10,
        }),
      );
    });
    next();
  };
}

// app.js
// import express from "express";
// const app = express();
// app.use(requestLogger());
// app.get("/health", (req, res) => res.json({ ok: true, requestId: req.id }));
// app.listen(3000);
```

- The incoming id is **validated** before being reused. Otherwise a client could inject newlines or huge strings into your logs and response headers.
- Logging on `finish` gives the real status code and the full duration, including time spent by later middleware and the handler.
- `finish` does not fire if the client disconnects before the response is sent. If you want those logged too, also listen for `close` and check `res.writableFinished`.
- `process.hrtime.bigint()` is monotonic, unlike `Date.now()`.
''',
),
dict(
ask=r'''
In TypeScript, I'd like a Result type (Ok/Err) and a helper to wrap a throwing function. Also show how to make a switch exhaustive so the compiler complains when I add a new variant.
''',
answer=r'''
```ts
export type Result<T, E = Error> =
  | { ok: true; value: T }
  | { ok: false; error: E };

export const Ok = <T>(value: T): Result<T, never> => ({ ok: true, value });
export const Err = <E>(error: E): Result<never, E> => ({ ok: false, error });

export function attempt<T>(fn: () => T): Result<T, Error> {
  try {
    return Ok(fn());
  } catch (e) {
    return Err(e instanceof Error ? e : new Error(String(e)));
  }
}

// --- usage
const parsed = attempt(() => JSON.parse('{"port": 8080}') as { port: number });
if (parsed.ok) {
  console.log(parsed.value.port);     // narrowed: value exists here
} else {
  console.error(parsed.error.message);
}
```

Exhaustive switches use the `never` type: if every case is handled, the variable has type `never` in the `default` branch; add a variant and it no longer does, so the assignment fails to compile.

```ts
type Shape =
  | { kind: "circle"; r: number }
  | { kind: "rect"; w: number; h: number }
  | { kind: "triangle"; base: number; height: number };

function assertNever(x: never): never {
  throw new Error(`unhandled variant: ${JSON.stringify(x)}`);
}

function area(s: Shape): number {
  switch (s.kind) {
    case "circle":
      return Math.PI * s.r ** 2;
    case "rect":
      return s.w * s.h;
    case "triangle":
      return (s.base * s.height) / 2;
    default:
      return assertNever(s);   // error here if a new kind is added and not handled
  }
}
```

If you later add `{ kind: "ellipse"; a: number; b: number }` to `Shape`, the compiler reports: *Argument of type '{ kind: "ellipse"; ... }' is not assignable to parameter of type 'never'*. The runtime `throw` is a safety net for data that bypassed the type system, such as JSON from an API.
''',
),
dict(
ask=r'''
I need a promise pool in plain JavaScript: run an array of async task functions with at most N running at a time, and return results in the original order.
''',
answer=r'''
```js
/**
 * Run async tasks with bounded concurrency.
 * @template T
 * @param {Array<() => Promise<T>>} tasks  functions that start the work when called
 * @param {number} limit                   maximum number of tasks in flight
 * @returns {Promise<T[]>}                 results in the same order as `tasks`
 */
export async function promisePool(tasks, limit) {
  if (!Number.isInteger(limit) || limit < 1) throw new RangeError("limit must be a positive integer");
  const results = new Array(tasks.length);
  let next = 0;

  async function worker() {
    while (next < tasks.length) {
      const i = next++;            // safe: JS is single-threaded between awaits
      results[i] = await tasks[i]();
    }
  }

  const workers = Array.from({ length: Math.min(limit, tasks.length) }, worker);
  await Promise.all(workers);
  return results;
}

// demo
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const tasks = [300, 100, 200, 50].map((ms, i) => async () => {
  await sleep(ms);
  return `task ${i} (${ms} ms)`;
});
promisePool(tasks, 2).then(console.log);
// [ 'task 0 (300 ms)', 'task 1 (100 ms)', 'task 2 (200 ms)', 'task 3 (50 ms)' ]
```

The tasks must be **functions** returning promises, not promises. A promise has already started by the time you hold it, so an array of promises can't be throttled.

Behaviour on failure: like `Promise.all`, the first rejection rejects the pool, but tasks already running keep running. If you want every outcome, wrap each task: `results[i] = await tasks[i]().then(v => ({ ok: true, v }), e => ({ ok: false, e }))`.
''',
),
dict(
ask=r'''
Write a deepEqual(a, b) in JS that handles nested objects, arrays, Dates, Maps, Sets and NaN. No libraries.
''',
think=r'''
Cases: Object.is for primitives handles NaN and also distinguishes +0/-0 — maybe a user wants 0 === -0 to be equal; I'll use Object.is but mention it. Types must match: compare Object.prototype.toString tags or constructors. Arrays: length and elementwise. Dates: getTime compare (Object.is to handle invalid dates NaN). Map: size, then for each key, b.has(key) and deepEqual values — keys compared by identity (SameValueZero), fine. Set: size, and every element of a has a match in b; for primitive elements has() works; for object elements need O(n^2) deep search. Plain objects: own keys lengths equal and each key in b and deepEqual. Cycles: track with a WeakMap of visited pairs to avoid infinite recursion. Keep it reasonably short.
''',
answer=r'''
```js
export function deepEqual(a, b, seen = new Map()) {
  if (Object.is(a, b)) return true;                     // primitives, NaN, same reference
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  if (Object.getPrototypeOf(a) !== Object.getPrototypeOf(b)) return false;

  // cycle guard: if we're already comparing this pair further up, assume equal
  if (seen.get(a) === b) return true;
  seen.set(a, b);

  if (a instanceof Date) return Object.is(a.getTime(), b.getTime());
  if (a instanceof RegExp) return a.source === b.source && a.flags === b.flags;

  if (Array.isArray(a)) {
    if (a.length !== b.length) return false;
    return a.every((x, i) => deepEqual(x, b[i], seen));
  }

  if (a instanceof Map) {
    if (a.size !== b.size) return false;
    for (const [k, v] of a) {
      if (!b.has(k) || !deepEqual(v, b.get(k), seen)) return false;
    }
    return true;
  }

  if (a instanceof Set) {
    if (a.size !== b.size) return false;
    const rest = [...b];
    outer: for (const x of a) {
      if (b.has(x)) continue;                              // fast path for primitives
      for (let i = 0; i < rest.length; i++) {
        if (deepEqual(x, rest[i], seen)) { rest.splice(i, 1); continue outer; }
      }
      return false;
    }
    return true;
  }

  const ka = Object.keys(a), kb = Object.keys(b);
  if (ka.length !== kb.length) return false;
  return ka.every((k) => Object.prototype.hasOwnProperty.call(b, k) && deepEqual(a[k], b[k], seen));
}

console.log(deepEqual({ x: [1, { y: NaN }] }, { x: [1, { y: NaN }] }));        // true
console.log(deepEqual(new Map([["k", new Set([1, 2])]]), new Map([["k", new Set([2, 1])]]))); // true
console.log(deepEqual({ d: new Date(0) }, { d: new Date(1) }));                  // false
console.log(deepEqual([1, 2], { 0: 1, 1: 2, length: 2 }));                       // false (different prototypes)
```

Decisions you may want to change:

- `Object.is` treats `0` and `-0` as **different**. If you want them equal, add `if (a === b) return true;` before the `Object.is` line.
- **Map keys are compared by identity**, as `Map` itself does; two different objects with the same contents are different keys.
- Set elements that are objects are matched with a quadratic search; fine for small sets, slow for thousands of object elements.
- The cycle guard (`seen`) prevents infinite recursion for self-referencing structures.
''',
),
dict(
ask=r'''
Small TypeScript utility types question: how do I make a type where only some keys of an interface become optional? e.g. `PartialBy<User, "id" | "createdAt">`.
''',
answer=r'''
Combine `Omit`, `Pick` and `Partial`:

```ts
type PartialBy<T, K extends keyof T> = Omit<T, K> & Partial<Pick<T, K>>;

interface User {
  id: string;
  name: string;
  email: string;
  createdAt: Date;
}

type NewUser = PartialBy<User, "id" | "createdAt">;

const u: NewUser = { name: "Ana", email: "ana@example.com" };   // OK
const v: NewUser = { name: "Ana" };                              // error: 'email' is missing
```

The intersection can look messy in editor tooltips (`Omit<User, ...> & Partial<...>`). To flatten it into a single object type, add a `Simplify` helper:

```ts
type Simplify<T> = { [K in keyof T]: T[K] } & {};
type PartialBy<T, K extends keyof T> = Simplify<Omit<T, K> & Partial<Pick<T, K>>>;
```

The opposite helper, making some keys required, follows the same pattern: `type RequiredBy<T, K extends keyof T> = Simplify<Omit<T, K> & Required<Pick<T, K>>>;`.
''',
),
]
