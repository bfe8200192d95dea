"""Code category: hand-written questions and answers in Chinese."""

ENTRIES = [
dict(
ask=r'''
用 Python 写个脚本：读取一个 CSV 文件（列是 日期,类别,金额，日期格式 2024-03-15），按月份和类别汇总金额，输出成表格。不要用 pandas。
''',
answer=r'''
下面的脚本只用标准库，按“月份 × 类别”汇总金额，并在最后输出每月合计：

```python
#!/usr/bin/env python3
"""按月份和类别汇总 CSV 中的金额。用法：python monthly.py 账单.csv"""
import csv
import sys
from collections import defaultdict
from decimal import Decimal, InvalidOperation


def summarize(path: str):
    totals = defaultdict(lambda: defaultdict(Decimal))   # 月份 -> 类别 -> 金额
    categories = set()
    skipped = 0
    with open(path, encoding="utf-8-sig", newline="") as fh:  # utf-8-sig 兼容 Excel 导出的 BOM
        for row in csv.DictReader(fh):
            try:
                month = row["日期"].strip()[:7]               # "2024-03-15" -> "2024-03"
                amount = Decimal(row["金额"].strip())
            except (KeyError, InvalidOperation):
                skipped += 1
                continue
            category = row["类别"].strip() or "未分类"
            totals[month][category] += amount
            categories.add(category)
    return totals, sorted(categories), skipped


def main() -> None:
    totals, categories, skipped = summarize(sys.argv[1])
    header = ["月份", *categories, "合计"]
    print(" | ".join(header))
    print(" | ".join("---" for _ in header))
    for month in sorted(totals):
        row = [totals[month][c] for c in categories]
        print(" | ".join([month, *(f"{v:.2f}" for v in row), f"{sum(row):.2f}"]))
    if skipped:
        print(f"\n跳过了 {skipped} 行格式不正确的数据", file=sys.stderr)


if __name__ == "__main__":
    main()
```

示例输入：

```text
日期,类别,金额
2024-03-02,餐饮,35.5
2024-03-15,交通,120
2024-04-01,餐饮,48
2024-04-09,购物,299.9
```

输出（Markdown 表格格式，可以直接贴到文档里）：

```text
月份 | 交通 | 购物 | 餐饮 | 合计
--- | --- | --- | --- | ---
2024-03 | 120.00 | 0.00 | 35.50 | 155.50
2024-04 | 0.00 | 299.90 | 48.00 | 347.90
```

几点说明：

- **金额用 `Decimal`**，避免浮点数误差（比如 `0.1 + 0.2` 不等于 `0.3` 的问题）。
- **`encoding="utf-8-sig"`**：Excel 另存为 CSV 时常常带 BOM，不处理的话第一列的列名会变成 `\ufeff日期`，导致 `KeyError`。如果文件是 GBK 编码（老版本 Excel 常见），改成 `encoding="gbk"`。
- 日期只取前 7 个字符作为月份，前提是格式统一为 `YYYY-MM-DD`；如果日期格式不统一，需要先用 `datetime.strptime` 解析。
- 格式不对的行会被跳过并计数，而不是让整个脚本崩溃。
''',
),
dict(
ask=r'''
JavaScript 的闭包到底是什么？能举个实际有用的例子吗？
''',
answer=r'''
**闭包就是：一个函数记住了它被创建时所在作用域里的变量，即使那个作用域已经执行结束，它仍然可以访问这些变量。**

先看最简单的例子：

```js
function makeCounter() {
  let count = 0;              // 外层函数的局部变量
  return function () {
    count += 1;               // 内层函数引用了外层的 count
    return count;
  };
}

const counter = makeCounter();
console.log(counter()); // 1
console.log(counter()); // 2

const another = makeCounter();
console.log(another()); // 1 —— 每次调用 makeCounter 都会创建一份新的 count
```

`makeCounter` 执行完以后，按理说 `count` 应该被回收了，但返回的函数还引用着它，所以它会一直“活着”。而且外部代码**无法直接访问或修改** `count`，只能通过这个函数来操作，这就实现了**私有变量**。

**实际有用的例子**

1. **防抖（debounce）**：搜索框输入时，等用户停止输入 300 毫秒后再发请求。

```js
function debounce(fn, wait) {
  let timer = null;                       // 被闭包记住的计时器
  return function (...args) {
    clearTimeout(timer);
    timer = setTimeout(() => fn.apply(this, args), wait);
  };
}

input.addEventListener("input", debounce((e) => search(e.target.value), 300));
```

每次输入都会清掉上一次的 `timer`，这个 `timer` 就保存在闭包里，不需要全局变量。

2. **缓存计算结果（memoize）**：

```js
function memoize(fn) {
  const cache = new Map();                // 私有缓存
  return (n) => {
    if (!cache.has(n)) cache.set(n, fn(n));
    return cache.get(n);
  };
}
```

3. **给事件处理函数“绑定”参数**：

```js
buttons.forEach((btn, i) => {
  btn.addEventListener("click", () => console.log(`点击了第 ${i + 1} 个按钮`));
});
```

**一个经典的坑**：在 `for` 循环里用 `var` 声明变量，再在回调中使用它，所有回调拿到的都是循环结束后的值，因为 `var` 只有一份，所有闭包共享它。用 `let` 就不会有这个问题，因为 `let` 在每次循环中都会创建一个新的绑定：

```js
for (var i = 0; i < 3; i++) setTimeout(() => console.log(i));  // 3 3 3
for (let j = 0; j < 3; j++) setTimeout(() => console.log(j));  // 0 1 2
```

**注意**：闭包会让被引用的变量一直留在内存里。如果闭包里引用了很大的对象，又一直没有释放（比如注册的事件监听器从来不移除），就可能造成内存泄漏。
''',
),
dict(
ask=r'''
MySQL 8 里有一张员工表 employees(id, name, dept_id, salary)，怎么查出每个部门工资最高的员工？如果有并列最高的都要列出来。
''',
think=r'''
MySQL 8 支持窗口函数。用 RANK() OVER (PARTITION BY dept_id ORDER BY salary DESC)，取 rnk = 1，并列会都是 1。也可以用子查询 + 关联：salary = (SELECT MAX(salary) ... WHERE dept_id = e.dept_id)，MySQL 5.7 也能用。注意 ROW_NUMBER 会丢掉并列。加一个 (dept_id, salary) 索引。
''',
answer=r'''
MySQL 8.0 支持窗口函数，最清晰的写法是用 `RANK()`：

```sql
SELECT dept_id, id, name, salary
FROM (
    SELECT e.*,
           RANK() OVER (PARTITION BY dept_id ORDER BY salary DESC) AS rnk
    FROM employees e
) t
WHERE rnk = 1
ORDER BY dept_id, id;
```

- `PARTITION BY dept_id`：在每个部门内部分别排名；
- `ORDER BY salary DESC`：工资从高到低；
- `RANK()` 遇到并列时名次相同，所以工资并列最高的员工都会得到 1，都会被查出来。

**为什么不用 `ROW_NUMBER()`？** 它不管是否并列，都会给出 1、2、3 这样连续的编号，并列最高的只会保留其中任意一个，不符合你的要求。

**兼容 MySQL 5.7 的写法**（没有窗口函数时）：

```sql
SELECT e.dept_id, e.id, e.name, e.salary
FROM employees e
WHERE e.salary = (
    SELECT MAX(e2.salary)
    FROM employees e2
    WHERE e2.dept_id = e.dept_id
)
ORDER BY e.dept_id, e.id;
```

这个写法同样会保留并列的员工。

**性能建议**：在 `(dept_id, salary)` 上建一个联合索引，两种写法都能受益：

```sql
CREATE INDEX idx_emp_dept_salary ON employees (dept_id, salary);
```

另外注意一个细节：如果某个部门里 `salary` 全是 `NULL`，第二种写法查不出这个部门的任何人（`NULL = NULL` 不成立）；第一种写法里 `NULL` 在降序排序中排在最后，但如果整个部门都是 `NULL`，它们会并列第 1 名被查出来。根据业务需要决定要不要加上 `WHERE salary IS NOT NULL`。
''',
),
dict(
ask=r'''
我把一个有问题的提交 push 到了远程的 main 分支，同事可能已经拉取了，怎么撤销比较安全？
''',
answer=r'''
既然已经 push 到共享分支，而且同事可能已经拉取了，**不要用 `git reset` + 强制推送**，那样会改写公共历史，同事再拉取时会出现混乱。安全的做法是用 **`git revert`** 生成一个新的“反向提交”。

**步骤**

```bash
# 1. 确保本地是最新的
git switch main
git pull

# 2. 找到有问题的那个提交
git log --oneline -5
# 比如看到：a1b2c3d 添加支付回调（有问题的提交）

# 3. 生成一个撤销它的新提交
git revert a1b2c3d
# 会打开编辑器让你确认提交信息，默认是 Revert "添加支付回调"

# 4. 推送
git push
```

`git revert` 不会删除原来的提交，而是新增一个提交，内容正好和原提交相反。历史记录是完整的，同事正常 `git pull` 就能拿到撤销后的代码。

**几种特殊情况**

- **要撤销连续的多个提交**：

  ```bash
  git revert --no-commit OLDEST^..NEWEST   # 把这几个提交的撤销合并到一次提交里
  git commit -m "撤销：支付回调相关的 3 个提交"
  ```

- **要撤销的是一个合并提交（merge commit）**：需要用 `-m 1` 指定保留哪一个父提交（通常是 1，即 main 这一侧）：

  ```bash
  git revert -m 1 <merge提交的哈希>
  ```

  注意：撤销了合并提交之后，如果以后想把同一个分支重新合并进来，需要先“撤销这次撤销”（revert 那个 revert 提交），否则 Git 会认为那些改动已经合并过了。

- **revert 时出现冲突**：说明后面的提交改动了同样的代码。手动解决冲突后 `git add` 相关文件，再执行 `git revert --continue`。

**什么时候可以用 reset？** 只有在提交**还没有推送**，或者推送到的是只有你自己使用的分支时，才适合用 `git reset` 改写历史。

最后，如果这个有问题的提交包含了密码、密钥等敏感信息，revert 是不够的，因为它们仍然保存在历史记录里。这时要**立即作废并更换这些密钥**，然后再考虑用 `git filter-repo` 等工具清理历史。
''',
),
]
