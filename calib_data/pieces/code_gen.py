"""Code category, programmatic part: "give me types for this JSON" in TypeScript, Go, Rust and
Python (pydantic). The entities and example values are hand-written; the JSON sample and the type
definitions are derived from the same field specs, so they always agree."""

from __future__ import annotations

import json

from .common import asst, sample, user

# field spec: (json_key, kind, payload)
#   kind in: str, int, float, bool, list_str, opt_str, opt_int, obj, objlist
#   payload: list of example values, or (TypeName, [fields]) for obj / objlist
ENTITIES = [
    ("Order", "snake", [
        ("order_id", "str", ["A-1029", "A-2210", "B-0042", "C-7781"]),
        ("customer_id", "int", [5512, 90871, 123, 4410]),
        ("total", "float", [129.5, 18.99, 2450.0, 64.25]),
        ("paid", "bool", [True, False]),
        ("coupon", "opt_str", ["SPRING10", None]),
        ("items", "objlist", ("OrderItem", [
            ("sku", "str", ["KB-01", "MS-22", "HD-400", "CB-3M"]),
            ("quantity", "int", [1, 2, 5]),
            ("unit_price", "float", [9.5, 24.0, 129.0]),
        ])),
    ]),
    ("SensorReading", "camel", [
        ("deviceId", "str", ["th-kitchen-01", "th-garage-02", "co2-office-7"]),
        ("timestamp", "str", ["2024-11-03T08:15:00Z", "2025-01-19T22:40:12Z"]),
        ("temperatureC", "float", [21.4, -3.5, 18.0]),
        ("humidityPct", "opt_int", [45, 61, None]),
        ("batteryLow", "bool", [False, True]),
        ("location", "obj", ("Location", [
            ("building", "str", ["HQ", "Warehouse B"]),
            ("floor", "int", [0, 2, 3]),
        ])),
    ]),
    ("Employee", "snake", [
        ("id", "int", [17, 204, 3391]),
        ("full_name", "str", ["Amara Okafor", "Lukas Brandt", "Hina Takahashi", "Diego Ramírez"]),
        ("email", "str", ["a.okafor@example.com", "l.brandt@example.com", "hina@example.jp"]),
        ("manager_id", "opt_int", [17, None]),
        ("skills", "list_str", [["go", "kubernetes"], ["sql", "dbt", "python"], ["figma"]]),
        ("is_contractor", "bool", [False, True]),
    ]),
    ("Flight", "camel", [
        ("flightNumber", "str", ["LH 402", "NH 9", "AF 1234", "QF 12"]),
        ("origin", "str", ["FRA", "HND", "CDG", "SYD"]),
        ("destination", "str", ["JFK", "LAX", "MAD", "SIN"]),
        ("departureUtc", "str", ["2025-03-14T10:05:00Z", "2025-07-01T23:55:00Z"]),
        ("durationMinutes", "int", [505, 620, 135]),
        ("gate", "opt_str", ["B44", None]),
        ("seatsAvailable", "int", [0, 12, 87]),
    ]),
    ("Repository", "snake", [
        ("name", "str", ["tiny-http", "ledger-core", "dotfiles"]),
        ("owner", "obj", ("Owner", [
            ("login", "str", ["mkowalski", "zhaolei", "acme-corp"]),
            ("type", "str", ["User", "Organization"]),
        ])),
        ("stars", "int", [12, 4803, 0]),
        ("fork", "bool", [False, True]),
        ("topics", "list_str", [["http", "rust"], ["accounting"], []]),
        ("license", "opt_str", ["MIT", "Apache-2.0", None]),
        ("default_branch", "str", ["main", "master", "trunk"]),
    ]),
    ("Recipe", "camel", [
        ("title", "str", ["Miso aubergine", "Lentil soup", "Shakshuka"]),
        ("servings", "int", [2, 4, 6]),
        ("prepMinutes", "int", [10, 15, 25]),
        ("vegetarian", "bool", [True, False]),
        ("ingredients", "objlist", ("Ingredient", [
            ("name", "str", ["aubergine", "red lentils", "eggs", "cumin"]),
            ("amount", "float", [1.0, 200.0, 0.5]),
            ("unit", "opt_str", ["g", "tsp", None]),
        ])),
    ]),
    ("Shipment", "snake", [
        ("tracking_number", "str", ["1Z999AA10123456784", "JD014600006281212", "CN556677889DE"]),
        ("carrier", "str", ["UPS", "DHL", "SF Express"]),
        ("weight_kg", "float", [0.8, 12.25, 3.0]),
        ("delivered", "bool", [False, True]),
        ("events", "objlist", ("TrackingEvent", [
            ("status", "str", ["picked_up", "in_transit", "out_for_delivery"]),
            ("at", "str", ["2024-12-02T09:12:00Z", "2024-12-03T17:40:00Z"]),
            ("city", "opt_str", ["Leipzig", "Shenzhen", None]),
        ])),
    ]),
    ("Course", "camel", [
        ("courseCode", "str", ["CS101", "MATH240", "LING310"]),
        ("title", "str", ["Intro to Programming", "Linear Algebra", "Phonology"]),
        ("credits", "int", [3, 4, 5]),
        ("instructor", "obj", ("Instructor", [
            ("name", "str", ["Dr. Nia Mensah", "Prof. Arjun Rao", "Dr. Elif Kaya"]),
            ("office", "opt_str", ["B-212", None]),
        ])),
        ("prerequisites", "list_str", [["CS100"], [], ["MATH120", "MATH130"]]),
        ("waitlistOpen", "bool", [True, False]),
    ]),
    ("Invoice", "snake", [
        ("number", "str", ["INV-2024-0193", "INV-2025-0007"]),
        ("issued_on", "str", ["2024-09-30", "2025-02-14"]),
        ("currency", "str", ["EUR", "USD", "JPY"]),
        ("amount_due", "float", [1180.0, 86.4, 35000.0]),
        ("paid_on", "opt_str", ["2024-10-12", None]),
        ("lines", "objlist", ("InvoiceLine", [
            ("description", "str", ["Consulting (hours)", "Hosting, September", "Licence seat"]),
            ("quantity", "int", [1, 8, 12]),
            ("unit_price", "float", [95.0, 40.0, 7.2]),
        ])),
    ]),
    ("Playlist", "camel", [
        ("playlistId", "str", ["pl_8f2k1", "pl_00zq9"]),
        ("name", "str", ["Focus", "Road trip 2025", "Late night jazz"]),
        ("public", "bool", [True, False]),
        ("followers", "int", [0, 341, 12007]),
        ("tracks", "objlist", ("Track", [
            ("title", "str", ["Blue in Green", "Teardrop", "Nuvole Bianche"]),
            ("artist", "str", ["Miles Davis", "Massive Attack", "Ludovico Einaudi"]),
            ("durationSec", "int", [337, 330, 357]),
        ])),
    ]),
    ("WeatherStation", "snake", [
        ("station_id", "str", ["KSEA", "EGLL", "RJTT"]),
        ("latitude", "float", [47.4489, 51.4775, 35.5523]),
        ("longitude", "float", [-122.3094, -0.4614, 139.78]),
        ("elevation_m", "int", [132, 25, 6]),
        ("active", "bool", [True]),
        ("sensors", "list_str", [["temp", "wind", "pressure"], ["temp", "visibility"]]),
        ("last_report", "opt_str", ["2025-04-01T12:00:00Z", None]),
    ]),
    ("Appointment", "camel", [
        ("appointmentId", "int", [88120, 90411]),
        ("patientName", "str", ["Sara Lindqvist", "Omar Haddad", "Li Na"]),
        ("startsAt", "str", ["2025-05-06T14:30:00+02:00", "2025-05-07T09:00:00+08:00"]),
        ("durationMin", "int", [15, 30, 45]),
        ("telehealth", "bool", [False, True]),
        ("notes", "opt_str", ["Bring previous X-ray", None]),
        ("clinic", "obj", ("Clinic", [
            ("name", "str", ["Northside Family Practice", "Harbour Clinic"]),
            ("phone", "str", ["+46 8 555 0100", "+852 5550 1234"]),
        ])),
    ]),
]

