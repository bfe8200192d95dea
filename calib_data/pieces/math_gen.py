"""Math category: parameterised problems whose worked solutions are computed from the parameters
(exact arithmetic with Fraction / Decimal), in English and Chinese, plus hand-written ones in
math_hand.py. Every number in a solution comes from the same computation as the final answer."""

from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction

from .common import asst, sample, sys_, user

NAMES_EN = ["Maya", "Tomás", "Aisha", "Kenji", "Olga", "Sipho", "Priya", "Lucas", "Fatima", "Noah", "Ingrid", "Rahul"]
NAMES_ZH = ["小王", "李娜", "张伟", "陈静", "刘洋", "赵磊", "王芳", "孙悦", "周杰", "吴敏"]


def fr(x: Fraction) -> str:
    x = Fraction(x)
    return str(x.numerator) if x.denominator == 1 else f"{x.numerator}/{x.denominator}"


def tex(x: Fraction) -> str:
    x = Fraction(x)
    if x.denominator == 1:
        return str(x.numerator)
    sign = "-" if x < 0 else ""
    return f"{sign}\\frac{{{abs(x.numerator)}}}{{{x.denominator}}}"


def dec(x, places=2) -> str:
    """Round half-up to a fixed number of decimal places."""
    q = Decimal(1).scaleb(-places)
    v = Decimal(x.numerator) / Decimal(x.denominator) if isinstance(x, Fraction) else Decimal(str(x))
    return str(v.quantize(q, rounding=ROUND_HALF_UP))


def exact(x: Decimal) -> str:
    """Exact decimal text without trailing zeros (at least 2 places)."""
    s = f"{x:f}"
    if "." in s:
        s = s.rstrip("0")
        whole, frac = s.split(".")
        s = whole + "." + frac.ljust(2, "0")
    return s


def par(x) -> str:
    """Parenthesise negative numbers: 3 -> '3', -3 -> '(-3)'."""
    return f"({fr(x)})" if x < 0 else fr(x)


def ptex(x) -> str:
    return f"\\left({tex(x)}\\right)" if x < 0 else tex(x)


def coef_x(c) -> str:
    return {1: "x", -1: "-x"}.get(c, f"{fr(c)}x")


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def factor_term(r: int) -> str:
    if r == 0:
        return "x"
    return f"(x - {r})" if r > 0 else f"(x + {-r})"


