"""Pack format helpers: the manifest (`clover_manifest.json`) and the model card (`README.md`)."""

from clover_local.pack.manifest import (
    CARD_NAME,
    FORMAT,
    FORMAT_VERSION,
    MANIFEST_NAME,
    WEIGHT_SUFFIXES,
    Manifest,
    pack_files,
    sha256_file,
    verify_pack,
)

__all__ = [
    "CARD_NAME",
    "FORMAT",
    "FORMAT_VERSION",
    "MANIFEST_NAME",
    "WEIGHT_SUFFIXES",
    "Manifest",
    "pack_files",
    "sha256_file",
    "verify_pack",
]
