"""thinking category, programmatic part: puzzles whose reasoning traces are generated alongside a
brute-force solution (knights and knaves, seating orders, calendar arithmetic, inclusion-exclusion,
age problems). The trace walks through the same checks the solver performed."""

from __future__ import annotations

import datetime as dt
import itertools
import math

from .common import asst, sample, user

EN_NAMES = ["Ava", "Ben", "Cleo", "Dev", "Elif", "Femi", "Gus", "Hana", "Ivo", "Jia", "Kofi", "Lena"]
ZH_NAMES = ["甲", "乙", "丙"]
WEEKDAYS_EN = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
WEEKDAYS_ZH = ["星期一", "星期二", "星期三", "星期四", "星期五", "星期六", "星期日"]
MONTHS_EN = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"]

# ---------------------------------------------------------------- knights and knaves


def _kk_eval(stmt, assign):
    kind = stmt[0]
    if kind == "knave":
        return not assign[stmt[1]]
    if kind == "knight":
        return assign[stmt[1]]
    if kind == "same":
        return assign[stmt[1]] == assign[stmt[2]]
    if kind == "diff":
        return assign[stmt[1]] != assign[stmt[2]]
    if kind == "atleast1knave":
        return not all(assign)
    if kind == "exactly1knight":
        return sum(assign) == 1
    if kind == "allknaves":
        return not any(assign)
    raise ValueError(kind)


def _kk_text(stmt, names, speaker, lang):
    k = stmt[0]

    def nm(i):
        if i == speaker:
            return "I" if lang == "en" else "我"
        return names[i]

    if lang == "en":
        if k == "knave":
            return f"{nm(stmt[1])} {'am' if stmt[1] == speaker else 'is'} a knave."
        if k == "knight":
            return f"{nm(stmt[1])} {'am' if stmt[1] == speaker else 'is'} a knight."
        if k == "same":
            a, b = nm(stmt[1]), nm(stmt[2])
            return f"{a} and {b} are the same kind." if speaker not in stmt[1:] else f"{b if a == 'I' else a} and I are the same kind."
        if k == "diff":
            a, b = nm(stmt[1]), nm(stmt[2])
            return f"{a} and {b} are different kinds." if speaker not in stmt[1:] else f"{b if a == 'I' else a} and I are different kinds."
        if k == "atleast1knave":
            return "At least one of us is a knave."
        if k == "exactly1knight":
            return "Exactly one of us is a knight."
        if k == "allknaves":
            return "All three of us are knaves."
    else:
        if k == "knave":
            return f"{nm(stmt[1])}是说谎者。"
        if k == "knight":
            return f"{nm(stmt[1])}是诚实者。"
        if k == "same":
            return f"{nm(stmt[1])}和{nm(stmt[2])}是同一类人。"
        if k == "diff":
            return f"{nm(stmt[1])}和{nm(stmt[2])}不是同一类人。"
        if k == "atleast1knave":
            return "我们三个人中至少有一个说谎者。"
        if k == "exactly1knight":
            return "我们三个人中恰好有一个诚实者。"
        if k == "allknaves":
            return "我们三个都是说谎者。"
    raise ValueError(k)


def _kk_random_stmt(rng, speaker):
    others = [i for i in range(3) if i != speaker]
    kind = rng.choice(["knave", "knave", "knight", "same", "diff", "atleast1knave", "exactly1knight", "allknaves"])
    if kind in ("knave", "knight"):
        return (kind, rng.choice(others))
    if kind in ("same", "diff"):
        a, b = rng.sample(range(3), 2)
        return (kind, min(a, b), max(a, b))
    return (kind,)