def money(x: Decimal) -> str:
    return str(x.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


def signed(n, first=False) -> str:
    """Format a coefficient term for display: ' + 3', ' - 3' (or '-3' first)."""
    n = Fraction(n)
    if first:
        return fr(n)
    return f" + {fr(n)}" if n >= 0 else f" - {fr(-n)}"


def poly_str(coeffs: list[int], var="x") -> str:
    """coeffs highest degree first, e.g. [2, -3, 1] -> 2x^2 - 3x + 1"""
    deg = len(coeffs) - 1
    parts = []
    for i, c in enumerate(coeffs):
        p = deg - i
        if c == 0:
            continue
        mag = abs(c)
        if p == 0:
            body = str(mag)
        else:
            coef = "" if mag == 1 else str(mag)
            body = coef + var + (f"^{p}" if p > 1 else "")
        if not parts:
            parts.append(("-" if c < 0 else "") + body)
        else:
            parts.append((" - " if c < 0 else " + ") + body)
    return "".join(parts) if parts else "0"


# ------------------------------------------------------------------ generators
# each returns (question, think, answer)


def g_shopping(rng, lang):
    items_en = [("notebook", "notebooks", Decimal("3.80")), ("pen", "pens", Decimal("1.25")), ("backpack", "backpacks", Decimal("34.90")),
                ("calculator", "calculators", Decimal("12.50")), ("water bottle", "water bottles", Decimal("8.75")), ("folder", "folders", Decimal("0.95"))]
    items_zh = [("笔记本", Decimal("6.80")), ("中性笔", Decimal("2.50")), ("书包", Decimal("129.00")), ("计算器", Decimal("45.50")), ("水杯", Decimal("28.00")), ("文件夹", Decimal("3.20"))]
    k = rng.choice([2, 3])
    disc = rng.choice([10, 15, 20, 25])
    if lang == "en":
        picks = rng.sample(items_en, k)
        qty = [rng.randint(2, 6) if p[2] < 10 else rng.randint(1, 2) for p in picks]
        tax = rng.choice([Decimal("6"), Decimal("7.5"), Decimal("8"), Decimal("8.25")])
        name = rng.choice(NAMES_EN)
        lines = [(q, p, q * p[2]) for q, p in zip(qty, picks)]
        subtotal = sum(l[2] for l in lines)
        discount = (subtotal * disc / 100).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
        after = subtotal - discount
        taxamt = (after * tax / 100).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
        total = after + taxamt
        desc = ", ".join(f"{q} {p[1] if q > 1 else p[0]} at ${p[2]} each" for q, p, _ in lines)
        qtext = (f"{name} buys {desc}. The store takes {disc}% off the whole purchase, and then a sales tax of {tax}% "
                 f"is added to the discounted amount. How much does {name} pay?")
        think = (f"Subtotal first: " + " + ".join(f"{q}*{p[2]}={l}" for q, p, l in lines) + f", sum {subtotal}. "
                 f"Discount {disc}% of {subtotal} = {discount}. After discount {after}. Tax {tax}% of {after} = {taxamt} after rounding to cents. Total {total}.")
        rows = "\n".join(f"| {p[0]} | {q} | ${p[2]} | ${money(l)} |" for q, p, l in lines)
        ans = (f"**Step 1: subtotal.**\n\n| item | qty | unit price | line total |\n|---|---:|---:|---:|\n{rows}\n\n"
               f"Subtotal = " + " + ".join(f"${money(l)}" for _, _, l in lines) + f" = **${money(subtotal)}**.\n\n"
               f"**Step 2: discount.** {disc}% of ${money(subtotal)} = ${money(subtotal)} × {Decimal(disc) / 100} = ${money(discount)}.\n"
               f"Discounted price: ${money(subtotal)} − ${money(discount)} = ${money(after)}.\n\n"
               f"**Step 3: tax.** {tax}% of ${money(after)} = ${money(after)} × {tax / 100} = ${exact(after * tax / 100)}"
               + (f", which rounds to ${money(taxamt)}" if after * tax / 100 != taxamt else "") + ".\n\n"
               f"**Total:** ${money(after)} + ${money(taxamt)} = **${money(total)}**.\n\n"
               f"(The order matters: the tax is applied to the discounted amount, as the problem states.)")
        return qtext, think, ans
    picks = rng.sample(items_zh, k)
    qty = [rng.randint(2, 6) if p[1] < 20 else rng.randint(1, 2) for p in picks]
    name = rng.choice(NAMES_ZH)
    lines = [(q, p, q * p[1]) for q, p in zip(qty, picks)]
    subtotal = sum(l[2] for l in lines)
    discount = (subtotal * disc / 100).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
    after = subtotal - discount
    zhe = {10: "九折", 15: "八五折", 20: "八折", 25: "七五折"}[disc]
    desc = "，".join(f"{q} 个{p[0]}（每个 {p[1]} 元）" for q, p, _ in lines)
    qtext = f"{name}买了{desc}。商店全场打{zhe}，{name}一共要付多少钱？"
    think = "先算原价：" + "，".join(f"{q}×{p[1]}={l}" for q, p, l in lines) + f"，合计 {subtotal}。{zhe}就是付 {100 - disc}%，{subtotal}×{Decimal(100 - disc) / 100}={after}。"
    ans = ("**第一步：算原价。**\n\n" + "\n".join(f"- {p[0]}：{q} × {p[1]} = {money(l)} 元" for q, p, l in lines)
           + f"\n\n原价合计：" + " + ".join(money(l) for _, _, l in lines) + f" = {money(subtotal)} 元。\n\n"
           f"**第二步：打折。** {zhe}表示按原价的 {100 - disc}% 付款，也就是优惠 {disc}%。\n\n"
           f"优惠金额：{money(subtotal)} × {disc}% = {money(discount)} 元\n\n"
           f"实付：{money(subtotal)} − {money(discount)} = **{money(after)} 元**。\n\n"
           f"也可以直接算：{money(subtotal)} × {Decimal(100 - disc) / 100} = {money(after)} 元，结果一致。")
    return qtext, think, ans


def g_linear(rng, lang):
    while True:
        a, c = rng.randint(2, 9), rng.randint(-6, 8)
        x = Fraction(rng.randint(-9, 12), rng.choice([1, 1, 1, 2, 3]))
        b = rng.randint(-20, 20)
        d = (a - c) * x + b  # a x + b = c x + d
        if a != c and b != 0 and d.denominator == 1 and d != 0:
            break
    lhs = f"{a}x{signed(b)}"
    if c == 0:
        rhs = fr(d)
    else:
        rhs = {1: "x", -1: "-x"}.get(c, f"{c}x") + signed(d)
    diff = a - c
    rhs_const = d - b
    if lang == "en":
        q = f"Solve for x: {lhs} = {rhs}"
        think = f"Move x terms left: ({a} - ({c}))x = {fr(d)} - ({b}) → {coef_x(diff)} = {fr(rhs_const)} → x = {fr(x)}. Check: left {fr(a * x + b)}, right {fr(c * x + d)}."
        step1 = (f"1. {'Subtract' if c > 0 else 'Add'} {coef_x(abs(c))} {'from' if c > 0 else 'to'} both sides: {coef_x(diff)}{signed(b)} = {fr(d)}.\n"
                 if c != 0 else f"1. The x terms are already on the left: {coef_x(diff)}{signed(b)} = {fr(d)}.\n")
        ans = (f"Collect the x terms on one side and the constants on the other.\n\n"
               + step1 +
               f"2. {'Subtract' if b > 0 else 'Add'} {abs(b)} {'from' if b > 0 else 'to'} both sides: {coef_x(diff)} = {fr(d)} {'−' if b > 0 else '+'} {abs(b)} = {fr(rhs_const)}.\n"
               f"3. Divide by {diff}: x = {fr(rhs_const)} / {par(diff)} = **{fr(x)}**.\n\n"
               f"Check: left side {a}·({fr(x)}){signed(b)} = {fr(a * x + b)}; right side {c}·({fr(x)}){signed(d)} = {fr(c * x + d)}. Both sides agree.")
        return q, think, ans
    q = f"解方程：{lhs} = {rhs}"
    think = f"移项：{coef_x(diff)} = {fr(rhs_const)}，x = {fr(x)}。代回检验两边都等于 {fr(a * x + b)}。"
    ans = (f"把含 x 的项移到左边，常数移到右边：\n\n"
           f"$$({a} - ({c}))x = {fr(d)} - ({b})$$\n\n"
           f"$${coef_x(diff)} = {fr(rhs_const)}$$\n\n"
           f"$$x = {tex(x)}$$\n\n"
           f"**检验**：左边 = {a} × ({fr(x)}){signed(b)} = {fr(a * x + b)}，右边 = {c} × ({fr(x)}){signed(d)} = {fr(c * x + d)}，两边相等。\n\n"
           f"所以方程的解是 $x = {tex(x)}$。")
    return q, think, ans


def g_system(rng, lang):
    while True:
        x, y = rng.randint(-6, 9), rng.randint(-6, 9)
        a1, b1, a2, b2 = rng.randint(1, 7), rng.choice([-5, -4, -3, -2, -1, 1, 2, 3, 4, 5]), rng.randint(1, 7), rng.choice([-5, -3, -2, -1, 1, 2, 3, 5])
        det = a1 * b2 - a2 * b1
        if det != 0 and a1 != a2:
            break
    c1, c2 = a1 * x + b1 * y, a2 * x + b2 * y

    def eq(a, b, c):
        return f"{'' if a == 1 else a}x {'+' if b > 0 else '-'} {'' if abs(b) == 1 else abs(b)}y = {c}"

    # elimination of x: multiply eq1 by a2, eq2 by a1, subtract
    m1, m2 = a2, a1
    by = b1 * m1 - b2 * m2
    cy = c1 * m1 - c2 * m2
    if lang == "en":
        q = f"Solve the system of equations:\n\n{eq(a1, b1, c1)}\n{eq(a2, b2, c2)}"
        think = f"Eliminate x: multiply first by {m1}, second by {m2}, subtract: {by}y = {cy}, y = {y}. Back-substitute: {a1}x = {c1} - ({b1})({y}) = {c1 - b1 * y}, x = {x}. Determinant {det} nonzero so unique."
        ans = (f"Use elimination. Label the equations (1) and (2).\n\n"
               f"Multiply (1) by {m1} and (2) by {m2} so the x coefficients match:\n\n"
               f"- {m1}×(1): {a1 * m1}x {'+' if b1 * m1 >= 0 else '-'} {abs(b1 * m1)}y = {c1 * m1}\n"
               f"- {m2}×(2): {a2 * m2}x {'+' if b2 * m2 >= 0 else '-'} {abs(b2 * m2)}y = {c2 * m2}\n\n"
               f"Subtract the second from the first: ({b1 * m1} − ({b2 * m2}))y = {c1 * m1} − ({c2 * m2}), so {by}y = {cy} and **y = {y}**.\n\n"
               f"Substitute into (1): {a1}x {'+' if b1 >= 0 else '-'} {abs(b1)}·({y}) = {c1}, so {a1}x = {c1 - b1 * y} and **x = {x}**.\n\n"
               f"Check in (2): {a2}·({x}) {'+' if b2 >= 0 else '-'} {abs(b2)}·({y}) = {a2 * x + b2 * y} ✓\n\n"
               f"Solution: (x, y) = ({x}, {y}).")
        return q, think, ans
    q = f"解方程组：\n\n$$\\begin{{cases}} {eq(a1, b1, c1)} \\\\ {eq(a2, b2, c2)} \\end{{cases}}$$"
    think = f"加减消元消去 x：①×{m1} − ②×{m2} 得 {by}y = {cy}，y = {y}，代回① 得 x = {x}。"
    ans = (f"用加减消元法，把两个方程记为 ① 和 ②。\n\n"
           f"① × {m1}：{a1 * m1}x {'+' if b1 * m1 >= 0 else '-'} {abs(b1 * m1)}y = {c1 * m1}\n\n"
           f"② × {m2}：{a2 * m2}x {'+' if b2 * m2 >= 0 else '-'} {abs(b2 * m2)}y = {c2 * m2}\n\n"
           f"两式相减，消去 x：{by}y = {cy}，所以 **y = {y}**。\n\n"
           f"把 y = {y} 代入 ①：{a1}x = {c1} − ({b1}) × ({y}) = {c1 - b1 * y}，所以 **x = {x}**。\n\n"
           f"检验 ②：{a2} × ({x}) + ({b2}) × ({y}) = {a2 * x + b2 * y}，成立。\n\n"
           f"方程组的解为 $x = {x},\\ y = {y}$。")
    return q, think, ans


def g_quadratic(rng, lang):
    while True:
        r1, r2 = rng.randint(-9, 9), rng.randint(-9, 9)
        k = rng.choice([1, 1, 1, 2, 3])
        if r1 != 0 or r2 != 0:
            break
    a, b, c = k, -k * (r1 + r2), k * r1 * r2
    D = b * b - 4 * a * c
    sq = math.isqrt(D)
    poly = poly_str([a, b, c])
    lo, hi = sorted((r1, r2))
    if lang == "en":
        q = f"Solve {poly} = 0."
        think = f"Discriminant b^2-4ac = ({b})^2 - 4*{a}*({c}) = {D}, sqrt {sq}. Roots ({-b} ± {sq})/{2 * a} = {lo}, {hi}. Factor: {'' if k == 1 else k}{factor_term(r1)}{factor_term(r2)}."
        roots = f"x = {lo} or x = {hi}" if lo != hi else f"x = {lo} (a double root)"
        ans = (f"Use the quadratic formula with a = {a}, b = {b}, c = {c}.\n\n"
               f"Discriminant: $\\Delta = b^2 - 4ac = ({b})^2 - 4\\cdot {a}\\cdot ({c}) = {b * b} - ({4 * a * c}) = {D}$"
               + (f", and $\\sqrt{{{D}}} = {sq}$." if D > 0 else ", so there is exactly one (repeated) root.") + "\n\n"
               f"$$x = \\frac{{-b \\pm \\sqrt{{\\Delta}}}}{{2a}} = \\frac{{{-b} \\pm {sq}}}{{{2 * a}}}$$\n\n"
               f"which gives {roots}.\n\n"
               f"Cross-check by factoring: {poly} = {'' if k == 1 else str(k)}{factor_term(r1)}{factor_term(r2)}. "
               f"Sum of roots {r1 + r2} = −b/a ✓, product {r1 * r2} = c/a ✓.")
        return q, think, ans
    q = f"求方程 ${poly} = 0$ 的解。"
    think = f"判别式 {D}，开方 {sq}，两根 {lo} 和 {hi}。韦达定理检验：和 {r1 + r2}，积 {r1 * r2}。"
    roots = f"$x_1 = {lo},\\ x_2 = {hi}$" if lo != hi else f"$x_1 = x_2 = {lo}$（重根）"
    ans = (f"这里 $a = {a},\\ b = {b},\\ c = {c}$。\n\n"
           f"**判别式**：$\\Delta = b^2 - 4ac = ({b})^2 - 4 \\times {a} \\times ({c}) = {D}$"
           + ("，大于 0，方程有两个不相等的实数根。" if D > 0 else "，等于 0，方程有两个相等的实数根。") + "\n\n"
           f"**求根公式**：$x = \\dfrac{{-b \\pm \\sqrt{{\\Delta}}}}{{2a}} = \\dfrac{{{-b} \\pm {sq}}}{{{2 * a}}}$\n\n"
           f"所以 {roots}。\n\n"
           f"**检验（韦达定理）**：两根之和 ${r1 + r2} = -\\dfrac{{b}}{{a}}$，两根之积 ${r1 * r2} = \\dfrac{{c}}{{a}}$，都成立。")
    return q, think, ans


def g_balls(rng, lang):
    r, b, g = rng.randint(2, 7), rng.randint(2, 7), rng.randint(1, 5)
    n = r + b + g
    same = Fraction(r * (r - 1) + b * (b - 1) + g * (g - 1), n * (n - 1))
    rb = Fraction(2 * r * b, n * (n - 1))
    total_pairs = n * (n - 1) // 2
    if lang == "en":
        q = (f"A bag contains {r} red, {b} blue and {g} green marbles. Two marbles are drawn at random without replacement. "
             f"What is the probability that (a) both are the same colour, and (b) one is red and one is blue?")
        think = (f"n={n}. Count unordered pairs: C({n},2)={total_pairs}. Same colour: C({r},2)+C({b},2)+C({g},2) = {r * (r - 1) // 2}+{b * (b - 1) // 2}+{g * (g - 1) // 2} = {r * (r - 1) // 2 + b * (b - 1) // 2 + g * (g - 1) // 2}. "
                 f"So {fr(same)}. Red-blue: {r}*{b} = {r * b} pairs → {fr(rb)}.")
        sp = r * (r - 1) // 2 + b * (b - 1) // 2 + g * (g - 1) // 2
        ans = (f"There are {n} marbles, so the number of equally likely unordered pairs is $\\binom{{{n}}}{{2}} = {total_pairs}$.\n\n"
               f"**(a) Same colour.** Count the pairs within each colour:\n\n"
               f"- red: $\\binom{{{r}}}{{2}} = {r * (r - 1) // 2}$\n- blue: $\\binom{{{b}}}{{2}} = {b * (b - 1) // 2}$\n- green: $\\binom{{{g}}}{{2}} = {g * (g - 1) // 2}$\n\n"
               f"Total {sp}, so $P(\\text{{same}}) = \\frac{{{sp}}}{{{total_pairs}}}" + (f" = {tex(same)}" if same.denominator != total_pairs else "") + f" \\approx {dec(same, 3)}$.\n\n"
               f"**(b) One red, one blue.** Choose one red and one blue: ${r} \\times {b} = {r * b}$ pairs, so "
               f"$P = \\frac{{{r * b}}}{{{total_pairs}}}" + (f" = {tex(rb)}" if rb.denominator != total_pairs else "") + f" \\approx {dec(rb, 3)}$.\n\n"
               f"Sanity check for (b) with ordered draws: P(red then blue) + P(blue then red) = "
               f"$\\frac{{{r}}}{{{n}}}\\cdot\\frac{{{b}}}{{{n - 1}}} + \\frac{{{b}}}{{{n}}}\\cdot\\frac{{{r}}}{{{n - 1}}} = {tex(rb)}$, the same answer.")
        return q, think, ans
    q = f"袋子里有 {r} 个红球、{b} 个蓝球和 {g} 个绿球，从中不放回地随机摸出两个球。求：(1) 两个球颜色相同的概率；(2) 一红一蓝的概率。"
    sp = r * (r - 1) // 2 + b * (b - 1) // 2 + g * (g - 1) // 2
    think = f"总数 {n}，C({n},2)={total_pairs}。同色 {sp} 种，概率 {fr(same)}；一红一蓝 {r * b} 种，概率 {fr(rb)}。"
    ans = (f"袋中共有 {n} 个球，任取两个的方法数为 $C_{{{n}}}^2 = {total_pairs}$，每种取法等可能。\n\n"
           f"**(1) 颜色相同**\n\n两个都是红球：$C_{{{r}}}^2 = {r * (r - 1) // 2}$；两个都是蓝球：$C_{{{b}}}^2 = {b * (b - 1) // 2}$；两个都是绿球：$C_{{{g}}}^2 = {g * (g - 1) // 2}$。\n\n"
           f"共 {sp} 种，所以 $P = \\dfrac{{{sp}}}{{{total_pairs}}}" + (f" = {tex(same)}" if same.denominator != total_pairs else "") + "$。\n\n"
           f"**(2) 一红一蓝**\n\n红球选 1 个、蓝球选 1 个：${r} \\times {b} = {r * b}$ 种，所以 $P = \\dfrac{{{r * b}}}{{{total_pairs}}}" + (f" = {tex(rb)}" if rb.denominator != total_pairs else "") + "$。\n\n"
           f"答：(1) ${tex(same)}$；(2) ${tex(rb)}$。")
    return q, think, ans


def g_atleast(rng, lang):
    n = rng.randint(3, 8)
    sides = rng.choice([6, 6, 8, 20])
    p_none = Fraction(sides - 1, sides) ** n
    p = 1 - p_none
    if lang == "en":
        q = f"You roll a fair {sides}-sided die {n} times. What is the probability of getting at least one {sides}?"
        think = f"Complement: no {sides} in {n} rolls = ({sides - 1}/{sides})^{n} = {fr(p_none)}. Answer 1 - that = {fr(p)} ≈ {float(p):.4f}."
        ans = (f"\"At least one\" is easiest through the complement: find the probability of **no** {sides} at all, then subtract from 1.\n\n"
               f"On one roll, P(not {sides}) = {sides - 1}/{sides}. The rolls are independent, so for {n} rolls:\n\n"
               f"$$P(\\text{{no }} {sides}) = \\left(\\frac{{{sides - 1}}}{{{sides}}}\\right)^{{{n}}} = \\frac{{{p_none.numerator}}}{{{p_none.denominator}}}$$\n\n"
               f"$$P(\\text{{at least one }} {sides}) = 1 - \\frac{{{p_none.numerator}}}{{{p_none.denominator}}} = \\frac{{{p.numerator}}}{{{p.denominator}}} \\approx {float(p):.4f}$$\n\n"
               f"So roughly a {float(p) * 100:.1f}% chance. A common mistake is to add {n} × 1/{sides} = {fr(Fraction(n, sides))}; that double-counts outcomes with several {sides}s"
               + (" and can even exceed 1." if n >= sides else ", which is why it overestimates."))
        return q, think, ans
    q = f"把一枚均匀的 {sides} 面骰子连续掷 {n} 次，至少出现一次 {sides} 点的概率是多少？"
    think = f"对立事件：一次都没有 {sides} 点，概率 ({sides - 1}/{sides})^{n} = {fr(p_none)}，所求 1 - {fr(p_none)} = {fr(p)}。"
    ans = (f"“至少一次”用对立事件来算最方便。\n\n"
           f"每次掷出的不是 {sides} 点的概率是 $\\frac{{{sides - 1}}}{{{sides}}}$，{n} 次相互独立，所以一次 {sides} 点都没有的概率是\n\n"
           f"$$\\left(\\frac{{{sides - 1}}}{{{sides}}}\\right)^{{{n}}} = \\frac{{{p_none.numerator}}}{{{p_none.denominator}}}$$\n\n"
           f"因此至少出现一次 {sides} 点的概率为\n\n"
           f"$$1 - \\frac{{{p_none.numerator}}}{{{p_none.denominator}}} = \\frac{{{p.numerator}}}{{{p.denominator}}} \\approx {float(p):.4f}$$\n\n"
           f"约为 {float(p) * 100:.1f}%。注意不能直接用 {n} × $\\frac{{1}}{{{sides}}}$，那样会把出现多次 {sides} 点的情况重复计算。")
    return q, think, ans


def g_binomial(rng, lang):
    n = rng.randint(4, 10)
    k = rng.randint(1, n - 1)
    p = rng.choice([Fraction(1, 2), Fraction(1, 3), Fraction(1, 4), Fraction(2, 5), Fraction(3, 5), Fraction(7, 10)])
    comb = math.comb(n, k)
    prob = comb * p ** k * (1 - p) ** (n - k)
    ctx = rng.choice([
        ("A basketball player makes a free throw with probability {p}, independently each time. In {n} attempts, what is the probability she makes exactly {k}?", "makes"),
        ("Each email in a batch is spam with probability {p}, independently. In a batch of {n} emails, what is the probability that exactly {k} are spam?", "spam"),
        ("A seed germinates with probability {p}. If you plant {n} seeds, what is the probability that exactly {k} germinate?", "germinate"),
    ])
    if lang == "en":
        q = ctx[0].format(p=fr(p), n=n, k=k)
        think = f"Binomial: C({n},{k}) p^{k} (1-p)^{n - k} = {comb} * ({fr(p)})^{k} * ({fr(1 - p)})^{n - k} = {fr(prob)} ≈ {float(prob):.4f}."
        ans = (f"This is a binomial setting: {n} independent trials, each a success with probability p = {fr(p)}.\n\n"
               f"$$P(X = {k}) = \\binom{{{n}}}{{{k}}} p^{{{k}}} (1-p)^{{{n - k}}}$$\n\n"
               f"- $\\binom{{{n}}}{{{k}}} = {comb}$ (ways to choose which {k} trials succeed)\n"
               f"- $p^{{{k}}} = ({fr(p)})^{{{k}}} = {fr(p ** k)}$\n"
               f"- $(1-p)^{{{n - k}}} = ({fr(1 - p)})^{{{n - k}}} = {fr((1 - p) ** (n - k))}$\n\n"
               f"Multiply: ${comb} \\times {tex(p ** k)} \\times {tex((1 - p) ** (n - k))} = {tex(prob)} \\approx {float(prob):.4f}$.\n\n"
               f"So the probability is about **{float(prob) * 100:.2f}%**.")
        return q, think, ans
    q = f"某射手每次射击命中的概率为 {fr(p)}，各次射击相互独立。射击 {n} 次，恰好命中 {k} 次的概率是多少？"
    think = f"二项分布 B({n}, {fr(p)})，P = C({n},{k}) ({fr(p)})^{k} ({fr(1 - p)})^{n - k} = {fr(prob)}。"
    ans = (f"命中次数 X 服从二项分布 $X \\sim B({n}, {tex(p)})$。\n\n"
           f"$$P(X = {k}) = C_{{{n}}}^{{{k}}} \\left({tex(p)}\\right)^{{{k}}} \\left({tex(1 - p)}\\right)^{{{n - k}}}$$\n\n"
           f"其中 $C_{{{n}}}^{{{k}}} = {comb}$，$\\left({tex(p)}\\right)^{{{k}}} = {tex(p ** k)}$，$\\left({tex(1 - p)}\\right)^{{{n - k}}} = {tex((1 - p) ** (n - k))}$。\n\n"
           f"相乘得 $P(X = {k}) = {tex(prob)} \\approx {float(prob):.4f}$。")
    return q, think, ans


def g_committee(rng, lang):
    w, m = rng.randint(3, 7), rng.randint(4, 8)
    k = rng.randint(3, min(5, w + m - 2))
    total = math.comb(w + m, k)
    no_w = math.comb(m, k)
    ans_n = total - no_w
    if lang == "en":
        q = f"A club has {w} women and {m} men. In how many ways can a committee of {k} be chosen if it must include at least one woman?"
        think = f"Total C({w + m},{k}) = {total}. All-men committees C({m},{k}) = {no_w}. Subtract: {ans_n}. Avoid the trap of choosing one woman first then others (overcounts)."
        ans = (f"Count all committees, then remove the ones with no women.\n\n"
               f"- All committees of {k} from {w + m} people: $\\binom{{{w + m}}}{{{k}}} = {total}$\n"
               f"- Committees with only men: $\\binom{{{m}}}{{{k}}} = {no_w}$\n\n"
               f"At least one woman: {total} − {no_w} = **{ans_n}**.\n\n"
               f"Why not \"pick one woman, then any {k - 1} others\" = {w} × $\\binom{{{w + m - 1}}}{{{k - 1}}}$ = {w * math.comb(w + m - 1, k - 1)}? "
               f"That counts a committee with two women twice (once for each woman being \"the chosen one\"), so it overcounts.")
        return q, think, ans
    q = f"一个社团有 {w} 名女生和 {m} 名男生，要选出 {k} 人组成委员会，要求至少有一名女生，共有多少种选法？"
    think = f"总数 C({w + m},{k})={total}，全男生 C({m},{k})={no_w}，相减 {ans_n}。"
    ans = (f"用“总数减去不符合条件的”来算。\n\n"
           f"- 从 {w + m} 人中任选 {k} 人：$C_{{{w + m}}}^{{{k}}} = {total}$\n"
           f"- 全是男生的选法：$C_{{{m}}}^{{{k}}} = {no_w}$\n\n"
           f"所以至少有一名女生的选法有 {total} − {no_w} = **{ans_n}** 种。\n\n"
           f"注意：先选一名女生、再从剩下 {w + m - 1} 人中任选 {k - 1} 人的算法（{w} × {math.comb(w + m - 1, k - 1)} = {w * math.comb(w + m - 1, k - 1)}）会重复计数，是常见错误。")
    return q, think, ans


def g_series(rng, lang):
    if rng.random() < 0.5:
        a1, dlt, n = rng.randint(-5, 20), rng.randint(2, 9), rng.randint(12, 60)
        an = a1 + (n - 1) * dlt
        s = n * (a1 + an) // 2
        if lang == "en":
            q = f"An arithmetic sequence starts {a1}, {a1 + dlt}, {a1 + 2 * dlt}, ... Find the {ordinal(n)} term and the sum of the first {n} terms."
            think = f"d={dlt}. a_n = {a1} + ({n}-1)*{dlt} = {an}. S = n(a1+an)/2 = {n}*({a1}+{an})/2 = {s}."
            ans = (f"The common difference is d = {a1 + dlt} − {par(a1)} = {dlt}.\n\n"
                   f"**{ordinal(n)} term:** $a_n = a_1 + (n-1)d = {a1} + {n - 1} \\cdot {dlt} = {an}$.\n\n"
                   f"**Sum:** $S_n = \\frac{{n(a_1 + a_n)}}{{2}} = \\frac{{{n}({a1} + {an})}}{{2}} = \\frac{{{n * (a1 + an)}}}{{2}} = {s}$.\n\n"
                   f"Where the formula comes from: write the sum forwards and backwards and add the two lines term by term. Every column adds up to $a_1 + a_n = {a1 + an}$, there are {n} columns, and that counts the sum twice, hence the division by 2.")
            return q, think, ans
        q = f"等差数列 {a1}, {a1 + dlt}, {a1 + 2 * dlt}, … 的第 {n} 项是多少？前 {n} 项和是多少？"
        think = f"公差 {dlt}，a_{n} = {an}，S = {s}。"
        ans = (f"公差 $d = {dlt}$。\n\n第 {n} 项：$a_{{{n}}} = a_1 + ({n}-1)d = {a1} + {n - 1} \\times {dlt} = {an}$。\n\n"
               f"前 {n} 项和：$S_{{{n}}} = \\dfrac{{{n}(a_1 + a_{{{n}}})}}{{2}} = \\dfrac{{{n} \\times ({a1} + {an})}}{{2}} = {s}$。")
        return q, think, ans
    a1, r, n = rng.randint(1, 6), rng.choice([2, 3, Fraction(1, 2), Fraction(1, 3), -2]), rng.randint(5, 10)
    s = Fraction(a1) * (1 - Fraction(r) ** n) / (1 - Fraction(r))
    terms = ", ".join(fr(a1 * Fraction(r) ** i) for i in range(3))
    if lang == "en":
        q = f"Find the sum of the first {n} terms of the geometric sequence {terms}, ..."
        think = f"a1={a1}, r={fr(r)}. S = a1(1-r^n)/(1-r) = {a1}(1-({fr(r)})^{n})/(1-{fr(r)}) = {fr(s)}."
        ans = (f"First term $a_1 = {a1}$, ratio $r = {tex(r)}$.\n\n"
               f"$$S_n = a_1\\frac{{1 - r^n}}{{1 - r}} = {a1}\\cdot\\frac{{1 - ({tex(r)})^{{{n}}}}}{{1 - ({tex(r)})}}$$\n\n"
               f"Here $({tex(r)})^{{{n}}} = {tex(Fraction(r) ** n)}$, so $1 - r^n = {tex(1 - Fraction(r) ** n)}$ and $1 - r = {tex(1 - Fraction(r))}$.\n\n"
               f"$$S_{{{n}}} = {a1} \\cdot {tex(1 - Fraction(r) ** n)} \\div {tex(1 - Fraction(r))} = {tex(s)}$$"
               + (f"\n\nAs a decimal, about {float(s):.4f}." if s.denominator != 1 else ""))
        return q, think, ans
    q = f"求等比数列 {terms}, … 的前 {n} 项和。"
    think = f"首项 {a1}，公比 {fr(r)}，S = {fr(s)}。"
    ans = (f"首项 $a_1 = {a1}$，公比 $q = {tex(r)}$（$q \\ne 1$）。\n\n"
           f"$$S_{{{n}}} = \\frac{{a_1(1 - q^{{{n}}})}}{{1 - q}} = \\frac{{{a1}\\left(1 - ({tex(r)})^{{{n}}}\\right)}}{{1 - ({tex(r)})}} = \\frac{{{a1} \\times {tex(1 - Fraction(r) ** n)}}}{{{tex(1 - Fraction(r))}}} = {tex(s)}$$")
    return q, think, ans


def g_compound(rng, lang):
    P = rng.choice([1000, 2500, 5000, 8000, 12000])
    rate = rng.choice([Decimal("3"), Decimal("4.5"), Decimal("5"), Decimal("6")])
    years = rng.randint(2, 10)
    m = rng.choice([1, 4, 12])
    per = rate / 100 / m
    amount = Decimal(P) * (1 + per) ** (m * years)
    amount_r = amount.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
    simple = Decimal(P) * (1 + rate / 100 * years)
    freq = {1: "annually", 4: "quarterly", 12: "monthly"}[m]
    freq_zh = {1: "每年", 4: "每季度", 12: "每月"}[m]
    if lang == "en":
        q = f"${P} is invested at {rate}% annual interest, compounded {freq}. How much is it worth after {years} years? Compare with simple interest."
        think = f"A = P(1 + r/m)^(m t) = {P}(1 + {rate / 100}/{m})^{m * years} = {amount_r}. Simple: {P}(1 + {rate / 100}*{years}) = {simple.quantize(Decimal('0.01'))}."
        ans = (f"Compound interest formula: $A = P\\left(1 + \\frac{{r}}{{m}}\\right)^{{mt}}$ with P = {P}, r = {rate / 100}, m = {m} ({freq}), t = {years}.\n\n"
               f"$$A = {P}\\left(1 + \\frac{{{rate / 100}}}{{{m}}}\\right)^{{{m * years}}} \\approx {amount_r}$$\n\n"
               f"So the investment grows to about **${amount_r:,}**, i.e. ${(amount_r - P):,} of interest.\n\n"
               f"With simple interest (interest only on the original ${P}): ${P} × (1 + {rate / 100} × {years}) = ${simple.quantize(Decimal('0.01')):,}. "
               f"Compounding earns ${(amount_r - simple).quantize(Decimal('0.01')):,} more, because interest from earlier periods also earns interest.")
        return q, think, ans
    q = f"把 {P} 元存入银行，年利率 {rate}%，按{'年' if m == 1 else ('季度' if m == 4 else '月')}复利计息，{years} 年后本息合计多少？和单利相比多多少？"
    think = f"A = {P}(1+{rate / 100}/{m})^{m * years} ≈ {amount_r}；单利 {simple.quantize(Decimal('0.01'))}。"
    ans = (f"复利公式：$A = P\\left(1 + \\dfrac{{r}}{{m}}\\right)^{{mt}}$，其中 P = {P}，r = {rate / 100}，{freq_zh}计息一次即 m = {m}，t = {years}。\n\n"
           f"$$A = {P} \\times \\left(1 + \\frac{{{rate / 100}}}{{{m}}}\\right)^{{{m * years}}} \\approx {amount_r} \\text{{ 元}}$$\n\n"
           f"单利：${P} \\times (1 + {rate / 100} \\times {years}) = {simple.quantize(Decimal('0.01'))}$ 元。\n\n"
           f"复利比单利多 {(amount_r - simple).quantize(Decimal('0.01'))} 元，原因是前面各期产生的利息也在继续生息。")
    return q, think, ans


def g_gcd(rng, lang):
    g = rng.choice([6, 12, 14, 18, 21, 24, 36])
    a, b = g * rng.randint(7, 40), g * rng.randint(3, 30)
    if a == b:
        b += g
    a, b = max(a, b), min(a, b)
    steps = []
    x, y = a, b
    while y:
        steps.append((x, y, x // y, x % y))
        x, y = y, x % y
    gg = x
    lcm = a * b // gg
    if lang == "en":
        q = f"Find gcd({a}, {b}) using the Euclidean algorithm, and then lcm({a}, {b})."
        think = "Euclid: " + "; ".join(f"{p}={qq}*{r_}+{m}" for p, r_, qq, m in steps) + f". gcd={gg}. lcm = {a}*{b}/{gg} = {lcm}."
        ans = ("Repeatedly divide and keep the remainder:\n\n```text\n" + "\n".join(f"{p:>6} = {qq} × {r_} + {m}" for p, r_, qq, m in steps) + "\n```\n\n"
               f"The last non-zero remainder is **{gg}**, so gcd({a}, {b}) = {gg}.\n\n"
               f"For the lcm use $\\operatorname{{lcm}}(a,b) = \\frac{{a \\cdot b}}{{\\gcd(a,b)}} = \\frac{{{a} \\cdot {b}}}{{{gg}}} = {lcm}$.\n\n"
               f"Why it works: any common divisor of two numbers also divides their remainder, so each step keeps the same set of common divisors while the numbers shrink.")
        return q, think, ans
    q = f"用辗转相除法求 {a} 和 {b} 的最大公约数，并求它们的最小公倍数。"
    think = "辗转相除：" + "；".join(f"{p}={qq}×{r_}+{m}" for p, r_, qq, m in steps) + f"。最大公约数 {gg}，最小公倍数 {lcm}。"
    ans = ("辗转相除：\n\n" + "\n".join(f"- {p} = {qq} × {r_} + {m}" for p, r_, qq, m in steps) + "\n\n"
           f"最后一个非零余数是 {gg}，所以 **({a}, {b}) = {gg}**。\n\n"
           f"最小公倍数：$[{a}, {b}] = \\dfrac{{{a} \\times {b}}}{{{gg}}} = {lcm}$。")
    return q, think, ans


def g_lastdigits(rng, lang):
    base = rng.choice([3, 7, 13, 17, 27, 2023, 9, 2])
    e = rng.randint(50, 2025)
    m = rng.choice([10, 10, 100])
    cycle = []
    v = 1
    seen = {}
    # powers base^1, base^2 ... mod m until repeat of value at start of cycle
    k = 1
    while True:
        v = pow(base, k, m)
        if v in seen:
            start = seen[v]
            break
        seen[v] = k
        cycle.append(v)
        k += 1
    period = k - start
    result = pow(base, e, m)
    what = "last digit" if m == 10 else "last two digits"
    pos = (e - start) % period + start
    assert pow(base, pos, m) == result
    if lang == "en":
        q = f"What are the {what} of {base}^{e}?" if m == 100 else f"What is the last digit of {base}^{e}?"
        think = f"Work mod {m}. Powers: " + ", ".join(f"{base}^{i}≡{cycle[i - 1]}" for i in range(1, min(len(cycle), 12) + 1)) + f". Repeats with period {period} from exponent {start}. {e} lands on position {pos} → {result:0{len(str(m)) - 1}d}."
        shown = ", ".join(f"{base}^{i} ≡ {cycle[i - 1]:0{len(str(m)) - 1}d}" for i in range(1, min(len(cycle), 8) + 1)) + (", ..." if len(cycle) > 8 else "")
        ans = (f"We only need {base}^{e} mod {m}. Powers of {base} modulo {m} eventually repeat:\n\n{shown}\n\n"
               f"From exponent {start} on, the pattern repeats every **{period}** steps (since {base}^{start + period} ≡ {base}^{start} mod {m}).\n\n"
               f"Reduce the exponent: {e} is in the same position of the cycle as exponent {pos} "
               f"(because ({e} − {start}) mod {period} = {(e - start) % period}).\n\n"
               f"So {base}^{e} ≡ {base}^{pos} ≡ **{result:0{len(str(m)) - 1}d}** (mod {m}).\n\n"
               f"The {what} of {base}^{e} {'are' if m == 100 else 'is'} {result:0{len(str(m)) - 1}d}.")
        return q, think, ans
    q = f"{base}^{e} 的个位数字是几？" if m == 10 else f"{base}^{e} 的最后两位数字是多少？"
    think = f"模 {m} 下 {base} 的幂从第 {start} 次起以 {period} 为周期循环，{e} 对应第 {pos} 次，结果 {result:0{len(str(m)) - 1}d}。"
    shown = "，".join(f"{base}^{i} ≡ {cycle[i - 1]:0{len(str(m)) - 1}d}" for i in range(1, min(len(cycle), 8) + 1)) + ("，…" if len(cycle) > 8 else "")
    ans = (f"只需求 {base}^{e} 除以 {m} 的余数。依次计算 {base} 的幂模 {m}：\n\n{shown}\n\n"
           f"从 {start} 次方起，余数以 **{period}** 为周期重复。\n\n"
           f"因为 ({e} − {start}) ÷ {period} 的余数是 {(e - start) % period}，所以 {base}^{e} 与 {base}^{pos} 模 {m} 同余，\n\n"
           f"即 {base}^{e} ≡ {result:0{len(str(m)) - 1}d} (mod {m})。\n\n答：{'个位数字是' if m == 10 else '最后两位是'} **{result:0{len(str(m)) - 1}d}**。")
    return q, think, ans


def g_triangle(rng, lang):
    a0, b0, c0 = rng.choice([(3, 4, 5), (5, 12, 13), (8, 15, 17), (7, 24, 25), (20, 21, 29)])
    k = rng.randint(1, 4)
    a, b, c = a0 * k, b0 * k, c0 * k
    area = Fraction(a * b, 2)
    h = Fraction(a * b, c)
    unit = rng.choice(["cm", "m", "in"])
    if lang == "en":
        q = f"A right triangle has legs of length {a} {unit} and {b} {unit}. Find the hypotenuse, the area, and the altitude to the hypotenuse."
        think = f"c = sqrt({a}^2+{b}^2) = sqrt({a * a + b * b}) = {c}. Area {fr(area)}. Altitude h: area = c*h/2 → h = ab/c = {fr(h)}."
        ans = (f"**Hypotenuse** (Pythagoras): $c = \\sqrt{{{a}^2 + {b}^2}} = \\sqrt{{{a * a} + {b * b}}} = \\sqrt{{{c * c}}} = {c}$ {unit}.\n\n"
               f"**Area:** the legs are perpendicular, so they serve as base and height: $A = \\frac{{1}}{{2}} \\cdot {a} \\cdot {b} = {fr(area)}$ {unit}².\n\n"
               f"**Altitude to the hypotenuse:** the same area can be written as $\\frac{{1}}{{2}} c h$, so\n\n"
               f"$$h = \\frac{{2A}}{{c}} = \\frac{{{a} \\cdot {b}}}{{{c}}} = {tex(h)}" + (f" \\approx {float(h):.2f}" if h.denominator != 1 else "") + f"\\ \\text{{{unit}}}$$")
        return q, think, ans
    q = f"直角三角形的两条直角边分别为 {a} 和 {b}，求斜边长、面积，以及斜边上的高。"
    think = f"斜边 {c}，面积 {fr(area)}，高 = {a}×{b}/{c} = {fr(h)}。"
    ans = (f"**斜边**：由勾股定理，$c = \\sqrt{{{a}^2 + {b}^2}} = \\sqrt{{{c * c}}} = {c}$。\n\n"
           f"**面积**：$S = \\dfrac{{1}}{{2}} \\times {a} \\times {b} = {fr(area)}$。\n\n"
           f"**斜边上的高**：面积也等于 $\\dfrac{{1}}{{2}} \\times c \\times h$，所以 $h = \\dfrac{{{a} \\times {b}}}{{{c}}} = {tex(h)}$"
           + (f" ≈ {float(h):.2f}" if h.denominator != 1 else "") + "。")
    return q, think, ans


def g_points(rng, lang):
    while True:
        x1, y1, x2, y2 = (rng.randint(-8, 9) for _ in range(4))
        if x1 != x2 and (x1, y1) != (x2, y2):
            break
    dx, dy = x2 - x1, y2 - y1
    d2 = dx * dx + dy * dy
    slope = Fraction(dy, dx)
    intercept = y1 - slope * x1
    r = math.isqrt(d2)
    dist = str(r) if r * r == d2 else f"\\sqrt{{{d2}}} \\approx {math.sqrt(d2):.3f}"
    # simplify sqrt
    out, inside = 1, d2
    for f_ in range(2, int(math.sqrt(d2)) + 1):
        while inside % (f_ * f_) == 0:
            inside //= f_ * f_
            out *= f_
    if r * r != d2 and out > 1:
        dist = f"\\sqrt{{{d2}}} = {out}\\sqrt{{{inside}}} \\approx {math.sqrt(d2):.3f}"
    mid = (Fraction(x1 + x2, 2), Fraction(y1 + y2, 2))
    sl = {1: "", -1: "-"}.get(slope, tex(slope))
    line = f"y = {sl}x" + ("" if intercept == 0 else (f" + {tex(intercept)}" if intercept > 0 else f" - {tex(-intercept)}"))
    if slope == 0:
        line = f"y = {tex(intercept)}"
    if lang == "en":
        q = f"For the points A({x1}, {y1}) and B({x2}, {y2}), find the distance AB, the midpoint, and the equation of line AB."
        think = f"dx={dx}, dy={dy}. Distance sqrt({d2}). Midpoint ({fr(mid[0])}, {fr(mid[1])}). Slope {fr(slope)}, intercept {fr(intercept)}."
        ans = (f"Let Δx = {x2} − ({x1}) = {dx} and Δy = {y2} − ({y1}) = {dy}.\n\n"
               f"- **Distance:** $AB = \\sqrt{{\\Delta x^2 + \\Delta y^2}} = \\sqrt{{{dx * dx} + {dy * dy}}} = {dist}$\n"
               f"- **Midpoint:** $\\left(\\frac{{{x1} + {par(x2)}}}{{2}}, \\frac{{{y1} + {par(y2)}}}{{2}}\\right) = \\left({tex(mid[0])}, {tex(mid[1])}\\right)$\n"
               f"- **Slope:** $m = \\frac{{\\Delta y}}{{\\Delta x}} = \\frac{{{dy}}}{{{dx}}} = {tex(slope)}$\n"
               f"- **Line:** using point A, $y - ({y1}) = {tex(slope)}(x - ({x1}))$, which simplifies to ${line}$.\n\n"
               f"Check with B: ${tex(slope)} \\cdot ({x2})" + (f" + ({tex(intercept)})" if intercept != 0 else "") + f" = {fr(slope * x2 + intercept)}$ = y_B ✓")
        return q, think, ans
    q = f"已知点 A({x1}, {y1}) 和 B({x2}, {y2})，求线段 AB 的长度、中点坐标以及直线 AB 的方程。"
    think = f"Δx={dx}，Δy={dy}，距离 √{d2}，中点 ({fr(mid[0])}, {fr(mid[1])})，斜率 {fr(slope)}，截距 {fr(intercept)}。"
    ans = (f"**长度**：$|AB| = \\sqrt{{({dx})^2 + ({dy})^2}} = {dist}$\n\n"
           f"**中点**：$\\left(\\dfrac{{{x1} + {par(x2)}}}{{2}}, \\dfrac{{{y1} + {par(y2)}}}{{2}}\\right) = \\left({tex(mid[0])}, {tex(mid[1])}\\right)$\n\n"
           f"**斜率**：$k = \\dfrac{{{dy}}}{{{dx}}} = {tex(slope)}$\n\n"
           f"**直线方程**：由点斜式 $y - ({y1}) = {tex(slope)}(x - ({x1}))$，整理得 ${line}$。")
    return q, think, ans


def g_work(rng, lang):
    a, b = rng.choice([(3, 6), (4, 12), (5, 20), (6, 9), (8, 12), (10, 15), (4, 6), (9, 18), (7, 14)])
    t = Fraction(a * b, a + b)
    hrs = int(t)
    mins = (t - hrs) * 60
    n1, n2 = rng.sample(NAMES_EN, 2)
    if lang == "en":
        q = f"{n1} can paint a fence in {a} hours; {n2} can paint the same fence in {b} hours. How long does it take if they work together?"
        think = f"Rates 1/{a} + 1/{b} = {fr(Fraction(1, a) + Fraction(1, b))} fence/hour. Time = {fr(t)} h."
        tm = f"{hrs} hours" + (f" {fr(mins)} minutes" if mins else "")
        time_txt = f"**{tm}**" if not mins else f"{hrs} h + {fr(t - hrs)} × 60 min = **{tm}**"
        ans = (f"Work with rates (fences per hour):\n\n- {n1}: 1/{a} of the fence per hour\n- {n2}: 1/{b} of the fence per hour\n\n"
               f"Together: $\\frac{{1}}{{{a}}} + \\frac{{1}}{{{b}}} = {tex(Fraction(1, a) + Fraction(1, b))}$ of the fence per hour.\n\n"
               f"Time for one fence: $1 \\div {tex(Fraction(1, a) + Fraction(1, b))} = {tex(t)}$ hours" + (f" = {time_txt}" if mins else "") + ".\n\n"
               f"Sanity check: the answer must be less than {min(a, b)} hours (the faster person alone), and it is.")
        return q, think, ans
    z1, z2 = rng.sample(NAMES_ZH, 2)
    q = f"一项工程，{z1}单独做需要 {a} 天完成，{z2}单独做需要 {b} 天完成。两人合作需要几天完成？"
    think = f"工效和 1/{a}+1/{b} = {fr(Fraction(1, a) + Fraction(1, b))}，时间 {fr(t)} 天。"
    ans = (f"把整个工程看作单位“1”。\n\n{z1}每天完成 $\\frac{{1}}{{{a}}}$，{z2}每天完成 $\\frac{{1}}{{{b}}}$，"
           f"合作每天完成 $\\frac{{1}}{{{a}}} + \\frac{{1}}{{{b}}} = {tex(Fraction(1, a) + Fraction(1, b))}$。\n\n"
           f"所需时间：$1 \\div {tex(Fraction(1, a) + Fraction(1, b))} = {tex(t)}$ 天。\n\n答：两人合作需要 {fr(t)} 天完成。")
    return q, think, ans


def g_percent(rng, lang):
    up, down = rng.choice([10, 20, 25, 30, 50]), rng.choice([10, 20, 25, 40, 50])
    price = rng.choice([80, 120, 200, 250, 400])
    after_up = Fraction(price) * (100 + up) / 100
    final = after_up * (100 - down) / 100
    change = (final - price) / price * 100
    if lang == "en":
        q = f"A jacket costs ${price}. The price is raised by {up}%, and later the new price is reduced by {down}%. What is the final price, and what is the overall percentage change?"
        think = f"{price}*{1 + Fraction(up, 100)} = {fr(after_up)}; *{1 - Fraction(down, 100)} = {fr(final)}. Net factor {fr(final / price)} → {fr(change)}%."
        ans = (f"Percentage changes multiply; they don't add.\n\n"
               f"- After the {up}% increase: ${price} × {float(1 + Fraction(up, 100)):g} = ${dec(after_up)}\n"
               f"- After the {down}% decrease: ${dec(after_up)} × {float(1 - Fraction(down, 100)):g} = **${dec(final)}**\n\n"
               f"Overall factor: {float(1 + Fraction(up, 100)):g} × {float(1 - Fraction(down, 100)):g} = {float(final / price):g}, "
               + (f"so the price {'rose' if change > 0 else 'fell'} by **{abs(float(change)):g}%** overall." if change != 0 else "so the price is back exactly where it started.")
               + (f" (Not {up - down:+d}%, which is what adding the percentages would suggest: the {down}% cut applies to the larger, already-raised price.)" if up != down or change != 0 else ""))
        return q, think, ans
    q = f"一件商品原价 {price} 元，先提价 {up}%，再降价 {down}%，现价是多少？与原价相比变化了百分之几？"
    think = f"{price}×{1 + Fraction(up, 100)}={fr(after_up)}，再×{1 - Fraction(down, 100)}={fr(final)}，变化 {fr(change)}%。"
    ans = (f"提价后：{price} × (1 + {up}%) = {dec(after_up)} 元\n\n"
           f"降价后：{dec(after_up)} × (1 − {down}%) = **{dec(final)} 元**\n\n"
           f"与原价相比：({dec(final)} − {price}) ÷ {price} = {float(change):g}%，"
           + (f"即{'上涨' if change > 0 else '下降'}了 {abs(float(change)):g}%。" if change != 0 else "价格不变。")
           + f"\n\n注意两次变化的基数不同，不能直接用 {up}% − {down}% 来算。")
    return q, think, ans


def g_calculus(rng, lang):
    deg = rng.choice([2, 3, 3])
    coeffs = [rng.choice([1, 2, 3, -1, -2, 4]) if i == 0 else rng.randint(-6, 6) for i in range(deg + 1)]
    a, b = sorted(rng.sample(range(-2, 5), 2))
    dcoeffs = [c * (deg - i) for i, c in enumerate(coeffs[:-1])]
    anti = [Fraction(c, deg - i + 1) for i, c in enumerate(coeffs)]

    def F(x):
        return sum(anti[i] * Fraction(x) ** (deg + 1 - i) for i in range(deg + 1))

    integral = F(b) - F(a)
    p = poly_str(coeffs)
    dp = poly_str(dcoeffs)
    anti_terms = []
    for i, c in enumerate(anti):
        pw = deg + 1 - i
        if c == 0:
            continue
        t = tex(abs(c)) if abs(c) != 1 else ""
        term = f"{t}x^{{{pw}}}" if pw > 1 else f"{t}x"
        anti_terms.append(("-" if c < 0 else "+") + " " + term)
    anti_s = " ".join(anti_terms).lstrip("+ ").strip()
    if anti_s.startswith("- "):
        anti_s = "-" + anti_s[2:]
    if lang == "en":
        q = f"Let f(x) = {p}. Find f'(x), and compute the definite integral of f from {a} to {b}."
        think = f"Power rule term by term: f'(x) = {dp}. Antiderivative F(x) = {anti_s}. F({b}) = {fr(F(b))}, F({a}) = {fr(F(a))}, difference {fr(integral)}."
        ans = (f"**Derivative.** Apply the power rule $\\frac{{d}}{{dx}}x^n = nx^{{n-1}}$ term by term:\n\n$$f'(x) = {dp}$$\n\n"
               f"**Integral.** An antiderivative is\n\n$$F(x) = {anti_s}$$\n\n"
               f"(check: differentiating F gives back f). By the fundamental theorem of calculus,\n\n"
               f"$$\\int_{{{a}}}^{{{b}}} f(x)\\,dx = F({b}) - F({a}) = {tex(F(b))} - \\left({tex(F(a))}\\right) = {tex(integral)}$$"
               + (f"\n\nThat is about {float(integral):.4f}." if integral.denominator != 1 else ""))
        return q, think, ans
    q = f"设 $f(x) = {p}$，求 $f'(x)$，并计算定积分 $\\int_{{{a}}}^{{{b}}} f(x)\\,dx$。"
    think = f"逐项求导得 {dp}；原函数 {anti_s}；F({b})={fr(F(b))}，F({a})={fr(F(a))}，积分 {fr(integral)}。"
    ans = (f"**求导**：逐项使用 $(x^n)' = nx^{{n-1}}$，得\n\n$$f'(x) = {dp}$$\n\n"
           f"**定积分**：取原函数 $F(x) = {anti_s}$，由牛顿—莱布尼茨公式，\n\n"
           f"$$\\int_{{{a}}}^{{{b}}} f(x)\\,dx = F({b}) - F({a}) = {tex(F(b))} - \\left({tex(F(a))}\\right) = {tex(integral)}$$")
    return q, think, ans


def g_expected(rng, lang):
    cost = rng.choice([2, 3, 5])
    prizes = rng.choice([[(1, 20), (4, 5)], [(1, 50), (2, 10), (10, 2)], [(2, 12), (6, 4)]])
    total = rng.choice([36, 50, 100]) if len(prizes) == 3 else rng.choice([20, 36, 40])
    ev = sum(Fraction(k, total) * v for k, v in prizes)
    net = ev - cost
    if lang == "en":
        desc = "; ".join(f"{k} ticket{'s' if k > 1 else ''} win{'s' if k == 1 else ''} ${v}" for k, v in prizes)
        q = f"A charity raffle has {total} tickets, each costing ${cost}. Prizes: {desc}; the rest win nothing. What is the expected net gain of buying one ticket?"
        think = "E[prize] = " + " + ".join(f"{k}/{total}*{v}" for k, v in prizes) + f" = {fr(ev)}. Net = {fr(ev)} - {cost} = {fr(net)}."
        ans = (f"Expected value = sum over outcomes of (value × probability).\n\n| prize | probability | contribution |\n|---:|---:|---:|\n"
               + "\n".join(f"| ${v} | {k}/{total} | ${float(Fraction(k * v, total)):.2f} |" for k, v in prizes)
               + f"\n| $0 | {total - sum(k for k, _ in prizes)}/{total} | $0.00 |\n\n"
               f"Expected prize: {' + '.join(f'${float(Fraction(k * v, total)):.2f}' for k, v in prizes)} = ${float(ev):.2f}.\n\n"
               f"Subtract the ${cost} ticket price: expected net gain = ${float(ev):.2f} − ${cost} = **{'-' if net < 0 else ''}${abs(float(net)):.2f}** per ticket.\n\n"
               + ("On average you lose money, which is how a fundraiser is supposed to work: the organisers keep the difference." if net < 0
                  else ("Positive expected value: this raffle pays out more in prizes than it collects from ticket sales, so it would lose the charity money." if net > 0
                        else "The expected net gain is exactly zero: a fair game.")))
        return q, think, ans
    desc = "，".join(f"{k} 张奖 {v} 元" for k, v in prizes)
    q = f"某抽奖活动共 {total} 张奖券，每张 {cost} 元。其中{desc}，其余不中奖。买一张奖券的期望收益是多少？"
    think = "期望奖金 " + " + ".join(f"{k}/{total}×{v}" for k, v in prizes) + f" = {fr(ev)}，减去 {cost} 得 {fr(net)}。"
    ans = ("设奖金为 X，则\n\n" + "\n".join(f"- P(X = {v}) = {k}/{total}" for k, v in prizes) + f"\n- P(X = 0) = {total - sum(k for k, _ in prizes)}/{total}\n\n"
           f"$E(X) = " + " + ".join(f"{v} \\times \\frac{{{k}}}{{{total}}}" for k, v in prizes) + f" = {tex(ev)}" + (f" \\approx {float(ev):.2f}" if ev.denominator != 1 else "") + "$ 元。\n\n"
           f"扣除票价 {cost} 元，期望收益为 ${tex(ev)} - {cost} = {tex(net)}" + (f" \\approx {float(net):.2f}" if net.denominator != 1 else "") + "$ 元，"
           + ("平均来看每买一张会亏钱。" if net < 0 else ("期望为正，这个抽奖平均来看对参与者有利。" if net > 0 else "期望收益为 0，是一个“公平”的抽奖。")))
    return q, think, ans


def g_base(rng, lang):
    n = rng.randint(100, 5000)
    base = rng.choice([2, 8, 16])
    digits = "0123456789ABCDEF"
    steps = []
    x = n
    while x:
        steps.append((x, x // base, x % base))
        x //= base
    rep = "".join(digits[r] for _, _, r in reversed(steps))
    check = " + ".join(f"{digits.index(ch)}·{base}^{len(rep) - 1 - i}" for i, ch in enumerate(rep) if ch != "0")
    name = {2: "binary", 8: "octal", 16: "hexadecimal"}[base]
    if lang == "en":
        q = f"Convert {n} to {name}."
        think = f"Repeated division by {base}, read remainders bottom-up: {rep}. Verify: {int(rep, base)}."
        ans = (f"Divide by {base} repeatedly and record the remainders:\n\n```text\n"
               + "\n".join(f"{a:>5} ÷ {base} = {q_:>4}  remainder {digits[r]}" for a, q_, r in steps)
               + f"\n```\n\nReading the remainders from bottom to top gives **{rep}** (base {base})"
               + (f", often written `0x{rep}`" if base == 16 else (f", or `0b{rep}` in code" if base == 2 else f", or `0o{rep}` in Python")) + ".\n\n"
               f"Check: {check} = {n} ✓")
        return q, think, ans
    zname = {2: "二进制", 8: "八进制", 16: "十六进制"}[base]
    q = f"把十进制数 {n} 转换成{zname}。"
    think = f"除 {base} 取余，倒序排列得 {rep}。"
    ans = (f"用“除 {base} 取余，逆序排列”的方法：\n\n" + "\n".join(f"- {a} ÷ {base} = {q_} …… {digits[r]}" for a, q_, r in steps)
           + f"\n\n把余数从下往上读，得到 **{rep}**（{zname}）。\n\n验算：{check} = {n}。")
    return q, think, ans


def g_avgspeed(rng, lang):
    v1, v2 = rng.choice([(60, 40), (90, 60), (50, 75), (30, 70), (80, 120), (45, 90)])
    dist = rng.choice([60, 120, 180, 240, 360])
    t1, t2 = Fraction(dist, v1), Fraction(dist, v2)
    avg = Fraction(2 * dist) / (t1 + t2)
    if lang == "en":
        q = f"A car drives {dist} km from town A to town B at {v1} km/h and returns along the same road at {v2} km/h. What is the average speed for the round trip?"
        think = f"Times {fr(t1)} h and {fr(t2)} h; total {fr(t1 + t2)} h for {2 * dist} km; avg {fr(avg)} km/h = harmonic mean 2*{v1}*{v2}/({v1}+{v2})."
        ans = (f"Average speed is total distance divided by total time, not the average of the two speeds.\n\n"
               f"- A → B: {dist} / {v1} = {fr(t1)} h\n- B → A: {dist} / {v2} = {fr(t2)} h\n- Total: {2 * dist} km in {fr(t1 + t2)} h\n\n"
               f"$$\\bar v = \\frac{{{2 * dist}}}{{{tex(t1 + t2)}}} = {tex(avg)}" + (f" \\approx {float(avg):.1f}" if avg.denominator != 1 else "") + "\\text{ km/h}$$\n\n"
               f"This is the harmonic mean $\\frac{{2 v_1 v_2}}{{v_1 + v_2}} = \\frac{{2 \\cdot {v1} \\cdot {v2}}}{{{v1 + v2}}}$, and it doesn't depend on the distance. "
               f"It's below the simple average {fr(Fraction(v1 + v2, 2))} km/h because the car spends more time at the slower speed.")
        return q, think, ans
    q = f"一辆车从甲地到乙地相距 {dist} 千米，去时速度 {v1} 千米/时，沿原路返回时速度 {v2} 千米/时。求往返的平均速度。"
    think = f"去 {fr(t1)} 小时，回 {fr(t2)} 小时，总路程 {2 * dist}，平均 {fr(avg)}。"
    ans = (f"平均速度 = 总路程 ÷ 总时间。\n\n去程用时：{dist} ÷ {v1} = {fr(t1)} 小时；返程用时：{dist} ÷ {v2} = {fr(t2)} 小时。\n\n"
           f"平均速度 = {2 * dist} ÷ ({fr(t1)} + {fr(t2)}) = {fr(avg)}" + (f" ≈ {float(avg):.1f}" if avg.denominator != 1 else "") + " 千米/时。\n\n"
           f"注意不是 ({v1} + {v2}) ÷ 2 = {fr(Fraction(v1 + v2, 2))}，因为慢速行驶的时间更长。")
    return q, think, ans


def g_mixture(rng, lang):
    c1, c2 = rng.choice([(10, 40), (5, 30), (20, 50), (15, 35), (12, 60)])
    target = rng.choice([t for t in range(c1 + 5, c2, 5)])
    total = rng.choice([100, 200, 300, 500])
    # x liters of c1, total-x of c2: c1 x + c2 (T - x) = target T
    x = Fraction((c2 - target) * total, c2 - c1)
    if lang == "en":
        q = f"How many millilitres of a {c1}% saline solution and of a {c2}% saline solution should be mixed to get {total} mL of a {target}% solution?"
        think = f"x mL of {c1}%: {c1}x + {c2}({total}-x) = {target}*{total}. ({c2}-{c1})x = ({c2}-{target})*{total} → x = {fr(x)}; other {fr(total - x)}."
        ans = (f"Let x be the amount of the {c1}% solution; then {total} − x mL is the {c2}% solution. The amount of salt must match:\n\n"
               f"$$0.{c1:02d}x + 0.{c2:02d}({total} - x) = 0.{target:02d} \\cdot {total}$$\n\n"
               f"Multiply by 100: ${c1}x + {c2 * total} - {c2}x = {target * total}$, so ${c2 - c1}x = {(c2 - target) * total}$ and $x = {tex(x)}"
               + (f" \\approx {float(x):.1f}" if x.denominator != 1 else "") + "$.\n\n"
               f"Answer: **{dec(x, 1)} mL of the {c1}% solution** and **{dec(total - x, 1)} mL of the {c2}% solution**.\n\n"
               f"Check: {c1}% of {dec(x, 1)} + {c2}% of {dec(total - x, 1)} = {dec(Fraction(c1, 100) * x, 2)} + {dec(Fraction(c2, 100) * (total - x), 2)} = {dec(Fraction(target * total, 100), 2)}, which is {target}% of {total} ✓")
        return q, think, ans
    q = f"要配制浓度为 {target}% 的盐水 {total} 克，需要浓度为 {c1}% 和 {c2}% 的盐水各多少克？"
    think = f"设 {c1}% 的 x 克：{c1}x + {c2}({total}-x) = {target}×{total}，x = {fr(x)}。"
    ans = (f"设需要 {c1}% 的盐水 x 克，则需要 {c2}% 的盐水 ({total} − x) 克。根据混合前后盐的质量不变：\n\n"
           f"$${c1}\\% \\cdot x + {c2}\\% \\cdot ({total} - x) = {target}\\% \\times {total}$$\n\n"
           f"两边乘以 100：${c1}x + {c2 * total} - {c2}x = {target * total}$，解得 $x = {tex(x)}$"
           + (f" ≈ {float(x):.1f}" if x.denominator != 1 else "") + "。\n\n"
           f"答：需要 {c1}% 的盐水 {dec(x, 1)} 克，{c2}% 的盐水 {dec(total - x, 1)} 克。")
    return q, think, ans


def g_matrix(rng, lang):
    while True:
        a, b, c, d_ = (rng.randint(-5, 7) for _ in range(4))
        det = a * d_ - b * c
        if det != 0:
            break
    inv = [[Fraction(d_, det), Fraction(-b, det)], [Fraction(-c, det), Fraction(a, det)]]

    def m(rows):
        return "\\begin{pmatrix} " + " \\\\ ".join(" & ".join(tex(v) for v in r) for r in rows) + " \\end{pmatrix}"

    A = [[a, b], [c, d_]]
    if lang == "en":
        q = f"Find the determinant and the inverse of the matrix A = [[{a}, {b}], [{c}, {d_}]]."
        think = f"det = {a}*{d_} - {b}*{c} = {det}. Inverse = 1/det [[d, -b], [-c, a]]. Verify A*A^-1 = I."
        ans = (f"For a 2×2 matrix $\\begin{{pmatrix}} a & b \\\\ c & d \\end{{pmatrix}}$, $\\det = ad - bc$ and the inverse is "
               f"$\\frac{{1}}{{ad - bc}}\\begin{{pmatrix}} d & -b \\\\ -c & a \\end{{pmatrix}}$.\n\n"
               f"**Determinant:** ${par(a)} \\cdot {par(d_)} - {par(b)} \\cdot {par(c)} = {a * d_} - {par(b * c)} = {det}$. It's non-zero, so A is invertible.\n\n"
               f"**Inverse:**\n\n$$A^{{-1}} = \\frac{{1}}{{{det}}}{m([[d_, -b], [-c, a]])} = {m(inv)}$$\n\n"
               f"Check the top-left entry of $AA^{{-1}}$: ${par(a)} \\cdot {ptex(inv[0][0])} + {par(b)} \\cdot {ptex(inv[1][0])} = {fr(a * inv[0][0] + b * inv[1][0])}$, "
               f"and the top-right: ${par(a)} \\cdot {ptex(inv[0][1])} + {par(b)} \\cdot {ptex(inv[1][1])} = {fr(a * inv[0][1] + b * inv[1][1])}$, as expected for the identity.")
        return q, think, ans
    q = f"求矩阵 $A = {m(A)}$ 的行列式和逆矩阵。"
    think = f"行列式 {det}，逆矩阵 = 伴随矩阵 / {det}。"
    ans = (f"**行列式**：$|A| = {par(a)} \\times {par(d_)} - {par(b)} \\times {par(c)} = {det} \\neq 0$，所以 A 可逆。\n\n"
           f"**伴随矩阵**：$A^* = {m([[d_, -b], [-c, a]])}$\n\n"
           f"**逆矩阵**：$A^{{-1}} = \\dfrac{{1}}{{|A|}}A^* = {m(inv)}$\n\n"
           f"可以验证 $AA^{{-1}} = E$。")
    return q, think, ans


GENERATORS = [
    # (function, how many samples, share of Chinese)
    (g_shopping, 4, 0.5), (g_linear, 3, 0.34), (g_system, 3, 0.34), (g_quadratic, 3, 0.34),
    (g_balls, 3, 0.34), (g_atleast, 3, 0.34), (g_binomial, 3, 0.34), (g_committee, 2, 0.5),
    (g_series, 3, 0.34), (g_compound, 3, 0.34), (g_gcd, 2, 0.5), (g_lastdigits, 3, 0.34),
    (g_triangle, 2, 0.5), (g_points, 2, 0.5), (g_work, 2, 0.5), (g_percent, 2, 0.5),
    (g_calculus, 3, 0.34), (g_expected, 2, 0.5), (g_base, 2, 0.5), (g_avgspeed, 2, 0.5),
    (g_mixture, 2, 0.5), (g_matrix, 2, 0.5),
]

SYSTEMS_EN = [
    "You are a careful math tutor. Show each step and check your answer.",
    "You are Clover, a helpful assistant. Put the final answer in bold.",
    "Solve the problem step by step.",
]
FOLLOWUPS_EN = ["Thanks! Can you do this one too?\n\n", "Great. Next one:\n\n", "Got it. Now try this:\n\n", "And this one?\n\n"]
FOLLOWUPS_ZH = ["谢谢！再帮我做一道：\n\n", "明白了。下一题：\n\n", "这道呢？\n\n"]
SYSTEMS_ZH = ["你是一位耐心的数学老师，请分步骤讲解并检验结果。", "请一步一步地解题。"]


def build(rng) -> list[dict]:
    out = []
    for fn, count, zh_share in GENERATORS:
        for i in range(count):
            lang = "zh" if (i + 0.5) / count < zh_share else "en"
            q, think, a = fn(rng, lang)
            msgs = []
            if rng.random() < 0.3:
                pool = SYSTEMS_ZH if lang == "zh" else SYSTEMS_EN
                msgs.append(sys_(pool[rng.randrange(len(pool))]))
            msgs.append(user(q))
            use_think = rng.random() < 0.65
            msgs.append(asst(a, think if use_think else None))
            if rng.random() < 0.5:
                # a follow-up problem of the same kind in the same conversation
                q2, think2, a2 = fn(rng, lang)
                pool = FOLLOWUPS_ZH if lang == "zh" else FOLLOWUPS_EN
                msgs.append(user(pool[rng.randrange(len(pool))] + q2))
                msgs.append(asst(a2, think2 if use_think else None))
            out.append(sample("math", msgs))
    return out
