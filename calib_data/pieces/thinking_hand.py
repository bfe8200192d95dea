"""thinking category: hand-written questions with reasoning traces (reasoning_content) of varied
length, in English and Chinese."""

ENTRIES = [
dict(
q=r'''
A bat and a ball cost $1.10 in total. The bat costs $1.00 more than the ball. How much does the ball cost?
''',
think=r'''
The tempting answer is 10 cents. Check it: ball 0.10, bat would be 1.10 (a dollar more), total 1.20. Too much.
Let ball = x. Bat = x + 1.00. Sum 2x + 1.00 = 1.10, so 2x = 0.10, x = 0.05.
Check: ball 0.05, bat 1.05, difference 1.00, total 1.10. Correct.
''',
a=r'''
The ball costs **5 cents**.

If the ball is $x$, the bat is $x + 1.00$, so $2x + 1.00 = 1.10$ and $x = 0.05$. Check: $0.05 + 1.05 = 1.10$, and the bat is exactly $1.00 more.

The intuitive answer, 10 cents, doesn't work: then the bat would be $1.10 and the total $1.20.
''',
),
dict(
q=r'''
A patch of lily pads doubles in size every day. It takes 48 days to cover the whole lake. How long does it take to cover half the lake?
''',
think=r'''
Doubling each day. Full on day 48 means the day before it was half. So 47. Not 24.
''',
a=r'''
**47 days.** Since the patch doubles every day, it covers half the lake one day before it covers all of it. (The tempting answer, 24, would be right only if it grew by a fixed amount each day.)
''',
),
dict(
q=r'''
Which is bigger: 2^100 or 10^30? No calculator.
''',
think=r'''
Use 2^10 = 1024 ≈ 10^3, slightly more. So 2^100 = (2^10)^10 = 1024^10 = (1.024 × 10^3)^10 = 1.024^10 × 10^30.
1.024^10 > 1 obviously, so 2^100 > 10^30. How much bigger? 1.024^10 ≈ e^(10 × 0.0237) ≈ e^0.237 ≈ 1.27. So 2^100 ≈ 1.27 × 10^30.
Cross-check with logs: log10(2) ≈ 0.30103, × 100 = 30.103, so 2^100 = 10^30.103 ≈ 1.27 × 10^30. Consistent.
''',
a=r'''
**2^100 is bigger**, by about 27%.

$2^{10} = 1024 = 1.024 \times 10^3$, so

$$2^{100} = (2^{10})^{10} = 1.024^{10} \times 10^{30}.$$

Since $1.024^{10} > 1$, we get $2^{100} > 10^{30}$. Estimating $1.024^{10} \approx 1.27$ gives $2^{100} \approx 1.27 \times 10^{30}$, which matches the log check: $100 \log_{10} 2 \approx 30.103$.
''',
),
dict(
q=r'''
You have 12 coins that look identical. One is counterfeit and is either heavier or lighter than the others (you don't know which). With a balance scale and only three weighings, how do you find the fake coin and tell whether it's heavier or lighter?
''',
think=r'''
Count the possibilities first: 12 coins × 2 (heavy or light) = 24 cases. Each weighing has 3 outcomes, so three weighings give 27 outcomes. 27 ≥ 24, so it's possible in principle, but it's tight: each weighing must split the remaining cases as evenly as possible, roughly into thirds.

First weighing: 4 vs 4, with 4 aside. Number coins 1..12. Weigh {1,2,3,4} vs {5,6,7,8}.

Case A: balance. Fake is among 9–12; 1–8 are genuine. Remaining cases: 9–12 each H or L = 8 cases. Two weighings left, 9 outcomes, fine.
Second: {9,10,11} vs {1,2,3} (genuine).
- Balance: 12 is fake. Third: 12 vs 1; it will tip one way, telling heavy or light. (It can't balance, since 12 is fake.)
- Left heavy: one of 9,10,11 is heavy. Third: 9 vs 10. Heavier one is fake; if balance, 11 is the heavy fake.
- Left light: one of 9,10,11 is light. Third: 9 vs 10; the lighter one is fake; balance → 11 light.
Good, case A done.

Case B: left side {1,2,3,4} heavier. Then either one of 1–4 is heavy, or one of 5–8 is light. 8 cases. 9,10,11,12 are genuine.
Need a second weighing that splits 8 cases into ≤3,≤3,≤2. Mix coins from both groups and swap sides.
Try {1,2,5} vs {3,6,9}.
Think about each outcome:
- If 1 or 2 is heavy: left heavy.
- If 3 is heavy: right heavy.
- If 4 is heavy: 4 not on scale → balance.
- If 5 is light: 5 on left → left lighter → right heavy.
- If 6 is light: 6 on right → right lighter → left heavy.
- If 7 or 8 is light: not on scale → balance.
So outcomes:
- Left heavy: {1H, 2H, 6L} — 3 cases.
- Right heavy: {3H, 5L} — 2 cases.
- Balance: {4H, 7L, 8L} — 3 cases.
Each ≤ 3. 
Third weighing for each:
- Left heavy {1H,2H,6L}: weigh 1 vs 2. If 1 heavier → 1 heavy. If 2 heavier → 2 heavy. Balance → 6 light.
- Right heavy {3H,5L}: weigh 3 vs 9 (genuine). 3 heavier → 3 heavy; balance → 5 light. (Can't be lighter.)
- Balance {4H,7L,8L}: weigh 7 vs 8. Lighter one is the light fake; balance → 4 heavy.
All resolved.

Case C: right side {5,...,8} heavier. Symmetric: one of 1–4 light or one of 5–8 heavy. Same second weighing {1,2,5} vs {3,6,9}:
- 1 or 2 light → left light (right heavy).
- 3 light → right light (left heavy).
- 5 heavy → left heavy.
- 6 heavy → right heavy.
- 4 light, 7H, 8H → balance.
Outcomes: left heavy {3L, 5H}; right heavy {1L, 2L, 6H}; balance {4L, 7H, 8H}.
Third: {3L,5H}: weigh 5 vs 9: heavier → 5 heavy, balance → 3 light. {1L,2L,6H}: weigh 1 vs 2, lighter is fake, balance → 6 heavy. {4L,7H,8H}: weigh 7 vs 8, heavier is fake, balance → 4 light.

Everything checks out. I'll present it as a decision tree with the counting argument up front.
''',
a=r'''
Number the coins 1–12. There are 24 possibilities (12 coins × heavier/lighter) and three weighings give 3 × 3 × 3 = 27 outcomes, so it's possible, but each weighing has to split the remaining possibilities into roughly equal thirds.

**Weighing 1: {1, 2, 3, 4} vs {5, 6, 7, 8}**

**A. Balanced** → the fake is among 9–12 (and 1–8 are genuine).

- **Weighing 2:** {9, 10, 11} vs {1, 2, 3}
  - Balanced → coin 12 is fake. **Weighing 3:** 12 vs 1 shows whether it's heavy or light.
  - Left heavy → one of 9–11 is heavy. **Weighing 3:** 9 vs 10; the heavier is fake; if balanced, 11 is heavy.
  - Left light → one of 9–11 is light. **Weighing 3:** 9 vs 10; the lighter is fake; if balanced, 11 is light.

**B. Left side heavy** → either one of 1–4 is heavy, or one of 5–8 is light (9–12 are genuine).

- **Weighing 2:** {1, 2, 5} vs {3, 6, 9}
  - Left heavy → 1 heavy, 2 heavy, or 6 light. **Weighing 3:** 1 vs 2; the heavier is fake; if balanced, 6 is light.
  - Right heavy → 3 heavy or 5 light. **Weighing 3:** 3 vs 9; if 3 is heavier it's the fake; if balanced, 5 is light.
  - Balanced → 4 heavy, 7 light, or 8 light. **Weighing 3:** 7 vs 8; the lighter is fake; if balanced, 4 is heavy.

**C. Right side heavy** → symmetric to B: one of 1–4 is light or one of 5–8 is heavy.

- **Weighing 2:** {1, 2, 5} vs {3, 6, 9}
  - Left heavy → 5 heavy or 3 light. **Weighing 3:** 5 vs 9; heavier → 5 heavy; balanced → 3 light.
  - Right heavy → 1 light, 2 light, or 6 heavy. **Weighing 3:** 1 vs 2; the lighter is fake; balanced → 6 heavy.
  - Balanced → 4 light, 7 heavy, or 8 heavy. **Weighing 3:** 7 vs 8; the heavier is fake; balanced → 4 light.

The key trick is in weighing 2 of cases B and C: moving some coins to the other side (5 and 3), keeping some in place (1, 2, 6), removing some (4, 7, 8) and adding a known-genuine coin (9). The direction the scale tips then tells you which group the fake is in.
''',
),
dict(
q=r'''
Roughly how many piano tuners are there in a city of 1 million people? Walk me through an estimate.
''',
think=r'''
Fermi estimate. Pieces: number of pianos, tuning frequency, how many tunings one tuner does per year.
People per household: ~2.5 → 400,000 households.
Fraction of households with a piano: maybe 1 in 20? Pianos are less common now. Say 5% → 20,000 home pianos. Add schools, churches, studios, concert halls: maybe +10–20%, say ~22,000–24,000. Call it 20,000–25,000.
Tuning: recommended once or twice a year, but many owners tune rarely. Average maybe once a year, so ~20,000–25,000 tunings a year.
A tuner: a tuning takes ~1.5–2 hours including travel. Maybe 4 a day, 5 days a week, ~48 working weeks: 4 × 5 × 48 ≈ 1,000 tunings per year. But not all of their time is tuning, some repairs, admin. Say 800–1,000.
Tuners ≈ 22,000 / 900 ≈ 25. Range maybe 15 to 50 depending on assumptions.
Good to state the assumptions and the sensitivity: piano ownership rate dominates.
''',
a=r'''
A classic Fermi estimate: break it into pieces you can guess, multiply, and keep track of which assumptions matter most.

| step | assumption | result |
|---|---|---|
| Households | ~2.5 people per household | 400,000 households |
| Pianos at home | ~1 in 20 households | 20,000 pianos |
| Other pianos | schools, churches, studios, venues: +10–20% | ~23,000 pianos |
| Tunings per year | on average about once a year (some twice, many never) | ~23,000 tunings/year |
| Tunings per tuner | ~4 per day × 5 days × 48 weeks, minus repairs and admin | ~900 per year |

**Estimate:** 23,000 ÷ 900 ≈ **25 piano tuners**, with a plausible range of roughly 15–50.

The biggest uncertainty is how many households have a piano. That varies a lot by country and by how many people now use digital pianos, which don't need tuning. If it's 1 in 10 instead of 1 in 20, the answer doubles. The point of the exercise is less the final number than getting within a factor of two or three with transparent assumptions you can refine.
''',
),
dict(
q=r'''
What does this print, and why?

```python
def add_item(item, bucket=[]):
    bucket.append(item)
    return bucket

a = add_item(1)
b = add_item(2)
c = add_item(3, [])
print(a, b, c, a is b)
```
''',
think=r'''
Default argument evaluated once at def time. So bucket default is one shared list.
a = add_item(1): default list becomes [1], returns that list object → a refers to it.
b = add_item(2): same default list, now [1, 2], returns the same object → b is the same list as a.
c = add_item(3, []): new list passed, [3].
print(a, b, c, a is b): a and b are the same object, both [1, 2]. c = [3]. a is b True.
Output: [1, 2] [1, 2] [3] True
''',
a=r'''
It prints:

```text
[1, 2] [1, 2] [3] True
```

The default value `[]` is created **once**, when the `def` statement runs, and the same list object is reused by every call that doesn't pass `bucket`.

1. `add_item(1)` appends to the shared default list → `[1]`; `a` refers to that list.
2. `add_item(2)` appends to the **same** list → `[1, 2]`; `b` refers to it too. Because `a` is the same object, it now also shows `[1, 2]`.
3. `add_item(3, [])` gets a fresh list → `[3]`.

`a is b` is `True` because both names point to the one default list. The usual fix is `bucket=None` and `if bucket is None: bucket = []` inside the function.
''',
),
dict(
q=r'''
There are three boxes. One contains only apples, one only oranges, and one both. All three labels are wrong. You may take one fruit from one box (without looking inside). How do you relabel all boxes correctly?
''',
think=r'''
Key: the box labelled "Mixed" cannot be mixed (all labels are wrong). So it contains only apples or only oranges. Draw from it: the fruit tells exactly which.
Say you draw an apple: that box is Apples. Remaining boxes labelled "Apples" and "Oranges", containing Oranges and Mixed in some order. The box labelled "Oranges" can't be oranges, so it's Mixed (since Apples is taken). Then the one labelled "Apples" is Oranges.
If you draw an orange, symmetric: "Mixed" box is Oranges; box labelled "Apples" can't be apples, so it's Mixed; box labelled "Oranges" is Apples.
Drawing from another box wouldn't work: e.g. from "Apples" label, drawing an orange could mean Oranges box or Mixed box.
''',
a=r'''
**Take a fruit from the box labelled "Mixed".**

Because every label is wrong, that box can't be mixed: it holds only apples or only oranges, so one fruit tells you exactly what it contains.

- **If you draw an apple:** that box is *Apples*. The box labelled "Oranges" can't contain oranges, and apples are taken, so it's *Mixed*. The last box (labelled "Apples") is *Oranges*.
- **If you draw an orange:** that box is *Oranges*. The box labelled "Apples" can't contain apples, so it's *Mixed*, and the box labelled "Oranges" is *Apples*.

Drawing from either of the other boxes doesn't work: an orange from the box labelled "Apples" could mean it's the oranges box or the mixed box.
''',
),
dict(
q=r'''
A family has two children. You learn that at least one of them is a boy. What is the probability that both are boys?
''',
think=r'''
Standard interpretation: equally likely BB, BG, GB, GG. "At least one boy" removes GG. Remaining BB, BG, GB → P(BB) = 1/3.
But this depends on how we learned it. If we met one child at random and it's a boy, then P(other is boy) = 1/2. Worth noting the distinction: the information "at least one is a boy" from a process that would report it whenever true vs seeing a specific child.
Assumes boys and girls equally likely and independent.
''',
a=r'''
Under the usual reading, **1/3**.

With two children, the equally likely combinations (older, younger) are BB, BG, GB, GG. Knowing "at least one is a boy" rules out only GG, leaving BB, BG, GB, and just one of those three is two boys.

**But the answer depends on how you learned the fact.** If instead you met one of the children at random and he was a boy, the probability that the *other* child is a boy is **1/2**, because that observation is about a specific child, not about the pair. Many heated arguments about this puzzle come from people silently assuming different ways the information was obtained.

(Both answers assume each child is independently equally likely to be a boy or a girl.)
''',
),
dict(
q=r'''
How long does it take to download a 50 GB game on a 100 Mbps connection?
''',
think=r'''
Units: GB is gigabytes, Mbps is megabits per second. 1 byte = 8 bits.
50 GB = 50 × 8 = 400 gigabits = 400,000 megabits (using decimal units, as game stores and ISPs usually do).
400,000 / 100 = 4,000 seconds ≈ 66.7 minutes ≈ 1 h 7 min.
Real world: overhead, server limits, Wi-Fi; typically get maybe 80–90% of rated speed, so ~75–85 min.
If GB meant GiB (2^30 bytes), 50 GiB = 53.7 GB → ~72 minutes at full speed. Mention briefly.
''',
a=r'''
About **67 minutes** in theory, more like **75–85 minutes** in practice.

The catch is the units: connection speeds are in mega**bits** per second, file sizes in giga**bytes**, and 1 byte = 8 bits.

- 50 GB × 8 = 400 gigabits = 400,000 megabits
- 400,000 Mb ÷ 100 Mb/s = 4,000 seconds ≈ 66.7 minutes

Real downloads rarely reach the full advertised speed because of protocol overhead, Wi-Fi, and the download server's own limits; 80–90% of the rated speed is typical, hence the practical estimate. A wired connection usually gets closer to the maximum than Wi-Fi.
''',
),
dict(
q=r'''
Is 91 prime?
''',
think=r'''
Check small primes up to sqrt(91) ≈ 9.5: 2 no, 3: digit sum 10 no, 5 no, 7: 7 × 13 = 91. Not prime.
''',
a=r'''
No. **91 = 7 × 13.** It's a classic "looks prime" number because it's odd, doesn't end in 5, and its digit sum (10) isn't divisible by 3, but it's divisible by 7.
''',
),
dict(
q=r'''
How many times do the hour and minute hands of a clock overlap in 12 hours?
''',
think=r'''
Naively 12, once per hour. But between 11 and 1 there's only one overlap (at 12:00). 
Relative speed: minute hand 360°/h, hour hand 30°/h, so the minute hand gains 330°/h on the hour hand. They coincide every 360/330 h = 12/11 h ≈ 1 h 5 min 27 s.
In 12 hours: 12 / (12/11) = 11 overlaps (counting 12:00 once; 12:00 at the start and the end of the period are the same event).
List: 12:00, ~1:05, ~2:11, ~3:16, ~4:22, ~5:27, ~6:33, ~7:38, ~8:44, ~9:49, ~10:55. That's 11. Next would be 12:00 again.
''',
a=r'''
**11 times** (22 times in a full day).

The minute hand gains on the hour hand at 360° − 30° = 330° per hour, so it catches up every 360/330 = 12/11 hours ≈ 1 hour 5 minutes 27 seconds. In 12 hours that happens 12 ÷ (12/11) = 11 times.

The overlaps are at about 12:00, 1:05, 2:11, 3:16, 4:22, 5:27, 6:33, 7:38, 8:44, 9:49 and 10:55. There's no separate overlap between 11 and 12: the one that "belongs" there is exactly 12:00.
''',
),
dict(
q=r'''
At a party, everyone shakes hands with everyone else exactly once. There were 66 handshakes. How many people were at the party?
''',
think=r'''
Handshakes among n people = n(n−1)/2 = 66 → n(n−1) = 132 → n = 12 (12 × 11 = 132).
''',
a=r'''
**12 people.** Each pair shakes hands once, so the number of handshakes is $\binom{n}{2} = \frac{n(n-1)}{2}$. Setting that to 66 gives $n(n-1) = 132 = 12 \times 11$, so $n = 12$.
''',
),
dict(
q=r'''
Our CI test `test_report_generated_for_today` passes locally but fails in CI roughly from 4pm to midnight every day. What's the likely cause?
''',
think=r'''
Time-of-day dependent failure, fixed window every day. 4pm to midnight is an 8-hour window. If CI runs in UTC and the developers are in UTC−8 (Pacific standard time), then 4pm local = 00:00 UTC. Hmm, reversed: if local is UTC−8, 4pm local is midnight UTC next day. So from 4pm to midnight local, the UTC date is already "tomorrow" while local date is "today".
So the test probably compares a date computed in one timezone with a date computed in another: e.g. the code uses UTC (datetime.utcnow / server timezone) to stamp the report, while the test computes "today" with local time, or vice versa. In CI both run in UTC... but then they'd agree. Let me think: if CI machine is UTC, both would be UTC, and the failure would have to come from something else, e.g. the test has a hardcoded timezone (America/Los_Angeles) or the report uses a configured business timezone while the test uses date.today() (UTC on CI). Between 4pm and midnight Pacific, the Pacific date is D and UTC date is D+1 → mismatch. Locally, developer machine in Pacific → both give D → pass.
The window being "4pm to midnight" supports a UTC−8 offset (during daylight saving it would be 5pm to midnight, UTC−7). The team should check if the window shifts by an hour in summer.
Fix: inject a clock, freeze time in tests (freezegun / time-machine), and be explicit about which timezone "today" means in both code and test.
''',
a=r'''
Almost certainly a **time zone mismatch in how "today" is computed**.

The clue is the window: a failure every day from 4pm to midnight is exactly what you get with an 8-hour offset. For a team in US Pacific time (UTC−8 in winter), 4pm local is 00:00 UTC. From then until local midnight, **the UTC date is already tomorrow while the local date is still today**.

A typical way this happens:

- The application stamps the report with a date in one zone (e.g. a configured business time zone like `America/Los_Angeles`, or the user's zone).
- The test computes the expected date with `date.today()` / `datetime.now()`, which uses the **machine's** zone.
- On your laptop both are Pacific, so they always agree. CI runners usually run in **UTC**, so during those 8 hours the two dates differ by one day.

How to confirm: print both the date the code produced and the date the test expected in CI. Also check whether the window shifts to 5pm–midnight after daylight saving time starts (UTC−7); if it does, that's conclusive.

How to fix:

1. **Decide which zone "today" means** for reports and use it explicitly in both the code and the test.
2. **Control the clock in tests**, e.g. with `freezegun` / `time-machine` in Python or an injected clock object, and add a test case that runs at 23:30 local time specifically.
3. Optionally set `TZ` explicitly in the CI config so the environment is documented, but don't rely on that alone: the real bug is code that silently depends on the machine's time zone.
''',
),
dict(
q=r'''
I have three meetings to schedule tomorrow between 9:00 and 17:00: a 90-minute design review that needs Ana and Raj, a 60-minute 1:1 with Raj, and a 30-minute sync with Ana. Ana is busy 10:00–12:00; Raj is busy 13:00–14:30; nobody wants anything during lunch 12:00–13:00. Raj prefers the 1:1 at the end of the day. Propose a schedule.
''',
think=r'''
Constraints:
- Day 9:00–17:00. Lunch 12–13 blocked for all.
- Ana busy 10–12. Raj busy 13–14:30.
- Design review 90 min, both Ana and Raj. 
- 1:1 Raj 60 min, preferably at end of day.
- Sync Ana 30 min.

Ana's free: 9–10, 13–17. Raj's free: 9–12, 14:30–17.
Both free: 9–10 (only 60 min, too short for 90), 14:30–17 (150 min). So design review must be in 14:30–17: e.g. 14:30–16:00 or 15:00–16:30 or 15:30–17:00.
Raj's 1:1 at end of day: ideally 16:00–17:00. Then design review 14:30–16:00. That fits exactly: review 14:30–16:00, 1:1 16:00–17:00. Back-to-back for Raj (2.5 hours straight), maybe mention a break option.
Ana sync 30 min: Ana free 9–10 or 13–14:30. 9:00–9:30 or 13:00–13:30... If the sync is with Ana and me (the user), any of those. Maybe 9:30–10:00 or 13:30–14:00. Choose 13:30–14:00 to prepare for review? Or 9:00–9:30. I'll suggest 9:30–10:00, which keeps the afternoon free before the review... Actually having it at 14:00–14:30 right before the review could be a prep. Hmm, a sync with Ana could be useful as prep for the design review. But that's back-to-back; fine, or 13:30–14:00 leaving a buffer. Pick 13:30–14:00 and mention alternative 9:00–9:30.
Alternative if Raj wants a break: review 14:30–16:00, 1:1 16:00–17:00 has no break. Only option to have a break would be moving review earlier — impossible (must start ≥14:30 and end ≤17 and 1:1 60 min also after 14:30 → total 150 min = exactly the window). Unless 1:1 happens in the morning 9–10 or 10–11 (Raj free 9–12). So trade-off: 1:1 at end of day means no gap. Mention.
''',
a=r'''
Here's a schedule that satisfies every constraint:

| time | meeting | who |
|---|---|---|
| 13:30–14:00 | Sync | you + Ana |
| 14:30–16:00 | Design review | Ana, Raj |
| 16:00–17:00 | 1:1 | Raj |

Why this is essentially forced:

- The design review needs **both** Ana and Raj for 90 minutes. Their shared free time is only 9:00–10:00 (too short) and 14:30–17:00, so the review has to be in the afternoon.
- Raj's 1:1 also has to fit, and he wants it at the end of the day. The afternoon window 14:30–17:00 is exactly 150 minutes = 90 + 60, so review 14:30–16:00 followed by the 1:1 16:00–17:00 is the only way to honour his preference.
- Ana is free 9:00–10:00 and 13:00–17:00. I put the sync at 13:30–14:00 so it can double as prep for the review; 9:00–9:30 works equally well.

One trade-off to flag: Raj ends up with 2.5 hours of back-to-back meetings. If he'd rather have a break, move the 1:1 to the morning (anywhere between 9:00 and 12:00 works for him) and keep the review at 14:30–16:00.
''',
),
dict(
q=r'''
Should I pay off my 4% car loan early or put the extra $300/month into an index fund?
''',
think=r'''
Compare guaranteed return of paying off debt (4%, risk-free, after-tax effectively since car loan interest usually not deductible) with expected return of index fund (historically maybe ~6–7% real for stocks over long periods, but volatile, not guaranteed, and depends on horizon).
Factors: emergency fund first, high-interest debt elsewhere, employer match, time horizon (car loan remaining term — if only 2 years left, investing horizon for the comparison is short), risk tolerance, psychological value of being debt-free, liquidity (money paid into loan is illiquid).
At 4%, it's a genuine toss-up, expected value favors investing over long horizons, but not by a huge margin, and risk matters. Don't give personal financial advice definitively; give a framework and a middle ground (split).
Also check whether tax-advantaged accounts are available: investing in a retirement account with tax benefits tilts toward investing.
Also: prepayment penalties on the loan? Rare but check.
''',
a=r'''
At 4%, it's close to a toss-up, so it comes down to your situation and temperament. A framework:

**First, make sure these are covered (they beat both options):**
1. An emergency fund of a few months of expenses.
2. Any employer retirement match. That's an instant 50–100% return.
3. Any higher-interest debt, such as credit cards at 20%+.

**Then compare:**

| | Pay off the car loan | Invest in an index fund |
|---|---|---|
| Return | A **guaranteed** 4% (the interest you avoid) | Historically higher on average over long periods, but **not guaranteed**, and it can be negative for years |
| Risk | None | Market swings; a bad year right when you need the money hurts |
| Liquidity | Money paid into the loan is gone until you sell the car | You can sell if you need cash (possibly at a loss) |
| Tax angle | Car loan interest usually isn't deductible | Investing through a tax-advantaged retirement account can add a meaningful edge |

**Leans toward paying off the loan:** you value certainty, the loan has only a short time left, your income is unstable, or being debt-free would genuinely reduce your stress (that's worth something real).

**Leans toward investing:** you have a long horizon (10+ years), can tolerate market drops without selling, and can use tax-advantaged accounts.

**A reasonable middle ground:** split it, e.g. $150 to each. You get some guaranteed return and some growth potential, and you don't have to be right about the market.

Also check that the loan has no prepayment penalty, and ask the lender to apply extra payments to the principal.
''',
),
dict(
q=r'''
If you wrap a rope tightly around the Earth's equator and then make it 1 metre longer, spreading the slack evenly so the rope hovers above the ground, how high is the gap? Could a cat get under it?
''',
think=r'''
Circumference C = 2πR. New length C + 1 = 2π(R + h). So 2πh = 1 → h = 1/(2π) ≈ 0.159 m ≈ 16 cm.
Independent of R! Same for a tennis ball.
A cat: a cat can squeeze through gaps about the size of its head; 16 cm is enough for most cats to crawl under. Yes.
''',
a=r'''
The gap is about **16 cm**, and yes, a cat could crawl under it.

If the Earth's radius is $R$, the rope's length is $2\pi R$. Adding 1 metre gives $2\pi(R + h) = 2\pi R + 1$, so

$$h = \frac{1}{2\pi} \approx 0.159 \text{ m}.$$

The surprising part is that **$R$ cancels out**: adding 1 metre to a rope around a tennis ball or around the Earth raises it by the same 16 cm. Intuition says one metre spread over 40,000 km should be nothing, but the circumference grows by $2\pi$ for every unit of radius, no matter how big the circle is.
''',
),
dict(
q=r'''
A farmer has 17 sheep. All but 9 run away. How many are left?
''',
think=r'''
"All but 9" means 9 stay. Answer 9, not 8.
''',
a=r'''
**9.** "All but 9 run away" means every sheep except 9 ran away, so 9 are left. (The trap is computing 17 − 9 = 8.)
''',
),
dict(
q=r'''
I have two ropes. Each takes exactly one hour to burn from end to end, but they burn unevenly (half the rope doesn't necessarily take half an hour). How can I measure exactly 45 minutes?
''',
think=r'''
Uneven burning, so can't cut or measure by length. But lighting both ends makes a rope burn out in exactly 30 minutes: the two flames together consume the entire rope, and whatever the distribution, the total burn time halves. Because at any moment the burned portions from both ends sum to... Each point of the rope would take some time t_i to burn; the two flames meet when the total time consumed from both sides adds to 60 minutes, so it's 30 minutes.
Plan: at t=0 light rope A at both ends and rope B at one end. At t=30, A finishes. At that moment B has 30 minutes of burn time left (regardless of length). Light B's other end: it now burns out in 15 minutes. When B finishes, t = 45.
''',
a=r'''
1. At time 0, light **rope A at both ends** and **rope B at one end**.
2. Rope A burns out after exactly **30 minutes**. (With flames from both ends, the two burning fronts together use up the rope's 60 minutes of burn time twice as fast, however uneven it is.)
3. At that moment rope B has exactly 30 minutes of burn time left. **Light B's other end** too.
4. B now burns out in **15 minutes**. When it's gone, exactly 30 + 15 = **45 minutes** have passed.

The trick is that you can't use the ropes' *lengths* (because they burn unevenly), only their *burn time*, and lighting both ends halves whatever burn time remains.
''',
),
dict(
q=r'''
A company's revenue grew 50% in year one and then fell 50% in year two. My manager says "so we're back where we started." Is that right?
''',
think=r'''
Start 100. +50% → 150. −50% of 150 → 75. Down 25%. Not back. Percent changes multiply: 1.5 × 0.5 = 0.75.
To get back from 75 to 100 needs +33.3%.
''',
a=r'''
No: you'd be **25% below** where you started.

Start with 100: up 50% gives 150; down 50% **of 150** gives 75. Percentage changes multiply rather than add: 1.5 × 0.5 = 0.75.

To get back to the original level from 75 you'd now need growth of 33.3%. It's a common trap with any "up X%, down X%" pair: the loss always lands on a bigger base than the gain started from, so you end up behind.
''',
),
dict(
q=r'''
从 1 写到 100，一共要写多少个数字“1”？
''',
think=r'''
分位数统计。
个位是 1：1, 11, 21, ..., 91，共 10 个。100 的个位是 0。
十位是 1：10–19，共 10 个。
百位是 1：100，1 个。
合计 10 + 10 + 1 = 21。
注意 11 的两个 1 分别在个位和十位里各算了一次，没有重复也没有遗漏。
''',
a=r'''
一共要写 **21 个**“1”。

按数位分别统计：

- **个位是 1**：1、11、21、31、…、91，共 10 个；
- **十位是 1**：10–19，共 10 个；
- **百位是 1**：只有 100，1 个。

合计 10 + 10 + 1 = 21。其中 11 有两个“1”，分别在个位和十位中各算了一次，所以不会漏算。
''',
),
dict(
q=r'''
甲、乙、丙三人中只有一人打碎了花瓶。甲说：“是乙打碎的。”乙说：“不是我。”丙说：“不是我。”已知三人中只有一个人说了真话。是谁打碎的？
''',
think=r'''
假设法，分别假设打碎花瓶的是甲、乙、丙，看真话的人数是否恰好为 1。
假设是甲：甲说“是乙”——假；乙说“不是我”——真；丙说“不是我”——真。两句真话，不符合。
假设是乙：甲“是乙”——真；乙“不是我”——假；丙“不是我”——真。两句真话，不符合。
假设是丙：甲“是乙”——假；乙“不是我”——真；丙“不是我”——假。只有一句真话，符合。
所以是丙打碎的，说真话的是乙。
''',
a=r'''
是**丙**打碎的。

逐一假设：

| 假设打碎的人 | 甲“是乙” | 乙“不是我” | 丙“不是我” | 真话数 |
|---|---|---|---|---|
| 甲 | 假 | 真 | 真 | 2 |
| 乙 | 真 | 假 | 真 | 2 |
| 丙 | 假 | 真 | 假 | **1** |

只有“丙打碎”这种情况下恰好一人说真话，说真话的是乙。
''',
),
dict(
q=r'''
农夫要带一只狼、一只羊和一筐白菜过河。船很小，每次农夫只能带一样东西。农夫不在时，狼会吃羊，羊会吃白菜。怎样才能全部安全过河？
''',
think=r'''
危险组合：狼+羊无人看管，羊+白菜无人看管。狼和白菜在一起没事。
第一步只能带羊（带狼则羊吃白菜，带白菜则狼吃羊）。
1. 带羊过去。左岸：狼、白菜（安全）。右岸：羊。
2. 空手回来。
3. 带狼过去（或白菜）。右岸：羊、狼——农夫在，安全；但农夫要回去，羊和狼不能单独留下。
4. 所以把羊带回来。左岸：羊、白菜，农夫在；右岸：狼。
5. 把羊留在左岸，带白菜过去。右岸：狼、白菜，安全。
6. 空手回来。
7. 带羊过去。全部到达。
共 7 次渡河。对称的解法是第 3 步带白菜、第 5 步带狼。
''',
a=r'''
关键在于：**羊不能和狼或白菜单独留在一起**，而狼和白菜在一起是安全的。所以第一趟必须带羊，中途还要把羊带回来一次。

| 步骤 | 农夫的动作 | 左岸 | 右岸 |
|---|---|---|---|
| 1 | 带羊过河 | 狼、白菜 | 羊 |
| 2 | 独自返回 | 狼、白菜 | 羊 |
| 3 | 带狼过河 | 白菜 | 狼、羊 |
| 4 | **带羊返回** | 羊、白菜 | 狼 |
| 5 | 带白菜过河 | 羊 | 狼、白菜 |
| 6 | 独自返回 | 羊 | 狼、白菜 |
| 7 | 带羊过河 | — | 狼、羊、白菜 |

每一步农夫离开时，留下的组合都是安全的。共需渡河 7 次。第 3 步也可以先带白菜、第 5 步再带狼，这是另一种对称的解法。
''',
),
dict(
q=r'''
估算一下：上海一天大概要消耗多少个鸡蛋？
''',
think=r'''
费米估算。上海常住人口约 2500 万（近年大约 2480 万左右，取 2500 万方便计算）。
每人每天吃几个鸡蛋？中国人均鸡蛋消费量比较高。按人均一年大约 20 公斤左右的禽蛋消费？不太确定，换个方式：很多人早餐吃一个鸡蛋，有些人不吃，再加上菜里、糕点里的鸡蛋。平均每人每天 0.5–1 个。取 0.7 个。
家庭直接消费：2500 万 × 0.7 ≈ 1750 万个。
还有餐饮、食品加工（蛋糕、面包、蛋挞、面条）、外来游客和流动人口。加 20%–30%，约 2100 万–2300 万个。
用重量换算一下：一个鸡蛋约 50–60 克，2000 万个约 1100 吨。
答案量级：一两千万个，约两千万个。说明假设，指出误差可能在一倍以内。
''',
a=r'''
粗略估计：**每天大约 2000 万个鸡蛋**，合理范围在 1000 万到 3000 万个之间。

**估算过程**

| 步骤 | 假设 | 结果 |
|---|---|---|
| 人口 | 上海常住人口约 2500 万 | 2500 万人 |
| 人均直接消费 | 有人早餐吃一个，有人不吃，加上做菜用的，平均每人每天约 0.7 个 | 约 1750 万个 |
| 间接消费 | 餐馆、食堂、面包蛋糕、食品加工，以及游客和流动人口，再加 20%–30% | 约 2100 万–2300 万个 |

取整约 **2000 万个/天**。按每个鸡蛋 55 克左右算，相当于每天一千多吨。

**最不确定的假设**是人均每天吃多少个鸡蛋：如果是 0.5 个，结果会少三成左右；如果是 1 个，结果会多四成左右。这类估算的意义不在于精确数字，而是用清楚的假设把答案的数量级定下来。如果想更准确，可以查全国人均禽蛋消费量的统计数据，再按上海的人口换算。
''',
),
dict(
q=r'''
下面这段 JavaScript 输出什么？为什么？

```js
console.log(0.1 + 0.2 === 0.3);
console.log((0.1 + 0.2).toFixed(2) === "0.30");
```
''',
think=r'''
浮点数。0.1 和 0.2 在二进制里无法精确表示，相加得 0.30000000000000004，不等于 0.3 的双精度表示，所以第一行 false。
第二行 toFixed(2) 得到字符串 "0.30"，和 "0.30" 比较为 true。
''',
a=r'''
输出：

```text
false
true
```

**第一行**：JavaScript 的数字是 IEEE 754 双精度浮点数。0.1 和 0.2 在二进制中都是无限循环小数，只能近似存储，相加后得到 `0.30000000000000004`，和 `0.3` 的近似值不相等，所以是 `false`。

**第二行**：`toFixed(2)` 把结果四舍五入成两位小数的**字符串** `"0.30"`，和 `"0.30"` 比较，结果为 `true`。

**实际开发中怎么比较小数**：

- 比较差值是否足够小：`Math.abs(a - b) < Number.EPSILON`（或者根据业务需要选一个容差）；
- 涉及金额时，用**整数分**来计算，或者使用专门的十进制库，避免浮点误差。
''',
),
dict(
q=r'''
我在北京工作三年了，现在收到一个杭州的 offer，工资高 20%，但要离开朋友圈子，女朋友还在北京。帮我理一理思路。
''',
think=r'''
这是一个人生决策，不能替用户做决定，而是帮他梳理维度。
关键因素：
1. 感情：女朋友在北京。这可能是最重要的因素。她的态度？能否一起去杭州？异地能否接受、多久？
2. 职业：20% 的涨薪是否是主要吸引力？新工作的平台、成长、行业前景。杭州在互联网、电商方面机会多。北京的发展前景如何，当前公司能否涨薪？
3. 经济：生活成本。杭州房价和北京相比，一般来说杭州略低，但不同区域差别大。20% 的工资在扣除搬家、租房成本后，实际的可支配收入变化多少。
4. 生活：朋友圈、城市喜好、气候、离家远近。
5. 可逆性：如果去了不合适，能否回来？
建议的方法：先和女朋友认真沟通；把因素列出来打分；问自己 5 年后想在哪里；可以和北京的公司谈一下，看能否拿到相近的涨薪（但注意用 offer 谈判的风险）；去杭州实地考察一次。
最后给一个思考的问题：如果工资一样，你还想去杭州吗？这能区分“钱”和“机会”。
''',
a=r'''
这个决定确实不好做，我帮你把需要考虑的方面拆开，最后的选择还是得你自己来。

**1. 感情：可能是最关键的一项**

- 女朋友怎么看？她有没有可能一起去杭州，或者过一段时间再过去？
- 如果要异地，你们能接受多久？有没有明确的“结束异地”的计划？
- 建议**在做决定之前先和她认真聊一次**，而不是决定之后再通知她。

**2. 职业：20% 涨薪之外，还看什么**

- 新工作的平台、岗位、团队、行业前景，是否比现在更有成长空间？
- 如果只看钱，20% 的涨幅可以尝试和现在的公司谈一谈（注意拿 offer 谈判有风险，要想清楚被拒绝后自己是否真的愿意走）。
- 问自己一个问题：**如果工资一样，我还想去杭州吗？**如果答案是“想”，说明吸引你的是机会本身；如果是“不想”，那你主要在为钱做决定。

**3. 经济账**

- 把搬家、租房、往返北京探望女朋友和朋友的交通费算进去，实际多出来的收入可能比 20% 少。
- 两个城市的房租和生活成本可以具体查一下你可能住的区域。

**4. 生活**

- 三年积累的朋友圈，到了新城市需要重新建立，这个过程通常要一两年。
- 你对杭州的城市氛围、气候、离老家的距离有什么感觉？如果还没去过，可以先去实地待两天。

**5. 可逆性**

- 如果去了发现不合适，回北京容易吗？一般来说，工作上的选择可逆性较高，感情上的影响可能更难挽回。

**一个整理思路的方法**

把上面的因素列成表，给每一项按重要程度打个权重，再分别给“去杭州”和“留北京”打分。分数本身不重要，重要的是在打分的过程中，你会发现自己真正在意的是什么。
''',
),
dict(
q=r'''
有 8 个外观完全一样的小球，其中一个比其他的重一点。用天平最少称几次能找出这个重球？怎么称？
''',
think=r'''
每次称有三种结果（左重、右重、平衡），所以称 k 次最多区分 3^k 种情况。8 种情况 → 3^1 = 3 < 8 ≤ 9 = 3^2，所以至少 2 次，且 2 次可能做到。
方案：分成 3、3、2。
第一次：3 vs 3。
- 平衡：重球在剩下的 2 个中，第二次把这两个放上去比，重的那个就是。
- 不平衡：重球在重的那 3 个中。第二次从这 3 个里取 2 个比：不平衡则重的是；平衡则剩下那个是。
共 2 次。
''',
a=r'''
**最少 2 次。**

**为什么至少 2 次**：天平每称一次有三种结果（左重、右重、平衡），称一次最多区分 3 种情况，而重球有 8 种可能的位置，所以一次不够；称两次最多能区分 3 × 3 = 9 种情况，8 ≤ 9，所以两次有可能做到。

**具体方法**：把 8 个球分成 3、3、2 三组。

**第一次**：两组 3 个的分别放在天平两边。

- **平衡**：重球在剩下的 2 个中。**第二次**把这 2 个放在天平两边，重的那个就是。
- **不平衡**：重球在较重的那一组 3 个里。**第二次**从这 3 个中任取 2 个放上天平：
  - 不平衡：重的那个就是；
  - 平衡：没有称的那个就是。

关键是每次称都尽量把可能的情况**平均分成三份**，这样才能充分利用“平衡”这个结果。
''',
),
dict(
q=r'''
2024 年 2 月有几个星期四？
''',
think=r'''
2024 年是闰年，2 月有 29 天。2024 年 2 月 1 日是星期几？2024 年 1 月 1 日是星期一。1 月有 31 天，31 = 4×7 + 3，所以 2 月 1 日是星期一 + 3 = 星期四。
29 天 = 4 周 + 1 天，多出的那一天是 2 月 29 日，和 2 月 1 日同为星期四。所以星期四有 5 个：1、8、15、22、29 日。
''',
a=r'''
**5 个**：2 月 1 日、8 日、15 日、22 日、29 日。

推理过程：2024 年是闰年，2 月有 29 天，也就是 4 周零 1 天，所以有一个星期几会出现 5 次，就是 2 月 1 日那天对应的星期几。2024 年 1 月 1 日是星期一，1 月有 31 天（4 周零 3 天），所以 2 月 1 日是星期四。因此星期四出现了 5 次。
''',
),
dict(
q=r'''
一个水池，单开进水管 6 小时注满，单开排水管 9 小时放空。如果两个管子同时打开，多少小时能把空池注满？
''',
think=r'''
进水效率 1/6 池/时，排水效率 1/9 池/时，同时开净效率 1/6 − 1/9 = 3/18 − 2/18 = 1/18。所以 18 小时注满。
检验：18 小时进水 3 池，排水 2 池，净 1 池。对。
''',
a=r'''
**18 小时。**

把一池水看作单位“1”：

- 进水管每小时注入 $\frac{1}{6}$ 池；
- 排水管每小时排出 $\frac{1}{9}$ 池；
- 同时打开，每小时净注入 $\frac{1}{6} - \frac{1}{9} = \frac{3}{18} - \frac{2}{18} = \frac{1}{18}$ 池。

所以注满需要 $1 \div \frac{1}{18} = 18$ 小时。

检验：18 小时里进水管注入 3 池，排水管排出 2 池，正好净得 1 池。
''',
),
dict(
q=r'''
为什么冬天摸铁栏杆比摸木头栏杆感觉冷得多？它们的温度不是一样的吗？
''',
think=r'''
同一环境里，铁和木头的温度确实差不多，都等于环境温度。感觉冷不冷，取决于热量从手流走的速度，而不是物体本身的温度。
铁的导热系数远大于木头（铁大约几十 W/(m·K)，木头约 0.1–0.2），手接触铁时，热量迅速被传导走，接触面的温度很快降低，皮肤的感受器感觉“很冷”。木头导热差，接触面很快被手捂热，热量流失慢，所以感觉不那么冷。
还可以提一下：夏天在太阳下，铁栏杆摸起来更烫，同样的道理（热量快速流进手里）。
极寒时舌头粘在铁杆上：导热快，舌头表面水分迅速冻结。
''',
a=r'''
你的判断是对的：在同一个地方放了很久的铁栏杆和木头栏杆，**温度基本一样**，都接近气温。

我们感觉到的“冷”，其实不是物体的温度，而是**热量从手上流走的速度**。

- **铁的导热能力很强**（导热系数大约是木头的几百倍）。手一碰到铁，热量会被迅速传走，手和铁接触的那一层皮肤温度一下子降下来，感受器就报告“很冷”。
- **木头的导热能力很差**。手接触木头后，接触面很快被手捂热，热量流失得很慢，所以感觉没那么冷。

同样的道理也能解释反过来的情况：夏天太阳晒过的铁栏杆摸起来比木头烫得多，因为热量会迅速流进手里。

一个相关的提醒：在极寒天气里不要用舌头去舔铁栏杆。铁会迅速带走舌头表面的热量，唾液瞬间结冰，舌头就可能被粘住。
''',
),
dict(
q=r'''
Prove that in any group of 6 people, there are either 3 who all know each other or 3 who are all strangers to each other.
''',
think=r'''
This is the classic R(3,3) = 6 Ramsey result. Model: 6 vertices, each pair joined by an edge coloured red (know each other) or blue (strangers). Need a monochromatic triangle.
Pick any person P. P has 5 relationships with the other five. By pigeonhole, at least 3 of those 5 edges have the same colour (5 = 2 + 2 + 1, so one colour gets at least ceil(5/2) = 3).
Say WLOG P knows at least 3 people: A, B, C. (The stranger case is symmetric with colours swapped.)
Now look at A, B, C among themselves.
- If any two of them know each other, say A and B, then P, A, B all know each other: triangle of acquaintances.
- If none of them know each other, then A, B, C are mutual strangers: triangle of strangers.
Either way we're done.
Is 6 tight? With 5 people, arrange them in a pentagon: neighbours know each other, non-neighbours are strangers. Any 3 of the 5 include at least one adjacent pair and one non-adjacent pair... need to check: a triangle of acquaintances would need 3 mutually adjacent vertices in a 5-cycle, impossible. A triangle of strangers needs 3 mutually non-adjacent vertices in the 5-cycle; the non-adjacency graph of C5 is also a C5 (the pentagram), so also impossible. So 5 is not enough; 6 is the minimum.
''',
a=r'''
Think of the 6 people as points, and for every pair draw a line that is **red** if they know each other and **blue** if they're strangers. We need to show there's a triangle with all three sides the same colour.

**Proof.**

1. Pick any person $P$. $P$ has a relationship with each of the other 5 people. With only two colours, at least 3 of those 5 lines share a colour (if each colour had at most 2, there would be at most 4 lines). Suppose 3 are red, i.e. $P$ knows $A$, $B$ and $C$. (If 3 are blue, the same argument works with the colours swapped.)
2. Now look at the three lines among $A$, $B$, $C$:
   - If **any** of them is red, say $A$ knows $B$, then $P$, $A$, $B$ all know each other.
   - If **none** is red, then $A$, $B$, $C$ are three mutual strangers.

Either way we get 3 mutual acquaintances or 3 mutual strangers. ∎

**Why 6 and not 5.** With 5 people it can fail: seat them around a table so each person knows only their two neighbours. No three people are all neighbours of each other, and no three are all non-neighbours (the "non-neighbour" relation also forms a 5-cycle, the pentagram). So 6 is the smallest group size that guarantees it; in Ramsey theory this is written $R(3,3) = 6$.
''',
),
dict(
q=r'''
Three friends share an apartment with rooms of 16, 12 and 10 square metres. Rent is $2,400 a month. The biggest room has a private bathroom. How should we split the rent fairly?
''',
think=r'''
There's no single "correct" answer; give a principled method and numbers.
Common approach: split into a shared portion (common areas: kitchen, living room, which everyone uses equally) and a private portion proportional to room size, plus a premium for the private bathroom.
Let's say 40% of rent is for shared space: 960, split equally = 320 each.
Remaining 60% = 1440 split by area: total 38 m². Per m² = 1440/38 = 37.89.
16 m²: 606.32; 12 m²: 454.74; 10 m²: 378.95.
Bathroom premium: maybe $100/month, paid by big room, credited to the other two ($50 each).
Totals: Big: 320 + 606.32 + 100 = 1026.32. Medium: 320 + 454.74 − 50 = 724.74. Small: 320 + 378.95 − 50 = 648.95. Sum: 1026.32 + 724.74 + 648.95 = 2400.01 → rounding; adjust by a cent. Let me round to whole dollars: 1026, 725, 649 = 2400. 
Alternative: auction/bidding method (envy-free): each states how much they'd pay for each room; assign rooms to maximize total bids and adjust. Mention briefly as the method when people value rooms differently.
Also mention other features: windows, noise, closet, and that agreeing up front matters more than precision.
''',
a=r'''
There's no single correct split, but a common, defensible approach is: **share common space equally, split private space by size, and add a premium for extras like the private bathroom.**

**Step 1: shared part (kitchen, living room, hallway).** Everyone uses it equally. Say 40% of the rent: $960, which is **$320 each**.

**Step 2: private part by room size.** The other 60% ($1,440) is divided by floor area. Total area is 16 + 12 + 10 = 38 m², so about $37.89 per m²:

| room | area | private share |
|---|---|---|
| Big | 16 m² | $606.32 |
| Medium | 12 m² | $454.74 |
| Small | 10 m² | $378.95 |

**Step 3: bathroom premium.** Agree on what a private bathroom is worth, say $100/month. The big room pays it, and it's credited equally to the other two ($50 each).

**Result (rounded to whole dollars):**

| room | shared | private | bathroom | **total** |
|---|---:|---:|---:|---:|
| Big (16 m² + bath) | $320 | $606 | +$100 | **$1,026** |
| Medium (12 m²) | $320 | $455 | −$50 | **$725** |
| Small (10 m²) | $320 | $379 | −$50 | **$649** |
| **Sum** | | | | **$2,400** |

The 40/60 split and the $100 premium are judgement calls; adjust them together until everyone says "that seems fair".

**If you can't agree on the numbers**, try a bidding approach: each person privately writes down what they'd be willing to pay for each room (each person's three amounts adding up to $2,400). Give each room to the person who values it most, in a way that maximises the total, and set the rents so nobody would prefer to swap. Free online "rent division" calculators implement this, and it handles things like noise, light or closet space that square metres don't capture.
''',
),
]
