"""Code category: hand-written SQL and shell requests and answers."""

ENTRIES = [
dict(
ask=r'''
Postgres. Tables: products(id, name, category), order_items(order_id, product_id, quantity, unit_price). I want the top 3 products by revenue in each category, ties included.
''',
answer=r'''
Aggregate revenue per product first, then rank within each category with a window function:

```sql
WITH revenue AS (
    SELECT p.id,
           p.name,
           p.category,
           SUM(oi.quantity * oi.unit_price) AS revenue
    FROM products p
    JOIN order_items oi ON oi.product_id = p.id
    GROUP BY p.id, p.name, p.category
),
ranked AS (
    SELECT *,
           RANK() OVER (PARTITION BY category ORDER BY revenue DESC) AS rnk
    FROM revenue
)
SELECT category, rnk, name, revenue
FROM ranked
WHERE rnk <= 3
ORDER BY category, rnk, name;
```

Which ranking function to use depends on what "ties included" should mean:

| function | revenues 500, 400, 400, 300 | rows kept with `<= 3` |
|---|---|---|
| `ROW_NUMBER()` | 1, 2, 3, 4 | exactly 3, tie broken arbitrarily |
| `RANK()` | 1, 2, 2, 4 | 3 rows (the 300 product is rank 4) |
| `DENSE_RANK()` | 1, 2, 2, 3 | 4 rows (three distinct revenue levels) |

`RANK()` matches the usual meaning of "top 3 with ties": a product tied for third place is included, and it can yield more than three rows per category.

You can't filter on a window function in `WHERE` at the same query level, which is why the ranking is in a CTE. Products with no sales are excluded by the inner `JOIN`; use `LEFT JOIN` and `COALESCE(SUM(...), 0)` if zero-revenue products should be able to appear.
''',
),
dict(
ask=r'''
SQL: find customers who placed an order in January 2024 but none in February 2024. Table orders(id, customer_id, created_at timestamp).
''',
answer=r'''
Use `NOT EXISTS` for the "none in February" part:

```sql
SELECT DISTINCT o.customer_id
FROM orders o
WHERE o.created_at >= TIMESTAMP '2024-01-01'
  AND o.created_at <  TIMESTAMP '2024-02-01'
  AND NOT EXISTS (
        SELECT 1
        FROM orders f
        WHERE f.customer_id = o.customer_id
          AND f.created_at >= TIMESTAMP '2024-02-01'
          AND f.created_at <  TIMESTAMP '2024-03-01'
      );
```

Two habits this query follows:

1. **Half-open date ranges** (`>= start AND < next_start`) instead of `BETWEEN '2024-01-01' AND '2024-01-31'`. With a timestamp column, `BETWEEN ... '2024-01-31'` stops at midnight on the 31st and silently drops almost a full day of orders. Half-open ranges also work for February without worrying about leap years.
2. **`NOT EXISTS` rather than `NOT IN`.** `customer_id NOT IN (SELECT customer_id ...)` returns no rows at all if the subquery produces a single `NULL`, a classic surprise. `NOT EXISTS` doesn't have that problem and most planners turn it into an anti-join.

An equivalent formulation with set operations, which some people find easier to read:

```sql
SELECT customer_id FROM orders
WHERE created_at >= '2024-01-01' AND created_at < '2024-02-01'
EXCEPT
SELECT customer_id FROM orders
WHERE created_at >= '2024-02-01' AND created_at < '2024-03-01';
```

`EXCEPT` removes duplicates, so no `DISTINCT` is needed there. An index on `(customer_id, created_at)` helps both versions.
''',
),
dict(
ask=r'''
I have daily_sales(day date, amount numeric). Give me a running total and a 7-day moving average in one query.
''',
answer=r'''
```sql
SELECT day,
       amount,
       SUM(amount) OVER (ORDER BY day
                         ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS running_total,
       ROUND(AVG(amount) OVER (ORDER BY day
                               ROWS BETWEEN 6 PRECEDING AND CURRENT ROW), 2) AS avg_7d
FROM daily_sales
ORDER BY day;
```

Things to check against your data:

- **Gaps.** `ROWS BETWEEN 6 PRECEDING` means "the previous 6 *rows*". If some days have no row, the window stretches over more than 7 calendar days. In PostgreSQL 11+ you can use a range frame instead:
  `AVG(amount) OVER (ORDER BY day RANGE BETWEEN INTERVAL '6 days' PRECEDING AND CURRENT ROW)`,
  or fill the gaps first by joining against `generate_series(min_day, max_day, interval '1 day')`.
- **The first six days** average over fewer than 7 values. If you'd rather show `NULL` there, wrap it: `CASE WHEN COUNT(*) OVER w = 7 THEN AVG(amount) OVER w END` with a named window `WINDOW w AS (ORDER BY day ROWS BETWEEN 6 PRECEDING AND CURRENT ROW)`.
- The explicit `ROWS ... CURRENT ROW` on the running total matters if `day` could repeat: the default frame is `RANGE UNBOUNDED PRECEDING`, which includes *all* rows sharing the current `day` value, so duplicates would get the same, already-summed total.
''',
),
dict(
ask=r'''
Design a schema for blog posts with tags (many-to-many) in PostgreSQL. I need to query "posts with tag X, newest first" and "tag counts" quickly.
''',
answer=r'''
```sql
CREATE TABLE posts (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    title       text        NOT NULL,
    body        text        NOT NULL,
    published_at timestamptz,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE tags (
    id   int GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name text NOT NULL,
    CONSTRAINT tags_name_lower CHECK (name = lower(name)),
    CONSTRAINT tags_name_key UNIQUE (name)
);

CREATE TABLE post_tags (
    post_id bigint NOT NULL REFERENCES posts(id) ON DELETE CASCADE,
    tag_id  int    NOT NULL REFERENCES tags(id)  ON DELETE CASCADE,
    PRIMARY KEY (post_id, tag_id)
);

-- the PK covers lookups by post; this covers lookups by tag
CREATE INDEX post_tags_tag_post ON post_tags (tag_id, post_id);
CREATE INDEX posts_published ON posts (published_at DESC) WHERE published_at IS NOT NULL;
```

Queries:

```sql
-- posts tagged 'postgres', newest first
SELECT p.id, p.title, p.published_at
FROM tags t
JOIN post_tags pt ON pt.tag_id = t.id
JOIN posts p      ON p.id = pt.post_id
WHERE t.name = 'postgres' AND p.published_at IS NOT NULL
ORDER BY p.published_at DESC
LIMIT 20;

-- tag counts (published posts only)
SELECT t.name, COUNT(*) AS posts
FROM tags t
JOIN post_tags pt ON pt.tag_id = t.id
JOIN posts p      ON p.id = pt.post_id AND p.published_at IS NOT NULL
GROUP BY t.name
ORDER BY posts DESC, t.name;
```

Notes on the choices:

- The composite primary key on `post_tags` prevents tagging the same post twice and indexes `(post_id, tag_id)`. The extra `(tag_id, post_id)` index serves the "by tag" direction.
- Tag names are forced to lowercase with a `CHECK`, so "Postgres" and "postgres" can't become two tags. Normalise in the application before inserting.
- `ON DELETE CASCADE` removes the link rows when a post or tag is deleted.
- If tag counts are read far more often than posts change, keep a `post_count` column on `tags` updated by the application or a trigger, or use a materialized view refreshed periodically. Don't bother until the simple `COUNT(*)` is measurably slow.
''',
),
dict(
ask=r'''
This query takes 4 seconds on a 20M-row table. Why, and what index should I add?

```sql
SELECT * FROM events
WHERE account_id = 4812 AND created_at > now() - interval '7 days'
ORDER BY created_at DESC
LIMIT 50;
```

EXPLAIN shows `Seq Scan on events` with `Filter: ((account_id = 4812) AND (created_at > ...))` and a `Sort` node.
''',
think=r'''
Seq scan over 20M rows, filter, then sort the matches. Best index: composite (account_id, created_at). Equality column first, then range/order column. With that, Postgres does an index scan backward on created_at within account_id=4812, stops after 50 rows — no sort needed. Mention checking existing indexes: maybe there's an index only on created_at (then it would scan all accounts for 7 days) or account_id only. Also CREATE INDEX CONCURRENTLY to avoid locking writes on a big table. Mention ANALYZE and SELECT * cost negligible for 50 rows. Mention verifying with EXPLAIN (ANALYZE, BUFFERS).
''',
answer=r'''
The plan says PostgreSQL has no index that matches this query, so it reads all 20M rows, keeps the ones for account 4812 in the last week, sorts them, and returns 50. Almost all of the 4 seconds is the sequential scan.

Add a composite index with the **equality column first and the range/sort column second**:

```sql
CREATE INDEX CONCURRENTLY events_account_created
    ON events (account_id, created_at DESC);
```

With it, the planner can jump straight to `account_id = 4812`, walk that account's entries already ordered by `created_at` descending, and stop after 50 rows. The `Sort` node disappears and the query typically drops to a few milliseconds. (The `DESC` in the index is optional; PostgreSQL can scan a B-tree backwards, but it documents intent.)

Why not other options:

| index | what happens |
|---|---|
| `(created_at)` | scans every account's events from the last 7 days, filters out the other accounts; good only if the whole table gets few events per week |
| `(account_id)` | finds all of the account's events (maybe years of them), then sorts them |
| `(created_at, account_id)` | range column first, so the `account_id` part can't narrow the scan well |
| `(account_id, created_at)` | exact match for "one account, ordered by time, limited" |

Practical points:

- `CONCURRENTLY` builds the index without blocking inserts into `events`. It takes longer and can't run inside a transaction block; if it fails it leaves an `INVALID` index you must drop and retry.
- Afterwards confirm with `EXPLAIN (ANALYZE, BUFFERS)`. You should see `Index Scan using events_account_created` and a `Limit` with no `Sort`.
- If you already have an index on `account_id` alone, the new one makes it redundant (a composite index also serves queries on its leading column), so you can drop the old one and save write overhead.
''',
),
dict(
ask=r'''
Recursive CTE question: employees(id, name, manager_id). Show everyone under manager 7 (any depth) with their depth and the path of names from 7 down.
''',
answer=r'''
```sql
WITH RECURSIVE reports AS (
    -- anchor: the manager themselves, depth 0
    SELECT id, name, manager_id, 0 AS depth, name::text AS path
    FROM employees
    WHERE id = 7

    UNION ALL

    -- recursive step: direct reports of anyone already found
    SELECT e.id, e.name, e.manager_id, r.depth + 1, r.path || ' > ' || e.name
    FROM employees e
    JOIN reports r ON e.manager_id = r.id
    WHERE r.depth < 20                -- safety net against bad data with cycles
)
SELECT id, name, depth, path
FROM reports
WHERE depth > 0
ORDER BY path;
```

Example output:

| id | name | depth | path |
|---|---|---|---|
| 12 | Bea | 1 | Amal > Bea |
| 31 | Chidi | 2 | Amal > Bea > Chidi |
| 33 | Dana | 2 | Amal > Bea > Dana |
| 15 | Emre | 1 | Amal > Emre |

How it runs: the anchor row seeds the working set; each iteration joins the previous iteration's rows to their direct reports, until an iteration adds nothing. `depth > 0` in the final select removes manager 7 themselves.

The `depth < 20` guard matters because a data error like A manages B and B manages A would otherwise recurse forever. PostgreSQL 14+ also has a built-in `CYCLE id SET is_cycle USING visited` clause for the same purpose. Ordering by `path` gives a readable tree layout, though alphabetical rather than by hire date or ID.
''',
),
dict(
ask=r'''
bash script: back up /srv/app/data into /backups as a timestamped .tar.gz and keep only the newest 7 backups. It'll run from cron.
''',
answer=r'''
```bash
#!/usr/bin/env bash
set -euo pipefail

SRC=/srv/app/data
DEST=/backups
KEEP=7
STAMP=$(date +%Y%m%d-%H%M%S)
ARCHIVE="$DEST/data-$STAMP.tar.gz"

mkdir -p "$DEST"

# write to a temp name first so a half-written archive is never mistaken for a backup
tmp="$ARCHIVE.partial"
trap 'rm -f "$tmp"' EXIT
tar -C "$(dirname "$SRC")" -czf "$tmp" "$(basename "$SRC")"
mv "$tmp" "$ARCHIVE"
trap - EXIT

# rotation: list newest first, delete everything after the first $KEEP
ls -1t "$DEST"/data-*.tar.gz | tail -n +$((KEEP + 1)) | while IFS= read -r old; do
    rm -f -- "$old"
done

echo "backup written: $ARCHIVE ($(du -h "$ARCHIVE" | cut -f1))"
```

Cron entry (daily at 02:30, with output kept for debugging):

```cron
30 2 * * * /usr/local/bin/backup-data.sh >> /var/log/backup-data.log 2>&1
```

Details that matter when nobody is watching:

- `set -euo pipefail`: stop on the first failing command, on unset variables, and when any part of a pipeline fails, so a failed `tar` doesn't get followed by rotation that deletes good backups.
- `tar -C parent basename` stores paths as `data/...` instead of `srv/app/data/...`, which makes restoring somewhere else easier.
- The `.partial` + `mv` pattern: `mv` within one filesystem is atomic, so the rotation step never sees an incomplete archive.
- Parsing `ls` is normally discouraged, but it's safe here because the file names are generated by the script itself (no spaces or newlines). `tail -n +8` prints from the 8th line on, i.e. everything older than the 7 newest.
- cron runs with a minimal `PATH`; use absolute paths or set `PATH=` at the top of the crontab if your tools live elsewhere.

Test a restore at least once: `tar -tzf /backups/data-*.tar.gz | head` to list, and extract into a scratch directory to confirm it's usable.
''',
),
dict(
ask=r'''
what's the safe way to delete *.log files older than 14 days under /var/log/myapp, including subdirectories? file names might contain spaces
''',
answer=r'''
`find` can do it by itself, no `xargs` needed:

```bash
# 1. look first
find /var/log/myapp -type f -name '*.log' -mtime +14 -print

# 2. then delete
find /var/log/myapp -type f -name '*.log' -mtime +14 -delete
```

Why this is safe with odd file names: `find` passes each path directly to the delete operation. Nothing goes through word splitting in the shell, so spaces, quotes and even newlines in names are fine.

Explanation of the pieces:

- `-type f` only matches regular files, never directories or symlinks.
- `-name '*.log'` is **quoted** so the shell doesn't expand `*.log` in your current directory before `find` sees it.
- `-mtime +14` means modified more than 14 full 24-hour periods ago. Because of how the rounding works, `+14` actually selects files at least 15 days old. Use `-mmin +$((14*24*60))` if you need exact minutes.
- Put `-delete` **last**. `find` evaluates left to right, and `find /var/log/myapp -delete -name '*.log'` would delete everything before checking the name.

If you need another command instead of deleting (say, compressing), use the null-separated form:

```bash
find /var/log/myapp -type f -name '*.log' -mtime +14 -print0 | xargs -0 -r gzip
```

`-print0` / `-0` separate names with a NUL byte, the one character that can't appear in a path. `-r` stops `xargs` from running `gzip` with no arguments when nothing matched. Long term, logrotate is usually the better tool for this job.
''',
),
dict(
ask=r'''
awk: I have a space-separated file "user bytes" per line (users repeat). Sum bytes per user and print sorted by total descending.
''',
answer=r'''
```bash
awk '{ sum[$1] += $2 } END { for (u in sum) print sum[u], u }' usage.txt | sort -rn
```

Input:

```text
alice 1200
bob 300
alice 800
carol 5000
bob 700
```

Output:

```text
5000 carol
2000 alice
1000 bob
```

- `sum[$1] += $2` uses an associative array keyed by the first column; uninitialised entries start at 0.
- The `END` block runs once after all lines; `for (u in sum)` iterates in an unspecified order, which is why the result is piped to `sort -rn` (numeric, reverse).
- The total is printed first so `sort -n` can sort on it without extra options. If you want `user total` order instead: `... | sort -k2,2nr` after printing `u, sum[u]`.
- For files with a header line, add `NR > 1` in front: `awk 'NR > 1 { sum[$1] += $2 } END ...'`.

Large byte counts are fine: awk uses double-precision floats, exact for integers up to 2^53 (about 9 PB). For human-readable units, pipe the result through `numfmt --field=1 --to=iec`.
''',
),
dict(
ask=r'''
Explain `set -euo pipefail` and show a script skeleton that cleans up a temp directory on exit, even on errors or Ctrl-C.
''',
answer=r'''
What each option does:

| option | effect | pitfall |
|---|---|---|
| `-e` | exit when a command fails | ignored inside `if` conditions, `&&`/`||` chains, and functions called from them |
| `-u` | using an unset variable is an error | `"$1"` fails when no argument was given; use `"${1:-}"` for optional ones |
| `-o pipefail` | a pipeline fails if *any* stage fails | without it, `false | true` counts as success |

Skeleton:

```bash
#!/usr/bin/env bash
set -euo pipefail

workdir=$(mktemp -d)
cleanup() {
    local status=$?
    rm -rf -- "$workdir"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT      # Ctrl-C: exit with the conventional code, EXIT trap then runs
trap 'exit 143' TERM

main() {
    local input=${1:?usage: $0 INPUT_FILE}
    cp -- "$input" "$workdir/"
    sort -u "$workdir/$(basename -- "$input")" > "$workdir/sorted.txt"
    wc -l < "$workdir/sorted.txt"
}

main "$@"
```

How the cleanup works: the `EXIT` trap runs whenever the shell exits: normal end, a failure under `set -e`, or an explicit `exit`. For signals, the `INT`/`TERM` traps call `exit` with 128 + the signal number, and that in turn fires the `EXIT` trap, so cleanup happens exactly once. `local status=$?` has to be the first line in `cleanup`; any command before it would overwrite `$?`.

`${1:?message}` is a compact way to require an argument; it prints the message and exits when `$1` is unset or empty.
''',
),
dict(
ask=r'''
jq question. From this API output, I want a CSV of name,email for active users only, sorted by name.

```json
{"users":[{"name":"Priya","email":"priya@ex.com","active":true},{"name":"Tom","email":"tom@ex.com","active":false},{"name":"Ana","email":"ana@ex.com","active":true}]}
```
''',
answer=r'''
```bash
jq -r '.users
       | map(select(.active))
       | sort_by(.name)
       | .[]
       | [.name, .email]
       | @csv' users.json
```

Output:

```text
"Ana","ana@ex.com"
"Priya","priya@ex.com"
```

Step by step:

1. `.users`: take the array.
2. `map(select(.active))`: keep elements where `.active` is true (`select` drops an element when its condition is `false` or `null`).
3. `sort_by(.name)`: sort by name.
4. `.[]`: stream the elements one by one.
5. `[.name, .email] | @csv`: build a two-element array and format it as a CSV row with proper quoting.
6. `-r` prints raw strings; without it every line would be wrapped in another layer of JSON quotes.

For a header row, wrap it: `jq -r '(["name","email"] | @csv), (.users | map(select(.active)) | sort_by(.name) | .[] | [.name, .email] | @csv)'`. Use `@tsv` instead of `@csv` if you want tab-separated output without quotes.
''',
),
dict(
ask=r'''
Write a multi-stage Dockerfile for a Python FastAPI app managed with a requirements.txt. Final image should be small and not run as root.
''',
answer=r'''
```dockerfile
# ---- build stage: install dependencies into a virtualenv
FROM python:3.12-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH="/opt/venv/bin:$PATH"
COPY requirements.txt .
RUN pip install -r requirements.txt

# ---- runtime stage: only the venv and the app code
FROM python:3.12-slim
ENV PATH="/opt/venv/bin:$PATH" \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
RUN useradd --system --uid 10001 --no-create-home app
COPY --from=build /opt/venv /opt/venv
WORKDIR /app
COPY --chown=app:app ./src ./src
USER app
EXPOSE 8000
CMD ["uvicorn", "src.main:app", "--host", "0.0.0.0", "--port", "8000"]
```

Why it's structured this way:

- **Dependencies before code.** `requirements.txt` is copied and installed before the source, so editing your code doesn't invalidate the cached `pip install` layer.
- **Virtualenv copied between stages.** Any compilers or headers you add to the build stage (e.g. `apt-get install build-essential` for packages without wheels) stay out of the final image.
- **Non-root user** with a fixed UID, which makes file permissions on mounted volumes predictable and satisfies Kubernetes `runAsNonRoot` policies.
- **Exec-form `CMD`** (JSON array): uvicorn runs as PID 1 and receives `SIGTERM` directly on `docker stop`, instead of through a `/bin/sh -c` wrapper that doesn't forward it.
- `PYTHONUNBUFFERED=1` makes logs appear immediately in `docker logs`.

Add a `.dockerignore` with `.git`, `.venv`, `__pycache__` and test data so they don't bloat the build context.
''',
),
dict(
ask=r'''
I committed something to the wrong branch (main) and haven't pushed. How do I move the last 2 commits to a new branch and reset main?
''',
answer=r'''
Since nothing is pushed, this is safe and takes three commands:

```bash
git branch feature/login-form        # new branch pointing at the current commit (keeps both commits)
git reset --hard HEAD~2              # move main back two commits
git switch feature/login-form        # continue working on the new branch
```

What happens: a branch is just a pointer to a commit. The first command creates a second pointer at your latest commit, so the two commits are now reachable from `feature/login-form`. `reset --hard HEAD~2` moves `main` back two commits; the commits aren't lost because the new branch still points at them.

Before running it:

- `git log --oneline -3` to confirm exactly which commits you're moving.
- `reset --hard` throws away **uncommitted** changes in your working tree. Run `git status` first and `git stash` anything you want to keep.

If the branch you want the commits on already exists, use `git switch existing-branch && git cherry-pick main~2..main`, then go back and reset `main` the same way. If you *had* already pushed `main`, don't reset it; use `git revert` on main instead so others' history isn't rewritten.
''',
),
]