def kk_puzzle(rng, lang):
    while True:
        stmts = [_kk_random_stmt(rng, s) for s in range(3)]
        sols = []
        for assign in itertools.product([True, False], repeat=3):
            if all(_kk_eval(stmts[s], assign) == assign[s] for s in range(3)):
                sols.append(assign)
        if len(sols) == 1:
            break
    sol = sols[0]
    names = rng.sample(EN_NAMES, 3) if lang == "en" else ZH_NAMES
    lines = [f"- {names[s]}: \"{_kk_text(stmts[s], names, s, lang)}\"" if lang == "en" else f"- {names[s]}说：“{_kk_text(stmts[s], names, s, lang)}”" for s in range(3)]
    if lang == "en":
        q = ("On an island, knights always tell the truth and knaves always lie. You meet three inhabitants, "
             f"{names[0]}, {names[1]} and {names[2]}. They say:\n\n" + "\n".join(lines) + "\n\nWho is a knight and who is a knave?")
        tr = ["Three people, each a knight (K) or a knave (N): 8 combinations. I'll check each one: a combination works only if every "
              "knight's statement is true and every knave's statement is false."]
        for assign in itertools.product([True, False], repeat=3):
            label = ", ".join(f"{names[i]}={'K' if assign[i] else 'N'}" for i in range(3))
            bad = None
            for s in range(3):
                truth = _kk_eval(stmts[s], assign)
                if truth != assign[s]:
                    bad = (s, truth)
                    break
            if bad:
                s, truth = bad
                who = "a knight" if assign[s] else "a knave"
                tr.append(f"{label}: {names[s]}'s statement would be {'true' if truth else 'false'}, but {names[s]} is {who}. Contradiction.")
            else:
                tr.append(f"{label}: " + "; ".join(f"{names[s]}'s statement is {'true' if _kk_eval(stmts[s], assign) else 'false'} and {names[s]} is {'a knight' if assign[s] else 'a knave'}" for s in range(3)) + ". Consistent!")
        tr.append("Only one combination survives, so the answer is unique.")
        kn = [names[i] for i in range(3) if sol[i]]
        kv = [names[i] for i in range(3) if not sol[i]]
        ans = (f"**Knights:** {', '.join(kn) if kn else 'none'}  \n**Knaves:** {', '.join(kv) if kv else 'none'}\n\n"
               "Check against each statement:\n\n"
               + "\n".join(f"- {names[s]} says \"{_kk_text(stmts[s], names, s, 'en')}\" This is {'true' if _kk_eval(stmts[s], sol) else 'false'}, "
                           f"which fits {names[s]} being a {'knight' if sol[s] else 'knave'}." for s in range(3))
               + "\n\nI checked all eight possible combinations; every other one leads to someone telling the truth while being a knave or lying while being a knight, so this is the only solution.")
        return q, "\n\n".join(tr), ans
    q = ("某个岛上有两类人：诚实者永远说真话，说谎者永远说假话。你遇到了甲、乙、丙三个人，他们分别说：\n\n"
         + "\n".join(lines) + "\n\n请判断每个人是诚实者还是说谎者。")
    tr = ["三个人，每人两种可能，一共 8 种组合。逐一检查：一种组合成立，当且仅当诚实者说的话为真、说谎者说的话为假。"]
    for assign in itertools.product([True, False], repeat=3):
        label = "，".join(f"{names[i]}{'诚' if assign[i] else '谎'}" for i in range(3))
        bad = None
        for s in range(3):
            truth = _kk_eval(stmts[s], assign)
            if truth != assign[s]:
                bad = (s, truth)
                break
        if bad:
            s, truth = bad
            tr.append(f"{label}：{names[s]}的话为{'真' if truth else '假'}，但{names[s]}是{'诚实者' if assign[s] else '说谎者'}，矛盾。")
        else:
            tr.append(f"{label}：三个人的话分别为" + "、".join('真' if _kk_eval(stmts[s], assign) else '假' for s in range(3)) + "，与身份完全吻合，成立。")
    tr.append("只有一种组合成立，答案唯一。")
    ans = ("**结论**：" + "，".join(f"{names[i]}是{'诚实者' if sol[i] else '说谎者'}" for i in range(3)) + "。\n\n**验证**：\n\n"
           + "\n".join(f"- {names[s]}说“{_kk_text(stmts[s], names, s, 'zh')}”，这句话为{'真' if _kk_eval(stmts[s], sol) else '假'}，"
                       f"符合{names[s]}是{'诚实者' if sol[s] else '说谎者'}。" for s in range(3))
           + "\n\n其余 7 种组合都会出现“诚实者说假话”或“说谎者说真话”的矛盾，所以这是唯一解。")
    return q, "\n".join(tr), ans