ACRONYMS = {"id": "ID", "url": "URL", "utc": "UTC", "pct": "Pct", "api": "API"}


def _words(key: str) -> list[str]:
    out, cur = [], ""
    for ch in key:
        if ch == "_":
            if cur:
                out.append(cur)
            cur = ""
        elif ch.isupper() and cur:
            out.append(cur)
            cur = ch.lower()
        else:
            cur += ch.lower()
    if cur:
        out.append(cur)
    return out


def pascal(key: str, go: bool = False) -> str:
    parts = []
    for w in _words(key):
        if go and w in ACRONYMS:
            parts.append(ACRONYMS[w] if w != "pct" else "Pct")
        else:
            parts.append(w[:1].upper() + w[1:])
    return "".join(parts)


def snake(key: str) -> str:
    return "_".join(_words(key))


def _example(fields, rng):
    obj = {}
    for key, kind, payload in fields:
        if kind == "obj":
            obj[key] = _example(payload[1], rng)
        elif kind == "objlist":
            obj[key] = [_example(payload[1], rng) for _ in range(rng.choice([1, 2, 2, 3]))]
        else:
            obj[key] = rng.choice(payload)
    return obj


def _nested(fields):
    """All nested type definitions, innermost-first order not needed (one level deep)."""
    out = []
    for key, kind, payload in fields:
        if kind in ("obj", "objlist"):
            out.append(payload)
    return out


