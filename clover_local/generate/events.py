"""What the decoder tells front ends. The decoder never prints; chat, generate and serve draw these."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Reveal:
    position: int  # index inside the block
    token_id: int
    confidence: float


@dataclass
class PrefillProgress:
    """A long prompt's prefill moved on: `done` of its `total` tokens are read (tokens resumed from a prompt
    cache not counted). Sent before its first pass, after each layer of a pass that goes layer by layer (its
    rows counted in proportion) and after each pass, only when the prompt takes more than one pass or goes layer
    by layer (longer than the runtime's `--prefill-chunk`): a 4K-token prompt on a 16 GB card is seconds of work
    a front end can show."""

    done: int
    total: int


@dataclass
class PassDone:
    """One preview pass over the block finished and revealed some positions."""

    block: int
    pass_index: int  # within the block, from 0
    revealed: list[Reveal]
    tokens: list[int | None]  # the block as it stands: None where still masked
    fixed: int  # leading positions that are prompt text, not generated


@dataclass
class BlockCommitted:
    """A finished block went through the causal pass; its tokens are final."""

    block: int
    token_ids: list[int]  # the generated tokens of this block (prompt tail excluded, cut at a stop token)
    passes: int


@dataclass
class DecodeStats:
    tokens: int = 0
    passes: int = 0
    commits: int = 0
    merged_commits: int = 0  # of the commits, those run in one pass with the next block's first preview
    blocks: int = 0
    prompt_tokens: int = 0
    reused_tokens: int = 0  # prompt tokens resumed from a PromptCache instead of prefilled (not in to_dict:
    # `generate --json` prints to_dict and never reuses)
    seconds: float = 0.0
    prefill_seconds: float = 0.0
    stop_reason: str = "length"

    @property
    def tokens_per_pass(self) -> float:
        return self.tokens / self.passes if self.passes else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict:
        return {
            "tokens": self.tokens,
            "passes": self.passes,
            "tokens_per_pass": round(self.tokens_per_pass, 4),
            "seconds": round(self.seconds, 4),
            "tokens_per_second": round(self.tokens_per_second, 3),
        }


@dataclass
class Finished:
    token_ids: list[int]
    stats: DecodeStats = field(default_factory=DecodeStats)


Event = PrefillProgress | PassDone | BlockCommitted | Finished
