// Make docs/serve-page.png: serve's chat page in a real browser (Debian's chromium, driven by playwright-core),
// after two messages, one with thinking and one without; prints the page's console errors (none expected) and
// its text. Needs chromium and `npm install playwright-core` (both only for this script), and a server:
//
//   clover-local serve tiny --port 8771 &
//   NODE_PATH=/path/to/node_modules node docs/serve_page_screenshot.js http://127.0.0.1:8771/ docs/serve-page.png
//
// With --block, docs/serve-page-block.png: the page mid-answer, a block being denoised, against a server whose
// passes are slowed so a screenshot catches one (the tests' hook):
//
//   CLOVER_LOCAL_PASS_DELAY=0.25 clover-local serve tiny --port 8772 &
//   NODE_PATH=... node docs/serve_page_screenshot.js http://127.0.0.1:8772/ docs/serve-page-block.png --block
"use strict";
const { chromium } = require("playwright-core");

(async () => {
  const [url, out, mode] = process.argv.slice(2);
  const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
                                          args: ["--no-sandbox"] });
  const page = await browser.newPage({ viewport: { width: mode === "--block" ? 900 : 1000,
                                             height: mode === "--block" ? 420 : 460 } });
  const errors = [];
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(url);
  await page.waitForFunction(() => document.getElementById("model").textContent !== "clover-local");
  if (mode === "--block") {
    await page.fill("#input", "write a list of three fruits");
    await page.keyboard.press("Enter");
    await page.waitForFunction(() => document.querySelectorAll(".turn .cell:not(.masked)").length >= 6, null,
                               { timeout: 60000 });
    await page.screenshot({ path: out });
    console.log(JSON.stringify({ errors, block: await page.textContent(".turn .block .head") }));
    await browser.close();
    return;
  }
  const asks = [["add 12+30", true], ["reverse a b c d", false]];
  for (let i = 0; i < asks.length; i++) {
    const [message, think] = asks[i];
    if ((await page.isChecked("#think")) !== think) await page.click("#think");
    await page.fill("#input", message);
    await page.keyboard.press("Enter");
    await page.waitForFunction((n) => document.querySelectorAll(".turn .stats, .turn .error").length >= n, i + 1,
                               { timeout: 60000 });
  }
  await page.screenshot({ path: out });
  console.log(JSON.stringify({ errors, text: await page.textContent("#log") }));
  await browser.close();
})();