# ---------------------------------------------------------------- seating order

SEAT_CLUES = ["left_of_adjacent", "not_end", "seat", "somewhere_left", "not_adjacent", "end"]


def _seat_check(clue, perm):
    pos = {p: i for i, p in enumerate(perm)}
    k = clue[0]
    if k == "left_of_adjacent":
        return pos[clue[1]] + 1 == pos[clue[2]]
    if k == "not_end":
        return 0 < pos[clue[1]] < len(perm) - 1
    if k == "end":
        return pos[clue[1]] in (0, len(perm) - 1)
    if k == "seat":
        return pos[clue[1]] == clue[2]
    if k == "somewhere_left":
        return pos[clue[1]] < pos[clue[2]]
    if k == "not_adjacent":
        return abs(pos[clue[1]] - pos[clue[2]]) > 1
    raise ValueError(k)


def _seat_text(clue, lang):
    k = clue[0]
    if lang == "en":
        return {
            "left_of_adjacent": lambda: f"{clue[1]} sits immediately to the left of {clue[2]}.",
            "not_end": lambda: f"{clue[1]} does not sit at either end.",
            "end": lambda: f"{clue[1]} sits at one of the ends.",
            "seat": lambda: f"{clue[1]} sits in seat {clue[2] + 1}.",
            "somewhere_left": lambda: f"{clue[1]} sits somewhere to the left of {clue[2]}.",
            "not_adjacent": lambda: f"{clue[1]} and {clue[2]} do not sit next to each other.",
        }[k]()
    return {
        "left_of_adjacent": lambda: f"{clue[1]}紧挨着坐在{clue[2]}的左边。",
        "not_end": lambda: f"{clue[1]}不坐在两端。",
        "end": lambda: f"{clue[1]}坐在某一端。",
        "seat": lambda: f"{clue[1]}坐在第 {clue[2] + 1} 个座位。",
        "somewhere_left": lambda: f"{clue[1]}坐在{clue[2]}左边的某个位置（不一定相邻）。",
        "not_adjacent": lambda: f"{clue[1]}和{clue[2]}不相邻。",
    }[k]()


def seating_puzzle(rng, lang):
    while True:
        res = _seating_try(rng, lang)
        if res is not None:
            return res


