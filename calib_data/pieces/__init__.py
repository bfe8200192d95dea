"""Hand-written content pools and generators for the Clover calibration set (see ../README.md)."""
