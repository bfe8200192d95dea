"""OpenAI-compatible HTTP server: request parsing (protocol), one-at-a-time generation with a bounded queue
(engine), and the stdlib HTTP front (http)."""