# ---------------------------------------------------------------- per-language renderers

def _ts_type(kind, payload):
    return {
        "str": "string", "int": "number", "float": "number", "bool": "boolean",
        "list_str": "string[]", "opt_str": "string | null", "opt_int": "number | null",
        "obj": payload[0] if isinstance(payload, tuple) else "", "objlist": (payload[0] + "[]") if isinstance(payload, tuple) else "",
    }[kind]


def render_ts(name, style, fields):
    blocks = []
    for tname, tfields in _nested(fields) + [(name, fields)]:
        lines = [f"export interface {tname} {{"]
        for key, kind, payload in tfields:
            lines.append(f"  {key}: {_ts_type(kind, payload)};")
        lines.append("}")
        blocks.append("\n".join(lines))
    code = "\n\n".join(blocks)
    notes = [
        "Integers and decimals are both `number` in TypeScript; if you need to tell them apart at runtime, validate with a schema library such as zod.",
        "Fields that were `null` in the sample are typed `T | null`. If the API sometimes omits the key entirely instead of sending `null`, make them optional too (`key?: T | null`).",
    ]
    if any(k == "str" and ("At" in key or "Utc" in key or key in ("timestamp", "at")) for key, k, _ in fields):
        notes.append("Timestamps arrive as ISO-8601 strings; convert with `new Date(value)` at the edge rather than typing them as `Date`, since `JSON.parse` never produces `Date` objects.")
    return "ts", code, notes


def _go_type(kind, payload):
    return {
        "str": "string", "int": "int", "float": "float64", "bool": "bool", "list_str": "[]string",
        "opt_str": "*string", "opt_int": "*int",
        "obj": payload[0] if isinstance(payload, tuple) else "", "objlist": ("[]" + payload[0]) if isinstance(payload, tuple) else "",
    }[kind]


def render_go(name, style, fields):
    blocks = []
    for tname, tfields in [(name, fields)] + _nested(fields):
        rows = []
        for key, kind, payload in tfields:
            tag = f'`json:"{key}{",omitempty" if kind.startswith("opt_") else ""}"`'
            rows.append((pascal(key, go=True), _go_type(kind, payload), tag))
        w1 = max(len(r[0]) for r in rows)
        w2 = max(len(r[1]) for r in rows)
        lines = [f"type {tname} struct {{"]
        for a, b, c in rows:
            lines.append(f"\t{a.ljust(w1)} {b.ljust(w2)} {c}")
        lines.append("}")
        blocks.append("\n".join(lines))
    code = "\n\n".join(blocks)
    notes = [
        "Nullable fields are pointers (`*string`, `*int`), so you can tell a JSON `null` or missing key (nil) apart from an empty string or zero.",
        "Decode with `json.NewDecoder(r.Body).Decode(&v)`; call `dec.DisallowUnknownFields()` first if unexpected keys should be an error.",
        "Exported (capitalised) field names are required for `encoding/json` to see the fields; the tags map them back to the JSON keys.",
    ]
    return "go", code, notes


def _rs_type(kind, payload):
    return {
        "str": "String", "int": "i64", "float": "f64", "bool": "bool", "list_str": "Vec<String>",
        "opt_str": "Option<String>", "opt_int": "Option<i64>",
        "obj": payload[0] if isinstance(payload, tuple) else "", "objlist": f"Vec<{payload[0]}>" if isinstance(payload, tuple) else "",
    }[kind]


RUST_KEYWORDS = {"type", "match", "ref", "move", "fn", "struct", "enum", "mod", "use", "loop", "where"}


def render_rust(name, style, fields):
    blocks = []
    for tname, tfields in [(name, fields)] + _nested(fields):
        lines = ["#[derive(Debug, Clone, Serialize, Deserialize)]"]
        if style == "camel":
            lines.append('#[serde(rename_all = "camelCase")]')
        lines.append(f"pub struct {tname} {{")
        for key, kind, payload in tfields:
            field = snake(key)
            if kind.startswith("opt_"):
                lines.append("    #[serde(default)]")
            if field in RUST_KEYWORDS:
                lines.append(f'    #[serde(rename = "{key}")]')
                field = f"r#{field}"
            lines.append(f"    pub {field}: {_rs_type(kind, payload)},")
        lines.append("}")
        blocks.append("\n".join(lines))
    code = "use serde::{Deserialize, Serialize};\n\n" + "\n\n".join(blocks)
    notes = [
        "`Option<T>` fields accept `null`, and serde's derive also treats a missing key as `None` for `Option` fields; the `#[serde(default)]` just makes that explicit.",
        "Integers use `i64` to be safe; narrow them (`u32`, `u16`) where you know the range, and serde will reject out-of-range values.",
    ]
    if style == "camel":
        notes.append('The JSON uses camelCase, so `#[serde(rename_all = "camelCase")]` maps it to idiomatic snake_case field names.')
    if any(snake(k) in RUST_KEYWORDS for _, _, p in fields if isinstance(p, tuple) for k, _, _ in p[1]) or any(snake(k) in RUST_KEYWORDS for k, _, _ in fields):
        notes.append("`type` is a Rust keyword, so that field is written as the raw identifier `r#type` with an explicit rename.")
    notes.append("Parse with `let v: T = serde_json::from_str(&text)?;` (add `serde_json = \"1\"` next to `serde` with the `derive` feature).")
    return "rust", code, notes


