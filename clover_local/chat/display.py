"""The live display of one answer: what block diffusion is doing, drawn from the decoder's events.

Two parts, so a long answer scrolls like any terminal output while the work in progress stays in view:

- printed for good, above the live region, as it settles: the thinking (dimmed, or one summary line when
  hidden) and the answer rendered as Markdown once a paragraph is complete (a code fence is never split
  across two renderings: a forced cut closes it and reopens it in what follows);
- redrawn in place (a Rich `Live` region): the unsettled tail of the text, the block being denoised as a row
  of cells that start masked and fill in as positions are revealed, coloured by the confidence they were
  revealed with (newly revealed ones underlined), and a status line; while a long prompt is read (longer than a
  prefill chunk: its passes go layer by layer), a progress line in place of the cells, moving layer by layer.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from rich.cells import cell_len, set_cell_size
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.markdown import Markdown
from rich.style import Style
from rich.text import Text

from clover_local.generate.block_view import BlockView
from clover_local.generate.events import PassDone, PrefillProgress

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def code_blocks(text: str) -> list[str]:
    """The insides of a Markdown text's fenced code blocks (``` or ~~~, closed by a fence of the same kind at
    least as long; an unclosed one runs to the end), in order."""
    blocks: list[str] = []
    inside: list[str] = []
    fence = ""
    for line in text.split("\n"):
        m = _FENCE.match(line)
        closes = m is not None and m.group(1)[0] == fence[:1] and len(m.group(1)) >= len(fence)
        if not fence:
            if m:
                fence, inside = m.group(1), []
        elif closes and not line.strip()[len(m.group(1)):]:
            blocks.append("\n".join(inside) + "\n")
            fence = ""
        else:
            inside.append(line)
    if fence:
        blocks.append("\n".join(inside) + "\n")
    return blocks


MASK_CELL = "░"
MASK_STYLE = Style(color="grey42")
PROMPT_STYLE = Style(color="grey50", dim=True)
THINK_STYLE = Style(color="grey62", italic=True)

# confidence 0 → 0.5 → 1: red → amber → green (dark enough for white text)
_STOPS = ((0.0, (150, 38, 38)), (0.5, (160, 120, 20)), (1.0, (30, 130, 60)))


def confidence_color(conf: float) -> str:
    c = min(1.0, max(0.0, conf))
    for (x0, a), (x1, b) in zip(_STOPS, _STOPS[1:]):
        if c <= x1:
            t = (c - x0) / (x1 - x0)
            rgb = tuple(round(a[i] + t * (b[i] - a[i])) for i in range(3))
            return "#%02x%02x%02x" % rgb
    return "#%02x%02x%02x" % _STOPS[-1][1]


def fit(label: str, width: int) -> str:
    if cell_len(label) <= width:
        return set_cell_size(label, width)
    return set_cell_size(label, width - 1) + "…"


class BlockCells(BlockView):
    """The block being denoised, drawn as one cell per generated position coloured by its confidence."""

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = max(8, options.max_width)
        cell = 7 if width >= 7 * 8 else 4
        per_row = max(1, width // cell)
        header = Text()
        header.append(f"block {self.block}", style="bold")
        header.append(f" · pass {self.passes} · {self.revealed}/{self.size} revealed", style="grey62")
        legend = Text()
        legend.append("   ")
        legend.append(MASK_CELL * 2, style=MASK_STYLE)
        legend.append(" masked  confidence ", style="grey62")
        for c in (0.1, 0.5, 0.9):
            legend.append("  ", style=Style(bgcolor=confidence_color(c)))
        legend.append(" low→high", style="grey62")
        if header.cell_len + legend.cell_len <= width:
            header.append_text(legend)
        yield header
        row = Text()
        n = 0
        for pos in range(self.fixed, len(self.tokens)):
            tok = self.tokens[pos]
            if tok is None:
                row.append(MASK_CELL * (cell - 1), style=MASK_STYLE)
            else:
                style = Style(color="white", bgcolor=confidence_color(self.conf.get(pos, 1.0)),
                              bold=pos in self.fresh, underline=pos in self.fresh)
                row.append(fit(self.label(pos, tok), cell - 1), style=style)
            row.append(" ")
            n += 1
            if n % per_row == 0:
                yield row
                row = Text()
        if row.plain:
            yield row


class MarkdownSettler:
    """Cuts a growing Markdown text into pieces that can be rendered for good, and an unsettled tail."""

    def __init__(self, max_tail: int = 600) -> None:
        self.pending = ""
        self.max_tail = max_tail

    @staticmethod
    def _scan(text: str) -> tuple[int, int, str | None, str | None]:
        """(last paragraph boundary outside a fence, last line end, fence opener at that line end, marker)."""
        boundary, last_nl = -1, -1
        opener: str | None = None
        marker: str | None = None
        pos = 0
        prev_blank = False
        for line in text.splitlines(keepends=True):
            end = pos + len(line)
            if not line.endswith("\n"):
                break
            m = _FENCE.match(line)
            if opener is None and m:
                opener, marker = line.rstrip("\n"), m.group(1)
            elif opener is not None and m and m.group(1)[0] == marker[0] and len(m.group(1)) >= len(marker) \
                    and line.strip() == m.group(1):
                opener = marker = None
            blank = line.strip() == ""
            if blank and opener is None and pos > 0 and not prev_blank:
                boundary = end
            prev_blank = blank
            last_nl = end
            pos = end
        return boundary, last_nl, opener, marker

    def feed(self, delta: str) -> list[tuple[str, bool]]:
        """Add text; returns pieces to render now as (markdown, starts_a_new_paragraph)."""
        self.pending += delta
        out: list[tuple[str, bool]] = []
        boundary, _, _, _ = self._scan(self.pending)
        if boundary > 0:
            piece, self.pending = self.pending[:boundary], self.pending[boundary:]
            if piece.strip():
                out.append((piece.strip("\n"), True))
        if len(self.pending) > self.max_tail:
            out.extend(self._force())
        return out

    def _force(self) -> list[tuple[str, bool]]:
        text = self.pending
        _, last_nl, opener, marker = self._scan(text)
        if last_nl > 0:
            piece, rest = text[:last_nl], text[last_nl:]
        else:
            cut = text.rfind(" ", 0, self.max_tail)
            cut = cut if cut > 0 else self.max_tail
            piece, rest = text[:cut], text[cut:].lstrip(" ")
            opener = marker = None
        if opener is not None:  # close the fence here and open it again for what follows
            piece = piece.rstrip("\n") + "\n" + marker
            rest = opener + "\n" + rest
        self.pending = rest
        return [(piece.strip("\n"), False)] if piece.strip() else []

    def flush(self) -> list[tuple[str, bool]]:
        piece, self.pending = self.pending, ""
        return [(piece.strip("\n"), False)] if piece.strip() else []


def think_lines(text: str) -> Text:
    out = Text()
    for i, line in enumerate(text.split("\n")):
        if i:
            out.append("\n")
        out.append("┊ ", style="grey42")
        out.append(line, style=THINK_STYLE)
    return out


class TurnView:
    """State of one answer on screen. `on_*` return what to print for good; the instance renders the live
    region (pass it to `rich.live.Live`)."""

    def __init__(self, decode_token: Callable[[int], str], block_size: int, show_thinking: bool,
                 status: Callable[[int], RenderableType], width: int = 100, code_theme: str = "monokai") -> None:
        self.cells = BlockCells(decode_token, block_size)
        self.show_thinking = show_thinking
        self.status = status
        self.code_theme = code_theme
        self.content = MarkdownSettler(max_tail=max(200, width * 4))
        self.reasoning_pending = ""
        self.had_reasoning = False
        self.reasoning_tokens = 0
        self.thinking_open = False
        self.thought_header = False
        self.thinking_done = False
        self.printed_content = False
        self.max_tail = max(200, width * 4)
        self.prefill: PrefillProgress | None = None  # a long prompt being read: drawn instead of the cells
        self.prefill_started = 0.0

    # ------------------------------------------------------------------ events
    def on_prefill(self, ev: PrefillProgress) -> None:
        if self.prefill is None:
            self.prefill_started = time.perf_counter()
        self.prefill = ev if ev.done < ev.total else None

    def on_pass(self, ev: PassDone) -> None:
        self.prefill = None
        self.cells.update(ev)

    def on_commit(self, block: int) -> None:
        self.cells.reset(block + 1)

    def on_text(self, d_reasoning: str, d_content: str, thinking_open: bool, reasoning_tokens: int
                ) -> list[RenderableType]:
        out: list[RenderableType] = []
        self.reasoning_tokens = reasoning_tokens
        self.thinking_open = thinking_open
        if d_reasoning:
            self.had_reasoning = True
            if not self.thought_header and self.show_thinking:
                out.append(Text("thinking", style="grey50 bold"))
                self.thought_header = True
            self.reasoning_pending += d_reasoning
            if self.show_thinking:
                out.extend(self._settle_reasoning(final=False))
        if (d_content or not thinking_open) and (self.reasoning_pending or self.thought_header
                                                 or reasoning_tokens) and not self.thinking_done:
            out.extend(self._end_thinking())
        if d_content:
            out.extend(self._markdown(self.content.feed(d_content)))
        return out

    def finish(self) -> list[RenderableType]:
        out: list[RenderableType] = []
        if not self.thinking_done and (self.reasoning_pending or self.thought_header):
            out.extend(self._end_thinking())
        out.extend(self._markdown(self.content.flush()))
        return out

    # ------------------------------------------------------------------ settling
    def _settle_reasoning(self, final: bool) -> list[RenderableType]:
        text = self.reasoning_pending
        cut = len(text) if final else text.rfind("\n")
        if not final and cut < 0 and len(text) > self.max_tail:
            cut = text.rfind(" ", 0, self.max_tail)
            cut = cut if cut > 0 else self.max_tail
        if cut <= 0:
            return []
        piece, self.reasoning_pending = text[:cut], text[cut:].lstrip("\n")
        return [think_lines(piece)] if piece.strip() else []

    def _end_thinking(self) -> list[RenderableType]:
        self.thinking_done = True
        self.thinking_open = False
        if self.show_thinking:
            return self._settle_reasoning(final=True)
        self.reasoning_pending = ""
        return [thought_summary(self.reasoning_tokens)] if self.had_reasoning else []

    def _markdown(self, pieces: list[tuple[str, bool]]) -> list[RenderableType]:
        out: list[RenderableType] = []
        for text, new_paragraph in pieces:
            if new_paragraph and self.printed_content:
                out.append(Text(""))
            out.append(Markdown(text, code_theme=self.code_theme))
            self.printed_content = True
        return out

    # ------------------------------------------------------------------ live region
    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        """The unsettled text, the block's cells (or the prompt's progress) and the status line; those last two
        (`status(width)`) one line each at the width given, never wrapped: a line that wraps where Rich did
        not expect it is left behind on screen when the region is redrawn."""
        width = options.max_width
        parts: list[RenderableType] = []
        if self.thinking_open:
            if self.show_thinking and self.reasoning_pending:
                parts.append(think_lines(self.reasoning_pending))
            elif not self.show_thinking:
                parts.append(Text(f"thinking… {self.reasoning_tokens} tokens", style="grey50 italic"))
        if self.content.pending.strip():
            parts.append(Text(self.content.pending.strip("\n")))
        if self.prefill is not None:
            parts.append(prefill_line(self.prefill, time.perf_counter() - self.prefill_started, max_width=width))
        else:
            parts.append(self.cells)
        parts.append(self.status(width))
        yield Group(*parts)


def prefill_line(ev: PrefillProgress, seconds: float, width: int = 20, max_width: int | None = None) -> Text:
    """`reading the prompt ━━━━━━━━━━━━━━━━━━━━ 2,048/30,720 tokens · 1,850 tok/s · 15 s left` (the rate and
    what is left at that rate once they mean something: half a second in). Within `max_width` cells the bar
    shrinks, and the rate goes when fewer than 8 cells are left for it: the time left is the last thing cut
    (at 80 columns it read `3 …`)."""
    counts = f" {ev.done:,}/{ev.total:,} tokens"
    rate_s = left_s = ""
    if ev.done and seconds >= 0.5:
        rate = ev.done / seconds
        rate_s = f" · {rate:,.0f} tok/s"
        if ev.done < ev.total:
            left_s = f" · {_duration((ev.total - ev.done) / rate)} left"
    head = "reading the prompt "
    if max_width is not None:
        room = max_width - cell_len(head + counts + rate_s + left_s)
        if room < 8 and rate_s:
            room, rate_s = room + len(rate_s), ""
        width = max(4, min(width, room))
    filled = round(width * ev.done / ev.total) if ev.total else width
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append(head, style="bold")
    t.append("━" * filled, style="magenta")
    t.append("━" * (width - filled), style="grey27")
    t.append(counts, style="grey70")
    t.append(rate_s, style="grey50")
    t.append(left_s, style="grey50")
    return t


def plural(n: int, word: str, many: str | None = None) -> str:
    """`1 pass`, `2 passes`, `1,024 tokens`."""
    return f"{n:,} {word if n == 1 else many or word + 's'}"


@dataclass
class Part:
    """One piece of a status line: its forms, longest first (an empty last form drops it)."""

    forms: tuple[str, ...]
    style: str = ""
    sep: str = " · "  # before it, unless it comes first


def fit_parts(parts: list[Part], shrink: list[int], width: int) -> Text:
    """`parts` on one line of at most `width` cells: the parts named in `shrink` take their next shorter form,
    one step at a time in that order, until the line fits; cut with … if even that is too wide. Never wrapped:
    a status line that wraps leaves a word alone on the next line (`Ctrl-C` / `stops`)."""
    level = [0] * len(parts)

    def build() -> Text:
        t = Text(no_wrap=True, overflow="ellipsis")
        for part, at in zip(parts, level):
            form = part.forms[min(at, len(part.forms) - 1)]
            if form:
                if t.plain and part.sep:
                    t.append(part.sep, style="grey50")
                t.append(form, style=part.style)
        return t

    line = build()
    for i in shrink:
        if line.cell_len <= width:
            break
        level[i] += 1
        line = build()
    if line.cell_len > width:
        line.truncate(width, overflow="ellipsis")
    return line


def _duration(seconds: float) -> str:
    """4 s, 1 min 05 s, 2 h 03 min: a wait as a person reads it."""
    s = max(1, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def thought_summary(tokens: int) -> Text:
    return Text(f"▸ thought for {tokens} tokens (/think show to expand)", style="grey50 italic")
