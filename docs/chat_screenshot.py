"""Make docs/chat-live.png: a screenshot of `clover-local chat` caught mid-block, rendered from a real terminal.

The chat runs in a tmux pane (truecolor); when the screen shows a block partly revealed, the pane is captured
with its colours (`capture-pane -e`) and drawn with Pillow in DejaVu Sans Mono. Needs tmux and Pillow (both
only for this script).

    python docs/chat_screenshot.py tiny --before hello --prompt "what is the capital of France?" \
        --min-revealed 4 --delay 0.6 --out docs/chat-live.png
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import time
import uuid
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont
from rich.cells import cell_len

FONT_DIR = Path("/usr/share/fonts/truetype/dejavu")
BG, FG = (24, 24, 30), (214, 214, 220)
ANSI16 = [(0, 0, 0), (205, 49, 49), (13, 188, 121), (229, 229, 16), (36, 114, 200), (188, 63, 188),
          (17, 168, 205), (229, 229, 229), (102, 102, 102), (241, 76, 76), (35, 209, 139), (245, 245, 67),
          (59, 142, 234), (214, 112, 214), (41, 184, 219), (255, 255, 255)]
MID_BLOCK = re.compile(r"block (\d+) · pass (\d+) · (\d+)/(\d+) revealed")


def xterm256(n: int) -> tuple[int, int, int]:
    if n < 16:
        return ANSI16[n]
    if n < 232:
        n -= 16
        steps = [0, 95, 135, 175, 215, 255]
        return steps[n // 36], steps[(n // 6) % 6], steps[n % 6]
    v = 8 + 10 * (n - 232)
    return v, v, v


def parse_sgr(params: list[int], st: dict) -> None:
    i = 0
    if not params:
        params = [0]
    while i < len(params):
        p = params[i]
        if p == 0:
            st.clear()
        elif p == 1:
            st["bold"] = True
        elif p == 2:
            st["dim"] = True
        elif p == 3:
            st["italic"] = True
        elif p == 4:
            st["underline"] = True
        elif p == 7:
            st["reverse"] = True
        elif p == 22:
            st.pop("bold", None)
            st.pop("dim", None)
        elif p == 23:
            st.pop("italic", None)
        elif p == 24:
            st.pop("underline", None)
        elif p == 27:
            st.pop("reverse", None)
        elif 30 <= p <= 37 or 90 <= p <= 97:
            st["fg"] = ANSI16[p - 30 if p < 90 else p - 90 + 8]
        elif 40 <= p <= 47 or 100 <= p <= 107:
            st["bg"] = ANSI16[p - 40 if p < 100 else p - 100 + 8]
        elif p in (38, 48):
            key = "fg" if p == 38 else "bg"
            if params[i + 1] == 5:
                st[key] = xterm256(params[i + 2])
                i += 2
            elif params[i + 1] == 2:
                st[key] = tuple(params[i + 2:i + 5])
                i += 4
        elif p == 39:
            st.pop("fg", None)
        elif p == 49:
            st.pop("bg", None)
        i += 1


def render(ansi: str, out: Path, cols: int, font_size: int = 17, title: str = "clover-local chat") -> None:
    fonts = {(b, i): ImageFont.truetype(str(FONT_DIR / name), font_size) for (b, i), name in {
        (False, False): "DejaVuSansMono.ttf", (True, False): "DejaVuSansMono-Bold.ttf",
        (False, True): "DejaVuSansMono-Oblique.ttf", (True, True): "DejaVuSansMono-BoldOblique.ttf"}.items()}
    cw = round(fonts[(False, False)].getlength("M"))
    ch = round(font_size * 1.3)
    lines = ansi.rstrip("\n").split("\n")
    while lines and not re.sub(r"\x1b\[[0-9;:]*m", "", lines[-1]).strip():
        lines.pop()
    pad, bar = 22, 36
    img = Image.new("RGB", (cols * cw + 2 * pad, len(lines) * ch + 2 * pad + bar), BG)
    d = ImageDraw.Draw(img)
    d.rectangle([0, 0, img.width, bar], fill=(40, 40, 48))
    for k, c in enumerate([(255, 95, 86), (255, 189, 46), (39, 201, 63)]):
        d.ellipse([14 + 22 * k, 12, 26 + 22 * k, 24], fill=c)
    d.text((img.width // 2, bar // 2), title, fill=(160, 160, 170), font=fonts[(False, False)], anchor="mm")
    st: dict = {}
    for row, line in enumerate(lines):
        x, y = 0, bar + pad + row * ch
        for piece in re.split(r"(\x1b\[[0-9;:]*m)", line):
            m = re.fullmatch(r"\x1b\[([0-9;:]*)m", piece)
            if m:
                parse_sgr([int(v) for v in re.split(r"[;:]", m.group(1)) if v != ""], st)
                continue
            for char in piece:
                w = max(1, cell_len(char))
                fg, bg = st.get("fg", FG), st.get("bg")
                if st.get("reverse"):
                    fg, bg = bg or BG, fg
                if st.get("dim"):
                    fg = tuple(int(0.6 * a + 0.4 * b) for a, b in zip(fg, BG))
                px = pad + x * cw
                if bg is not None:
                    d.rectangle([px, y, px + w * cw - 1, y + ch - 1], fill=bg)
                if char != " ":
                    d.text((px, y + ch - 4), char, fill=fg, anchor="ls",
                           font=fonts[(bool(st.get("bold")), bool(st.get("italic")))])
                if st.get("underline"):
                    d.line([px, y + ch - 2, px + w * cw - 1, y + ch - 2], fill=fg)
                x += w
    img.save(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--prompt", default="good morning")
    ap.add_argument("--before", action="append", default=[], help="messages to send first (history on screen)")
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("chat-live.png"))
    ap.add_argument("--delay", type=float, default=0.4, help="seconds per pass, to catch a block mid-way")
    ap.add_argument("--min-block", type=int, default=0, help="catch this block or a later one")
    ap.add_argument("--min-revealed", type=int, default=3)
    ap.add_argument("--cols", type=int, default=100)
    ap.add_argument("--rows", type=int, default=24)
    args = ap.parse_args()

    sock = f"shot-{uuid.uuid4().hex[:6]}"
    env = {**os.environ, "COLORTERM": "truecolor", "OMP_NUM_THREADS": "1"}
    repo = Path(__file__).resolve().parents[1]
    model, cwd = args.model, repo
    if Path(model).is_dir():  # run from its parent so the banner shows the folder's name, not a long path
        cwd, model = Path(model).resolve().parent, Path(model).resolve().name
    inner = (f"cd {shlex.quote(str(cwd))} && PYTHONPATH={shlex.quote(str(repo))} {shlex.quote(sys.executable)} "
             f"-m clover_local chat {shlex.quote(model)} --max-tokens 96 --pace {args.delay}; sleep 600")

    def tmux(*a: str) -> str:
        return subprocess.run(["tmux", "-L", sock, *a], env=env, check=True, capture_output=True, text=True).stdout

    tmux("new-session", "-d", "-x", str(args.cols), "-y", str(args.rows), inner)
    socket_path = tmux("display-message", "-p", "#{socket_path}").strip()
    try:
        def wait(pred, timeout=120.0) -> str:
            end = time.monotonic() + timeout
            while time.monotonic() < end:
                s = tmux("capture-pane", "-p", "-t", "0")
                if pred(s):
                    return s
                time.sleep(0.05)
            raise SystemExit(f"timed out; screen:\n{s}")

        wait(lambda s: "you ›" in s)
        for msg in args.before:
            n = tmux("capture-pane", "-p", "-t", "0").count("tok/pass")
            tmux("send-keys", "-t", "0", "-l", msg)
            tmux("send-keys", "-t", "0", "Enter")
            wait(lambda s, n=n: s.count("tok/pass") > n and s.rstrip().endswith("you ›"))
        tmux("send-keys", "-t", "0", "-l", args.prompt)
        tmux("send-keys", "-t", "0", "Enter")

        def mid(s: str) -> bool:
            m = MID_BLOCK.search(s)
            return bool(m) and int(m.group(1)) >= args.min_block and args.min_revealed <= int(m.group(3)) < int(m.group(4))

        wait(mid)
        ansi = tmux("capture-pane", "-p", "-e", "-t", "0")
    finally:
        subprocess.run(["tmux", "-L", sock, "kill-server"], env=env, capture_output=True)
        Path(socket_path).unlink(missing_ok=True)
    render(ansi, args.out, args.cols)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
