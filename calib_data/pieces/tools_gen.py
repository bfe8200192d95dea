"""tool_call category: a system message with JSON-schema tools, a user request, assistant turns that
emit <tool_call>{"name": ..., "arguments": {...}}</tool_call>, `tool` results, and a final answer.

Schemas, phrasings and data pools are hand-written; arguments, results and the final answers are
derived from the same values, so an answer never contradicts its tool result."""

from __future__ import annotations

import datetime as dt
import json
from decimal import ROUND_HALF_UP, Decimal

from .common import asst, sample, tool, tool_call, tools_system, user

# ----------------------------------------------------------------------------- tool schemas

T = {}


def _tool(name, description, properties, required):
    T[name] = {
        "name": name,
        "description": description,
        "parameters": {"type": "object", "properties": properties, "required": required},
    }


_tool("get_current_weather", "Get the current weather for a city.", {
    "city": {"type": "string", "description": "City name, optionally with country, e.g. 'Lisbon, PT'"},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"},
}, ["city"])
_tool("get_forecast", "Get a daily weather forecast for the next few days.", {
    "city": {"type": "string"},
    "days": {"type": "integer", "minimum": 1, "maximum": 7, "description": "Number of days"},
}, ["city", "days"])
_tool("web_search", "Search the web and return the top results with title, url and snippet.", {
    "query": {"type": "string"},
    "max_results": {"type": "integer", "default": 5},
}, ["query"])
_tool("convert_currency", "Convert an amount between currencies using today's reference rate.", {
    "amount": {"type": "number"},
    "from_currency": {"type": "string", "description": "ISO 4217 code, e.g. USD"},
    "to_currency": {"type": "string", "description": "ISO 4217 code, e.g. EUR"},
}, ["amount", "from_currency", "to_currency"])
_tool("get_stock_quote", "Get the latest quote for a stock ticker.", {
    "symbol": {"type": "string", "description": "Ticker symbol"},
}, ["symbol"])
_tool("run_sql", "Run a read-only SQL query against the analytics database (PostgreSQL) and return rows as JSON.", {
    "query": {"type": "string", "description": "A single SELECT statement"},
}, ["query"])
_tool("send_email", "Send an email on behalf of the user.", {
    "to": {"type": "array", "items": {"type": "string"}, "description": "Recipient email addresses"},
    "subject": {"type": "string"},
    "body": {"type": "string"},
    "cc": {"type": "array", "items": {"type": "string"}},
}, ["to", "subject", "body"])
_tool("create_calendar_event", "Create an event in the user's calendar.", {
    "title": {"type": "string"},
    "start": {"type": "string", "description": "ISO 8601 local date-time, e.g. 2025-03-14T15:00"},
    "end": {"type": "string", "description": "ISO 8601 local date-time"},
    "attendees": {"type": "array", "items": {"type": "string"}},
    "location": {"type": "string"},
}, ["title", "start", "end"])
_tool("search_flights", "Search for flights between two airports on a date.", {
    "origin": {"type": "string", "description": "IATA airport code"},
    "destination": {"type": "string", "description": "IATA airport code"},
    "date": {"type": "string", "description": "YYYY-MM-DD"},
    "passengers": {"type": "integer", "default": 1},
    "cabin": {"type": "string", "enum": ["economy", "premium_economy", "business"]},
}, ["origin", "destination", "date"])
_tool("python_exec", "Execute a short Python 3 snippet in a sandbox and return its stdout. No network access.", {
    "code": {"type": "string"},
}, ["code"])
_tool("translate_text", "Translate text into a target language.", {
    "text": {"type": "string"},
    "target_language": {"type": "string", "description": "BCP-47 code such as 'de', 'ja', 'zh-CN'"},
    "formality": {"type": "string", "enum": ["default", "formal", "informal"]},
}, ["text", "target_language"])
_tool("create_github_issue", "Open an issue in a GitHub repository.", {
    "repo": {"type": "string", "description": "owner/name"},
    "title": {"type": "string"},
    "body": {"type": "string"},
    "labels": {"type": "array", "items": {"type": "string"}},
}, ["repo", "title", "body"])
_tool("kubectl_get_pods", "List pods in a Kubernetes namespace with their status.", {
    "namespace": {"type": "string"},
    "label_selector": {"type": "string", "description": "e.g. app=checkout"},
}, ["namespace"])
_tool("kubectl_logs", "Fetch recent log lines from a pod.", {
    "namespace": {"type": "string"},
    "pod": {"type": "string"},
    "tail": {"type": "integer", "default": 50},
    "previous": {"type": "boolean", "description": "Logs of the previous (crashed) container"},
}, ["namespace", "pod"])
_tool("lookup_order", "Look up an order by its ID.", {
    "order_id": {"type": "string"},
}, ["order_id"])
_tool("issue_refund", "Refund an order, fully or partially.", {
    "order_id": {"type": "string"},
    "amount": {"type": "number"},
    "reason": {"type": "string"},
}, ["order_id", "amount", "reason"])
_tool("get_travel_time", "Estimate travel distance and duration between two places.", {
    "origin": {"type": "string"},
    "destination": {"type": "string"},
    "mode": {"type": "string", "enum": ["driving", "transit", "walking", "cycling"]},
}, ["origin", "destination", "mode"])
_tool("book_restaurant", "Reserve a table at a restaurant.", {
    "restaurant": {"type": "string"},
    "date": {"type": "string", "description": "YYYY-MM-DD"},
    "time": {"type": "string", "description": "HH:MM, 24-hour"},
    "party_size": {"type": "integer"},
    "notes": {"type": "string"},
}, ["restaurant", "date", "time", "party_size"])
_tool("set_reminder", "Set a reminder that notifies the user at a given time.", {
    "text": {"type": "string"},
    "at": {"type": "string", "description": "ISO 8601 local date-time"},
}, ["text", "at"])

DISTRACTORS = ["web_search", "set_reminder", "python_exec", "translate_text", "get_current_weather", "send_email",
               "convert_currency", "get_travel_time", "create_calendar_event", "lookup_order"]

PREAMBLES_EN = [
    "You are a helpful assistant with access to tools. Use them when they help answer the user's request, and answer in the user's language.",
    "You are Clover, an assistant that can call functions. Only call a function when you need information or need to take an action.",
    "You are an AI assistant integrated into a productivity app. Today is {today}.",
    "",
]
PREAMBLES_ZH = [
    "你是一个可以调用工具的智能助手。需要实时信息或执行操作时请调用工具，并用中文回答。",
    "你是 Clover，一个乐于助人的助手。今天是 {today}。",
    "",
]

TODAY = dt.date(2025, 3, 12)  # a Wednesday; used wherever a scenario needs "today"
WEEKDAYS_ZH = "一二三四五六日"


def _system(rng, lang, names):
    tools = [T[n] for n in names]
    extra = [d for d in DISTRACTORS if d not in names]
    for name in rng.sample(extra, rng.randint(0, 2)):
        tools.append(T[name])
    rng.shuffle(tools)
    pre_pool = PREAMBLES_ZH if lang == "zh" else PREAMBLES_EN
    today = f"{TODAY.isoformat()}（星期{WEEKDAYS_ZH[TODAY.weekday()]}）" if lang == "zh" else TODAY.strftime("%A, %d %B %Y")
    pre = pre_pool[rng.randrange(len(pre_pool))].format(today=today)
    return tools_system(pre, tools, lang)


def _call_turn(calls, lead=None, think=None):
    body = "\n".join(tool_call(n, a) for n, a in calls)
    content = (lead + "\n\n" + body) if lead else body
    return asst(content, think)


