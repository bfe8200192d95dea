"""Hub transfer: download checkpoints and packs, upload packs with a generated model card."""

from clover_local.hub.transfer import (
    ALLOW_PATTERNS,
    UploadResult,
    download,
    hub_error,
    is_repo_id,
    resolve_model,
    upload,
)

__all__ = ["ALLOW_PATTERNS", "UploadResult", "download", "hub_error", "is_repo_id", "resolve_model", "upload"]