def _seating_try(rng, lang):
    n = rng.choice([4, 5])
    people = rng.sample(EN_NAMES if lang == "en" else ["小王", "小李", "小张", "小陈", "小赵", "小刘", "小周"], n)
    sol = people[:]
    rng.shuffle(sol)
    perms = list(itertools.permutations(people))
    clues = []
    remaining = perms
    guard = 0
    while len(remaining) > 1 and guard < 200:
        guard += 1
        k = rng.choice(SEAT_CLUES)
        a, b = rng.sample(people, 2)
        if k in ("not_end", "end"):
            c = (k, a)
        elif k == "seat":
            if len([x for x in clues if x[0] == "seat"]) >= 1:
                continue
            c = (k, a, sol.index(a))
        else:
            c = (k, a, b)
        if not _seat_check(c, sol) or c in clues:
            continue
        nxt = [p for p in remaining if _seat_check(c, p)]
        if len(nxt) == len(remaining):
            continue
        clues.append(c)
        remaining = nxt
    if len(remaining) != 1:
        return None
    # drop redundant clues (keep puzzle minimal-ish)
    i = 0
    while i < len(clues):
        trial = clues[:i] + clues[i + 1:]
        if len([p for p in perms if all(_seat_check(c, p) for c in trial)]) == 1:
            clues = trial
        else:
            i += 1
    rng.shuffle(clues)
    # trace: apply clues one at a time
    cand = perms
    tr = []
    if lang == "en":
        q = (f"{n} friends, {', '.join(people[:-1])} and {people[-1]}, sit in a row of {n} seats numbered 1 to {n} from left to right.\n\n"
             + "\n".join(f"{i + 1}. {_seat_text(c, 'en')}" for i, c in enumerate(clues)) + "\n\nWhat is the seating order?")
        tr.append(f"There are {math.factorial(n)} possible orders. Apply the clues one at a time and keep only orders that satisfy them.")
        for i, c in enumerate(clues):
            cand = [p for p in cand if _seat_check(c, p)]
            line = f"Clue {i + 1} ({_seat_text(c, 'en')[:-1]}): {len(cand)} order{'s' if len(cand) != 1 else ''} left."
            if len(cand) <= 4:
                line += (" It is: " if len(cand) == 1 else " They are: ") + "; ".join(" ".join(p) for p in cand) + "."
            tr.append(line)
        tr.append(f"Exactly one order remains: {' '.join(sol)}. Let me re-check it against every clue: " + " ".join(f"clue {i + 1} {'ok' if _seat_check(c, sol) else 'FAILS'};" for i, c in enumerate(clues)) + " all satisfied.")
        ans = ("**Seating order (seat 1 → seat " + str(n) + "):** " + " – ".join(sol) + "\n\n"
               + "\n".join(f"- Clue {i + 1}: {_seat_text(c, 'en')} ✓" for i, c in enumerate(clues))
               + "\n\nWorking through the clues eliminates every other arrangement, so this order is the unique solution.")
        return q, "\n".join(tr), ans
    q = (f"{'、'.join(people)}共 {n} 人坐成一排，座位从左到右编号 1 到 {n}。已知：\n\n"
         + "\n".join(f"{i + 1}. {_seat_text(c, 'zh')}" for i, c in enumerate(clues)) + "\n\n请问他们的座位顺序是怎样的？")
    tr.append(f"一共有 {math.factorial(n)} 种排法。依次用每条线索筛选，只保留满足条件的排法。")
    for i, c in enumerate(clues):
        cand = [p for p in cand if _seat_check(c, p)]
        line = f"线索 {i + 1}（{_seat_text(c, 'zh')[:-1]}）：剩下 {len(cand)} 种。"
        if len(cand) <= 4:
            line += ("即：" if len(cand) == 1 else "分别是：") + "；".join("、".join(p) for p in cand) + "。"
        tr.append(line)
    tr.append(f"最后只剩一种：{'、'.join(sol)}。再逐条核对一遍，全部满足。")
    ans = ("**座位顺序（从 1 号到 " + str(n) + " 号）**：" + " → ".join(sol) + "\n\n"
           + "\n".join(f"- 线索 {i + 1}：{_seat_text(c, 'zh')} ✓" for i, c in enumerate(clues))
           + "\n\n依次应用这些线索后，其他排法都被排除，所以这是唯一的答案。")
    return q, "\n".join(tr), ans


# ---------------------------------------------------------------- calendar


def _month_len(y, m):
    return (dt.date(y + (m == 12), m % 12 + 1, 1) - dt.date(y, m, 1)).days


