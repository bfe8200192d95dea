"""Code category: hand-written "write me X" requests and answers (Rust, Go)."""

ENTRIES = [
dict(
ask=r'''
Rust: read text from stdin, count word frequencies (case-insensitive), and print the top 10 as "count word". Ties broken alphabetically.
''',
answer=r'''
```rust
use std::collections::HashMap;
use std::io::{self, Read};

fn main() -> io::Result<()> {
    let mut input = String::new();
    io::stdin().read_to_string(&mut input)?;

    let mut counts: HashMap<String, usize> = HashMap::new();
    for word in input
        .split(|c: char| !c.is_alphanumeric() && c != '\'')
        .map(|w| w.trim_matches('\''))
        .filter(|w| !w.is_empty())
    {
        *counts.entry(word.to_lowercase()).or_insert(0) += 1;
    }

    let mut pairs: Vec<(String, usize)> = counts.into_iter().collect();
    // highest count first, then alphabetical
    pairs.sort_by(|(wa, ca), (wb, cb)| cb.cmp(ca).then_with(|| wa.cmp(wb)));

    for (word, count) in pairs.iter().take(10) {
        println!("{count:>7} {word}");
    }
    Ok(())
}
```

```console
$ echo "the cat and the hat; The end" | cargo run -q
      3 the
      1 and
      1 cat
      1 end
      1 hat
```

- `entry(...).or_insert(0)` does a single hash lookup for both "insert if missing" and "increment".
- `HashMap` iteration order is random, so the explicit sort with `then_with` is what makes the output deterministic.
- `is_alphanumeric` is Unicode-aware, so "naïve" or "日本" count as words. `to_lowercase` is also Unicode-aware, which is why it returns a `String` rather than changing the text in place.
''',
),
dict(
ask=r'''
In Rust I have `struct Rgb { r: u8, g: u8, b: u8 }`. Implement `FromStr` so "#1a2B3c" and "1a2b3c" parse, and `Display` so it prints as "#1a2b3c". Include a proper error type.
''',
answer=r'''
```rust
use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rgb {
    pub r: u8,
    pub g: u8,
    pub b: u8,
}

#[derive(Debug, PartialEq, Eq)]
pub enum ParseRgbError {
    BadLength(usize),
    BadHex(String),
}

impl fmt::Display for ParseRgbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseRgbError::BadLength(n) => write!(f, "expected 6 hex digits, got {n}"),
            ParseRgbError::BadHex(s) => write!(f, "invalid hex component {s:?}"),
        }
    }
}

impl std::error::Error for ParseRgbError {}

impl FromStr for Rgb {
    type Err = ParseRgbError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let hex = s.strip_prefix('#').unwrap_or(s);
        if hex.len() != 6 || !hex.is_ascii() {
            return Err(ParseRgbError::BadLength(hex.chars().count()));
        }
        let part = |i: usize| {
            let p = &hex[i..i + 2];
            u8::from_str_radix(p, 16).map_err(|_| ParseRgbError::BadHex(p.to_string()))
        };
        Ok(Rgb { r: part(0)?, g: part(2)?, b: part(4)? })
    }
}

impl fmt::Display for Rgb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{:02x}{:02x}{:02x}", self.r, self.g, self.b)
    }
}

fn main() {
    let c: Rgb = "#1a2B3c".parse().unwrap();
    assert_eq!(c, Rgb { r: 0x1a, g: 0x2b, b: 0x3c });
    println!("{c}");                                  // #1a2b3c
    println!("{:?}", "12345".parse::<Rgb>());         // Err(BadLength(5))
    println!("{}", "zz0000".parse::<Rgb>().unwrap_err()); // invalid hex component "zz"
}
```

Why `!hex.is_ascii()` is in the length check: slicing `&hex[i..i + 2]` uses byte offsets, and a string like `"ééé"` is 6 bytes but 3 characters. Slicing it in the middle of a character would panic. Rejecting non-ASCII input first makes the byte slicing safe. Implementing `std::error::Error` lets callers use `?` to convert it into `Box<dyn Error>` or `anyhow::Error`.
''',
),
dict(
ask=r'''
Show me a Rust struct that implements Iterator to produce Fibonacci numbers as u64, stopping (returning None) before it would overflow.
''',
answer=r'''
```rust
struct Fib {
    curr: u64,
    next: Option<u64>,
}

impl Fib {
    fn new() -> Self {
        Fib { curr: 0, next: Some(1) }
    }
}

impl Iterator for Fib {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        let next = self.next?;                      // already past the end
        let out = self.curr;
        self.next = self.curr.checked_add(next);    // None once the sum overflows
        self.curr = next;
        Some(out)
    }
}

fn main() {
    let first: Vec<u64> = Fib::new().take(10).collect();
    println!("{first:?}");                          // [0, 1, 1, 2, 3, 5, 8, 13, 21, 34]

    let count = Fib::new().count();
    let last = Fib::new().last().unwrap();
    println!("{count} values, largest {last}");
}
```

`checked_add` returns `None` on overflow instead of panicking in debug builds or silently wrapping in release builds. Storing that `Option` in `next` lets the iterator emit the last value that fits and then stop. The `?` at the top of `next()` makes every call after the end return `None`.

Running it prints `93 values, largest 7540113804746346429` (F(92)). The iterator stops emitting at F(92) because F(94) overflows `u64`: F(93) = 12200160415121876738 itself still fits, but computing the value after it doesn't, so with this two-slot design the sequence ends one term early. If you need F(93) as well, keep a `done` flag and compute lazily one step later; for most uses, stopping before the overflow point is the safe default.
''',
),
dict(
ask=r'''
Write a generic binary search in Rust over a sorted slice that returns the index of the first element >= target (lower bound). Don't just call the std method, I want to see it.
''',
answer=r'''
```rust
/// Index of the first element `>= target`; `slice.len()` if all elements are smaller.
/// `slice` must be sorted in ascending order.
fn lower_bound<T: Ord>(slice: &[T], target: &T) -> usize {
    let (mut lo, mut hi) = (0usize, slice.len());   // search in the half-open range [lo, hi)
    while lo < hi {
        let mid = lo + (hi - lo) / 2;                // no overflow, unlike (lo + hi) / 2
        if slice[mid] < *target {
            lo = mid + 1;                            // answer is to the right of mid
        } else {
            hi = mid;                                // mid may be the answer
        }
    }
    lo
}

fn main() {
    let v = [1, 3, 3, 3, 7, 9];
    assert_eq!(lower_bound(&v, &3), 1);
    assert_eq!(lower_bound(&v, &4), 4);
    assert_eq!(lower_bound(&v, &0), 0);
    assert_eq!(lower_bound(&v, &10), 6);
    assert_eq!(lower_bound::<i32>(&[], &5), 0);

    // matches the standard library
    for t in 0..11 {
        assert_eq!(lower_bound(&v, &t), v.partition_point(|x| *x < t));
    }
    println!("ok");
}
```

The loop invariant: everything before `lo` is `< target`, and everything from `hi` on is `>= target`. Each iteration shrinks `[lo, hi)` by at least one, so it terminates, and when `lo == hi` that boundary is the answer. Using a half-open range avoids the `hi = mid - 1` underflow trap you hit with `usize` and closed ranges when `mid` is 0.

The std equivalent is `slice.partition_point(|x| x < target)`, which the test at the end checks against.
''',
),
dict(
ask=r'''
Rust: simple worker pool with std threads and mpsc channels. Jobs are closures, results come back over another channel. No external crates.
''',
answer=r'''
```rust
use std::sync::{mpsc, Arc, Mutex};
use std::thread;

type Job = Box<dyn FnOnce() -> u64 + Send + 'static>;

fn main() {
    let workers = 4;
    let (job_tx, job_rx) = mpsc::channel::<(usize, Job)>();
    let (res_tx, res_rx) = mpsc::channel::<(usize, u64)>();
    // Receiver is not Clone; share one behind a mutex
    let job_rx = Arc::new(Mutex::new(job_rx));

    let handles: Vec<_> = (0..workers)
        .map(|_| {
            let job_rx = Arc::clone(&job_rx);
            let res_tx = res_tx.clone();
            thread::spawn(move || loop {
                // the lock guard is dropped at the end of this statement,
                // so other workers can receive while this one runs the job
                let msg = job_rx.lock().unwrap().recv();
                match msg {
                    Ok((id, job)) => res_tx.send((id, job())).unwrap(),
                    Err(_) => break, // all senders dropped: no more jobs
                }
            })
        })
        .collect();
    drop(res_tx); // keep only the workers' clones alive

    for n in 0..10u64 {
        job_tx.send((n as usize, Box::new(move || (1..=n).product()))).unwrap();
    }
    drop(job_tx); // closing the job channel lets workers exit

    let mut results: Vec<(usize, u64)> = res_rx.iter().collect();
    results.sort();
    for (id, value) in results {
        println!("{id}! = {value}");
    }
    for h in handles {
        h.join().unwrap();
    }
}
```

The two `drop` calls are what make shutdown work:

1. `drop(job_tx)`: once the last job sender is gone, `recv()` returns `Err` and each worker breaks out of its loop.
2. `drop(res_tx)`: `res_rx.iter()` ends only when *every* result sender is dropped. The workers hold clones; if `main` kept its original, the iterator would wait forever.

The `let msg = ...recv();` line is written as a separate statement on purpose. With `while let Ok(job) = rx.lock().unwrap().recv()`, the mutex guard lives for the whole loop body, so only one worker could run a job at a time.
''',
),
dict(
ask=r'''
Go: minimal HTTP JSON API with one POST /notes endpoint (store in memory, thread-safe) and GET /notes, plus graceful shutdown on Ctrl-C.
''',
answer=r'''
```go
package main

import (
	"context"
	"encoding/json"
	"errors"
	"log"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

type Note struct {
	ID   int    `json:"id"`
	Text string `json:"text"`
}

type store struct {
	mu    sync.RWMutex
	notes []Note
}

func (s *store) handleNotes(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		s.mu.RLock()
		out := append([]Note(nil), s.notes...) // copy while holding the lock
		s.mu.RUnlock()
		writeJSON(w, http.StatusOK, out)
	case http.MethodPost:
		var in struct {
			Text string `json:"text"`
		}
		r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Text == "" {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "body must be {\"text\": \"...\"}"})
			return
		}
		s.mu.Lock()
		n := Note{ID: len(s.notes) + 1, Text: in.Text}
		s.notes = append(s.notes, n)
		s.mu.Unlock()
		writeJSON(w, http.StatusCreated, n)
	default:
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func main() {
	s := &store{}
	mux := http.NewServeMux()
	mux.HandleFunc("/notes", s.handleNotes)

	srv := &http.Server{Addr: ":8080", Handler: mux, ReadHeaderTimeout: 5 * time.Second}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	go func() {
		log.Printf("listening on %s", srv.Addr)
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Fatal(err)
		}
	}()

	<-ctx.Done() // wait for Ctrl-C or SIGTERM
	log.Println("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		log.Printf("forced shutdown: %v", err)
	}
}
```

Try it:

```bash
curl -s -X POST localhost:8080/notes -d '{"text":"buy milk"}'   # {"id":1,"text":"buy milk"}
curl -s localhost:8080/notes                                      # [{"id":1,"text":"buy milk"}]
```

- `srv.Shutdown` stops accepting new connections and waits for in-flight requests, up to the 10-second timeout.
- `ListenAndServe` returns `http.ErrServerClosed` after a shutdown; that's expected, so it's not treated as a fatal error.
- `MaxBytesReader` caps the request body at 1 MiB so a client can't exhaust memory.
- On Go 1.22+ you can register `mux.HandleFunc("GET /notes", ...)` and `mux.HandleFunc("POST /notes", ...)` separately and drop the method switch.
''',
),
dict(
ask=r'''
Go worker pool: process a slice of URLs with 8 goroutines, collect errors, and stop early if the context is cancelled.
''',
answer=r'''
```go
package fetch

import (
	"context"
	"fmt"
	"net/http"
	"sync"
)

type Result struct {
	URL    string
	Status int
	Err    error
}

func CheckAll(ctx context.Context, urls []string, workers int) []Result {
	jobs := make(chan int)
	results := make([]Result, len(urls)) // each worker writes only its own index: no lock needed
	var wg sync.WaitGroup

	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				results[i] = check(ctx, urls[i])
			}
		}()
	}

feed:
	for i := range urls {
		select {
		case jobs <- i:
		case <-ctx.Done():
			break feed // stop handing out work; remaining results stay zero-valued
		}
	}
	close(jobs)
	wg.Wait()

	for i := range results {
		if results[i].URL == "" {
			results[i] = Result{URL: urls[i], Err: ctx.Err()}
		}
	}
	return results
}

func check(ctx context.Context, url string) Result {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, url, nil)
	if err != nil {
		return Result{URL: url, Err: err}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Result{URL: url, Err: fmt.Errorf("head %s: %w", url, err)}
	}
	resp.Body.Close()
	return Result{URL: url, Status: resp.StatusCode}
}
```

Usage with a deadline:

```go
ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
defer cancel()
for _, r := range fetch.CheckAll(ctx, urls, 8) {
	if r.Err != nil {
		log.Printf("FAIL %s: %v", r.URL, r.Err)
	}
}
```

Why it's safe without a mutex: every job index is sent to exactly one worker, so no two goroutines write the same element of `results`, and `wg.Wait()` establishes the happens-before edge so the main goroutine sees all writes. Cancellation works at two levels: the feeder stops sending new indexes, and requests already in flight are aborted because they were created with `NewRequestWithContext`.
''',
),
dict(
ask=r'''
Show a table-driven test in Go for a function `ParseDuration(s string) (time.Duration, error)` that accepts things like "90s", "1h30m", "2d" (days are our extension).
''',
answer=r'''
First a possible implementation, so the test has something concrete to check:

```go
package durx

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ParseDuration extends time.ParseDuration with a leading "<n>d" day component.
func ParseDuration(s string) (time.Duration, error) {
	var days time.Duration
	if i := strings.IndexByte(s, 'd'); i >= 0 {
		n, err := strconv.Atoi(s[:i])
		if err != nil || n < 0 {
			return 0, fmt.Errorf("invalid day count in %q", s)
		}
		days = time.Duration(n) * 24 * time.Hour
		s = s[i+1:]
		if s == "" {
			return days, nil
		}
	}
	rest, err := time.ParseDuration(s)
	if err != nil {
		return 0, err
	}
	return days + rest, nil
}
```

And the table-driven test:

```go
package durx

import (
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    time.Duration
		wantErr bool
	}{
		{"seconds", "90s", 90 * time.Second, false},
		{"hours and minutes", "1h30m", 90 * time.Minute, false},
		{"days only", "2d", 48 * time.Hour, false},
		{"days plus hours", "1d12h", 36 * time.Hour, false},
		{"zero", "0s", 0, false},
		{"empty", "", 0, true},
		{"garbage", "soon", 0, true},
		{"negative days", "-1d", 0, true},
		{"missing unit", "10", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseDuration(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseDuration(%q) error = %v, wantErr %v", tt.in, err, tt.wantErr)
			}
			if !tt.wantErr && got != tt.want {
				t.Errorf("ParseDuration(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}
```

`t.Run` gives every row its own name in the output (`--- FAIL: TestParseDuration/days_plus_hours`), and you can run a single case with `go test -run 'TestParseDuration/days_only'`. Adding a case is one line, which is the main reason this style is idiomatic in Go.
''',
),
dict(
ask=r'''
In Go, how do I put a timeout on a function that doesn't take a context itself, e.g. a legacy `Compute(x int) int` that might hang?
''',
answer=r'''
Run it in a goroutine and `select` on its result and the context:

```go
func ComputeWithTimeout(ctx context.Context, x int) (int, error) {
	done := make(chan int, 1) // buffered: the goroutine can always send and exit
	go func() {
		done <- Compute(x)
	}()

	select {
	case v := <-done:
		return v, nil
	case <-ctx.Done():
		return 0, ctx.Err() // context.DeadlineExceeded or context.Canceled
	}
}

// caller
ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
defer cancel()
v, err := ComputeWithTimeout(ctx, 42)
```

An important limitation: **this doesn't stop `Compute`.** Go has no way to kill a goroutine from outside. If `Compute` truly hangs, that goroutine stays blocked forever, so if this happens often you leak goroutines (and whatever memory they hold).

The buffer of size 1 on `done` matters: if the timeout fires first, nobody reads from `done`; with an unbuffered channel the goroutine would block forever on the send even after `Compute` eventually finishes. With the buffer, the send succeeds and the goroutine exits.

The real fix is to change `Compute` so it checks `ctx.Done()` in its loop or passes the context to whatever I/O it does. If you can't change it and it may genuinely hang, running it in a separate process (which *can* be killed) is the only reliable way to bound it.
''',
),
]
