// What drawing a streamed answer costs serve's chat page: a 21K-character Markdown answer (60 sections: heading,
// paragraph, list, code) sent in ~600 deltas, drawn by a whole render per delta (`render`) against the page's
// streaming draw (`renderMore`); best of 3 runs, total and worst delta. Two ways:
//   node docs/page_render_time.js              the page's script on a DOM stand-in in Node (no browser)
//   NODE_PATH=.../node_modules node docs/page_render_time.js http://127.0.0.1:8774/
//       the page in Debian's chromium (playwright-core; a `clover-local serve tiny --port 8774` running), each
//       delta followed by a layout, as a frame would
// Prints one JSON line.
"use strict";
const fs = require("fs");

function measure(render, renderMore, attach) {  // (runs in Node or in the page: self-contained)
  const para = "Some **bold** text with `code` and a [link](https://x.org) and more words here to make it long. ";
  let text = "";
  for (let i = 0; i < 60; i++) {
    text += "## Section " + i + "\n\n" + para.repeat(3) + "\n\n- item one\n- item *two*\n\n```js\nconst x = " + i +
      ";\n```\n\n";
  }
  const step = Math.ceil(text.length / 600), time = (draw) => {
    const el = attach(), drawn = { line: 0, count: 0 }, t0 = performance.now();
    let deltas = 0, worst = 0;
    for (let n = step; ; n = Math.min(n + step, text.length)) {
      const t = performance.now();
      draw(el, text.slice(0, n), drawn);
      if (el.getBoundingClientRect) el.getBoundingClientRect();  // (a browser: the layout a frame would do)
      worst = Math.max(worst, performance.now() - t);
      deltas++;
      if (n === text.length) break;
    }
    const total = performance.now() - t0;
    if (el.remove) el.remove();
    return { deltas, total_ms: +total.toFixed(1), worst_delta_ms: +worst.toFixed(2) };
  };
  const best = (draw) => [0, 1, 2].map(() => time(draw)).sort((a, b) => a.total_ms - b.total_ms)[0];
  return { chars: text.length, whole_render: best(render), streaming_draw: best(renderMore) };
}

async function inBrowser(url) {
  const { chromium } = require("playwright-core");
  const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
                                          args: ["--no-sandbox"] });
  const page = await browser.newPage();
  await page.goto(url);
  await page.waitForFunction(() => document.getElementById("model").textContent !== "clover-local");
  const res = await page.evaluate(`(${measure})(render, renderMore, () => document.getElementById("log")
    .appendChild(document.createElement("div")))`);
  const where = "chromium " + browser.version();
  await browser.close();
  return { ...res, where };
}

function inNode() {
  class Element {
    constructor(tag) { this.tag = tag; this.children = []; this._text = ""; this.style = {}; }
    set textContent(v) { this._text = String(v); this.children = []; }
    get textContent() { return this._text + this.children.map((c) => c.textContent).join(""); }
    appendChild(node) { this.children.push(node); node.parent = this; return node; }
    append(...nodes) { nodes.forEach((n) => this.appendChild(n)); }
    remove() { if (this.parent) this.parent.children = this.parent.children.filter((c) => c !== this); }
    addEventListener() {}
    focus() {}
    get scrollHeight() { return 0; }
  }
  const ids = {};  // (any element the script asks for)
  globalThis.document = { getElementById: (i) => ids[i] || (ids[i] = new Element("x")),
                          createElement: (t) => new Element(t),
                          createTextNode: (t) => { const e = new Element("#text"); e.textContent = t; return e; } };
  globalThis.navigator = {};
  globalThis.sessionStorage = { getItem: () => null, setItem: () => {} };
  globalThis.fetch = async () => { throw new Error("no server here"); };
  const page = fs.readFileSync("clover_local/serve/ui.html", "utf8");
  eval(/<script>([\s\S]*)<\/script>/.exec(page)[1] + "\nglobalThis.__draw = { render, renderMore };");
  const res = measure(globalThis.__draw.render, globalThis.__draw.renderMore, () => new Element("div"));
  return { ...res, where: "node " + process.version + " (DOM stand-in)" };
}

(async () => {
  const url = process.argv[2];
  console.log(JSON.stringify(url ? await inBrowser(url) : inNode()));
})();