def weekday_puzzle(rng, lang):
    y = rng.choice([2023, 2024, 2025, 2026, 2027, 2028])
    d1 = dt.date(y, rng.randint(1, 6), rng.randint(1, 28))
    d2 = dt.date(y, rng.randint(d1.month + 1, 12), rng.randint(1, 28))
    w1 = d1.weekday()
    leap = (y % 4 == 0 and y % 100 != 0) or y % 400 == 0
    rest = _month_len(y, d1.month) - d1.day
    mids = [(m, _month_len(y, m)) for m in range(d1.month + 1, d2.month)]
    total = rest + sum(l for _, l in mids) + d2.day
    assert total == (d2 - d1).days
    w2 = (w1 + total) % 7
    assert w2 == d2.weekday()
    if lang == "en":
        q = f"{MONTHS_EN[d1.month - 1]} {d1.day}, {y} is a {WEEKDAYS_EN[w1]}. What day of the week is {MONTHS_EN[d2.month - 1]} {d2.day}, {y}?"
        tr = [f"Count the days from {MONTHS_EN[d1.month - 1]} {d1.day} to {MONTHS_EN[d2.month - 1]} {d2.day}, then take the remainder mod 7."]
        if d1.month <= 2 < d2.month or d1.month == 2:
            tr.append(f"Is {y} a leap year? {y} {'is' if leap else 'is not'} divisible by 4" + (" (and not a century year)" if leap else "") + f", so February has {29 if leap else 28} days.")
        tr.append(f"Rest of {MONTHS_EN[d1.month - 1]}: {_month_len(y, d1.month)} - {d1.day} = {rest} days.")
        if mids:
            tr.append("Full months in between: " + " + ".join(f"{MONTHS_EN[m - 1][:3]} {l}" for m, l in mids) + f" = {sum(l for _, l in mids)}.")
        tr.append(f"Then {d2.day} days into {MONTHS_EN[d2.month - 1]}.")
        tr.append(f"Total = {rest} + {sum(l for _, l in mids)} + {d2.day} = {total} days. {total} mod 7 = {total % 7}.")
        tr.append(f"{WEEKDAYS_EN[w1]} + {total % 7} days → {WEEKDAYS_EN[w2]}.")
        ans = (f"**{WEEKDAYS_EN[w2]}.**\n\nFrom {MONTHS_EN[d1.month - 1]} {d1.day} to {MONTHS_EN[d2.month - 1]} {d2.day} is {total} days "
               f"({rest} left in {MONTHS_EN[d1.month - 1]}" + (f", {sum(l for _, l in mids)} in the months between" if mids else "") + f", plus {d2.day}). "
               f"Since {total} = 7 × {total // 7} + {total % 7}, the weekday moves forward {total % 7} from {WEEKDAYS_EN[w1]}, giving {WEEKDAYS_EN[w2]}.")
        return q, "\n".join(tr), ans
    q = f"已知 {y} 年 {d1.month} 月 {d1.day} 日是{WEEKDAYS_ZH[w1]}，那么 {y} 年 {d2.month} 月 {d2.day} 日是星期几？"
    tr = [f"算两个日期之间相差多少天，再除以 7 看余数。"]
    if d1.month <= 2 < d2.month or d1.month == 2:
        tr.append(f"{y} 年{'是' if leap else '不是'}闰年，2 月有 {29 if leap else 28} 天。")
    tr.append(f"{d1.month} 月剩下：{_month_len(y, d1.month)} − {d1.day} = {rest} 天。")
    if mids:
        tr.append("中间的整月：" + " + ".join(f"{m} 月 {l} 天" for m, l in mids) + f" = {sum(l for _, l in mids)} 天。")
    tr.append(f"再加上 {d2.month} 月的 {d2.day} 天，共 {total} 天。{total} ÷ 7 = {total // 7} 余 {total % 7}。")
    tr.append(f"{WEEKDAYS_ZH[w1]}往后推 {total % 7} 天是{WEEKDAYS_ZH[w2]}。")
    ans = (f"**{WEEKDAYS_ZH[w2]}**。\n\n两个日期相差 {total} 天，{total} = 7 × {total // 7} + {total % 7}，"
           f"所以从{WEEKDAYS_ZH[w1]}往后推 {total % 7} 天，就是{WEEKDAYS_ZH[w2]}。")
    return q, "\n".join(tr), ans