def q2(x) -> float:
    return float(Decimal(str(x)).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


# ----------------------------------------------------------------------------- data pools

CITIES = [
    # en, zh, country, typical range in March (°C)
    ("Lisbon", "里斯本", "PT", (11, 19)), ("Oslo", "奥斯陆", "NO", (-3, 5)), ("Tokyo", "东京", "JP", (6, 15)),
    ("Chengdu", "成都", "CN", (9, 17)), ("Nairobi", "内罗毕", "KE", (15, 27)), ("Toronto", "多伦多", "CA", (-4, 6)),
    ("Buenos Aires", "布宜诺斯艾利斯", "AR", (17, 26)), ("Hangzhou", "杭州", "CN", (7, 16)), ("Edinburgh", "爱丁堡", "GB", (3, 10)),
    ("Singapore", "新加坡", "SG", (25, 32)), ("Denver", "丹佛", "US", (-1, 14)), ("Seoul", "首尔", "KR", (1, 12)),
]
CONDITIONS = [("clear", "晴"), ("partly cloudy", "多云"), ("overcast", "阴"), ("light rain", "小雨"),
              ("showers", "阵雨"), ("snow", "小雪"), ("fog", "雾"), ("thunderstorms", "雷阵雨")]


COND_PHRASE = {"clear": "clear skies", "partly cloudy": "a mix of sun and cloud", "overcast": "overcast skies", "light rain": "light rain",
               "showers": "passing showers", "snow": "light snow", "fog": "fog", "thunderstorms": "thunderstorms"}
PRECIP = {"clear": [0, 5, 10], "partly cloudy": [5, 10, 20], "overcast": [10, 20, 30, 40], "light rain": [60, 70, 80], "showers": [50, 60, 70, 80]}


def _and(items):
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _weather(rng, city):
    lo, hi = city[3]
    t = rng.randint(lo, hi)
    cond = rng.choice(CONDITIONS[:6] if t > 1 else [CONDITIONS[i] for i in (0, 1, 2, 5)])
    if t > 3 and cond[0] == "snow":
        cond = CONDITIONS[3]
    return t, cond, rng.randint(35, 95), rng.randint(3, 35)


def c_to_f(c):
    return round(c * 9 / 5 + 32)


# ----------------------------------------------------------------------------- scenarios


def sc_weather(rng, lang):
    city = rng.choice(CITIES)
    t, cond, hum, wind = _weather(rng, city)
    if lang == "zh":
        q = rng.choice([f"{city[1]}现在天气怎么样？", f"帮我查一下{city[1]}的天气", f"我等会儿要在{city[1]}出门，外面冷不冷？"])
        args = {"city": f"{city[0]}, {city[2]}", "unit": "celsius"}
        res = {"city": city[0], "temperature": t, "unit": "celsius", "condition": cond[0], "humidity": hum, "wind_kph": wind}
        advice = "记得带伞。" if "rain" in cond[0] or "shower" in cond[0] or "thunder" in cond[0] else (
            "比较冷，建议穿厚外套。" if t < 8 else ("早晚可能有点凉，带件薄外套就好。" if t < 18 else "挺暖和的，穿轻便一点就行。"))
        final = f"{city[1]}现在{cond[1]}，气温 {t}°C，湿度 {hum}%，风速约 {wind} 公里/小时。{advice}"
        think = f"用户问{city[1]}的天气，调用 get_current_weather，城市用英文名 {city[0]}，单位摄氏度。" if rng.random() < 0.5 else None
    else:
        unit = rng.choice(["celsius", "fahrenheit"])
        q = rng.choice([f"What's the weather like in {city[0]} right now?", f"Is it raining in {city[0]}?",
                        f"Heading out in {city[0]} in a bit. How cold is it?", f"weather {city[0]} pls"])
        temp = t if unit == "celsius" else c_to_f(t)
        sym = "°C" if unit == "celsius" else "°F"
        args = {"city": f"{city[0]}, {city[2]}", "unit": unit}
        res = {"city": city[0], "temperature": temp, "unit": unit, "condition": cond[0], "humidity": hum, "wind_kph": wind}
        raining = any(w in cond[0] for w in ("rain", "shower", "thunder"))
        if q.startswith("Is it raining"):
            if raining:
                final = f"Yes, there's {cond[0]} in {city[0]} at the moment. It's {temp}{sym} with {hum}% humidity and wind around {wind} km/h."
            else:
                final = f"No rain in {city[0]} right now: it's {temp}{sym} with {COND_PHRASE[cond[0]]}, {hum}% humidity and wind around {wind} km/h."
        else:
            feel = "cold, so a warm coat is a good idea" if t < 6 else ("cool; a light jacket should do" if t < 16 else "mild to warm")
            final = f"Right now in {city[0]} it's {temp}{sym} with {COND_PHRASE[cond[0]]}, humidity {hum}%, wind about {wind} km/h. That's {feel}." + (" Take an umbrella." if raining else "")
        think = f"Need current weather for {city[0]}. Unit: {unit}." if rng.random() < 0.4 else None
    return [_system(rng, lang, ["get_current_weather"]), user(q), _call_turn([("get_current_weather", args)], think=think),
            tool(res), asst(final)]


def sc_weather_parallel(rng, lang):
    a, b = rng.sample(CITIES, 2)
    wa, wb = _weather(rng, a), _weather(rng, b)
    if lang == "zh":
        q = f"{a[1]}和{b[1]}现在哪边更暖和？"
        calls = [("get_current_weather", {"city": f"{a[0]}, {a[2]}", "unit": "celsius"}),
                 ("get_current_weather", {"city": f"{b[0]}, {b[2]}", "unit": "celsius"})]
        lead = "我同时查一下两个城市的天气。"
        warmer = a if wa[0] > wb[0] else b
        diff = abs(wa[0] - wb[0])
        final = (f"- {a[1]}：{wa[0]}°C，{wa[1][1]}，湿度 {wa[2]}%\n- {b[1]}：{wb[0]}°C，{wb[1][1]}，湿度 {wb[2]}%\n\n"
                 + (f"{warmer[1]}更暖和，高出 {diff}°C。" if diff else "两地气温一样。"))
    else:
        q = rng.choice([f"Compare the weather in {a[0]} and {b[0]} right now.", f"Which is warmer at the moment, {a[0]} or {b[0]}?"])
        calls = [("get_current_weather", {"city": f"{a[0]}, {a[2]}", "unit": "celsius"}),
                 ("get_current_weather", {"city": f"{b[0]}, {b[2]}", "unit": "celsius"})]
        lead = "I'll check both cities at once."
        warmer = a if wa[0] > wb[0] else b
        diff = abs(wa[0] - wb[0])
        final = (f"| | {a[0]} | {b[0]} |\n|---|---|---|\n| temperature | {wa[0]}°C | {wb[0]}°C |\n| conditions | {wa[1][0]} | {wb[1][0]} |\n"
                 f"| humidity | {wa[2]}% | {wb[2]}% |\n| wind | {wa[3]} km/h | {wb[3]} km/h |\n\n"
                 + (f"{warmer[0]} is warmer by {diff}°C." if diff else "Both are at the same temperature right now."))
    results = [
        {"city": a[0], "temperature": wa[0], "unit": "celsius", "condition": wa[1][0], "humidity": wa[2], "wind_kph": wa[3]},
        {"city": b[0], "temperature": wb[0], "unit": "celsius", "condition": wb[1][0], "humidity": wb[2], "wind_kph": wb[3]},
    ]
    return [_system(rng, lang, ["get_current_weather"]), user(q), _call_turn(calls, lead=lead),
            tool(results[0]), tool(results[1]), asst(final)]


def sc_forecast(rng, lang):
    city = rng.choice(CITIES)
    days = rng.choice([3, 4, 5])
    lo, hi = city[3]
    fc = []
    for i in range(days):
        day = TODAY + dt.timedelta(days=i + 1)
        tmax = rng.randint(lo + 2, hi + 2)
        tmin = tmax - rng.randint(4, 9)
        cond = rng.choice(CONDITIONS[:5])
        fc.append({"date": day.isoformat(), "min_c": tmin, "max_c": tmax, "condition": cond[0], "precip_chance": rng.choice(PRECIP[cond[0]])})
    wet = [f for f in fc if f["precip_chance"] >= 50]
    coldest = min(f["min_c"] for f in fc)
    warmest = max(f["max_c"] for f in fc)
    if lang == "zh":
        q = f"我明天起要去{city[1]}待 {days} 天，应该带什么衣服？"
        rows = "\n".join(f"| {f['date'][5:]} | {f['min_c']}~{f['max_c']}°C | {dict(CONDITIONS)[f['condition']]} | {f['precip_chance']}% |" for f in fc)
        final = (f"{city[1]}未来 {days} 天的预报：\n\n| 日期 | 气温 | 天气 | 降水概率 |\n|---|---|---|---|\n{rows}\n\n"
                 f"气温在 {coldest}°C 到 {warmest}°C 之间。建议：\n\n"
                 + ("- 最低气温接近或低于 5°C，带一件保暖外套或羽绒服\n" if coldest <= 5 else "- 早晚偏凉，带一件薄外套或毛衣\n")
                 + ("- 白天最高气温较高，准备短袖\n" if warmest >= 22 else "- 以长袖为主，方便叠穿\n")
                 + (f"- {'、'.join(f['date'][5:] for f in wet)} 降水概率较高，记得带伞\n" if wet else "- 降水概率都不高，可以不带伞\n"))
        think = None
    else:
        q = rng.choice([f"I'm in {city[0]} for the next {days} days starting tomorrow. What should I pack?",
                        f"What's the {days}-day forecast for {city[0]}? Trying to decide whether to bring a rain jacket."])
        rows = "\n".join(f"| {dt.date.fromisoformat(f['date']).strftime('%a %d %b')} | {f['min_c']} to {f['max_c']}°C | {f['condition']} | {f['precip_chance']}% |" for f in fc)
        final = (f"Forecast for {city[0]}:\n\n| day | temp | conditions | rain chance |\n|---|---|---|---|\n{rows}\n\n"
                 f"Temperatures range from {coldest}°C to {warmest}°C.\n\n"
                 + ("- Pack a warm coat; nights get close to freezing.\n" if coldest <= 3 else ("- Bring a warm layer for mornings and evenings.\n" if coldest <= 10 else "- A light layer for evenings is enough.\n"))
                 + ("- Short sleeves will be comfortable during the day.\n" if warmest >= 22 else "")
                 + (f"- Yes to the rain jacket: {_and(dt.date.fromisoformat(f['date']).strftime('%A') for f in wet)} {'looks' if len(wet) == 1 else 'look'} wet.\n" if wet else "- Rain chances stay low, so the rain jacket is optional.\n"))
        think = f"User wants packing advice; get a {days}-day forecast for {city[0]}." if rng.random() < 0.5 else None
    return [_system(rng, lang, ["get_forecast"]), user(q), _call_turn([("get_forecast", {"city": city[0], "days": days})], think=think),
            tool({"city": city[0], "forecast": fc}), asst(final.rstrip())]


RATES = {("USD", "EUR"): "0.9213", ("EUR", "USD"): "1.0854", ("GBP", "JPY"): "191.37", ("USD", "CNY"): "7.1842", ("CNY", "JPY"): "20.61",
         ("EUR", "CHF"): "0.9567", ("AUD", "USD"): "0.6578", ("CAD", "EUR"): "0.6794", ("USD", "INR"): "83.02", ("EUR", "CNY"): "7.8011",
         ("JPY", "CNY"): "0.04852", ("SGD", "MYR"): "3.4890"}


def sc_currency(rng, lang):
    (src, dst), rate = rng.choice(sorted(RATES.items()))
    amount = rng.choice([45, 120, 250, 980, 1500, 3200, 12000, 86.5])
    conv = Decimal(str(amount)) * Decimal(rate)
    conv_s = f"{conv.quantize(Decimal('0.01'), rounding=ROUND_HALF_UP):,}" if dst != "JPY" else f"{conv.quantize(Decimal('1'), rounding=ROUND_HALF_UP):,}"
    res = {"amount": amount, "from": src, "to": dst, "rate": float(rate), "converted": q2(conv) if dst != "JPY" else int(conv.quantize(Decimal('1'), rounding=ROUND_HALF_UP)), "rate_date": TODAY.isoformat()}
    if lang == "zh":
        q = rng.choice([f"{amount} {src} 换成 {dst} 是多少？", f"帮我算一下 {amount} {src} 能换多少 {dst}"])
        final = f"按今天（{TODAY.isoformat()}）的参考汇率 1 {src} = {rate} {dst}，{amount} {src} 约等于 **{conv_s} {dst}**。实际兑换时银行或换汇机构通常会加收点差或手续费，到手金额会略少一些。"
    else:
        q = rng.choice([f"How much is {amount} {src} in {dst}?", f"convert {amount} {src} to {dst}", f"I need to pay {amount} {src}. What's that in {dst}?"])
        final = (f"{amount} {src} is about **{conv_s} {dst}** at today's reference rate (1 {src} = {rate} {dst}, as of {TODAY.isoformat()}). "
                 f"Card networks and exchange counters add a margin, so expect the amount you actually pay or receive to differ by a percent or two.")
    return [_system(rng, lang, ["convert_currency"]), user(q),
            _call_turn([("convert_currency", {"amount": amount, "from_currency": src, "to_currency": dst})]), tool(res), asst(final)]


TICKERS = [("ACME", "Acme Robotics", 142.18), ("GLXY", "Galaxy Foods", 38.07), ("NRTH", "Northwind Energy", 77.5),
           ("QBIT", "Qubit Systems", 312.9), ("HLTH", "Helix Health", 54.33), ("SKYW", "Skyward Air", 19.84)]


def sc_stocks(rng, lang):
    a, b = rng.sample(TICKERS, 2)
    qa = [a, round(a[2] * (1 + rng.uniform(-0.04, 0.04)), 2), round(rng.uniform(-3.5, 3.5), 2)]
    qb = [b, round(b[2] * (1 + rng.uniform(-0.04, 0.04)), 2), round(rng.uniform(-3.5, 3.5), 2)]
    res = [{"symbol": x[0][0], "name": x[0][1], "price": x[1], "currency": "USD", "change_pct": x[2], "as_of": f"{TODAY.isoformat()}T15:59:00-05:00"} for x in (qa, qb)]
    better = qa if qa[2] > qb[2] else qb
    if lang == "zh":
        q = f"{a[0]} 和 {b[0]} 今天的股价表现怎么样？"
        final = (f"截至今天收盘前：\n\n- **{a[0]}**（{a[1]}）：{qa[1]} 美元，{'+' if qa[2] >= 0 else ''}{qa[2]}%\n"
                 f"- **{b[0]}**（{b[1]}）：{qb[1]} 美元，{'+' if qb[2] >= 0 else ''}{qb[2]}%\n\n今天 {better[0][0]} 表现更好。以上只是行情数据，不构成投资建议。")
    else:
        q = f"How are {a[0]} and {b[0]} doing today?"
        final = (f"As of the latest quotes:\n\n| symbol | company | price | change |\n|---|---|---:|---:|\n"
                 f"| {a[0]} | {a[1]} | ${qa[1]:.2f} | {qa[2]:+.2f}% |\n| {b[0]} | {b[1]} | ${qb[1]:.2f} | {qb[2]:+.2f}% |\n\n"
                 f"{better[0][0]} is having the better day. One day's move says little on its own, so don't read too much into it.")
    return [_system(rng, lang, ["get_stock_quote"]), user(q),
            _call_turn([("get_stock_quote", {"symbol": a[0]}), ("get_stock_quote", {"symbol": b[0]})]),
            tool(res[0]), tool(res[1]), asst(final)]


SEARCHES = [
    ("en", "What's new in Python 3.13?", "Python 3.13 new features", [
        {"title": "What's New In Python 3.13", "url": "https://docs.python.org/3/whatsnew/3.13.html",
         "snippet": "Python 3.13 includes a new interactive interpreter, experimental free-threaded build (PEP 703), an experimental JIT compiler (PEP 744), and improved error messages."},
        {"title": "Python 3.13 release notes summary", "url": "https://blog.example.dev/python-313",
         "snippet": "The new REPL supports multi-line editing and colour by default. Free-threading is opt-in via a separate build, python3.13t."},
    ], "Highlights of Python 3.13, according to the release notes:\n\n- **New interactive interpreter** with multi-line editing and colour output.\n- **Experimental free-threaded build** (PEP 703) that can run without the GIL; it's a separate build, typically `python3.13t`, not the default.\n- **Experimental JIT compiler** (PEP 744), off by default.\n- **Better error messages**, continuing the improvements from 3.10–3.12.\n\nThe free-threaded build and the JIT are both marked experimental, so treat them as previews rather than something to switch production workloads to. Full details: https://docs.python.org/3/whatsnew/3.13.html"),
    ("en", "Find me a good explanation of how HTTPS certificate chains work", "how TLS certificate chain of trust works", [
        {"title": "Certificate chains explained", "url": "https://security.example.org/tls-chains",
         "snippet": "A server sends its leaf certificate plus intermediates. The client builds a path to a root certificate it already trusts, checking signatures, validity dates and name constraints."},
        {"title": "Why your intermediate certificate is missing", "url": "https://ops.example.net/missing-intermediate",
         "snippet": "Browsers may cache intermediates, hiding a misconfiguration that breaks curl and mobile clients. Always serve the full chain."},
    ], "Here's the short version, with two good reads:\n\n1. The server sends its own (**leaf**) certificate plus one or more **intermediate** certificates.\n2. Each certificate is signed by the next one up. The client follows the signatures until it reaches a **root** certificate that's already in its trust store.\n3. Along the way it checks signatures, validity dates and that the leaf matches the hostname.\n\nA practical gotcha from the second article: if a server forgets to send the intermediate, desktop browsers may still work because they cached it earlier, while `curl` or mobile apps fail. Always configure the full chain.\n\n- https://security.example.org/tls-chains\n- https://ops.example.net/missing-intermediate"),
    ("zh", "最近有什么适合新手的开源数据库项目可以参与贡献？", "适合新手贡献的开源数据库项目 good first issue", [
        {"title": "如何找到适合新手的开源 issue", "url": "https://oss.example.cn/good-first-issue",
         "snippet": "在 GitHub 上用 label:\"good first issue\" 搜索，优先选择维护活跃、有贡献指南的项目。"},
        {"title": "SQLite、DuckDB、PostgreSQL 贡献方式对比", "url": "https://db.example.cn/contribute-compare",
         "snippet": "DuckDB 在 GitHub 上接受 PR 并标记新手 issue；PostgreSQL 通过邮件列表提交补丁；SQLite 一般不接受外部代码贡献。"},
    ], "根据搜索结果，给你几个方向：\n\n1. **DuckDB**：在 GitHub 上接受 PR，而且会给 issue 打上新手标签，上手门槛相对低。\n2. **PostgreSQL**：社区非常成熟，但补丁要通过邮件列表提交和评审，流程和 GitHub 不太一样，适合有耐心的人。\n3. **SQLite**：一般不接受外部代码贡献，可以通过报告问题、完善文档参与。\n\n通用方法：在 GitHub 搜索 `label:\"good first issue\"`，优先挑维护活跃、有 CONTRIBUTING 文档的项目。参考：\n\n- https://db.example.cn/contribute-compare\n- https://oss.example.cn/good-first-issue"),
    ("en", "Is it safe to run `npm audit fix --force`?", "npm audit fix --force risks", [
        {"title": "npm-audit documentation", "url": "https://docs.npmjs.com/cli/commands/npm-audit",
         "snippet": "--force will install semver-major updates to top-level dependencies, which may include breaking changes."},
        {"title": "Stop running npm audit fix --force blindly", "url": "https://frontend.example.io/audit-force",
         "snippet": "Major upgrades applied by --force can break builds; many reported vulnerabilities are in dev-only tooling and not exploitable in production."},
    ], "Not blindly. Per the npm docs, `--force` lets `npm audit fix` install **semver-major** upgrades, which can include breaking changes, so your build or app may stop working.\n\nA safer routine:\n\n1. Run `npm audit` and read what's affected. Many findings are in dev-only tooling (bundlers, test runners) that never ships to production.\n2. Run `npm audit fix` **without** `--force` first; it only applies compatible updates.\n3. For what remains, upgrade those packages deliberately, one at a time, and run your tests.\n4. Commit `package-lock.json` before you start so you can roll back.\n\nSources: https://docs.npmjs.com/cli/commands/npm-audit, https://frontend.example.io/audit-force"),
    ("zh", "帮我查一下番茄工作法具体是怎么做的", "番茄工作法 步骤", [
        {"title": "番茄工作法入门", "url": "https://productivity.example.cn/pomodoro",
         "snippet": "选择一个任务，设定 25 分钟计时器专注工作，结束后休息 5 分钟；每完成 4 个番茄钟，休息 15 到 30 分钟。"},
    ], "番茄工作法的基本步骤：\n\n1. 选定一个要做的任务。\n2. 设一个 **25 分钟**的计时器，期间只做这一件事，不看手机、不回消息。\n3. 计时结束后休息 **5 分钟**。\n4. 每完成 **4 个**番茄钟，休息一次长一点的，**15–30 分钟**。\n\n几个实用建议：被打断时记下打断的事情，等番茄钟结束再处理；25 分钟不是死规定，找到适合自己的节奏（比如 50 + 10）也可以。\n\n参考：https://productivity.example.cn/pomodoro"),
]


def sc_search(rng, lang, idx):
    lang_, q, query, results, final = SEARCHES[idx]
    think = None
    if rng.random() < 0.5:
        think = ("需要搜索最新信息，用简洁的关键词调用 web_search。" if lang_ == "zh" else "I should search rather than rely on memory; keep the query short.")
    return [_system(rng, lang_, ["web_search"]), user(q), _call_turn([("web_search", {"query": query, "max_results": 5})], think=think),
            tool({"query": query, "results": results}), asst(final)]


SQL_SCHEMA = ("Database schema:\n- customers(id, name, country, created_at)\n- orders(id, customer_id, status, total_cents, created_at)\n"
              "- order_items(order_id, product_id, quantity, unit_price_cents)\n- products(id, name, category)")

SQL_CASES = [
    ("en", "How many orders did we get each month this year?",
     "SELECT date_trunc('month', created_at)::date AS month, COUNT(*) AS orders\nFROM orders\nWHERE created_at >= date_trunc('year', now())\nGROUP BY 1\nORDER BY 1;",
     [{"month": "2025-01-01", "orders": 1843}, {"month": "2025-02-01", "orders": 1710}, {"month": "2025-03-01", "orders": 702}],
     "Orders per month in 2025 so far:\n\n| month | orders |\n|---|---:|\n| January | 1,843 |\n| February | 1,710 |\n| March (to date) | 702 |\n\nMarch is only 12 days in, so it's on pace for roughly 702 / 12 × 31 ≈ 1,800, in line with the previous months. February's dip is mostly explained by it having three fewer days (1,710 / 28 ≈ 61 per day vs 1,843 / 31 ≈ 59 per day in January)."),
    ("en", "Who are our top 5 customers by total spend?",
     "SELECT c.name, c.country, SUM(o.total_cents) / 100.0 AS total_spend\nFROM customers c\nJOIN orders o ON o.customer_id = c.id\nWHERE o.status = 'paid'\nGROUP BY c.id, c.name, c.country\nORDER BY total_spend DESC\nLIMIT 5;",
     [{"name": "Halvorsen AS", "country": "NO", "total_spend": 48210.5}, {"name": "Matsuda Trading", "country": "JP", "total_spend": 39877.0},
      {"name": "Brightline Ltd", "country": "GB", "total_spend": 31450.25}, {"name": "Casa Ferreira", "country": "PT", "total_spend": 27990.0},
      {"name": "Okonkwo & Sons", "country": "NG", "total_spend": 25102.8}],
     "Top 5 customers by total paid spend:\n\n| # | customer | country | total spend |\n|---|---|---|---:|\n| 1 | Halvorsen AS | NO | $48,210.50 |\n| 2 | Matsuda Trading | JP | $39,877.00 |\n| 3 | Brightline Ltd | GB | $31,450.25 |\n| 4 | Casa Ferreira | PT | $27,990.00 |\n| 5 | Okonkwo & Sons | NG | $25,102.80 |\n\nTogether they account for $172,630.55. I counted only orders with status `paid`, so refunded or pending orders are excluded."),
    ("zh", "哪个商品类别的销售额最高？",
     "SELECT p.category, SUM(oi.quantity * oi.unit_price_cents) / 100.0 AS revenue\nFROM order_items oi\nJOIN products p ON p.id = oi.product_id\nJOIN orders o ON o.id = oi.order_id\nWHERE o.status = 'paid'\nGROUP BY p.category\nORDER BY revenue DESC;",
     [{"category": "electronics", "revenue": 412880.0}, {"category": "home", "revenue": 198340.5}, {"category": "outdoor", "revenue": 120775.0}, {"category": "books", "revenue": 40210.25}],
     "按已支付订单统计，各类别销售额如下：\n\n| 类别 | 销售额 |\n|---|---:|\n| electronics（电子产品） | 412,880.00 |\n| home（家居） | 198,340.50 |\n| outdoor（户外） | 120,775.00 |\n| books（图书） | 40,210.25 |\n\n**电子产品**销售额最高，占四个类别合计 772,205.75 的约 53.5%，超过其余三类之和。"),
    ("en", "How many customers signed up in February but never placed an order?",
     "SELECT COUNT(*) AS never_ordered\nFROM customers c\nWHERE c.created_at >= '2025-02-01' AND c.created_at < '2025-03-01'\n  AND NOT EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id);",
     [{"never_ordered": 318}],
     "**318** customers who signed up in February 2025 haven't placed any order yet (of any status). If you'd like, I can also pull the total number of February sign-ups so you can see that as a conversion rate, or list these customers for a re-engagement email."),
    ("zh", "上个月每个国家的平均订单金额是多少？只看订单数超过 50 的国家。",
     "SELECT c.country, COUNT(*) AS orders, ROUND(AVG(o.total_cents) / 100.0, 2) AS avg_order\nFROM orders o\nJOIN customers c ON c.id = o.customer_id\nWHERE o.created_at >= date_trunc('month', now()) - interval '1 month'\n  AND o.created_at < date_trunc('month', now())\nGROUP BY c.country\nHAVING COUNT(*) > 50\nORDER BY avg_order DESC;",
     [{"country": "CH", "orders": 64, "avg_order": 212.4}, {"country": "DE", "orders": 311, "avg_order": 96.75}, {"country": "US", "orders": 502, "avg_order": 88.1}, {"country": "CN", "orders": 188, "avg_order": 71.3}],
     "上个月（2025 年 2 月）订单数超过 50 的国家，平均订单金额如下：\n\n| 国家 | 订单数 | 平均订单金额 |\n|---|---:|---:|\n| 瑞士 CH | 64 | 212.40 |\n| 德国 DE | 311 | 96.75 |\n| 美国 US | 502 | 88.10 |\n| 中国 CN | 188 | 71.30 |\n\n瑞士的客单价最高，约为美国的 2.4 倍，但订单量较小；美国订单最多。这里统计的是所有状态的订单，如果只想看已支付订单，我可以加上 `status = 'paid'` 再查一次。"),
    ("en", "What's our refund rate by month for the last 3 months?",
     "SELECT date_trunc('month', created_at)::date AS month,\n       COUNT(*) FILTER (WHERE status = 'refunded') AS refunded,\n       COUNT(*) AS total,\n       ROUND(100.0 * COUNT(*) FILTER (WHERE status = 'refunded') / COUNT(*), 2) AS refund_pct\nFROM orders\nWHERE created_at >= date_trunc('month', now()) - interval '2 months'\nGROUP BY 1\nORDER BY 1;",
     [{"month": "2025-01-01", "refunded": 41, "total": 1843, "refund_pct": 2.22}, {"month": "2025-02-01", "refunded": 66, "total": 1710, "refund_pct": 3.86}, {"month": "2025-03-01", "refunded": 12, "total": 702, "refund_pct": 1.71}],
     "Refund rate, last three months:\n\n| month | refunded | orders | rate |\n|---|---:|---:|---:|\n| Jan 2025 | 41 | 1,843 | 2.22% |\n| Feb 2025 | 66 | 1,710 | 3.86% |\n| Mar 2025 (to date) | 12 | 702 | 1.71% |\n\nFebruary stands out: the rate nearly doubled compared with January. March looks low, but refunds usually lag orders by a couple of weeks, so that number will likely rise. Worth checking which products drove February's refunds; I can break it down by category if you want."),
]


def sc_sql(rng, lang, idx):
    lang_, q, query, rows, final = SQL_CASES[idx]
    sysmsg = _system(rng, lang_, ["run_sql"])
    sysmsg["content"] = SQL_SCHEMA + "\n\n" + sysmsg["content"]
    think = None
    if rng.random() < 0.6:
        think = ("根据表结构写一条 SELECT 查询。" if lang_ == "zh" else "Write one SELECT against the schema; paid orders only where it matters.")
    return [sysmsg, user(q), _call_turn([("run_sql", {"query": query})], think=think),
            tool({"columns": list(rows[0].keys()), "rows": rows, "row_count": len(rows)}), asst(final)]


EMAILS = [
    ("en", "Email priya.nair@example.com and tell her the design review moved from Thursday to Friday 10am, same room. Keep it short.",
     {"to": ["priya.nair@example.com"], "subject": "Design review moved to Friday 10:00",
      "body": "Hi Priya,\n\nQuick heads-up: the design review has moved from Thursday to Friday at 10:00. Same room as before.\n\nThanks!"},
     "Done. I emailed Priya that the design review is now on Friday at 10:00, same room."),
    ("en", "Send a thank-you note to the interview panel (j.ortiz@example.com, m.chen@example.com) for today's interview for the data engineer role. Mention I enjoyed the discussion about the streaming pipeline.",
     {"to": ["j.ortiz@example.com", "m.chen@example.com"], "subject": "Thank you – Data Engineer interview",
      "body": "Dear Ms. Ortiz and Mr. Chen,\n\nThank you for taking the time to speak with me today about the Data Engineer role. I especially enjoyed our discussion about the streaming pipeline and the trade-offs around late-arriving events.\n\nI'm very interested in the position and happy to provide anything else you need.\n\nBest regards"},
     "Sent to both panel members. The note thanks them for the interview, mentions the streaming pipeline discussion, and reaffirms your interest in the role."),
    ("zh", "给 wang.lei@example.com 发封邮件，说周报我明天上午补交，今天在客户现场没来得及写。",
     {"to": ["wang.lei@example.com"], "subject": "周报明天上午补交",
      "body": "王磊你好：\n\n今天一直在客户现场，没来得及整理周报，我会在明天上午补交，给你添麻烦了。\n\n谢谢！"},
     "邮件已发送给 wang.lei@example.com，说明了今天在客户现场、周报会在明天上午补交。"),
    ("en", "Let the team (team-backend@example.com) know that staging will be down for maintenance Saturday 22:00–23:30 UTC, and cc ops@example.com.",
     {"to": ["team-backend@example.com"], "cc": ["ops@example.com"], "subject": "Staging maintenance: Sat 22:00–23:30 UTC",
      "body": "Hi all,\n\nStaging will be unavailable for planned maintenance on Saturday from 22:00 to 23:30 UTC. Please avoid scheduling deployments or test runs against staging in that window.\n\nThanks,"},
     "Sent to team-backend@example.com with ops@example.com on cc: staging maintenance Saturday 22:00–23:30 UTC, with a request to avoid deploys and test runs in that window."),
]


def sc_email(rng, lang, idx):
    lang_, q, args, final = EMAILS[idx]
    mid = f"<{rng.randrange(16**10):010x}@mail.example.com>"
    think = None
    if rng.random() < 0.5:
        think = ("先把邮件正文写好，再调用 send_email。" if lang_ == "zh" else "Draft a short, clear email from the request and send it.")
    return [_system(rng, lang_, ["send_email"]), user(q), _call_turn([("send_email", args)], think=think),
            tool({"status": "sent", "message_id": mid}), asst(final)]


def _next_weekday(d, weekday):
    days = (weekday - d.weekday()) % 7 or 7
    return d + dt.timedelta(days=days)


CAL_CASES = [
    ("en", "Put a 1:1 with Jonas on my calendar next Tuesday at 3pm for 30 minutes.", "1:1 with Jonas", 1, (15, 0), 30, None, None),
    ("en", "Schedule 'Quarterly planning' this Friday from 9:30 to 12, room Atlas, invite ana@example.com and li.wei@example.com.", "Quarterly planning", 4, (9, 30), 150, "Atlas", ["ana@example.com", "li.wei@example.com"]),
    ("zh", "帮我在下周一上午十点加一个“牙医复查”，一个小时。", "牙医复查", 0, (10, 0), 60, None, None),
    ("en", "Block two hours for focus time tomorrow starting at 1pm.", "Focus time", None, (13, 0), 120, None, None),
    ("zh", "周四下午两点半和产品组开需求评审会，45 分钟，地点 3 楼大会议室。", "需求评审会", 3, (14, 30), 45, "3 楼大会议室", None),
]


def sc_calendar(rng, lang, idx):
    lang_, q, title, weekday, (h, m), mins, loc, att = CAL_CASES[idx]
    if weekday is None:
        day = TODAY + dt.timedelta(days=1)
    elif "next" in q or "下周" in q:
        day = _next_weekday(TODAY + dt.timedelta(days=(7 - TODAY.weekday()) - 1), weekday)
    else:
        day = _next_weekday(TODAY, weekday)
    start = dt.datetime.combine(day, dt.time(h, m))
    end = start + dt.timedelta(minutes=mins)
    args = {"title": title, "start": start.strftime("%Y-%m-%dT%H:%M"), "end": end.strftime("%Y-%m-%dT%H:%M")}
    if att:
        args["attendees"] = att
    if loc:
        args["location"] = loc
    if lang_ == "zh":
        think = f"今天是 {TODAY.isoformat()} 星期{WEEKDAYS_ZH[TODAY.weekday()]}，所以目标日期是 {day.isoformat()}（星期{WEEKDAYS_ZH[day.weekday()]}），{start:%H:%M} 到 {end:%H:%M}。"
        final = f"已添加到日历：**{title}**，{day.month} 月 {day.day} 日（星期{WEEKDAYS_ZH[day.weekday()]}）{start:%H:%M}–{end:%H:%M}" + (f"，地点：{loc}" if loc else "") + "。"
    else:
        think = f"Today is {TODAY:%A %Y-%m-%d}, so the date is {day:%A %Y-%m-%d}; {start:%H:%M}–{end:%H:%M}."
        final = (f"Added **{title}** on {day:%A, %d %B} from {start:%H:%M} to {end:%H:%M}"
                 + (f" in {loc}" if loc else "") + (f", with invitations sent to {' and '.join(att)}" if att else "") + ".")
    sysmsg = _system(rng, lang_, ["create_calendar_event"])
    if "Today is" not in sysmsg["content"] and "今天是" not in sysmsg["content"]:
        sysmsg["content"] = (f"今天是 {TODAY.isoformat()}（星期{WEEKDAYS_ZH[TODAY.weekday()]}）。\n\n" if lang_ == "zh" else f"Today is {TODAY:%A, %d %B %Y}.\n\n") + sysmsg["content"]
    ev = {"event_id": f"evt_{rng.randrange(16**8):08x}", "status": "confirmed", **args}
    return [sysmsg, user(q), _call_turn([("create_calendar_event", args)], think=think), tool(ev), asst(final)]


def sc_flights_then_calendar(rng, lang):
    routes = [("LIS", "AMS", "Lisbon", "Amsterdam"), ("SFO", "SEA", "San Francisco", "Seattle"), ("PVG", "NRT", "Shanghai", "Tokyo"),
              ("BER", "VIE", "Berlin", "Vienna"), ("YYZ", "ORD", "Toronto", "Chicago")]
    o, d_, on, dn = rng.choice(routes)
    day = _next_weekday(TODAY, rng.choice([0, 1, 3]))
    carriers = ["SkyLark", "Aurora Air", "BlueJet", "Meridian"]
    flights = []
    for i in range(3):
        dep = dt.datetime.combine(day, dt.time(rng.choice([6, 8, 11, 14, 17, 19]), rng.choice([0, 15, 35, 50])))
        dur = rng.randint(75, 190)
        flights.append({"flight": f"{rng.choice(['SL', 'AU', 'BJ', 'MD'])}{rng.randint(100, 999)}", "carrier": rng.choice(carriers),
                        "depart": dep.strftime("%Y-%m-%dT%H:%M"), "arrive": (dep + dt.timedelta(minutes=dur)).strftime("%Y-%m-%dT%H:%M"),
                        "stops": 0, "price": {"amount": rng.randint(900, 3200) if o == "PVG" else rng.randint(89, 420), "currency": "EUR" if o in ("LIS", "BER") else ("CNY" if o == "PVG" else "USD")}})
    flights.sort(key=lambda f: f["depart"])
    cheapest = min(flights, key=lambda f: f["price"]["amount"])
    if lang == "zh":
        q = f"帮我查一下 {day.month} 月 {day.day} 日从{on}到{dn}的航班，挑最便宜的，然后把它加到我的日历里。"
        t1 = f"先用 search_flights 查 {o} 到 {d_}、{day.isoformat()} 的航班，找到最便宜的再建日历事件。"
        title = f"航班 {cheapest['flight']} {o}→{d_}"
        final = (f"找到 {len(flights)} 个直飞航班，最便宜的是 **{cheapest['flight']}**（{cheapest['carrier']}），"
                 f"{cheapest['depart'][11:]} 起飞，{cheapest['arrive'][11:]} 到达，票价 {cheapest['price']['amount']} {cheapest['price']['currency']}。"
                 f"已经把它加到你的日历里了。注意我只是加了日历，**还没有订票**，需要的话告诉我。")
    else:
        q = f"Find flights from {on} to {dn} on {day:%A %d %B}, pick the cheapest, and put it in my calendar."
        t1 = f"Search {o}->{d_} on {day.isoformat()}, then create a calendar event for the cheapest result."
        title = f"Flight {cheapest['flight']} {o}→{d_}"
        others = _and(f"{f['flight']} at {f['depart'][11:]} ({f['price']['amount']} {f['price']['currency']})" for f in flights if f is not cheapest)
        final = (f"The cheapest option is **{cheapest['flight']}** ({cheapest['carrier']}), departing {cheapest['depart'][11:]} and arriving {cheapest['arrive'][11:]}, "
                 f"for {cheapest['price']['amount']} {cheapest['price']['currency']}. It's now in your calendar.\n\n"
                 f"Other nonstop options were {others}. Note that I only added it to your calendar; **nothing has been booked**.")
    ev_args = {"title": title, "start": cheapest["depart"], "end": cheapest["arrive"], "location": f"{o} airport"}
    return [_system(rng, lang, ["search_flights", "create_calendar_event"]), user(q),
            _call_turn([("search_flights", {"origin": o, "destination": d_, "date": day.isoformat(), "passengers": 1, "cabin": "economy"})], think=t1),
            tool({"results": flights}),
            _call_turn([("create_calendar_event", ev_args)]),
            tool({"event_id": f"evt_{rng.randrange(16**8):08x}", "status": "confirmed", **ev_args}),
            asst(final)]


PY_TASKS = [
    ("en", "What's 17% of 2,348.60, and what's the remainder after subtracting it?", "x = 2348.60\npart = round(x * 0.17, 2)\nprint(part, round(x - part, 2))"),
    ("en", "If I save $350 a month at 4% annual interest compounded monthly, how much will I have after 10 years?",
     "r = 0.04 / 12\nn = 120\nfv = 350 * ((1 + r) ** n - 1) / r\nprint(round(fv, 2))"),
    ("zh", "从 1 到 1000 中，能被 3 或 7 整除的数有多少个？", "print(sum(1 for n in range(1, 1001) if n % 3 == 0 or n % 7 == 0))"),
    ("en", "How many days are there between 2024-02-10 and 2025-03-12?", "from datetime import date\nprint((date(2025, 3, 12) - date(2024, 2, 10)).days)"),
    ("zh", "帮我算一下这组数据的平均数、中位数和标准差：12, 15, 9, 22, 17, 15, 30, 11", "import statistics as s\nd = [12, 15, 9, 22, 17, 15, 30, 11]\nprint(s.mean(d), s.median(d), round(s.stdev(d), 3))"),
    ("en", "What is the 40th Fibonacci number (with F1 = F2 = 1)?", "a, b = 1, 1\nfor _ in range(38):\n    a, b = b, a + b\nprint(b)"),
    ("en", "Is 2,147,483,647 prime?", "n = 2147483647\nprint(all(n % p for p in range(2, int(n ** 0.5) + 1)))"),
]


def _run(code):
    import contextlib
    import io
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(code, {})  # noqa: S102 - fixed, hand-written snippets only
    return buf.getvalue()


def sc_python(rng, lang, idx):
    lang_, q, code = PY_TASKS[idx]
    out = _run(code)
    vals = out.split()
    if idx == 0:
        final = f"17% of 2,348.60 is **{vals[0]}**, which leaves **{vals[1]}**."
    elif idx == 1:
        final = (f"You'd have about **${float(vals[0]):,.2f}** after 10 years. You pay in $42,000 in total (350 × 120), so about "
                 f"${float(vals[0]) - 42000:,.2f} of that is interest. This assumes the deposit is made at the end of each month and the rate stays fixed.")
    elif idx == 2:
        final = f"一共有 **{vals[0]}** 个。用容斥原理也可以验证：能被 3 整除的有 333 个，能被 7 整除的有 142 个，同时能被 21 整除的有 47 个，333 + 142 − 47 = 428。"
    elif idx == 3:
        final = f"There are **{vals[0]}** days between 10 Feb 2024 and 12 Mar 2025 (counting the end date but not the start date). 2024 was a leap year, so 29 February is included."
    elif idx == 4:
        final = f"- 平均数：{vals[0]}\n- 中位数：{vals[1]}（排序后中间两个数 15 和 15 的平均）\n- 样本标准差：约 {vals[2]}\n\n注意这里用的是样本标准差（除以 n − 1）。如果这 8 个数就是全部总体，应该用总体标准差，数值会稍小一些。"
    elif idx == 5:
        final = f"F(40) = **{int(vals[0]):,}**."
    else:
        final = ("**Yes**, 2,147,483,647 is prime. It's 2³¹ − 1, a Mersenne prime, and also the maximum value of a signed 32-bit integer, which is why it shows up so often in programming."
                 if vals[0] == "True" else "No, it's not prime.")
    think = "用 python_exec 精确计算，避免心算出错。" if lang_ == "zh" else "Compute it exactly with python_exec instead of by hand."
    return [_system(rng, lang_, ["python_exec"]), user(q), _call_turn([("python_exec", {"code": code})], think=think if rng.random() < 0.6 else None),
            tool({"stdout": out, "exit_code": 0}), asst(final)]


TRANSLATIONS = [
    ("en", "Translate 'Could you send me the invoice by Friday?' into German, formal.", "Could you send me the invoice by Friday?", "de", "formal",
     "Könnten Sie mir die Rechnung bis Freitag schicken?",
     "**Könnten Sie mir die Rechnung bis Freitag schicken?**\n\nThis uses the formal *Sie*. Among colleagues on first-name terms you'd say *Könntest du mir die Rechnung bis Freitag schicken?*"),
    ("zh", "把“我们下周三之前会把样品寄出”翻译成日语，要正式一点。", "我们下周三之前会把样品寄出", "ja", "formal",
     "来週の水曜日までにサンプルを発送いたします。",
     "**来週の水曜日までにサンプルを発送いたします。**\n\n这里用了谦让语「いたします」，适合对客户或合作方使用。"),
    ("en", "How do I say 'Where is the nearest pharmacy?' in Spanish?", "Where is the nearest pharmacy?", "es", "default",
     "¿Dónde está la farmacia más cercana?",
     "**¿Dónde está la farmacia más cercana?**\n\nPronounced roughly *DON-deh es-TAH lah far-MAH-syah mahs ser-KAH-nah*. Note the opening ¿, which Spanish uses at the start of questions."),
]


def sc_translate(rng, lang, idx):
    lang_, q, text, tgt, form, out, final = TRANSLATIONS[idx]
    return [_system(rng, lang_, ["translate_text"]), user(q),
            _call_turn([("translate_text", {"text": text, "target_language": tgt, "formality": form})]),
            tool({"translation": out, "detected_source_language": "zh" if lang_ == "zh" else "en"}), asst(final)]


ISSUES = [
    ("en", "Open an issue in acme/billing-service: invoices generated on the last day of the month get the next month's date when the server runs in UTC+ time zones. Label it bug.",
     {"repo": "acme/billing-service", "title": "Invoices dated next month when generated on the last day in UTC+ zones",
      "body": "## Description\nInvoices generated on the last day of a month receive the *next* month's date when the server runs in a time zone ahead of UTC.\n\n## Likely cause\nThe invoice date appears to be derived from a UTC timestamp converted to local time (or vice versa) around midnight.\n\n## Expected\nThe invoice date should match the billing period's local calendar date.\n\n## Steps to reproduce\n1. Run the service with `TZ=Asia/Tokyo`.\n2. Generate an invoice on the last day of the month after 00:00 local time but before 00:00 UTC.\n3. Observe the invoice date.",
      "labels": ["bug"]}, 412),
    ("zh", "在 lab/pipeline 仓库提个 issue：nightly 任务从周一开始一直超时，怀疑是新加的去重步骤太慢，标签加 performance 和 ci。",
     {"repo": "lab/pipeline", "title": "nightly 任务自周一起持续超时，疑似去重步骤导致",
      "body": "## 现象\n从本周一开始，nightly 任务每次都超时失败。\n\n## 怀疑原因\n最近新增的去重步骤可能处理时间过长。\n\n## 建议排查\n- 对比加入去重步骤前后各阶段的耗时\n- 检查去重是否对全量数据做了两两比较\n- 确认是否缺少索引或可以改为基于哈希的去重",
      "labels": ["performance", "ci"]}, 87),
    ("en", "File a feature request on octo-org/docs-site asking for a dark mode toggle that remembers the choice. Label: enhancement.",
     {"repo": "octo-org/docs-site", "title": "Add a dark mode toggle that remembers the user's choice",
      "body": "## Request\nAdd a toggle to switch between light and dark themes.\n\n## Details\n- Default to the OS preference (`prefers-color-scheme`).\n- Remember an explicit choice across visits (e.g. `localStorage`).\n- Avoid a flash of the wrong theme on page load by applying the theme before first paint.",
      "labels": ["enhancement"]}, 1290),
]


def sc_issue(rng, lang, idx):
    lang_, q, args, num = ISSUES[idx]
    url = f"https://github.com/{args['repo']}/issues/{num}"
    final = (f"已创建 issue #{num}：{args['title']}（标签：{'、'.join(args['labels'])}）\n{url}" if lang_ == "zh"
             else f"Created issue #{num}, \"{args['title']}\", labelled {', '.join(args['labels'])}: {url}")
    think = None
    if rng.random() < 0.5:
        think = "先把问题描述整理成结构化的 issue 正文，再调用工具。" if lang_ == "zh" else "Turn the description into a structured issue body, then create it."
    return [_system(rng, lang_, ["create_github_issue"]), user(q), _call_turn([("create_github_issue", args)], think=think),
            tool({"number": num, "url": url, "state": "open"}), asst(final)]


K8S = [
    ("en", "checkout", "Checkout is returning 502s. Can you check the pods in the shop namespace?", "app=checkout",
     "Error: connect ECONNREFUSED 10.0.14.7:5432\n    at TCPConnectWrap.afterConnect [as oncomplete] (node:net:1555:16)\nFatal: could not connect to database after 5 attempts, exiting",
     "One of the three checkout pods is in **CrashLoopBackOff** (`{pod}`, {restarts} restarts). Its previous container exited because it couldn't reach the database: `ECONNREFUSED 10.0.14.7:5432`, then gave up after 5 attempts.\n\nThe other two pods are running, so checkout is degraded rather than fully down, which fits intermittent 502s.\n\nNext steps I'd suggest:\n1. Check whether the Postgres service/pod at `10.0.14.7` is healthy (`kubectl get pods -n shop -l app=postgres`).\n2. If only this node can't reach it, look at network policies or the node itself.\n3. Once the database is reachable the pod should recover on its next restart; you can also delete it to restart immediately."),
    ("zh", "report-worker", "report-worker 好像挂了，帮我看一下 analytics 命名空间里的 pod。", "app=report-worker",
     "Loading dataset partitions: 48/48\nAllocating buffers for aggregation...\nKilled",
     "`{pod}` 处于 **CrashLoopBackOff**，已经重启 {restarts} 次。上一个容器的日志最后一行是 `Killed`，而且是在分配聚合缓冲区时发生的，这通常意味着容器**超出内存限制被 OOM Kill**。\n\n建议：\n1. 用 `kubectl describe pod {pod} -n analytics` 确认 `Last State` 的原因是否为 `OOMKilled`；\n2. 如果是，适当调高 `resources.limits.memory`，或者让任务分批处理分区，降低峰值内存；\n3. 同时看一下最近数据量是否明显增加，48 个分区一次性加载可能是触发原因。"),
    ("en", "search-api", "search-api pods keep restarting in prod, what's going on?", "app=search-api",
     "listening on :8080\nreadiness probe: GET /healthz -> 200\nliveness probe failed: GET /livez timed out after 1s\nreceived SIGTERM, shutting down",
     "`{pod}` is being restarted by Kubernetes itself, not crashing on its own: the logs show the **liveness probe timing out** (`GET /livez timed out after 1s`), followed by `SIGTERM`. It has restarted {restarts} times.\n\nThe readiness probe on `/healthz` passes, so the app is up but `/livez` is too slow to answer within 1 second, probably when the pod is busy.\n\nOptions:\n- Raise `timeoutSeconds` on the liveness probe (1s is the default and is tight for a loaded service) and consider a higher `failureThreshold`.\n- Make `/livez` trivial: it should only confirm the process is alive, not call dependencies.\n- Check CPU throttling on these pods; a CPU limit that's too low makes probes time out under load."),
]


def sc_k8s(rng, lang, idx):
    lang_, app, q, sel, logs, final_t = K8S[idx]
    ns = {"checkout": "shop", "report-worker": "analytics", "search-api": "prod"}[app]
    suffix = lambda: f"{rng.randrange(16**5):05x}"  # noqa: E731
    rs = f"{rng.randrange(16**9):09x}"[:9]
    pods = []
    bad = rng.randrange(3)
    restarts = rng.randint(6, 41)
    for i in range(3):
        name = f"{app}-{rs}-{suffix()}"
        if i == bad:
            pods.append({"name": name, "ready": "0/1", "status": "CrashLoopBackOff", "restarts": restarts, "age": "3h12m"})
        else:
            pods.append({"name": name, "ready": "1/1", "status": "Running", "restarts": 0, "age": "3h12m"})
    pod = pods[bad]["name"]
    t1 = (f"先列出 {ns} 命名空间里 {sel} 的 pod，看哪个状态异常。" if lang_ == "zh" else f"List pods for {sel} in {ns} first, then look at logs of any unhealthy one.")
    t2 = ("这个 pod 在 CrashLoopBackOff，看上一个容器的日志。" if lang_ == "zh" else "One pod is crash-looping; fetch logs from the previous container.")
    return [_system(rng, lang_, ["kubectl_get_pods", "kubectl_logs"]), user(q),
            _call_turn([("kubectl_get_pods", {"namespace": ns, "label_selector": sel})], think=t1),
            tool({"pods": pods}),
            _call_turn([("kubectl_logs", {"namespace": ns, "pod": pod, "tail": 50, "previous": True})], think=t2),
            tool({"pod": pod, "lines": logs.split("\n")}),
            asst(final_t.format(pod=pod, restarts=restarts))]


def sc_refund(rng, lang):
    oid = f"ORD-{rng.randint(100000, 999999)}"
    items = rng.choice([[("Trail running shoes", 1, 129.0), ("Running socks (3-pack)", 2, 14.5)],
                        [("Mechanical keyboard", 1, 89.99), ("USB-C cable", 1, 12.0)],
                        [("Ceramic teapot", 1, 46.0), ("Loose-leaf oolong 100g", 2, 18.5)]])
    damaged = items[0]
    total = round(sum(q * p for _, q, p in items), 2)
    delivered = (TODAY - dt.timedelta(days=rng.randint(2, 9))).isoformat()
    order = {"order_id": oid, "status": "delivered", "delivered_on": delivered,
             "items": [{"name": n, "quantity": q, "unit_price": p} for n, q, p in items], "total": total, "currency": "USD", "refunded": 0}
    amount = damaged[2]
    if lang == "zh":
        q = f"我的订单 {oid} 里的 {damaged[0]} 收到时是坏的，能退这一件的钱吗？"
        t1 = "先查订单，确认商品和金额。"
        t2 = f"订单已送达，{damaged[0]} 单价 {amount}，部分退款这一件。"
        reason = f"{damaged[0]} 到货损坏"
        final = f"已经为订单 {oid} 办理退款：**{damaged[0]}**，金额 **{amount:.2f} 美元**。款项会原路退回，通常 5–10 个工作日到账。订单里的其他商品不受影响。很抱歉给你带来不便！"
    else:
        q = f"Order {oid}: the {damaged[0].lower()} arrived damaged. Can I get a refund for just that item?"
        t1 = "Look up the order to confirm the item and price before refunding."
        t2 = f"Delivered on {delivered}; refund only the damaged item at {amount}."
        reason = f"{damaged[0]} arrived damaged"
        final = (f"Sorry about that. I've refunded **${amount:.2f}** for the {damaged[0].lower()} on order {oid}. "
                 f"It goes back to your original payment method and usually shows up within 5–10 business days. The rest of the order (total ${total:.2f}) is unaffected.")
    ref = {"refund_id": f"rf_{rng.randrange(16**8):08x}", "order_id": oid, "amount": amount, "status": "processed"}
    return [_system(rng, lang, ["lookup_order", "issue_refund"]), user(q),
            _call_turn([("lookup_order", {"order_id": oid})], think=t1), tool(order),
            _call_turn([("issue_refund", {"order_id": oid, "amount": amount, "reason": reason})], think=t2), tool(ref),
            asst(final)]


TRIPS = [
    ("en", "How long would it take me to cycle from Kreuzberg to Tempelhofer Feld?", "Kreuzberg, Berlin", "Tempelhofer Feld, Berlin", "cycling", 4.1, 15),
    ("en", "Driving from Boulder to Denver airport, how long right now?", "Boulder, CO", "Denver International Airport", "driving", 72.4, 58),
    ("zh", "从上海虹桥站坐公共交通到外滩要多久？", "上海虹桥站", "上海外滩", "transit", 21.3, 52),
    ("zh", "从西湖断桥走路到河坊街大概多久？", "杭州西湖断桥", "杭州河坊街", "walking", 3.2, 42),
]


def sc_travel(rng, lang, idx):
    lang_, q, o, d_, mode, km, mins = TRIPS[idx]
    if lang_ == "zh":
        mode_zh = {"transit": "公共交通", "walking": "步行", "driving": "驾车", "cycling": "骑行"}[mode]
        final = f"{mode_zh}从{o}到{d_}大约 **{mins} 分钟**，路程约 {km} 公里。" + ("高峰期换乘和排队可能多花 10 分钟左右。" if mode == "transit" else "路上可以顺便逛逛，实际用时取决于你走走停停的节奏。")
    else:
        h, m = divmod(mins, 60)
        dur = f"{h} h {m} min" if h else f"{mins} minutes"
        final = f"About **{dur}** by {mode}, covering roughly {km} km." + (" That's the current estimate with live traffic; it can change quickly around rush hour." if mode == "driving" else " That's at a relaxed pace; a fast rider will be quicker.")
    return [_system(rng, lang_, ["get_travel_time"]), user(q), _call_turn([("get_travel_time", {"origin": o, "destination": d_, "mode": mode})]),
            tool({"distance_km": km, "duration_min": mins, "mode": mode}), asst(final)]


def sc_clarify(rng, lang, idx):
    if idx == 0:
        q = "Book a table at Bistro Lumière for Saturday."
        ask = "Happy to. What time would you like, and for how many people?"
        ans = "7:30pm, 4 of us. One is vegetarian."
        sat = _next_weekday(TODAY, 5)
        args = {"restaurant": "Bistro Lumière", "date": sat.isoformat(), "time": "19:30", "party_size": 4, "notes": "One vegetarian guest"}
        res = {"status": "confirmed", "confirmation_code": f"BL-{rng.randint(1000, 9999)}", **args}
        final = f"You're booked at Bistro Lumière on Saturday {sat:%d %B} at 19:30 for 4. I noted that one guest is vegetarian. Confirmation code: **{res['confirmation_code']}**."
        return [_system(rng, "en", ["book_restaurant"]), user(q), asst(ask), user(ans), _call_turn([("book_restaurant", args)]), tool(res), asst(final)]
    if idx == 1:
        q = "提醒我给房东打电话。"
        ask = "好的，你希望什么时候提醒你？"
        ans = "明天下午五点"
        at = dt.datetime.combine(TODAY + dt.timedelta(days=1), dt.time(17, 0))
        args = {"text": "给房东打电话", "at": at.strftime("%Y-%m-%dT%H:%M")}
        res = {"reminder_id": f"rem_{rng.randrange(16**6):06x}", "status": "scheduled", **args}
        final = f"好的，已设置提醒：{at.month} 月 {at.day} 日（明天）17:00 提醒你给房东打电话。"
        return [_system(rng, "zh", ["set_reminder"]), user(q), asst(ask), user(ans),
                _call_turn([("set_reminder", args)], think=f"明天是 {at.date().isoformat()}，时间 17:00。"), tool(res), asst(final)]
    q = "Convert 500 to euros."
    ask = "Sure. Which currency is the 500 in: US dollars, or something else?"
    ans = "Canadian dollars"
    rate = RATES[("CAD", "EUR")]
    conv = Decimal("500") * Decimal(rate)
    args = {"amount": 500, "from_currency": "CAD", "to_currency": "EUR"}
    res = {"amount": 500, "from": "CAD", "to": "EUR", "rate": float(rate), "converted": q2(conv), "rate_date": TODAY.isoformat()}
    final = f"500 CAD is about **{q2(conv):,.2f} EUR** at today's reference rate (1 CAD = {rate} EUR)."
    return [_system(rng, "en", ["convert_currency"]), user(q), asst(ask), user(ans), _call_turn([("convert_currency", args)]), tool(res), asst(final)]


def sc_error(rng, lang, idx):
    if idx == 0:
        q = "What's the weather in Edinbrugh?"
        bad = {"city": "Edinbrugh", "unit": "celsius"}
        good = {"city": "Edinburgh, GB", "unit": "celsius"}
        t, cond, hum, wind = _weather(rng, CITIES[8])
        res = {"city": "Edinburgh", "temperature": t, "unit": "celsius", "condition": cond[0], "humidity": hum, "wind_kph": wind}
        return [_system(rng, "en", ["get_current_weather"]), user(q), _call_turn([("get_current_weather", bad)]),
                tool({"error": "city_not_found", "message": "No city matching 'Edinbrugh'"}),
                _call_turn([("get_current_weather", good)], lead="That spelling wasn't found; retrying with Edinburgh, GB.",
                           think="Typo in the city name; Edinburgh is almost certainly meant."),
                tool(res), asst(f"(Assuming you meant Edinburgh.) It's {t}°C there right now with {COND_PHRASE[cond[0]]}, {hum}% humidity and wind around {wind} km/h.")]
    if idx == 1:
        q = "How many paid orders were there yesterday?"
        q1 = "SELECT COUNT(*) FROM orders WHERE status = 'paid' AND created::date = now()::date - 1;"
        err = {"error": 'column "created" does not exist', "hint": 'Perhaps you meant to reference the column "orders.created_at".'}
        q2_ = "SELECT COUNT(*) AS paid_orders\nFROM orders\nWHERE status = 'paid'\n  AND created_at >= date_trunc('day', now()) - interval '1 day'\n  AND created_at <  date_trunc('day', now());"
        n = rng.randint(40, 90)
        sysmsg = _system(rng, "en", ["run_sql"])
        sysmsg["content"] = SQL_SCHEMA + "\n\n" + sysmsg["content"]
        return [sysmsg, user(q), _call_turn([("run_sql", {"query": q1})]), tool(err),
                _call_turn([("run_sql", {"query": q2_})], think="Wrong column name; the schema says created_at. Use a half-open range on created_at so an index on it can be used, instead of casting to date."),
                tool({"columns": ["paid_orders"], "rows": [{"paid_orders": n}], "row_count": 1}),
                asst(f"There were **{n}** paid orders yesterday ({(TODAY - dt.timedelta(days=1)):%d %B %Y}), counting by the database's time zone.")]
    if idx == 2:
        q = "把 200 美元换成人民币，顺便看看换成日元是多少。"
        rate_cny = RATES[("USD", "CNY")]
        cny = Decimal(200) * Decimal(rate_cny)
        return [_system(rng, "zh", ["convert_currency"]), user(q),
                _call_turn([("convert_currency", {"amount": 200, "from_currency": "USD", "to_currency": "CNY"}),
                            ("convert_currency", {"amount": 200, "from_currency": "USD", "to_currency": "JPY"})], lead="我同时查询两种货币。"),
                tool({"amount": 200, "from": "USD", "to": "CNY", "rate": float(rate_cny), "converted": q2(cny), "rate_date": TODAY.isoformat()}),
                tool({"error": "rate_unavailable", "message": "USD/JPY reference rate temporarily unavailable"}),
                asst(f"- 200 美元 ≈ **{q2(cny):,.2f} 人民币**（汇率 1 USD = {rate_cny} CNY）\n- 日元的汇率暂时查询不到，接口返回“rate_unavailable”。你可以稍后再问我一次，我再查。")]
    q = "Create an issue in acme/web for the broken signup button on Safari."
    args = {"repo": "acme/web", "title": "Signup button does nothing on Safari", "body": "## Description\nClicking the signup button on Safari has no effect.\n\n## Environment\n- Browser: Safari\n\n## Expected\nThe signup form submits.", "labels": ["bug"]}
    return [_system(rng, "en", ["create_github_issue"]), user(q), _call_turn([("create_github_issue", args)]),
            tool({"error": "forbidden", "message": "Token lacks permission to create issues in acme/web"}),
            asst("I couldn't create the issue: the GitHub token I'm using doesn't have permission to open issues in **acme/web** (403 forbidden).\n\n"
                 "Options:\n- Grant the integration *Issues: write* access on that repository, and I'll retry.\n"
                 "- Or create it yourself; here's the text I prepared:\n\n"
                 "**Title:** Signup button does nothing on Safari\n\n"
                 "**Body:**\n> Clicking the signup button on Safari has no effect.\n> Environment: Safari.\n> Expected: the signup form submits.\n\n"
                 "If you can tell me the Safari and macOS/iOS versions, it would be worth adding them; WebKit-only bugs are often version-specific.")]


def build(rng) -> list[dict]:
    plan = []
    plan += [(sc_weather, "en")] * 4 + [(sc_weather, "zh")] * 2
    plan += [(sc_weather_parallel, "en")] * 2 + [(sc_weather_parallel, "zh")]
    plan += [(sc_forecast, "en")] * 2 + [(sc_forecast, "zh")]
    plan += [(sc_currency, "en")] * 3 + [(sc_currency, "zh")]
    plan += [(sc_stocks, "en")] * 2 + [(sc_stocks, "zh")]
    plan += [(sc_flights_then_calendar, "en")] * 2 + [(sc_flights_then_calendar, "zh")]
    plan += [(sc_refund, "en")] * 2 + [(sc_refund, "zh")]
    out = []
    for fn, lang in plan:
        out.append(sample("tool_call", fn(rng, lang)))
    for fn, n in ((sc_search, len(SEARCHES)), (sc_sql, len(SQL_CASES)), (sc_email, len(EMAILS)), (sc_calendar, len(CAL_CASES)),
                  (sc_python, len(PY_TASKS)), (sc_translate, len(TRANSLATIONS)), (sc_issue, len(ISSUES)), (sc_k8s, len(K8S)),
                  (sc_travel, len(TRIPS)), (sc_clarify, 3), (sc_error, 4)):
        for i in range(n):
            out.append(sample("tool_call", fn(rng, None, i)))
    return out
