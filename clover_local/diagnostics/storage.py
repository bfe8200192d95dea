"""Disk and Hub checks: free space and writability of the clover-local cache and the Hub cache, the Hub token (said
to be set or not, never shown) and offline mode. Nothing here contacts the Hub."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clover_local.diagnostics.common import FAIL, GIB, OK, WARN, Result, fmt_size
from clover_local.paths import nearest_existing

# The 35B model's sizes on disk (tests/test_doctor.py holds PACK_BYTES to what synthetic_index("full") computes).
PACK_BYTES = int(18.6 * GIB)  # the 4-bit pack on disk (≈ 20 GB)
BF16_BYTES = int(64.6 * GIB)  # the BF16 release (≈ 69 GB), what `quantize` starts from


def _token_set() -> tuple[bool, str]:
    """Whether a Hub token is configured and where from, found as the download code finds it (no network).
    The token itself is dropped here, never returned."""
    from clover_local.hub.transfer import token_and_source as found

    token, source = found()
    return bool(token), source


def _folder_facts(path: Path) -> tuple[dict[str, Any], Result | None]:
    """Free space and writability of a folder (or where it will be made); a Result when it cannot be used."""
    base = nearest_existing(path)
    usage = shutil.disk_usage(base)
    facts = {"path": str(path), "exists": path.exists(), "free_bytes": int(usage.free),
             "total_bytes": int(usage.total), "writable": os.access(base, os.W_OK), "device": os.stat(base).st_dev}
    if path.exists() and not path.is_dir():
        return facts, Result(FAIL, f"{path} is not a folder", None, facts)
    if not facts["writable"]:
        return facts, Result(FAIL, f"{base} is not writable: nothing can be saved in {path}", None, facts)
    return facts, None


def check_cache_dir(say: Callable[[str], None]) -> Result:
    from clover_local.paths import cache_root

    root = cache_root()
    facts, bad = _folder_facts(root)
    if bad:
        bad.fix = "set CLOVER_LOCAL_CACHE to a writable folder (on a disk with room)"
        return bad
    made = "" if facts["exists"] else " (not made yet)"
    detail = f"{root}{made}: {fmt_size(facts['free_bytes'])} free"
    if facts["free_bytes"] < PACK_BYTES:
        return Result(WARN, f"{detail}: `bench --synthetic full` and `tune --synthetic full` write a "
                            f"{fmt_size(PACK_BYTES)} pack here", "free space (`clover-local cache` lists what is "
                            "there), or set CLOVER_LOCAL_CACHE to a folder on a larger disk", facts)
    return Result(OK, detail + " (`clover-local cache` lists what is there)", facts=facts)


def check_hub_cache(say: Callable[[str], None]) -> Result:
    from clover_local.commands.cache import hub_cache_dir
    from clover_local.paths import cache_root

    hub = hub_cache_dir()
    facts, bad = _folder_facts(hub)
    if bad:
        bad.fix = "set HF_HUB_CACHE (or HF_HOME) to a writable folder, or download with --dir DIR"
        return bad
    try:
        same = os.stat(nearest_existing(cache_root())).st_dev == facts["device"]
    except OSError:
        same = False
    made = "" if facts["exists"] else " (not made yet)"
    disk = "; the same disk as the clover-local cache" if same else ""
    detail = f"{hub}{made}: {fmt_size(facts['free_bytes'])} free{disk}"
    free = facts["free_bytes"]
    fix = ("free space (models already there need none: `clover-local cache`), or download elsewhere: "
           "clover-local download REPO_ID --dir /a/larger/disk (or set HF_HUB_CACHE)")
    if free < PACK_BYTES:
        return Result(WARN, f"{detail}: not enough for the 35B 4-bit pack ({fmt_size(PACK_BYTES)})", fix, facts)
    if free < BF16_BYTES:
        return Result(WARN, f"{detail}: enough for the 35B 4-bit pack ({fmt_size(PACK_BYTES)}), not for the BF16 "
                            f"release ({fmt_size(BF16_BYTES)}) that `quantize` starts from",
                      fix + "; or quantize without keeping it: `clover-local quantize REPO_ID --out DIR --stream`",
                      facts)
    return Result(OK, f"{detail}: room for the 4-bit pack and the BF16 release", facts=facts)


def check_hf_token(say: Callable[[str], None]) -> Result:
    from clover_local.errors import CloverError
    from clover_local.hub.transfer import check_token_text

    is_set, source = _token_set()
    oidc = bool(os.environ.get("HF_OIDC_RESOURCE"))
    facts = {"set": is_set, "source": source if is_set else None, "oidc": oidc}
    if not is_set:
        if oidc:
            return Result(OK, "no stored token; HF_OIDC_RESOURCE is set: one is exchanged when needed", facts=facts)
        return Result(OK, "no token: public repos only (private repos and `upload` need one: `hf auth login` or "
                          "HF_TOKEN)", facts=facts)
    try:
        check_token_text()
    except CloverError:  # a character no HTTP header can carry: the Hub client would fail on it
        return Result(WARN, f"a token is set (from {source}), but it holds a character a token cannot have (a space "
                            "or an invisible character pasted with it)", "set it again: hf auth login, or HF_TOKEN",
                      facts)
    return Result(OK, f"a token is set (from {source}); it is not shown, and doctor does not contact the Hub",
                  facts=facts)


def check_hf_offline(say: Callable[[str], None]) -> Result:
    from clover_local.hub.transfer import endpoint, offline_mode

    offline, url = offline_mode(), endpoint()
    facts = {"offline": offline, "endpoint": url}
    where = "" if url == "https://huggingface.co" else f"; endpoint {url} (HF_ENDPOINT)"
    if offline:
        return Result(WARN, f"HF_HUB_OFFLINE is on: download, plan and chat of a repo id use the local Hub cache "
                            f"only{where}", "unset HF_HUB_OFFLINE to reach the Hub", facts)
    return Result(OK, f"online mode (HF_HUB_OFFLINE not set){where}", facts=facts)