# ---------------------------------------------------------------- inclusion-exclusion


def incl_excl(rng, lang):
    while True:
        a, b, c = rng.sample([2, 3, 4, 5, 6, 7, 9, 10, 11], 3)
        if math.gcd(a, b) == 1 or rng.random() < 0.4:
            break
    N = rng.choice([100, 200, 500, 1000, 2024])
    lab = math.lcm(a, b)
    ab_or = N // a + N // b - N // lab
    lac, lbc, labc = math.lcm(a, c), math.lcm(b, c), math.lcm(a, b, c)
    with_c = N // lac + N // lbc - N // labc
    answer = ab_or - with_c
    brute = sum(1 for x in range(1, N + 1) if (x % a == 0 or x % b == 0) and x % c != 0)
    assert brute == answer
    if lang == "en":
        q = f"How many integers from 1 to {N} are divisible by {a} or {b}, but not by {c}?"
        tr = (f"Inclusion–exclusion.\n"
              f"Divisible by {a}: floor({N}/{a}) = {N // a}. Divisible by {b}: floor({N}/{b}) = {N // b}. Both means divisible by lcm({a},{b}) = {lab}: {N // lab}.\n"
              f"So divisible by {a} or {b}: {N // a} + {N // b} - {N // lab} = {ab_or}.\n"
              f"Now remove those among them that are also divisible by {c}. Those are divisible by lcm({a},{c}) = {lac} or by lcm({b},{c}) = {lbc}. "
              f"Counts: {N // lac} and {N // lbc}; both means divisible by lcm({a},{b},{c}) = {labc}: {N // labc}. So {N // lac} + {N // lbc} - {N // labc} = {with_c}.\n"
              f"Answer {ab_or} - {with_c} = {answer}.\n"
              + (f"Careful: the overlap of {a} and {b} is multiples of lcm = {lab}, not {a * b}." if lab != a * b else f"{a} and {b} are coprime, so their lcm is just {a * b}."))
        ans = (f"**{answer}**\n\n"
               f"1. Divisible by {a} or {b}: $\\lfloor {N}/{a} \\rfloor + \\lfloor {N}/{b} \\rfloor - \\lfloor {N}/{lab} \\rfloor = {N // a} + {N // b} - {N // lab} = {ab_or}$.\n"
               f"2. Of those, the ones also divisible by {c} are multiples of {lac} or {lbc}: ${N // lac} + {N // lbc} - {N // labc} = {with_c}$ "
               f"(subtracting multiples of {labc}, counted twice).\n"
               f"3. Remove them: {ab_or} − {with_c} = **{answer}**.\n\n"
               f"Note the overlaps use least common multiples" + (f" (e.g. lcm({a}, {b}) = {lab}, not {a}·{b} = {a * b})" if lab != a * b else "") + ".")
        return q, tr, ans
    q = f"在 1 到 {N} 的整数中，能被 {a} 或 {b} 整除、但不能被 {c} 整除的数有多少个？"
    tr = (f"容斥原理。能被 {a} 整除的有 {N // a} 个，能被 {b} 整除的有 {N // b} 个，同时能被两者整除即能被 {lab} 整除的有 {N // lab} 个。"
          f"所以能被 {a} 或 {b} 整除的有 {N // a} + {N // b} − {N // lab} = {ab_or} 个。\n"
          f"其中还能被 {c} 整除的：能被 {lac} 或 {lbc} 整除，{N // lac} + {N // lbc} − {N // labc} = {with_c} 个。\n"
          f"相减得 {answer}。")
    ans = (f"**{answer} 个**。\n\n"
           f"1. 能被 {a} 或 {b} 整除：{N // a} + {N // b} − {N // lab} = {ab_or}（{lab} 是 {a} 和 {b} 的最小公倍数）；\n"
           f"2. 其中同时能被 {c} 整除的：{N // lac} + {N // lbc} − {N // labc} = {with_c}；\n"
           f"3. 所求为 {ab_or} − {with_c} = {answer}。")
    return q, tr, ans