def _py_type(kind, payload):
    return {
        "str": "str", "int": "int", "float": "float", "bool": "bool", "list_str": "list[str]",
        "opt_str": "str | None = None", "opt_int": "int | None = None",
        "obj": payload[0] if isinstance(payload, tuple) else "", "objlist": f"list[{payload[0]}]" if isinstance(payload, tuple) else "",
    }[kind]


def render_python(name, style, fields):
    blocks = []
    head = "from pydantic import BaseModel"
    if style == "camel":
        head = "from pydantic import BaseModel, ConfigDict\nfrom pydantic.alias_generators import to_camel"
    base = "BaseModel"
    if style == "camel":
        blocks.append(
            "class CamelModel(BaseModel):\n"
            "    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)"
        )
        base = "CamelModel"
    for tname, tfields in _nested(fields) + [(name, fields)]:
        # fields without defaults must come first only for dataclasses; pydantic doesn't care,
        # but keep required fields first for readability
        ordered = [f for f in tfields if not f[1].startswith("opt_")] + [f for f in tfields if f[1].startswith("opt_")]
        lines = [f"class {tname}({base}):"]
        for key, kind, payload in ordered:
            lines.append(f"    {snake(key)}: {_py_type(kind, payload)}")
        blocks.append("\n".join(lines))
    code = head + "\n\n\n" + "\n\n\n".join(blocks)
    notes = [
        f"Validate with `{name}.model_validate_json(text)` (pydantic v2); wrong types raise a `ValidationError` listing every bad field.",
        "Optional fields default to `None`, so a missing key and an explicit `null` both work.",
    ]
    if style == "camel":
        notes.append("The JSON keys are camelCase; the `to_camel` alias generator maps them onto snake_case attributes, and `populate_by_name=True` also lets you construct models with the snake_case names in Python code. Use `model_dump(by_alias=True)` to get camelCase back out.")
    return "python", code, notes


RENDERERS = {
    "TypeScript": render_ts,
    "Go": render_go,
    "Rust": render_rust,
    "Python (pydantic v2)": render_python,
}

ASKS = [
    "Here's a sample response from our API. Can you write {lang} types for it?\n\n```json\n{json}\n```",
    "Generate {lang} type definitions matching this JSON:\n\n```json\n{json}\n```",
    "I need to deserialize payloads like the one below in {lang}. What should the types look like?\n\n```json\n{json}\n```",
    "```json\n{json}\n```\n\nModel this in {lang}, please. Nullable fields should be handled properly.",
]

INTROS = [
    "Here are {lang} types for that payload:",
    "Based on the sample, these definitions should work:",
    "This models the JSON in {lang}:",
]


def build(rng) -> list[dict]:
    out = []
    langs = list(RENDERERS)
    for i, (name, style, fields) in enumerate(ENTITIES):
        lang = langs[i % len(langs)]
        example = _example(fields, rng)
        js = json.dumps(example, indent=2, ensure_ascii=False)
        fence, code, notes = RENDERERS[lang](name, style, fields)
        ask = ASKS[rng.randrange(len(ASKS))].format(lang=lang, json=js)
        intro = INTROS[rng.randrange(len(INTROS))].format(lang=lang)
        nullable = [k for k, kind, _ in fields if kind.startswith("opt_")]
        nullable += [f"{pk}.{k}" for pk, pkind, pp in fields if pkind in ("obj", "objlist") for k, kind, _ in pp[1] if kind.startswith("opt_")]
        extra = ""
        if nullable:
            extra = "\n\nI treated " + ", ".join(f"`{k}`" for k in nullable) + (
                " as nullable because the field looks optional (it can be `null` in responses like this). "
                "One sample can't prove which fields are always present, so check the API documentation."
            )
        answer = intro + f"\n\n```{fence}\n{code}\n```" + extra + "\n\nNotes:\n\n" + "\n".join(f"- {n}" for n in notes)
        out.append(sample("code", [user(ask), asst(answer)]))
    return out
