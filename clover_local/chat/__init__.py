"""Chat front ends: the conversation and one assistant turn (shared with serve), the live terminal display."""