# ---------------------------------------------------------------- ages


def _cx(c):
    return {1: "x", -1: "-x"}.get(c, f"{c}x")


def ages(rng, lang):
    while True:
        b = rng.randint(3, 15)
        k = rng.randint(2, 5)
        n = rng.randint(2, 20)
        a = k * b
        if (a + n) % (b + n) == 0 and (a + n) // (b + n) >= 2:
            m = (a + n) // (b + n)
            break
    if lang == "en":
        role, c = rng.choice([("mother", "her son"), ("father", "his daughter"), ("aunt", "her niece"), ("grandfather", "his grandson")])
        art = "An" if role[0] in "aeiou" else "A"
        q = f"{art} {role} is {k} times as old as {c}. In {n} years, the {role} will be {m} times as old as {c}. How old are they now?"
        tr = (f"Let the child's age be x. Parent: {k}x. In {n} years: {k}x + {n} = {m}(x + {n}).\n"
              f"{k}x + {n} = {m}x + {m * n} → {_cx(k - m)} = {m * n - n} → x = {b}.\n"
              f"Parent {a}. Check: in {n} years, {a + n} and {b + n}; {a + n}/{b + n} = {m}. Good.")
        ans = (f"Let the younger person's current age be $x$, so the older one is ${k}x$.\n\n"
               f"In {n} years: ${k}x + {n} = {m}(x + {n})$\n\n"
               f"${k}x + {n} = {m}x + {m * n}$, so ${_cx(k - m)} = {m * n - n}$ and $x = {b}$.\n\n"
               f"**Now: the child is {b} and the older person is {a}.**\n\n"
               f"Check: in {n} years they'll be {b + n} and {a + n}, and {a + n} = {m} × {b + n} ✓")
        return q, tr, ans
    q = f"今年爸爸的年龄是儿子的 {k} 倍，{n} 年后爸爸的年龄是儿子的 {m} 倍。爸爸和儿子今年各多少岁？"
    tr = f"设儿子 x 岁，爸爸 {k}x 岁。{k}x + {n} = {m}(x + {n})，{_cx(k - m)} = {m * n - n}，x = {b}，爸爸 {a}。检验：{n} 年后 {a + n} 和 {b + n}，正好 {m} 倍。"
    ans = (f"设儿子今年 $x$ 岁，则爸爸今年 ${k}x$ 岁。\n\n{n} 年后：${k}x + {n} = {m}(x + {n})$\n\n"
           f"展开得 ${k}x + {n} = {m}x + {m * n}$，所以 ${_cx(k - m)} = {m * n - n}$，$x = {b}$。\n\n"
           f"**儿子今年 {b} 岁，爸爸今年 {a} 岁。**\n\n检验：{n} 年后儿子 {b + n} 岁，爸爸 {a + n} 岁，{a + n} ÷ {b + n} = {m}，符合题意。")
    return q, tr, ans


PLAN = [(kk_puzzle, "en"), (kk_puzzle, "en"), (kk_puzzle, "zh"), (kk_puzzle, "zh"),
        (seating_puzzle, "en"), (seating_puzzle, "en"), (seating_puzzle, "zh"),
        (weekday_puzzle, "en"), (weekday_puzzle, "en"), (weekday_puzzle, "zh"),
        (incl_excl, "en"), (incl_excl, "en"), (incl_excl, "zh"),
        (ages, "en"), (ages, "zh")]


def build(rng) -> list[dict]:
    out = []
    for fn, lang in PLAN:
        q, tr, ans = fn(rng, lang)
        out.append(sample("thinking", [user(q), asst(ans, tr)]))
    return out
