"""Math category: hand-written problems (proofs, classic puzzles, conceptual questions)."""

ENTRIES = [
dict(
q=r'''
Prove that √2 is irrational.
''',
think=r'''
Classic proof by contradiction. Assume √2 = p/q in lowest terms. Then p² = 2q², so p² even, so p even (odd squared is odd). Write p = 2k: 4k² = 2q², q² = 2k², so q even. Both even contradicts lowest terms. Need to justify "p² even implies p even": contrapositive, if p odd, p = 2m+1, p² = 4m²+4m+1 odd.
''',
a=r'''
**Proof by contradiction.**

Suppose √2 were rational. Then we could write

$$\sqrt{2} = \frac{p}{q}$$

with integers $p, q$, $q \neq 0$, and the fraction in **lowest terms** (p and q have no common factor other than 1).

1. Squaring gives $2 = \frac{p^2}{q^2}$, so $p^2 = 2q^2$. Hence $p^2$ is even.
2. If $p^2$ is even, then $p$ is even. (If $p$ were odd, $p = 2m + 1$, then $p^2 = 4m^2 + 4m + 1$ would be odd.) So write $p = 2k$.
3. Substituting: $(2k)^2 = 2q^2$, i.e. $4k^2 = 2q^2$, so $q^2 = 2k^2$. By the same argument as step 2, $q$ is even.
4. Now both $p$ and $q$ are even, so they share the factor 2. That contradicts the assumption that $p/q$ was in lowest terms.

The assumption leads to a contradiction, so √2 is irrational. ∎

The same argument works for √p with any prime p (using "if p divides a², then p divides a"), and more generally √n is irrational whenever n is not a perfect square.
''',
),
dict(
q=r'''
证明素数有无穷多个。
''',
think=r'''
欧几里得的证明：假设只有有限个素数 p1,...,pn，构造 N = p1p2...pn + 1。N 除以任何 pi 余 1，所以 N 没有这些素因子。但 N > 1 必有素因子（或本身是素数），矛盾。注意：N 本身不一定是素数，比如 2·3·5·7·11·13+1 = 30031 = 59 × 509。这是常见误解，要提一下。
''',
a=r'''
这是欧几里得给出的经典证明，用反证法。

**证明**：假设素数只有有限个，把它们全部列出来：$p_1, p_2, \dots, p_n$。

构造一个数

$$N = p_1 p_2 \cdots p_n + 1$$

1. $N > 1$，所以 N 至少有一个素因子 $p$（如果 N 本身是素数，那么 $p = N$）。
2. 用任何一个 $p_i$ 去除 N，余数都是 1，因为 $p_1 p_2 \cdots p_n$ 能被 $p_i$ 整除。所以 N 不能被 $p_1, \dots, p_n$ 中的任何一个整除。
3. 于是 N 的素因子 $p$ 不在我们的列表中。但我们假设列表已经包含了所有素数，矛盾。

因此素数有无穷多个。∎

**一个常见误解**：这个证明并没有说 N 一定是素数。例如

$$2 \times 3 \times 5 \times 7 \times 11 \times 13 + 1 = 30031 = 59 \times 509$$

30031 不是素数，但它的素因子 59 和 509 都不在 2, 3, 5, 7, 11, 13 之中，这正是证明所需要的。
''',
),
dict(
q=r'''
Use induction to prove that 1 + 3 + 5 + ... + (2n − 1) = n² for every positive integer n.
''',
a=r'''
Let $P(n)$ be the statement $1 + 3 + 5 + \dots + (2n - 1) = n^2$.

**Base case** ($n = 1$): the left side is just $1$, and $1^2 = 1$. So $P(1)$ holds.

**Inductive step.** Assume $P(k)$ holds for some $k \ge 1$:

$$1 + 3 + \dots + (2k - 1) = k^2.$$

We need $P(k+1)$, whose left side has one more term, $2(k+1) - 1 = 2k + 1$:

$$1 + 3 + \dots + (2k - 1) + (2k + 1) = k^2 + (2k + 1) = (k + 1)^2.$$

The first equality uses the assumption, the second is the expansion $(k+1)^2 = k^2 + 2k + 1$. So $P(k+1)$ holds.

By induction, $P(n)$ is true for all positive integers $n$. ∎

**A picture of why it's true:** arrange dots in a $k \times k$ square. To grow it into a $(k+1) \times (k+1)$ square you add an L-shaped border of $k + k + 1 = 2k + 1$ dots, which is exactly the next odd number.

| n | sum of first n odd numbers | n² |
|---|---|---|
| 1 | 1 | 1 |
| 2 | 1 + 3 = 4 | 4 |
| 3 | 1 + 3 + 5 = 9 | 9 |
| 4 | 1 + 3 + 5 + 7 = 16 | 16 |
''',
),
dict(
q=r'''
Explain the Monty Hall problem. Why is switching better? My intuition says it's 50/50.
''',
think=r'''
Key: host knows where the car is and always opens a goat door from the two you didn't pick, and always offers the switch. Your first pick is right with prob 1/3. If you stick, you win exactly when first pick is right: 1/3. If you switch, you win exactly when first pick was wrong (2/3), because then the host is forced to reveal the only other goat, leaving the car behind the remaining door. Enumerate three cases. Also 100-door version for intuition. Address why 50/50 is wrong: the two remaining doors are not symmetric; host's action depends on where the car is. Mention that if the host opened randomly and happened to show a goat, it would be 50/50.
''',
a=r'''
**Setup:** three doors, one car, two goats. You pick a door. The host, **who knows where the car is**, opens one of the other two doors to reveal a goat, then offers you the chance to switch to the remaining closed door.

**Switching wins 2/3 of the time.** The cleanest way to see it: switching wins exactly when your first pick was wrong.

Say you pick door 1. Three equally likely cases:

| car behind | host opens | stick wins? | switch wins? |
|---|---|---|---|
| door 1 | door 2 or 3 | ✅ | ❌ |
| door 2 | door 3 (forced) | ❌ | ✅ |
| door 3 | door 2 (forced) | ❌ | ✅ |

Sticking wins in 1 case out of 3; switching wins in 2.

**Why the 50/50 intuition fails.** Two doors remain, but they're not symmetric. Your door was chosen *before* anyone knew anything, so it keeps its 1/3 chance. The other door has been "filtered" by the host: in the two cases where you picked a goat, the host was *forced* to leave the car behind that door. The host's choice carries information because it depends on where the car is.

**Intuition pump with 100 doors:** you pick one door (1% chance). The host opens 98 of the other 99, all goats, leaving one. Would you stick with your original 1% door, or take the one door the host carefully avoided? Switching now wins 99% of the time.

**The assumptions matter.** If the host opened a door at random and it just *happened* to show a goat, the answer really would be 50/50, because then the reveal doesn't depend on the car's location. The classic puzzle assumes the host always knows, always opens a goat door, and always offers the switch.
''',
),
dict(
q=r'''
How many people do you need in a room for a better-than-even chance that two share a birthday? Show the calculation.
''',
a=r'''
**23 people.** Assume 365 equally likely birthdays (ignore leap years and seasonal patterns).

It's easier to compute the probability that **no two** people share a birthday, then take the complement. Add people one at a time; each new person must avoid all birthdays already taken:

$$P(\text{all different}) = \frac{365}{365} \cdot \frac{364}{365} \cdot \frac{363}{365} \cdots \frac{365 - n + 1}{365}$$

Evaluating this product:

| n | P(all different) | P(at least one shared) |
|---|---|---|
| 10 | 0.8831 | 0.1169 |
| 20 | 0.5886 | 0.4114 |
| 22 | 0.5243 | 0.4757 |
| **23** | **0.4927** | **0.5073** |
| 30 | 0.2937 | 0.7063 |
| 50 | 0.0296 | 0.9704 |

At n = 22 the chance of a shared birthday is still below 1/2; at n = 23 it first exceeds it.

**Why so few?** The question is about *any* pair, not about someone sharing *your* birthday. With 23 people there are $\binom{23}{2} = 253$ pairs, and each pair has a 1/365 chance of matching. That many chances add up quickly. (The chance that someone shares *your* specific birthday with 22 others is only $1 - (364/365)^{22} \approx 5.9\%$.)

This is also why hash collisions appear much sooner than intuition suggests: for a hash with N possible values, expect the first collision after about $\sqrt{N}$ items.
''',
),
dict(
q=r'''
某种疾病的患病率是 1%。一种检测方法对患者的检出率是 99%，但对健康人有 5% 的误报率（假阳性）。一个人检测结果为阳性，他真正患病的概率是多少？
''',
think=r'''
贝叶斯公式。P(D)=0.01，P(+|D)=0.99，P(+|健康)=0.05。P(+) = 0.01×0.99 + 0.99×0.05 = 0.0099 + 0.0495 = 0.0594。P(D|+) = 0.0099/0.0594 = 1/6 ≈ 16.7%。用 10000 人的自然频率解释：100 人患病，99 人阳性；9900 健康人中 495 人阳性。阳性共 594 人，其中 99 人真患病，99/594 = 1/6。
''',
a=r'''
答案只有大约 **16.7%**，远低于很多人直觉中的 99%。

**用贝叶斯公式计算**

设 D 表示患病，+ 表示检测阳性。已知：

- $P(D) = 0.01$，$P(\bar D) = 0.99$
- $P(+ \mid D) = 0.99$
- $P(+ \mid \bar D) = 0.05$

先用全概率公式求阳性的总概率：

$$P(+) = 0.01 \times 0.99 + 0.99 \times 0.05 = 0.0099 + 0.0495 = 0.0594$$

再求阳性条件下患病的概率：

$$P(D \mid +) = \frac{P(+ \mid D)\,P(D)}{P(+)} = \frac{0.0099}{0.0594} = \frac{1}{6} \approx 16.7\%$$

**用具体人数理解**

假设有 10000 人接受检测：

| | 人数 | 检测阳性 |
|---|---|---|
| 患病 | 100 | 99 |
| 健康 | 9900 | 495 |
| 合计 | 10000 | 594 |

阳性的 594 人里，真正患病的只有 99 人，$99 / 594 = 1/6$。

**为什么这么低？** 因为疾病本身很少见，健康人基数大，5% 的误报率放到 9900 人身上就产生了 495 个假阳性，比真阳性还多得多。这也是为什么筛查阳性后通常要做第二次、更准确的检查：如果第二次独立检测仍为阳性，患病概率会大幅上升。
''',
),
dict(
q=r'''
鸡兔同笼：笼子里有若干只鸡和兔，从上面数有 35 个头，从下面数有 94 只脚。鸡和兔各有几只？
''',
a=r'''
**方法一：假设法**

假设 35 只全是鸡，那么应该有 $35 \times 2 = 70$ 只脚。

实际有 94 只脚，多出 $94 - 70 = 24$ 只。

每把一只鸡换成一只兔，脚数增加 $4 - 2 = 2$ 只，所以兔有 $24 \div 2 = 12$ 只。

鸡有 $35 - 12 = 23$ 只。

**方法二：列方程**

设鸡有 x 只，兔有 y 只：

$$\begin{cases} x + y = 35 \\ 2x + 4y = 94 \end{cases}$$

第二个方程除以 2 得 $x + 2y = 47$，减去第一个方程得 $y = 12$，于是 $x = 23$。

**检验**：头数 $23 + 12 = 35$；脚数 $23 \times 2 + 12 \times 4 = 46 + 48 = 94$。正确。

答：鸡有 23 只，兔有 12 只。
''',
),
dict(
q=r'''
用抽屉原理说明：任意 13 个人中，至少有两个人的生日在同一个月。如果是任意 25 个人呢？
''',
a=r'''
**抽屉原理**：把多于 n 个物体放进 n 个抽屉，至少有一个抽屉里有两个或以上的物体。

**13 个人的情况**

把 12 个月份看作 12 个抽屉，每个人按生日所在的月份放进对应的抽屉。13 个人放进 12 个抽屉，由抽屉原理，至少有一个抽屉里有不少于 2 个人，也就是说至少有两个人生日在同一个月。

可以用反证法理解：如果每个月最多只有 1 个人，那么最多只能容纳 12 个人，与 13 个人矛盾。

**25 个人的情况**

推广的抽屉原理：把 m 个物体放进 n 个抽屉，至少有一个抽屉里有不少于 $\lceil m/n \rceil$ 个物体。

$\lceil 25 / 12 \rceil = 3$，所以任意 25 个人中，至少有 **3 个人**的生日在同一个月。

验证：如果每个月最多 2 个人，最多只能有 $12 \times 2 = 24$ 人，而我们有 25 人，所以必有某个月至少 3 人。

注意 24 个人就不够了：可能恰好每个月 2 个人。
''',
),
dict(
q=r'''
My friend insists 0.999... (repeating forever) is less than 1. How do I convince them it equals 1?
''',
a=r'''
Here are three arguments, from informal to rigorous. Different people find different ones convincing.

**1. Fractions.** Most people accept $\frac{1}{3} = 0.333\ldots$. Multiply both sides by 3:

$$3 \times \frac{1}{3} = 1 \qquad 3 \times 0.333\ldots = 0.999\ldots$$

So $0.999\ldots = 1$.

**2. Algebra.** Let $x = 0.999\ldots$. Then $10x = 9.999\ldots$. Subtract:

$$10x - x = 9.999\ldots - 0.999\ldots = 9 \quad\Rightarrow\quad 9x = 9 \quad\Rightarrow\quad x = 1.$$

**3. What the notation means (the rigorous version).** An infinite decimal is defined as the **limit** of its finite truncations: 0.9, 0.99, 0.999, ... The n-th truncation is $1 - 10^{-n}$, which gets as close to 1 as you like. The limit is exactly 1. Equivalently, it's the geometric series

$$\sum_{k=1}^{\infty} \frac{9}{10^k} = \frac{9/10}{1 - 1/10} = 1.$$

**A question to ask your friend:** if 0.999... < 1, there must be a number strictly between them, for example their average. What is it? Any decimal you try to write is either ≥ 1 or smaller than some truncation 0.99...9, so no such number exists. Two real numbers with nothing between them are equal.

The underlying intuition ("it never quite gets there") describes the *sequence* 0.9, 0.99, ..., which indeed never reaches 1. But 0.999... is not any member of that sequence; it's the value the sequence approaches.
''',
),
dict(
q=r'''
At 3:40 on an analogue clock, what is the angle between the hour hand and the minute hand?
''',
think=r'''
Minute hand moves 6° per minute: 40 min → 240° from 12. Hour hand moves 30° per hour plus 0.5° per minute: 3*30 + 40*0.5 = 90 + 20 = 110°. Difference 130°. The smaller angle is 130 (since < 180), reflex 230.
''',
a=r'''
Measure both hands clockwise from 12.

- **Minute hand:** moves 360° in 60 minutes, i.e. 6° per minute. At 40 minutes: $40 \times 6° = 240°$.
- **Hour hand:** moves 30° per hour *and* keeps moving during the hour at $30° / 60 = 0.5°$ per minute. At 3:40: $3 \times 30° + 40 \times 0.5° = 90° + 20° = 110°$.

Angle between them: $240° - 110° = $ **130°**. (The reflex angle on the other side is $360° - 130° = 230°$.)

The usual mistake is to put the hour hand exactly on the 3 (90°), which would give 150°. By 3:40 the hour hand has moved two thirds of the way from 3 toward 4.

General formula for h:m: angle $= |30h - 5.5m|$, and take $360°$ minus that if it exceeds 180°. Here $|90 - 220| = 130°$.
''',
),
dict(
q=r'''
How many trailing zeros does 100! have?
''',
a=r'''
**24.**

A trailing zero comes from a factor of 10 = 2 × 5. In 100! there are far more factors of 2 than of 5, so the number of trailing zeros equals the number of factors of 5.

Count the factors of 5 in 1 × 2 × ... × 100:

- Multiples of 5: $\lfloor 100/5 \rfloor = 20$ numbers each contribute at least one 5.
- Multiples of 25: $\lfloor 100/25 \rfloor = 4$ numbers (25, 50, 75, 100) contribute a second 5.
- Multiples of 125: $\lfloor 100/125 \rfloor = 0$.

Total: $20 + 4 = 24$ factors of 5, hence 24 trailing zeros.

This is Legendre's formula: the exponent of a prime p in n! is $\sum_{k \ge 1} \lfloor n / p^k \rfloor$. For example, 1000! has $200 + 40 + 8 + 1 = 249$ trailing zeros.
''',
),
dict(
q=r'''
计算定积分 $\int_0^1 x e^x \, dx$。
''',
think=r'''
分部积分，u = x，dv = e^x dx，du = dx，v = e^x。∫ x e^x dx = x e^x − ∫ e^x dx = x e^x − e^x + C = (x−1)e^x + C。代入上下限：(1−1)e − (0−1)e^0 = 0 − (−1) = 1。
''',
a=r'''
用**分部积分法**：$\int u\,dv = uv - \int v\,du$。

取 $u = x$，$dv = e^x\,dx$，则 $du = dx$，$v = e^x$。

$$\int x e^x\,dx = x e^x - \int e^x\,dx = x e^x - e^x + C = (x - 1)e^x + C$$

（求导验证：$\big[(x-1)e^x\big]' = e^x + (x-1)e^x = x e^x$，正确。）

代入上下限：

$$\int_0^1 x e^x\,dx = \Big[(x - 1)e^x\Big]_0^1 = (1 - 1)e^1 - (0 - 1)e^0 = 0 - (-1) = 1$$

所以结果是 **1**。

选 $u = x$ 的原因：x 求导后变成常数 1，积分变简单；如果反过来取 $u = e^x$、$dv = x\,dx$，会得到 $\int \frac{x^2}{2} e^x\,dx$，反而更复杂。
''',
),
dict(
q=r'''
平均要掷多少次骰子才能第一次掷出 6 点？请给出推导。
''',
think=r'''
几何分布，p = 1/6，期望 1/p = 6。推导可以用首步分析：设 E 为期望次数。掷一次，1/6 概率成功（用了 1 次），5/6 概率失败，之后和重新开始一样，还需 E 次。E = 1 + (5/6)E → E/6 = 1 → E = 6。也可以用级数 Σ k (5/6)^{k-1} (1/6) = (1/6) / (1/6)^2 = 6。
''',
a=r'''
答案是 **6 次**。

**方法一：首步分析**

设 E 为第一次掷出 6 点所需的期望次数。先掷一次：

- 以 $\frac{1}{6}$ 的概率直接掷出 6，总共用了 1 次；
- 以 $\frac{5}{6}$ 的概率没掷出 6，已经用了 1 次，而之后的情况和刚开始完全一样，平均还需要 E 次。

所以

$$E = 1 + \frac{5}{6}E \quad\Rightarrow\quad \frac{1}{6}E = 1 \quad\Rightarrow\quad E = 6$$

**方法二：直接用分布求和**

第一次在第 k 次掷出 6 的概率是 $P(X = k) = \left(\frac{5}{6}\right)^{k-1} \cdot \frac{1}{6}$（几何分布）。

$$E(X) = \sum_{k=1}^{\infty} k \left(\frac{5}{6}\right)^{k-1} \frac{1}{6} = \frac{1}{6} \cdot \frac{1}{\left(1 - \frac{5}{6}\right)^2} = \frac{1}{6} \cdot 36 = 6$$

这里用到了 $\sum_{k \ge 1} k q^{k-1} = \frac{1}{(1-q)^2}$（$|q| < 1$）。

**一般结论**：成功概率为 p 的独立重复试验，首次成功所需的期望次数是 $\frac{1}{p}$。

注意“平均 6 次”不代表 6 次之内一定能掷出：6 次都没有 6 点的概率是 $(5/6)^6 \approx 33.5\%$。
''',
),
]
